//! `[pipelines.NAME.sinks.SINK]` with `kind = "kafka"`: the keys every Kafka component has
//! (`siphon_kafka::kafka_config!`), and the sink's cursor topic.

siphon_kafka::kafka_config! {
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
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.kafka().validate()
    }
}
