//! `[pipelines.NAME.log]` with `kind = "kafka"`: the keys every Kafka component has
//! (`siphon_kafka::kafka_config!`), and the log's own topics.

use std::time::Duration;

use siphon_core::units::HumanDuration;

siphon_kafka::kafka_config! {
    /// Settings of the Kafka change log.
    pub struct KafkaLogConfig {
        /// The pipeline's compacted topic of its identity and the source's position, written
        /// in each transaction. Unset: `siphon.<pipeline>.offsets`.
        #[serde(default)]
        pub offsets_topic: Option<String>,
        /// The pipeline's compacted topic of table schemas and of the topics its records are
        /// in. Unset: `siphon.<pipeline>.schemas`.
        #[serde(default)]
        pub schemas_topic: Option<String>,
        /// A Kafka transaction holding the start of a source transaction still open is
        /// committed this long after it began at the latest (Kafka aborts a transaction open
        /// too long).
        #[serde(default = "default_commit_interval")]
        pub commit_interval: HumanDuration,
    }
}

fn default_commit_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}

/// The names a pipeline's log uses, its settings applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Tables' topics are `<prefix>.<schema>.<table>`.
    pub prefix: String,
    /// The offsets topic.
    pub offsets: String,
    /// The schemas topic.
    pub schemas: String,
    /// The topic of records that are not events (none in a pipeline; a test's own).
    pub records: String,
    /// The producer's `transactional.id`.
    pub transactional_id: String,
}

impl KafkaLogConfig {
    /// The names of pipeline `pipeline`'s topics and producer.
    pub fn names(&self, pipeline: &str) -> Names {
        Names {
            prefix: self.kafka().prefix(pipeline),
            offsets: self
                .offsets_topic
                .clone()
                .unwrap_or_else(|| format!("siphon.{pipeline}.offsets")),
            schemas: self
                .schemas_topic
                .clone()
                .unwrap_or_else(|| format!("siphon.{pipeline}.schemas")),
            records: format!("siphon.{pipeline}.records"),
            transactional_id: self
                .transactional_id
                .clone()
                .unwrap_or_else(|| format!("siphon.{pipeline}")),
        }
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.kafka().validate()?;
        if self.commit_interval.0 >= Duration::from_secs(50) {
            return Err(
                "commit_interval: use less than 50s (Kafka aborts a transaction open for 60s)"
                    .into(),
            );
        }
        Ok(())
    }
}
