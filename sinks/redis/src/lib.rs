//! siphon's Redis sink (`kind = "redis"`): keeps each captured row under
//! `{prefix}{key template}` as a hash or a JSON string (`mode = "upsert"`), or deletes the key
//! on every change so that the application re-reads the database (`mode = "invalidate"`).
//!
//! Each batch is one Lua script, which Redis runs atomically: it applies the changes and
//! moves the sink's cursor (a key next to the data) in the same step. Records below the stored
//! cursor are skipped, so a replay or a retried batch never regresses a key.

mod config;
mod encode;
mod sink;

pub use config::{RedisFormat, RedisMode, RedisSinkConfig};
pub use sink::RedisSink;
