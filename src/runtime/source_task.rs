//! The task that runs a pipeline's source, retrying transient errors.

use std::sync::Arc;
use std::time::Duration;

use siphon_core::source::{Source, SourceContext, TableInfo};
use tokio::sync::watch;

use super::PipelineHandle;
use super::backoff::{Backoff, sleep_unless_cancelled};
use super::status::State;

const MAX_BACKOFF: Duration = Duration::from_secs(30);
const HEALTHY_RUN: Duration = Duration::from_secs(60);

pub(super) async fn run(
    mut source: Box<dyn Source>,
    ctx: SourceContext,
    handle: Arc<PipelineHandle>,
    tables: watch::Sender<Option<Vec<TableInfo>>>,
) {
    let mut backoff = Backoff::new(MAX_BACKOFF);
    let pipeline = ctx.pipeline.clone();
    // The sinks open once they know the tables.
    loop {
        match source.tables().await {
            Ok(t) => {
                tables.send_replace(Some(t));
                break;
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(%pipeline, error = %e, "source cannot list its tables yet; retrying");
                handle.update(|s| s.source.retrying(&e));
                if sleep_unless_cancelled(&ctx.cancel, backoff.next_delay()).await {
                    return stopped(&handle);
                }
            }
            Err(e) => {
                tracing::error!(%pipeline, error = %e, "source failed");
                return handle.update(|s| s.source.failed(&e));
            }
        }
    }
    loop {
        // Running once the source says it reached its database (status reads that).
        handle.update(|s| s.source.state = State::Starting);
        let started = std::time::Instant::now();
        let result = source.run(&ctx).await;
        ctx.metrics.disconnected();
        // A source that ran well for a while starts its backoff afresh.
        if started.elapsed() > HEALTHY_RUN {
            backoff.reset();
        }
        match result {
            Ok(()) => return stopped(&handle),
            Err(_) if ctx.cancel.is_cancelled() => return stopped(&handle),
            Err(e) if e.is_transient() => {
                tracing::warn!(%pipeline, error = %e, "source error; retrying");
                handle.update(|s| s.source.retrying(&e));
                if sleep_unless_cancelled(&ctx.cancel, backoff.next_delay()).await {
                    return stopped(&handle);
                }
            }
            Err(e) => {
                tracing::error!(%pipeline, error = %e, "source failed; the sinks go on with what the log holds");
                return handle.update(|s| s.source.failed(&e));
            }
        }
    }
}

fn stopped(handle: &PipelineHandle) {
    handle.update(|s| s.source.state = State::Stopped);
}
