//! What a source tells the runtime while it runs: gauges for status and metrics, whether it
//! is connected and caught up, how far it has read (for read-your-writes waits), and what
//! was asked of its incremental snapshot.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use super::now_ms;
use crate::name::TableName;
use crate::position::{Reached, SourcePoint};

/// What the admin API or CLI asks of an incremental snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotRequest {
    /// Read these tables (after those already asked for).
    Tables(Vec<TableName>),
    /// Forget the tables left.
    Stop,
    /// Read no chunk until resumed.
    Pause,
    /// Go on after a pause.
    Resume,
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
