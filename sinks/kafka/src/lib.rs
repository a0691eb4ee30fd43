//! The Kafka sink (`kind = "kafka"`): publishes a pipeline's events to Debezium's topics
//! (the Debezium Server pattern) from any change log, in the same records the Kafka log
//! writes (`siphon_kafka`): one topic per table, the primary key as the key, the event as the
//! value (JSON or Avro), a tombstone after each delete, siphon's headers (the log offset in
//! `siphon.offset`, for consumers that drop what they saw).
//!
//! Each batch is one Kafka transaction holding its records and the sink's cursor (in the
//! cursor topic), so a crash leaves the batch and its cursor or neither, and
//! `read_committed` consumers see each event once. Without transactions (an idempotent
//! producer) the cursor follows the batch's acknowledgement: a crash may publish a batch
//! again.

mod config;
mod sink;

pub use config::KafkaSinkConfig;
pub use sink::KafkaSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "kafka"`.
#[derive(Debug)]
pub struct KafkaSinkKind;

impl Kind for KafkaSinkKind {
    const NAME: &'static str = "kafka";
    type Config = KafkaSinkConfig;

    fn validate(config: &KafkaSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for KafkaSinkKind {
    fn build(config: &KafkaSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(KafkaSink::new(config, pipeline, sink)?))
    }
}
