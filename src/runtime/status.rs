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
    /// Run by another daemon (a pipeline whose sinks alone run here).
    Elsewhere,
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

    /// Notes an opening in `state`: one that retries keeps the error until work goes in (so a
    /// stuck component's error stays readable between its attempts); any other (the first,
    /// or a replay asked for, `fresh`) starts with none.
    pub fn opening(&mut self, state: State, fresh: bool) {
        if fresh || self.state != State::Retrying {
            self.last_error = None;
        }
        self.state = state;
    }

    /// Notes work that went in: the error, if any, is over.
    pub fn progressed(&mut self, state: State) {
        self.state = state;
        self.last_error = None;
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
    /// How far behind the database its store is: while it lags the log, the age of the
    /// oldest record it has not applied (now minus that record's commit), which grows while
    /// the sink is stuck; caught up with the log, how far the log is behind the database
    /// (`source_behind_ms`).
    pub lag_ms: u64,
    /// When the oldest record it holds and has not applied committed in the source, ms since
    /// the epoch: the first of the batch it is applying or retrying (while its store cannot
    /// be opened, the append time of the record at its cursor). `None` between batches.
    #[serde(default)]
    pub oldest_unapplied_ms: Option<i64>,
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
    /// The last record set aside: its offset and the reason.
    #[serde(default)]
    pub last_dead_letter: Option<String>,
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
    /// What the log keeps, in words.
    #[serde(default)]
    pub log_retention: String,
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
        matches!(self.source.state, State::Running | State::Elsewhere)
            && self
                .sinks
                .values()
                .all(|s| matches!(s.component.state, State::Running | State::Replaying))
    }

    /// Fills in the lag figures from the log's end and the source's lag.
    pub fn compute_lag(&mut self, now_ms: i64) {
        let end = self.log.end_offset;
        let age = |since_ms: i64| (now_ms - since_ms).max(0) as u64;
        for s in self.sinks.values_mut() {
            s.lag_records = end.saturating_sub(s.next_offset);
            s.lag_ms = match (s.lag_records, s.oldest_unapplied_ms) {
                (0, _) => self.source_behind_ms,
                (_, Some(oldest)) => age(oldest),
                // Between two batches: the next one is at most as old as the records the
                // last one applied.
                _ if s.last_applied_append_ms != 0 => {
                    age(s.last_applied_append_ms) + self.source_behind_ms
                }
                // Nothing taken yet; the task is about to say.
                _ => self.source_behind_ms,
            };
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
    let pipeline_labels = |p: &PipelineStatus| format!("pipeline=\"{}\"", escape(&p.name));
    for (name, kind, help, value) in PIPELINE_METRICS {
        let samples = pipelines
            .iter()
            .map(|p| (pipeline_labels(p), value(p)))
            .collect();
        family(name, kind, help, samples);
    }
    // What each source reports of its own, a family a gauge.
    let mut source_gauges: BTreeMap<&str, Vec<(String, f64)>> = BTreeMap::new();
    for p in pipelines {
        for (name, v) in &p.source_metrics {
            source_gauges
                .entry(name)
                .or_default()
                .push((pipeline_labels(p), *v));
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
    for (name, kind, help, value) in SINK_METRICS {
        let samples = pipelines
            .iter()
            .flat_map(|p| {
                p.sinks.iter().map(move |(sink, s)| {
                    let labels = format!("{},sink=\"{}\"", pipeline_labels(p), escape(sink));
                    (labels, value(s))
                })
            })
            .collect();
        family(name, kind, help, samples);
    }
    out
}

/// A metric family: its name, kind, help and how to read its value from a status.
type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

/// The families with one sample a pipeline: its log's, then its source's.
const PIPELINE_METRICS: &[Family<PipelineStatus>] = &[
    (
        "siphon_log_records_appended_total",
        "counter",
        "Records appended to the change log since start.",
        |p| p.records_appended as f64,
    ),
    (
        "siphon_log_end_offset",
        "gauge",
        "Offset the next append gets.",
        |p| p.log.end_offset as f64,
    ),
    (
        "siphon_log_start_offset",
        "gauge",
        "First offset the change log holds.",
        |p| p.log.start_offset as f64,
    ),
    (
        "siphon_log_size_bytes",
        "gauge",
        "Bytes of the change log on disk.",
        |p| p.log.size_bytes as f64,
    ),
    (
        "siphon_log_segments",
        "gauge",
        "Segment files of the change log.",
        |p| p.log.segments as f64,
    ),
    (
        "siphon_log_records_lost_total",
        "counter",
        "Unread records removed by the log's max_size cap.",
        |p| p.records_lost as f64,
    ),
    (
        "siphon_source_up",
        "gauge",
        "1 while the source is running.",
        |p| f64::from(u8::from(p.source.state == State::Running)),
    ),
    (
        "siphon_source_seconds_behind",
        "gauge",
        "How far the change log is behind the database (grows while the source is down).",
        |p| p.source_behind_ms as f64 / 1000.0,
    ),
    (
        "siphon_source_errors_total",
        "counter",
        "Source errors.",
        |p| p.source.errors as f64,
    ),
    (
        "siphon_source_retries_total",
        "counter",
        "Source retries after transient errors.",
        |p| p.source.retries as f64,
    ),
];

/// The families with one sample a sink.
const SINK_METRICS: &[Family<SinkStatus>] = &[
    (
        "siphon_sink_applied_offset",
        "gauge",
        "Next offset the sink applies.",
        |s| s.next_offset as f64,
    ),
    (
        "siphon_sink_applied_commit_seconds",
        "gauge",
        "Commit time in the source (seconds since the epoch) of the last change committed in the sink's store.",
        |s| {
            s.applied_commit_ms
                .map_or(f64::NAN, |ms| ms as f64 / 1000.0)
        },
    ),
    (
        "siphon_sink_lag_records",
        "gauge",
        "Records the sink has not applied.",
        |s| s.lag_records as f64,
    ),
    (
        "siphon_sink_lag_ms",
        "gauge",
        "How far the sink's store is behind the database (its lag behind the log, plus the log's behind the database).",
        |s| s.lag_ms as f64,
    ),
    (
        "siphon_sink_records_applied_total",
        "counter",
        "Records applied.",
        |s| s.records_applied as f64,
    ),
    (
        "siphon_sink_batches_total",
        "counter",
        "Batches applied.",
        |s| s.batches as f64,
    ),
    (
        "siphon_sink_last_batch_records",
        "gauge",
        "Records in the last batch.",
        |s| s.last_batch_records as f64,
    ),
    (
        "siphon_sink_last_batch_seconds",
        "gauge",
        "Time the last batch took.",
        |s| s.last_batch_ms / 1000.0,
    ),
    ("siphon_sink_errors_total", "counter", "Sink errors.", |s| {
        s.component.errors as f64
    }),
    (
        "siphon_sink_dead_lettered_total",
        "counter",
        "Records the target rejected, written to the dead-letter file.",
        |s| s.dead_lettered as f64,
    ),
    (
        "siphon_sink_retries_total",
        "counter",
        "Sink retries after transient errors.",
        |s| s.component.retries as f64,
    ),
    (
        "siphon_sink_up",
        "gauge",
        "1 while the sink is running.",
        |s| f64::from(u8::from(s.component.state == State::Running)),
    ),
    (
        "siphon_sink_needs_replay",
        "gauge",
        "1 when the sink lost records and must be replayed.",
        |s| f64::from(u8::from(s.lost.is_some())),
    ),
];
