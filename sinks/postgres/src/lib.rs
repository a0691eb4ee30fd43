//! siphon's PostgreSQL sink (`kind = "postgres"`): a warehouse or replica that follows the
//! source tables, in mirror or history tables (`mode`). It is PostgreSQL's dialect of the SQL
//! mirror engine ([`siphon_sink_sql`], which says what the tables hold and how transactions
//! commit): its rows reach a statement as `unnest` of text arrays cast to the target types,
//! a refused batch is undone alone under a savepoint, and its cursors live in
//! `siphon.cursors`.

mod config;
mod dialect;
mod encode;

pub use config::{PostgresSinkConfig, TableMode};
pub use dialect::Postgres;

/// Keeps mirror or history tables in a PostgreSQL database: the SQL mirror engine with
/// PostgreSQL's dialect.
pub type PostgresSink = siphon_sink_sql::SqlSink<Postgres>;

/// `kind = "postgres"`.
pub type PostgresSinkKind = siphon_sink_sql::SqlKind<Postgres>;
