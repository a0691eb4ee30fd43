//! The message sinks end to end: PostgreSQL → the file log → a message sink, the daemon
//! killed -9 again and again under a writer; afterwards every committed change is in the
//! broker once (Redis Streams: by entry id), each key's in commit order.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;
use common::pg::{
    History, WRITER_TABLES, assert_every_change_once, current_lsn, pg_source, spawn_writer,
};
use siphon_test_support::{
    Daemon, PgDatabase, PrivateNats, PrivateRabbitmq, PrivateRedis, RabbitExchange, nats,
    nats_messages, postgres, rabbitmq, rabbitmq_at, rabbitmq_close_connections, redis, redis_conn,
};

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

/// Each key's rows in the order of `events` (Debezium envelopes; `None` for a delete).
fn history_of(events: impl IntoIterator<Item = serde_json::Value>) -> History {
    let mut out = History::new();
    for event in events {
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

/// Each key's rows in the order the stream's entries hold them.
fn per_key_history(entries: &Entries) -> History {
    history_of(
        entries
            .iter()
            .map(|(_, fields)| serde_json::from_str(&fields["value"]).unwrap()),
    )
}

/// Pipeline `demo` from `db` into the sink `[pipelines.demo.sinks.<name>]` of `body`.
fn pipeline(db: &PgDatabase, name: &str, body: &str) -> Setup {
    Setup::with_source(
        &pg_source(db),
        0,
        &format!("\n[pipelines.demo.sinks.{name}]\n{body}\nbatch_size = 200\n"),
    )
}

/// Pipeline `demo` from `db` into the Redis Streams sink `stream` on `url`, its streams
/// and cursor under `prefix`.
fn stream_pipeline(db: &PgDatabase, url: &str, prefix: &str) -> Setup {
    pipeline(
        db,
        "stream",
        &format!(
            "kind = \"redis_stream\"\nurl = \"{url}\"\nprefix = \"{prefix}\"\nschemas = false\ncursor_key = \"{prefix}:cursor\""
        ),
    )
}

/// Waits for the snapshot in sink `sink`, then starts the writer: its stop flag and its
/// task.
async fn snapshot_then_write(
    d: &Daemon,
    db: &PgDatabase,
    sink: &str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    applied_past(d, sink, 29).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(db, stop.clone(), Arc::default()).await;
    (stop, writer)
}

/// Stops the writer, and waits until sink `sink` applied every change it committed.
async fn stop_then_drain(
    d: &Daemon,
    db: &PgDatabase,
    sink: &str,
    (stop, writer): (Arc<AtomicBool>, tokio::task::JoinHandle<u64>),
) {
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(transactions > 10, "the writer committed {transactions}");
    let position = current_lsn(db).await;
    common::wait_applied(d, sink, &position, Duration::from_secs(90)).await;
}

/// Waits until sink `sink` applied records past offset `offset`.
async fn applied_past(d: &Daemon, sink: &str, offset: u64) {
    common::wait_status(d, Duration::from_secs(60), "the sink applying", |s| {
        s[0]["sinks"][sink]["next_offset"].as_u64() > Some(offset)
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
    let (stop, writer) = snapshot_then_write(&d, &db, "stream").await;
    for round in 1..=3u64 {
        // Let the sink add some entries, then kill the daemon while it works.
        applied_past(&d, "stream", 30 + round * 800).await;
        tokio::time::sleep(Duration::from_millis(20 * round)).await;
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop_then_drain(&d, &db, "stream", (stop, writer)).await;
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
    let (stop, writer) = snapshot_then_write(&d, &db, "stream").await;
    for round in 1..=2u64 {
        applied_past(&d, "stream", 30 + round * 1000).await;
        server.restart().unwrap();
    }
    stop_then_drain(&d, &db, "stream", (stop, writer)).await;
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

/// Pipeline `demo` from `db` into the NATS JetStream sink `nats` on `url`, its stream and
/// subjects named `prefix`.
fn nats_pipeline(db: &PgDatabase, url: &str, prefix: &str) -> Setup {
    pipeline(
        db,
        "nats",
        // Acks of messages lost with a restarted server are given up on soon.
        &format!(
            "kind = \"nats\"\nurl = \"{url}\"\nprefix = \"{prefix}\"\nschemas = false\ntimeout = \"2s\""
        ),
    )
}

/// Each key's rows in the order subject `<prefix>.public.<table>` of stream `prefix` holds
/// them, with each message's offset header.
async fn nats_history(url: &str, prefix: &str, table: &str) -> (History, Vec<u64>) {
    let client = async_nats::connect(url).await.unwrap();
    let messages = nats_messages(&client, prefix, Some(&format!("{prefix}.public.{table}")))
        .await
        .unwrap();
    let offsets = messages
        .iter()
        .map(|m| {
            m.headers
                .as_ref()
                .and_then(|h| h.get("siphon.offset"))
                .unwrap()
                .as_str()
                .parse()
                .unwrap()
        })
        .collect();
    let history = history_of(
        messages
            .iter()
            .map(|m| serde_json::from_slice(&m.payload).unwrap()),
    );
    (history, offsets)
}

/// kill -9 of the daemon, again and again, while a writer runs: the stream holds every
/// committed change once (JetStream drops a re-sent `Nats-Msg-Id`; the sink starts after
/// its last message), each key's in commit order. A replay with `--reset` publishes the
/// log again into the purged subjects.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_a_writer_leaves_each_change_once_in_its_jetstream_stream() {
    let db = postgres().await.unwrap();
    let ns = nats().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let setup = nats_pipeline(&db, &ns.url, &ns.prefix);
    let mut d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db, "nats").await;
    for round in 1..=3u64 {
        applied_past(&d, "nats", 30 + round * 800).await;
        tokio::time::sleep(Duration::from_millis(20 * round)).await;
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop_then_drain(&d, &db, "nats", (stop, writer)).await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    let (counters, counter_offsets) = nats_history(&ns.url, &ns.prefix, "counters").await;
    let (ledger, ledger_offsets) = nats_history(&ns.url, &ns.prefix, "ledger").await;
    assert_every_change_once(&db, &counters, &ledger).await;
    for offsets in [&counter_offsets, &ledger_offsets] {
        assert!(offsets.is_sorted(), "a subject's offsets out of order");
    }

    let out = setup.cli(&["replay", "demo", "nats", "--from", "0", "--reset"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (again, _) = nats_history(&ns.url, &ns.prefix, "counters").await;
    let last = |history: &History| -> BTreeMap<i64, Option<serde_json::Value>> {
        history
            .iter()
            .map(|(id, rows)| (*id, rows.last().cloned().flatten()))
            .collect()
    };
    assert_eq!(
        last(&again),
        last(&counters),
        "each key's last change after the replay"
    );
}

/// NATS itself killed -9 and started again (JetStream's file store in its directory) twice
/// while the sink publishes a writer's changes, each time once the sink has noticed it gone
/// (a server back within milliseconds is hidden by the client's reconnection, and the sink
/// sees nothing to retry): the sink retries by itself, and every committed change ends in
/// the stream once, in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_restart_mid_stream_loses_and_repeats_nothing() {
    let db = postgres().await.unwrap();
    let mut server = PrivateNats::start().unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let setup = nats_pipeline(&db, &server.url(), "demo");
    let d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db, "nats").await;
    for round in 1..=2u64 {
        applied_past(&d, "nats", 30 + round * 1000).await;
        server.kill().unwrap();
        common::wait_status(&d, Duration::from_secs(60), "the sink to miss NATS", |s| {
            s[0]["sinks"]["nats"]["state"] == "retrying"
        })
        .await;
        server.start_again().unwrap();
    }
    stop_then_drain(&d, &db, "nats", (stop, writer)).await;
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("sink=nats") && l.contains("retrying")),
        "the sink never noticed NATS going away:\n{log}\n{}",
        server.log()
    );
    let (counters, _) = nats_history(&server.url(), "demo", "counters").await;
    let (ledger, _) = nats_history(&server.url(), "demo", "ledger").await;
    assert_every_change_once(&db, &counters, &ledger).await;
}

/// kill -9 of the daemon, again and again, and its broker connection closed by RabbitMQ
/// twice, while a writer runs: the queue bound to the exchange gets every committed change at
/// least once, every copy with the same `message_id` and body, and kept once by id, each
/// key's changes in commit order. A second sink publishing to an exchange no queue is bound
/// to stops (its message came back), and only it.
#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_gets_every_change_at_least_once_and_an_unroutable_sink_stops_alone() {
    let db = postgres().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let ex = rabbitmq().await.unwrap();
    let unbound = format!("{}_unbound", ex.exchange);
    let setup = Setup::with_source(
        &pg_source(&db),
        0,
        &format!(
            "\n[pipelines.demo.sinks.rabbit]\nkind = \"rabbitmq\"\nurl = \"{url}\"\nexchange = \"{exchange}\"\nschemas = false\nbatch_size = 200\n\n[pipelines.demo.sinks.lost]\nkind = \"rabbitmq\"\nurl = \"{url}\"\nexchange = \"{unbound}\"\nschemas = false\n",
            url = ex.url,
            exchange = ex.exchange,
        ),
    );
    let mut d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db, "rabbit").await;
    for round in 1..=4u64 {
        applied_past(&d, "rabbit", 30 + round * 600).await;
        if round % 2 == 0 {
            // The connection is named after the pipeline and the sink.
            assert_eq!(rabbitmq_close_connections("demo.rabbit").unwrap(), 1);
        } else {
            tokio::time::sleep(Duration::from_millis(20 * round)).await;
            d.kill_9().unwrap();
            d = setup.start();
        }
    }
    stop_then_drain(&d, &db, "rabbit", (stop, writer)).await;
    let status = common::wait_status(&d, Duration::from_secs(60), "sink lost failing", |s| {
        s[0]["sinks"]["lost"]["state"] == "failed"
    })
    .await;
    let lost = &status[0]["sinks"]["lost"];
    assert_eq!(lost["state"], "failed", "{lost}");
    assert!(
        lost["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("no queue"),
        "{lost}"
    );
    drop(d);
    assert_every_change_at_least_once(&db, queued(&ex).await).await;
    ex.channel()
        .await
        .unwrap()
        .exchange_delete(unbound.as_str().into(), Default::default())
        .await
        .unwrap();
}

/// `events` (id, destination, value: a Debezium envelope), as a consumer got them, hold every
/// change `db`'s writer committed at least once, every copy of an id alike, and kept once by
/// id each key's changes in commit order. Returns how many copies came beyond the first.
async fn assert_every_change_at_least_once(
    db: &PgDatabase,
    events: impl IntoIterator<Item = (String, String, serde_json::Value)>,
) -> usize {
    let mut by_id: BTreeMap<String, (String, serde_json::Value)> = BTreeMap::new();
    let mut first_copies = Vec::new();
    let mut again = 0;
    for (id, destination, value) in events {
        match by_id.get(&id) {
            Some(seen) => {
                assert_eq!(seen, &(destination, value), "two events under id {id}");
                again += 1;
            }
            None => {
                by_id.insert(id, (destination.clone(), value.clone()));
                first_copies.push((destination, value));
            }
        }
    }
    let of_table = |table: &str| {
        history_of(
            first_copies
                .iter()
                .filter(|(destination, _)| *destination == format!("demo.public.{table}"))
                .map(|(_, value)| value.clone()),
        )
    };
    assert_every_change_once(db, &of_table("counters"), &of_table("ledger")).await;
    again
}

/// What the queue bound to `ex` holds, as [`assert_every_change_at_least_once`] takes it.
async fn queued(ex: &RabbitExchange) -> Vec<(String, String, serde_json::Value)> {
    ex.drain_events()
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.id, e.routing_key, e.value))
        .collect()
}

/// A RabbitMQ node of the test's own killed -9 and started again twice, each time while the
/// sink is behind, publishing what a writer wrote just before: the sink reconnects by itself, and the
/// durable queue holds every committed change at least once (what the broker confirmed
/// survived it; what it had not, the sink sent again), copies alike, first copies in commit
/// order. The writer writes in bursts of some thousand changes, not through the node's boot
/// (seconds of Erlang), when it would write hundreds of thousands the sink then takes minutes
/// to publish.
#[tokio::test(flavor = "multi_thread")]
async fn a_rabbitmq_restart_mid_stream_loses_nothing() {
    let db = postgres().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let mut broker = PrivateRabbitmq::start().unwrap();
    let ex = rabbitmq_at(&broker.url()).await.unwrap();
    // Small batches, each awaiting its confirms: the sink is behind the writer's bursts.
    let setup = Setup::with_source(
        &pg_source(&db),
        0,
        &format!(
            "\n[pipelines.demo.sinks.rabbit]\nkind = \"rabbitmq\"\nurl = \"{}\"\nexchange = \"{}\"\nschemas = false\nbatch_size = 20\n",
            ex.url, ex.exchange
        ),
    );
    let d = setup.start();
    applied_past(&d, "rabbit", 29).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut transactions = 0;
    let end = |status: &serde_json::Value| status[0]["log"]["end_offset"].as_u64().unwrap();
    let mut restarts = 0;
    for burst in 0.. {
        if restarts == 2 {
            break;
        }
        assert!(
            burst < 10,
            "the sink kept up with {burst} bursts: no restart mid-stream"
        );
        let from = end(&common::wait_status(&d, Duration::from_secs(60), "status", |_| true).await);
        stop.store(false, Ordering::Relaxed);
        let writer = spawn_writer(&db, stop.clone(), Arc::default()).await;
        // A burst of some thousand changes in the log, then the node goes while the sink
        // publishes them (another burst if it kept up).
        common::wait_status(&d, Duration::from_secs(60), "the writer's burst", |s| {
            end(s) > from + 3000
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        transactions += writer.await.unwrap();
        let status = common::wait_status(&d, Duration::from_secs(60), "status", |_| true).await;
        if status[0]["sinks"]["rabbit"]["lag_records"].as_u64() > Some(0) {
            broker.restart().unwrap();
            // As a consumer does when it connects again. A classic queue that fails to
            // recover from the kill loses its routes until it is declared again (rabbitmq-server
            // #1873), and meanwhile the sink's messages come back unrouted: within a minute of
            // its reconnection the sink retries them.
            if let Err(e) = ex.declare().await {
                panic!(
                    "the queue declared again after a restart: {e:#}\n{}",
                    broker.log()
                );
            }
            restarts += 1;
        }
    }
    assert!(transactions > 10, "the writer committed {transactions}");
    common::wait_applied(
        &d,
        "rabbit",
        &current_lsn(&db).await,
        Duration::from_secs(90),
    )
    .await;
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("sink=rabbit") && l.contains("retrying")),
        "the sink never noticed RabbitMQ going away:\n{log}\n{}",
        broker.log()
    );
    assert_every_change_at_least_once(&db, queued(&ex).await).await;
}

/// Every event a webhook receiver got, in arrival order; it answers 503 to every fifth
/// request, and with `hold` set takes the next request but answers it only after a pause
/// (`held` says when it has one).
#[derive(Default)]
struct Webhook {
    events: std::sync::Mutex<Vec<serde_json::Value>>,
    requests: std::sync::atomic::AtomicU64,
    hold: AtomicBool,
    held: tokio::sync::Notify,
}

async fn receive(
    axum::extract::State(hook): axum::extract::State<Arc<Webhook>>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    if hook.requests.fetch_add(1, Ordering::Relaxed) % 5 == 4 {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let events = doc["events"].as_array().unwrap().clone();
    hook.events.lock().unwrap().extend(events);
    if hook.hold.swap(false, Ordering::Relaxed) {
        hook.held.notify_one();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    axum::http::StatusCode::OK
}

/// kill -9 of the daemon, again and again, while a writer runs and the receiver refuses some
/// requests, each kill while the receiver holds a request it took (so the daemon sends it
/// again): the receiver gets every committed change at least once; every copy of an event
/// carries the same id and is the same event, and kept once by id, each key's changes are
/// there once and in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_gets_every_change_at_least_once_each_copy_with_its_id() {
    let db = postgres().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let hook = Arc::new(Webhook::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(hook.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let setup = pipeline(
        &db,
        "hook",
        &format!("kind = \"http\"\nurl = \"{url}\"\nschemas = false"),
    );
    let mut d = setup.start();
    let (stop, writer) = snapshot_then_write(&d, &db, "hook").await;
    for round in 1..=3u64 {
        applied_past(&d, "hook", 30 + round * 800).await;
        let held = hook.held.notified();
        hook.hold.store(true, Ordering::Relaxed);
        tokio::time::timeout(Duration::from_secs(120), held)
            .await
            .expect("the daemon sent no request in 120 s");
        d.kill_9().unwrap();
        d = setup.start();
    }
    stop_then_drain(&d, &db, "hook", (stop, writer)).await;
    drop(d);

    let events = hook.events.lock().unwrap().clone();
    let received = events.len();
    let again = assert_every_change_at_least_once(
        &db,
        events.into_iter().map(|e| {
            let id = e["id"].as_str().unwrap().to_owned();
            let destination = e["destination"].as_str().unwrap().to_owned();
            (id, destination, e["value"].clone())
        }),
    )
    .await;
    assert!(
        again > 0,
        "no event came twice ({received} received): the kills missed the requests held"
    );
}
