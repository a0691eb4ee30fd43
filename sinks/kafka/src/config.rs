//! `[pipelines.NAME.sinks.SINK]` with `kind = "kafka"`: the keys every Kafka component has
//! (`siphon_kafka::kafka_config!`), those that shape every message sink's messages
//! (`siphon_sink_message::message_fields!`: `destination`, `value`, `row_fields`, `deletes`),
//! and the sink's cursor topic.

use siphon_kafka::config::RecordFormat;
use siphon_sink_message::{MessageSettings, ValueForm};

siphon_sink_message::message_fields! {
    [siphon_kafka::kafka_config]
    /// Settings of a Kafka sink.
    pub struct KafkaSinkConfig {
        /// The compacted topic of the sink's cursor (the next offset of the pipeline's log to
        /// publish and the log's identity), written in each transaction with the records.
        /// Unset: `siphon.<pipeline>.<sink>.cursor`.
        #[serde(default)]
        pub cursor_topic: Option<String>,
    }
}

impl KafkaSinkConfig {
    /// The settings every message sink has: `{prefix}` is `topic_prefix`, and what Kafka
    /// does not allow in a topic name becomes `_`.
    pub fn message(&self) -> MessageSettings {
        self.message_with(
            self.topic_prefix.clone(),
            self.schemas,
            self.transaction_metadata,
            self.debezium,
        )
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.kafka().validate()?;
        let message = self.message();
        message.validate()?;
        if message.value == ValueForm::Outbox {
            if self.topics.cleanup_policy.compacts() {
                return Err(
                    "topics.cleanup_policy: routed outbox events are events, not row states, and compaction would keep one per aggregate: use \"delete\"".into(),
                );
            }
            if self.format != RecordFormat::Json {
                return Err(
                    "format: value = \"outbox\" is written as JSON only (Avro is not done yet)"
                        .into(),
                );
            }
        } else if self.topics.cleanup_policy.compacts() && !message.per_table() {
            return Err(format!(
                "destination: {:?} puts several tables' records in one topic, and compaction (topics.cleanup_policy) would keep one record per key across them: name {{schema}} and {{table}} in it",
                self.destination
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> KafkaSinkConfig {
        let serde_json::Value::Object(mut doc) = extra else {
            panic!("keys, as an object")
        };
        doc.insert("brokers".into(), "127.0.0.1:9092".into());
        serde_json::from_value(doc.into()).unwrap()
    }

    /// Compaction keeps one record per key in a topic: tables sharing one would lose each
    /// other's rows (one's tombstone deleting another's key).
    #[test]
    fn compacted_topics_of_several_tables_are_refused() {
        let shared = config(serde_json::json!({
            "destination": "{prefix}.all",
            "topics": { "cleanup_policy": "compact" },
        }));
        let error = shared.validate().unwrap_err();
        assert!(error.starts_with("destination:"), "{error}");
        assert!(
            config(serde_json::json!({ "destination": "{prefix}.all" }))
                .validate()
                .is_ok(),
            "without compaction a shared topic is the user's choice"
        );
        assert!(
            config(serde_json::json!({
                "destination": "{prefix}.{schema}.{table}.{op}",
                "topics": { "cleanup_policy": "compact" },
            }))
            .validate()
            .is_ok()
        );
    }

    /// Routed outbox events are events: compaction would keep one per aggregate; and they
    /// are written as JSON only.
    #[test]
    fn an_outbox_into_compacted_topics_or_avro_is_refused_naming_the_key() {
        let compacted = config(serde_json::json!({
            "value": "outbox",
            "topics": { "cleanup_policy": "compact" },
        }));
        let error = compacted.validate().unwrap_err();
        assert!(error.starts_with("topics.cleanup_policy:"), "{error}");
        let avro = config(serde_json::json!({
            "value": "outbox",
            "format": "avro",
            "registry": { "url": "http://127.0.0.1:8081" },
        }));
        let error = avro.validate().unwrap_err();
        assert!(error.starts_with("format:"), "{error}");
        let bad_destination = config(serde_json::json!({
            "value": "outbox",
            "outbox": { "destination": "events.{table}" },
        }));
        let error = bad_destination.validate().unwrap_err();
        assert!(error.starts_with("outbox.destination:"), "{error}");
        assert!(
            config(serde_json::json!({ "value": "outbox" }))
                .validate()
                .is_ok()
        );
    }
}
