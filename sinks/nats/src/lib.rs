//! siphon's NATS JetStream sink (`kind = "nats"`): each event a message on the subject its
//! `destination` names (Debezium's `<prefix>.<schema>.<table>` by default), Debezium's
//! envelope as its payload, and headers: `Nats-Msg-Id` and `siphon.id` (the log's identity
//! and the event's offset), `siphon.offset`, `siphon.op`, `siphon.position`, `siphon.txid`,
//! `debezium.key` (Debezium's key JSON) and `siphon.sink` (the pipeline and sink).
//!
//! A batch is published without waiting between messages, then every publish ack is
//! awaited before the cursor moves. The server drops a message whose `Nats-Msg-Id` it saw
//! within the stream's duplicate window (2 minutes by default), so a batch sent again after
//! a crash or a retry is kept once; past the window, the sink starts after the stream's
//! last message when this sink published it (the stream is what the server keeps), else
//! from siphon's own cursor. The stream is created when missing, with subjects that take
//! every destination; a table whose subjects the stream does not take stops the sink when it
//! opens, so that no event goes nowhere.

mod config;
mod sink;

pub use config::{NatsSinkConfig, Retention, Storage};
pub use sink::{NatsSink, SINK_HEADER};

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "nats"`.
#[derive(Debug)]
pub struct NatsSinkKind;

impl Kind for NatsSinkKind {
    const NAME: &'static str = "nats";
    type Config = NatsSinkConfig;

    fn validate(config: &NatsSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for NatsSinkKind {
    fn build(config: &NatsSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(NatsSink::new(config, pipeline, sink)?))
    }
}
