//! The daemon's runtime: one task for each source, sink and log housekeeping, supervised;
//! graceful shutdown through a cancellation token.
//!
//! A sink runs as its own task with its own cursor: a failing sink never stops the source or
//! the other sinks. Transient errors retry with capped exponential backoff and show in the
//! status; a permanent error stops only the component that hit it.

mod backoff;
mod batcher;
mod pipeline;
mod prefetch;
mod sink_task;
mod source_task;
pub mod status;
mod view;
mod wait;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use siphon_core::log::ChangeLog;
use siphon_core::source::SnapshotRequest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::status::needs_replay_message;
pub use self::status::{PipelineStatus, SinkProgress, SinkStatus, State};
pub use self::wait::{WaitError, WaitState};
use crate::config::Config;
use siphon_core::offsets::LostRecords;
pub(crate) use siphon_core::source::now_ms;

/// The running pipelines, as the admin API sees them.
#[derive(Debug, Default)]
pub struct Runtime {
    pipelines: BTreeMap<String, Arc<PipelineHandle>>,
}

/// A request to a sink task.
#[derive(Debug)]
pub enum SinkCommand {
    /// Re-apply the log from `from`, first clearing the store if `reset`. Replies with the log
    /// end at the start of the replay, or why it cannot start.
    Replay {
        from: u64,
        reset: bool,
        reply: oneshot::Sender<Result<u64, String>>,
    },
}

/// A running pipeline: its log, status, and the channels to its sinks.
#[derive(Debug)]
pub struct PipelineHandle {
    name: String,
    /// The configured source: it names its points. `None` where it runs elsewhere.
    source: Option<crate::config::SourceSpec>,
    /// Reads the positions of the pipeline's events.
    positions: Arc<dyn siphon_core::position::PositionDecoder>,
    log: Arc<dyn ChangeLog>,
    source_metrics: siphon_core::source::SourceMetrics,
    status: Mutex<PipelineStatus>,
    end_at_start: u64,
    /// When the pipeline started, ms since the epoch.
    started_ms: i64,
    sinks: BTreeMap<String, SinkControl>,
}

/// A running sink as the pipeline sees it: where to send requests, and its progress.
#[derive(Debug)]
struct SinkControl {
    commands: mpsc::Sender<SinkCommand>,
    progress: watch::Receiver<SinkProgress>,
    /// Cuts the sink's linger short: a read-your-writes wait is waiting for it.
    hurry: Arc<tokio::sync::Notify>,
    /// It reads the log as a member of a consumer group.
    group: bool,
}

impl PipelineHandle {
    /// The status now, with current log figures, sink progress and lag.
    pub fn status(&self) -> PipelineStatus {
        let mut s = self.status.lock().unwrap().clone();
        s.log = self.log.stats();
        for (name, sink) in &self.sinks {
            if let Some(st) = s.sinks.get_mut(name) {
                st.set_progress(&sink.progress.borrow());
                // Records below the log's start that its store has not committed are gone
                // (the size cap removed them), whatever the sink's task is doing now.
                if st.lost.is_none() && st.committed_offset < s.log.start_offset {
                    st.lost = Some(LostRecords {
                        first: st.committed_offset,
                        end: s.log.start_offset,
                    });
                }
                if let Some(lost) = &st.lost {
                    st.component.state = State::NeedsReplay;
                    st.component.last_error = Some(needs_replay_message(&s.name, name, lost));
                }
            }
        }
        s.records_appended = s.log.end_offset.saturating_sub(self.end_at_start);
        s.source_metrics = self.source_metrics.values();
        if s.source.state == State::Starting && self.source_metrics.is_connected() {
            s.source.state = State::Running;
        }
        let now = now_ms();
        s.source_behind_ms = self.source_metrics.behind_ms(now, self.started_ms);
        s.compute_lag(now);
        s
    }

    fn update(&self, f: impl FnOnce(&mut PipelineStatus)) {
        f(&mut self.status.lock().unwrap());
    }
}

/// Why a replay request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No such pipeline or sink.
    #[error("no sink {sink:?} in pipeline {pipeline:?}")]
    NotFound { pipeline: String, sink: String },
    /// The sink refused or could not start.
    #[error("{0}")]
    Refused(String),
}

impl Runtime {
    /// Asks pipeline `pipeline`'s source's incremental snapshot for something: tables to
    /// read again while it streams, stop, pause or resume.
    pub fn request_snapshot(
        &self,
        pipeline: &str,
        request: SnapshotRequest,
    ) -> Result<(), ReplayError> {
        let p = self
            .pipelines
            .get(pipeline)
            .ok_or_else(|| ReplayError::Refused(format!("no pipeline {pipeline:?}")))?;
        let kind = p.status.lock().unwrap().source.kind.clone();
        if kind != "postgres" && kind != "mysql" {
            return Err(ReplayError::Refused(format!(
                "incremental snapshots are built for PostgreSQL and MySQL/MariaDB sources; {pipeline:?} reads from {kind:?}"
            )));
        }
        p.source_metrics.request_snapshot(request);
        Ok(())
    }

    /// The status of every pipeline.
    pub fn statuses(&self) -> Vec<PipelineStatus> {
        self.pipelines.values().map(|p| p.status()).collect()
    }

    /// Asks a sink to replay; returns the log end the replay runs to.
    pub async fn replay(
        &self,
        pipeline: &str,
        sink: &str,
        from: u64,
        reset: bool,
    ) -> Result<u64, ReplayError> {
        let not_found = || ReplayError::NotFound {
            pipeline: pipeline.into(),
            sink: sink.into(),
        };
        let tx = &self
            .pipelines
            .get(pipeline)
            .and_then(|p| p.sinks.get(sink))
            .ok_or_else(not_found)?
            .commands;
        let (reply, rx) = oneshot::channel();
        tx.send(SinkCommand::Replay { from, reset, reply })
            .await
            .map_err(|_| ReplayError::Refused("the sink task has stopped".into()))?;
        rx.await
            .map_err(|_| ReplayError::Refused("the sink task has stopped".into()))?
            .map_err(ReplayError::Refused)
    }
}

/// Starts every pipeline of `config` onto `tasks`; they run until `cancel` fires.
pub fn start(
    config: &Config,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> anyhow::Result<Arc<Runtime>> {
    let mut pipelines = BTreeMap::new();
    for (name, p) in &config.pipelines {
        let handle = pipeline::start(config, name, p, cancel, tasks, pipeline::StartMode::Daemon)
            .map_err(|e| anyhow::anyhow!("pipeline {name}: {e}"))?;
        pipelines.insert(name.clone(), handle);
    }
    Ok(Arc::new(Runtime { pipelines }))
}

/// Waits for `tasks` to end after their cancellation: sources stop, sinks finish the batch in
/// flight and save their cursors, within `timeout`; past it the rest are aborted.
pub async fn shut_down(mut tasks: JoinSet<()>, timeout: std::time::Duration) {
    tracing::info!(
        ?timeout,
        "shutting down: stopping sources, finishing sink batches"
    );
    let drained = tokio::time::timeout(timeout, async {
        while let Some(result) = tasks.join_next().await {
            if let Err(e) = result {
                tracing::error!(error = %e, "a task failed during shutdown");
            }
        }
    })
    .await;
    match drained {
        Ok(()) => tracing::info!("shut down cleanly"),
        Err(_) => {
            tracing::warn!(
                still_running = tasks.len(),
                "shutdown timeout reached; exiting anyway"
            );
            tasks.abort_all();
        }
    }
}

/// Replays one sink while the daemon is down: runs that sink alone from `from` (clearing its
/// store first if `reset`) until it has applied the whole log. `progress` sees its status
/// now and then.
pub async fn replay_offline(
    config: &Config,
    pipeline: &str,
    sink: &str,
    from: u64,
    reset: bool,
    tables: Vec<siphon_core::source::TableInfo>,
    mut progress: impl FnMut(&SinkStatus, u64),
) -> anyhow::Result<SinkStatus> {
    let p = config.pipeline(pipeline)?;
    if !p.sinks.contains_key(sink) {
        anyhow::bail!(
            "pipeline {pipeline} has no sink {sink:?}; configured: {}",
            p.sinks.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let cancel = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mode = pipeline::StartMode::SinkOnly {
        sink: sink.to_owned(),
        tables,
    };
    let handle = pipeline::start(config, pipeline, p, &cancel, &mut tasks, mode)?;
    let runtime = Runtime {
        pipelines: BTreeMap::from([(pipeline.to_owned(), handle.clone())]),
    };
    let result = async {
        let until = runtime.replay(pipeline, sink, from, reset).await?;
        loop {
            let status = handle.status().sinks.remove(sink).expect("the sink runs");
            progress(&status, until);
            match status.component.state {
                State::Running if status.replay_until.is_none() => return Ok(status),
                State::Failed | State::NeedsReplay | State::Stopped => {
                    anyhow::bail!(
                        "replay stopped: {}",
                        status.component.last_error.unwrap_or_default()
                    )
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }
    .await;
    cancel.cancel();
    while tasks.join_next().await.is_some() {}
    result
}

#[cfg(test)]
mod tests;
