//! The source side: what a connector implements, and the context through which it appends.

mod metrics;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use metrics::{SnapshotRequest, SourceMetrics};

use crate::Result;
use crate::event::{Event, KeyChange, Op, Value};
use crate::log::{ChangeLog, NewRecord, RecordFlags};
use crate::name::TableName;
use crate::offsets::OffsetStore;
use crate::position::PositionDecoder;
use crate::schema::TableSchema;

/// A table a source captures, as sinks must know it before the first event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// The table (`schema.table`, or `db.table` for MySQL).
    pub name: TableName,
    /// Primary-key columns; empty for a table without a primary key.
    pub key_columns: Vec<String>,
}

/// When to take a snapshot of the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum SnapshotMode {
    /// Once, when the source first starts (PostgreSQL: when the slot is created); then stream.
    #[default]
    Initial,
    /// Never: stream from the source's first start on.
    Never,
    /// Like `initial`, and again whenever the database no longer holds the changes since the
    /// stored position (PostgreSQL: the slot is missing or invalidated; MySQL: the binlog
    /// file was purged).
    WhenNeeded,
}

impl TryFrom<String> for SnapshotMode {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "initial" => Ok(SnapshotMode::Initial),
            "never" => Ok(SnapshotMode::Never),
            "when_needed" => Ok(SnapshotMode::WhenNeeded),
            other => Err(format!(
                "unknown snapshot mode {other:?}; allowed: \"initial\", \"never\", \"when_needed\""
            )),
        }
    }
}

/// A change-data-capture source.
///
/// Guarantees a source must keep:
/// - it appends each change to the log once: on start it resumes after the position of the
///   last durable record ([`SourceContext::last_event`]) and drops what it sees again;
/// - it confirms a position upstream (PostgreSQL flush LSN, MySQL binlog position) only once
///   [`SourceContext::append`] has returned for every event up to it, so the database never
///   discards a change the log does not hold;
/// - it marks the last event of each source transaction (`ends_transaction`), so that a sink
///   can apply whole transactions;
/// - it stops promptly when the context's cancellation token fires.
#[async_trait]
pub trait Source: Send {
    /// Reaches the upstream database and checks that it is prepared for capture, without
    /// changing anything (`siphon check --connect`).
    async fn check(&mut self) -> Result<()>;

    /// The tables it captures, with their keys (checked against the sinks before starting).
    async fn tables(&mut self) -> Result<Vec<TableInfo>>;

    /// The column names of each table it captures (`siphon check` holds views to them);
    /// `None` where the source cannot tell.
    async fn columns(&mut self) -> Result<Option<BTreeMap<TableName, Vec<String>>>> {
        Ok(None)
    }

    /// Snapshots and streams into the log until cancelled (`Ok`) or failed. A transient error
    /// makes the runtime call `run` again after a backoff.
    async fn run(&mut self, ctx: &SourceContext) -> Result<()>;
}

/// What a source runs with: the pipeline's log, its checkpoint, and the shutdown signal.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// The pipeline's name.
    pub pipeline: String,
    /// The pipeline's change log.
    pub log: Arc<dyn ChangeLog>,
    /// Where the source keeps its checkpoint.
    pub offsets: OffsetStore,
    /// Fires on shutdown.
    pub cancel: CancellationToken,
    /// Gauges the source reports (snapshot progress, replication lag), shown in status and
    /// metrics.
    pub metrics: SourceMetrics,
}

/// Now, in milliseconds since the epoch (0 before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl SourceContext {
    /// Appends events in order and returns once they are durable; `ends_transaction` marks the
    /// last one as the end of its source transaction.
    pub async fn append(&self, events: &[Event], ends_transaction: bool) -> Result<Range<u64>> {
        let ends: &[usize] = if ends_transaction && !events.is_empty() {
            &[events.len() - 1]
        } else {
            &[]
        };
        self.append_marked(events, ends).await
    }

    /// Appends events of several transactions at once (one fsync for all: group commit) and
    /// returns once they are durable; `transaction_ends` are the indices of the events that
    /// end a source transaction.
    pub async fn append_marked(
        &self,
        events: &[Event],
        transaction_ends: &[usize],
    ) -> Result<Range<u64>> {
        self.append_records(encode_events(events, transaction_ends)?)
            .await
    }

    /// Appends events already encoded with [`encode_events`] (so that encoding can run in
    /// parallel) and returns once they are durable.
    pub async fn append_records(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.log.append(planted_loss(records)).await
    }

    /// Appends the first events of a transaction that is still open, without waiting for them
    /// to be durable: the next `append` makes them so. Nothing may be confirmed upstream on
    /// the strength of this call.
    pub async fn append_open_transaction(&self, events: &[Event]) -> Result<Range<u64>> {
        self.append_records_unsynced(encode_events(events, &[])?)
            .await
    }

    /// Appends encoded records without waiting for them to be durable (see
    /// [`SourceContext::append_open_transaction`]): a snapshot in progress, which nothing is
    /// confirmed on until it ends.
    pub async fn append_records_unsynced(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.log.append_unsynced(planted_loss(records)).await
    }

    /// The last event appended to the log (see [`ChangeLog::last_record`]): where the source
    /// resumes, its position read by `positions` (the source's kind).
    pub async fn last_event(&self, positions: &dyn PositionDecoder) -> Result<Option<Event>> {
        match self.log.last_record().await? {
            Some(rec) => Event::decode(&rec.value, self.log.schemas(), positions).map(Some),
            None => Ok(None),
        }
    }

    /// Registers a version of a table's schema in the log (durable on return) and gives it
    /// back with its id, for the events that follow to refer to. An equal version already
    /// registered is returned as it is.
    pub fn register_schema(&self, schema: &TableSchema) -> Result<Arc<TableSchema>> {
        self.log.schemas().register(schema)
    }
}

/// A test hook of debug builds, for the chaos harness to prove that it sees a loss: with
/// `SIPHON_TEST_LOSE_ONE_IN=N` in the environment, every N-th record a source appends that
/// does not end a transaction is dropped before the log. Release builds have no such hook.
#[cfg(debug_assertions)]
fn planted_loss(mut records: Vec<NewRecord>) -> Vec<NewRecord> {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static ONE_IN: OnceLock<Option<u64>> = OnceLock::new();
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let one_in = ONE_IN.get_or_init(|| {
        std::env::var("SIPHON_TEST_LOSE_ONE_IN")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
    });
    if let Some(n) = *one_in {
        records.retain(|r| {
            r.flags.contains(RecordFlags::TXN_END)
                || SEEN.fetch_add(1, Ordering::Relaxed) % n != n - 1
        });
    }
    records
}

#[cfg(not(debug_assertions))]
fn planted_loss(records: Vec<NewRecord>) -> Vec<NewRecord> {
    records
}

/// Log records of events; `transaction_ends` index the events that end a transaction.
pub fn encode_events(events: &[Event], transaction_ends: &[usize]) -> Result<Vec<NewRecord>> {
    let mut records = Vec::with_capacity(events.len());
    for event in events {
        let flags = if event.op == Op::Delete {
            match event.key_change {
                Some(KeyChange::To(_)) => RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
                _ => RecordFlags::TOMBSTONE,
            }
        } else if event
            .row()
            .is_some_and(|r| r.iter().any(|(_, v)| *v == Value::Unchanged))
        {
            RecordFlags::PARTIAL
        } else {
            RecordFlags::default()
        };
        records.push(NewRecord {
            key: event.log_key(),
            value: event.encode()?,
            flags,
        });
    }
    for &i in transaction_ends {
        if let Some(r) = records.get_mut(i) {
            r.flags = r.flags.with(RecordFlags::TXN_END);
        }
    }
    Ok(records)
}
