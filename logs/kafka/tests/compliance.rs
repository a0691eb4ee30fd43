//! The Kafka log keeps every promise of the log compliance suite, against a real broker
//! (noida-db, started by the test).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use siphon_core::kind::{LogContext, LogKind};
use siphon_core::log::ChangeLog;
use siphon_core::position::NoDecoder;
use siphon_core::testing::log::{LogUnderTest, assert_log_compliance};
use siphon_kafka::config::TopicSettings;
use siphon_log_kafka::{KafkaLogConfig, KafkaLogKind};
use siphon_test_support::KafkaBroker;

/// One pipeline's log on the test's broker; its topics spread over three partitions, so
/// that the merge of partitions is what the suite checks.
struct KafkaUnderTest {
    config: KafkaLogConfig,
    pipeline: String,
}

impl KafkaUnderTest {
    fn context(&self) -> LogContext {
        LogContext {
            pipeline: self.pipeline.clone(),
            dir: std::env::temp_dir(),
            positions: Arc::new(NoDecoder),
        }
    }
}

#[async_trait::async_trait]
impl LogUnderTest for KafkaUnderTest {
    async fn open(&self) -> siphon_core::Result<Arc<dyn ChangeLog>> {
        KafkaLogKind::open(&self.config, &self.context())
    }

    async fn open_read_only(&self) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>> {
        KafkaLogKind::open_existing(&self.config, &self.context())
    }
}

fn config(broker: &KafkaBroker, transactions: bool) -> KafkaLogConfig {
    let mut config: KafkaLogConfig = serde_json::from_value(serde_json::json!({
        "brokers": broker.brokers(),
    }))
    .unwrap();
    config.transactions = transactions;
    config.topics = TopicSettings {
        partitions: 3,
        ..TopicSettings::default()
    };

    config
}

async fn run(transactions: bool) {
    let broker = KafkaBroker::start().unwrap();
    let n = AtomicUsize::new(0);
    assert_log_compliance(async || KafkaUnderTest {
        config: config(&broker, transactions),
        pipeline: format!("compliance{}", n.fetch_add(1, Ordering::Relaxed)),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_log_keeps_every_promise() {
    run(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_log_without_transactions_keeps_every_promise() {
    run(false).await;
}

/// A broker killed -9 that comes back without what it had not flushed (noida-db keeps
/// nothing unflushed: the topics are gone, and the producer's sequence with them) leaves
/// librdkafka's producer failed for good, but not fenced: the log's writer says so as a
/// transient error and goes on with a new producer, rather than stopping the source for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_producer_failed_for_good_unfenced_goes_on() {
    use siphon_core::log::{NewRecord, RecordFlags};
    let mut broker = KafkaBroker::start().unwrap();
    for transactions in [true, false] {
        let under_test = KafkaUnderTest {
            config: config(&broker, transactions),
            pipeline: format!("refused{transactions}"),
        };
        let log = under_test.open().await.unwrap();
        let records = |n: usize| {
            (0..n)
                .map(|i| NewRecord {
                    key: format!("k{i}").into_bytes(),
                    value: format!("v{i}").into_bytes(),
                    flags: RecordFlags::default(),
                })
                .collect::<Vec<_>>()
        };
        log.append(records(3)).await.unwrap();
        broker.restart().unwrap();
        // A few transient errors while librdkafka finds the broker again and the producer is
        // made anew; none permanent.
        let mut errors = Vec::new();
        while let Err(e) = log.append(records(3)).await {
            assert!(
                e.is_transient(),
                "transactions = {transactions}: a permanent error after {errors:?}: {e}"
            );
            errors.push(e.to_string());
            assert!(
                errors.len() < 20,
                "transactions = {transactions}: the writer never went on: {errors:#?}"
            );
        }
    }
}
