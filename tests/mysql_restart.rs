//! A restart of MariaDB mid-stream: the daemon reconnects and resumes where it was, and each
//! committed change reaches the sink exactly once. On a server of the test's own
//! (mariadb-install-db + mariadbd, on a free port): the machine's server is in use by every
//! other test meanwhile.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Setup, fold};
use mysql_async::prelude::Queryable;
use siphon_test_support::PrivateMariadb;

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_restart_mid_stream_loses_and_repeats_nothing() {
    let mut server = PrivateMariadb::start().unwrap();
    let mut conn = server.conn(None).await.unwrap();
    conn.query_drop(
        "create database shop; use shop;
         create table counters (id bigint primary key, n bigint not null);
         insert into counters select seq, 0 from seq_1_to_50;",
    )
    .await
    .unwrap();
    drop(conn);
    let url = format!("{}/shop", server.url());
    let source = format!(
        "kind = \"mysql\"\nurl = \"{url}\"\ntables = [\"shop.counters\"]\nheartbeat_interval = \"500ms\""
    );
    let setup = Setup::with_source(&source, 0, "");
    let d = setup.start();
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
                let Ok(mut conn) =
                    mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await
                else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                while !stop.load(Ordering::Relaxed) {
                    let sql = format!("update counters set n = n + 1 where id = {}", n % 50 + 1);
                    if conn.query_drop(sql).await.is_err() {
                        break;
                    }
                    n += 1;
                    committed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while setup.output().iter().filter(|e| e["op"] == "u").count() < 50 {
        assert!(
            Instant::now() < deadline,
            "no update reached the sink:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let server = tokio::task::spawn_blocking(move || server.restart().map(|()| server))
        .await
        .unwrap()
        .unwrap();
    let after_restart = committed.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed.load(Ordering::Relaxed) < after_restart + 100 {
        assert!(
            Instant::now() < deadline,
            "the writer did not get going after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let mut conn = server.conn(Some("shop")).await.unwrap();
    let rows: Vec<(i64, i64)> = conn.query("select id, n from counters").await.unwrap();
    let want: std::collections::BTreeMap<(String, i64), serde_json::Value> = rows
        .iter()
        .map(|(id, n)| {
            (
                ("counters".to_owned(), *id),
                serde_json::json!({"id": id, "n": n}),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while fold(&setup.output()) != want {
        assert!(
            Instant::now() < deadline,
            "the sink never matched the table after the restart:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total: i64 = rows.iter().map(|(_, n)| n).sum();
    let updates = setup.output().iter().filter(|e| e["op"] == "u").count() as i64;
    assert_eq!(
        updates, total,
        "each committed update reached the sink exactly once"
    );
    assert!(
        d.log().contains("retrying"),
        "the source never noticed the restart:\n{}",
        d.log()
    );
}
