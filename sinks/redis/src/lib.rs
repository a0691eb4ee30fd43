//! siphon's Redis sink (`kind = "redis"`): keeps each captured row under
//! `{prefix}{key template}` as a hash or a JSON string (`mode = "upsert"`), or deletes the key
//! on every change so that the application re-reads the database (`mode = "invalidate"`).
//!
//! A batch is reduced to its net change per key and pipelined to Redis; once Redis has
//! acknowledged every command, the sink's cursor (a key next to the data) moves past the
//! batch. Records below the stored cursor are skipped, so a
//! retried batch never regresses a key, and a batch interrupted midway is applied again whole
//! (each key ends with its last value). A replay without `--reset` rewinds the cursor and
//! re-applies over the current keys.

mod client;
mod config;
mod encode;
mod resp;
mod sink;

pub use client::RedisClient;
pub use config::{RedisFormat, RedisMode, RedisSinkConfig};
pub use sink::RedisSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "redis"`.
#[derive(Debug)]
pub struct RedisKind;

impl Kind for RedisKind {
    const NAME: &'static str = "redis";
    type Config = RedisSinkConfig;
    fn validate(config: &RedisSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for RedisKind {
    fn build(config: &RedisSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(RedisSink::new(config.clone(), pipeline, sink)?))
    }
}
