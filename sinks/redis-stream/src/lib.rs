//! siphon's Redis Streams sink (`kind = "redis_stream"`): each event an entry of the stream
//! its `destination` names (Debezium's `<prefix>.<schema>.<table>` by default), with the
//! fields `key` and `value` (Debezium's key and envelope JSON), `id` (the log's identity and
//! the event's offset), `op`, `offset`, `position` and `txid`.
//!
//! An entry's id is its log offset n, as `0-<n+1>` (Redis refuses `0-0`), and Redis refuses
//! an id at or below a stream's last: a batch sent again after a crash, a retry or a replay
//! adds nothing it added before, so each event is in its stream once (exactly-once
//! effects). A batch's entries go in one `MULTI`/`EXEC` (an entry Redis refuses as "equal or
//! smaller" was added before), then the sink's cursor, a key beside the streams, follows.
//!
//! Offsets increase along the log, so along each stream. A consumer group's member (on a
//! Kafka log) reads its tables each in order but interleaved: its destinations must name
//! `{table}` (a stream per table), else a later table's entry would hide an earlier one's.

mod config;
mod sink;

pub use config::RedisStreamConfig;
pub use sink::RedisStreamSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "redis_stream"`.
#[derive(Debug)]
pub struct RedisStreamKind;

impl Kind for RedisStreamKind {
    const NAME: &'static str = "redis_stream";
    type Config = RedisStreamConfig;

    fn validate(config: &RedisStreamConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for RedisStreamKind {
    fn build(config: &RedisStreamConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(RedisStreamSink::new(config, pipeline, sink)?))
    }
}
