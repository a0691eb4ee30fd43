//! The source side: what a connector implements, and the context through which it appends.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::Result;
use crate::event::{Event, KeyChange, Op, Value};
use crate::incremental::SnapshotRequest;
use crate::log::{ChangeLog, NewRecord, RecordFlags};
use crate::name::TableName;
use crate::offsets::OffsetStore;
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

/// What a source reports for status and metrics: named gauges (e.g. `snapshot_rows`,
/// `slot_lag_bytes`, exported as `siphon_source_<name>`), whether it is connected to its
/// database, how far behind the database it is, and the place in the database's change
/// stream it has read to (for read-your-writes waits). Cheap to clone; clones share the
/// values.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    state: Arc<Mutex<MetricsState>>,
    reached: Arc<watch::Sender<Reached>>,
    nudge: Arc<Notify>,
    /// What was asked of incremental snapshots.
    snapshot_requests: Arc<Mutex<SnapshotRequests>>,
}

impl Default for SourceMetrics {
    fn default() -> Self {
        SourceMetrics {
            state: Arc::default(),
            reached: Arc::new(watch::Sender::new(Reached::default())),
            nudge: Arc::default(),
            snapshot_requests: Arc::default(),
        }
    }
}

/// Requests to a source's incremental snapshot.
#[derive(Debug, Default)]
struct SnapshotRequests {
    /// Not yet taken by the source.
    pending: Vec<SnapshotRequest>,
    /// Made, and taken, since the process started.
    made: u64,
    taken: u64,
}

/// A place in a database's change stream that an application names after its commit, to
/// wait until a sink has applied everything committed up to it (read-your-writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourcePoint {
    /// PostgreSQL: a WAL position (`pg_current_wal_lsn()` after the commit).
    Lsn(u64),
    /// MariaDB: a GTID state, one GTID per replication domain (`@@gtid_binlog_pos` after the
    /// commit).
    Gtids(String),
}

impl SourcePoint {
    /// PostgreSQL's spelling of a WAL position: `16/B374D848`.
    pub fn parse_lsn(text: &str) -> Option<u64> {
        let (high, low) = text.split_once('/')?;
        Some(
            u64::from(u32::from_str_radix(high, 16).ok()?) << 32
                | u64::from(u32::from_str_radix(low, 16).ok()?),
        )
    }
}

impl std::fmt::Display for SourcePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourcePoint::Lsn(lsn) => write!(f, "{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF),
            SourcePoint::Gtids(state) => f.write_str(state),
        }
    }
}

/// How far a source has read: every change the database committed at or before `point` is
/// in the log below `log_end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reached {
    /// Where in the database's change stream; `None` before the source says.
    pub point: Option<SourcePoint>,
    /// The log's end when it said so.
    pub log_end: u64,
}

#[derive(Debug, Default)]
struct MetricsState {
    gauges: BTreeMap<&'static str, f64>,
    connected: bool,
    /// Whether the source holds everything the database has sent, since it last said so.
    idle: bool,
    /// When the source last held everything the database had sent (ms since the epoch).
    caught_up_ms: Option<i64>,
    /// Commit time of the newest change it appended (ms since the epoch).
    newest_commit_ms: Option<i64>,
}

impl SourceMetrics {
    /// Sets a gauge.
    pub fn set(&self, name: &'static str, value: f64) {
        self.state.lock().unwrap().gauges.insert(name, value);
    }

    /// Every gauge now.
    pub fn values(&self) -> BTreeMap<String, f64> {
        self.state
            .lock()
            .unwrap()
            .gauges
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }

    /// The source reached its database and is reading changes (or a snapshot).
    pub fn connected(&self) {
        self.state.lock().unwrap().connected = true;
    }

    /// The source lost its database (the runtime says so when `run` returns).
    pub fn disconnected(&self) {
        let mut state = self.state.lock().unwrap();
        state.connected = false;
        if state.idle {
            state.caught_up_ms = Some(now_ms());
        }
        state.idle = false;
    }

    /// Whether the source is connected.
    pub fn is_connected(&self) -> bool {
        self.state.lock().unwrap().connected
    }

    /// Everything the database has sent is in the log now (the stream has nothing waiting
    /// and no transaction open); the source is caught up until it calls [`Self::working`].
    pub fn caught_up(&self) {
        let mut state = self.state.lock().unwrap();
        state.idle = true;
        state.caught_up_ms = Some(now_ms());
    }

    /// The database sent something new (a transaction began): the log is behind until the
    /// next [`Self::caught_up`].
    pub fn working(&self) {
        let mut state = self.state.lock().unwrap();
        if state.idle {
            state.caught_up_ms = Some(now_ms());
        }
        state.idle = false;
    }

    /// Changes committed at `commit_ms` (ms since the epoch) are in the log.
    pub fn committed(&self, commit_ms: i64) {
        let mut state = self.state.lock().unwrap();
        state.newest_commit_ms = state.newest_commit_ms.max(Some(commit_ms));
    }

    /// Every change the database committed at or before `point` is in the log (durable)
    /// below `log_end`.
    pub fn reached(&self, point: SourcePoint, log_end: u64) {
        self.reached.send_replace(Reached {
            point: Some(point),
            log_end,
        });
    }

    /// Follows what [`Self::reached`] records.
    pub fn watch_reached(&self) -> watch::Receiver<Reached> {
        self.reached.subscribe()
    }

    /// Asks the source to show soon that it has read past the database's current position,
    /// for a wait that an idle stream would not end (PostgreSQL writes a message into the WAL,
    /// which the stream then passes).
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Fires after [`Self::nudge`] (at most one stored nudge).
    pub async fn nudged(&self) {
        self.nudge.notified().await;
    }

    /// Asks the source's incremental snapshot for something (tables to read again while it
    /// streams, stop, pause, resume); it is nudged, so that an idle stream takes the request
    /// at once. Counted in `incremental_snapshot_requests`; once the source has taken it and
    /// reported its progress after it, `incremental_snapshot_requests_done` counts it too.
    pub fn request_snapshot(&self, request: SnapshotRequest) {
        let mut requests = self.snapshot_requests.lock().unwrap();
        requests.pending.push(request);
        requests.made += 1;
        self.set("incremental_snapshot_requests", requests.made as f64);
        drop(requests);
        self.nudge();
    }

    /// What was asked since the last call, in order.
    pub fn take_snapshot_requests(&self) -> Vec<SnapshotRequest> {
        let mut requests = self.snapshot_requests.lock().unwrap();
        requests.taken += requests.pending.len() as u64;
        std::mem::take(&mut requests.pending)
    }

    /// The source has reported its incremental snapshot's progress after the requests it
    /// took: they are done (`incremental_snapshot_requests_done`).
    pub fn snapshot_requests_reported(&self) {
        let taken = self.snapshot_requests.lock().unwrap().taken;
        self.set("incremental_snapshot_requests_done", taken as f64);
    }

    /// How far behind its database the log is, at `now_ms`: nothing while the source is
    /// connected and caught up; else the time since it last was, or since the commit of the
    /// newest change it appended, whichever is less; since `started_ms` if neither happened
    /// yet. It grows while the source is down.
    pub fn behind_ms(&self, now_ms: i64, started_ms: i64) -> u64 {
        let state = self.state.lock().unwrap();
        if state.connected && state.idle {
            return 0;
        }
        let fresh = state
            .caught_up_ms
            .max(state.newest_commit_ms)
            .unwrap_or(started_ms);
        u64::try_from(now_ms - fresh).unwrap_or(0)
    }
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
        self.log.append(records).await
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
        self.log.append_unsynced(records).await
    }

    /// The last event appended to the log (see [`ChangeLog::last_record`]): where the source
    /// resumes.
    pub async fn last_event(&self) -> Result<Option<Event>> {
        match self.log.last_record().await? {
            Some(rec) => Event::decode(&rec.value, self.log.schemas()).map(Some),
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
