//! Tables created later: with `tables = ["public.*"]`, a table created while the daemon runs
//! and another created while it is down, each with rows written before siphon sees it, are
//! complete in the output (the file sink's, folded) — added to the publication and
//! snapshotted incrementally — and their later changes stream as usual. On MariaDB a table's
//! earlier rows are in no binlog event siphon reads when it was renamed into a captured
//! database (or the patterns widened): such tables, one while running and one while down,
//! are complete as well.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Setup;
use common::db::SourceDb;
use siphon_test_support::{mysql, postgres};

/// `table`'s rows (id → v) in the database and in the output.
async fn both(
    db: &SourceDb,
    setup: &Setup,
    table: &str,
) -> (BTreeMap<i64, String>, BTreeMap<i64, String>) {
    let want = db.rows(table).await;
    let have = common::fold(&setup.output())
        .into_iter()
        .filter(|((t, _), _)| t == table)
        .map(|((_, id), row)| (id, row["v"].as_str().unwrap_or_default().to_owned()))
        .collect();
    (want, have)
}

/// Waits until the output holds `table` as the database does; fails once the output has
/// not grown for 60 s.
async fn wait_complete(db: &SourceDb, setup: &Setup, d: &siphon_test_support::Daemon, table: &str) {
    let mut moved = (0, Instant::now());
    loop {
        let (want, have) = both(db, setup, table).await;
        if want == have {
            return;
        }
        let output = setup.output().len();
        if output != moved.0 {
            moved = (output, Instant::now());
        }
        assert!(
            moved.1.elapsed() < Duration::from_secs(60),
            "{table}: the table has {} rows, the output {}\n{}",
            want.len(),
            have.len(),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tables_created_while_running_or_down_are_complete() {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(
            "create table a (id bigint primary key, v text not null);
             insert into a select g, 'a' || g from generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    let slot = format!("{}_slot", db.name);
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.*\"]\nslot = \"{slot}\"\ntable_poll_interval = \"300ms\"\nstatus_interval = \"500ms\"",
        db.url
    );
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    let db = SourceDb::Postgres(db);
    wait_complete(&db, &setup, &d, "a").await;

    // Created while the daemon runs, its rows written at once.
    client
        .batch_execute(
            "create table b (id bigint primary key, v text not null);
             insert into b select g, 'b' || g from generate_series(1, 5000) g;",
        )
        .await
        .unwrap();
    client
        .batch_execute("update b set v = 'changed' where id <= 100; delete from b where id > 4900")
        .await
        .unwrap();
    wait_complete(&db, &setup, &d, "b").await;

    // Created while it is down.
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );
    client
        .batch_execute(
            "create table c (id bigint primary key, v text not null);
             insert into c select g, 'c' || g from generate_series(1, 3000) g;",
        )
        .await
        .unwrap();
    d = setup.start();
    client
        .batch_execute(
            "update c set v = 'changed' where id <= 10; insert into a values (11, 'a11')",
        )
        .await
        .unwrap();
    for table in ["a", "b", "c"] {
        wait_complete(&db, &setup, &d, table).await;
    }
    // A table without a primary key cannot be read in chunks: refused, with the reason.
    client
        .batch_execute("create table nokey (v int)")
        .await
        .unwrap();
    let out = setup.cli(&["snapshot", "demo", "public.nokey"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("public.nokey has no primary key"),
        "{stderr}"
    );
    drop(d);
    if let SourceDb::Postgres(db) = db {
        db.drop_slot(&slot).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_tables_renamed_in_while_running_or_down_are_complete() {
    let db = mysql().await.unwrap();
    let outside = mysql().await.unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.*\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let (name, outside_name) = (db.name.clone(), outside.name.clone());
    let (db, outside) = (SourceDb::Mariadb(db), SourceDb::Mariadb(outside));
    db.execute(
        "create table a (id bigint primary key, v text not null);
         insert into a select seq, concat('a', seq) from seq_1_to_10;",
    )
    .await;
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    wait_complete(&db, &setup, &d, "a").await;

    // Filled in a database siphon does not capture, then renamed into the captured one
    // while the daemon runs.
    let fill_and_rename_in = async |table: &str, rows: u32| {
        outside
            .execute(&format!(
                "create table {table} (id bigint primary key, v text not null);
                 insert into {table} select seq, concat('{table}', seq) from seq_1_to_{rows};
                 rename table {outside_name}.{table} to {name}.{table};"
            ))
            .await;
    };
    fill_and_rename_in("b", 5000).await;
    db.execute("update b set v = 'changed' where id <= 100; delete from b where id > 4900;")
        .await;
    wait_complete(&db, &setup, &d, "b").await;

    // Created in the captured database, its rows are all in the binlog: not read again.
    db.execute(
        "create table d (id bigint primary key, v text not null);
         insert into d select seq, concat('d', seq) from seq_1_to_500;",
    )
    .await;
    wait_complete(&db, &setup, &d, "d").await;
    let reread = setup
        .output()
        .iter()
        .filter(|e| e["source"]["table"] == "d" && e["op"] == "r")
        .count();
    assert_eq!(reread, 0, "a table created in the binlog was snapshotted");

    // The same while it is down.
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );
    fill_and_rename_in("c", 3000).await;
    d = setup.start();
    db.execute("update c set v = 'changed' where id <= 10; insert into a values (11, 'a11');")
        .await;
    for table in ["a", "b", "c", "d"] {
        wait_complete(&db, &setup, &d, table).await;
    }
}

/// A table created while the daemon is down joins the publication at the next start, and
/// that start then fails (the slot is held by another client): the start after it still
/// snapshots the table. Before, the request was saved only after the slot was reached, so the
/// retry found the table already published and its earlier rows never arrived.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_after_a_new_table_joins_the_publication_loses_no_rows() {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(
            "create table a (id bigint primary key, v text not null);
             insert into a select g, 'a' || g from generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    let slot = format!("{}_slot", db.name);
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.*\"]\nslot = \"{slot}\"\nstatus_interval = \"500ms\"",
        db.url
    );
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    let source_db = SourceDb::Postgres(db);
    wait_complete(&source_db, &setup, &d, "a").await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );
    client
        .batch_execute(
            "create table b (id bigint primary key, v text not null);
             insert into b select g, 'b' || g from generate_series(1, 300) g;",
        )
        .await
        .unwrap();
    let SourceDb::Postgres(db) = &source_db else {
        unreachable!()
    };

    // Another client holds the slot: the start adds b to the publication, then fails to
    // stream (and retries) until it lets go.
    let holder = std::process::Command::new("/usr/lib/postgresql/15/bin/pg_recvlogical")
        .args(["-d", &db.url, "--slot", &slot, "--start", "-f", "/dev/null"])
        .args([
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=siphon_demo",
        ])
        .spawn()
        .expect("pg_recvlogical (package postgresql)");
    let mut holder = Guard(holder);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let active: bool = client
            .query_one(
                "select active from pg_replication_slots where slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        if active {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pg_recvlogical never took the slot"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d = setup.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d.log().contains("is active for PID") {
        assert!(
            Instant::now() < deadline,
            "the start did not fail on the held slot:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let published: bool = client
        .query_one(
            "select exists (select 1 from pg_publication_tables where pubname = 'siphon_demo' and tablename = 'b')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        published,
        "the failed start had not added b to the publication yet"
    );
    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    // Restarted as a user would after the failure, or retried by the daemon itself.
    drop(d);
    d = setup.start();
    for table in ["a", "b"] {
        wait_complete(&source_db, &setup, &d, table).await;
    }
    drop(d);
    db.drop_slot(&slot).await.unwrap();
}

/// Kills a child process when dropped.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
