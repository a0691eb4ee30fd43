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
                    out.push(serde_json::from_slice(value).unwrap());
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
