//! What one SQL database brings to the engine.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use siphon_core::log::LogId;
use siphon_core::schema::Column;
use siphon_core::sink::StoreCursor;
use siphon_core::{Result, Value};

use crate::table::{DroppedColumns, TableMode};

/// What a sink's tables hold and how they follow their source tables (`mode`,
/// `dropped_columns`).
#[derive(Debug, Clone, Copy)]
pub struct TableSettings {
    /// Mirror (current rows) or history (every event).
    pub mode: TableMode,
    /// What becomes of a column the source table dropped.
    pub dropped_columns: DroppedColumns,
}

/// Whose cursor: sink `sink` of pipeline `pipeline` (its row in the cursor table).
#[derive(Debug, Clone)]
pub struct SinkId {
    /// The pipeline's name.
    pub pipeline: String,
    /// The sink's name in the pipeline.
    pub sink: String,
}

/// A target table's name.
#[derive(Debug, Clone)]
pub struct TargetName {
    /// The table as statements name it, quoted (`"schema"."table"`).
    pub table: String,
    /// Its schema, quoted, where the database has schemas that the table may need created.
    pub schema: Option<String>,
}

/// A table as the database's catalog has it (no columns: there is no such table).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Column → the type a staged value is cast to.
    pub columns: HashMap<String, String>,
    /// Column → the declared type, compared with the source column's.
    pub declared: HashMap<String, String>,
    /// siphon made the table, so its column types follow the source table's; a table made
    /// by hand keeps its own types and only gets the columns it lacks.
    pub owned: bool,
}

/// Rows on their way into one statement, which reads them from [`Dialect::staged_from`] as
/// the columns `s.c1 … s.cN` (text, or what [`Dialect::cast`] turns into the column's type)
/// and the offset `s.o`.
#[derive(Debug)]
pub struct Staged<'a> {
    /// The target table (for messages).
    pub table: &'a str,
    /// Per staged column: the target column's name and type.
    pub columns: Vec<(&'a str, &'a str)>,
    /// Per row: a value per staged column (`None`: NULL), then its offset.
    pub rows: Vec<(Vec<Option<&'a Value>>, u64)>,
}

/// How one SQL database does what the engine ([`crate::SqlSink`]) asks: its connection, its
/// type names, its DDL and the way a batch's rows reach a statement. The engine owns the
/// rest: which tables and columns to make, the statements' shape, transactions, the cursor.
///
/// Guarantees the engine relies on:
/// - every statement runs on the one connection [`Dialect::connect`] made, inside the
///   transaction the engine began with [`Dialect::batch`]; a new connection (after a
///   transient error) rolls back what the old one had open;
/// - errors are classified: transient where retrying on a new connection can help (a
///   dropped connection, a conflict, a busy server), permanent where the statement itself
///   is refused;
/// - [`Dialect::alter`] leaves a transaction open as it found one.
#[async_trait]
pub trait Dialect: Send + Sync + std::fmt::Debug + Sized + 'static {
    /// `kind = "…"` of its sinks.
    const KIND: &'static str;
    /// Its settings (`[pipelines.P.sinks.S]` of its kind).
    type Config: DeserializeOwned + std::fmt::Debug + Clone + Send + Sync + 'static;
    /// Whether a failed batch can be undone alone (savepoints), the batches before it in the
    /// open transaction staying. Without savepoints the whole transaction is rolled back,
    /// and a refused record inside a source transaction larger than a batch cannot be set
    /// aside.
    const SAVEPOINTS: bool;

    /// Checks what serde cannot; the message names the key.
    fn validate(config: &Self::Config) -> std::result::Result<(), String>;

    /// How the database's client was built, for `siphon --version`.
    fn build_note() -> Option<&'static str> {
        None
    }

    /// The dialect for a validated configuration, not connected yet.
    fn new(config: Self::Config) -> Result<Self>;

    /// The configuration's table settings.
    fn settings(&self) -> TableSettings;

    /// Connects (again), dropping an earlier connection.
    async fn connect(&mut self) -> Result<()>;

    /// Drops the connection (rolling back an open transaction).
    fn disconnect(&mut self);

    /// After [`Dialect::connect`]: checks that siphon may write here, changing nothing.
    async fn check(&self) -> Result<()>;

    /// Creates what the cursors need (idempotent).
    async fn prepare(&self) -> Result<()>;

    /// Runs statements that return nothing; `what` names them in an error.
    async fn batch(&self, sql: &str, what: &str) -> Result<()>;

    /// The sink's cursor, if saved.
    async fn read_cursor(&self, id: &SinkId) -> Result<Option<StoreCursor>>;

    /// Saves the sink's cursor (in the open transaction, if one is).
    async fn save_cursor(&self, id: &SinkId, next: u64, log: Option<&LogId>) -> Result<()>;

    /// Deletes the sink's cursor.
    async fn delete_cursor(&self, id: &SinkId) -> Result<()>;

    /// The target table of source table `namespace`.`table`.
    fn target(&self, namespace: &str, table: &str) -> TargetName;

    /// The statements that create `target` with the columns of `definition` (the inside of
    /// `CREATE TABLE t (…)`), marked as made by siphon where the database can say so.
    fn create_table(&self, target: &TargetName, definition: &str) -> String;

    /// The catalog's view of a table (quoted name).
    async fn catalog(&self, table: &str) -> Result<Catalog>;

    /// The type a source column gets in a new table.
    fn column_type(&self, column: &Column) -> String;

    /// The type a new column gets from its first non-null value (events without a table
    /// schema); `None` for NULL. Also the types of the columns siphon adds (its offset an
    /// integer, its op text, its position JSON, its commit time a timestamp with time zone)
    /// and of a staged value whose column the catalog does not know (text).
    fn value_type(&self, value: &Value) -> Option<&'static str>;

    /// Whether a column declared `declared` has the type `wanted` (the catalog may spell a
    /// type otherwise than the DDL that made it).
    async fn same_type(&self, declared: &str, wanted: &str) -> Result<bool>;

    /// The `ALTER TABLE` change that gives column `column` (quoted) the type `ty`.
    fn change_type(&self, column: &str, ty: &str) -> String;

    /// Applies changes (`ADD COLUMN …`, `DROP COLUMN …`, [`Dialect::change_type`]'s) to a
    /// table.
    async fn alter(&self, table: &str, changes: &[String]) -> Result<()>;

    /// The statement that empties a table.
    fn truncate(&self, table: &str) -> String;

    /// The target of an `INSERT … ON CONFLICT` and the name its `DO UPDATE … WHERE` refers to
    /// the stored row by: `("t" AS t, t)`, or the table twice where aliases are not allowed.
    fn insert_into(&self, table: &str) -> (String, String);

    /// The expression turning staged column `staged` into a value of type `ty`.
    fn cast(&self, staged: &str, ty: &str) -> String;

    /// The `FROM` item a statement reads `columns` staged columns from, as `s`.
    fn staged_from(&self, columns: usize) -> String;

    /// Runs `sql` (reading [`Dialect::staged_from`]) over the staged rows.
    async fn execute_staged(&self, sql: &str, staged: &Staged<'_>, what: &str) -> Result<()>;
}
