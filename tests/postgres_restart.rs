//! A restart of PostgreSQL mid-stream: the daemon reconnects and the sink ends equal to the
//! table. Its own test binary, so that no other test is using the server while it restarts
//! (cargo runs test binaries one after the other).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Setup, fold};
use siphon_test_support::postgres;

fn restart_postgres() {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect(
            "/etc/postgresql: this test restarts the machine's PostgreSQL (Debian's pg_ctlcluster)",
        )
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .max()
        .expect("a PostgreSQL cluster");
    let status = std::process::Command::new("pg_ctlcluster")
        .args([
            "--skip-systemctl-redirect",
            &version,
            "main",
            "restart",
            "-m",
            "fast",
        ])
        .status()
        .expect("pg_ctlcluster (run the tests as root, as scripts/test does)");
    assert!(status.success(), "restarting PostgreSQL failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_restart_mid_stream_loses_nothing() {
    let db = postgres().await.unwrap();
    db.execute("create table counters (id bigint primary key, n bigint not null); insert into counters select g, 0 from generate_series(1, 50) g;").await.unwrap();
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.counters\"]\nslot = \"{}_slot\"\nstatus_interval = \"200ms\"",
        db.url, db.name
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
        let (url, stop, committed) = (db.url.clone(), stop.clone(), committed.clone());
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
    restart_postgres();
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

    let client = db.client().await.unwrap();
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
