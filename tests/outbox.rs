//! The transactional outbox (`value = "outbox"`), end to end: an outbox table's rows through
//! siphon's Kafka sink (into a noida-db broker) and through the real Debezium 3.6.3 with its
//! outbox EventRouter (`scripts/debezium/dump`), the same rows — a snapshot, then inserts,
//! an update and a delete (which route nothing), the usual insert-and-delete in one
//! transaction (the insert routes), a NULL payload — field by field: topic, key, value and
//! headers (`id`, and `eventType` from the `type` column). Then a writer inserts outbox rows
//! while the daemon is killed -9 twice: every row ever inserted is one record, exactly once,
//! in `outbox.event.<aggregatetype>`, keyed by its `aggregateid`.
//!
//! Debezium's own `__debezium.context.*` headers (its connector's name, task and run) are
//! left out of the comparison, as are siphon's `siphon.*` headers.

#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Setup;
use common::debezium::{self, End, Run, records, slot_active};
use common::pg::current_lsn;
use rdkafka::Message as _;
use rdkafka::message::Headers as _;
use serde_json::Value as Json;
use siphon_test_support::{Daemon, KafkaBroker, PgDatabase, postgres};

const OUTBOX: &str = r#"
create table outbox (id uuid primary key, aggregatetype varchar(255) not null,
    aggregateid varchar(255) not null, type varchar(255) not null, payload jsonb);
-- Every row ever inserted, for the check: the outbox itself loses its deleted rows.
create table inserted (id uuid primary key, aggregatetype text not null, aggregateid text not null);
create function remember() returns trigger language plpgsql as $$
begin
    insert into inserted values (new.id, new.aggregatetype, new.aggregateid);
    return new;
end $$;
create trigger remember after insert on outbox for each row execute function remember();
insert into outbox values
 ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'order', 'o-1', 'OrderCreated',
  '{"total": 12.50, "lines": [{"sku": "A-1", "qty": 2}]}'),
 ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', 'customer', 'c-1', 'CustomerRegistered',
  '{"name": "Zoë", "tags": []}'),
 ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13', 'order', 'o-2', 'OrderCreated', '{}');
"#;

/// Each a transaction of its own.
const STREAM: &[&str] = &[
    "insert into outbox values ('b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a21', 'order', 'o-1',
        'OrderPaid', '{\"paid\": true, \"at\": \"2026-12-05T10:00:00Z\"}')",
    // An update and a delete route nothing.
    "update outbox set type = 'OrderChanged' where id = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13'",
    "delete from outbox where id = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'",
    // The usual pattern: the event inserted and deleted in the writer's transaction.
    "begin;
     insert into outbox values ('b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a22', 'customer', 'c-2',
        'CustomerRegistered', '{\"name\": \"Ann \\\"Q\\\" Lee\"}');
     delete from outbox where id = 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a22';
     commit",
    "insert into outbox values ('b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a23', 'order', 'o-3',
        'OrderNoted', null)",
];

/// The records the EventRouter emits for [`STREAM`]: one per inserted event; updates and
/// deletes route nothing.
const STREAM_RECORDS: usize = 3;

const TOPICS: [&str; 2] = ["outbox.event.order", "outbox.event.customer"];

/// Debezium's outbox EventRouter with the `type` column as the `eventType` header.
const EVENT_ROUTER: &[&str] = &[
    "transforms=outbox",
    "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.table.fields.additional.placement=type:header:eventType",
    "converter.schemas.enable=true",
];

fn dump(db: &PgDatabase, slot: &str, mode: &str, out: &Path, end: End) -> Command {
    let mut cmd = debezium::dump(db, "public.outbox", slot, mode, out, end);
    cmd.args(EVENT_ROUTER);
    cmd
}

async fn wait_active(db: &PgDatabase, slot: &str, what: &str, log: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !slot_active(db, slot).await {
        assert!(
            Instant::now() < deadline,
            "{what} never made its slot active\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Debezium's record with each header's value as text (Kafka Connect's JsonConverter
/// wraps them as `{"schema","payload"}`), its own context headers left out.
fn theirs(record: &Json) -> (String, Json) {
    let mut headers = BTreeMap::new();
    for (name, value) in record["headers"].as_object().into_iter().flatten() {
        if name.starts_with("__debezium.context.") {
            continue;
        }
        let text = match &value["payload"] {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        };
        headers.insert(name.clone(), text);
    }
    let id = headers
        .get("id")
        .cloned()
        .expect("Debezium's record has an id header");
    let record = serde_json::json!({
        "topic": record["topic"], "key": record["key"], "value": record["value"], "headers": headers,
    });
    (id, record)
}

/// Every record of [`TOPICS`] (read_committed), as `{"topic", "key", "value", "headers"}` by
/// its `id` header (siphon's `siphon.*` headers left out), each id's records in a list;
/// waits for `at_least` records as long as records come (`daemon` says why they do not).
fn consume(broker: &KafkaBroker, at_least: usize, daemon: &Daemon) -> BTreeMap<String, Vec<Json>> {
    let consumer = debezium::committed_reader(&broker.brokers(), "outbox-test", &TOPICS);
    let mut read: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    let (mut count, mut last_progress) = (0, Instant::now());
    // Past `at_least`, a few more seconds: a duplicate would come then.
    while count < at_least || last_progress.elapsed() < Duration::from_secs(3) {
        assert!(
            count >= at_least || last_progress.elapsed() < Duration::from_secs(60),
            "siphon's Kafka sink wrote {count} outbox records of {at_least} and no more for 60s\n{}",
            daemon.log()
        );
        // Until the sink made the topics, reading them fails.
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(300)) else {
            continue;
        };
        let mut headers = BTreeMap::new();
        for header in message.headers().into_iter().flat_map(|h| h.iter()) {
            if header.key.starts_with("siphon.") {
                continue;
            }
            let text = String::from_utf8(header.value.unwrap_or_default().to_vec()).unwrap();
            headers.insert(header.key.to_owned(), text);
        }
        let json =
            |bytes: Option<&[u8]>| bytes.map_or(Json::Null, |b| serde_json::from_slice(b).unwrap());
        let id = headers
            .get("id")
            .cloned()
            .expect("an outbox record has an id header");
        read.entry(id).or_default().push(serde_json::json!({
            "topic": message.topic(), "key": json(message.key()), "value": json(message.payload()),
            "headers": headers,
        }));
        count += 1;
        last_progress = Instant::now();
    }
    read
}

#[tokio::test(flavor = "multi_thread")]
async fn outbox_rows_route_as_debeziums_event_router_routes_them_through_a_kill() {
    let db = postgres().await.unwrap();
    db.execute(OUTBOX).await.unwrap();
    let broker = KafkaBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (snapshot_out, stream_out) = (
        dir.path().join("snapshot.jsonl"),
        dir.path().join("stream.jsonl"),
    );

    // Debezium's snapshot run to its end, then its stream run beside siphon.
    let slot = format!("{}_dbz_snap", db.name);
    let status = Run::spawn(dump(&db, &slot, "initial", &snapshot_out, End::Snapshot)).wait();
    assert!(status.success(), "Debezium's snapshot run failed: {status}");
    db.drop_slot(&slot).await.unwrap();
    let stream_slot = format!("{}_dbz_stream", db.name);
    let stream = Run::spawn(dump(
        &db,
        &stream_slot,
        "no_data",
        &stream_out,
        End::After(STREAM_RECORDS),
    ));
    wait_active(
        &db,
        &stream_slot,
        "Debezium's stream connector",
        String::new,
    )
    .await;

    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.outbox\"]\nslot = \"{}\"\npublication = \"{}\"\nstatus_interval = \"200ms\"",
        db.url, db.name, db.name
    );
    let sinks = format!(
        r#"
[pipelines.demo.sinks.events]
kind = "kafka"
brokers = "{brokers}"
value = "outbox"
batch_size = 20
# As in the other Kafka tests with kills: the test broker's read_committed fetch from the
# middle of a partition mishandles the aborted transactions kills leave (README, Kafka).
seek = "beginning"

[pipelines.demo.sinks.events.outbox]
headers = {{ eventType = "type" }}
"#,
        brokers = broker.brokers()
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let mut daemon = setup.start();
    wait_active(&db, &db.name, "siphon", || daemon.log()).await;
    let client = db.client().await.unwrap();
    for statement in STREAM {
        client.batch_execute(statement).await.unwrap();
    }
    let status = stream.wait();
    assert!(status.success(), "Debezium's stream run failed: {status}");
    // Its slot is left behind; slots are few (max_replication_slots).
    db.drop_slot(&stream_slot).await.unwrap();

    // A writer of outbox rows (some deleted in their own transaction) through two kills.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let client = db.client().await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (kind, then_delete) =
                    (["order", "customer"][(n % 2) as usize], n.is_multiple_of(3));
                let rows = 1 + n % 3;
                let mut sql = String::from("begin;");
                for i in 0..rows {
                    sql += &format!(
                        "insert into outbox values (gen_random_uuid(), '{kind}', '{kind}-{}',
                            'Written', '{{\"n\": {n}, \"i\": {i}}}');",
                        n % 17
                    );
                }
                if then_delete {
                    sql += "delete from outbox where type = 'Written';";
                }
                sql += "commit;";
                client.batch_execute(&sql).await.unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        daemon.kill_9().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        daemon = setup.start();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 20, "the writer wrote {written} transactions");
    let lsn = current_lsn(&db).await;
    common::wait_applied(&daemon, "events", &lsn, Duration::from_secs(60)).await;

    let inserted: BTreeMap<String, (String, String)> = client
        .query(
            "select id::text, aggregatetype, aggregateid from inserted",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let ours = consume(&broker, inserted.len(), &daemon);

    // Every row ever inserted is one record, where its aggregate type says, keyed by its
    // aggregate; nothing else is.
    let mut problems = Vec::new();
    for (id, (kind, aggregate)) in &inserted {
        match ours.get(id).map(Vec::as_slice) {
            None => problems.push(format!("{id} ({kind} {aggregate}): no record")),
            Some([record]) => {
                if record["topic"] != format!("outbox.event.{kind}")
                    || record["key"]["payload"] != **aggregate
                {
                    problems.push(format!("{id} ({kind} {aggregate}): {record}"));
                }
            }
            Some(records) => problems.push(format!("{id}: {} records", records.len())),
        }
    }
    problems.extend(
        ours.keys()
            .filter(|id| !inserted.contains_key(*id))
            .map(|id| format!("{id}: a record of no row")),
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );

    // The rows Debezium saw, as Debezium routed them.
    let theirs: Vec<(String, Json)> = records(&snapshot_out)
        .iter()
        .chain(&records(&stream_out))
        .map(theirs)
        .collect();
    assert_eq!(theirs.len(), 3 + 3, "Debezium's records: {theirs:#?}");
    for (id, record) in &theirs {
        assert_eq!(
            &ours[id][0], record,
            "the record of outbox row {id}: siphon's, then Debezium's"
        );
    }
}
