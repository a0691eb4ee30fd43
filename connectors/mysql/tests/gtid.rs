//! Resuming by GTID (MariaDB's `@slave_connect_state`): a source stopped and restarted after
//! the server dropped the binlog file its position is in still streams every change, because
//! the server finds the place by GTID; and where the server dropped changes the source had not
//! read, it refuses with the GTID state named.
//!
//! On a MariaDB of its own: it purges the server's binlog files, which every other test on the
//! shared server reads.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use siphon_core::Value;
use siphon_core::event::SnapshotMarker;
use siphon_core::log::ChangeLog;
use siphon_source_mysql::MysqlPosition;
use siphon_test_support::{MysqlDatabase, PrivateMariadb, mysql_at};

use crate::harness;
use harness::{Harness, fold};

/// A database on a MariaDB of the test's own: the tests rotate and purge its binary logs,
/// which on the shared server would pull the binlog from under every other test reading it.
async fn private_database() -> (PrivateMariadb, MysqlDatabase) {
    let server = PrivateMariadb::start().unwrap();
    let db = mysql_at(&server.url()).await.unwrap();
    (server, db)
}

/// Closes the current binlog file; returns the new one's name.
async fn rotate(conn: &mut mysql_async::Conn) -> String {
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let mut status: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap();
    status.take(0).unwrap()
}

/// Closes the current binlog file and drops every earlier one.
async fn rotate_and_purge(conn: &mut mysql_async::Conn) -> String {
    let current = rotate(conn).await;
    purge_to(conn, &current).await;
    current
}

/// Drops every binlog file before `current`.
async fn purge_to(conn: &mut mysql_async::Conn, current: &str) {
    // The server keeps a file until its transactions are durable in the engine (its binlog
    // checkpoint moves on), so the purge is repeated until it took.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current}'"))
            .await
            .unwrap();
        let files: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.unwrap();
        let oldest: Option<String> = files.into_iter().next().and_then(|mut r| r.take(0));
        if oldest.as_deref() == Some(current) {
            return;
        }
        assert!(Instant::now() < deadline, "the server kept {oldest:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_finds_its_place_by_gtid_after_the_binlog_file_is_purged() {
    let (_server, db) = private_database().await;
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table g (id int primary key, note varchar(20))")
        .await
        .unwrap();
    conn.query_drop("insert into g select seq, 'snapshot' from seq_1_to_10")
        .await
        .unwrap();
    let mut h = Harness::new(&db, "gtid");
    h.config.tables = vec![format!("{}.g", db.name).parse().unwrap()];

    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    for k in 11..=20 {
        conn.query_drop(format!("insert into g values ({k}, 'streamed')"))
            .await
            .unwrap();
    }
    // Transactions of a table not captured, which the log does not hold.
    conn.query_drop("create table other (id int)")
        .await
        .unwrap();
    conn.query_drop("insert into other values (1)")
        .await
        .unwrap();
    h.wait_for_ids("streamed", &(1..=20).collect()).await;
    let last = h.events().last().map(|e| e.source.position.clone());
    let file_before = match last.as_ref().and_then(|p| p.get::<MysqlPosition>()) {
        Some(MysqlPosition { file, .. }) => file.clone(),
        None => panic!("no streamed position: {last:?}"),
    };
    cancel.cancel();
    run.await.unwrap().unwrap();

    // A new binlog file; the source reads into it and stops there, its GTID state saved at the
    // stop past the file's start. (Stopped before the rotation, its state could miss
    // transactions of other databases on the server, which a purge would then drop unread:
    // the source would refuse, rightly.)
    conn.query_drop("insert into other values (2)")
        .await
        .unwrap();
    let current = rotate(&mut conn).await;
    assert_ne!(current, file_before);
    let (run, cancel) = h.start();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    // The file the source stopped reading in is gone; nothing after its place is.
    purge_to(&mut conn, &current).await;
    conn.query_drop("start transaction").await.unwrap();
    for k in 21..=30 {
        conn.query_drop(format!("insert into g values ({k}, 'after the purge')"))
            .await
            .unwrap();
    }
    conn.query_drop("update g set note = 'changed' where id <= 5")
        .await
        .unwrap();
    conn.query_drop("commit").await.unwrap();

    let (run, cancel) = h.start();
    h.wait_for_ids("after the purge", &(1..=30).collect()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let folded = fold(&h.events());
        let changed = (1..=5).all(|k| {
            folded.get(&k).and_then(|r| r.get("note")) == Some(&Value::Text("changed".into()))
        });
        if changed {
            break;
        }
        assert!(Instant::now() < deadline, "the update never arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();
    let streamed: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| e.source.snapshot == SnapshotMarker::False)
        .map(|e| {
            let Some(MysqlPosition { gtid, row, .. }) = e.source.position.get::<MysqlPosition>()
            else {
                panic!("not a MySQL position");
            };
            (gtid.clone().expect("a GTID on MariaDB"), *row)
        })
        .collect();
    assert_eq!(streamed.len(), 10 + 10 + 5, "each change once");
    assert_eq!(
        streamed.iter().collect::<BTreeSet<_>>().len(),
        streamed.len(),
        "no (GTID, row) twice"
    );

    // Changes the source never read, purged: a clear refusal, naming the GTID state.
    conn.query_drop("insert into g values (31, 'lost')")
        .await
        .unwrap();
    rotate_and_purge(&mut conn).await;
    let before = h.log.durable_end();
    let (run, _cancel) = h.start();
    let err = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the source neither failed nor stopped")
        .unwrap()
        .expect_err("a source whose changes were purged must not start");
    let message = err.to_string();
    assert!(!err.is_transient(), "{message}");
    assert!(
        message.contains("GTID state") && message.contains("when_needed"),
        "{message}"
    );
    assert_eq!(h.log.durable_end(), before, "nothing appended");
}
