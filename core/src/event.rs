//! The change event: one row change with Debezium's envelope semantics and exact values.

use serde::{Deserialize, Serialize};

/// What happened to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A row was inserted (`c`).
    Create,
    /// A row was updated (`u`).
    Update,
    /// A row was deleted (`d`).
    Delete,
    /// A row was read by a snapshot (`r`).
    Read,
    /// The table was truncated (`t`); the event has no row.
    Truncate,
}

impl Op {
    /// Debezium's one-letter code.
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
        }
    }
}

/// One column value, exact: decimals as decimal text, times with microseconds.
///
/// Integer and time representations follow PostgreSQL's own (days since 2000-01-01 are not
/// used; everything counts from the Unix epoch), so no value is ever rounded on its way through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer of up to 64 bits.
    Int(i64),
    /// An unsigned 64-bit integer (MySQL `BIGINT UNSIGNED`).
    UInt(u64),
    /// A 4-byte float, kept as such so that it prints as written.
    Float32(f32),
    /// An 8-byte float (NaN and infinities included).
    Float64(f64),
    /// An exact decimal in its canonical text form: `"12.3400"`, `"NaN"`, `"Infinity"`.
    Decimal(String),
    /// Text of any length.
    Text(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// JSON document text, kept verbatim.
    Json(String),
    /// A UUID.
    Uuid([u8; 16]),
    /// A calendar date, as days since 1970-01-01 (`i32::MIN`/`MAX` for -/+infinity).
    Date(i32),
    /// A time of day, in microseconds since midnight.
    Time(i64),
    /// A time of day with a UTC offset in seconds (east positive).
    TimeTz {
        /// Microseconds since midnight, local to the offset.
        micros: i64,
        /// Offset from UTC in seconds, east positive.
        offset_seconds: i32,
    },
    /// A timestamp without zone, microseconds since 1970-01-01 00:00 (`i64::MIN`/`MAX` for
    /// -/+infinity).
    Timestamp(i64),
    /// An instant, microseconds since the Unix epoch in UTC (`i64::MIN`/`MAX` for -/+infinity).
    TimestampTz(i64),
    /// An interval as PostgreSQL keeps it: months, days and microseconds, each signed.
    Interval {
        /// Whole months.
        months: i32,
        /// Whole days.
        days: i32,
        /// Microseconds.
        micros: i64,
    },
    /// An array; multi-dimensional arrays nest.
    Array(Vec<Value>),
    /// An enum label.
    Enum(String),
    /// A value of a type siphon does not decode (inet, money, composite, …), as the
    /// database prints it, with the database's type name.
    Other {
        /// The database's name of the type.
        type_name: String,
        /// The value as the database prints it.
        text: String,
    },
    /// The column was not sent because it did not change (PostgreSQL TOAST): a sink keeps the
    /// value it has stored.
    Unchanged,
}

/// A shared name (column, table, database): cloned per event without allocating.
pub type Name = std::sync::Arc<str>;

/// A row: column name to value, in the table's column order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Row(pub Vec<(Name, Value)>);

impl Row {
    /// The value of a column, if the row has it.
    pub fn get(&self, column: &str) -> Option<&Value> {
        self.0.iter().find(|(c, _)| &**c == column).map(|(_, v)| v)
    }

    /// Columns and values in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(c, v)| (&**c, v))
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the row has no column.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This row with each [`Value::Unchanged`] column replaced by that column's value in
    /// `earlier` (an older version of the same row), where `earlier` has one.
    pub fn fill_unchanged(&self, earlier: &Row) -> Row {
        Row(self
            .0
            .iter()
            .map(|(c, v)| match (v, earlier.get(c)) {
                (Value::Unchanged, Some(old)) => (c.clone(), old.clone()),
                _ => (c.clone(), v.clone()),
            })
            .collect())
    }
}

impl<S: Into<Name>> FromIterator<(S, Value)> for Row {
    fn from_iter<I: IntoIterator<Item = (S, Value)>>(iter: I) -> Self {
        Row(iter.into_iter().map(|(c, v)| (c.into(), v)).collect())
    }
}

/// Where in the source's change stream an event comes from. Ordered within one source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourcePosition {
    /// PostgreSQL: the transaction's commit LSN, the event's own LSN, and its index within the
    /// transaction (snapshot rows carry the slot's consistent point and a running index).
    Postgres {
        /// Commit LSN of the transaction.
        commit_lsn: u64,
        /// LSN of this change.
        lsn: u64,
        /// Index of the event within its transaction.
        index: u64,
    },
    /// MySQL/MariaDB: binlog file and position of the transaction, the row within it, and the
    /// GTID when the server uses them.
    Mysql {
        /// Binlog file name.
        file: String,
        /// Position of the event in the binlog file.
        pos: u64,
        /// Row index within the rows event.
        row: u32,
        /// GTID of the transaction, if any.
        gtid: Option<String>,
        /// The server's id.
        server_id: u32,
    },
    /// A source that counts its events (the generator, tests).
    Sequence(u64),
}

/// Whether an event comes from a snapshot, and whether it is the snapshot's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum SnapshotMarker {
    /// Streamed, not from a snapshot.
    #[default]
    False,
    /// A snapshot row.
    True,
    /// The last row of the snapshot.
    Last,
}

/// Debezium's `source` block: where the change comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// Connector kind: `postgresql`, `mysql`, `generator`.
    pub connector: Name,
    /// Logical server name (the pipeline's name).
    pub name: Name,
    /// Database name.
    pub db: Name,
    /// Schema (PostgreSQL), if any.
    pub schema: Option<Name>,
    /// Table name.
    pub table: Name,
    /// Position in the source's change stream.
    pub position: SourcePosition,
    /// Source transaction id.
    pub tx_id: Option<u64>,
    /// Commit time of the change in the source, ms since the epoch.
    pub ts_ms: i64,
    /// Snapshot marker.
    pub snapshot: SnapshotMarker,
}

impl SourceInfo {
    /// The schema, or the database where the source has no schemas.
    pub fn namespace(&self) -> &str {
        self.schema.as_deref().unwrap_or(&self.db)
    }

    /// `schema.table`, or `db.table` where the source has no schemas.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", self.namespace(), self.table)
    }

    /// The start of the log keys of this table's rows: namespace and table, each ended by a
    /// NUL (which no name holds, so `a` + `b.c` and `a.b` + `c` differ).
    pub fn log_key_prefix(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(self.namespace().as_bytes());
        out.push(0);
        out.extend_from_slice(self.table.as_bytes());
        out.push(0);
        out
    }
}

/// Debezium's `transaction` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionInfo {
    /// Transaction id as text (Debezium: `"txid:lsn"` for PostgreSQL).
    pub id: String,
    /// Order of the event among all events of the transaction, from 1.
    pub total_order: u64,
    /// Order of the event among the transaction's events of this table, from 1.
    pub data_collection_order: u64,
}

/// The two events an update that changes the primary key becomes (a delete of the old key,
/// then a create of the new one) know each other's key: the row moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum KeyChange {
    /// On the delete: the key the row now has.
    To(Row),
    /// On the create: the key the row had. Its stored row holds the values of the columns
    /// the source left unchanged (PostgreSQL sends the old key only, never a TOASTed value
    /// the update did not touch).
    From(Row),
}

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// What happened.
    pub op: Op,
    /// The row before the change, as far as the source provides it.
    pub before: Option<Row>,
    /// The row after the change.
    pub after: Option<Row>,
    /// Primary-key columns; `None` for a table without a primary key (keyed sinks refuse it).
    pub key: Option<Row>,
    /// Where it came from.
    pub source: SourceInfo,
    /// When siphon processed it, ms since the epoch.
    pub ts_ms: i64,
    /// The source transaction, if any.
    pub transaction: Option<TransactionInfo>,
    /// Set on the two halves of an update that changed the primary key.
    pub key_change: Option<KeyChange>,
}

/// Format version of an encoded event in the log; bumped when [`Event`]'s layout changes.
const EVENT_FORMAT: u8 = 2;

/// An event as format 1 wrote it (before `key_change`), still read.
#[derive(Deserialize)]
struct EventV1 {
    op: Op,
    before: Option<Row>,
    after: Option<Row>,
    key: Option<Row>,
    source: SourceInfo,
    ts_ms: i64,
    transaction: Option<TransactionInfo>,
}

impl From<EventV1> for Event {
    fn from(v: EventV1) -> Self {
        Event {
            op: v.op,
            before: v.before,
            after: v.after,
            key: v.key,
            source: v.source,
            ts_ms: v.ts_ms,
            transaction: v.transaction,
            key_change: None,
        }
    }
}

impl Event {
    /// Encodes for the change log (compact binary, exact).
    pub fn encode(&self) -> crate::Result<Vec<u8>> {
        // Sized for a typical row, so that encoding rarely reallocates.
        let mut out = Vec::with_capacity(512);
        out.push(EVENT_FORMAT);
        postcard::to_io(self, &mut out).map_err(|e| crate::Error::Codec(e.to_string()))?;
        Ok(out)
    }

    /// Decodes what [`Event::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> crate::Result<Self> {
        let codec = |e: postcard::Error| crate::Error::Codec(e.to_string());
        match bytes.split_first() {
            Some((&EVENT_FORMAT, rest)) => postcard::from_bytes(rest).map_err(codec),
            Some((1, rest)) => postcard::from_bytes::<EventV1>(rest)
                .map(Event::from)
                .map_err(codec),
            Some((v, _)) => Err(crate::Error::Codec(format!(
                "event format {v} is not known to this siphon (it knows {EVENT_FORMAT})"
            ))),
            None => Err(crate::Error::Codec("empty event".into())),
        }
    }

    /// The key the change log compacts and sinks address rows by: `schema.table` and the
    /// primary-key values. Empty for keyless tables (never compacted).
    pub fn log_key(&self) -> Vec<u8> {
        match &self.key {
            Some(key) => self.log_key_of(key),
            None => Vec::new(),
        }
    }

    /// The log key of another row of this event's table, by its key (the old key of a row
    /// whose key changed).
    pub fn log_key_of(&self, key: &Row) -> Vec<u8> {
        let mut out = self.source.log_key_prefix();
        postcard::to_io(key, &mut out).expect("encoding into a Vec cannot fail");
        out
    }

    /// The row this event leaves in place: `after` for c/u/r, nothing for d/t.
    pub fn row(&self) -> Option<&Row> {
        match self.op {
            Op::Create | Op::Update | Op::Read => self.after.as_ref(),
            Op::Delete | Op::Truncate => None,
        }
    }
}
