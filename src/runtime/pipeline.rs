//! Starting one pipeline: its log, its offsets, and its tasks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use siphon_core::log::{ChangeLog, Consumer};
use siphon_core::offsets::{OffsetStore, SinkCursor};
use siphon_core::source::{SourceContext, TableInfo};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::status::{ComponentStatus, PipelineStatus, SinkProgress, SinkStatus};
use super::{PipelineHandle, SinkControl, sink_task, source_task};
use crate::config::{Config, PipelineConfig};

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
    let log = open_log(config, name, p, &mode)?;
    let offsets = OffsetStore::open(dir.join("offsets"))?;
    let mut source_status = ComponentStatus::new(p.source_kind());
    if p.source.is_none() {
        source_status.state = super::State::Elsewhere;
    }
    let mut status = PipelineStatus {
        name: name.to_owned(),
        source: source_status,
        log_retention: p.log.retention(),
        ..Default::default()
    };
    let mut sinks = Vec::new();
    let mut controls = BTreeMap::new();
    let only = match &mode {
        StartMode::Daemon => None,
        StartMode::SinkOnly { sink, .. } => Some(sink.as_str()),
    };
    let at = SinkPlace {
        pipeline: name,
        config: p,
        dir: &dir,
        offsets: &offsets,
        log: &*log,
    };
    for (sink_name, sink_config) in p
        .sinks
        .iter()
        .filter(|(n, _)| only.is_none_or(|o| o == n.as_str()))
    {
        let (sink_status, control, parts) = at.prepare(sink_name, sink_config)?;
        status.sinks.insert(sink_name.clone(), sink_status);
        controls.insert(sink_name.clone(), control);
        sinks.push(parts);
    }
    let handle = Arc::new(PipelineHandle {
        name: name.to_owned(),
        source: p.source.clone(),
        positions: p.positions(),
        source_metrics: Default::default(),
        end_at_start: log.durable_end(),
        started_ms: super::now_ms(),
        log: log.clone(),
        status: Mutex::new(status),
        sinks: controls,
    });
    let tables_rx = match mode {
        StartMode::Daemon if p.source.is_none() => watch::channel(Some(logged_tables(&*log))).1,
        StartMode::Daemon => {
            let (tables_tx, tables_rx) = watch::channel(None);
            let ctx = SourceContext {
                pipeline: name.to_owned(),
                log: log.clone(),
                offsets: offsets.clone(),
                cancel: cancel.clone(),
                metrics: handle.source_metrics.clone(),
            };
            let source = p.source.as_ref().expect("a source");
            tasks.spawn(source_task::run(
                source.build(name),
                ctx,
                handle.clone(),
                tables_tx,
            ));
            if let Some(every) = log.maintenance_interval() {
                tasks.spawn(maintain(handle.clone(), every, cancel.clone()));
            }
            tables_rx
        }
        StartMode::SinkOnly { tables, .. } if tables.is_empty() => {
            watch::channel(Some(logged_tables(&*log))).1
        }
        StartMode::SinkOnly { tables, .. } => watch::channel(Some(tables)).1,
    };
    for parts in sinks {
        tasks.spawn(sink_task::run(parts.into_task(
            &at,
            &handle,
            tables_rx.clone(),
            cancel.clone(),
        )));
    }
    Ok(handle)
}

/// The pipeline's log: opened (made if new) by the daemon that runs its source, which writes
/// it; anything else reads beside that daemon, in a log that must exist.
fn open_log(
    config: &Config,
    name: &str,
    p: &PipelineConfig,
    mode: &StartMode,
) -> anyhow::Result<Arc<dyn ChangeLog>> {
    let writes = matches!(mode, StartMode::Daemon) && p.source.is_some();
    let ctx = config.log_context(name, p);
    if writes {
        return Ok(p.log.open(&ctx)?);
    }
    p.log.open_existing(&ctx)?.ok_or_else(|| {
        anyhow::anyhow!(
            "pipeline {name} has no change log yet ({} log): start the daemon that runs its source first",
            p.log.kind()
        )
    })
}

/// The tables the log has schemas of: what the sinks open on without a source here.
fn logged_tables(log: &dyn ChangeLog) -> Vec<TableInfo> {
    let mut tables: BTreeMap<siphon_core::TableName, TableInfo> = BTreeMap::new();
    for schema in log.schemas().all() {
        tables.insert(
            schema.name(),
            TableInfo {
                name: schema.name(),
                key_columns: schema
                    .key
                    .iter()
                    .map(|&i| schema.columns[i].name.to_string())
                    .collect(),
            },
        );
    }
    tables.into_values().collect()
}

/// Where a pipeline's sinks are made: the pipeline, its directory, offsets and log.
struct SinkPlace<'a> {
    pipeline: &'a str,
    config: &'a PipelineConfig,
    dir: &'a std::path::Path,
    offsets: &'a OffsetStore,
    log: &'a dyn ChangeLog,
}

impl SinkPlace<'_> {
    /// Sink `sink_name`: built, its saved cursor read, its status, the pipeline's control of
    /// it and the parts of its task.
    fn prepare(
        &self,
        sink_name: &str,
        sink_config: &crate::config::SinkConfig,
    ) -> anyhow::Result<(SinkStatus, SinkControl, SinkParts)> {
        let sink = sink_config
            .spec
            .build(self.pipeline, sink_name)
            .map_err(|e| anyhow::anyhow!("sink {sink_name}: {e}"))?;
        let (cursor, damaged_cursor) = self.saved_cursor(sink_name);
        let status = SinkStatus {
            component: ComponentStatus::new(sink_config.spec.kind()),
            keeps_history: sink.keeps_history(),
            ..Default::default()
        };
        let stages = sink_config
            .stages(&self.config.transforms)
            .map_err(|e| anyhow::anyhow!("sink {sink_name}: {e}"))?;
        let (commands_tx, commands) = mpsc::channel(4);
        let (progress, progress_rx) = watch::channel(SinkProgress {
            next_offset: cursor.next_offset,
            committed: cursor.next_offset,
            lost: cursor.lost,
            replay_until: None,
        });
        let view = sink_config
            .delivery
            .view
            .as_ref()
            .map(|view| super::view::ViewSpec {
                name: view.clone(),
                config: self.config.views[view].clone(),
                path: self.dir.join("views").join(format!("{sink_name}.redb")),
            });
        let hurry = Arc::new(tokio::sync::Notify::new());
        let control = SinkControl {
            commands: commands_tx,
            progress: progress_rx,
            hurry: hurry.clone(),
            group: sink_config.delivery.consumer_group,
        };
        let parts = SinkParts {
            name: sink_name.to_owned(),
            sink,
            delivery: sink_config.delivery.clone(),
            stages,
            commands,
            progress,
            hurry,
            damaged_cursor,
            view,
        };
        Ok((status, control, parts))
    }

    /// The sink's saved cursor, and why it could not be read where it could not: a damaged
    /// cursor file stops this sink only, and only if its store keeps no cursor.
    fn saved_cursor(&self, sink_name: &str) -> (SinkCursor, Option<String>) {
        match self.offsets.sink(sink_name) {
            Ok(cursor) if cursor.log_id.as_ref().is_some_and(|id| id != self.log.id()) => {
                tracing::warn!(sink = %sink_name, "the sink's saved cursor belongs to another change log (the log was replaced): it starts afresh");
                (SinkCursor::default(), None)
            }
            Ok(cursor) => (cursor, None),
            Err(e) => {
                tracing::warn!(sink = %sink_name, error = %e, "the sink's saved cursor cannot be read");
                (
                    SinkCursor::default(),
                    Some(format!("the saved cursor cannot be read ({e})")),
                )
            }
        }
    }
}

/// What a sink task is made of, gathered before the pipeline's handle exists.
struct SinkParts {
    name: String,
    sink: Box<dyn siphon_core::sink::Sink>,
    delivery: crate::config::DeliveryConfig,
    stages: siphon_core::sink::stage::Stages,
    commands: mpsc::Receiver<super::SinkCommand>,
    progress: watch::Sender<SinkProgress>,
    hurry: Arc<tokio::sync::Notify>,
    damaged_cursor: Option<String>,
    view: Option<super::view::ViewSpec>,
}

impl SinkParts {
    /// The sink's task, reading `tables` from the pipeline's log.
    fn into_task(
        self,
        at: &SinkPlace<'_>,
        handle: &Arc<PipelineHandle>,
        tables: watch::Receiver<Option<Vec<TableInfo>>>,
        cancel: CancellationToken,
    ) -> sink_task::SinkTask {
        let group = self
            .delivery
            .consumer_group
            .then(|| format!("siphon.{}.{}", at.pipeline, self.name));
        sink_task::SinkTask {
            dead_letter: at
                .dir
                .join("dead-letter")
                .join(format!("{}.jsonl", self.name)),
            retry_backoff: super::backoff::Backoff::new(self.delivery.max_backoff.0),
            name: self.name,
            sink: self.sink,
            delivery: self.delivery,
            stages: self.stages,
            log: handle.log.clone(),
            offsets: at.offsets.clone(),
            handle: handle.clone(),
            tables,
            commands: self.commands,
            cancel,
            progress: self.progress,
            hurry: self.hurry,
            damaged_cursor: self.damaged_cursor,
            group,
            group_positions: None,
            view: self.view,
            open_view: None,
        }
    }
}

/// Runs retention and compaction on the log now and then, never removing what a sink needs.
async fn maintain(handle: Arc<PipelineHandle>, every: Duration, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // What each store has committed: a store that rolls back to it reads the log again
        // from there.
        let keeps_history: BTreeMap<String, bool> = {
            let status = handle.status.lock().unwrap();
            status
                .sinks
                .iter()
                .map(|(name, s)| (name.clone(), s.keeps_history))
                .collect()
        };
        let consumers: Vec<Consumer> = handle
            .sinks
            .iter()
            .map(|(name, sink)| Consumer {
                name: name.clone(),
                next_offset: sink.progress.borrow().committed,
                keeps_history: keeps_history.get(name).copied().unwrap_or(true),
            })
            .collect();
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
                // Which sinks lost what shows in status by itself (their position is below
                // the log's start); the count is kept here.
                let lost: u64 = report.lost.iter().map(|(_, r)| r.end - r.start).sum();
                if lost > 0 {
                    handle.update(|s| s.records_lost += lost);
                }
            }
            Err(e) => tracing::error!(error = %e, "change log maintenance failed"),
        }
    }
}
