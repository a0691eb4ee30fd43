//! The message sinks end to end: PostgreSQL → the file log → a message sink, the daemon
//! killed -9 again and again under a writer; afterwards every committed change is in the
//! broker once (Redis Streams: by entry id), each key's in commit order.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;
use common::pg::{
    History, WRITER_TABLES, assert_every_change_once, current_lsn, pg_source, spawn_writer,
};
use siphon_test_support::{Daemon, PgDatabase, PrivateRedis, postgres, redis, redis_conn};

/// A stream's entries: (entry id, fields), in the stream's order.
type Entries = Vec<(String, BTreeMap<String, String>)>;

async fn stream(url: &str, key: &str) -> Entries {
    let mut conn = redis_conn(url).await.unwrap();
    redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Each key's rows in the order the entries hold them (`None` for a delete).
fn per_key_history(entries: &Entries) -> History {
    let mut out = History::new();
    for (_, fields) in entries {
        let event: serde_json::Value = serde_json::from_str(&fields["value"]).unwrap();
        let (id, row) = match event["op"].as_str().unwrap() {
            "d" => (event["before"]["id"].as_i64().unwrap(), None),
            _ => (
                event["after"]["id"].as_i64().unwrap(),
                Some(event["after"].clone()),
            ),
        };
        out.entry(id).or_default().push(row);
    }
    out
}

/// Pipeline `demo` from `db` into the Redis Streams sink `stream` on `url`, its streams
/// and cursor under `prefix`.
fn stream_pipeline(db: &PgDatabase, url: &str, prefix: &str) -> Setup {
    Setup::with_source(
        &pg_source(db),
        0,
        &format!(
            r#"
[pipelines.demo.sinks.stream]
kind = "redis_stream"
url = "{url}"
prefix = "{prefix}"
schemas = false
cursor_key = "{prefix}:cursor"
batch_size = 200
"#
        ),
    )
}

/// Waits for the snapshot in the sink `stream`, then starts the writer: its stop flag and
/// its task.
async fn snapshot_then_write(
    d: &Daemon,
    db: &PgDatabase,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    stream_past(d, 29).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(db, stop.clone(), Arc::default()).await;
    (stop, writer)
}

/// Waits until the sink `stream` applied records past offset `offset`.
async fn stream_past(d: &Daemon, offset: u64) {
    common::wait_status(d, Duration::from_secs(60), "the stream growing", |s| {
        s[0]["sinks"]["stream"]["next_offset"].as_u64() > Some(offset)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_a_writer_leaves_each_change_once_in_its_redis_stream() {
    let db = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let prefix = format!("{}demo", cache.prefix);
    let setup = stream_pipeline(&db, &cache.url, &prefix);
    let mut d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db).await;
    for round in 1..=5u64 {
        // Let the sink add some entries, then kill the daemon while it works.
        stream_past(&d, 30 + round * 1500).await;
        tokio::time::sleep(Duration::from_millis(20 * round)).await;
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(transactions > 10, "the writer committed {transactions}");
    let position = current_lsn(&db).await;
    common::wait_applied(&d, "stream", &position, Duration::from_secs(90)).await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    let counter_entries = stream(&cache.url, &format!("{prefix}.public.counters")).await;
    let ledger_entries = stream(&cache.url, &format!("{prefix}.public.ledger")).await;
    assert_every_change_once(
        &db,
        &per_key_history(&counter_entries),
        &per_key_history(&ledger_entries),
    )
    .await;
    // Each entry's id is its log offset, and its event id the log's identity and offset.
    for (entry, fields) in counter_entries.iter().chain(&ledger_entries) {
        let offset: u64 = fields["offset"].parse().unwrap();
        assert_eq!(*entry, format!("0-{}", offset + 1));
        assert!(fields["id"].ends_with(&format!(":{offset}")), "{fields:?}");
        assert!(fields["position"].contains('/'), "an LSN: {fields:?}");
    }

    // A replay into the same streams adds nothing.
    let streams = async || {
        (
            stream(&cache.url, &format!("{prefix}.public.counters")).await,
            stream(&cache.url, &format!("{prefix}.public.ledger")).await,
        )
    };
    let before = streams().await;
    let replay = |args: &[&str]| {
        let out = setup.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    replay(&["replay", "demo", "stream", "--from", "0"]);
    assert!(streams().await == before, "a replay changed the streams");
    // With --reset it makes them again from the log, which compaction has left with each
    // key's latest changes: entries as they were, each key ending as it did.
    replay(&["replay", "demo", "stream", "--from", "0", "--reset"]);
    let after = streams().await;
    for (old, new) in [(&before.0, &after.0), (&before.1, &after.1)] {
        let old_by_id: BTreeMap<&String, &BTreeMap<String, String>> =
            old.iter().map(|(id, fields)| (id, fields)).collect();
        assert!(
            new.iter()
                .all(|(id, fields)| old_by_id.get(id) == Some(&fields)),
            "an entry made again differs from the one it replaced"
        );
        let last = |entries: &Entries| -> BTreeMap<i64, Option<serde_json::Value>> {
            per_key_history(entries)
                .into_iter()
                .map(|(id, history)| (id, history.last().cloned().flatten()))
                .collect()
        };
        assert_eq!(last(new), last(old), "each key's last change");
    }
}

/// Redis itself killed -9 and started again (its writes fsynced to its append-only file)
/// twice while the sink adds a writer's changes: the sink retries by itself, and every
/// committed change ends in its stream once, in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_restart_mid_stream_loses_and_repeats_nothing() {
    let db = postgres().await.unwrap();
    let mut server = PrivateRedis::start().unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let setup = stream_pipeline(&db, &server.url(), "demo");
    let d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db).await;
    for round in 1..=2u64 {
        stream_past(&d, 30 + round * 3000).await;
        server.restart().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(transactions > 10, "the writer committed {transactions}");
    let position = current_lsn(&db).await;
    common::wait_applied(&d, "stream", &position, Duration::from_secs(90)).await;
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("sink=stream") && l.contains("retrying")),
        "the sink never noticed Redis going away:\n{log}"
    );
    assert_every_change_once(
        &db,
        &per_key_history(&stream(&server.url(), "demo.public.counters").await),
        &per_key_history(&stream(&server.url(), "demo.public.ledger").await),
    )
    .await;
}
