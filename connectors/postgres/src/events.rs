//! Rows to events: one shape per table (columns, types, key), shared by snapshot and stream.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use siphon_core::SourcePosition;
use siphon_core::event::{Event, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo, Value};
use siphon_core::name::Name;

use siphon_core::Result;
use siphon_core::schema::{SchemaId, TableSchema};
use siphon_core::source::SourceContext;

use crate::binary::PG_EPOCH_MICROS;
use crate::catalog::{self, ColumnRef, TypeCache};
use crate::position::PgPosition;
use crate::values::{PgType, decode_cow};
use siphon_core::source::now_ms;

/// The columns of a table as events carry them.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Schema.
    pub schema: Name,
    /// Table.
    pub table: Name,
    /// Column names and how to decode them.
    pub columns: Vec<(Name, PgType)>,
    /// Positions of the primary-key columns; empty for a table without one.
    pub key: Vec<usize>,
    /// The table's schema as registered in the log, which its events refer to.
    pub table_schema: Arc<TableSchema>,
}

/// Columns whose values could not be decoded, so each is warned about once.
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

impl Shape {
    /// The shape of table `oid` (`schema.table`) with these columns and primary key, asking
    /// the catalog for types that are not built in; its schema is registered in the log.
    pub async fn resolve(
        client: &tokio_postgres::Client,
        types: &mut TypeCache,
        (ctx, factory): (&SourceContext, &EventFactory),
        (oid, schema, table): (u32, &str, &str),
        columns: &[ColumnRef],
        primary_key: &[String],
    ) -> Result<Shape> {
        let described = catalog::schema_columns(client, types, oid, columns).await?;
        let key = primary_key
            .iter()
            .filter_map(|k| described.iter().position(|c| &*c.name == k))
            .collect();
        let table_schema = ctx.register_schema(&TableSchema {
            id: SchemaId::UNREGISTERED,
            connector: "postgresql".into(),
            server: factory.name.clone(),
            database: factory.db.clone(),
            schema: Some(schema.into()),
            table: table.into(),
            columns: described,
            key,
        })?;
        let mut decoded = Vec::with_capacity(columns.len());
        // The registered schema's names, so that events share them (and encode by position
        // at a pointer comparison).
        for (column, described) in columns.iter().zip(&table_schema.columns) {
            decoded.push((
                described.name.clone(),
                types.resolve(client, column.type_oid).await?,
            ));
        }
        Ok(Shape {
            schema: table_schema.schema.clone().unwrap_or_else(|| schema.into()),
            table: table_schema.table.clone(),
            columns: decoded,
            key: table_schema.key.clone(),
            table_schema,
        })
    }

    /// Whether every column has a binary decoder ([`crate::binary`]).
    pub fn binary_decodable(&self) -> bool {
        self.columns
            .iter()
            .all(|(_, ty)| crate::binary::supported(ty))
    }

    /// Decodes one column's text; a value siphon cannot decode travels as text, with a warning.
    pub fn decode(&self, column: usize, text: Cow<'_, str>) -> Value {
        let ty = &self.columns[column].1;
        match decode_cow(ty, text) {
            Ok(v) => v,
            Err((e, text)) => self.undecodable(column, &text, &e),
        }
    }

    /// A value siphon cannot decode: it travels as text, with a warning once per column.
    pub fn undecodable(&self, column: usize, text: &str, error: &str) -> Value {
        let (name, ty) = &self.columns[column];
        let what = format!("{}.{}.{name}", self.schema, self.table);
        let mut warned = WARNED.lock().unwrap();
        if warned.get_or_insert_with(HashSet::new).insert(what.clone()) {
            tracing::warn!(column = %what, error, "a value siphon cannot decode travels as text");
        }
        Value::Other {
            type_name: format!("{ty:?}").to_lowercase(),
            text: text.to_owned(),
        }
    }

    /// A row from decoded values in column order.
    pub fn row(&self, values: Vec<Value>) -> Row {
        Row(self
            .columns
            .iter()
            .map(|(c, _)| c.clone())
            .zip(values)
            .collect())
    }

    /// The key of a row: its primary-key columns.
    pub fn key_of(&self, row: &Row) -> Option<Row> {
        if self.key.is_empty() {
            return None;
        }
        Some(Row(self.key.iter().map(|&i| row.0[i].clone()).collect()))
    }
}

/// Builds events of one pipeline's database.
#[derive(Debug, Clone)]
pub struct EventFactory {
    /// Server name in the source block (the pipeline).
    pub name: Name,
    /// Database name.
    pub db: Name,
}

/// Where an event is and what it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    /// The transaction's commit LSN (the consistent point for snapshot rows).
    pub commit_lsn: u64,
    /// The change's LSN.
    pub lsn: u64,
    /// Index of the event within its transaction (or snapshot).
    pub index: u64,
    /// Transaction id.
    pub xid: Option<u32>,
    /// Commit time, microseconds since PostgreSQL's epoch.
    pub commit_time_micros: i64,
    /// Snapshot marker.
    pub snapshot: SnapshotMarker,
    /// Order of the event among its transaction's events of this table, from 1.
    pub table_order: u64,
}

impl Place {
    /// A snapshot row's place: the slot's consistent point, a running index, and the
    /// snapshot's transaction id (no transaction block: a snapshot is not a source
    /// transaction).
    pub fn snapshot(
        consistent_point: u64,
        commit_time_micros: i64,
        index: u64,
        xid: Option<u32>,
    ) -> Place {
        Place {
            commit_lsn: consistent_point,
            lsn: consistent_point,
            index,
            xid,
            commit_time_micros,
            snapshot: SnapshotMarker::True,
            table_order: 0,
        }
    }
}

impl EventFactory {
    /// An event of `shape`'s table.
    pub fn event(
        &self,
        shape: &Shape,
        op: Op,
        before: Option<Row>,
        after: Option<Row>,
        key: Option<Row>,
        at: Place,
    ) -> Event {
        Event {
            op,
            before,
            after,
            key,
            source: SourceInfo {
                connector: "postgresql".into(),
                name: self.name.clone(),
                db: self.db.clone(),
                schema: Some(shape.schema.clone()),
                table: shape.table.clone(),
                position: SourcePosition::new(PgPosition {
                    commit_lsn: at.commit_lsn,
                    lsn: at.lsn,
                    index: at.index,
                }),
                tx_id: at.xid.map(u64::from),
                ts_ms: (at.commit_time_micros + PG_EPOCH_MICROS) / 1000,
                snapshot: at.snapshot,
            },
            ts_ms: now_ms(),
            transaction: at
                .xid
                .filter(|_| at.snapshot == SnapshotMarker::False)
                .map(|xid| TransactionInfo {
                    id: xid.to_string(),
                    total_order: at.index + 1,
                    data_collection_order: at.table_order,
                }),
            key_change: None,
            schema: Some(shape.table_schema.clone()),
        }
    }
}
