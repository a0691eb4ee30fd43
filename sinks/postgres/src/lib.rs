//! siphon's PostgreSQL sink (`kind = "postgres"`): a warehouse or replica that follows the
//! source tables.
//!
//! - `mode = "mirror"`: one table per source table, created from the events and given new
//!   columns as they appear, holding the current rows; each row carries `_siphon_offset`, its
//!   version, and an upsert or delete never overwrites a newer version.
//! - `mode = "history"`: one table per source table holding every event (op, offset, source
//!   position, commit time and the row), for audits and "as of" queries.
//!
//! A source transaction and the sink's cursor (`siphon.cursors`) commit in one target
//! transaction, also when the source transaction spans several batches: a reader never sees
//! half of one. Each batch is a handful of set-based statements (`unnest` of text arrays cast
//! to the target types), not a statement per row.

mod config;
mod encode;
mod sink;

pub use config::{PostgresSinkConfig, TableMode};
pub use sink::PostgresSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "postgres"`.
#[derive(Debug)]
pub struct PostgresSinkKind;

impl Kind for PostgresSinkKind {
    const NAME: &'static str = "postgres";
    type Config = PostgresSinkConfig;
    fn validate(config: &PostgresSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for PostgresSinkKind {
    fn build(config: &PostgresSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(PostgresSink::new(config.clone(), pipeline, sink)?))
    }
}
