//! `[pipelines.NAME.sinks.SINK]` with `kind = "duckdb"`.

use std::path::PathBuf;

use serde::Deserialize;
use siphon_core::sink::routing::NameTemplate;
use siphon_sink_sql::table::NAME_PLACEHOLDERS;
pub use siphon_sink_sql::table::{DroppedColumns, TableMode};

/// Settings of a DuckDB sink.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DuckdbSinkConfig {
    /// The database file (created if missing). No other process may hold it open for writing
    /// while siphon runs (DuckDB allows one writer).
    pub path: PathBuf,
    /// `mirror` (current rows) or `history` (every event).
    #[serde(default)]
    pub mode: TableMode,
    /// Target table of a source table: `{schema}` and `{table}` are the source's. In DuckDB's
    /// default schema `main`.
    #[serde(default = "default_table")]
    pub table: String,
    /// A column the source table dropped: "keep" it in the target (the default; new rows
    /// leave it NULL) or "drop" it there too.
    #[serde(default)]
    pub dropped_columns: DroppedColumns,
}

fn default_table() -> String {
    "{schema}_{table}".into()
}

impl DuckdbSinkConfig {
    /// A mirror in the database file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DuckdbSinkConfig {
            path: path.into(),
            mode: TableMode::default(),
            table: default_table(),
            dropped_columns: DroppedColumns::default(),
        }
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        NameTemplate::parse(&self.table, NAME_PLACEHOLDERS).map_err(|e| format!("table: {e}"))?;
        if self.path.as_os_str().is_empty() {
            return Err("path: must name a database file".into());
        }
        Ok(())
    }
}
