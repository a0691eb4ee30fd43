//! siphon's RabbitMQ sink (`kind = "rabbitmq"`, with `lapin`, the maintained AMQP 0-9-1
//! client on tokio): each event a persistent message published to one exchange (declared
//! durable when missing) with the destination as its routing key, Debezium's envelope as
//! its body, `message_id` the event's id (the log's identity and its offset), and headers
//! `siphon.id`, `siphon.offset`, `siphon.op`, `siphon.position`, `siphon.txid` and
//! `debezium.key` (Debezium's key JSON).
//!
//! Publisher confirms are awaited before the cursor (siphon's own) moves. Messages are
//! published `mandatory`: RabbitMQ confirms a message no queue took and drops it, so the
//! sink treats its return as a rejected record (the pipeline's `on_error` says what then).
//! A crash between the confirms and the cursor sends the batch again: at least once, and a
//! consumer drops what it saw by `message_id`.

mod config;
mod sink;

pub use config::{ExchangeType, RabbitmqSinkConfig};
pub use sink::RabbitmqSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "rabbitmq"`.
#[derive(Debug)]
pub struct RabbitmqSinkKind;

impl Kind for RabbitmqSinkKind {
    const NAME: &'static str = "rabbitmq";
    type Config = RabbitmqSinkConfig;

    fn validate(config: &RabbitmqSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for RabbitmqSinkKind {
    fn build(config: &RabbitmqSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(RabbitmqSink::new(config, pipeline, sink)?))
    }
}
