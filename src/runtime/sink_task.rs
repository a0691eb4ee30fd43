//! The task that runs one sink: read from its cursor, apply batches, save the cursor; retry
//! transient errors; stop on permanent ones; replay on request.
//!
//! The task owns the sink's progress (where it reads, what its store has committed, records
//! lost, the end of a replay) and publishes it on a watch channel: status reads it there, and
//! log maintenance keeps every record the store has not committed.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use siphon_core::Error;
use siphon_core::log::{ChangeLog, GroupPositions, LogId, LogReader};
use siphon_core::offsets::{LostRecords, OffsetStore, SinkCursor};
use siphon_core::sink::stage::Stages;
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::TableInfo;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::backoff::{Backoff, sleep_unless_cancelled};
use super::batcher::Batcher;
use super::prefetch::{DecodedBatch, Fetched, Prefetch};
use super::status::{SinkProgress, SinkStatus, State, needs_replay_message};
use super::view::{SinkView, ViewSpec};
use super::{PipelineHandle, SinkCommand};
use crate::config::{DeliveryConfig, OnError, OnOtherLog};

/// How long a store's cursor may lie past the log's known end before it is taken for a
/// position in another log (see `SinkTask::belongs_elsewhere`).
const END_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) struct SinkTask {
    pub name: String,
    pub sink: Box<dyn Sink>,
    pub delivery: DeliveryConfig,
    /// What its events pass on their way: the tables and columns it takes (from
    /// `delivery`), then the pipeline's transforms and its own.
    pub stages: Stages,
    /// Where rejected records go with `on_error = "dead_letter"`.
    pub dead_letter: PathBuf,
    /// Pauses between attempts at a batch that failed transiently.
    pub retry_backoff: Backoff,
    pub log: Arc<dyn ChangeLog>,
    pub offsets: OffsetStore,
    pub handle: Arc<PipelineHandle>,
    pub tables: watch::Receiver<Option<Vec<TableInfo>>>,
    pub commands: mpsc::Receiver<SinkCommand>,
    pub cancel: CancellationToken,
    /// Where the sink is; this task is its only writer.
    pub progress: watch::Sender<SinkProgress>,
    /// Notified by a read-your-writes wait: a batch goes without lingering.
    pub hurry: Arc<tokio::sync::Notify>,
    /// Why the saved cursor could not be read, when it could not: then only the store's own
    /// cursor, a rebuild or a replay says where to start.
    pub damaged_cursor: Option<String>,
    /// The consumer group it reads the log as a member of (`consumer_group = true`).
    pub group: Option<String>,
    /// Where that group remembers what this member's store applied (once open).
    pub group_positions: Option<Arc<dyn GroupPositions>>,
    /// The view whose documents the sink takes (`view = "VIEW"`).
    pub view: Option<ViewSpec>,
    /// Its state, once open.
    pub open_view: Option<Arc<SinkView>>,
}

/// What the task does next.
enum Phase {
    /// Open the sink, then read from `from` (or the stored cursor); `reset` clears it first.
    Open {
        from: Option<u64>,
        reset: bool,
        reply: Option<oneshot::Sender<Result<u64, String>>>,
    },
    /// Apply batches.
    Run(Prefetch),
    /// Stopped by a permanent error or lost records: wait for a replay or shutdown.
    Idle,
}

/// How a step ended when it did not simply go on.
enum Stop {
    Shutdown,
    Idle,
    /// A transient error while applying: open the sink again and go on from the cursor it
    /// keeps (a store that holds a transaction open across batches rewinds to its commit).
    Reopen,
}

pub(super) async fn run(mut t: SinkTask) {
    let mut tables_rx = t.tables.clone();
    let tables = tokio::select! {
        _ = t.cancel.cancelled() => None,
        tables = tables_rx.wait_for(Option::is_some) => tables.ok().and_then(|t| t.clone()),
    };
    let Some(tables) = tables else {
        return t.set_state(State::Stopped);
    };
    let mut tables = t.stages.tables(tables);
    if let Some(spec) = &t.view {
        // The view takes the tables' changes; the sink, the documents' table.
        match SinkView::open(spec, &tables, t.progress.subscribe()) {
            Ok(view) => {
                tables = vec![view.table().clone()];
                t.open_view = Some(Arc::new(view));
            }
            Err(e) => {
                t.fail(&e.to_string());
                t.cancel.cancelled().await;
                return t.set_state(State::Stopped);
            }
        }
    }
    let lost = t.progress.borrow().lost.clone();
    let mut phase = match lost {
        Some(lost) => {
            let message = needs_replay_message(&t.handle.name, &t.name, &lost);
            t.update(|s| {
                s.component.state = State::NeedsReplay;
                s.component.last_error = Some(message);
            });
            Phase::Idle
        }
        None => Phase::Open {
            from: None,
            reset: false,
            reply: None,
        },
    };
    loop {
        phase = match phase {
            Phase::Open { from, reset, reply } => match t.open(&tables, from, reset).await {
                Ok(prefetch) => {
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(t.log.durable_end()));
                    }
                    Phase::Run(prefetch)
                }
                Err((Stop::Shutdown, _)) => return t.set_state(State::Stopped),
                Err((Stop::Idle | Stop::Reopen, why)) => {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(why));
                    }
                    Phase::Idle
                }
            },
            Phase::Run(mut prefetch) => {
                let step = tokio::select! {
                    biased;
                    _ = t.cancel.cancelled() => Err(Stop::Shutdown),
                    Some(cmd) = t.commands.recv() => Ok(Some(cmd)),
                    fetched = prefetch.next() => match fetched {
                        Fetched::Batch(batch) => t.apply(batch).await.map(|()| None),
                        Fetched::ReadFailed(e) if e.is_transient() => Err(t.read_interrupted(&e).await),
                        Fetched::ReadFailed(e) => Err(t.read_failed(&e)),
                        Fetched::Undecodable { offset, error } => {
                            t.fail(&format!("the record at offset {offset} cannot be decoded: {error}"));
                            Err(Stop::Idle)
                        }
                    },
                };
                match step {
                    Ok(None) => Phase::Run(prefetch),
                    Ok(Some(SinkCommand::Replay { from, reset, reply })) => Phase::Open {
                        from: Some(from),
                        reset,
                        reply: Some(reply),
                    },
                    Err(Stop::Shutdown) => return t.set_state(State::Stopped),
                    Err(Stop::Idle) => Phase::Idle,
                    Err(Stop::Reopen) => Phase::Open {
                        from: None,
                        reset: false,
                        reply: None,
                    },
                }
            }
            Phase::Idle => tokio::select! {
                _ = t.cancel.cancelled() => return,
                cmd = t.commands.recv() => match cmd {
                    Some(SinkCommand::Replay { from, reset, reply }) => Phase::Open { from: Some(from), reset, reply: Some(reply) },
                    None => return,
                },
            },
        };
    }
}

impl SinkTask {
    fn update(&self, f: impl FnOnce(&mut SinkStatus)) {
        self.handle.update(|s| {
            f(s.sinks
                .get_mut(&self.name)
                .expect("every sink has a status"))
        });
    }

    fn set_state(&self, state: State) {
        self.update(|s| s.component.state = state);
    }

    /// Opens the sink (retrying transient errors) and positions a batcher.
    async fn open(
        &mut self,
        tables: &[TableInfo],
        from: Option<u64>,
        reset: bool,
    ) -> Result<Prefetch, (Stop, String)> {
        let mut backoff = Backoff::new(self.delivery.max_backoff.0);
        self.update(|s| {
            let state = if from.is_some() {
                State::Replaying
            } else {
                State::Starting
            };
            s.component.opening(state, from.is_some());
        });
        if let Some(group) = self.group.clone() {
            return self
                .open_in_group(tables, from, reset, &group, backoff)
                .await;
        }
        if let Some(from) = from {
            let start = self.log.start_offset();
            if from < start {
                return Err((
                    Stop::Idle,
                    format!(
                        "the log starts at offset {start} (older records were removed); replay from {start} or later"
                    ),
                ));
            }
        }
        if reset {
            self.reset_store(tables, &mut backoff).await?;
        }
        let (stored, other_log) = self.stored_position(tables, from, &mut backoff).await?;
        let (next, rebuild) = self.start_at(from, stored, other_log)?;
        let next = self
            .view_start(next, from.is_some() && reset, &mut backoff)
            .await?;
        let reader = self.reader(next, &mut backoff).await?;
        // A replay runs to the log's end at its start; reopened after an error, it goes on
        // to the same end.
        let replay_until = match from {
            Some(_) => Some(self.log.durable_end()),
            None if rebuild => Some(self.log.durable_end()),
            None => self.progress.borrow().replay_until,
        }
        .filter(|until| next < *until);
        self.save_start(next, &mut backoff).await?;
        self.damaged_cursor = None;
        self.progress.send_replace(SinkProgress {
            next_offset: next,
            committed: next,
            lost: None,
            replay_until,
        });
        self.update(|s| {
            s.component.state = if replay_until.is_some() {
                State::Replaying
            } else {
                State::Running
            };
            // A replay's first batch says how old its records are.
            if from.is_some() {
                s.oldest_unapplied_ms = None;
            }
        });
        tracing::info!(sink = %self.name, from = next, replay = from.is_some(), "sink reading the log");
        Ok(self.prefetch(reader, true))
    }

    /// Opens the store and reads the cursor it keeps, if any; a store whose cursor is a
    /// position in another log (the data directory was lost or replaced while the store kept
    /// its cursor) is rebuilt from this one (`true`: it was), or refused.
    async fn stored_position(
        &mut self,
        tables: &[TableInfo],
        from: Option<u64>,
        backoff: &mut Backoff,
    ) -> Result<(Option<u64>, bool), (Stop, String)> {
        let mut other_log = false;
        loop {
            let stored = self.open_store(tables, from, backoff).await?;
            match stored {
                Some(c) if from.is_none() && !other_log && self.belongs_elsewhere(&c).await => {
                    let message = format!(
                        "the store's cursor (offset {}, change log {}) belongs to another change log than this pipeline's ({}, which ends at {}): the store followed a log that was lost or replaced",
                        c.next_offset,
                        c.log.as_ref().map_or("unknown", LogId::as_str),
                        self.log.id(),
                        self.log.durable_end(),
                    );
                    let policy =
                        self.delivery
                            .on_other_log
                            .unwrap_or(if self.sink.keeps_history() {
                                OnOtherLog::Fail
                            } else {
                                OnOtherLog::Rebuild
                            });
                    match policy {
                        OnOtherLog::Fail => {
                            let p = &self.handle.name;
                            return Err((
                                Stop::Idle,
                                self.fail(&format!(
                                    "{message}; rebuild it with `siphon replay {p} {} --from 0 --reset` (or set on_other_log = \"rebuild\")",
                                    self.name
                                )),
                            ));
                        }
                        OnOtherLog::Rebuild => {
                            tracing::warn!(sink = %self.name, "{message}: clearing it and rebuilding it from this log");
                            self.reset_store(tables, backoff).await?;
                            other_log = true;
                        }
                    }
                }
                stored => return Ok((stored.map(|c| c.next_offset), other_log)),
            }
        }
    }

    /// Where the sink reads from, and whether that is a rebuild of its store from the log's
    /// start: a replay goes back to `from`; otherwise the store's own cursor (`stored`), if
    /// it keeps one, wins over the one this task saved. A store that keeps a cursor but has
    /// none, although this sink had applied records, was wiped (a cache restarted without
    /// persistence) or replaced: it is rebuilt.
    fn start_at(
        &self,
        from: Option<u64>,
        stored: Option<u64>,
        other_log: bool,
    ) -> Result<(u64, bool), (Stop, String)> {
        // The cursor this task saved, unless its file was damaged.
        let saved = match &self.damaged_cursor {
            None => Some(self.progress.borrow().committed),
            Some(_) => None,
        };
        let start = self.log.start_offset();
        let rebuild = other_log
            || from.is_none()
                && stored.is_none()
                && self.sink.keeps_cursor()
                && saved.is_none_or(|c| c > start);
        if rebuild {
            tracing::warn!(sink = %self.name, cursor = ?saved, from = start, "the store has lost this sink's cursor (wiped or replaced): rebuilding it from the start of the log");
            return Ok((start, true));
        }
        match from.or(stored).or(saved) {
            Some(next) => Ok((next, false)),
            None => {
                let why = self.damaged_cursor.clone().unwrap_or_default();
                let p = &self.handle.name;
                Err((
                    Stop::Idle,
                    self.fail(&format!(
                        "{why}: this sink does not know where it stopped; start it again where it should go on with `siphon replay {p} {} --from OFFSET`, or rebuild it with `siphon replay {p} {} --from 0 --reset`",
                        self.name, self.name
                    )),
                ))
            }
        }
    }

    /// Saves `next` as the sink's cursor, waiting out a full disk.
    async fn save_start(&mut self, next: u64, backoff: &mut Backoff) -> Result<(), (Stop, String)> {
        loop {
            match self.save_cursor(next, None) {
                Ok(()) => break,
                // A full disk: once space returns, the same write succeeds.
                Err(e) if e.is_transient() => {
                    self.wait_to_retry(&e, "sink cannot save its cursor yet; retrying", backoff)
                        .await?;
                }
                Err(e) => return Err((Stop::Idle, self.fail(&e.to_string()))),
            }
        }
        Ok(())
    }

    /// Where a sink that takes a view's documents reads from, `next` being where its store
    /// stands: where the view's state ends, if that is before (see the `view` module), with
    /// the store's cursor moved back there so that it takes the documents again. A state
    /// that ends before the log's start (older records removed) is an error, but in a
    /// `rebuild` (`replay --from N --reset`): then the view is built from `next` on, which
    /// a snapshot of its tables taken before makes whole.
    async fn view_start(
        &mut self,
        next: u64,
        rebuild: bool,
        backoff: &mut Backoff,
    ) -> Result<u64, (Stop, String)> {
        let Some(view) = self.open_view.clone() else {
            return Ok(next);
        };
        let taken = view
            .next_offset()
            .and_then(|taken| view.resume(next).map(|()| taken))
            .map_err(|e| (Stop::Idle, self.fail(&e.to_string())))?;
        if taken >= next {
            return Ok(next);
        }
        let start = self.log.start_offset();
        if taken < start {
            if rebuild {
                tracing::warn!(sink = %self.name, view = %view.table().name, from = next, "the view is built from the log from this offset on (older records were removed): rows no change after it names come from a snapshot taken since");
                return Ok(next);
            }
            let p = &self.handle.name;
            return Err((
                Stop::Idle,
                self.fail(&format!(
                    "view {}: its state ends at offset {taken}, but the log starts at {start} (older records were removed), so the view cannot be built from the log; take a snapshot of its tables (`siphon snapshot {p}`), then rebuild it with `siphon replay {p} {} --from {start} --reset`",
                    view.table().name.table(),
                    self.name
                )),
            ));
        }
        tracing::info!(sink = %self.name, view = %view.table().name, from = taken, cursor = next, "the view's state ends before the sink's cursor: reading from there");
        // The store would skip the documents below its cursor.
        loop {
            match self.sink.rewind(taken).await {
                Ok(()) => return Ok(taken),
                Err(e) if e.is_transient() => {
                    self.wait_to_retry(
                        &e,
                        "sink cannot move its cursor back yet; retrying",
                        backoff,
                    )
                    .await?;
                }
                Err(e) => return Err((Stop::Idle, self.fail(&e.to_string()))),
            }
        }
    }

    /// Reads batches from `reader` for the sink, `ordered` (the log's one order) or as a
    /// consumer group's member.
    fn prefetch(&self, reader: Box<dyn LogReader>, ordered: bool) -> Prefetch {
        Prefetch::start(
            Batcher::new(
                reader,
                self.delivery.batch_size,
                self.delivery.linger.0,
                self.hurry.clone(),
                ordered && self.log.promises().whole_transactions(),
            ),
            self.stages.clone(),
            self.open_view.clone(),
            self.log.clone(),
            self.handle.positions.clone(),
            ordered,
        )
    }

    /// Opens the sink as a member of consumer group `group`: the group, not the store's
    /// cursor, says where each table is read from. A replay moves the group to the offset in
    /// every table (with the other members stopped); a store that followed another log, or
    /// lost its cursor, is not rebuilt by one member alone.
    async fn open_in_group(
        &mut self,
        tables: &[TableInfo],
        from: Option<u64>,
        reset: bool,
        group: &str,
        mut backoff: Backoff,
    ) -> Result<Prefetch, (Stop, String)> {
        let p = self.handle.name.clone();
        if reset {
            self.reset_store(tables, &mut backoff).await?;
        }
        let stored = self.open_store(tables, None, &mut backoff).await?;
        let had_applied = self.progress.borrow().committed > 0 && from.is_none();
        let lost = match &stored {
            Some(c) if self.belongs_elsewhere(c).await => Some(format!(
                "the store's cursor belongs to another change log than this pipeline's ({})",
                self.log.id()
            )),
            None if had_applied && self.sink.keeps_cursor() => {
                Some("the store has lost this sink's cursor (wiped or replaced)".to_owned())
            }
            _ => None,
        };
        if let Some(why) = lost {
            return Err((
                Stop::Idle,
                self.fail(&format!(
                    "{why}: in consumer group {group} it is rebuilt by one member with the others stopped: `siphon replay {p} {} --from 0 --reset`",
                    self.name
                )),
            ));
        }
        let reader = loop {
            let log = self.log.clone();
            let name = group.to_owned();
            let opened = tokio::task::spawn_blocking(move || log.group_reader(&name, from))
                .await
                .unwrap_or_else(|e| {
                    Some(Err(Error::permanent(format!("the group reader task: {e}"))))
                });
            match opened {
                Some(Ok(reader)) => break reader,
                Some(Err(e)) if e.is_transient() => {
                    self.wait_to_retry(
                        &e,
                        "sink cannot join its consumer group yet; retrying",
                        &mut backoff,
                    )
                    .await?;
                }
                Some(Err(e)) => return Err((Stop::Idle, self.fail(&e.to_string()))),
                None => {
                    return Err((
                        Stop::Idle,
                        self.fail(&format!(
                            "consumer_group: pipeline {p}'s change log is read by one process only (the file log); consumer groups need a log that many processes read (kind = \"kafka\")"
                        )),
                    ));
                }
            }
        };
        self.group_positions = Some(reader.positions.clone());
        self.damaged_cursor = None;
        self.update(|s| {
            s.component.state = if from.is_some() {
                State::Replaying
            } else {
                State::Running
            };
        });
        tracing::info!(sink = %self.name, group, replay = from.is_some(), "sink reading the log as a member of a consumer group");
        Ok(self.prefetch(reader.reader, false))
    }

    /// Clears what the sink owns in its store, and its view's state, retrying transient
    /// errors.
    async fn reset_store(
        &mut self,
        tables: &[TableInfo],
        backoff: &mut Backoff,
    ) -> Result<(), (Stop, String)> {
        if let Some(view) = &self.open_view
            && let Err(e) = view.clear()
        {
            return Err((Stop::Idle, self.fail(&format!("reset failed: {e}"))));
        }
        loop {
            match self.sink.reset(tables).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => {
                    self.wait_to_retry(&e, "sink cannot reset its store yet; retrying", backoff)
                        .await?;
                }
                Err(e) => return Err((Stop::Idle, self.fail(&format!("reset failed: {e}")))),
            }
        }
    }

    /// Opens the sink, moving its stored cursor back to `from` for a replay; retries
    /// transient errors. Returns the cursor the store keeps.
    async fn open_store(
        &mut self,
        tables: &[TableInfo],
        from: Option<u64>,
        backoff: &mut Backoff,
    ) -> Result<Option<StoreCursor>, (Stop, String)> {
        loop {
            let opened = match self.sink.open(tables, self.log.id()).await {
                Ok(stored) => match from {
                    Some(from) => self.sink.rewind(from).await.map(|()| stored),
                    None => Ok(stored),
                },
                Err(e) => Err(e),
            };
            match opened {
                Ok(stored) => return Ok(stored),
                Err(e) if e.is_transient() => {
                    self.wait_to_retry(&e, "sink cannot open yet; retrying", backoff)
                        .await?;
                }
                Err(e) => return Err((Stop::Idle, self.fail(&e.to_string()))),
            }
        }
    }

    /// After transient `error` while opening: says so (`what`), and waits out the backoff;
    /// `Err` on shutdown.
    async fn wait_to_retry(
        &mut self,
        error: &Error,
        what: &str,
        backoff: &mut Backoff,
    ) -> Result<(), (Stop, String)> {
        tracing::warn!(sink = %self.name, %error, "{what}");
        self.update(|s| s.component.retrying(error));
        self.note_oldest_unapplied().await;
        if sleep_unless_cancelled(&self.cancel, backoff.next_delay()).await {
            return Err((Stop::Shutdown, "shutting down".into()));
        }
        Ok(())
    }

    /// While its store cannot be opened, no batch says how old the first record the sink has
    /// not applied is: the append time of the record at its cursor stands for it.
    async fn note_oldest_unapplied(&mut self) {
        let known = self.handle.status.lock().unwrap().sinks[&self.name]
            .oldest_unapplied_ms
            .is_some();
        let next = self.progress.borrow().next_offset;
        if known || next >= self.log.durable_end() {
            return;
        }
        let log = self.log.clone();
        let first = tokio::task::spawn_blocking(move || log.reader(next)?.read_available(1)).await;
        if let Ok(Ok(records)) = first
            && let Some(record) = records.first()
        {
            self.update(|s| s.oldest_unapplied_ms = Some(record.timestamp_ms));
        }
    }

    /// Whether a store's cursor is a position in another log: it names another identity, or
    /// lies past this log's end (which no sink of this log can have reached) for longer than
    /// [`END_PATIENCE`]. A log another process writes (Kafka) makes its end known after its
    /// records: a transaction's commit reaches the records' partitions and the offsets
    /// topic one by one, so another member may have applied records past the end this
    /// process has heard of yet.
    fn belongs_elsewhere(
        &self,
        cursor: &StoreCursor,
    ) -> impl Future<Output = bool> + Send + 'static {
        let other = cursor.log.as_ref().is_some_and(|id| id != self.log.id());
        let (mut end, cancel, next) = (
            self.log.subscribe(),
            self.cancel.clone(),
            cursor.next_offset,
        );
        let sink = self.name.clone();
        async move {
            if other {
                return true;
            }
            if *end.borrow() < next {
                tracing::info!(
                    sink,
                    cursor = next,
                    end = *end.borrow(),
                    "the store's cursor lies past the log's end as heard of yet; waiting for the end to reach it"
                );
            }
            let reached = end.wait_for(|end| *end >= next);
            tokio::select! {
                reached = tokio::time::timeout(END_PATIENCE, reached) => !matches!(reached, Ok(Ok(_))),
                () = cancel.cancelled() => false,
            }
        }
    }

    fn fail(&self, message: &str) -> String {
        tracing::error!(sink = %self.name, error = message, "sink stopped");
        self.update(|s| s.component.failed(&message));
        message.to_owned()
    }

    fn save_cursor(&self, next_offset: u64, lost: Option<LostRecords>) -> siphon_core::Result<()> {
        self.offsets
            .save_sink(&self.name, &self.cursor(next_offset, lost))
    }

    fn cursor(&self, next_offset: u64, lost: Option<LostRecords>) -> SinkCursor {
        SinkCursor {
            log_id: Some(self.log.id().clone()),
            next_offset,
            lost,
        }
    }

    /// A reader of the log from `next`, made off the async threads (a partitioned log seeks
    /// each partition there); retries transient errors.
    async fn reader(
        &mut self,
        next: u64,
        backoff: &mut Backoff,
    ) -> Result<Box<dyn siphon_core::log::LogReader>, (Stop, String)> {
        loop {
            let log = self.log.clone();
            let made = tokio::task::spawn_blocking(move || log.reader(next))
                .await
                .unwrap_or_else(|e| Err(Error::permanent(format!("the log reader task: {e}"))));
            match made {
                Ok(reader) => return Ok(reader),
                Err(e) if e.is_transient() => {
                    self.wait_to_retry(&e, "sink cannot read the log yet; retrying", backoff)
                        .await?;
                }
                Err(e) => return Err((Stop::Idle, self.fail(&e.to_string()))),
            }
        }
    }

    /// Reading the log failed in a way retrying may mend (a broker out of reach): after a
    /// pause the sink opens again and reads on from its store's cursor.
    async fn read_interrupted(&mut self, e: &Error) -> Stop {
        tracing::warn!(sink = %self.name, error = %e, "reading the change log failed; retrying");
        self.update(|s| s.component.retrying(e));
        let delay = self.retry_backoff.next_delay();
        if sleep_unless_cancelled(&self.cancel, delay).await {
            Stop::Shutdown
        } else {
            Stop::Reopen
        }
    }

    /// The log could not be read: records lost to the size cap, or damage.
    fn read_failed(&self, e: &Error) -> Stop {
        if let &Error::OffsetOutOfRange {
            requested, start, ..
        } = e
        {
            let lost = LostRecords {
                first: requested,
                end: start,
            };
            tracing::error!(sink = %self.name, first_lost = requested, end_lost = start, "sink lost records to the change log's max_size cap");
            if let Err(e) = self.save_cursor(requested, Some(lost.clone())) {
                tracing::error!(sink = %self.name, error = %e, "saving the cursor failed");
            }
            let message = needs_replay_message(&self.handle.name, &self.name, &lost);
            self.progress.send_modify(|p| p.lost = Some(lost));
            self.update(|s| {
                s.component.state = State::NeedsReplay;
                s.component.last_error = Some(message);
            });
        } else {
            self.fail(&format!("reading the change log: {e}"));
        }
        Stop::Idle
    }

    /// Writes `record` to the dead-letter file and counts it; stops the sink where the file
    /// cannot be written.
    fn set_aside(&self, record: &SinkRecord, reason: &str) -> Result<(), Stop> {
        if let Err(e) = self.dead_letter(record, reason) {
            self.fail(&format!(
                "writing the record at offset {} to the dead-letter file {}: {e}",
                record.offset,
                self.dead_letter.display()
            ));
            return Err(Stop::Idle);
        }
        self.update(|s| {
            s.dead_lettered += 1;
            s.last_dead_letter = Some(format!("offset {}: {reason}", record.offset));
        });
        Ok(())
    }

    /// Appends a rejected record, with the reason, to the dead-letter file, durably.
    fn dead_letter(&self, record: &SinkRecord, reason: &str) -> std::io::Result<()> {
        if let Some(dir) = self.dead_letter.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let line = serde_json::json!({
            "offset": record.offset,
            "table": record.event.source.table_name(),
            "reason": reason,
            "event": siphon_format::envelope::envelope(&record.event),
        });
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.dead_letter)?;
        writeln!(file, "{line}")?;
        file.sync_data()
    }

    /// After transient `error` in the batch from `first_offset`: says so, waits out the
    /// backoff, and has the sink opened again.
    async fn reopen_after(&mut self, error: &Error, first_offset: u64) -> Stop {
        tracing::warn!(sink = %self.name, %error, first_offset, "sink error; reopening and retrying");
        self.update(|s| s.component.retrying(error));
        let delay = self.retry_backoff.next_delay();
        if sleep_unless_cancelled(&self.cancel, delay).await {
            Stop::Shutdown
        } else {
            Stop::Reopen
        }
    }

    /// Applies one batch, retrying transient errors; saves the cursor after it.
    async fn apply(&mut self, decoded: DecodedBatch) -> Result<(), Stop> {
        let DecodedBatch {
            first_offset,
            first_commit_ms,
            last_append_ms,
            last_commit,
            mut batch,
            failed,
            ..
        } = decoded;
        self.set_aside_failed(failed)?;
        // Kept through retries and reopenings: the lag grows while the batch does not go in.
        self.update(|s| s.oldest_unapplied_ms = Some(first_commit_ms));
        let started = Instant::now();
        self.apply_or_set_aside(&mut batch, first_offset).await?;
        let elapsed = started.elapsed();
        self.retry_backoff.reset();
        if let Some(positions) = self.group_positions.clone() {
            return self.applied_in_group(&*positions, &batch, last_append_ms, elapsed);
        }
        let next = batch.end;
        // What a store holding a transaction open applied is not durable yet: the cursor
        // saved here, and what the log keeps, stay at its last commit.
        let committed = if self.sink.holds_transaction() {
            self.progress.borrow().committed
        } else {
            next
        };
        if committed != self.progress.borrow().committed {
            self.save_committed(committed, first_offset).await?;
        }
        let mut replay_done = false;
        self.progress.send_modify(|p| {
            p.next_offset = next;
            p.committed = committed;
            if p.replay_until.is_some_and(|until| next >= until) {
                p.replay_until = None;
                replay_done = true;
            }
        });
        if replay_done {
            tracing::info!(sink = %self.name, until = next, "replay done");
        }
        let replaying = self.progress.borrow().replay_until.is_some();
        self.update(|s| {
            s.last_applied_append_ms = last_append_ms;
            s.oldest_unapplied_ms = None;
            // The watermark moves with what the store has committed.
            if committed == next
                && let Some((position, commit_ms)) = last_commit
            {
                s.applied_position = Some(position);
                s.applied_commit_ms = Some(commit_ms);
            }
            s.records_applied += next - first_offset;
            s.batches += 1;
            s.last_batch_records = batch.records.len();
            s.last_batch_ms = elapsed.as_secs_f64() * 1000.0;
            let state = if replaying {
                s.component.state
            } else {
                State::Running
            };
            s.component.progressed(state);
        });
        Ok(())
    }

    /// The records a stage could not pass: to the dead-letter file with `on_error =
    /// "dead_letter"`, else the sink stops.
    fn set_aside_failed(&self, failed: Vec<(SinkRecord, String)>) -> Result<(), Stop> {
        for (record, reason) in failed {
            let offset = record.offset;
            if self.delivery.on_error != OnError::DeadLetter {
                self.fail(&format!(
                    "the record at offset {offset} ({}): {reason}",
                    record.event.source.table_name()
                ));
                return Err(Stop::Idle);
            }
            tracing::warn!(sink = %self.name, offset, reason, "a transform failed on the record; written to the dead-letter file");
            self.set_aside(&record, &reason)?;
        }
        Ok(())
    }

    /// Applies `batch` to the store; a record the store refuses goes to the dead-letter
    /// file with `on_error = "dead_letter"` (and the rest is applied again), otherwise the
    /// sink stops; a transient error reopens the sink.
    async fn apply_or_set_aside(
        &mut self,
        batch: &mut SinkBatch,
        first_offset: u64,
    ) -> Result<(), Stop> {
        loop {
            match self.sink.apply(batch).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => {
                    return Err(self.reopen_after(&e, first_offset).await);
                }
                Err(Error::Rejected {
                    offset,
                    table,
                    reason,
                }) if self.delivery.on_error == OnError::DeadLetter
                    && batch.records.iter().any(|r| r.offset == offset) =>
                {
                    let at = batch
                        .records
                        .iter()
                        .position(|r| r.offset == offset)
                        .expect("found");
                    let record = batch.records.remove(at);
                    tracing::warn!(sink = %self.name, offset, %table, reason, "record rejected by the target; written to the dead-letter file");
                    self.set_aside(&record, &reason)?;
                }
                Err(e) => {
                    self.fail(&format!(
                        "applying offsets {first_offset}..{}: {e}",
                        batch.end
                    ));
                    return Err(Stop::Idle);
                }
            }
        }
    }

    /// Saves the cursor at `committed` after a batch from `first_offset`.
    async fn save_committed(&mut self, committed: u64, first_offset: u64) -> Result<(), Stop> {
        let cursor = self.cursor(committed, None);
        // A store that keeps its cursor made the batch durable itself.
        let saved = if self.sink.keeps_cursor() {
            self.offsets.save_sink_unsynced(&self.name, &cursor)
        } else {
            self.offsets.save_sink(&self.name, &cursor)
        };
        match saved {
            Ok(()) => {}
            // A full disk: the batch is applied, its cursor not saved. The sink opens
            // again and goes on from the cursor it keeps (the store's own has the batch;
            // siphon's file sends it again, as after a crash).
            Err(e) if e.is_transient() => {
                let error = Error::transient(format!("saving the cursor: {e}"));
                return Err(self.reopen_after(&error, first_offset).await);
            }
            Err(e) => {
                self.fail(&format!("saving the cursor: {e}"));
                return Err(Stop::Idle);
            }
        }
        Ok(())
    }

    /// A consumer group's member applied a batch: the group remembers where its tables got
    /// to. Its progress is the highest offset it applied (other members hold the rest).
    fn applied_in_group(
        &mut self,
        positions: &dyn GroupPositions,
        batch: &SinkBatch,
        last_append_ms: i64,
        elapsed: std::time::Duration,
    ) -> Result<(), Stop> {
        if batch.end > 0
            && let Err(e) = positions.applied_through(batch.end - 1)
        {
            tracing::warn!(sink = %self.name, error = %e, "the consumer group did not take this member's positions; its tables are read again from the last ones it took");
        }
        self.progress.send_modify(|p| {
            p.next_offset = p.next_offset.max(batch.end);
            p.committed = p.next_offset;
        });
        self.update(|s| {
            s.last_applied_append_ms = last_append_ms;
            s.oldest_unapplied_ms = None;
            s.records_applied += batch.records.len() as u64;
            s.batches += 1;
            s.last_batch_records = batch.records.len();
            s.last_batch_ms = elapsed.as_secs_f64() * 1000.0;
            s.component.progressed(State::Running);
        });
        Ok(())
    }
}
