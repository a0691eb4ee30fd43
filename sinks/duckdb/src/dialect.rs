//! DuckDB as a dialect of the SQL mirror engine.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;
use duckdb::Connection;
use siphon_core::log::LogId;
use siphon_core::schema::Column;
use siphon_core::sink::StoreCursor;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::{Error, Result, Value};
use siphon_sink_sql::table::{NAME_PLACEHOLDERS, quote};
use siphon_sink_sql::{Catalog, Dialect, SinkId, Staged, TableSettings, TargetName};

use crate::config::DuckdbSinkConfig;
use crate::types::{cast, column_type, duck_type, staged, staging_type, unholdable};

/// Where the cursors live in the database.
const CURSORS: &str = "siphon_cursors";
/// The staging table a statement reads its rows from.
const STAGE: &str = "_siphon_stage";

/// DuckDB's side of a [`crate::DuckdbSink`]: its connection, types and statements.
#[derive(Debug)]
pub struct Duckdb {
    config: DuckdbSinkConfig,
    table: NameTemplate,
    /// DuckDB's connection is not `Sync`; the engine calls one method at a time.
    conn: Mutex<Option<Connection>>,
    /// (table, column)s whose values a column type could not hold, warned of once.
    unholdable_warned: Mutex<HashSet<(String, String)>>,
}

/// Runs DuckDB's synchronous work without stalling the async workers where the runtime allows.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Duckdb {
    /// Another connection to the same database, for queries in this process (DuckDB lets one
    /// process at a time open a file for writing).
    pub fn connection(&self) -> Option<Connection> {
        self.conn
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|c| c.try_clone().ok())
    }

    fn error(&self, e: &duckdb::Error, what: &str) -> Error {
        let message = format!("duckdb {} {what}: {e}", self.config.path.display());
        // Another process holding the file is the one condition that passes by itself.
        if message.contains("lock") {
            Error::transient(message)
        } else {
            Error::permanent(message)
        }
    }

    /// Runs `f` on the connection, on the runtime's blocking section.
    fn locked<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        blocking(|| {
            let conn = self.conn.lock().unwrap();
            let conn = conn
                .as_ref()
                .ok_or_else(|| Error::transient("the duckdb sink is not open"))?;
            f(conn)
        })
    }

    /// Runs `f` on the connection, on the runtime's blocking section; `what` names it in an
    /// error.
    fn with<R>(&self, what: &str, f: impl FnOnce(&Connection) -> duckdb::Result<R>) -> Result<R> {
        self.locked(|conn| f(conn).map_err(|e| self.error(&e, what)))
    }

    /// How the catalog spells a type (`TIMESTAMPTZ` is `TIMESTAMP WITH TIME ZONE` there).
    fn spelling(&self, ty: &str) -> Result<String> {
        self.with("reading a type's name", |conn| {
            conn.query_row(&format!("SELECT typeof(CAST(NULL AS {ty}))"), [], |r| {
                r.get(0)
            })
        })
    }

    /// Warns once per column of a value its DECIMAL column cannot hold (staged as NULL).
    fn warn_unholdable(&self, staged: &Staged<'_>) {
        for (values, _) in &staged.rows {
            for (value, (name, ty)) in values.iter().zip(&staged.columns) {
                if unholdable(*value, ty)
                    && self
                        .unholdable_warned
                        .lock()
                        .unwrap()
                        .insert((staged.table.to_owned(), (*name).to_owned()))
                {
                    tracing::warn!(table = %staged.table, column = name, column_type = ty, value = ?value,
                        "DuckDB's DECIMAL holds no NaN or infinity: such values of this column are written as NULL (said once per column)");
                }
            }
        }
    }
}

#[async_trait]
impl Dialect for Duckdb {
    const KIND: &'static str = "duckdb";
    type Config = DuckdbSinkConfig;
    /// DuckDB has none, and aborts the whole transaction on an error.
    const SAVEPOINTS: bool = false;

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

    fn new(config: DuckdbSinkConfig) -> Result<Self> {
        Ok(Duckdb {
            table: NameTemplate::parse(&config.table, NAME_PLACEHOLDERS).map_err(Error::Config)?,
            config,
            conn: Mutex::new(None),
            unholdable_warned: Mutex::default(),
        })
    }

    fn settings(&self) -> TableSettings {
        TableSettings {
            mode: self.config.mode,
            dropped_columns: self.config.dropped_columns,
        }
    }

    /// Opens the file again (dropping the connection rolls back an open transaction).
    async fn connect(&mut self) -> Result<()> {
        self.disconnect();
        if let Some(dir) = self
            .config
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::permanent(format!("duckdb: cannot create {}: {e}", dir.display()))
            })?;
        }
        let conn = blocking(|| Connection::open(&self.config.path))
            .map_err(|e| self.error(&e, "opening"))?;
        *self.conn.get_mut().unwrap() = Some(conn);
        Ok(())
    }

    fn disconnect(&mut self) {
        *self.conn.get_mut().unwrap() = None;
    }

    /// Opening the file is the check.
    async fn check(&self) -> Result<()> {
        Ok(())
    }

    async fn prepare(&self) -> Result<()> {
        self.batch(
            &format!(
                "CREATE TABLE IF NOT EXISTS {CURSORS} (pipeline VARCHAR NOT NULL, sink VARCHAR NOT NULL, \
                 next_offset BIGINT NOT NULL, log_id VARCHAR, PRIMARY KEY (pipeline, sink)); \
                 ALTER TABLE {CURSORS} ADD COLUMN IF NOT EXISTS log_id VARCHAR"
            ),
            "preparing the cursor table",
        )
        .await
    }

    async fn batch(&self, sql: &str, what: &str) -> Result<()> {
        self.with(what, |conn| conn.execute_batch(sql))
    }

    async fn read_cursor(&self, id: &SinkId) -> Result<Option<StoreCursor>> {
        let sql =
            format!("SELECT next_offset, log_id FROM {CURSORS} WHERE pipeline = ? AND sink = ?");
        self.with("reading the cursor", |conn| {
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query(duckdb::params![id.pipeline, id.sink])?;
            Ok(match rows.next()? {
                Some(row) => Some(StoreCursor {
                    next_offset: row.get::<_, i64>(0)? as u64,
                    log: row
                        .get::<_, Option<String>>(1)?
                        .as_deref()
                        .map(LogId::from_stored),
                }),
                None => None,
            })
        })
    }

    async fn save_cursor(&self, id: &SinkId, next: u64, log: Option<&LogId>) -> Result<()> {
        let log = log.map(LogId::as_str);
        self.with("saving the cursor", |conn| {
            conn.execute(
                &format!(
                    "INSERT INTO {CURSORS} (pipeline, sink, next_offset, log_id) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (pipeline, sink) DO UPDATE SET next_offset = excluded.next_offset, log_id = excluded.log_id"
                ),
                duckdb::params![id.pipeline, id.sink, next as i64, log],
            )
            .map(drop)
        })
    }

    async fn delete_cursor(&self, id: &SinkId) -> Result<()> {
        self.with("deleting the cursor", |conn| {
            conn.execute(
                &format!("DELETE FROM {CURSORS} WHERE pipeline = ? AND sink = ?"),
                duckdb::params![id.pipeline, id.sink],
            )
            .map(drop)
        })
    }

    /// In DuckDB's default schema `main`.
    fn target(&self, namespace: &str, table: &str) -> TargetName {
        TargetName {
            table: quote(
                &self
                    .table
                    .render(&[("schema", namespace), ("table", table)]),
            ),
            schema: None,
        }
    }

    fn create_table(&self, target: &TargetName, definition: &str) -> String {
        format!("CREATE TABLE IF NOT EXISTS {} ({definition})", target.table)
    }

    /// The catalog's types are both the cast and the declared types. Every table siphon
    /// writes to follows its source table (DuckDB keeps no comment to tell them apart).
    async fn catalog(&self, table: &str) -> Result<Catalog> {
        let unquoted = table.trim_matches('"').replace("\"\"", "\"");
        let columns: std::collections::HashMap<String, String> =
            self.with("reading the catalog", |conn| {
                let mut stmt = conn.prepare(
                    "SELECT column_name, data_type FROM information_schema.columns \
                     WHERE table_schema = 'main' AND table_name = ?",
                )?;
                let rows = stmt.query_map([unquoted], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })?;
                rows.collect()
            })?;
        Ok(Catalog {
            declared: columns.clone(),
            columns,
            owned: true,
        })
    }

    fn column_type(&self, column: &Column) -> String {
        duck_type(column)
    }

    fn value_type(&self, value: &Value) -> Option<&'static str> {
        column_type(value)
    }

    async fn same_type(&self, declared: &str, wanted: &str) -> Result<bool> {
        Ok(declared == wanted || declared == self.spelling(wanted)?)
    }

    fn change_type(&self, column: &str, ty: &str) -> String {
        format!("ALTER COLUMN {column} TYPE {ty}")
    }

    /// One change per statement (DuckDB takes no more), each in a transaction of its own:
    /// DuckDB refuses to commit a transaction that both wrote to a table and altered it. What
    /// the open transaction wrote so far commits first, without the cursor, so a crash
    /// re-applies it (idempotently: every row carries its offset).
    async fn alter(&self, table: &str, changes: &[String]) -> Result<()> {
        for change in changes {
            let altered = self
                .batch(
                    &format!("COMMIT; ALTER TABLE {table} {change}; BEGIN TRANSACTION"),
                    "changing the target table",
                )
                .await;
            if altered.is_err() {
                // A refused change stops the statements before the BEGIN: open the
                // transaction the engine expects (if the COMMIT ran, there is none).
                let _ = self
                    .batch("BEGIN TRANSACTION", "beginning a transaction")
                    .await;
            }
            altered?;
        }
        Ok(())
    }

    fn truncate(&self, table: &str) -> String {
        format!("DELETE FROM {table}")
    }

    fn insert_into(&self, table: &str) -> (String, String) {
        (table.to_owned(), table.to_owned())
    }

    fn cast(&self, staged: &str, ty: &str) -> String {
        cast(staged, ty)
    }

    fn staged_from(&self, _columns: usize) -> String {
        format!("{STAGE} AS s")
    }

    /// Fills the staging table through DuckDB's appender (a column per staged column, typed
    /// for its target column, then the offset `o`), then runs `sql` over it.
    async fn execute_staged(&self, sql: &str, rows: &Staged<'_>, what: &str) -> Result<()> {
        self.warn_unholdable(rows);
        let defs: Vec<String> = rows
            .columns
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| format!("c{} {}", i + 1, staging_type(ty)))
            .chain(std::iter::once("o BIGINT".to_owned()))
            .collect();
        let create = format!("CREATE OR REPLACE TEMP TABLE {STAGE} ({})", defs.join(", "));
        // One blocking section for the three steps (each entry hands the worker's other tasks
        // to another thread).
        self.locked(|conn| {
            conn.execute_batch(&create)
                .map_err(|e| self.error(&e, "creating the staging table"))?;
            append(conn, rows).map_err(|e| self.error(&e, "staging rows"))?;
            conn.execute_batch(sql).map_err(|e| self.error(&e, what))
        })
    }
}

/// Appends the staged rows to the staging table.
fn append(conn: &Connection, rows: &Staged<'_>) -> duckdb::Result<()> {
    let mut appender = conn.appender(STAGE)?;
    for (values, offset) in &rows.rows {
        let values = values
            .iter()
            .zip(&rows.columns)
            .map(|(value, (_, ty))| staged(*value, ty))
            .chain(std::iter::once(duckdb::types::Value::BigInt(
                *offset as i64,
            )));
        appender.append_row(duckdb::appender_params_from_iter(values))?;
    }
    appender.flush()
}
