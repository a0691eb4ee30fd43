//! A restart of PostgreSQL mid-stream: the daemon reconnects and the sink ends equal to the
//! table. On a server of the test's own (initdb + pg_ctl, on a free port): the machine's
//! server is in use by every other test meanwhile.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Setup, fold};
use siphon_test_support::PrivatePostgres;

#[tokio::test(flavor = "multi_thread")]
async fn postgres_restart_mid_stream_loses_nothing() {
    let server = PrivatePostgres::start(&[]).unwrap();
    server
        .client("postgres")
        .await
        .unwrap()
        .batch_execute("create database shop")
        .await
        .unwrap();
    let client = server.client("shop").await.unwrap();
    client
        .batch_execute("create table counters (id bigint primary key, n bigint not null); insert into counters select g, 0 from generate_series(1, 50) g;")
        .await
        .unwrap();
    let url = server.url("shop");
    let source = format!(
        "kind = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.counters\"]\nslot = \"counters\"\nstatus_interval = \"200ms\""
    );
    let setup = Setup::with_source(&source, 0, "");
    let d = setup.start();
    // The snapshot first, so that every update below reaches the sink as an update.
    let deadline = Instant::now() + Duration::from_secs(30);
    while setup.output().len() < 50 {
        assert!(Instant::now() < deadline, "no snapshot:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A writer that rides through the restart, reconnecting.
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let writer = {
        let (url, stop, committed) = (url.clone(), stop.clone(), committed.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                tokio::spawn(conn);
                while !stop.load(Ordering::Relaxed) {
                    let sql = format!("update counters set n = n + 1 where id = {}", n % 50 + 1);
                    if client.batch_execute(&sql).await.is_err() {
                        break;
                    }
                    n += 1;
                    committed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
    };
    // Restart once updates are streaming through.
    let deadline = Instant::now() + Duration::from_secs(30);
    while setup.output().iter().filter(|e| e["op"] == "u").count() < 50 {
        assert!(
            Instant::now() < deadline,
            "no update reached the sink:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let server = tokio::task::spawn_blocking(move || server.restart("fast").map(|()| server))
        .await
        .unwrap()
        .unwrap();
    let after_restart = committed.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed.load(Ordering::Relaxed) < after_restart + 100 {
        assert!(
            Instant::now() < deadline,
            "the writer did not get going after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let client = server.client("shop").await.unwrap();
    let want: std::collections::BTreeMap<(String, i64), serde_json::Value> = client
        .query("select id, n from counters", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                ("counters".to_owned(), r.get::<_, i64>(0)),
                serde_json::json!({"id": r.get::<_, i64>(0), "n": r.get::<_, i64>(1)}),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = fold(&setup.output());
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink never matched the table after the restart:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total: i64 = want.values().map(|r| r["n"].as_i64().unwrap()).sum();
    let updates = setup.output().iter().filter(|e| e["op"] == "u").count() as i64;
    assert_eq!(
        updates, total,
        "each committed update reached the sink exactly once"
    );
}
