//! Read-your-writes: wait until a sink has applied every change committed at or before a
//! place in the source database's change stream.
//!
//! The source says how far it has read ([`SourceMetrics::reached`]: every change up to a
//! point is in the log below an offset). A wait takes the first such report at or past the
//! asked-for point, then waits until the sink's store has committed everything below that
//! offset. An idle PostgreSQL stream may not pass the point soon on its own (the position an
//! application reads after its commit can lie past the commit record): after a short while
//! the wait nudges the source, which writes a message into the WAL that the stream then
//! passes.
//!
//! [`SourceMetrics::reached`]: siphon_core::source::SourceMetrics::reached

use std::time::Duration;

use serde::Serialize;
use siphon_core::position::{Reached, SourcePoint};
use tokio::time::Instant;

use super::Runtime;

/// How long a wait lets the stream pass the point by itself before nudging the source.
const NUDGE_AFTER: Duration = Duration::from_millis(50);

/// Where a wait stands: what the sink has applied and what the wait needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitState {
    /// The point asked for.
    pub point: String,
    /// How far the source has read (its last report), if it said.
    pub source_reached: Option<String>,
    /// The log offset the sink must have committed: everything up to the point is below it
    /// (unknown until the source has read past the point).
    pub needed_offset: Option<u64>,
    /// Everything below this offset is committed in the sink's store.
    pub committed_offset: u64,
    /// Where the last change the sink applied committed in the source (LSN or GTID).
    pub applied_position: Option<String>,
    /// How long the wait took, in milliseconds.
    pub waited_ms: u64,
    /// Of that, microseconds until the source had read past the point (none if it did not),
    /// and then until the sink's store had committed it: where the time went.
    pub source_us: Option<u64>,
    pub sink_us: Option<u64>,
}

/// Why a wait did not end with the point applied.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// No such pipeline.
    #[error("no pipeline {0:?}")]
    NoPipeline(String),
    /// No such pipeline or sink.
    #[error("no sink {sink:?} in pipeline {pipeline:?}")]
    NotFound { pipeline: String, sink: String },
    /// The point is not one of the source's kind.
    #[error("{0}")]
    BadPoint(String),
    /// The time ran out; where things stood.
    #[error("timed out")]
    TimedOut(Box<WaitState>),
    /// This daemon cannot say when the point is applied: why.
    #[error("{0}")]
    Unsupported(String),
}

impl Runtime {
    /// The point `text` names as the read-your-writes parameter `param` of `pipeline`'s
    /// source (`lsn`, `gtid`).
    pub fn point(&self, pipeline: &str, param: &str, text: &str) -> Result<SourcePoint, WaitError> {
        let handle = self
            .pipelines
            .get(pipeline)
            .ok_or_else(|| WaitError::NoPipeline(pipeline.into()))?;
        let Some(source) = &handle.source else {
            return Err(WaitError::Unsupported(format!(
                "pipeline {pipeline}'s source runs in another daemon, which knows where the log holds a source position: wait on that daemon's admin API"
            )));
        };
        match source.parse_point(param, text) {
            Some(Ok(point)) => Ok(point),
            Some(Err(why)) => Err(WaitError::BadPoint(why)),
            None => Err(WaitError::BadPoint(format!(
                "pipeline {pipeline}'s source ({}) names no point by {param}=",
                source.kind()
            ))),
        }
    }

    /// Waits up to `timeout` until sink `sink` of `pipeline` has committed every change that
    /// its source's database committed at or before `point`.
    pub async fn wait(
        &self,
        pipeline: &str,
        sink: &str,
        point: SourcePoint,
        timeout: Duration,
    ) -> Result<WaitState, WaitError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let handle = self.pipelines.get(pipeline);
        let (handle, control) = handle
            .and_then(|p| p.sinks.get(sink).map(|s| (p, s)))
            .ok_or_else(|| WaitError::NotFound {
                pipeline: pipeline.into(),
                sink: sink.into(),
            })?;
        let promises = handle.log.promises();
        if !(promises.total_order && promises.dense_offsets) {
            return Err(WaitError::Unsupported(format!(
                "pipeline {pipeline:?}'s change log has no single dense order of its records, so a wait cannot map a source position to what a sink applied"
            )));
        }
        if control.group {
            return Err(WaitError::Unsupported(format!(
                "sink {sink:?} reads the log as a member of a consumer group, which shares the log's tables with other daemons: no one member knows when everything up to a point is applied"
            )));
        }

        let state = |reached: &Reached, needed: Option<u64>, source_at: Option<Instant>| {
            let status = handle.status();
            let sink_status = status.sinks.get(sink);
            WaitState {
                point: point.to_string(),
                source_reached: reached.point.as_ref().map(ToString::to_string),
                needed_offset: needed,
                committed_offset: control.progress.borrow().committed,
                applied_position: sink_status.and_then(|s| s.applied_position.clone()),
                waited_ms: started.elapsed().as_millis() as u64,
                source_us: source_at.map(|at| (at - started).as_micros() as u64),
                sink_us: source_at
                    .filter(|_| needed.is_some())
                    .map(|at| at.elapsed().as_micros() as u64),
            }
        };

        // The source reads past the point.
        let mut reached = handle.source_metrics.watch_reached();
        let mut nudged = false;
        let needed = loop {
            let now = reached.borrow_and_update().clone();
            if now.point.as_ref().is_some_and(|p| p.covers(&*point)) {
                break now.log_end;
            }
            let until = if nudged {
                deadline
            } else {
                deadline.min(started + NUDGE_AFTER)
            };
            match tokio::time::timeout_at(until, reached.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(WaitError::TimedOut(Box::new(state(&now, None, None)))),
                Err(_) if until >= deadline => {
                    return Err(WaitError::TimedOut(Box::new(state(&now, None, None))));
                }
                Err(_) => {
                    handle.source_metrics.nudge();
                    nudged = true;
                }
            }
        };

        // The sink commits everything below where the log held it.
        let source_at = Some(Instant::now());
        let mut progress = control.progress.clone();
        if progress.borrow().committed < needed {
            // The sink need not linger for a fuller batch: someone waits.
            control.hurry.notify_one();
        }
        loop {
            if progress.borrow_and_update().committed >= needed {
                return Ok(state(&reached.borrow(), Some(needed), source_at));
            }
            match tokio::time::timeout_at(deadline, progress.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(WaitError::TimedOut(Box::new(state(
                        &reached.borrow(),
                        Some(needed),
                        source_at,
                    ))));
                }
            }
        }
    }
}
