//! Events as earlier builds stored them, still read: formats 1 to 3 kept the source position
//! as an enum of the connectors of the time (in the order below). Each variant's fields are
//! stored as its connector's own position is now (`siphon-source-postgres`, `-mysql`,
//! `-generator`), so that an old event's position becomes those bytes and is decoded by its
//! connector like a new one.

use serde::{Deserialize, Serialize};

use super::{Event, KeyChange, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo};
use crate::name::Name;
use crate::position::{SourcePosition, Undecoded};

/// Format 1: an event with column names, before `key_change`.
pub(super) const FIRST_FORMAT: u8 = 1;
/// Format 2: an event with column names.
pub(super) const EVENT_FORMAT: u8 = 2;
/// Format 3: an event with values only, referring to its schema.
pub(super) const COMPACT_FORMAT: u8 = 3;

/// A position as formats 1 to 3 stored it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum Position {
    /// PostgreSQL: commit LSN, the event's LSN, its index in the transaction.
    Postgres {
        commit_lsn: u64,
        lsn: u64,
        index: u64,
    },
    /// MySQL/MariaDB: binlog file and position, row, GTID, server id.
    Mysql {
        file: String,
        pos: u64,
        row: u32,
        gtid: Option<String>,
        server_id: u32,
    },
    /// The generator: its event's number.
    Sequence(u64),
}

impl From<Position> for SourcePosition {
    /// The variant's fields as its connector stores its position now.
    fn from(position: Position) -> SourcePosition {
        let bytes = match position {
            Position::Postgres {
                commit_lsn,
                lsn,
                index,
            } => postcard::to_allocvec(&(commit_lsn, lsn, index)),
            Position::Mysql {
                file,
                pos,
                row,
                gtid,
                server_id,
            } => postcard::to_allocvec(&(file, pos, row, gtid, server_id)),
            Position::Sequence(n) => postcard::to_allocvec(&n),
        };
        SourcePosition::new(Undecoded(bytes.expect("encoding into a Vec cannot fail")))
    }
}

/// The `source` block as formats 1 and 2 stored it.
#[derive(Deserialize)]
pub(super) struct SourceInfoV2 {
    connector: Name,
    name: Name,
    db: Name,
    schema: Option<Name>,
    table: Name,
    position: Position,
    tx_id: Option<u64>,
    ts_ms: i64,
    snapshot: SnapshotMarker,
}

impl From<SourceInfoV2> for SourceInfo {
    fn from(s: SourceInfoV2) -> SourceInfo {
        SourceInfo {
            connector: s.connector,
            name: s.name,
            db: s.db,
            schema: s.schema,
            table: s.table,
            position: s.position.into(),
            tx_id: s.tx_id,
            ts_ms: s.ts_ms,
            snapshot: s.snapshot,
        }
    }
}

/// Format 2.
#[derive(Deserialize)]
pub(super) struct EventV2 {
    op: Op,
    before: Option<Row>,
    after: Option<Row>,
    key: Option<Row>,
    source: SourceInfoV2,
    ts_ms: i64,
    transaction: Option<TransactionInfo>,
    key_change: Option<KeyChange>,
}

impl From<EventV2> for Event {
    fn from(v: EventV2) -> Event {
        Event {
            op: v.op,
            before: v.before,
            after: v.after,
            key: v.key,
            source: v.source.into(),
            ts_ms: v.ts_ms,
            transaction: v.transaction,
            key_change: v.key_change,
            schema: None,
        }
    }
}

/// Format 1: format 2 before `key_change`.
#[derive(Deserialize)]
pub(super) struct EventV1 {
    op: Op,
    before: Option<Row>,
    after: Option<Row>,
    key: Option<Row>,
    source: SourceInfoV2,
    ts_ms: i64,
    transaction: Option<TransactionInfo>,
}

impl From<EventV1> for Event {
    fn from(v: EventV1) -> Event {
        Event {
            op: v.op,
            before: v.before,
            after: v.after,
            key: v.key,
            source: v.source.into(),
            ts_ms: v.ts_ms,
            transaction: v.transaction,
            key_change: None,
            schema: None,
        }
    }
}
