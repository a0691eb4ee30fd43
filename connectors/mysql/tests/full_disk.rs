//! The change log's disk fills up in the middle of a large transaction: the append of its
//! first part fails, the source stops with the error and is run again (as the runtime does)
//! once space is freed. Nothing of the transaction may be lost — the GTID state the source
//! saved before the failed append must not count it — and the log must take the records
//! again at the offsets that failed, with no torn bytes between them.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use siphon_core::Value;
use siphon_core::event::SnapshotMarker;
use siphon_core::log::ChangeLog;
use siphon_source_mysql::MysqlPosition;
use siphon_test_support::{SmallDisk, mysql};

use crate::harness;
use harness::Harness;

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_mid_transaction_loses_nothing_and_tears_nothing() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table big (id int primary key, note varchar(200));
         insert into big values (0, 'before');",
    )
    .await
    .unwrap();
    let disk = SmallDisk::new(8 << 20).unwrap();
    let mut h = Harness::with_log_dir(
        &db,
        "full",
        tempfile::tempdir().unwrap(),
        &disk.path().join("log"),
    );
    h.config.tables = vec![format!("{}.big", db.name).parse().unwrap()];
    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    // One streamed transaction, so that the log's last event carries a GTID to resume by.
    conn.query_drop("update big set note = 'streamed' where id = 0")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.log.durable_end() < 2 {
        assert!(
            Instant::now() < deadline,
            "the update never reached the log"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = h.log.durable_end();

    // Room for the checkpoint, none for the first part of 4,096 rows of 200 bytes.
    disk.fill_leaving(64 << 10).unwrap();
    conn.query_drop("insert into big select seq, repeat('x', 200) from seq_1_to_20000")
        .await
        .unwrap();
    // The source fails on the append (and retries while the disk is full, or stops).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !run.is_finished() && h.retries.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "the source went on with a full disk"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let _ = run.await.unwrap();
    disk.free_up().unwrap();

    let (run, cancel) = h.start();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (0, Instant::now());
    while h.log.durable_end() < before + 20_000 {
        let end = h.log.durable_end();
        if end != last.0 {
            last = (end, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(30) && Instant::now() < deadline,
            "the log holds {} records after the full disk, the transaction 20000",
            end - before
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();

    // Every offset from 0, in order, and each row of the transaction once.
    let events = h.events();
    assert_eq!(
        events.len() as u64,
        h.log.durable_end(),
        "the log reads back fewer records than its offsets say"
    );
    let ids: Vec<i64> = events
        .iter()
        .filter(|e| e.source.snapshot == SnapshotMarker::False)
        .filter(|e| {
            e.source.position.get::<MysqlPosition>().is_some()
                && e.after.as_ref().and_then(|r| r.get("id")) != Some(&Value::Int(0))
        })
        .map(|e| match e.after.as_ref().and_then(|r| r.get("id")) {
            Some(Value::Int(i)) => *i,
            other => panic!("no id: {other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        (1..=20_000).collect::<Vec<_>>(),
        "each row once, in order"
    );
}
