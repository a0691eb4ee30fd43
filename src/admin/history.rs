//! What the console plots: an in-process ring of samples of every sink's throughput and lag,
//! one a second over the last minutes and one a minute over the last hours, and the recent
//! errors and dead-lettered records, all taken from the pipelines' status (no extra service).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::runtime::Runtime;
use crate::runtime::status::PipelineStatus;

/// Samples a second kept: the last 15 minutes.
const RECENT: usize = 15 * 60;
/// Samples a minute kept: the last 24 hours.
const LONG: usize = 24 * 60;
/// Errors and dead letters kept.
const NOTICES: usize = 100;

/// One sink at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SinkSample {
    /// Records a second it applied since the previous sample of its series.
    pub rate: f64,
    /// Records in the log it has not applied.
    pub lag_records: u64,
    /// How far its store is behind the database, in seconds.
    pub lag_s: f64,
}

/// One pipeline at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PipelineSample {
    /// Records a second appended to its log since the previous sample.
    pub appended_rate: f64,
    /// Rows its incremental snapshot had read (0 without one).
    pub snapshot_rows: f64,
    /// Its sinks by name.
    pub sinks: BTreeMap<String, SinkSample>,
}

/// Every pipeline at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// Milliseconds since the epoch.
    pub t: i64,
    /// Pipelines by name.
    pub pipelines: BTreeMap<String, PipelineSample>,
}

/// An error a source or sink met, or a record a sink set aside.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Notice {
    /// Milliseconds since the epoch (of its last repeat).
    pub t: i64,
    pub pipeline: String,
    /// `source`, or `sink NAME`.
    pub component: String,
    /// `error` or `dead_letter`.
    pub kind: &'static str,
    /// The error, or the record's offset and the reason it was set aside.
    pub message: String,
    /// Times the same message came again right after (a component retrying on one error).
    pub repeats: u64,
}

/// A pipeline's source or one of its sinks (a sink may be named `source`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Component {
    Source,
    Sink(String),
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Component::Source => f.write_str("source"),
            Component::Sink(name) => write!(f, "sink {name}"),
        }
    }
}

/// A component's errors and dead letters as the last sample saw them.
#[derive(Debug, Default)]
struct Noticed {
    errors: u64,
    last_error: Option<String>,
    dead_lettered: u64,
}

/// What [`History::record`] compares a status with.
#[derive(Debug, Default)]
struct Seen {
    /// Per pipeline: its counters at the last sample of the recent series.
    recent: BTreeMap<String, Totals>,
    /// Per pipeline: its counters at the last sample of the long series.
    long: BTreeMap<String, Totals>,
    /// When the long series took its last sample.
    long_at: Option<Instant>,
    /// Per pipeline and component: what was noticed of it.
    noticed: BTreeMap<(String, Component), Noticed>,
}

/// A pipeline's counters at one moment.
#[derive(Debug, Clone)]
struct Totals {
    at: Instant,
    appended: u64,
    applied: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Rings {
    recent: VecDeque<Sample>,
    long: VecDeque<Sample>,
    notices: VecDeque<Notice>,
    seen: Seen,
}

/// The rings, shared by the sampler and the admin API.
#[derive(Debug, Default)]
pub struct History {
    rings: Mutex<Rings>,
}

/// Which series [`History::series`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// A sample a second, the last 15 minutes.
    Minutes,
    /// A sample a minute, the last 24 hours.
    Hours,
}

/// A series, with the recent notices, as the console reads it.
#[derive(Debug, Serialize)]
pub struct Series {
    /// Seconds between samples.
    pub step_s: u64,
    /// Oldest first.
    pub samples: Vec<Sample>,
    /// Newest last.
    pub notices: Vec<Notice>,
}

impl History {
    /// Takes a sample of `statuses`, labelled `now_ms` (the wall clock) and timed by `at` (a
    /// monotonic clock, which rates and the long series' minute follow): one into the recent
    /// series, one into the long series once a minute has passed since its last, and a notice
    /// of every new error and dead letter.
    pub fn record(&self, statuses: &[PipelineStatus], now_ms: i64, at: Instant) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let rings = &mut *rings;
        let recent = sample(statuses, now_ms, at, &mut rings.seen.recent);
        push(&mut rings.recent, recent, RECENT);
        let minute_passed = rings
            .seen
            .long_at
            .is_none_or(|last| at.duration_since(last) >= Duration::from_secs(60));
        if minute_passed {
            let long = sample(statuses, now_ms, at, &mut rings.seen.long);
            push(&mut rings.long, long, LONG);
            rings.seen.long_at = Some(at);
        }
        for p in statuses {
            let source = (Component::Source, &p.source, 0, None);
            let sinks = p.sinks.iter().map(|(name, s)| {
                let dead = (s.dead_lettered, s.last_dead_letter.as_ref());
                (Component::Sink(name.clone()), &s.component, dead.0, dead.1)
            });
            for (component, status, dead_lettered, last_dead) in
                std::iter::once(source).chain(sinks)
            {
                let key = (p.name.clone(), component);
                let before = rings.seen.noticed.remove(&key).unwrap_or_default();
                let mut notice = |kind: &'static str, message: String| {
                    let notice = Notice {
                        t: now_ms,
                        pipeline: p.name.clone(),
                        component: key.1.to_string(),
                        kind,
                        message,
                        repeats: 0,
                    };
                    add_notice(&mut rings.notices, notice);
                };
                // A new error, or another error (a sink's state of needing a replay is one
                // without being counted as one).
                if let Some(error) = &status.last_error
                    && (status.errors > before.errors || before.last_error.as_ref() != Some(error))
                {
                    notice("error", error.clone());
                }
                if dead_lettered > before.dead_lettered
                    && let Some(reason) = last_dead
                {
                    let also = dead_lettered - before.dead_lettered - 1;
                    let message = if also > 0 {
                        format!("{reason} (and {also} more)")
                    } else {
                        reason.clone()
                    };
                    notice("dead_letter", message);
                }
                let noticed = Noticed {
                    errors: status.errors,
                    last_error: status.last_error.clone(),
                    dead_lettered,
                };
                rings.seen.noticed.insert(key, noticed);
            }
        }
    }

    /// The samples of `range` taken after `since` (ms since the epoch; all without it), and
    /// the recent notices.
    pub fn series(&self, range: Range, since: Option<i64>) -> Series {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let (step_s, samples) = match range {
            Range::Minutes => (1, &rings.recent),
            Range::Hours => (60, &rings.long),
        };
        let since = since.unwrap_or(i64::MIN);
        // Newest last: the ones after `since` are at the end.
        let after = samples.iter().rev().take_while(|s| s.t > since).count();
        Series {
            step_s,
            samples: samples
                .iter()
                .skip(samples.len() - after)
                .cloned()
                .collect(),
            notices: rings.notices.iter().cloned().collect(),
        }
    }

    /// Samples the runtime's status every second until `cancel` fires.
    pub async fn sample_every_second(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        cancel: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {
                    self.record(&runtime.statuses(), crate::runtime::now_ms(), Instant::now());
                }
            }
        }
    }
}

/// Adds `notice`, or counts it as a repeat of the same component's last one of its kind
/// where that said the same.
fn add_notice(notices: &mut VecDeque<Notice>, notice: Notice) {
    let last = notices.iter_mut().rev().find(|n| {
        n.pipeline == notice.pipeline && n.component == notice.component && n.kind == notice.kind
    });
    match last {
        Some(last) if last.message == notice.message => {
            last.repeats += 1;
            last.t = notice.t;
        }
        _ => push(notices, notice, NOTICES),
    }
}

fn push<T>(ring: &mut VecDeque<T>, item: T, cap: usize) {
    if ring.len() == cap {
        ring.pop_front();
    }
    ring.push_back(item);
}

/// A sample of `statuses`, its rates the differences from `last` (which it updates) over the
/// time since; a counter that went back (the daemon restarted) gives a rate of 0, not a
/// negative one.
fn sample(
    statuses: &[PipelineStatus],
    now_ms: i64,
    at: Instant,
    last: &mut BTreeMap<String, Totals>,
) -> Sample {
    let mut pipelines = BTreeMap::new();
    for p in statuses {
        let before = last.get(&p.name);
        let seconds = before.map_or(0.0, |b| at.duration_since(b.at).as_secs_f64());
        let rate = |now: u64, before: Option<u64>| -> f64 {
            match before {
                Some(before) if seconds > 0.0 => now.saturating_sub(before) as f64 / seconds,
                _ => 0.0,
            }
        };
        let sinks = p
            .sinks
            .iter()
            .map(|(name, s)| {
                let applied_before = before.and_then(|b| b.applied.get(name).copied());
                let sample = SinkSample {
                    rate: rate(s.records_applied, applied_before),
                    lag_records: s.lag_records,
                    lag_s: s.lag_ms as f64 / 1000.0,
                };
                (name.clone(), sample)
            })
            .collect();
        let sample = PipelineSample {
            appended_rate: rate(p.records_appended, before.map(|b| b.appended)),
            snapshot_rows: p
                .source_metrics
                .get("incremental_snapshot_rows")
                .copied()
                .unwrap_or_default(),
            sinks,
        };
        pipelines.insert(p.name.clone(), sample);
        let totals = Totals {
            at,
            appended: p.records_appended,
            applied: p
                .sinks
                .iter()
                .map(|(name, s)| (name.clone(), s.records_applied))
                .collect(),
        };
        last.insert(p.name.clone(), totals);
    }
    Sample {
        t: now_ms,
        pipelines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::{SinkStatus, State};

    /// A pipeline `shop` with one sink, named `sink`.
    fn status(
        sink: &str,
        appended: u64,
        applied: u64,
        errors: u64,
        dead: u64,
    ) -> Vec<PipelineStatus> {
        let mut status = SinkStatus {
            records_applied: applied,
            lag_records: appended - applied,
            lag_ms: 2500,
            dead_lettered: dead,
            last_dead_letter: (dead > 0).then(|| format!("offset {dead}: refused")),
            ..Default::default()
        };
        status.component.errors = errors;
        if errors > 0 {
            status.component.state = State::Retrying;
            status.component.last_error = Some(format!("error {}", errors.min(2)));
        }
        vec![PipelineStatus {
            name: "shop".into(),
            records_appended: appended,
            sinks: [(sink.to_owned(), status)].into(),
            ..Default::default()
        }]
    }

    /// Records `statuses` at `ms` on both clocks (the monotonic one from `start`).
    fn record(history: &History, start: Instant, ms: i64, statuses: &[PipelineStatus]) {
        history.record(statuses, ms, start + Duration::from_millis(ms as u64));
    }

    #[test]
    fn rates_are_differences_over_the_time_between_samples() {
        let (history, start) = (History::default(), Instant::now());
        record(&history, start, 10_000, &status("cache", 100, 50, 0, 0));
        record(&history, start, 12_000, &status("cache", 300, 250, 0, 0));
        let series = history.series(Range::Minutes, None);
        assert_eq!(series.step_s, 1);
        let last = &series.samples[1].pipelines["shop"];
        assert_eq!(last.appended_rate, 100.0);
        assert_eq!(
            last.sinks["cache"],
            SinkSample {
                rate: 100.0,
                lag_records: 50,
                lag_s: 2.5
            }
        );
        // The first sample has nothing to differ from; a counter that went back (a restart)
        // gives 0, never a negative rate.
        assert_eq!(series.samples[0].pipelines["shop"].appended_rate, 0.0);
        record(&history, start, 13_000, &status("cache", 10, 5, 0, 0));
        let series = history.series(Range::Minutes, None);
        assert_eq!(series.samples[2].pipelines["shop"].sinks["cache"].rate, 0.0);
        // Only what came after `since`.
        let since: Vec<i64> = history
            .series(Range::Minutes, Some(10_000))
            .samples
            .iter()
            .map(|s| s.t)
            .collect();
        assert_eq!(since, [12_000, 13_000]);
        assert!(
            history
                .series(Range::Minutes, Some(13_000))
                .samples
                .is_empty()
        );
    }

    #[test]
    fn the_long_series_takes_a_sample_a_minute_with_its_rate_over_the_minute() {
        let (history, start) = (History::default(), Instant::now());
        for second in 0..=120 {
            let ms = second as i64 * 1000;
            record(
                &history,
                start,
                ms,
                &status("cache", second * 10, second * 6, 0, 0),
            );
        }
        let long = history.series(Range::Hours, None);
        assert_eq!(long.step_s, 60);
        let times: Vec<i64> = long.samples.iter().map(|s| s.t).collect();
        assert_eq!(times, [0, 60_000, 120_000]);
        assert_eq!(long.samples[2].pipelines["shop"].sinks["cache"].rate, 6.0);
        assert_eq!(history.series(Range::Minutes, None).samples.len(), 121);
    }

    #[test]
    fn each_new_error_and_dead_letter_is_one_notice_and_a_repeated_error_counts_its_repeats() {
        // A sink named like the source is told apart from it.
        let (history, start) = (History::default(), Instant::now());
        record(&history, start, 1000, &status("source", 10, 10, 0, 0));
        record(&history, start, 2000, &status("source", 10, 10, 1, 0));
        record(&history, start, 3000, &status("source", 10, 10, 1, 0));
        record(&history, start, 4000, &status("source", 10, 10, 1, 3));
        // Retrying on another error, then on that one again and again.
        record(&history, start, 5000, &status("source", 10, 10, 2, 3));
        record(&history, start, 6000, &status("source", 10, 10, 3, 3));
        record(&history, start, 7000, &status("source", 10, 10, 4, 3));
        let notices: Vec<(i64, String, &str, String, u64)> = history
            .series(Range::Minutes, None)
            .notices
            .into_iter()
            .map(|n| (n.t, n.component, n.kind, n.message, n.repeats))
            .collect();
        let sink = || "sink source".to_owned();
        assert_eq!(
            notices,
            [
                (2000, sink(), "error", "error 1".to_owned(), 0),
                (
                    4000,
                    sink(),
                    "dead_letter",
                    "offset 3: refused (and 2 more)".to_owned(),
                    0
                ),
                (7000, sink(), "error", "error 2".to_owned(), 2),
            ]
        );
    }

    #[test]
    fn an_error_that_is_not_counted_is_noticed_by_its_text() {
        let (history, start) = (History::default(), Instant::now());
        let mut statuses = status("cache", 10, 10, 0, 0);
        record(&history, start, 1000, &statuses);
        let sink = statuses[0].sinks.get_mut("cache").unwrap();
        sink.component.state = State::NeedsReplay;
        sink.component.last_error = Some("the change log reached max_size".into());
        record(&history, start, 2000, &statuses);
        record(&history, start, 3000, &statuses);
        let notices = history.series(Range::Minutes, None).notices;
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(notices[0].message, "the change log reached max_size");
    }
}
