//! siphon's SQL mirror engine: what every SQL sink does, written once over a [`Dialect`]
//! that says how one database does it. The PostgreSQL and DuckDB sinks are dialects; a third
//! SQL warehouse (ClickHouse, say) would be one more.
//!
//! - `mode = "mirror"`: one table per source table, created from the source table's schema
//!   records (or from the values, for events without one) and changed as the source table
//!   changes, holding the current rows; each row carries `_siphon_offset`, its version, and
//!   an upsert or delete never overwrites a newer version.
//! - `mode = "history"`: one table per source table holding every event (op, offset, source
//!   position, commit time and the row), for audits and "as of" queries.
//!
//! A source transaction and the sink's cursor commit in one target transaction, also when
//! the source transaction spans several batches: a reader never sees half of one. (One
//! exception: DuckDB cannot alter a table in a transaction that wrote to it, so where a
//! table changes in the middle of a source transaction, what came before commits first,
//! without the cursor; a crash re-applies it, idempotently, since every row carries its
//! offset.) Each batch
//! is a handful of set-based statements per table over rows the dialect stages (PostgreSQL:
//! `unnest` of text arrays; DuckDB: its appender into a staging table), not a statement per
//! row.

mod dialect;
mod sink;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;

pub use dialect::{Catalog, Dialect, SinkId, Staged, TableSettings, TargetName};
pub use sink::{SqlKind, SqlSink};
