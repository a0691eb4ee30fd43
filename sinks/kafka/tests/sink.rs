//! The Kafka sink passes the sink compliance suite against a real broker (noida-db, started by
//! the test): what it published is read back `read_committed`, in each topic's order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use siphon_core::sink::Sink;
use siphon_core::testing::{
    Delivered, OnBroker, run_compliance_suite, run_message_compliance_suite,
};
use siphon_sink_kafka::{KafkaSink, KafkaSinkConfig};
use siphon_test_support::KafkaBroker;

/// A record as a `read_committed` consumer reads it.
#[derive(Debug)]
struct Read {
    /// Header `siphon.offset`.
    offset: u64,
    /// Header `siphon.id`, if there.
    id: Option<String>,
    key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
}

/// Every record a `read_committed` consumer reads from `topic` (one partition), in order.
fn read_all(brokers: &str, topic: &str) -> Vec<Read> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "siphon-test-reader")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let Ok((low, high)) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)) else {
        return Vec::new();
    };
    if low >= high {
        return Vec::new();
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "reading {topic}"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                use rdkafka::message::Headers;
                let header = |name: &str| {
                    m.headers()
                        .and_then(|h| h.iter().find(|h| h.key == name))
                        .and_then(|h| h.value)
                };
                out.push(Read {
                    offset: u64::from_be_bytes(
                        header("siphon.offset").unwrap().try_into().unwrap(),
                    ),
                    id: header("siphon.id").map(|v| String::from_utf8(v.to_vec()).unwrap()),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                });
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
}

/// The broker of a compliance check, and the pipeline whose topics are the sink's there: a
/// broker of the check's own where the check restarts it.
#[derive(Debug)]
struct Broker {
    broker: Arc<KafkaBroker>,
    pipeline: String,
}

#[async_trait::async_trait]
impl siphon_core::testing::Broker for Broker {
    type Sink = KafkaSink;

    fn sink(&self) -> KafkaSink {
        let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
            "brokers": self.broker.brokers(),
            "schemas": false,
            "seek": "beginning",
        }))
        .unwrap();
        KafkaSink::new(&config, &self.pipeline, "out").unwrap()
    }

    async fn messages(&mut self, table: &str) -> Vec<Delivered> {
        let (brokers, topic) = (
            self.broker.brokers(),
            format!("{}.public.{table}", self.pipeline),
        );
        let read = tokio::task::spawn_blocking(move || read_all(&brokers, &topic))
            .await
            .unwrap();
        read.into_iter()
            .filter_map(|r| {
                let value = serde_json::from_slice(&r.value?).unwrap();
                Some((r.id.expect("every record carries siphon.id"), value))
            })
            .collect()
    }

    fn exactly_once(&self) -> bool {
        true
    }

    /// Restarts a broker of the check's own; a shared one cannot be.
    async fn break_connection(&mut self) -> bool {
        match Arc::get_mut(&mut self.broker) {
            Some(broker) => {
                broker.restart_gracefully().unwrap();
                true
            }
            None => false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_keeps_every_promise() {
    let broker = Arc::new(KafkaBroker::start().unwrap());
    let n = AtomicUsize::new(0);
    run_compliance_suite(async || {
        OnBroker::new(Broker {
            broker: broker.clone(),
            pipeline: format!("compliance{}", n.fetch_add(1, Ordering::Relaxed)),
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_keeps_the_message_sinks_promises() {
    run_message_compliance_suite(async || {
        OnBroker::new(Broker {
            broker: Arc::new(KafkaBroker::start().unwrap()),
            pipeline: "demo".into(),
        })
    })
    .await;
}

/// A producer librdkafka gave up on without a fence (here: the broker killed -9 came back
/// without the topics the idempotent producer had written to, noida-db keeping nothing it
/// had not flushed, and the producer's sequence went out of step) is made anew: the sink
/// says so as a transient error, and the batch goes through on a new producer. It stopped
/// the sink for good before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_failed_for_good_unfenced_is_made_anew() {
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{TABLE, event, log_id, record, row, tables};
    let mut broker = KafkaBroker::start().unwrap();
    let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
        "brokers": broker.brokers(),
        "schemas": false,
    }))
    .unwrap();
    let mut sink = KafkaSink::new(&config, "demo", "out").unwrap();
    let batch = |offsets: std::ops::Range<u64>| {
        let records = offsets
            .map(|o| {
                let id = o as i64;
                let after = row(id, "x", siphon_core::event::Value::Null);
                record(
                    o,
                    event(TABLE, siphon_core::event::Op::Create, id, None, Some(after)),
                )
            })
            .collect();
        SinkBatch::whole(records)
    };
    sink.open(&tables(), &log_id()).await.unwrap();
    sink.apply(&batch(0..2)).await.unwrap();
    broker.restart().unwrap();
    if let Err(e) = sink.apply(&batch(2..4)).await {
        assert!(e.is_transient(), "{e}");
        sink.open(&tables(), &log_id()).await.unwrap();
        sink.apply(&batch(2..4)).await.unwrap();
    }
}

/// The Kafka sink is a message sink like the others: its topics from `destination` (what
/// Kafka does not allow in a name becomes `_`), each record's `siphon.id` the event's id, and
/// with `value = "row"` each value the row state (no tombstone after a delete but where the
/// row state is one; a delete dropped is no record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_and_row_states_shape_the_kafka_records() {
    use siphon_core::event::{Op, Value};
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{TABLE, event, log_id, record, row, tables};
    let broker = KafkaBroker::start().unwrap();
    let changes = || {
        SinkBatch::whole(vec![
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "one", Value::Null))),
            ),
            record(
                1,
                event(TABLE, Op::Update, 1, None, Some(row(1, "uno", Value::Null))),
            ),
            record(
                2,
                event(TABLE, Op::Delete, 1, Some(row(1, "uno", Value::Null)), None),
            ),
        ])
    };
    for (deletes, values) in [
        ("tombstone", vec![Some("one"), Some("uno"), None]),
        ("rewrite", vec![Some("one"), Some("uno"), Some("uno")]),
        ("drop", vec![Some("one"), Some("uno")]),
    ] {
        let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
            "brokers": broker.brokers(),
            "schemas": false,
            "seek": "beginning",
            "destination": format!("{{prefix}}:{deletes}:{{table}}"),
            "topic_prefix": "rows",
            "value": "row",
            "deletes": deletes,
        }))
        .unwrap();
        let mut sink = KafkaSink::new(&config, "demo", deletes).unwrap();
        sink.open(&tables(), &log_id()).await.unwrap();
        sink.apply(&changes()).await.unwrap();
        let brokers = broker.brokers();
        let topic = format!("rows_{deletes}_{TABLE}");
        let read = tokio::task::spawn_blocking(move || read_all(&brokers, &topic))
            .await
            .unwrap();
        let names: Vec<Option<String>> = read
            .iter()
            .map(|r| {
                r.value.as_ref().map(|v| {
                    let v: serde_json::Value = serde_json::from_slice(v).unwrap();
                    assert!(v.get("after").is_none(), "a row, not an envelope: {v}");
                    v["name"].as_str().unwrap().to_owned()
                })
            })
            .collect();
        let expected: Vec<Option<String>> = values.iter().map(|v| v.map(str::to_owned)).collect();
        assert_eq!(names, expected, "deletes = {deletes}");
        for (r, offset) in read.iter().zip(0u64..) {
            assert_eq!(r.offset, offset);
            assert_eq!(r.id, Some(format!("{}:{offset}", log_id())));
            let key: serde_json::Value = serde_json::from_slice(r.key.as_ref().unwrap()).unwrap();
            assert_eq!(key, serde_json::json!({ "id": 1 }));
        }
        if deletes == "rewrite" {
            let deleted: serde_json::Value =
                serde_json::from_slice(read[2].value.as_ref().unwrap()).unwrap();
            assert_eq!(
                (&deleted["__deleted"], &deleted["__op"]),
                (&serde_json::json!("true"), &serde_json::json!("d"))
            );
        }
    }
}

/// With `format = "avro"` and `value = "row"`, each value is the row state in Avro: its
/// schema (`<server>.<schema>.<table>.Value`, the table's columns and the added fields)
/// registered once under `<topic>-value`, and a delete with `deletes = "tombstone"` a record
/// without a value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_row_states_take_a_schema_of_their_own() {
    use siphon_core::event::{Op, Value};
    use siphon_core::schema::ColumnKind;
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{TABLE, compliance_schema, event, log_id, record, row, tables};
    use siphon_test_support::RegistryStandIn;
    let broker = KafkaBroker::start().unwrap();
    let registry = RegistryStandIn::start().unwrap();
    let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
        "brokers": broker.brokers(),
        "seek": "beginning",
        "format": "avro",
        "registry": { "url": registry.url },
        "value": "row",
        "deletes": "tombstone",
        "row_fields": ["op", "position"],
    }))
    .unwrap();
    let with_schema = |offset: u64, mut e: siphon_core::event::Event| {
        e.schema = Some(compliance_schema(1, ColumnKind::Int64));
        record(offset, e)
    };
    let mut sink = KafkaSink::new(&config, "demo", "avro").unwrap();
    sink.open(&tables(), &log_id()).await.unwrap();
    sink.apply(&SinkBatch::whole(vec![
        with_schema(
            0,
            event(
                TABLE,
                Op::Delete,
                9,
                Some(row(9, "gone", Value::Null)),
                None,
            ),
        ),
        with_schema(
            1,
            event(TABLE, Op::Create, 1, None, Some(row(1, "one", Value::Null))),
        ),
        with_schema(
            2,
            event(
                TABLE,
                Op::Update,
                1,
                None,
                Some(row(1, "uno", Value::Text("n".into()))),
            ),
        ),
    ]))
    .await
    .unwrap();
    let brokers = broker.brokers();
    let read = tokio::task::spawn_blocking(move || read_all(&brokers, "demo.public.compliance"))
        .await
        .unwrap();
    assert_eq!(read.len(), 3, "{read:?}");
    assert!(read[0].value.is_none(), "a tombstone for the delete");
    let (_, key) = registry
        .decode(read[0].key.as_ref().unwrap(), None)
        .unwrap();
    assert_eq!(key, serde_json::json!({ "id": 9 }));
    let values: Vec<serde_json::Value> = read[1..]
        .iter()
        .map(|r| registry.decode(r.value.as_ref().unwrap(), None).unwrap().1)
        .collect();
    assert_eq!(
        values,
        [
            serde_json::json!({ "id": 1, "name": "one", "note": null, "__op": "c" }),
            serde_json::json!({ "id": 1, "name": "uno", "note": "n", "__op": "u" }),
        ]
    );
    let subjects = registry.subjects();
    let versions = &subjects["demo.public.compliance-value"];
    assert_eq!(versions.len(), 1, "{subjects:#?}");
    assert!(
        versions[0].contains("\"__op\"") && !versions[0].contains("\"after\""),
        "a row state's schema: {}",
        versions[0]
    );
}

/// A destination that sends a table to several topics (`{op}`) registers each table version's
/// schemas under every topic's subjects (they were registered under the first topic's only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_schemas_go_to_every_topic_of_a_table() {
    use siphon_core::event::{Op, Value};
    use siphon_core::schema::ColumnKind;
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{TABLE, compliance_schema, event, log_id, record, row, tables};
    use siphon_test_support::RegistryStandIn;
    let broker = KafkaBroker::start().unwrap();
    let registry = RegistryStandIn::start().unwrap();
    let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
        "brokers": broker.brokers(),
        "seek": "beginning",
        "format": "avro",
        "registry": { "url": registry.url },
        "destination": "{prefix}.{schema}.{table}.{op}",
    }))
    .unwrap();
    let with_schema = |offset: u64, mut e: siphon_core::event::Event| {
        e.schema = Some(compliance_schema(1, ColumnKind::Int64));
        record(offset, e)
    };
    let mut sink = KafkaSink::new(&config, "demo", "ops").unwrap();
    sink.open(&tables(), &log_id()).await.unwrap();
    sink.apply(&SinkBatch::whole(vec![
        with_schema(
            0,
            event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
        ),
        with_schema(
            1,
            event(TABLE, Op::Update, 1, None, Some(row(1, "b", Value::Null))),
        ),
    ]))
    .await
    .unwrap();
    let subjects: Vec<String> = registry.subjects().into_keys().collect();
    assert_eq!(
        subjects,
        [
            "demo.public.compliance.c-key",
            "demo.public.compliance.c-value",
            "demo.public.compliance.u-key",
            "demo.public.compliance.u-value",
        ]
    );
    let brokers = broker.brokers();
    let updates =
        tokio::task::spawn_blocking(move || read_all(&brokers, "demo.public.compliance.u"))
            .await
            .unwrap();
    let (_, value) = registry
        .decode(updates[0].value.as_ref().unwrap(), None)
        .unwrap();
    assert_eq!(value["after"]["name"], "b");
}
