//! Starting one pipeline: its log, its offsets, and its tasks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use siphon_core::log::file::FileLog;
use siphon_core::log::{ChangeLog, Consumer};
use siphon_core::offsets::{LostRecords, OffsetStore};
use siphon_core::source::{SourceContext, TableInfo};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::status::{ComponentStatus, PipelineStatus, SinkStatus, State, needs_replay_message};
use super::{PipelineHandle, sink_task, source_task};
use crate::config::{Config, LogSpec, PipelineConfig};

/// Which tasks a pipeline runs.
#[derive(Debug)]
pub(super) enum StartMode {
    /// Everything: the source, every sink, log maintenance.
    Daemon,
    /// One sink alone, for an offline replay; the tables are given.
    SinkOnly {
        sink: String,
        tables: Vec<TableInfo>,
    },
}

/// Opens the pipeline's log and offsets and spawns its tasks onto `tasks`.
pub(super) fn start(
    config: &Config,
    name: &str,
    p: &PipelineConfig,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
    mode: StartMode,
) -> anyhow::Result<Arc<PipelineHandle>> {
    let dir = config.pipeline_dir(name);
    let (log, maintenance_interval): (Arc<dyn ChangeLog>, Duration) = match &p.log {
        LogSpec::File(c) => (
            Arc::new(FileLog::open(dir.join("log"), c.clone())?),
            c.maintenance_interval.0,
        ),
    };
    let offsets = OffsetStore::open(dir.join("offsets"))?;
    let mut status = PipelineStatus {
        name: name.to_owned(),
        source: ComponentStatus::new(p.source.kind()),
        ..Default::default()
    };
    let mut sinks = Vec::new();
    let mut controls = BTreeMap::new();
    let only = match &mode {
        StartMode::Daemon => None,
        StartMode::SinkOnly { sink, .. } => Some(sink.as_str()),
    };
    for (sink_name, sink_config) in p
        .sinks
        .iter()
        .filter(|(n, _)| only.is_none_or(|o| o == n.as_str()))
    {
        let sink = sink_config
            .spec
            .build(name, sink_name)
            .map_err(|e| anyhow::anyhow!("sink {sink_name}: {e}"))?;
        let cursor = offsets.sink(sink_name)?;
        status.sinks.insert(
            sink_name.clone(),
            SinkStatus {
                component: ComponentStatus::new(sink_config.spec.kind()),
                next_offset: cursor.next_offset,
                keeps_history: sink.keeps_history(),
                lost: cursor.lost,
                ..Default::default()
            },
        );
        let routing = sink_config
            .delivery
            .routing()
            .map_err(|e| anyhow::anyhow!("sink {sink_name}: {e}"))?;
        let (tx, rx) = mpsc::channel(4);
        controls.insert(sink_name.clone(), tx);
        sinks.push((
            sink_name.clone(),
            sink,
            sink_config.delivery.clone(),
            routing,
            rx,
        ));
    }
    let handle = Arc::new(PipelineHandle {
        source_metrics: Default::default(),
        end_at_start: log.durable_end(),
        log: log.clone(),
        status: Mutex::new(status),
        sinks: controls,
    });
    let tables_rx = match mode {
        StartMode::Daemon => {
            let (tables_tx, tables_rx) = watch::channel(None);
            let ctx = SourceContext {
                pipeline: name.to_owned(),
                log: log.clone(),
                offsets: offsets.clone(),
                cancel: cancel.clone(),
                metrics: handle.source_metrics.clone(),
            };
            tasks.spawn(source_task::run(
                p.source.build(name),
                ctx,
                handle.clone(),
                tables_tx,
            ));
            tasks.spawn(maintain(
                handle.clone(),
                maintenance_interval,
                cancel.clone(),
            ));
            tables_rx
        }
        StartMode::SinkOnly { tables, .. } => watch::channel(Some(tables)).1,
    };
    for (sink_name, sink, delivery, routing, commands) in sinks {
        tasks.spawn(sink_task::run(sink_task::SinkTask {
            dead_letter: dir.join("dead-letter").join(format!("{sink_name}.jsonl")),
            retry_backoff: super::backoff::Backoff::new(delivery.max_backoff.0),
            name: sink_name,
            sink,
            delivery,
            routing,
            log: log.clone(),
            offsets: offsets.clone(),
            handle: handle.clone(),
            tables: tables_rx.clone(),
            commands,
            cancel: cancel.clone(),
        }));
    }
    Ok(handle)
}

/// Runs retention and compaction on the log now and then, never removing what a sink needs.
async fn maintain(handle: Arc<PipelineHandle>, every: Duration, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let consumers: Vec<Consumer> = {
            let status = handle.status.lock().unwrap();
            status
                .sinks
                .iter()
                .map(|(name, s)| Consumer {
                    name: name.clone(),
                    next_offset: s.next_offset,
                    keeps_history: s.keeps_history,
                })
                .collect()
        };
        match handle.log.maintain(&consumers).await {
            Ok(report) => {
                if report.segments_deleted > 0 || report.records_compacted > 0 {
                    tracing::info!(
                        deleted_segments = report.segments_deleted,
                        compacted_records = report.records_compacted,
                        freed_bytes = report.bytes_freed,
                        "change log maintenance"
                    );
                }
                let lost: u64 = report.lost.iter().map(|(_, r)| r.end - r.start).sum();
                if lost > 0 {
                    handle.update(|s| {
                        s.records_lost += lost;
                        for (sink, range) in &report.lost {
                            if let Some(st) = s.sinks.get_mut(sink) {
                                st.component.state = State::NeedsReplay;
                                let lost = LostRecords {
                                    first: range.start,
                                    end: range.end,
                                };
                                st.component.last_error =
                                    Some(needs_replay_message(&s.name, sink, &lost));
                            }
                        }
                    });
                }
            }
            Err(e) => tracing::error!(error = %e, "change log maintenance failed"),
        }
    }
}
