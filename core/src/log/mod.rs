//! The change log: an ordered, durable, replayable sequence of records with dense u64 offsets.
//!
//! The log stores opaque records (a key, a value and flags); the pipeline puts encoded
//! [`Event`](crate::Event)s in them. Backends: [`file`] (embedded, the default); a Kafka
//! backend fits the same trait (one topic per table, the offset kept in the record headers).

pub mod file;
mod record;

use std::ops::Range;

use async_trait::async_trait;
use tokio::sync::watch;

pub use record::{LogRecord, NewRecord, RecordFlags};

use crate::Result;
use crate::schema::SchemaRegistry;

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

/// An ordered, durable log of records.
///
/// Guarantees:
/// - offsets are dense and increasing: an append of n records gets the next n offsets
///   (compaction may later remove some, leaving gaps that readers skip);
/// - a reader sees a record only once it is durable under the configured fsync policy, so a
///   record a sink has applied is never lost by a crash of the process;
/// - a record is never deleted while a [`Consumer`] has not read it, except past the hard
///   size cap, which [`MaintenanceReport::lost`] reports.
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
    fn schemas(&self) -> &SchemaRegistry;

    /// First offset the log holds.
    fn start_offset(&self) -> u64;

    /// Offset after the last durable record: readers see everything below it.
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

    /// Size and extent.
    fn stats(&self) -> LogStats;
}

/// Reads a log in order from a position.
#[async_trait]
pub trait LogReader: Send + std::fmt::Debug {
    /// Up to `max` records that are durable now, from the current position; empty at the end.
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>>;

    /// Waits until a record past the position is durable. Cancel-safe.
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
