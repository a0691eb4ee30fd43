//! The daemon with the MySQL/MariaDB source against the real MariaDB: killed with SIGKILL
//! three times while a writer runs, it loses and repeats nothing — the file sink's output
//! folds into the table, row by row, and no binlog change is in it twice — and each restart
//! resumes by GTID.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Setup;
use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};
use siphon_test_support::{MysqlDatabase, mysql};

/// The table's rows as the output encodes them: id → (owner, balance, version).
async fn table(db: &MysqlDatabase) -> BTreeMap<i64, Json> {
    let mut conn = db.conn().await.unwrap();
    let rows: Vec<(i64, String, String, i64)> = conn
        .query("select id, owner, cast(balance as char), version from accounts")
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, owner, balance, version)| (id, json!([owner, balance, version])))
        .collect()
}

/// The output folded the same way.
fn folded(setup: &Setup) -> BTreeMap<i64, Json> {
    common::fold(&setup.output())
        .into_iter()
        .map(|((_, id), row)| (id, json!([row["owner"], row["balance"], row["version"]])))
        .collect()
}

/// Writes small transactions (an update, an insert, now and then a delete) until stopped;
/// returns how many committed.
fn writer(db: &MysqlDatabase, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let url = db.url.clone();
    tokio::spawn(async move {
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let id = 1 + (n * 7919) % 200;
            let sql = format!(
                "start transaction;
                 update accounts set balance = balance + 1.25, version = version + 1 where id = {id};
                 insert into accounts values ({new}, 'owner {new}', {n}.50, 0);
                 {delete}
                 commit;",
                new = 1000 + n,
                delete = if n.is_multiple_of(5) {
                    format!("delete from accounts where id = {};", 1000 + n / 2)
                } else {
                    String::new()
                }
            );
            conn.query_drop(sql).await.unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_while_a_writer_runs_loses_and_repeats_nothing() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table accounts (id bigint primary key, owner varchar(50) not null, \
         balance decimal(14,2) not null, version bigint not null)",
    )
    .await
    .unwrap();
    let values: Vec<String> = (1..=200)
        .map(|i| format!("({i}, 'owner {i}', {i}.00, 0)"))
        .collect();
    conn.query_drop(format!("insert into accounts values {}", values.join(", ")))
        .await
        .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.accounts\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while setup.output().len() < 200 {
        assert!(Instant::now() < deadline, "no snapshot:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(&db, stop.clone());
    let mut seen = setup.output().len();
    for _ in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(60);
        while setup.output().len() < seen + 30 {
            assert!(Instant::now() < deadline, "no progress:\n{}", d.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen = setup.output().len();
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop.store(true, Ordering::Relaxed);
    let written = writing.await.unwrap();
    assert!(written > 30, "the writer wrote only {written} transactions");

    let want = table(&db).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while folded(&setup) != want {
        if Instant::now() > deadline {
            let have = folded(&setup);
            let diffs: Vec<String> = want
                .iter()
                .filter(|(id, row)| have.get(id) != Some(row))
                .map(|(id, row)| format!("{id}: table {row}, output {:?}", have.get(id)))
                .chain(
                    have.keys()
                        .filter(|id| !want.contains_key(id))
                        .map(|id| format!("{id}: only in the output")),
                )
                .take(10)
                .collect();
            panic!(
                "the output differs from the table:\n{}\n{}",
                diffs.join("\n"),
                d.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut places = BTreeSet::new();
    for e in setup.output().iter().filter(|e| e["op"] != "r") {
        let s = &e["source"];
        assert!(
            places.insert((
                s["file"].to_string(),
                s["pos"].to_string(),
                s["row"].to_string()
            )),
            "a change is in the output twice: {e}"
        );
    }
    assert!(
        places.len() as u64 >= written * 2,
        "{} changes for {written} transactions",
        places.len()
    );
    // Each of the three restarts found its place by GTID state, not by file and position.
    let by_gtid = d
        .log()
        .matches("streaming the binlog after this GTID state")
        .count();
    assert!(by_gtid >= 3, "{by_gtid} restarts by GTID:\n{}", d.log());
    drop(d);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_snapshot_takes_the_snapshot_again() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table accounts (id bigint primary key, owner varchar(50) not null,
             balance decimal(14,2) not null, version bigint not null);
         insert into accounts select seq, concat('owner ', seq), seq, 0 from seq_1_to_150000;",
    )
    .await
    .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.accounts\"]",
        db.url, db.server_id, db.name
    );
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    // Kill it while the source is in the middle of the snapshot (its gauges say so).
    let http = reqwest::Client::new();
    let status = format!("http://127.0.0.1:{}/api/pipelines", setup.admin_port);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(resp) = http.get(&status).send().await
            && let Ok(s) = resp.json::<Json>().await
        {
            let gauges = &s[0]["source_metrics"];
            if gauges["snapshot_running"] == 1.0
                && gauges["snapshot_rows"].as_f64().unwrap_or(0.0) >= 4096.0
            {
                break;
            }
            assert!(
                gauges["snapshot_running"] != 0.0,
                "the snapshot finished before the test could interrupt it"
            );
        }
        assert!(Instant::now() < deadline, "no snapshot:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    d.kill_9().unwrap();
    // Row 1 may be in the log already: the second snapshot must take it away again.
    conn.query_drop(
        "update accounts set version = 1 where id <= 10; delete from accounts where id = 1",
    )
    .await
    .unwrap();
    d = setup.start();
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the second snapshot applied",
        |s| {
            s[0]["source_metrics"]["snapshot_running"] == 0.0
                && common::sink(s)["lag_records"] == 0
                && common::sink(s)["next_offset"].as_u64() >= Some(150_000)
        },
    )
    .await;
    let want = table(&db).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while folded(&setup) != want {
        assert!(
            Instant::now() < deadline,
            "the output never matched the table after the second snapshot:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(d);
}

/// A table rebuilt (`ALTER … ALGORITHM=COPY`) after the initial snapshot began, before the
/// snapshot read it: the server refuses the snapshot's transaction that table (error 1412, and
/// again on every retry in it). The snapshot reads the other tables and then the rebuilt one
/// again, incrementally, and the output equals both tables. Before, the source stopped.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_rebuilt_during_the_snapshot_is_snapshotted_again() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table a_big (id bigint primary key, v varchar(100));
         insert into a_big select seq, repeat('a', 100) from seq_1_to_150000;
         create table b_small (id bigint primary key, v int);
         insert into b_small select seq, seq from seq_1_to_100;",
    )
    .await
    .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.*\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let setup = Setup::with_source(&source, 0, "");
    let d = setup.start();
    // While the snapshot reads a_big, b_small is rebuilt.
    common::wait_status(&d, Duration::from_secs(60), "the snapshot reading", |s| {
        s[0]["source_metrics"]["snapshot_rows"].as_f64() > Some(0.0)
    })
    .await;
    conn.query_drop("alter table b_small add column w int, algorithm = copy")
        .await
        .unwrap();
    let done = common::wait_status(&d, Duration::from_secs(60), "the snapshots done", |s| {
        s[0]["source"]["state"] == "failed"
            || s[0]["source_metrics"]["snapshot_running"] == 0.0
                && s[0]["source_metrics"]["incremental_snapshot_tables_left"] == 0.0
                && s[0]["source_metrics"]["incremental_snapshot_rows"].as_f64() >= Some(100.0)
    })
    .await;
    assert_eq!(done[0]["source"]["state"], "running", "{done}\n{}", d.log());
    let position = format!(
        "gtid={}",
        conn.query_first::<String, _>("select @@gtid_binlog_pos")
            .await
            .unwrap()
            .unwrap()
    );
    common::wait_applied(&d, "out", &position, Duration::from_secs(60)).await;
    let folded = common::fold(&setup.output());
    for (table, rows) in [("a_big", 150_000), ("b_small", 100)] {
        let have = folded.keys().filter(|(t, _)| t == table).count();
        assert_eq!(have, rows, "{table} in the output");
    }
    assert!(
        folded
            .iter()
            .filter(|((t, _), _)| t == "b_small")
            .all(|(_, row)| row.get("w").is_some()),
        "b_small read again in its new shape"
    );
}
