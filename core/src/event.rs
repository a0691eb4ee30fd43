//! The change event: one row change with Debezium's envelope semantics and exact values.

mod legacy;

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::log::{NewRecord, RecordFlags};
use crate::name::{Name, TableName};
use crate::position::{PositionDecoder, SourceFields, SourcePosition};
use crate::schema::{SchemaId, SchemaLookup, TableSchema};

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
    /// A spatial value (MySQL's geometry types): OGC well-known binary and the id of its
    /// spatial reference system. Last of the variants: the log's codec numbers them.
    Geometry {
        /// The geometry as standard (OGC) well-known binary, which GIS libraries read.
        wkb: Vec<u8>,
        /// Its spatial reference system's id; 0 where none is set.
        srid: u32,
    },
}

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

/// A UUID in its canonical text form (`8-4-4-4-12` hex digits).
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
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
    /// The first row of the snapshot.
    First,
    /// The first row of a table, other than the snapshot's first.
    FirstInTable,
    /// The last row of a table, other than the snapshot's last.
    LastInTable,
    /// A row of an incremental snapshot, read while streaming went on.
    Incremental,
}

impl SnapshotMarker {
    /// As Debezium's `source.snapshot` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMarker::False => "false",
            SnapshotMarker::True => "true",
            SnapshotMarker::Last => "last",
            SnapshotMarker::First => "first",
            SnapshotMarker::FirstInTable => "first_in_data_collection",
            SnapshotMarker::LastInTable => "last_in_data_collection",
            SnapshotMarker::Incremental => "incremental",
        }
    }
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

    /// What a connector's part of Debezium's `source` block quotes of it.
    pub fn fields(&self) -> SourceFields<'_> {
        SourceFields {
            schema: self.schema.as_deref(),
            table: &self.table,
            tx_id: self.tx_id,
        }
    }

    /// The table: `schema.table`, or `db.table` where the source has no schemas.
    pub fn table_name(&self) -> TableName {
        TableName::new(self.namespace(), self.table.clone())
    }

    /// The start of the log keys of this table's rows: namespace and table, each ended by a
    /// NUL (which no name holds, so `a` + `b.c` and `a.b` + `c` differ).
    pub fn log_key_prefix(&self) -> Vec<u8> {
        log_key_prefix(self.namespace(), &self.table)
    }
}

/// `namespace \0 table \0`: what the log key of every row of a table starts with.
fn log_key_prefix(namespace: &str, table: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(namespace.as_bytes());
    out.push(0);
    out.extend_from_slice(table.as_bytes());
    out.push(0);
    out
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

/// `source.connector` of a view's document (see the `siphon-view` crate): its row's
/// [`Value::Json`] fields are the document's nested objects and arrays, which a store of
/// documents embeds as JSON rather than as text.
pub const DOCUMENT_CONNECTOR: &str = "view";

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
    /// The table's schema version in force, registered in the log's registry. An event with
    /// one is stored with its values only; one without (a test source) with column names.
    #[serde(skip)]
    pub schema: Option<Arc<TableSchema>>,
}

/// Format version of an encoded event with column names (no schema).
const EVENT_FORMAT: u8 = 4;
/// Format version of an encoded event with values only, referring to its schema.
const COMPACT_FORMAT: u8 = 5;

impl Event {
    /// Whether this is a view's document ([`DOCUMENT_CONNECTOR`]).
    pub fn is_document(&self) -> bool {
        &*self.source.connector == DOCUMENT_CONNECTOR
    }

    /// Encodes for the change log (compact binary, exact): values only when the event has a
    /// registered schema, column names and values otherwise.
    pub fn encode(&self) -> crate::Result<Vec<u8>> {
        // Sized for a typical row, so that encoding rarely reallocates.
        let mut out = Vec::with_capacity(256);
        let codec = |e: postcard::Error| crate::Error::Codec(e.to_string());
        match &self.schema {
            Some(schema) if schema.id != SchemaId::UNREGISTERED => {
                out.push(COMPACT_FORMAT);
                postcard::to_io(&Compact::of(self, schema)?, &mut out).map_err(codec)?;
            }
            _ => {
                out.push(EVENT_FORMAT);
                postcard::to_io(self, &mut out).map_err(codec)?;
            }
        }
        Ok(out)
    }

    /// Whether `bytes` start as an encoded event of a format this build reads (a log that
    /// writes events out in a format of its own tells them from other records by it).
    pub fn is_encoded(bytes: &[u8]) -> bool {
        matches!(
            bytes.first(),
            Some(
                &(COMPACT_FORMAT
                    | EVENT_FORMAT
                    | legacy::COMPACT_FORMAT
                    | legacy::EVENT_FORMAT
                    | legacy::FIRST_FORMAT)
            )
        )
    }

    /// Decodes what [`Event::encode`] wrote (or an earlier build's formats), finding its
    /// schema in `schemas` and its position's connector in `positions` (a position whose
    /// connector `positions` does not know stays [`Undecoded`](crate::position::Undecoded)).
    pub fn decode(
        bytes: &[u8],
        schemas: &dyn SchemaLookup,
        positions: &dyn PositionDecoder,
    ) -> crate::Result<Self> {
        let codec = |e: postcard::Error| crate::Error::Codec(e.to_string());
        let mut event = match bytes.split_first() {
            Some((&COMPACT_FORMAT, rest)) => {
                let compact: Compact<'_, Value, SourcePosition> =
                    postcard::from_bytes(rest).map_err(codec)?;
                let schema = schema_of(schemas, compact.schema)?;
                compact.into_event(schema)?
            }
            Some((&EVENT_FORMAT, rest)) => postcard::from_bytes(rest).map_err(codec)?,
            Some((&legacy::COMPACT_FORMAT, rest)) => {
                let compact: Compact<'_, Value, legacy::Position> =
                    postcard::from_bytes(rest).map_err(codec)?;
                let schema = schema_of(schemas, compact.schema)?;
                compact.into_event(schema)?
            }
            Some((&legacy::EVENT_FORMAT, rest)) => postcard::from_bytes::<legacy::EventV2>(rest)
                .map(Event::from)
                .map_err(codec)?,
            Some((&legacy::FIRST_FORMAT, rest)) => postcard::from_bytes::<legacy::EventV1>(rest)
                .map(Event::from)
                .map_err(codec)?,
            Some((v, _)) => {
                return Err(crate::Error::Codec(format!(
                    "event format {v} is not known to this siphon (it knows {COMPACT_FORMAT})"
                )));
            }
            None => return Err(crate::Error::Codec("empty event".into())),
        };
        event
            .source
            .position
            .decode_with(&event.source.connector, positions);
        Ok(event)
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
        let values: Vec<&Value> = key.0.iter().map(|(_, v)| v).collect();
        postcard::to_io(&values, &mut out).expect("encoding into a Vec cannot fail");
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

/// The schema version a compact event refers to.
fn schema_of(schemas: &dyn SchemaLookup, id: SchemaId) -> crate::Result<Arc<TableSchema>> {
    schemas.schema(id).ok_or_else(|| {
        crate::Error::Codec(format!(
            "the event refers to table schema {} which the log's registry does not hold",
            id.0
        ))
    })
}

/// A row as a compact event stores it: its values, in one of three shapes.
#[derive(Serialize, Deserialize)]
enum CompactRow<V> {
    /// Every column, in the schema's order.
    Full(Vec<V>),
    /// The key columns, in key order.
    Key(Vec<V>),
    /// Some columns, by position in the schema.
    Sparse(Vec<(u32, V)>),
}

impl<'a> CompactRow<&'a Value> {
    fn of(row: &'a Row, schema: &TableSchema) -> crate::Result<Self> {
        let values = || row.0.iter().map(|(_, v)| v).collect();
        if same_names(row, schema.columns.iter().map(|c| &c.name)) {
            return Ok(CompactRow::Full(values()));
        }
        if !schema.key.is_empty()
            && same_names(row, schema.key.iter().map(|&i| &schema.columns[i].name))
        {
            return Ok(CompactRow::Key(values()));
        }
        let sparse = row.0.iter().map(|(c, v)| {
            let at = schema.position(c).ok_or_else(|| {
                crate::Error::Codec(format!(
                    "column {c} is not in the schema of {} (version {})",
                    schema.name(),
                    schema.id.0
                ))
            })?;
            Ok((at as u32, v))
        });
        Ok(CompactRow::Sparse(sparse.collect::<crate::Result<_>>()?))
    }
}

/// Whether a row has exactly these columns, in this order.
fn same_names<'n>(row: &Row, names: impl ExactSizeIterator<Item = &'n Name>) -> bool {
    row.0.len() == names.len()
        && row
            .0
            .iter()
            .zip(names)
            .all(|((c, _), n)| Arc::ptr_eq(c, n) || c == n)
}

impl CompactRow<Value> {
    fn into_row(self, schema: &TableSchema) -> crate::Result<Row> {
        let bad = |what: &str| {
            crate::Error::Codec(format!(
                "{what} for {} (schema version {}, {} columns)",
                schema.name(),
                schema.id.0,
                schema.columns.len()
            ))
        };
        let name = |i: usize| {
            schema
                .columns
                .get(i)
                .map(|c| c.name.clone())
                .ok_or_else(|| bad(&format!("a value of column {i}")))
        };
        Ok(Row(match self {
            CompactRow::Full(values) => {
                if values.len() != schema.columns.len() {
                    return Err(bad(&format!("a row of {} values", values.len())));
                }
                schema
                    .columns
                    .iter()
                    .map(|c| c.name.clone())
                    .zip(values)
                    .collect()
            }
            CompactRow::Key(values) => {
                if values.len() != schema.key.len() {
                    return Err(bad(&format!("a key of {} values", values.len())));
                }
                schema
                    .key
                    .iter()
                    .map(|&i| schema.columns[i].name.clone())
                    .zip(values)
                    .collect()
            }
            CompactRow::Sparse(values) => values
                .into_iter()
                .map(|(i, v)| Ok((name(i as usize)?, v)))
                .collect::<crate::Result<_>>()?,
        }))
    }
}

/// [`KeyChange`] as a compact event stores it.
#[derive(Serialize, Deserialize)]
enum CompactKeyChange<V> {
    To(CompactRow<V>),
    From(CompactRow<V>),
}

/// An event as the compact format stores it: what its schema does not say. `V` is `&Value`
/// when encoding, `Value` when decoding (the same bytes); `P` the position as stored (an
/// earlier format's is [`legacy::Position`]).
#[derive(Serialize, Deserialize)]
struct Compact<'a, V, P: Clone> {
    schema: SchemaId,
    op: Op,
    before: Option<CompactRow<V>>,
    after: Option<CompactRow<V>>,
    key: Option<CompactRow<V>>,
    position: Cow<'a, P>,
    tx_id: Option<u64>,
    source_ts_ms: i64,
    snapshot: SnapshotMarker,
    ts_ms: i64,
    transaction: Cow<'a, Option<TransactionInfo>>,
    key_change: Option<CompactKeyChange<V>>,
}

impl<'a> Compact<'a, &'a Value, SourcePosition> {
    fn of(event: &'a Event, schema: &TableSchema) -> crate::Result<Self> {
        let row = |r: &'a Option<Row>| r.as_ref().map(|r| CompactRow::of(r, schema)).transpose();
        Ok(Compact {
            schema: schema.id,
            op: event.op,
            before: row(&event.before)?,
            after: row(&event.after)?,
            key: row(&event.key)?,
            position: Cow::Borrowed(&event.source.position),
            tx_id: event.source.tx_id,
            source_ts_ms: event.source.ts_ms,
            snapshot: event.source.snapshot,
            ts_ms: event.ts_ms,
            transaction: Cow::Borrowed(&event.transaction),
            key_change: match &event.key_change {
                Some(KeyChange::To(r)) => Some(CompactKeyChange::To(CompactRow::of(r, schema)?)),
                Some(KeyChange::From(r)) => {
                    Some(CompactKeyChange::From(CompactRow::of(r, schema)?))
                }
                None => None,
            },
        })
    }
}

impl<P: Clone + Into<SourcePosition>> Compact<'_, Value, P> {
    fn into_event(self, schema: Arc<TableSchema>) -> crate::Result<Event> {
        let row = |r: Option<CompactRow<Value>>| r.map(|r| r.into_row(&schema)).transpose();
        Ok(Event {
            op: self.op,
            before: row(self.before)?,
            after: row(self.after)?,
            key: row(self.key)?,
            source: SourceInfo {
                connector: schema.connector.clone(),
                name: schema.server.clone(),
                db: schema.database.clone(),
                schema: schema.schema.clone(),
                table: schema.table.clone(),
                position: self.position.into_owned().into(),
                tx_id: self.tx_id,
                ts_ms: self.source_ts_ms,
                snapshot: self.snapshot,
            },
            ts_ms: self.ts_ms,
            transaction: self.transaction.into_owned(),
            key_change: match self.key_change {
                Some(CompactKeyChange::To(r)) => Some(KeyChange::To(r.into_row(&schema)?)),
                Some(CompactKeyChange::From(r)) => Some(KeyChange::From(r.into_row(&schema)?)),
                None => None,
            },
            schema: Some(schema),
        })
    }
}

/// What a snapshot row's event holds besides its values: op `r`, no `before`, no transaction
/// block, no key change.
#[derive(Debug, Clone, Copy)]
pub struct ReadMeta<'a> {
    /// The position's bytes, as [`Position::encode`](crate::position::Position::encode)
    /// gives them.
    pub position: &'a [u8],
    /// The source transaction id.
    pub tx_id: Option<u64>,
    /// The source's time, ms since the epoch.
    pub source_ts_ms: i64,
    /// The snapshot marker.
    pub snapshot: SnapshotMarker,
    /// When siphon read it, ms since the epoch.
    pub ts_ms: i64,
}

/// Encodes rows a snapshot reads (op `r`) of one table straight into log records: the key
/// and value [`Event::log_key`] and [`Event::encode`] give the event the row makes, without
/// building that event (its `Row` of named values, its `SourceInfo`), which is most of what a
/// snapshot spends on a row. The values are in the schema's column order.
#[derive(Debug, Clone)]
pub struct ReadEncoder {
    schema: Arc<TableSchema>,
    /// [`log_key_prefix`] of its table.
    key_prefix: Vec<u8>,
    /// Whether the key is every column in order: its values then encode as a full row, as
    /// [`CompactRow::of`] finds them.
    key_is_row: bool,
}

impl ReadEncoder {
    /// An encoder of `schema`'s rows; it must be registered (compact records refer to it).
    pub fn new(schema: Arc<TableSchema>) -> crate::Result<Self> {
        if schema.id == SchemaId::UNREGISTERED {
            return Err(crate::Error::Codec(format!(
                "the schema of {} is not registered in the log",
                schema.name()
            )));
        }
        let key_prefix = log_key_prefix(
            schema.schema.as_deref().unwrap_or(&schema.database),
            &schema.table,
        );
        let key_is_row = schema.key.len() == schema.columns.len()
            && schema.key.iter().enumerate().all(|(i, &k)| i == k);
        Ok(ReadEncoder {
            schema,
            key_prefix,
            key_is_row,
        })
    }

    /// The log record of the row `values`.
    pub fn record(&self, values: &[Value], meta: &ReadMeta<'_>) -> crate::Result<NewRecord> {
        let schema = &self.schema;
        if values.len() != schema.columns.len() {
            return Err(crate::Error::Codec(format!(
                "a row of {} values for {} ({} columns)",
                values.len(),
                schema.name(),
                schema.columns.len()
            )));
        }
        let key = (!schema.key.is_empty()).then(|| {
            if self.key_is_row {
                RowRef::Full(values)
            } else {
                RowRef::Key(Picked {
                    values,
                    at: &schema.key,
                })
            }
        });
        let compact = CompactRead {
            schema: schema.id,
            op: Op::Read,
            before: None,
            after: Some(RowRef::Full(values)),
            key,
            position: BytesRef(meta.position),
            tx_id: meta.tx_id,
            source_ts_ms: meta.source_ts_ms,
            snapshot: meta.snapshot,
            ts_ms: meta.ts_ms,
            transaction: None,
            key_change: None,
        };
        let codec = |e: postcard::Error| crate::Error::Codec(e.to_string());
        let mut value = Vec::with_capacity(256);
        value.push(COMPACT_FORMAT);
        postcard::to_io(&compact, &mut value).map_err(codec)?;
        let key = match &compact.key {
            Some(_) => {
                let mut out = Vec::with_capacity(self.key_prefix.len() + 16);
                out.extend_from_slice(&self.key_prefix);
                let picked = Picked {
                    values,
                    at: &schema.key,
                };
                postcard::to_io(&picked, &mut out).map_err(codec)?;
                out
            }
            None => Vec::new(),
        };
        let flags = if values.contains(&Value::Unchanged) {
            RecordFlags::PARTIAL
        } else {
            RecordFlags::default()
        };
        Ok(NewRecord { key, value, flags })
    }
}

/// [`Compact`] of a snapshot row, borrowing its values: the same fields, serialized alike.
#[derive(Serialize)]
struct CompactRead<'a> {
    schema: SchemaId,
    op: Op,
    before: Option<RowRef<'a>>,
    after: Option<RowRef<'a>>,
    key: Option<RowRef<'a>>,
    position: BytesRef<'a>,
    tx_id: Option<u64>,
    source_ts_ms: i64,
    snapshot: SnapshotMarker,
    ts_ms: i64,
    transaction: Option<TransactionInfo>,
    key_change: Option<CompactKeyChange<&'a Value>>,
}

/// [`CompactRow`]'s first two shapes over borrowed values (variants in the same order).
#[derive(Serialize)]
enum RowRef<'a> {
    Full(&'a [Value]),
    Key(Picked<'a>),
}

/// The values at some positions of a row, as a sequence.
struct Picked<'a> {
    values: &'a [Value],
    at: &'a [usize],
}

impl Serialize for Picked<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.at.iter().map(|&i| &self.values[i]))
    }
}

/// Bytes serialized as [`SourcePosition`] serializes its encoding.
struct BytesRef<'a>(&'a [u8]);

impl Serialize for BytesRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::NoDecoder;
    use crate::schema::{Column, ColumnKind, NoSchemas, SchemaStore};
    use crate::testing::MemorySchemas;

    fn items(registry: &MemorySchemas, columns: &[&str]) -> Arc<TableSchema> {
        keyed_items(registry, columns, vec![1, 0])
    }

    fn keyed_items(
        registry: &MemorySchemas,
        columns: &[&str],
        key: Vec<usize>,
    ) -> Arc<TableSchema> {
        registry
            .register(&TableSchema {
                id: SchemaId::UNREGISTERED,
                connector: "postgresql".into(),
                server: "p".into(),
                database: "db".into(),
                schema: Some("public".into()),
                table: "items".into(),
                columns: columns
                    .iter()
                    .map(|c| Column {
                        name: (*c).into(),
                        type_name: "text".into(),
                        type_id: 25,
                        type_modifier: -1,
                        kind: ColumnKind::Text { length: None },
                        nullable: true,
                        generated: false,
                    })
                    .collect(),
                key,
            })
            .unwrap()
    }

    fn event(schema: &Arc<TableSchema>, op: Op, rows: [Option<Row>; 3]) -> Event {
        let [before, after, key] = rows;
        Event {
            op,
            before,
            after,
            key,
            source: SourceInfo {
                connector: "postgresql".into(),
                name: "p".into(),
                db: "db".into(),
                schema: Some("public".into()),
                table: "items".into(),
                position: SourcePosition::new(crate::testing::TestPosition(5)),
                tx_id: Some(3),
                ts_ms: 11,
                snapshot: SnapshotMarker::False,
            },
            ts_ms: 12,
            transaction: None,
            key_change: None,
            schema: Some(schema.clone()),
        }
    }

    fn row(pairs: &[(&str, Value)]) -> Row {
        pairs.iter().map(|(c, v)| (*c, v.clone())).collect()
    }

    /// Whole rows, keys (in key order, not column order), partial rows and a key change all
    /// come back equal from the values-only format, which is smaller than the named one.
    #[test]
    fn the_compact_format_round_trips_every_row_shape() {
        let registry = MemorySchemas::default();
        let schema = items(&registry, &["a", "b", "note"]);
        let full = row(&[
            ("a", Value::Int(1)),
            ("b", Value::Text("x".into())),
            ("note", Value::Null),
        ]);
        let key = row(&[("b", Value::Text("x".into())), ("a", Value::Int(1))]);
        let partial = row(&[("note", Value::Unchanged), ("a", Value::Int(1))]);
        let mut update = event(
            &schema,
            Op::Update,
            [Some(key.clone()), Some(full), Some(key.clone())],
        );
        update.key_change = Some(KeyChange::From(key.clone()));
        let delete = event(&schema, Op::Delete, [Some(partial), None, Some(key)]);
        for e in [update, delete] {
            let bytes = e.encode().unwrap();
            assert_eq!(bytes[0], COMPACT_FORMAT);
            assert_eq!(Event::decode(&bytes, &registry, &NoDecoder).unwrap(), e);
            let named = Event {
                schema: None,
                ..e.clone()
            }
            .encode()
            .unwrap();
            assert!(
                bytes.len() < named.len(),
                "{} >= {}",
                bytes.len(),
                named.len()
            );
            let err = Event::decode(&bytes, &NoSchemas, &NoDecoder)
                .unwrap_err()
                .to_string();
            assert!(err.contains("table schema 1"), "{err}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Rows of any values — every kind, arrays, nulls, unchanged columns — come back from
        /// the log's codec as they went in, in both formats (values only, and named).
        #[test]
        fn any_row_round_trips_the_log_codec(
            values in proptest::collection::vec(crate::testing::values::value(), 2..7),
        ) {
            let registry = MemorySchemas::default();
            let names: Vec<String> = (0..values.len()).map(|i| format!("c{i}")).collect();
            let columns: Vec<&str> = names.iter().map(String::as_str).collect();
            let schema = items(&registry, &columns);
            let after: Row = names.iter().map(String::as_str).zip(values).collect();
            // The helper's key is (c1, c0).
            let key = row(&[("c1", after.0[1].1.clone()), ("c0", after.0[0].1.clone())]);
            let created = event(&schema, Op::Create, [None, Some(after.clone()), Some(key)]);
            let named = Event { schema: None, ..created.clone() };
            for e in [created, named] {
                let back = Event::decode(&e.encode().unwrap(), &registry, &NoDecoder).unwrap();
                let got = back.after.as_ref().unwrap();
                proptest::prop_assert_eq!(got.len(), after.len());
                for ((name, want), (got_name, got)) in after.iter().zip(got.iter()) {
                    proptest::prop_assert_eq!(name, got_name);
                    proptest::prop_assert!(
                        crate::testing::values::same_value(want, got),
                        "{name}: {want:?} came back as {got:?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// A snapshot row encoded straight from its values is, byte for byte, the record of
        /// the event it makes, whatever its values and its key: none, one column, columns out
        /// of the table's order, or every column.
        #[test]
        fn a_read_row_encodes_as_its_event_does(
            values in proptest::collection::vec(crate::testing::values::value(), 2..7),
            shape in 0..4usize,
        ) {
            let registry = MemorySchemas::default();
            let names: Vec<String> = (0..values.len()).map(|i| format!("c{i}")).collect();
            let columns: Vec<&str> = names.iter().map(String::as_str).collect();
            let key = match shape {
                0 => vec![],
                1 => vec![0],
                2 => vec![1, 0],
                _ => (0..values.len()).collect(),
            };
            let schema = keyed_items(&registry, &columns, key);
            let after: Row = names.iter().map(String::as_str).zip(values.iter().cloned()).collect();
            let key = (!schema.key.is_empty())
                .then(|| Row(schema.key.iter().map(|&i| after.0[i].clone()).collect()));
            let mut read = event(&schema, Op::Read, [None, Some(after), key]);
            read.source.snapshot = SnapshotMarker::Last;
            let want = crate::source::encode_events(&[read.clone()], &[]).unwrap().remove(0);
            let position = read.source.position.encode();
            let meta = ReadMeta {
                position: &position,
                tx_id: read.source.tx_id,
                source_ts_ms: read.source.ts_ms,
                snapshot: read.source.snapshot,
                ts_ms: read.ts_ms,
            };
            let got = ReadEncoder::new(schema).unwrap().record(&values, &meta).unwrap();
            proptest::prop_assert_eq!(got, want);
        }
    }

    /// A record read with a schema version that does not fit it (a damaged registry) is an
    /// error, never a panic or a row with columns shifted.
    #[test]
    fn a_row_that_does_not_fit_its_schema_is_an_error() {
        let registry = MemorySchemas::default();
        let wide = items(&registry, &["a", "b", "note"]);
        let narrow = items(&registry, &["a", "b"]);
        let full = row(&[
            ("a", Value::Int(1)),
            ("b", Value::Text("x".into())),
            ("note", Value::Null),
        ]);
        let mut bytes = event(&wide, Op::Create, [None, Some(full), None])
            .encode()
            .unwrap();
        // The schema id is the first byte after the format (a varint below 128).
        bytes[1] = u8::try_from(narrow.id.0).unwrap();
        let err = Event::decode(&bytes, &registry, &NoDecoder)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a row of 3 values"), "{err}");
        let stranger = row(&[("zzz", Value::Int(1))]);
        let err = event(&wide, Op::Create, [None, Some(stranger), None])
            .encode()
            .unwrap_err()
            .to_string();
        assert!(err.contains("column zzz is not in the schema"), "{err}");
    }
}
