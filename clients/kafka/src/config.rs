//! Settings shared by the Kafka log and the Kafka sink: how to reach the cluster (brokers, TLS,
//! SASL, librdkafka properties), how the topics siphon creates are made, and how records are
//! written (JSON or Avro).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use siphon_core::Secret;
use siphon_core::tls::TlsMode;
use siphon_core::units::HumanDuration;
use siphon_format::debezium::Modes;

/// The brokers to bootstrap from: `"host:9092,host2:9092"` or a list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Brokers {
    /// Comma-separated `host:port`s.
    One(String),
    /// `host:port`s.
    Many(Vec<String>),
}

impl Brokers {
    /// As librdkafka's `bootstrap.servers` takes them.
    pub fn joined(&self) -> String {
        match self {
            Brokers::One(s) => s.clone(),
            Brokers::Many(v) => v.join(","),
        }
    }

    /// Checks that there is at least one `host:port`.
    pub fn validate(&self) -> Result<(), String> {
        let joined = self.joined();
        let parts: Vec<&str> = joined.split(',').map(str::trim).collect();
        match parts.iter().find(|p| {
            p.rsplit_once(':')
                .is_none_or(|(h, port)| h.is_empty() || port.parse::<u16>().is_err())
        }) {
            Some(bad) => Err(format!(
                "brokers: {bad:?} is not a host:port (for example \"127.0.0.1:9092\")"
            )),
            None => Ok(()),
        }
    }
}

/// TLS to the brokers (`[…tls]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaTls {
    /// "require" (encrypt, trust any certificate), "verify_ca" (the brokers' certificates chain
    /// to `ca_file`, or to the system's) or "verify_full" (and name the broker's host; the
    /// default).
    #[serde(default = "verify_full")]
    pub mode: TlsMode,
    /// CA certificates (PEM) to trust instead of the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM), for brokers that authenticate clients by TLS.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

fn verify_full() -> TlsMode {
    TlsMode::VerifyFull
}

/// SASL authentication (`[…sasl]`): PLAIN or SCRAM.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    /// "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
    pub mechanism: SaslMechanism,
    /// The user.
    pub username: String,
    /// The password (better from the environment or `password_file`).
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// A SASL mechanism librdkafka speaks without Kerberos.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum SaslMechanism {
    /// User and password in the clear (use it with TLS).
    Plain,
    /// SCRAM with SHA-256.
    ScramSha256,
    /// SCRAM with SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// librdkafka's name of it.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl TryFrom<String> for SaslMechanism {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(format!(
                "unknown SASL mechanism {value:?}; allowed: \"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\""
            )),
        }
    }
}

impl KafkaSasl {
    /// The password, from `password` or `password_file`.
    pub fn password(&self) -> Result<Secret, String> {
        match (&self.password, &self.password_file) {
            (Some(p), None) => Ok(p.clone()),
            (None, Some(path)) => Secret::from_file(path)
                .map_err(|e| format!("sasl.password_file {}: {e}", path.display())),
            (Some(_), Some(_)) => {
                Err("sasl: set either password or password_file, not both".into())
            }
            (None, None) => Err("sasl: a password is needed (password or password_file)".into()),
        }
    }
}

/// What Kafka does with a topic's old records (`cleanup.policy` of the topics siphon creates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "String")]
pub enum CleanupPolicy {
    /// Keep records until the topic's retention removes them (Kafka's default; with siphon's
    /// default `retention.ms = -1`, forever).
    #[default]
    Delete,
    /// Keep the latest record of each key (and remove a key some time after its tombstone).
    Compact,
    /// Both: compact, and remove records past retention.
    CompactDelete,
}

impl CleanupPolicy {
    /// Kafka's value of `cleanup.policy`.
    pub fn kafka_value(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }

    /// Whether records a later one of the same key supersedes may go.
    pub fn compacts(self) -> bool {
        self != CleanupPolicy::Delete
    }
}

impl TryFrom<String> for CleanupPolicy {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.replace(' ', "").as_str() {
            "delete" => Ok(CleanupPolicy::Delete),
            "compact" => Ok(CleanupPolicy::Compact),
            "compact,delete" | "delete,compact" => Ok(CleanupPolicy::CompactDelete),
            _ => Err(format!(
                "unknown cleanup policy {value:?}; allowed: \"delete\", \"compact\", \"compact,delete\""
            )),
        }
    }
}

/// How the topics siphon creates are made (`[…topics]`); topics that exist are used as they
/// are.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicSettings {
    /// Partitions of each table's topic.
    pub partitions: i32,
    /// Copies of each partition; -1 takes the broker's default.
    pub replication_factor: i32,
    /// "delete" (the default: records stay until retention removes them; siphon sets
    /// `retention.ms = -1`, forever, unless `config` says otherwise), "compact" or
    /// "compact,delete".
    pub cleanup_policy: CleanupPolicy,
    /// Further topic settings (`"retention.ms" = "604800000"`, `"min.insync.replicas" = "2"`).
    pub config: BTreeMap<String, String>,
}

impl Default for TopicSettings {
    fn default() -> Self {
        TopicSettings {
            partitions: 1,
            replication_factor: -1,
            cleanup_policy: CleanupPolicy::Delete,
            config: BTreeMap::new(),
        }
    }
}

impl TopicSettings {
    /// Checks the numbers; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.partitions < 1 {
            return Err(format!(
                "topics.partitions = {} must be at least 1",
                self.partitions
            ));
        }
        if self.replication_factor == 0 || self.replication_factor < -1 {
            return Err(format!(
                "topics.replication_factor = {} must be at least 1, or -1 for the broker's default",
                self.replication_factor
            ));
        }
        if self.config.contains_key("cleanup.policy") {
            return Err(
                "topics.config: set cleanup.policy with topics.cleanup_policy, not in config"
                    .into(),
            );
        }
        Ok(())
    }

    /// The topic configuration of a table's topic.
    pub fn topic_config(&self) -> BTreeMap<String, String> {
        let mut config = BTreeMap::new();
        config.insert(
            "cleanup.policy".to_owned(),
            self.cleanup_policy.kafka_value().to_owned(),
        );
        if self.cleanup_policy == CleanupPolicy::Delete {
            // A log that stores are rebuilt from keeps everything unless told otherwise.
            config.insert("retention.ms".to_owned(), "-1".to_owned());
        }
        config.extend(self.config.clone());
        config
    }
}

/// How an event's key and value are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RecordFormat {
    /// Debezium's JSON (Kafka Connect's JsonConverter), with or without its `schema`.
    #[default]
    Json,
    /// Avro in Confluent's wire format, the schemas registered with a schema registry.
    Avro,
}

impl TryFrom<String> for RecordFormat {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "json" => Ok(RecordFormat::Json),
            "avro" => Ok(RecordFormat::Avro),
            other => Err(format!(
                "unknown format {other:?}; allowed: \"json\", \"avro\""
            )),
        }
    }
}

/// A Confluent-compatible schema registry (`[…registry]`), for `format = "avro"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Its base URL: `http://registry:8081`.
    pub url: String,
    /// User for basic authentication.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for basic authentication.
    #[serde(default)]
    pub password: Option<Secret>,
    /// CA certificates (PEM) to trust for an `https://` URL instead of the system's.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

impl RegistryConfig {
    /// Checks the URL; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!(
                "registry.url: {:?} must start with http:// or https://",
                self.url
            ));
        }
        if self.password.is_some() && self.username.is_none() {
            return Err("registry.password needs registry.username".into());
        }
        let authority = self.url.split("://").nth(1).unwrap_or_default();
        if authority
            .split('/')
            .next()
            .unwrap_or_default()
            .contains('@')
        {
            return Err(
                "registry.url: give the user and password as registry.username and registry.password, not in the URL (errors show the URL)".into(),
            );
        }
        Ok(())
    }
}

/// How records are written: shared by the log and the sink.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoding {
    /// JSON or Avro.
    pub format: RecordFormat,
    /// JSON: wrap keys and values as `{"schema":…,"payload":…}`.
    pub schemas: bool,
    /// Fill each event's `transaction` block (Debezium's `provide.transaction.metadata`).
    pub transaction_metadata: bool,
    /// Debezium's handling modes for values.
    pub modes: Modes,
    /// The registry, for Avro.
    pub registry: Option<RegistryConfig>,
}

impl Encoding {
    /// Checks that Avro has its registry; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.format, &self.registry) {
            (RecordFormat::Avro, None) => {
                Err("format = \"avro\" needs a schema registry: set registry.url".into())
            }
            (_, Some(r)) => r.validate(),
            _ => Ok(()),
        }
    }
}

/// How to reach the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// Bootstrap brokers.
    pub brokers: Brokers,
    /// TLS, if any.
    pub tls: Option<KafkaTls>,
    /// SASL, if any.
    pub sasl: Option<KafkaSasl>,
    /// librdkafka properties, passed as they are (`"linger.ms" = "10"`); siphon's own settings
    /// win where they overlap.
    pub client: BTreeMap<String, String>,
}

impl Connection {
    /// Checks the brokers, TLS and SASL; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.brokers.validate()?;
        if let Some(tls) = &self.tls {
            if tls.mode == TlsMode::Disable {
                return Err("tls.mode: leave out [tls] for no TLS".into());
            }
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err("tls: cert_file and key_file go together".into());
            }
        }
        if let Some(sasl) = &self.sasl {
            sasl.password()?;
        }
        for key in self.client.keys() {
            if key.starts_with("sasl.") || key.starts_with("ssl.") || key == "security.protocol" {
                return Err(format!(
                    "client: set {key:?} with [tls] and [sasl] instead (they keep secrets out of logs)"
                ));
            }
        }
        Ok(())
    }
}

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

/// Where a reader of siphon's topics starts each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seek {
    /// At the first record it needs (found by a search over the partition's offsets).
    #[default]
    Offset,
    /// At the partition's beginning, skipping what it does not need, and every read of
    /// siphon's own topics (positions, schemas) from their beginning too: for brokers whose
    /// `read_committed` fetches drop records past an aborted transaction (noida-db 0.2.3).
    Beginning,
}

/// What the Kafka log and the Kafka sink are both set up with: the cluster, the topics
/// siphon creates, the producer, and the records' format. Each kind's configuration holds
/// these keys beside its own ([`kafka_config!`] declares them), and hands them out as this.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSettings {
    /// The brokers to bootstrap from.
    pub brokers: Brokers,
    /// TLS to the brokers, if any.
    pub tls: Option<KafkaTls>,
    /// SASL PLAIN or SCRAM, if any.
    pub sasl: Option<KafkaSasl>,
    /// librdkafka properties passed as they are.
    pub client: BTreeMap<String, String>,
    /// The first part of each table's topic (unset: the pipeline's name).
    pub topic_prefix: Option<String>,
    /// How the topics siphon creates are made.
    pub topics: TopicSettings,
    /// Write in Kafka transactions (else with an idempotent producer).
    pub transactions: bool,
    /// The producer's `transactional.id`, if set.
    pub transactional_id: Option<String>,
    /// JSON or Avro.
    pub format: RecordFormat,
    /// JSON: wrap keys and values with their schema.
    pub schemas: bool,
    /// Fill each event's `transaction` block.
    pub transaction_metadata: bool,
    /// Debezium's handling modes for values.
    pub debezium: Modes,
    /// The schema registry, for Avro.
    pub registry: Option<RegistryConfig>,
    /// Compression of produced batches.
    pub compression: Compression,
    /// The longest wait for the brokers in one operation.
    pub timeout: HumanDuration,
    /// Where readers start a partition.
    pub seek: Seek,
}

/// `true`, for the keys that default to it.
pub fn yes() -> bool {
    true
}

/// The default `timeout`.
pub fn default_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

/// Declares a Kafka component's settings (`#[serde(deny_unknown_fields)]`, so that a
/// misspelt key is an error naming it): the keys every Kafka component has, documented here
/// once, then the component's own, and `fn kafka()` handing the shared ones out as
/// [`KafkaSettings`].
#[macro_export]
macro_rules! kafka_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The brokers to bootstrap from: `"host:9092,host2:9092"` or a list.
            pub brokers: $crate::config::Brokers,
            /// TLS to the brokers (`[….tls]`); unset: plaintext.
            #[serde(default)]
            pub tls: Option<$crate::config::KafkaTls>,
            /// SASL PLAIN or SCRAM (`[….sasl]`); unset: none.
            #[serde(default)]
            pub sasl: Option<$crate::config::KafkaSasl>,
            /// librdkafka properties passed as they are (`"linger.ms" = "10"`).
            #[serde(default)]
            pub client: std::collections::BTreeMap<String, String>,
            /// The first part of each table's topic, `<topic_prefix>.<schema>.<table>`
            /// (Debezium's `topic.prefix`). Unset: the pipeline's name.
            #[serde(default)]
            pub topic_prefix: Option<String>,
            /// How the topics siphon creates are made (`[….topics]`).
            #[serde(default)]
            pub topics: $crate::config::TopicSettings,
            /// Write in Kafka transactions, each with siphon's position (exactly once).
            /// `false`: an idempotent producer, for brokers without transactions; a crash
            /// may then write records again (at least once).
            #[serde(default = "siphon_kafka::config::yes")]
            pub transactions: bool,
            /// The producer's `transactional.id`: a second siphon started with it fences the
            /// first. Unset: `siphon.<pipeline>` for the log, `siphon.<pipeline>.<sink>` for
            /// a sink.
            #[serde(default)]
            pub transactional_id: Option<String>,
            /// How keys and values are written: "json" (Debezium's JSON, the default) or
            /// "avro".
            #[serde(default)]
            pub format: $crate::config::RecordFormat,
            /// JSON: wrap keys and values as `{"schema":…,"payload":…}` (Kafka Connect's
            /// JsonConverter with `schemas.enable = true`, its default).
            #[serde(default = "siphon_kafka::config::yes")]
            pub schemas: bool,
            /// Fill each event's `transaction` block (Debezium's
            /// `provide.transaction.metadata`).
            #[serde(default)]
            pub transaction_metadata: bool,
            /// Debezium's handling modes for values (as for the file sink).
            #[serde(default)]
            pub debezium: siphon_format::debezium::Modes,
            /// The schema registry for `format = "avro"` (`[….registry]`).
            #[serde(default)]
            pub registry: Option<$crate::config::RegistryConfig>,
            /// Compression of produced batches: "none", "gzip", "snappy", "lz4" (the
            /// default), "zstd".
            #[serde(default)]
            pub compression: $crate::config::Compression,
            /// The longest wait for the brokers in one operation.
            #[serde(default = "siphon_kafka::config::default_timeout")]
            pub timeout: siphon_core::units::HumanDuration,
            /// Where readers start a partition: "offset" (at the first record they need; the
            /// default) or "beginning" (for brokers whose `read_committed` fetches past an
            /// aborted transaction drop records, as noida-db 0.2.3's do).
            #[serde(default)]
            pub seek: $crate::config::Seek,
            $( $(#[$field_meta])* pub $field : $ty, )*
        }

        impl $name {
            /// The settings every Kafka component has.
            pub fn kafka(&self) -> $crate::config::KafkaSettings {
                $crate::config::KafkaSettings {
                    brokers: self.brokers.clone(),
                    tls: self.tls.clone(),
                    sasl: self.sasl.clone(),
                    client: self.client.clone(),
                    topic_prefix: self.topic_prefix.clone(),
                    topics: self.topics.clone(),
                    transactions: self.transactions,
                    transactional_id: self.transactional_id.clone(),
                    format: self.format,
                    schemas: self.schemas,
                    transaction_metadata: self.transaction_metadata,
                    debezium: self.debezium,
                    registry: self.registry.clone(),
                    compression: self.compression,
                    timeout: self.timeout,
                    seek: self.seek,
                }
            }
        }
    };
}

impl KafkaSettings {
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

    /// The first part of table topics, for pipeline `pipeline`.
    pub fn prefix(&self, pipeline: &str) -> String {
        self.topic_prefix
            .clone()
            .unwrap_or_else(|| pipeline.to_owned())
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_url_holding_a_password_is_refused() {
        let registry = |url: &str| RegistryConfig {
            url: url.to_owned(),
            username: None,
            password: None,
            tls_ca_file: None,
        };
        let e = registry("https://siphon:pw@registry:8081")
            .validate()
            .unwrap_err();
        assert!(e.starts_with("registry.url:") && !e.contains("pw"), "{e}");
        assert!(registry("https://registry:8081/path@x").validate().is_ok());
        assert!(registry("registry:8081").validate().is_err());
    }
}
