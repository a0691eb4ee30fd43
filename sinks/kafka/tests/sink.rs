//! The Kafka sink passes the sink compliance suite against a real broker (noida-db, started by
//! the test): what it published is read back `read_committed`, in each topic's order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use siphon_core::sink::Sink;
use siphon_core::testing::{SinkHarness, StoreState, run_compliance_suite};
use siphon_sink_kafka::{KafkaSink, KafkaSinkConfig};
use siphon_test_support::KafkaBroker;

struct Harness {
    brokers: String,
    prefix: String,
    sink: KafkaSink,
}

/// The values a `read_committed` consumer reads from `topic` (one partition), tombstones
/// left out.
fn published(brokers: &str, topic: &str) -> Vec<serde_json::Value> {
    published_at(brokers, topic)
        .into_iter()
        .map(|(_, value)| value)
        .collect()
}

/// [`published`], each value with its record's siphon offset (header `siphon.offset`).
fn published_at(brokers: &str, topic: &str) -> Vec<(u64, serde_json::Value)> {
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
                if let Some(value) = m.payload() {
                    use rdkafka::message::Headers;
                    let offset = m
                        .headers()
                        .and_then(|h| h.iter().find(|h| h.key == "siphon.offset"))
                        .and_then(|h| h.value)
                        .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
                        .unwrap();
                    out.push((offset, serde_json::from_slice(value).unwrap()));
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
}

#[async_trait::async_trait]
impl SinkHarness for Harness {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        let (brokers, topic) = (
            self.brokers.clone(),
            format!("{}.public.{table}", self.prefix),
        );
        StoreState::Lines(
            tokio::task::spawn_blocking(move || published(&brokers, &topic))
                .await
                .unwrap(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_keeps_every_promise() {
    let broker = KafkaBroker::start().unwrap();
    let n = AtomicUsize::new(0);
    run_compliance_suite(async || {
        let pipeline = format!("compliance{}", n.fetch_add(1, Ordering::Relaxed));
        let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
            "brokers": broker.brokers(),
            "schemas": false,
            "seek": "beginning",
        }))
        .unwrap();
        Harness {
            brokers: broker.brokers(),
            prefix: pipeline.clone(),
            sink: KafkaSink::new(&config, &pipeline, "out").unwrap(),
        }
    })
    .await;
}

/// The message-sink promises, against a broker of the suite's own (restarted to break the
/// sink's connection).
struct MessageSide {
    broker: KafkaBroker,
    config: KafkaSinkConfig,
    sink: KafkaSink,
}

#[async_trait::async_trait]
impl siphon_core::testing::MessageHarness for MessageSide {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    fn restart(&mut self) {
        self.sink = KafkaSink::new(&self.config, "demo", "out").unwrap();
    }

    async fn delivered(&mut self) -> Vec<siphon_core::testing::Delivered> {
        let brokers = self.broker.brokers();
        let read =
            tokio::task::spawn_blocking(move || published_at(&brokers, "demo.public.compliance"))
                .await
                .unwrap();
        let log = siphon_core::testing::log_id();
        read.into_iter()
            .map(|(offset, value)| (format!("{log}:{offset}"), value))
            .collect()
    }

    fn exactly_once(&self) -> bool {
        true
    }

    async fn break_connection(&mut self) -> bool {
        self.broker.restart_gracefully().unwrap();
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_keeps_the_message_sinks_promises() {
    siphon_core::testing::run_message_compliance_suite(async || {
        let broker = KafkaBroker::start().unwrap();
        let config: KafkaSinkConfig = serde_json::from_value(serde_json::json!({
            "brokers": broker.brokers(),
            "schemas": false,
            "seek": "beginning",
        }))
        .unwrap();
        MessageSide {
            sink: KafkaSink::new(&config, "demo", "out").unwrap(),
            config,
            broker,
        }
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
