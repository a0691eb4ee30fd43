//! Table schemas: what a captured table's columns are, as its source defines them.
//!
//! A source registers a [`TableSchema`] in its log's [`SchemaStore`] when it first captures
//! a table and whenever the table's shape changes; each change event then carries its values
//! only and the [`SchemaId`] of the version in force. The store is the log's own (the file
//! log keeps a file beside its segments, never compacted), so a reader positioned anywhere — a replay from
//! offset 0, `log tail --from N`, after compaction — finds every version a record refers to.
//! Registration is idempotent (an equal schema gets its existing id back) and durable before
//! it returns, so no record can refer to a schema a crash took back.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::name::{Name, TableName};

/// The version of a table schema in one log's registry: dense, from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SchemaId(pub u32);

impl SchemaId {
    /// The id of a schema not registered yet.
    pub const UNREGISTERED: SchemaId = SchemaId(0);
}

/// What the values of a column are, as far as sinks and the JSON encoding must know.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ColumnKind {
    /// bool
    Bool,
    /// A 2-byte integer.
    Int16,
    /// A 4-byte integer.
    Int32,
    /// An 8-byte integer.
    Int64,
    /// A 4-byte float.
    Float32,
    /// An 8-byte float.
    Float64,
    /// An exact decimal, with the precision and scale the column declares (none: any).
    Decimal {
        /// Total digits, if declared.
        precision: Option<u32>,
        /// Digits after the point, if declared.
        scale: Option<u32>,
    },
    /// Text, with the length the column declares (`varchar(n)`, `char(n)`).
    Text {
        /// Maximum (or, for `char`, exact) length in characters, if declared.
        length: Option<u32>,
    },
    /// Bytes.
    Bytes,
    /// A JSON document (`binary` for jsonb).
    Json {
        /// Stored parsed (jsonb) rather than as written (json).
        binary: bool,
    },
    /// A UUID.
    Uuid,
    /// A date.
    Date,
    /// A time of day.
    Time,
    /// A signed span of hours, minutes and seconds written as a time (MySQL's `TIME`, from
    /// `-838:59:59` to `838:59:59`): its values are [`Value::Time`](crate::Value::Time), which
    /// may then be negative or a day and more. SQL stores keep it as an interval.
    Duration,
    /// A time of day with an offset.
    TimeTz,
    /// A timestamp without zone.
    Timestamp,
    /// An instant.
    TimestampTz,
    /// An interval.
    Interval,
    /// An enum, with its labels in order.
    Enum {
        /// The labels, in the type's order.
        labels: Vec<String>,
    },
    /// An array of the element kind.
    Array(Box<ColumnKind>),
    /// A type siphon keeps as the source prints it (inet, money, bit, composites).
    Other,
    /// A spatial type (MySQL's geometry types): its values are
    /// [`Value::Geometry`](crate::Value::Geometry). Last of the variants: schema records number
    /// them.
    Geometry {
        /// Only points (MySQL's `POINT`), which Debezium writes with their coordinates.
        point: bool,
    },
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Column {
    /// Its name.
    pub name: Name,
    /// The source's type as its own DDL spells it, modifiers included (PostgreSQL's
    /// `format_type`: `numeric(10,2)`, `character varying(20)`, `text[]`).
    pub type_name: String,
    /// The source's type id (PostgreSQL's type OID; 0 where the source has none).
    pub type_id: u32,
    /// The source's type modifier (PostgreSQL's `atttypmod`; -1 for none).
    pub type_modifier: i32,
    /// What its values are.
    pub kind: ColumnKind,
    /// It may hold NULL.
    pub nullable: bool,
    /// The source computes its values (a generated column).
    pub generated: bool,
}

/// A table as its source defines it at one point of the change stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableSchema {
    /// Its id in the log's registry ([`SchemaId::UNREGISTERED`] until registered).
    pub id: SchemaId,
    /// The connector kind, as events' `source.connector` names it (`postgresql`, `mysql`).
    pub connector: Name,
    /// The logical server name (the pipeline), as events' `source.name` names it.
    pub server: Name,
    /// The database.
    pub database: Name,
    /// The schema holding the table (PostgreSQL); `None` where the source has none.
    pub schema: Option<Name>,
    /// The table's name.
    pub table: Name,
    /// The columns, in the table's order.
    pub columns: Vec<Column>,
    /// Positions in `columns` of the primary-key (or replica identity) columns, in key order;
    /// empty for a table without one.
    pub key: Vec<usize>,
}

impl TableSchema {
    /// `schema.table`, or `database.table` where the source has no schemas.
    pub fn name(&self) -> TableName {
        TableName::new(
            self.schema.as_ref().unwrap_or(&self.database).clone(),
            self.table.clone(),
        )
    }

    /// The position of a column.
    pub fn position(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| &*c.name == column)
    }

    /// The column of that name.
    pub fn column(&self, column: &str) -> Option<&Column> {
        self.columns.iter().find(|c| &*c.name == column)
    }

    /// Why this schema cannot be right, if it cannot.
    pub fn invalid(&self) -> Option<String> {
        let columns = self.columns.len();
        self.key
            .iter()
            .find(|&&k| k >= columns)
            .map(|k| format!("{}: key column {k} of {columns} columns", self.name()))
    }

    /// Whether `self` and `other` describe the same table version (ids aside).
    pub fn same_shape(&self, other: &TableSchema) -> bool {
        TableSchema {
            id: other.id,
            ..self.clone()
        } == *other
    }
}

/// Finds schemas by id: what decoding a change record needs.
pub trait SchemaLookup {
    /// The schema of that id, if the registry holds it.
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>>;
}

/// The schema versions of one log: what its records refer to. Each log keeps its own, as
/// durably as its records and never compacted, so that a reader positioned anywhere finds
/// every version a record refers to.
///
/// Guarantees a store must keep:
/// - [`SchemaStore::register`] is idempotent (an equal version gets its existing id back)
///   and durable before it returns, so no record can refer to a version a crash took back;
/// - ids are dense from 1 in registration order, and an id never names another version;
/// - a store opened read-only finds versions registered since by the writing process.
pub trait SchemaStore: SchemaLookup + Send + Sync + std::fmt::Debug {
    /// Registers a version of a table (its `id` is ignored) and returns it with its id: the
    /// existing one if an equal version is registered, else a new one, durable on return.
    fn register(&self, schema: &TableSchema) -> Result<Arc<TableSchema>>;

    /// Every version, in id order.
    fn all(&self) -> Vec<Arc<TableSchema>>;
}

/// A log's schema versions in memory, by id and by table: what a [`SchemaStore`] keeps of
/// the versions it holds, and how it finds the one a registration asks for.
#[derive(Debug, Default)]
pub struct SchemaVersions {
    /// Every version, by id: `versions[i]` has id `i + 1`.
    versions: Vec<Arc<TableSchema>>,
    /// Versions by table, to find an equal one on registration.
    by_table: std::collections::HashMap<TableName, Vec<usize>>,
}

impl SchemaVersions {
    /// The registered version of `schema`'s table with its shape, if any.
    pub fn find(&self, schema: &TableSchema) -> Option<Arc<TableSchema>> {
        self.by_table.get(&schema.name()).and_then(|ids| {
            ids.iter()
                .map(|&i| &self.versions[i])
                .find(|v| v.same_shape(schema))
                .cloned()
        })
    }

    /// `schema` as the next version (with the next id), not yet added.
    pub fn next_version(&self, schema: &TableSchema) -> Result<Arc<TableSchema>> {
        let id = SchemaId(
            u32::try_from(self.versions.len() + 1)
                .map_err(|_| crate::Error::Config("the schema registry is full".into()))?,
        );
        Ok(Arc::new(TableSchema {
            id,
            ..schema.clone()
        }))
    }

    /// Adds a version; its id is the next one.
    pub fn add(&mut self, schema: Arc<TableSchema>) {
        let index = self.versions.len();
        self.by_table.entry(schema.name()).or_default().push(index);
        self.versions.push(schema);
    }

    /// The version with id `id`.
    pub fn get(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        let index = (id.0 as usize).checked_sub(1)?;
        self.versions.get(index).cloned()
    }

    /// The id the next version gets.
    pub fn next_id(&self) -> SchemaId {
        SchemaId(self.versions.len() as u32 + 1)
    }

    /// Every version, in id order.
    pub fn all(&self) -> Vec<Arc<TableSchema>> {
        self.versions.clone()
    }
}

/// A lookup that holds no schema: for events encoded with their column names only (test
/// sources, benchmarks).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSchemas;

impl SchemaLookup for NoSchemas {
    fn schema(&self, _: SchemaId) -> Option<Arc<TableSchema>> {
        None
    }
}
