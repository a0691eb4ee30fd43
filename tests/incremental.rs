//! An incremental snapshot through the daemon, for each source: a 100,000-row table that the
//! pipeline never snapshotted (`snapshot = "never"`) is read again with `siphon snapshot`
//! while a writer updates, deletes and inserts rows in it, and the daemon is killed with
//! SIGKILL twice midway. Afterwards the file sink's output, Redis and the PostgreSQL mirror
//! each equal the table, row by row, and no `r` event went back in time: each one carries what
//! the stream had last said of its row (never a row the stream had deleted).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;
use common::db::SourceDb;
use serde_json::Value as Json;
use siphon_test_support::{postgres, redis};

const ROWS: i64 = 100_000;

fn source_gauge(status: &Json, name: &str) -> f64 {
    status[0]["source_metrics"][name].as_f64().unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_incremental_snapshot_under_writes_and_kill_9_matches_the_table() {
    let (db, source, slot) = postgres_items(&format!(
        "create table items (id bigint primary key, v bigint not null);
         insert into items select g, 0 from generate_series(1, {ROWS}) g;"
    ))
    .await;
    under_writes_and_kill_9(&db, &source, "public.items", "public.items").await;
    drop_slot(db, &slot).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mariadb_incremental_snapshot_under_writes_and_kill_9_matches_the_table() {
    let (db, source, table) = mariadb_items(
        &format!(
            "create table items (id bigint primary key, v bigint not null);
             insert into items select seq, 0 from seq_1_to_{ROWS};"
        ),
        "",
    )
    .await;
    let (database, _) = table.split_once('.').unwrap();
    let mirrored = format!("\"{database}\".items");
    under_writes_and_kill_9(&db, &source, &table, &mirrored).await;
}

/// A PostgreSQL test database with `items` made by `sql`, the source of a pipeline over it
/// that never snapshots, and its slot.
async fn postgres_items(sql: &str) -> (SourceDb, String, String) {
    let db = postgres().await.unwrap();
    let slot = format!("{}_slot", db.name);
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.items\"]\nslot = \"{slot}\"\nsnapshot = \"never\"\nstatus_interval = \"500ms\"",
        db.url
    );
    let db = SourceDb::Postgres(db);
    db.execute(sql).await;
    (db, source, slot)
}

async fn drop_slot(db: SourceDb, slot: &str) {
    if let SourceDb::Postgres(db) = db {
        db.drop_slot(slot).await.unwrap();
    }
}

/// A MariaDB test database with `items` made by `sql`, the source of a pipeline over it that
/// never snapshots (`extra` appended to it), and the table as the source names it.
async fn mariadb_items(sql: &str, extra: &str) -> (SourceDb, String, String) {
    let db = siphon_test_support::mysql().await.unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.items\"]\nsnapshot = \"never\"\nheartbeat_interval = \"500ms\"\n{extra}",
        db.url, db.server_id, db.name
    );
    let table = format!("{}.items", db.name);
    let db = SourceDb::Mariadb(db);
    db.execute(sql).await;
    (db, source, table)
}

/// The run: `table` as the source names it, `mirrored` as the PostgreSQL mirror does.
async fn under_writes_and_kill_9(db: &SourceDb, source: &str, table: &str, mirrored: &str) {
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let sinks = format!(
        "[pipelines.demo.sinks.cache]\nkind = \"redis\"\nurl = \"{}\"\nprefix = \"{}\"\n\n\
         [pipelines.demo.sinks.mirror]\nkind = \"postgres\"\nurl = \"{}\"\n",
        cache.url, cache.prefix, target.url
    );
    let setup = Setup::with_source(source, 0, &sinks);
    let mut d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "streaming", |s| {
        s[0]["source"]["state"] == "running"
    })
    .await;

    // The writer: updates, deletes, inserts of new ids, until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut session = db.session().await;
        tokio::spawn(async move {
            let mut n: i64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = 1 + (n * 7919) % ROWS;
                let sql = match n % 10 {
                    0 => format!("delete from items where id = {id}"),
                    5 => format!("insert into items values ({}, {n})", ROWS + n),
                    _ => format!("update items set v = {n} where id = {id}"),
                };
                session.execute(&sql).await;
            }
            n
        })
    };

    let out = setup.cli(&["snapshot", "demo", table]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for at in [20_000.0, 55_000.0] {
        let status = common::wait_status(&d, Duration::from_secs(180), "snapshot progress", |s| {
            source_gauge(s, "incremental_snapshot_rows") >= at
        })
        .await;
        d.kill_9().unwrap();
        assert_eq!(
            source_gauge(&status, "incremental_snapshot_tables_left"),
            1.0,
            "killed after the snapshot ended: the test missed its moment"
        );
        d = setup.start();
    }
    // Paused, it reads no chunk (one read before the pause may still close), also after a
    // restart; resumed and followed (`--follow`) to its end.
    let cli = |args: &[&str]| {
        let out = setup.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    cli(&["snapshot", "demo", "--pause"]);
    let rows_now = async |d: &siphon_test_support::Daemon| {
        let status = common::wait_status(d, Duration::from_secs(60), "paused", |s| {
            source_gauge(s, "incremental_snapshot_paused") == 1.0
        })
        .await;
        source_gauge(&status, "incremental_snapshot_rows")
    };
    // A chunk read before the pause may still close: the count settles first.
    let mut paused_at = rows_now(&d).await;
    loop {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let now = rows_now(&d).await;
        if now == paused_at {
            break;
        }
        paused_at = now;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rows_now(&d).await, paused_at, "a paused snapshot read on");
    d.kill_9().unwrap();
    d = setup.start();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        rows_now(&d).await,
        paused_at,
        "the pause did not survive a restart"
    );
    assert!(paused_at < ROWS as f64, "paused after the end");
    cli(&["snapshot", "demo", "--resume"]);
    let followed = cli(&["snapshot", "demo", table, "--follow"]);
    assert!(followed.contains(": done, "), "{followed}");
    let status = common::wait_status(&d, Duration::from_secs(300), "the snapshot done", |s| {
        source_gauge(s, "incremental_snapshot_tables_left") == 0.0
            && source_gauge(s, "incremental_snapshot_rows") > (ROWS * 3 / 4) as f64
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes > 500, "the writer wrote only {writes} transactions");

    // Everything committed is applied: waited for through the read-your-writes endpoint.
    let position = db.position().await;
    for sink in ["out", "cache", "mirror"] {
        common::wait_applied(&d, sink, &position, Duration::from_secs(60)).await;
    }
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    let want: BTreeMap<i64, i64> = db
        .rows("items")
        .await
        .into_iter()
        .map(|(id, v)| (id, v.parse().unwrap()))
        .collect();
    let output = setup.output();
    let folded: BTreeMap<i64, i64> = common::fold(&output)
        .into_iter()
        .map(|((_, id), row)| (id, row["v"].as_i64().unwrap()))
        .collect();
    let mirrored: BTreeMap<i64, i64> = target
        .client()
        .await
        .unwrap()
        .query(&format!("select id, v from {mirrored}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut conn = cache.conn().await.unwrap();
    // SCAN, not KEYS: one KEYS over 200,000 keys can outlast the connection's response
    // timeout on a loaded machine.
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}items:*", cache.prefix))
            .arg("COUNT")
            .arg(5000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut cached = BTreeMap::new();
    for batch in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in batch {
            pipe.cmd("HGET").arg(key).arg("v");
        }
        let values: Vec<String> = pipe.query_async(&mut conn).await.unwrap();
        for (key, v) in batch.iter().zip(values) {
            let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
            cached.insert(id, v.parse::<i64>().unwrap());
        }
    }
    for (store, have) in [
        ("output", &folded),
        ("Redis", &cached),
        ("mirror", &mirrored),
    ] {
        let differ: Vec<String> = want
            .iter()
            .filter(|(id, v)| have.get(id) != Some(v))
            .map(|(id, v)| format!("{id}: table {v}, {store} {:?}", have.get(id)))
            .chain(
                have.keys()
                    .filter(|id| !want.contains_key(id))
                    .map(|id| format!("{id}: only in the {store}")),
            )
            .take(10)
            .collect();
        assert!(
            differ.is_empty(),
            "the {store} differs from the table:\n{}",
            differ.join("\n")
        );
    }

    // No `r` event went back in time.
    let mut streamed: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    let mut reads: i64 = 0;
    for e in &output {
        match (e["op"].as_str().unwrap(), e["source"]["snapshot"].as_str()) {
            ("r", Some("incremental")) => {
                reads += 1;
                let id = e["after"]["id"].as_i64().unwrap();
                let v = e["after"]["v"].as_i64().unwrap();
                if let Some(last) = streamed.get(&id) {
                    assert_eq!(
                        *last,
                        Some(v),
                        "row {id}: an r event says v = {v} after the stream said {last:?}"
                    );
                }
            }
            ("d", _) => {
                streamed.insert(e["before"]["id"].as_i64().unwrap(), None);
            }
            _ => {
                let after = &e["after"];
                streamed.insert(after["id"].as_i64().unwrap(), after["v"].as_i64());
            }
        }
    }
    // Every row once, but for the two chunks the kills interrupted (read again): the snapshot
    // went on from its last finished chunk, not from the beginning.
    assert!(
        (ROWS * 3 / 4..=ROWS + writes / 10 + 2 * 4096).contains(&reads),
        "{reads} r events; status: {status}"
    );

    // Stopped, the tables left are forgotten.
    let mut d = setup.start();
    let before = source_gauge(
        &common::wait_status(&d, Duration::from_secs(60), "streaming", |s| {
            source_gauge(s, "incremental_snapshot_rows") >= 0.0
        })
        .await,
        "incremental_snapshot_rows",
    );
    cli(&["snapshot", "demo", table]);
    cli(&["snapshot", "demo", "--stop"]);
    let stopped = common::wait_status(&d, Duration::from_secs(60), "stopped", |s| {
        source_gauge(s, "incremental_snapshot_tables_left") == 0.0
            && source_gauge(s, "incremental_snapshot_requests_done")
                == source_gauge(s, "incremental_snapshot_requests")
    })
    .await;
    let read = source_gauge(&stopped, "incremental_snapshot_rows") - before;
    assert!(
        read < ROWS as f64 / 2.0,
        "{read} rows read after the stop was asked"
    );
    d.signal("TERM").unwrap();
    assert!(d.wait(Duration::from_secs(30)).unwrap().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_column_dropped_mid_snapshot_is_followed() {
    let (db, source, slot) = postgres_items(
        "create table items (id bigint primary key, v bigint not null, extra text);
         insert into items select g, g, 'x' from generate_series(1, 150000) g;",
    )
    .await;
    column_dropped_mid_snapshot(&db, &source, "public.items").await;
    drop_slot(db, &slot).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mariadb_column_dropped_mid_snapshot_is_followed() {
    let (db, source, table) = mariadb_items(
        "create table items (id bigint primary key, v bigint not null, extra text);
         insert into items select seq, seq, 'x' from seq_1_to_150000;",
        "",
    )
    .await;
    column_dropped_mid_snapshot(&db, &source, &table).await;
}

/// A column of the table is dropped while its incremental snapshot is paused midway (its
/// reader made with the column): the snapshot goes on in the new shape, and the output equals
/// the table. Before, the next chunk's SELECT named the dropped column and stopped the source.
async fn column_dropped_mid_snapshot(db: &SourceDb, source: &str, table: &str) {
    let setup = Setup::with_source(source, 0, "");
    let d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "streaming", |s| {
        source_gauge(s, "incremental_snapshot_rows") >= 0.0
    })
    .await;
    let cli = |args: &[&str]| {
        let out = setup.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cli(&["snapshot", "demo", table]);
    common::wait_status(&d, Duration::from_secs(60), "the first chunk", |s| {
        source_gauge(s, "incremental_snapshot_rows") > 0.0
    })
    .await;
    cli(&["snapshot", "demo", "--pause"]);
    let paused = common::wait_status(&d, Duration::from_secs(60), "paused", |s| {
        source_gauge(s, "incremental_snapshot_paused") == 1.0
    })
    .await;
    assert_eq!(
        source_gauge(&paused, "incremental_snapshot_tables_left"),
        1.0,
        "the snapshot ended before the pause: the test missed its moment"
    );
    db.execute("alter table items drop column extra").await;
    cli(&["snapshot", "demo", "--resume"]);
    let done = common::wait_status(&d, Duration::from_secs(120), "the snapshot done", |s| {
        source_gauge(s, "incremental_snapshot_tables_left") == 0.0
            && source_gauge(s, "incremental_snapshot_paused") == 0.0
            || s[0]["source"]["state"] == "failed"
    })
    .await;
    assert_eq!(done[0]["source"]["state"], "running", "{done}");
    let position = db.position().await;
    common::wait_applied(&d, "out", &position, Duration::from_secs(60)).await;
    let want = db.rows("items").await;
    let folded: BTreeMap<i64, String> = common::fold(&setup.output())
        .into_iter()
        .map(|((_, id), row)| (id, row["v"].to_string()))
        .collect();
    let differ: Vec<String> = want
        .iter()
        .filter(|(id, v)| folded.get(id) != Some(v))
        .map(|(id, v)| format!("{id}: table {v}, output {:?}", folded.get(id)))
        .take(5)
        .collect();
    assert!(
        differ.is_empty() && folded.len() == want.len(),
        "the output ({} rows) differs from the table ({}):\n{}",
        folded.len(),
        want.len(),
        differ.join("\n")
    );
}

/// A delete whose commit record is in the WAL but which is not yet visible to queries (its
/// session waits for a synchronous standby that never answers) when an incremental snapshot
/// of its table starts: the stream carries the delete before the low watermark, so the chunk
/// must not bring the deleted row back (before, it did: the chunk's read could not see the
/// delete). On a private cluster: `synchronous_standby_names` is server-wide.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_commit_not_yet_visible_at_the_low_watermark_is_not_undone() {
    let server = siphon_test_support::PrivatePostgres::start(&[]).unwrap();
    let admin = server.client("postgres").await.unwrap();
    admin.batch_execute("create database shop").await.unwrap();
    let client = server.client("shop").await.unwrap();
    client
        .batch_execute(
            "create table items (id bigint primary key, v text not null);
             insert into items select g, 'v' || g from generate_series(1, 100) g;",
        )
        .await
        .unwrap();
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.items\"]\nslot = \"s\"\nsnapshot = \"never\"\nstatus_interval = \"500ms\"",
        server.url("shop")
    );
    let setup = Setup::with_source(&source, 0, "");
    let mut d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "streaming", |s| {
        s[0]["source"]["state"] == "running"
    })
    .await;

    // From now on a commit that asks for it waits for the standby "ghost"; siphon's own
    // statements write no transaction id, so they never wait.
    for sql in [
        "alter system set synchronous_standby_names = 'ghost'",
        "select pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    let deleter = server.client("shop").await.unwrap();
    let pid: i32 = deleter
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // A backend reads a reloaded setting between two commands once the postmaster's signal
    // has reached it: the delete's session must see the standby before it deletes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let standby: String = deleter
            .query_one("select current_setting('synchronous_standby_names')", &[])
            .await
            .unwrap()
            .get(0);
        if standby == "ghost" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the delete's session never saw synchronous_standby_names = 'ghost'"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delete = tokio::spawn(async move {
        deleter
            .batch_execute("set synchronous_commit = on; delete from items where id = 50")
            .await
    });
    // Committed locally, waiting for the standby.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: Option<String> = client
            .query_opt(
                "select wait_event from pg_stat_activity where pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .expect("the delete's session ended: it committed without waiting for the standby")
            .get(0);
        if waiting.as_deref() == Some("SyncRep") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the delete never waited for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The stream carries the delete; then the daemon starts again, so that it knows of the
    // delete's commit only from the server.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !setup
        .output()
        .iter()
        .any(|e| e["op"] == "d" && e["before"]["id"] == 50)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the delete was never streamed:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.kill_9().unwrap();
    let d = setup.start();
    let out = setup.cli(&["snapshot", "demo", "public.items"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No chunk is read while the delete is not visible: released once the source waits.
    common::wait_status(&d, Duration::from_secs(60), "the snapshot waiting", |s| {
        source_gauge(s, "incremental_snapshot_waiting_transactions") >= 1.0
    })
    .await;
    admin
        .query("select pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap();
    let _ = delete.await.unwrap();
    for sql in [
        "alter system reset synchronous_standby_names",
        "select pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    common::wait_status(&d, Duration::from_secs(60), "the snapshot done", |s| {
        source_gauge(s, "incremental_snapshot_tables_left") == 0.0
            && source_gauge(s, "incremental_snapshot_rows") > 0.0
    })
    .await;
    let lsn: String = client
        .query_one("select pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    common::wait_applied(&d, "out", &format!("lsn={lsn}"), Duration::from_secs(60)).await;
    let folded = common::fold(&setup.output());
    let ids: Vec<i64> = folded.keys().map(|(_, id)| *id).collect();
    let fifty: Vec<String> = setup
        .output()
        .iter()
        .filter(|e| e["after"]["id"] == 50 || e["before"]["id"] == 50)
        .map(|e| format!("{} {}", e["op"], e["source"]["lsn"]))
        .collect();
    assert_eq!(
        ids.len(),
        99,
        "rows in the output; id 50: {fifty:?}\n{}",
        d.log()
    );
    assert!(
        !ids.contains(&50),
        "the deleted row came back from the chunk:\n{}",
        d.log()
    );
    drop(d);
}
