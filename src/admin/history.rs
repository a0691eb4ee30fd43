//! What the console plots: an in-process ring of samples of every sink's throughput and lag,
//! one a second over the last minutes and one a minute over the last hours, and the recent
//! errors and dead-lettered records, all taken from the pipelines' status (no extra service).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Milliseconds since the epoch.
    pub t: i64,
    pub pipeline: String,
    /// `source`, or the sink's name.
    pub component: String,
    /// `error` or `dead_letter`.
    pub kind: &'static str,
    /// The error, or the record's offset and the reason it was set aside.
    pub message: String,
}

/// What [`History::record`] compares a status with: the counters at the last sample of each
/// series, and the errors and dead letters already noticed.
#[derive(Debug, Default)]
struct Seen {
    /// Per pipeline: its counters at the last sample of the recent series.
    recent: BTreeMap<String, Totals>,
    /// Per pipeline: its counters at the last sample of the long series.
    long: BTreeMap<String, Totals>,
    /// Per (pipeline, component): its errors and its dead letters.
    errors: BTreeMap<(String, String), (u64, u64)>,
}

/// A pipeline's counters at one moment.
#[derive(Debug, Clone, Default)]
struct Totals {
    t: i64,
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
    pub samples: Vec<Sample>,
    /// Newest last.
    pub notices: Vec<Notice>,
}

impl History {
    /// Takes a sample of `statuses` at `now_ms`: one into the recent series, one into the long
    /// series once a minute has passed since its last, and a notice of every new error and
    /// dead letter.
    pub fn record(&self, statuses: &[PipelineStatus], now_ms: i64) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let rings = &mut *rings;
        let recent = sample(statuses, now_ms, &mut rings.seen.recent);
        push(&mut rings.recent, recent, RECENT);
        let minute_passed = rings
            .long
            .back()
            .is_none_or(|last| now_ms - last.t >= 60_000);
        if minute_passed {
            let long = sample(statuses, now_ms, &mut rings.seen.long);
            push(&mut rings.long, long, LONG);
        }
        for p in statuses {
            let mut notice = |component: &str, kind: &'static str, message: &str| {
                let notice = Notice {
                    t: now_ms,
                    pipeline: p.name.clone(),
                    component: component.to_owned(),
                    kind,
                    message: message.to_owned(),
                };
                push(&mut rings.notices, notice, NOTICES);
            };
            let components = std::iter::once(("source", &p.source, 0, None)).chain(
                p.sinks.iter().map(|(name, s)| {
                    (
                        name.as_str(),
                        &s.component,
                        s.dead_lettered,
                        s.last_dead_letter.as_ref(),
                    )
                }),
            );
            for (name, component, dead, last_dead) in components {
                let key = (p.name.clone(), name.to_owned());
                let (errors, dead_before) =
                    rings.seen.errors.get(&key).copied().unwrap_or_default();
                if component.errors > errors
                    && let Some(error) = &component.last_error
                {
                    notice(name, "error", error);
                }
                if dead > dead_before
                    && let Some(reason) = last_dead
                {
                    let also = dead - dead_before - 1;
                    let message = if also > 0 {
                        format!("{reason} (and {also} more)")
                    } else {
                        reason.clone()
                    };
                    notice(name, "dead_letter", &message);
                }
                rings.seen.errors.insert(key, (component.errors, dead));
            }
        }
    }

    /// The series of `range` and the recent notices.
    pub fn series(&self, range: Range) -> Series {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let (step_s, samples) = match range {
            Range::Minutes => (1, &rings.recent),
            Range::Hours => (60, &rings.long),
        };
        Series {
            step_s,
            samples: samples.iter().cloned().collect(),
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
                _ = tick.tick() => self.record(&runtime.statuses(), crate::runtime::now_ms()),
            }
        }
    }
}

fn push<T>(ring: &mut VecDeque<T>, item: T, cap: usize) {
    if ring.len() == cap {
        ring.pop_front();
    }
    ring.push_back(item);
}

/// A sample of `statuses` at `now_ms`, its rates the differences from `last` (which it
/// updates); a counter that went back (the daemon restarted) counts from zero.
fn sample(statuses: &[PipelineStatus], now_ms: i64, last: &mut BTreeMap<String, Totals>) -> Sample {
    let rate = |now: u64, before: Option<u64>, since: i64| -> f64 {
        let seconds = (now_ms - since) as f64 / 1000.0;
        match before {
            Some(before) if seconds > 0.0 => now.saturating_sub(before) as f64 / seconds,
            _ => 0.0,
        }
    };
    let mut pipelines = BTreeMap::new();
    for p in statuses {
        let before = last.get(&p.name);
        let since = before.map_or(now_ms, |b| b.t);
        let sinks = p
            .sinks
            .iter()
            .map(|(name, s)| {
                let applied_before = before.and_then(|b| b.applied.get(name).copied());
                let sample = SinkSample {
                    rate: rate(s.records_applied, applied_before, since),
                    lag_records: s.lag_records,
                    lag_s: s.lag_ms as f64 / 1000.0,
                };
                (name.clone(), sample)
            })
            .collect();
        let sample = PipelineSample {
            appended_rate: rate(p.records_appended, before.map(|b| b.appended), since),
            snapshot_rows: p
                .source_metrics
                .get("incremental_snapshot_rows")
                .copied()
                .unwrap_or_default(),
            sinks,
        };
        pipelines.insert(p.name.clone(), sample);
        last.insert(
            p.name.clone(),
            Totals {
                t: now_ms,
                appended: p.records_appended,
                applied: p
                    .sinks
                    .iter()
                    .map(|(name, s)| (name.clone(), s.records_applied))
                    .collect(),
            },
        );
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

    fn status(appended: u64, applied: u64, errors: u64, dead: u64) -> Vec<PipelineStatus> {
        let mut sink = SinkStatus {
            records_applied: applied,
            lag_records: appended - applied,
            lag_ms: 2500,
            dead_lettered: dead,
            last_dead_letter: (dead > 0).then(|| format!("offset {dead}: refused")),
            ..Default::default()
        };
        sink.component.errors = errors;
        if errors > 0 {
            sink.component.state = State::Retrying;
            sink.component.last_error = Some(format!("error {errors}"));
        }
        vec![PipelineStatus {
            name: "shop".into(),
            records_appended: appended,
            sinks: [("cache".to_owned(), sink)].into(),
            ..Default::default()
        }]
    }

    #[test]
    fn rates_are_differences_over_the_time_between_samples() {
        let history = History::default();
        history.record(&status(100, 50, 0, 0), 10_000);
        history.record(&status(300, 250, 0, 0), 12_000);
        let series = history.series(Range::Minutes);
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
        // counts from zero, never negative.
        assert_eq!(series.samples[0].pipelines["shop"].appended_rate, 0.0);
        history.record(&status(10, 5, 0, 0), 13_000);
        let series = history.series(Range::Minutes);
        assert_eq!(series.samples[2].pipelines["shop"].sinks["cache"].rate, 0.0);
    }

    #[test]
    fn the_long_series_takes_a_sample_a_minute_with_its_rate_over_the_minute() {
        let history = History::default();
        for second in 0..=120 {
            history.record(&status(second * 10, second * 6, 0, 0), second as i64 * 1000);
        }
        let long = history.series(Range::Hours);
        assert_eq!(long.step_s, 60);
        let times: Vec<i64> = long.samples.iter().map(|s| s.t).collect();
        assert_eq!(times, [0, 60_000, 120_000]);
        assert_eq!(long.samples[2].pipelines["shop"].sinks["cache"].rate, 6.0);
        assert_eq!(history.series(Range::Minutes).samples.len(), 121);
    }

    #[test]
    fn each_new_error_and_dead_letter_is_one_notice() {
        let history = History::default();
        history.record(&status(10, 10, 0, 0), 1000);
        history.record(&status(10, 10, 1, 0), 2000);
        history.record(&status(10, 10, 1, 0), 3000);
        history.record(&status(10, 10, 1, 3), 4000);
        let notices: Vec<(i64, &str, String)> = history
            .series(Range::Minutes)
            .notices
            .into_iter()
            .map(|n| (n.t, n.kind, n.message))
            .collect();
        assert_eq!(
            notices,
            [
                (2000, "error", "error 1".to_owned()),
                (
                    4000,
                    "dead_letter",
                    "offset 3: refused (and 2 more)".to_owned()
                ),
            ]
        );
    }
}
