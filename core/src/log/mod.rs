//! The change log: an ordered, durable, replayable sequence of records with dense u64 offsets.
//!
//! The log stores opaque records (a key, a value and flags); the pipeline puts encoded
//! [`Event`](crate::Event)s in them. Backends live in crates of their own (`logs/file`, the
//! embedded default).

mod record;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

pub use record::{LogRecord, NewRecord, RecordFlags};

use crate::Result;
use crate::schema::SchemaStore;

/// The identity of a change log, made when the log is created. Every cursor a sink keeps
/// carries it, so a store that followed another log (one that was lost, or made anew) is
/// recognised, never read as a position in this one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LogId(String);

impl LogId {
    /// A new identity (a random UUID).
    pub fn random() -> Self {
        LogId(uuid::Uuid::new_v4().to_string())
    }

    /// An identity as a store holds it with a cursor: taken as it is, so that anything but
    /// this log's own identity (a damaged one included) compares as another log's.
    pub fn from_stored(text: &str) -> Self {
        LogId(text.to_owned())
    }

    /// Reads an identity written by [`LogId::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        uuid::Uuid::parse_str(text.trim())
            .ok()
            .map(|u| LogId(u.to_string()))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LogId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A consumer of the log, as retention and compaction must know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// The sink's name, for reports.
    pub name: String,
    /// The next offset this consumer will read (everything below it is applied).
    pub next_offset: u64,
    /// It keeps every event (an audit or history table): nothing it has not read may be
    /// compacted away.
    pub keeps_history: bool,
}

/// What one round of [`ChangeLog::maintain`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Segments deleted by retention.
    pub segments_deleted: usize,
    /// Bytes freed by retention and compaction.
    pub bytes_freed: u64,
    /// Records removed by compaction.
    pub records_compacted: u64,
    /// Consumers that lost unread records to the `max_size` hard cap: name and the offsets lost.
    pub lost: Vec<(String, Range<u64>)>,
}

/// Size and extent of a log, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogStats {
    /// First offset held.
    pub start_offset: u64,
    /// Offset the next append gets; every record below it is durable.
    pub end_offset: u64,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// Number of segment files.
    pub segments: usize,
    /// Fsyncs of segment files since the log was opened.
    #[serde(default)]
    pub fsyncs: u64,
}

/// What a log promises beyond what every log does (see [`ChangeLog`]). A part that needs one
/// asks for it ([`ChangeLog::promises`]) rather than assuming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LogPromises {
    /// One total order: every reader sees every record in append order, across keys; an
    /// offset below another was appended before it. (A partitioned log orders per key only.)
    pub total_order: bool,
    /// Offsets are dense: an append of n records gets the next n offsets, so the end of the
    /// log is one number (compaction and retention may still leave gaps that readers skip).
    pub dense_offsets: bool,
    /// The [`RecordFlags::TXN_END`] mark a source puts on a transaction's last record comes
    /// back to readers as it went in, so a reader knows where a source transaction ends.
    pub transaction_marks: bool,
}

impl LogPromises {
    /// Whether a reader can apply whole source transactions: it sees them in one order, whole
    /// and marked at their ends.
    pub fn whole_transactions(self) -> bool {
        self.total_order && self.transaction_marks
    }
}

/// An ordered, durable log of records.
///
/// What every log promises:
/// - **per-key order**: the records of one key reach every reader in the order they were
///   appended, and a later one has a higher offset (the version a sink guards with: an older
///   offset never overwrites a newer one);
/// - **the durability boundary**: [`ChangeLog::append`] returns once its records are as
///   durable as the log's policy makes them, and a reader sees a record only then (records of
///   [`ChangeLog::append_unsynced`] only with the next `append`), so nothing a sink applied or
///   a source confirmed upstream is lost by a crash;
/// - **identity**: [`ChangeLog::id`] is made with the log and never changes, so a store that
///   followed another log is recognised;
/// - **schema records**: [`ChangeLog::schemas`] holds every table schema version a record
///   refers to, for as long as the record is held;
/// - a record is never removed while a [`Consumer`] has not read it, except past a hard size
///   cap, which [`MaintenanceReport::lost`] reports; and compaction keeps, per key, what a
///   replay from the log's start needs to rebuild the current rows.
///
/// What a log may promise beyond that is in [`LogPromises`]: the file log promises all of it.
/// The log compliance suite (`siphon_core::testing::log`) checks both.
#[async_trait]
pub trait ChangeLog: Send + Sync + std::fmt::Debug + 'static {
    /// Appends records in order; returns the offsets they got once the records are as durable
    /// as the fsync policy makes them (`batch`: fsynced by this call; `interval`: by the next
    /// periodic fsync, shared with every append meanwhile; `never`: written only).
    async fn append(&self, records: Vec<NewRecord>) -> Result<Range<u64>>;

    /// Appends records that need not be durable yet (the start of a large source
    /// transaction): they become durable, and visible to readers, with the next `append` at the
    /// latest. Saves an fsync per chunk of a transaction that nobody may
    /// confirm before its commit anyway.
    async fn append_unsynced(&self, records: Vec<NewRecord>) -> Result<Range<u64>>;

    /// The log's identity.
    fn id(&self) -> &LogId;

    /// The log's table schemas, which its records refer to.
    fn schemas(&self) -> &dyn SchemaStore;

    /// First offset the log holds.
    fn start_offset(&self) -> u64;

    /// Offset after the last durable record: readers see everything below it. A log opened
    /// read-only beside its writer follows what the writer appends.
    fn durable_end(&self) -> u64;

    /// Watches [`ChangeLog::durable_end`]; readers wait on it instead of polling.
    fn subscribe(&self) -> watch::Receiver<u64>;

    /// A reader positioned at `from` (the first record at or after it).
    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>>;

    /// The last record appended — durable, or made durable by the next append (an
    /// [`ChangeLog::append_unsynced`]) — from which a source resumes: a source that fails in
    /// the middle of a large transaction and runs again must not append its start twice.
    async fn last_record(&self) -> Result<Option<LogRecord>>;

    /// Applies retention and compaction, never removing what `consumers` still need.
    async fn maintain(&self, consumers: &[Consumer]) -> Result<MaintenanceReport>;

    /// How often the runtime calls [`ChangeLog::maintain`]; `None` for a log that keeps
    /// itself (a broker's own retention).
    fn maintenance_interval(&self) -> Option<Duration>;

    /// Size and extent.
    fn stats(&self) -> LogStats;

    /// What this log promises beyond every log's promises.
    fn promises(&self) -> LogPromises;

    /// The offset of the first record the log took at or after `time_ms` (ms since the
    /// epoch), or the durable end where it took none since: where a replay "from a time"
    /// starts. A record's time is when the log took it, which grows with its offset (a
    /// writer's clock stepped back moves the answer by as much). Blocks.
    fn offset_at_time(&self, time_ms: i64) -> Result<u64> {
        offset_at_time_by_search(self, time_ms)
    }

    /// A reader of this log as a member of consumer group `group`, which shares the log's
    /// tables with the other processes that read as its members; `None` for a log read by
    /// one process only (the file log). A member's stretches are not in the log's one order
    /// ([`crate::sink::SinkBatch::ordered`] is false): each table's records come in order.
    /// `from` moves the group's positions in every table to its first record at or after
    /// that offset first (a replay; 0: the start), which the log refuses while other members
    /// are reading.
    fn group_reader(&self, group: &str, from: Option<u64>) -> Option<Result<GroupReader>> {
        let _ = (group, from);
        None
    }
}

/// [`ChangeLog::offset_at_time`] by a binary search over the log's records: one read of a
/// record per step.
pub fn offset_at_time_by_search<L: ChangeLog + ?Sized>(log: &L, time_ms: i64) -> Result<u64> {
    let (mut lo, mut hi) = (log.start_offset(), log.durable_end());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match log.reader(mid)?.read_available(1)?.first() {
            // Records before the first one at or after `mid` are below it too.
            Some(record) if record.timestamp_ms < time_ms => lo = record.offset + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// A reader that shares a log with the other members of a consumer group (a partitioned log
/// that other processes read too): the group's members split the log's tables between them,
/// each table read by one member in log order, and remember in the log where each member got
/// to once its store applied it. See [`ChangeLog::group_reader`].
#[derive(Debug)]
pub struct GroupReader {
    /// The records of the tables this member holds now, each table in log order.
    pub reader: Box<dyn LogReader>,
    /// Where the group remembers what this member's store applied.
    pub positions: Arc<dyn GroupPositions>,
}

/// Where a consumer group keeps what its members' stores applied.
pub trait GroupPositions: Send + Sync + std::fmt::Debug {
    /// The store applied every record this member's reader handed out up to and including
    /// the one at `offset`: the group remembers their positions (a member that takes a table
    /// over reads on from there). Positions of tables the member no longer holds are
    /// forgotten.
    fn applied_through(&self, offset: u64) -> Result<()>;
}

/// Reads a log in order from a position.
#[async_trait]
pub trait LogReader: Send + std::fmt::Debug {
    /// Up to `max` records that are durable now, from the current position; empty at the end.
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>>;

    /// Waits until a record past the position is durable (a reader of a log opened read-only
    /// beside its writer looks for the writer's appends now and then). It may return early:
    /// callers read again and wait again. Cancel-safe.
    async fn wait(&mut self) -> Result<()>;

    /// The offset the next record will have at least.
    fn position(&self) -> u64;

    /// Up to `max` records; waits for the first one. Cancel-safe.
    async fn next_batch(&mut self, max: usize) -> Result<Vec<LogRecord>> {
        loop {
            let batch = self.read_available(max)?;
            if !batch.is_empty() {
                return Ok(batch);
            }
            self.wait().await?;
        }
    }
}
