//! What a bench measures, as data. Every bench module returns [`Figure`]s; its subcommand
//! prints them as it always has, and `siphon-bench all` gathers them over its runs into one
//! table ([`summary_table`]).
//!
//! A figure is siphon's side next to its physical reference, both measured in the same run,
//! or a bound with no reference (a latency, a peak of memory).

use std::time::Duration;

/// One figure of one run.
#[derive(Debug, Clone)]
pub struct Figure {
    /// siphon's side, e.g. "PostgreSQL streaming" or "redis (hash), daemon path".
    pub what: String,
    /// The workload, e.g. "1 transaction of 1,000,000 rows".
    pub workload: String,
    pub measure: Measure,
    /// The target this figure is held to, if any.
    pub target: Option<Target>,
}

/// What was measured.
#[derive(Debug, Clone)]
pub enum Measure {
    Rates(Rates),
    Latency(Latency),
    /// Peak resident memory of a process running the workload alone, in MB (10^6 bytes).
    PeakRss {
        mb: f64,
    },
}

/// siphon's rate next to its reference's, each the rates of this run's reads of the same work
/// (one each, or two each in reference, siphon, siphon, reference order).
#[derive(Debug, Clone)]
pub struct Rates {
    /// What is counted: "rows", "txns", "records", "events".
    pub unit: &'static str,
    /// The reference, e.g. "pg_recvlogical".
    pub reference: String,
    /// siphon's rate of each read, per second.
    pub siphon: Vec<f64>,
    /// The reference's rate of each read, per second.
    pub reference_rates: Vec<f64>,
}

impl Rates {
    /// One read of each side.
    pub fn one(unit: &'static str, reference: &str, siphon: f64, reference_rate: f64) -> Self {
        Self {
            unit,
            reference: reference.to_owned(),
            siphon: vec![siphon],
            reference_rates: vec![reference_rate],
        }
    }

    /// Reads of `n` units each, timed.
    pub fn timed(
        unit: &'static str,
        reference: &str,
        n: u64,
        siphon: &[Duration],
        reference_times: &[Duration],
    ) -> Self {
        let rates = |d: &[Duration]| d.iter().map(|d| rate(n, *d)).collect();
        Self {
            unit,
            reference: reference.to_owned(),
            siphon: rates(siphon),
            reference_rates: rates(reference_times),
        }
    }

    /// The reference's mean time per unit over siphon's: with two reads a side in ABBA order,
    /// the position effects cancel.
    pub fn ratio(&self) -> f64 {
        mean_time(&self.reference_rates) / mean_time(&self.siphon)
    }

    /// siphon's rate over all its reads of this run (units over total time).
    pub fn siphon_rate(&self) -> f64 {
        1.0 / mean_time(&self.siphon)
    }

    /// The reference's rate over all its reads of this run.
    pub fn reference_rate(&self) -> f64 {
        1.0 / mean_time(&self.reference_rates)
    }

    /// Each adjacent pair's ratio (reference first, siphon first … in ABBA order: the first
    /// reference with the first siphon read, the second with the second).
    pub fn pair_ratios(&self) -> Vec<f64> {
        self.siphon
            .iter()
            .zip(&self.reference_rates)
            .map(|(s, r)| s / r)
            .collect()
    }
}

/// Commit → applied latency while a load runs.
#[derive(Debug, Clone)]
pub struct Latency {
    /// The load asked for (`pgbench -R`, transactions per second).
    pub rate: u32,
    /// The load's rate as pgbench reported it.
    pub sustained: Option<f64>,
    pub probes: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Where the probes' time went (the median probe, the slowest 1%).
    pub split: String,
}

/// A target: for [`Measure::Rates`] the median ratio at least `bound`; for a latency every
/// run's p99 at most `bound` ms; for memory every run's peak at most `bound` MB.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub bound: f64,
    /// The issue that set it.
    pub issue: u32,
}

impl Target {
    pub fn new(bound: f64, issue: u32) -> Option<Self> {
        Some(Self { bound, issue })
    }
}

pub fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn mean_time(rates: &[f64]) -> f64 {
    rates.iter().map(|r| 1.0 / r).sum::<f64>() / rates.len() as f64
}

/// `1234567` as "1,234,567".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate, short: "987", "181.7k", "1.23M".
fn short(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

impl Figure {
    /// One line for a progress report: the figure of one run.
    pub fn line(&self) -> String {
        let head = format!("{}, {}", self.what, self.workload);
        match &self.measure {
            Measure::Rates(r) => format!(
                "{head}: {} {u}/s vs {} {}/s: {:.2}x",
                short(r.siphon_rate()),
                r.reference,
                short(r.reference_rate()),
                r.ratio(),
                u = r.unit,
            ),
            Measure::Latency(l) => format!(
                "{head}: p50 {:.2} ms, p99 {:.2} ms ({} probes, pgbench {} tx/s)",
                l.p50_ms,
                l.p99_ms,
                l.probes,
                l.sustained.map_or("?".into(), |s| format!("{s:.0}"))
            ),
            Measure::PeakRss { mb } => format!("{head}: peak RSS {mb:.1} MB"),
        }
    }

    /// The figures of different runs that are the same figure share this.
    fn key(&self) -> String {
        let reference = match &self.measure {
            Measure::Rates(r) => r.reference.as_str(),
            _ => "",
        };
        format!("{}|{}|{reference}", self.what, self.workload)
    }

    /// The value a target is checked against, and whether it meets `target`.
    fn value(&self) -> f64 {
        match &self.measure {
            Measure::Rates(r) => r.ratio(),
            Measure::Latency(l) => l.p99_ms,
            Measure::PeakRss { mb } => *mb,
        }
    }

    fn meets(&self, target: Target) -> bool {
        match self.measure {
            Measure::Rates(_) => self.value() >= target.bound,
            _ => self.value() <= target.bound,
        }
    }
}

/// A figure that was not measured, and why: a row of its own in the summary.
#[derive(Debug, Clone)]
pub struct NotMeasured {
    pub what: String,
    pub why: String,
}

/// The summary table over `runs` (each run's figures; a figure missing from a run — its group
/// failed — shows as "—" there). Rows in the order figures first appear.
pub fn summary_table(runs: &[Vec<Figure>], not_measured: &[NotMeasured]) -> String {
    // The figures' order in the runs: one first seen in a later run (its group failed in the
    // earlier ones) goes after the figure before it in that run.
    let mut keys: Vec<String> = Vec::new();
    for run in runs {
        let mut after: Option<usize> = None;
        for figure in run {
            let key = figure.key();
            after = Some(match keys.iter().position(|k| *k == key) {
                Some(at) => at,
                None => {
                    let at = after.map_or(0, |a| a + 1);
                    keys.insert(at, key);
                    at
                }
            });
        }
    }
    let mut out = String::from(
        "| figure | siphon, per run | reference, per run | ratio per run | min / median / max | target | met |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for key in keys {
        let per_run: Vec<Option<&Figure>> = runs
            .iter()
            .map(|figures| figures.iter().find(|f| f.key() == key))
            .collect();
        out.push_str(&row(&per_run));
        out.push('\n');
    }
    for n in not_measured {
        out.push_str(&format!(
            "| {} | not measured: {} | | | | | |\n",
            n.what, n.why
        ));
    }
    out
}

/// One row of the summary: the same figure over the runs.
fn row(per_run: &[Option<&Figure>]) -> String {
    let first = per_run
        .iter()
        .flatten()
        .next()
        .expect("a figure of some run");
    let list = |f: &dyn Fn(&Figure) -> String| {
        per_run
            .iter()
            .map(|r| r.map_or("—".to_owned(), f))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut values: Vec<f64> = per_run.iter().flatten().map(|f| f.value()).collect();
    values.sort_by(f64::total_cmp);
    let spread = |unit: &str| {
        format!(
            "{:.2} / {:.2} / {:.2}{unit}",
            values[0],
            median(&values),
            values[values.len() - 1]
        )
    };
    let name = format!("{}, {}", first.what, first.workload);
    let (siphon, reference, ratios, spread) = match &first.measure {
        Measure::Rates(r) => (
            format!(
                "{} {}/s",
                list(&|f| match &f.measure {
                    Measure::Rates(r) => short(r.siphon_rate()),
                    _ => unreachable!(),
                }),
                r.unit
            ),
            format!(
                "{}: {} /s",
                r.reference,
                list(&|f| match &f.measure {
                    Measure::Rates(r) => short(r.reference_rate()),
                    _ => unreachable!(),
                })
            ),
            list(&|f| format!("{:.2}", f.value())),
            spread(""),
        ),
        Measure::Latency(l) => (
            format!(
                "p50 / p99 ms: {}",
                list(&|f| match &f.measure {
                    Measure::Latency(l) => format!("{:.2} / {:.2}", l.p50_ms, l.p99_ms),
                    _ => unreachable!(),
                })
            ),
            format!(
                "`pgbench -R {}` sustained {} tx/s",
                l.rate,
                list(&|f| match &f.measure {
                    Measure::Latency(l) => l.sustained.map_or("?".into(), |s| format!("{s:.0}")),
                    _ => unreachable!(),
                })
            ),
            "(no ratio)".to_owned(),
            format!("p99 {}", spread(" ms")),
        ),
        Measure::PeakRss { .. } => (
            format!("{} MB", list(&|f| format!("{:.1}", f.value()))),
            "(none: a bound)".to_owned(),
            "(no ratio)".to_owned(),
            spread(" MB"),
        ),
    };
    let (target, met) = match first.target {
        None => (String::new(), String::new()),
        Some(t) => {
            let measured = per_run.iter().flatten().count();
            let meeting = per_run.iter().flatten().filter(|f| f.meets(t)).count();
            let (text, met) = match first.measure {
                Measure::Rates(_) => (
                    format!("≥ {:.2}× (median; issue {})", t.bound, t.issue),
                    median(&values) >= t.bound,
                ),
                Measure::Latency(_) => (
                    format!("p99 ≤ {} ms, every run (issue {})", t.bound, t.issue),
                    meeting == measured,
                ),
                Measure::PeakRss { .. } => (
                    format!("≤ {} MB, every run (issue {})", t.bound, t.issue),
                    meeting == measured,
                ),
            };
            (
                text,
                format!(
                    "{} ({meeting} of {measured} runs)",
                    if met { "**yes**" } else { "**no**" }
                ),
            )
        }
    };
    format!("| {name} | {siphon} | {reference} | {ratios} | {spread} | {target} | {met} |")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio_figure(siphon: f64, reference: f64) -> Figure {
        Figure {
            what: "x".into(),
            workload: "w".into(),
            measure: Measure::Rates(Rates::one("rows", "ref", siphon, reference)),
            target: Target::new(0.8, 22),
        }
    }

    #[test]
    fn abba_ratio_is_of_total_times() {
        let r = Rates::timed(
            "rows",
            "ref",
            100,
            &[Duration::from_secs(1), Duration::from_secs(3)],
            &[Duration::from_secs(2), Duration::from_secs(2)],
        );
        assert!((r.ratio() - 1.0).abs() < 1e-9);
        assert!((r.siphon_rate() - 50.0).abs() < 1e-9);
        assert_eq!(r.pair_ratios(), vec![2.0, 100.0 / 3.0 / 50.0]);
    }

    #[test]
    fn the_table_lists_every_run_and_judges_the_median() {
        let runs = vec![
            vec![ratio_figure(70.0, 100.0)],
            vec![],
            vec![ratio_figure(100.0, 100.0)],
        ];
        let table = summary_table(&runs, &[]);
        let line = table.lines().nth(2).unwrap();
        assert!(line.contains("0.70, —, 1.00"), "{line}");
        assert!(line.contains("0.70 / 0.85 / 1.00"), "{line}");
        assert!(line.contains("**yes** (1 of 2 runs)"), "{line}");
    }

    #[test]
    fn a_figure_first_seen_in_a_later_run_keeps_its_place() {
        let named = |what: &str| Figure {
            what: what.into(),
            ..ratio_figure(1.0, 1.0)
        };
        let runs = vec![
            vec![named("a"), named("c")],
            vec![named("a"), named("b"), named("c")],
        ];
        let table = summary_table(&runs, &[]);
        let order: Vec<&str> = table.lines().skip(2).map(|l| &l[2..3]).collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    fn thousands_separates() {
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_345), "12,345");
    }
}
