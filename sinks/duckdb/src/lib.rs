//! siphon's DuckDB sink (`kind = "duckdb"`): an embedded warehouse in one database file, in
//! mirror or history tables (`mode`). It is DuckDB's dialect of the SQL mirror engine
//! ([`siphon_sink_sql`], which says what the tables hold and how transactions commit): each
//! column gets the closest exact DuckDB type, rows reach DuckDB through its appender into a
//! staging table, and its cursors live in the table `siphon_cursors`.
//!
//! DuckDB is a synchronous library: its calls run on the runtime's blocking section
//! (`block_in_place`), not on the async worker.

mod config;
mod dialect;
mod types;

pub use config::{DuckdbSinkConfig, TableMode};
pub use dialect::Duckdb;

/// Keeps mirror or history tables in a DuckDB file: the SQL mirror engine with DuckDB's
/// dialect.
pub type DuckdbSink = siphon_sink_sql::SqlSink<Duckdb>;

/// `kind = "duckdb"`.
pub type DuckdbKind = siphon_sink_sql::SqlKind<Duckdb>;
