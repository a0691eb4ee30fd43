//! The daemon with the PostgreSQL source, broken on purpose while a writer runs: kill -9 of
//! the daemon, the walsender terminated. The file sink's output, folded, must equal the table
//! row by row; and, against an oracle independent of siphon — an audit table a trigger fills
//! in the source database — every change the writer made must be in the output once, in
//! order, with its values.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Setup, fold};
use serde_json::Value as Json;
use siphon_test_support::{PgDatabase, postgres};

fn setup(db: &PgDatabase) -> Setup {
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.accounts\"]\nslot = \"{}_slot\"\nstatus_interval = \"200ms\"",
        db.url, db.name
    );
    // The transaction block's order numbers show a repeated change.
    Setup::with_source(&source, 0, "transaction_metadata = true")
}

const SCHEMA: &str = "create table accounts (id bigint primary key, owner text not null, balance numeric(14,2) not null, version bigint not null);
    insert into accounts select g, 'owner ' || g, 100, 0 from generate_series(1, 200) g;
    create table audit (seq bigserial primary key, op text not null, row jsonb not null);
    create function audit() returns trigger language plpgsql as $$
    begin
        if tg_op = 'DELETE' then
            insert into audit (op, row) values ('d', to_jsonb(old));
        else
            insert into audit (op, row) values (case tg_op when 'INSERT' then 'c' else 'u' end, to_jsonb(new));
        end if;
        return null;
    end $$;
    create trigger audit after insert or update or delete on accounts for each row execute function audit();";

/// The changes as the audit table recorded them, in order: (op, id, and for a create or an
/// update the row's values).
async fn audited(db: &PgDatabase) -> Vec<(String, i64, Option<Json>)> {
    let client = db.client().await.unwrap();
    client
        .query("select op, row from audit order by seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let op: String = r.get(0);
            let row: Json = r.get(1);
            let id = row["id"].as_i64().unwrap();
            let values = (op != "d").then(|| {
                serde_json::json!({"owner": row["owner"], "balance": format!("{:.2}", row["balance"].as_f64().unwrap()), "version": row["version"]})
            });
            (op, id, values)
        })
        .collect()
}

/// The streamed changes in the file sink's output, as [`audited`] has them.
fn streamed(setup: &Setup) -> Vec<(String, i64, Option<Json>)> {
    setup
        .output()
        .iter()
        .filter(|e| e["source"]["snapshot"] == "false")
        .map(|e| {
            let op = e["op"].as_str().unwrap().to_owned();
            let row = if op == "d" { &e["before"] } else { &e["after"] };
            let values = (op != "d").then(|| {
                serde_json::json!({"owner": row["owner"], "balance": row["balance"], "version": row["version"]})
            });
            (op, row["id"].as_i64().unwrap(), values)
        })
        .collect()
}

/// Every audited change once, in order, with its values: none lost, none repeated.
async fn check_against_the_audit(setup: &Setup, db: &PgDatabase) {
    let audit = audited(db).await;
    let out = streamed(setup);
    let first_difference = audit.iter().zip(&out).position(|(a, b)| a != b);
    assert!(
        audit.len() == out.len() && first_difference.is_none(),
        "the output holds {} changes, the audit {}; first difference at {:?}: audit {:?}, output {:?}",
        out.len(),
        audit.len(),
        first_difference,
        first_difference.map(|i| &audit[i]),
        first_difference.map(|i| &out[i]),
    );
}

/// Starts the daemon and waits until its snapshot is in the output, so that every change the
/// writer makes after this is one the audit and the stream both see.
async fn start_after_snapshot(setup: &Setup) -> siphon_test_support::Daemon {
    let d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        s[0]["source_metrics"]["snapshot_running"] == 0.0
            && common::sink(s)["lag_records"] == 0
            && common::sink(s)["next_offset"].as_u64() >= Some(200)
    })
    .await;
    d
}

/// Waits until the output holds more than `than` streamed changes; returns how many.
async fn progress(setup: &Setup, than: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let n = streamed(setup).len();
        if n > than {
            return n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new change reached the output past {than}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes transactions until stopped: updates, inserts and deletes; returns how many ran.
fn writer(db: &PgDatabase, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let url = db.url.clone();
    tokio::spawn(async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let id = n % 200 + 1;
            let new_id = 1000 + n;
            client
                .batch_execute(&format!(
                    "begin;
                     update accounts set balance = balance + 1, version = version + 1 where id = {id};
                     insert into accounts values ({new_id}, 'new {n}', {n}, 0);
                     delete from accounts where id = {} ;
                     commit;",
                    new_id.saturating_sub(3)
                ))
                .await
                .unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    })
}

/// The table as JSON rows, the way the events encode them.
async fn table(db: &PgDatabase) -> BTreeMap<(String, i64), Json> {
    let client = db.client().await.unwrap();
    client
        .query("select id, owner, balance::text, version from accounts", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let row = serde_json::json!({"id": id, "owner": r.get::<_, String>(1), "balance": r.get::<_, String>(2), "version": r.get::<_, i64>(3)});
            (("accounts".to_owned(), id), row)
        })
        .collect()
}

/// Waits until the sink has applied everything the table holds now, then compares.
async fn converge(setup: &Setup, db: &PgDatabase) {
    let want = table(db).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let http = reqwest::Client::new();
    let status = format!("http://127.0.0.1:{}/api/pipelines", setup.admin_port);
    loop {
        // Fold the output (expensive) only once the sink has caught up with the log.
        let caught_up = match http.get(&status).send().await {
            Ok(r) => r
                .json::<Json>()
                .await
                .is_ok_and(|s| common::sink(&s)["lag_records"] == 0),
            Err(_) => false,
        };
        if caught_up && fold(&setup.output()) == want {
            break;
        }
        if std::time::Instant::now() > deadline {
            let got = fold(&setup.output());
            let differing: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k:?}: table {v}, sink {:?}", got.get(k)))
                .chain(
                    got.keys()
                        .filter(|k| !want.contains_key(*k))
                        .map(|k| format!("{k:?}: only in the sink")),
                )
                .collect();
            let kept = std::env::temp_dir().join(format!("siphon-failed-{}", std::process::id()));
            let _ = std::process::Command::new("cp")
                .arg("-r")
                .arg(setup.dir.path())
                .arg(&kept)
                .status();
            panic!(
                "the sink never matched the table (copied to {}); differences:\n{}",
                kept.display(),
                differing.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each streamed change at most once: LSN positions strictly increase.
    let positions: Vec<(u64, u64)> = setup
        .output()
        .iter()
        .filter(|e| e["source"]["snapshot"] == "false")
        .map(|e| {
            let seq: Vec<u64> =
                serde_json::from_str::<Vec<String>>(e["source"]["sequence"].as_str().unwrap())
                    .unwrap()
                    .iter()
                    .map(|s| s.parse().unwrap())
                    .collect();
            (seq[0], e["transaction"]["total_order"].as_u64().unwrap())
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "a change reached the sink twice or out of order"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_while_a_writer_runs_loses_and_repeats_nothing() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let setup = setup(&db);
    let mut d = start_after_snapshot(&setup).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(&db, stop.clone());
    // Each round, once new changes reached the output, kill -9 and start again.
    let mut seen = 0;
    for _ in 0..5 {
        seen = progress(&setup, seen + 20).await;
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop.store(true, Ordering::Relaxed);
    let written = writing.await.unwrap();
    assert!(written > 50, "the writer wrote only {written} transactions");
    converge(&setup, &db).await;
    check_against_the_audit(&setup, &db).await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread")]
async fn terminated_walsender_reconnects_without_loss() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let setup = setup(&db);
    let d = start_after_snapshot(&setup).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(&db, stop.clone());
    let admin = db.client().await.unwrap();
    let mut seen = 0;
    let slot = format!("{}_slot", db.name);
    for _ in 0..3 {
        // Once new changes reached the output, and the walsender is back.
        seen = progress(&setup, seen + 20).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while admin
            .query_one(
                "select active_pid is not null from pg_replication_slots where slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get::<_, Option<bool>>(0)
            != Some(true)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the walsender never came back:\n{}",
                d.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = admin
            .query("select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = $1 and active_pid is not null", &[&format!("{}_slot", db.name)])
            .await
            .unwrap();
        assert_eq!(killed.len(), 1, "no walsender to terminate");
    }
    stop.store(true, Ordering::Relaxed);
    writing.await.unwrap();
    converge(&setup, &db).await;
    check_against_the_audit(&setup, &db).await;
    assert!(
        d.log().contains("retrying"),
        "the source never noticed the terminated walsender:\n{}",
        d.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_snapshot_takes_the_snapshot_again() {
    let db = postgres().await.unwrap();
    db.client()
        .await
        .unwrap()
        .batch_execute(
            "create table accounts (id bigint primary key, owner text not null, balance numeric(14,2) not null, version bigint not null);
             insert into accounts select g, 'owner ' || g, g, 0 from generate_series(1, 100000) g;",
        )
        .await
        .unwrap();
    let setup = setup(&db);
    let mut d = setup.start();
    // Kill it while the source is in the middle of the snapshot (its gauges say so).
    let http = reqwest::Client::new();
    let status = format!("http://127.0.0.1:{}/api/pipelines", setup.admin_port);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(resp) = http.get(&status).send().await
            && let Ok(s) = resp.json::<Json>().await
        {
            let gauges = &s[0]["source_metrics"];
            let rows = gauges["snapshot_rows"].as_f64().unwrap_or(0.0);
            // Past 40k rows at least one append of the snapshot (20k rows each) is written.
            if gauges["snapshot_running"] == 1.0 && rows >= 40_000.0 {
                break;
            }
            assert!(
                gauges["snapshot_running"] != 0.0,
                "the snapshot finished before the test could interrupt it"
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    d.kill_9().unwrap();
    // Row 1 is in the log already (the snapshot reads in heap order and had passed 40k rows):
    // the second snapshot must take it away again.
    db.execute("update accounts set version = 1 where id <= 10; delete from accounts where id = 1")
        .await
        .unwrap();
    let d = setup.start();
    converge(&setup, &db).await;
    assert!(
        d.log()
            .contains("its tables are truncated before this snapshot"),
        "the second start did not take the snapshot again over the first one's rows:\n{}",
        d.log()
    );
    let metrics = reqwest::get(format!("http://127.0.0.1:{}/metrics", setup.admin_port))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "siphon_source_snapshot_rows{pipeline=\"demo\"} 99999"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("siphon_source_slot_lag_bytes{pipeline=\"demo\"}")),
        "{metrics}"
    );
}
