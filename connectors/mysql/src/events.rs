//! Events of a MySQL/MariaDB table, with their place in the binlog.

use std::sync::Arc;

use siphon_core::SourcePosition;
use siphon_core::event::{Op, Row, SnapshotMarker, SourceInfo, TransactionInfo};
use siphon_core::name::Name;
use siphon_core::schema::TableSchema;
use siphon_core::{Event, Value};

use crate::columns::Shape;
use crate::position::{MysqlPosition, PositionRef};
use siphon_core::source::now_ms;

/// Where an event comes from: the transaction's start in the binlog (file and position), the
/// event's index among the transaction's captured rows, and the transaction's GTID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Binlog file of the transaction's first event.
    pub file: String,
    /// Position of the transaction's first event (for a snapshot: the snapshot's position).
    pub pos: u64,
    /// Index among the transaction's (or the snapshot's) captured rows, from 0.
    pub row: u64,
    /// The transaction's GTID, if the server gives one.
    pub gtid: Option<String>,
    /// The server the transaction was written on.
    pub server_id: u32,
    /// Commit time, ms since the epoch.
    pub ts_ms: i64,
    /// Snapshot marker.
    pub snapshot: SnapshotMarker,
}

impl Place {
    /// The position of row `row` of the transaction here.
    pub fn position(&self, row: u64) -> MysqlPosition {
        let at = self.position_ref(row);
        MysqlPosition {
            file: at.file.to_owned(),
            pos: at.pos,
            row: at.row,
            gtid: at.gtid.map(str::to_owned),
            server_id: at.server_id,
        }
    }

    /// The position of row `row` here, borrowed.
    pub fn position_ref(&self, row: u64) -> PositionRef<'_> {
        PositionRef {
            file: &self.file,
            pos: self.pos,
            row: u32::try_from(row).unwrap_or(u32::MAX),
            gtid: self.gtid.as_deref(),
            server_id: self.server_id,
        }
    }
}

/// Makes the events of one pipeline.
#[derive(Debug, Clone)]
pub struct EventFactory {
    /// The logical server name: the pipeline.
    pub name: Name,
}

impl EventFactory {
    /// An event of `shape`'s table; the key is taken from the row.
    pub fn event(
        &self,
        shape: &Shape,
        op: Op,
        before: Option<Row>,
        after: Option<Row>,
        at: &Place,
    ) -> Event {
        let key = (!shape.key.is_empty())
            .then(|| after.as_ref().or(before.as_ref()).map(|r| key_of(shape, r)))
            .flatten();
        let mut event = self.truncate(&shape.schema, at);
        event.op = op;
        event.before = before;
        event.after = after;
        event.key = key;
        event
    }

    /// The truncate event of the table whose schema is `schema`: its rows are gone.
    pub fn truncate(&self, schema: &Arc<TableSchema>, at: &Place) -> Event {
        Event {
            op: Op::Truncate,
            before: None,
            after: None,
            key: None,
            source: SourceInfo {
                connector: "mysql".into(),
                name: self.name.clone(),
                db: schema.database.clone(),
                schema: None,
                table: schema.table.clone(),
                position: SourcePosition::new(at.position(at.row)),
                tx_id: None,
                ts_ms: at.ts_ms,
                snapshot: at.snapshot,
            },
            ts_ms: now_ms(),
            transaction: at
                .gtid
                .as_ref()
                .filter(|_| at.snapshot == SnapshotMarker::False)
                .map(|gtid| TransactionInfo {
                    id: gtid.clone(),
                    total_order: at.row + 1,
                    data_collection_order: 0,
                }),
            key_change: None,
            schema: Some(schema.clone()),
        }
    }
}

/// The key columns of a row of `shape`.
pub fn key_of(shape: &Shape, row: &Row) -> Row {
    Row(shape
        .key
        .iter()
        .map(|&i| {
            let name = &shape.columns[i].name;
            (name.clone(), row.get(name).cloned().unwrap_or(Value::Null))
        })
        .collect())
}

/// Moves an event of a transaction read earlier (an XA transaction's, from its spool) to the
/// transaction at `at`, which commits it: its position (the caller sets the row) and its
/// transaction.
pub fn move_to(event: &mut Event, at: &Place) {
    event.source.position = SourcePosition::new(at.position(0));
    event.source.snapshot = at.snapshot;
    event.transaction = at.gtid.as_ref().map(|gtid| TransactionInfo {
        id: gtid.clone(),
        total_order: 0,
        data_collection_order: 0,
    });
}
