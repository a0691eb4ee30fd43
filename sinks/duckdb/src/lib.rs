//! siphon's DuckDB sink (`kind = "duckdb"`): an embedded warehouse in one database file.
//!
//! - `mode = "mirror"`: one table per source table, created from the source table's schema
//!   records (the closest exact DuckDB type of each column; from the values for events without
//!   one) and changed as the source table changes, holding the current rows; each row carries `_siphon_offset`, its
//!   version, and an upsert or delete never overwrites a newer version.
//! - `mode = "history"`: every event appended with its op, offset, source position and commit
//!   time: an audit table for "as of" queries.
//!
//! A source transaction and the sink's cursor (table `siphon_cursors`) commit in one DuckDB
//! transaction, also when the source transaction spans several batches. Rows reach DuckDB
//! through its appender into a staging table, then one `INSERT … ON CONFLICT` (or `DELETE …
//! USING`) per table and batch.
//!
//! DuckDB is a synchronous library: its calls run on the runtime's blocking section
//! (`block_in_place`), not on the async worker.

mod config;
mod sink;
mod types;

pub use config::{DuckdbSinkConfig, TableMode};
pub use sink::DuckdbSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "duckdb"`.
#[derive(Debug)]
pub struct DuckdbKind;

impl Kind for DuckdbKind {
    const NAME: &'static str = "duckdb";
    type Config = DuckdbSinkConfig;
    fn validate(config: &DuckdbSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }

    fn build_note() -> Option<&'static str> {
        Some(if cfg!(feature = "bundled") {
            "bundled"
        } else {
            "prebuilt libduckdb.so"
        })
    }
}

impl SinkKind for DuckdbKind {
    fn build(config: &DuckdbSinkConfig, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(DuckdbSink::new(config.clone(), pipeline, sink)?))
    }
}
