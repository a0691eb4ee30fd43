//! `[pipelines.NAME.log]` with `kind = "kafka"`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use siphon_core::units::HumanDuration;
use siphon_format::debezium::Modes;
use siphon_kafka::config::{
    Brokers, Connection, Encoding, KafkaSasl, KafkaTls, RecordFormat, RegistryConfig, TopicSettings,
};

/// Compression of the record batches siphon produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// None.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4 (the default: cheap, and it halves JSON).
    #[default]
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// librdkafka's `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Where a reader of the log's topics starts each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seek {
    /// At the first record it needs (found by a search over the partition's offsets).
    #[default]
    Offset,
    /// At the partition's beginning, skipping what it does not need, and every read of the
    /// log's own topics from their beginning too: for brokers whose `read_committed` fetches
    /// drop records past an aborted transaction (noida-db 0.2.3 does).
    Beginning,
}

/// Settings of the Kafka change log.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaLogConfig {
    /// The brokers to bootstrap from: `"host:9092,host2:9092"` or a list.
    pub brokers: Brokers,
    /// TLS to the brokers (`[…log.tls]`); unset: plaintext.
    #[serde(default)]
    pub tls: Option<KafkaTls>,
    /// SASL PLAIN or SCRAM (`[…log.sasl]`); unset: none.
    #[serde(default)]
    pub sasl: Option<KafkaSasl>,
    /// librdkafka properties passed as they are (`"linger.ms" = "10"`).
    #[serde(default)]
    pub client: BTreeMap<String, String>,
    /// The first part of each table's topic, `<topic_prefix>.<schema>.<table>` (Debezium's
    /// `topic.prefix`). Unset: the pipeline's name.
    #[serde(default)]
    pub topic_prefix: Option<String>,
    /// How the topics siphon creates are made (`[…log.topics]`).
    #[serde(default)]
    pub topics: TopicSettings,
    /// Write each batch of source transactions in one Kafka transaction with the source's
    /// position (exactly once). `false`: an idempotent producer, for brokers without
    /// transactions; a crash may then write records again (at least once).
    #[serde(default = "yes")]
    pub transactions: bool,
    /// The producer's `transactional.id`, one per pipeline: a second siphon started with it
    /// fences the first. Unset: `siphon.<pipeline>`.
    #[serde(default)]
    pub transactional_id: Option<String>,
    /// How keys and values are written: "json" (Debezium's JSON, the default) or "avro".
    #[serde(default)]
    pub format: RecordFormat,
    /// JSON: wrap keys and values as `{"schema":…,"payload":…}` (Kafka Connect's
    /// JsonConverter with `schemas.enable = true`, its default).
    #[serde(default = "yes")]
    pub schemas: bool,
    /// Fill each event's `transaction` block (Debezium's `provide.transaction.metadata`).
    #[serde(default)]
    pub transaction_metadata: bool,
    /// Debezium's handling modes for values (as for the file sink).
    #[serde(default)]
    pub debezium: Modes,
    /// The schema registry for `format = "avro"` (`[…log.registry]`).
    #[serde(default)]
    pub registry: Option<RegistryConfig>,
    /// The pipeline's compacted topic of its identity and the source's position, written in
    /// each transaction. Unset: `siphon.<pipeline>.offsets`.
    #[serde(default)]
    pub offsets_topic: Option<String>,
    /// The pipeline's compacted topic of table schemas. Unset: `siphon.<pipeline>.schemas`.
    #[serde(default)]
    pub schemas_topic: Option<String>,
    /// Compression of produced batches: "none", "gzip", "snappy", "lz4" (default), "zstd".
    #[serde(default)]
    pub compression: Compression,
    /// The longest wait for the brokers in one operation.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// Where readers start a partition: "offset" (at the first record they need; the default)
    /// or "beginning" (for brokers whose `read_committed` fetches past an aborted transaction
    /// drop records, as noida-db 0.2.3's do: readers then read each partition from its start).
    #[serde(default)]
    pub seek: Seek,
    /// A Kafka transaction holding the start of a source transaction still open is committed
    /// this long after it began at the latest (Kafka aborts a transaction open too long).
    #[serde(default = "default_commit_interval")]
    pub commit_interval: HumanDuration,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
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
    /// How to reach the cluster.
    pub fn connection(&self) -> Connection {
        Connection {
            brokers: self.brokers.clone(),
            tls: self.tls.clone(),
            sasl: self.sasl.clone(),
            client: self.client.clone(),
        }
    }

    /// How records are written.
    pub fn encoding(&self) -> Encoding {
        Encoding {
            format: self.format,
            schemas: self.schemas,
            transaction_metadata: self.transaction_metadata,
            modes: self.debezium,
            registry: self.registry.clone(),
        }
    }

    /// The names of pipeline `pipeline`'s topics and producer.
    pub fn names(&self, pipeline: &str) -> Names {
        Names {
            prefix: self
                .topic_prefix
                .clone()
                .unwrap_or_else(|| pipeline.to_owned()),
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
        self.connection().validate()?;
        self.encoding().validate()?;
        self.topics.validate()?;
        if let Some(prefix) = &self.topic_prefix
            && (prefix.is_empty()
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "topic_prefix: {prefix:?} is not a topic name part (ASCII letters, digits, '.', '_', '-')"
            ));
        }
        if self.timeout.0 < Duration::from_secs(1) {
            return Err("timeout: use at least 1s".into());
        }
        if self.commit_interval.0 >= Duration::from_secs(50) {
            return Err(
                "commit_interval: use less than 50s (Kafka aborts a transaction open for 60s)"
                    .into(),
            );
        }
        Ok(())
    }
}
