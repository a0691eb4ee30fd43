//! What every pipeline is doing, shared between its tasks, the admin API and `siphon status`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use siphon_core::log::LogStats;
use siphon_core::offsets::LostRecords;

/// The state of a source or sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Connecting or opening.
    #[default]
    Starting,
    /// Working.
    Running,
    /// A transient error; retrying after a backoff.
    Retrying,
    /// Re-applying the log on request (`siphon replay`).
    Replaying,
    /// Stopped by a permanent error; see `last_error`.
    Failed,
    /// Lost records to the log's hard size cap: rebuild it with `siphon replay`.
    NeedsReplay,
    /// Stopped on shutdown.
    Stopped,
    /// Not running (read from the data directory while the daemon is down).
    Offline,
}

/// A source or sink: its state, and its errors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComponentStatus {
    /// Its kind (`generator`, `file`, …).
    pub kind: String,
    /// What it is doing.
    pub state: State,
    /// The last error, if any (never containing a secret).
    pub last_error: Option<String>,
    /// Errors since start.
    pub errors: u64,
    /// Retries since start.
    pub retries: u64,
}

impl ComponentStatus {
    pub fn new(kind: &str) -> Self {
        ComponentStatus {
            kind: kind.to_owned(),
            ..Default::default()
        }
    }

    /// Notes a transient error that will be retried.
    pub fn retrying(&mut self, error: &dyn std::fmt::Display) {
        self.state = State::Retrying;
        self.last_error = Some(error.to_string());
        self.errors += 1;
        self.retries += 1;
    }

    /// Notes a permanent error.
    pub fn failed(&mut self, error: &dyn std::fmt::Display) {
        self.state = State::Failed;
        self.last_error = Some(error.to_string());
        self.errors += 1;
    }
}

/// What status says of a sink that lost records to the log's `max_size` cap.
pub fn needs_replay_message(pipeline: &str, sink: &str, lost: &LostRecords) -> String {
    format!(
        "the change log reached max_size and dropped offsets {}..{} before this sink applied \
         them; rebuild it with `siphon replay {pipeline} {sink} --from 0 --reset`",
        lost.first, lost.end
    )
}

/// Where a sink is in the log. Its task is the only writer and publishes it on a watch
/// channel, which status and log maintenance read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkProgress {
    /// The next offset it applies: everything below is applied.
    pub next_offset: u64,
    /// Everything below this offset is durable in its store (below `next_offset` while the
    /// store holds a transaction open); the log keeps everything from here on.
    pub committed: u64,
    /// Records it lost to the log's hard size cap.
    pub lost: Option<LostRecords>,
    /// While replaying: the offset at which the replay is done.
    pub replay_until: Option<u64>,
}

/// One sink.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkStatus {
    /// State and errors.
    #[serde(flatten)]
    pub component: ComponentStatus,
    /// The next offset it applies: everything below is applied.
    pub next_offset: u64,
    /// Everything below this offset is durable in its store.
    #[serde(default)]
    pub committed_offset: u64,
    /// Records in the log it has not applied.
    pub lag_records: u64,
    /// How far behind the database its store is: how long ago the last record it applied
    /// was appended while it lags the log (0 when caught up with it), plus how far the log
    /// is behind the database (`source_behind_ms`).
    pub lag_ms: u64,
    /// Append time of the last record applied, ms since the epoch.
    pub last_applied_append_ms: i64,
    /// Where the last change committed in its store committed in the source (an LSN, a GTID):
    /// its watermark.
    #[serde(default)]
    pub applied_position: Option<String>,
    /// When that change committed in the source, ms since the epoch.
    #[serde(default)]
    pub applied_commit_ms: Option<i64>,
    /// Records applied since start.
    pub records_applied: u64,
    /// Batches applied since start.
    pub batches: u64,
    /// Size and duration of the last batch.
    pub last_batch_records: usize,
    /// Milliseconds the last batch took to apply.
    pub last_batch_ms: f64,
    /// It keeps every event: the log does not compact what it has not read.
    pub keeps_history: bool,
    /// Records the target rejected that went to the dead-letter file (`on_error =
    /// "dead_letter"`).
    #[serde(default)]
    pub dead_lettered: u64,
    /// Records it lost to the log's hard size cap (then `state` is `needs_replay`).
    pub lost: Option<LostRecords>,
    /// While replaying: the offset at which the replay is done.
    pub replay_until: Option<u64>,
}

impl SinkStatus {
    /// Takes the sink's published progress.
    pub fn set_progress(&mut self, p: &SinkProgress) {
        self.next_offset = p.next_offset;
        self.committed_offset = p.committed;
        self.lost = p.lost.clone();
        self.replay_until = p.replay_until;
    }
}

/// One pipeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineStatus {
    /// Its name.
    pub name: String,
    /// The source.
    pub source: ComponentStatus,
    /// The change log.
    pub log: LogStats,
    /// Records appended since the daemon started.
    pub records_appended: u64,
    /// Records the log's hard size cap removed before some sink read them.
    pub records_lost: u64,
    /// Gauges the source reports (snapshot progress, replication lag).
    #[serde(default)]
    pub source_metrics: BTreeMap<String, f64>,
    /// How far the log is behind the database: the time since the source last held
    /// everything the database had (or the newest change's commit), growing while the source
    /// is down.
    #[serde(default)]
    pub source_behind_ms: u64,
    /// Sinks by name.
    pub sinks: BTreeMap<String, SinkStatus>,
}

impl PipelineStatus {
    /// Whether the source and every sink are working.
    pub fn is_ready(&self) -> bool {
        self.source.state == State::Running
            && self
                .sinks
                .values()
                .all(|s| matches!(s.component.state, State::Running | State::Replaying))
    }

    /// Fills in the lag figures from the log's end and the source's lag.
    pub fn compute_lag(&mut self, now_ms: i64) {
        let end = self.log.end_offset;
        for s in self.sinks.values_mut() {
            s.lag_records = end.saturating_sub(s.next_offset);
            let behind_log = if s.lag_records == 0 || s.last_applied_append_ms == 0 {
                0
            } else {
                (now_ms - s.last_applied_append_ms).max(0) as u64
            };
            s.lag_ms = behind_log + self.source_behind_ms;
        }
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus text exposition of every pipeline.
pub fn render_metrics(pipelines: &[PipelineStatus]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    };
    let per_pipeline = |f: &dyn Fn(&PipelineStatus) -> f64| {
        pipelines
            .iter()
            .map(|p| (format!("pipeline=\"{}\"", escape(&p.name)), f(p)))
            .collect::<Vec<_>>()
    };
    let per_sink = |f: &dyn Fn(&SinkStatus) -> f64| {
        pipelines
            .iter()
            .flat_map(|p| {
                p.sinks.iter().map(move |(name, s)| {
                    (
                        format!("pipeline=\"{}\",sink=\"{}\"", escape(&p.name), escape(name)),
                        f(s),
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "siphon_log_records_appended_total",
        "counter",
        "Records appended to the change log since start.",
        per_pipeline(&|p| p.records_appended as f64),
    );
    family(
        "siphon_log_end_offset",
        "gauge",
        "Offset the next append gets.",
        per_pipeline(&|p| p.log.end_offset as f64),
    );
    family(
        "siphon_log_start_offset",
        "gauge",
        "First offset the change log holds.",
        per_pipeline(&|p| p.log.start_offset as f64),
    );
    family(
        "siphon_log_size_bytes",
        "gauge",
        "Bytes of the change log on disk.",
        per_pipeline(&|p| p.log.size_bytes as f64),
    );
    family(
        "siphon_log_segments",
        "gauge",
        "Segment files of the change log.",
        per_pipeline(&|p| p.log.segments as f64),
    );
    family(
        "siphon_log_records_lost_total",
        "counter",
        "Unread records removed by the log's max_size cap.",
        per_pipeline(&|p| p.records_lost as f64),
    );
    family(
        "siphon_source_up",
        "gauge",
        "1 while the source is running.",
        per_pipeline(&|p| f64::from(u8::from(p.source.state == State::Running))),
    );
    family(
        "siphon_source_seconds_behind",
        "gauge",
        "How far the change log is behind the database (grows while the source is down).",
        per_pipeline(&|p| p.source_behind_ms as f64 / 1000.0),
    );
    family(
        "siphon_source_errors_total",
        "counter",
        "Source errors.",
        per_pipeline(&|p| p.source.errors as f64),
    );
    family(
        "siphon_source_retries_total",
        "counter",
        "Source retries after transient errors.",
        per_pipeline(&|p| p.source.retries as f64),
    );
    let mut source_gauges: BTreeMap<&str, Vec<(String, f64)>> = BTreeMap::new();
    for p in pipelines {
        for (name, v) in &p.source_metrics {
            source_gauges
                .entry(name)
                .or_default()
                .push((format!("pipeline=\"{}\"", escape(&p.name)), *v));
        }
    }
    for (name, samples) in source_gauges {
        family(
            &format!("siphon_source_{name}"),
            "gauge",
            "Reported by the source.",
            samples,
        );
    }
    family(
        "siphon_sink_applied_offset",
        "gauge",
        "Next offset the sink applies.",
        per_sink(&|s| s.next_offset as f64),
    );
    family(
        "siphon_sink_applied_commit_seconds",
        "gauge",
        "Commit time in the source (seconds since the epoch) of the last change committed in the sink's store.",
        per_sink(&|s| {
            s.applied_commit_ms
                .map_or(f64::NAN, |ms| ms as f64 / 1000.0)
        }),
    );
    family(
        "siphon_sink_lag_records",
        "gauge",
        "Records the sink has not applied.",
        per_sink(&|s| s.lag_records as f64),
    );
    family(
        "siphon_sink_lag_ms",
        "gauge",
        "How far the sink's store is behind the database (its lag behind the log, plus the log's behind the database).",
        per_sink(&|s| s.lag_ms as f64),
    );
    family(
        "siphon_sink_records_applied_total",
        "counter",
        "Records applied.",
        per_sink(&|s| s.records_applied as f64),
    );
    family(
        "siphon_sink_batches_total",
        "counter",
        "Batches applied.",
        per_sink(&|s| s.batches as f64),
    );
    family(
        "siphon_sink_last_batch_records",
        "gauge",
        "Records in the last batch.",
        per_sink(&|s| s.last_batch_records as f64),
    );
    family(
        "siphon_sink_last_batch_seconds",
        "gauge",
        "Time the last batch took.",
        per_sink(&|s| s.last_batch_ms / 1000.0),
    );
    family(
        "siphon_sink_errors_total",
        "counter",
        "Sink errors.",
        per_sink(&|s| s.component.errors as f64),
    );
    family(
        "siphon_sink_dead_lettered_total",
        "counter",
        "Records the target rejected, written to the dead-letter file.",
        per_sink(&|s| s.dead_lettered as f64),
    );
    family(
        "siphon_sink_retries_total",
        "counter",
        "Sink retries after transient errors.",
        per_sink(&|s| s.component.retries as f64),
    );
    family(
        "siphon_sink_up",
        "gauge",
        "1 while the sink is running.",
        per_sink(&|s| f64::from(u8::from(s.component.state == State::Running))),
    );
    family(
        "siphon_sink_needs_replay",
        "gauge",
        "1 when the sink lost records and must be replayed.",
        per_sink(&|s| f64::from(u8::from(s.lost.is_some()))),
    );
    out
}
