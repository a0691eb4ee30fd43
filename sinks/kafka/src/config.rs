//! `[pipelines.NAME.sinks.SINK]` with `kind = "kafka"`: the keys every Kafka component has
//! (`siphon_kafka::kafka_config!`), those that shape every message sink's messages
//! (`siphon_sink_message::message_fields!`: `destination`, `value`, `row_fields`, `deletes`),
//! and the sink's cursor topic.

use siphon_sink_message::MessageSettings;

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
        MessageSettings {
            destination: self.destination.clone(),
            prefix: self.topic_prefix.clone(),
            schemas: self.schemas,
            transaction_metadata: self.transaction_metadata,
            debezium: self.debezium,
            value: self.value,
            row_state: self.row_state(),
        }
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.kafka().validate()?;
        self.message().validate()
    }
}
