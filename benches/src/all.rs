//! `siphon-bench all`: every figure of issue 22's report in one command. Each run measures
//! every group once (each figure beside its reference, in the same run); `--runs N` repeats
//! that, and one table lists every run's figure, the spread and the target. With `--write` the
//! table replaces the `## Summary (siphon-bench all)` section of BENCHMARKS.md, with the
//! command, the date, the commit and the machine.
//!
//! The groups call the same functions as the subcommands (`log`, `pg`, `mysql`, `kafka`,
//! `sinks`, `wait`), at the issue's sizes times `--scale`. A group that fails in one run is
//! listed under the table and the others go on; the command then exits non-zero.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::figure::{Figure, NotMeasured, summary_table};
use crate::sinks::Servers;
use crate::{kafka, log, mysql, pg, rss, sinks, tools, transforms, wait};

/// The heading of the section `--write` replaces.
pub const HEADING: &str = "## Summary (siphon-bench all)";

#[derive(Debug, clap::Args)]
pub struct AllArgs {
    /// Repetitions: every group is measured once per run; the table lists every run.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Workload sizes relative to the issue's (1M-row transactions, a 10M-row snapshot, 1M
    /// upserts a sink, 20 s of load a rate): 0.1 runs in minutes.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The same as --scale 0.1.
    #[arg(long, conflicts_with = "scale")]
    quick: bool,
    /// Groups to measure (default: all of them, in this order).
    #[arg(long, value_delimiter = ',')]
    only: Vec<Group>,
    /// Write the summary into this file's "## Summary (siphon-bench all)" section (replaced;
    /// made near the top when missing), e.g. BENCHMARKS.md.
    #[arg(long)]
    write: Option<PathBuf>,
    /// PostgreSQL server URL (databases are created and dropped in it).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg: String,
    /// MariaDB server URL (a database is created and dropped in it).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    mysql: String,
    /// Redis URL (keys under `siphon-bench…`, removed afterwards).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// NATS URL (JetStream; streams of the bench's own, deleted afterwards).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// RabbitMQ URL (exchanges and queues of the bench's own, deleted afterwards).
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    rabbitmq: String,
    /// Where the log group writes (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// A group of figures, measured together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Group {
    /// The file log: append (fsync per batch, none) and replay vs raw file I/O, 200 B records.
    Log,
    /// The PostgreSQL source: streaming vs pg_recvlogical, snapshot vs COPY.
    Pg,
    /// The MariaDB source: streaming vs mariadb-binlog, snapshot vs a full scan.
    Mysql,
    /// The Kafka log (noida-db broker started here) vs rdkafka's produce loop.
    Kafka,
    /// The store sinks (Redis, PostgreSQL, DuckDB) vs their stores' bulk paths.
    Sinks,
    /// The message sinks (Redis Streams, NATS, RabbitMQ) vs their brokers' client loops.
    Messages,
    /// Commit → Redis latency at 1k and 5k tx/s of pgbench -R (the release daemon).
    Wait,
    /// Peak RSS of a 10M-row snapshot and a 1M-row transaction, each alone in a process.
    Rss,
    /// Events through a chain of three transforms vs none.
    Transforms,
}

impl Group {
    fn name(self) -> &'static str {
        match self {
            Group::Log => "log",
            Group::Pg => "pg",
            Group::Mysql => "mysql",
            Group::Kafka => "kafka",
            Group::Sinks => "sinks",
            Group::Messages => "messages",
            Group::Wait => "wait",
            Group::Rss => "rss",
            Group::Transforms => "transforms",
        }
    }
}

/// The workload sizes of one invocation.
#[derive(Debug)]
struct Sizes {
    log_records: u64,
    pg_rows: u64,
    pg_txns: u64,
    mysql_rows: u64,
    mysql_small: u64,
    kafka_rows: u64,
    sink_rows: u64,
    stream_rows: u64,
    nats_rows: u64,
    rabbitmq_rows: u64,
    wait_seconds: u64,
    rss_snapshot: u64,
    rss_txn: u64,
    transform_rows: u64,
}

impl Sizes {
    /// The issue's sizes (the subcommands' defaults) times `scale`, each above a floor.
    fn new(scale: f64) -> Self {
        let n = |base: u64, floor: u64| ((base as f64 * scale).round() as u64).max(floor);
        Self {
            log_records: n(1_000_000, 10_000),
            pg_rows: n(1_000_000, 10_000),
            pg_txns: n(100_000, 1_000) / 4 * 4,
            mysql_rows: n(1_000_000, 10_000),
            mysql_small: n(20_000, 1_000),
            kafka_rows: n(200_000, 10_000),
            sink_rows: n(1_000_000, 10_000),
            stream_rows: n(200_000, 5_000),
            nats_rows: n(200_000, 5_000),
            rabbitmq_rows: n(100_000, 5_000),
            wait_seconds: n(20, 8),
            rss_snapshot: n(10_000_000, 100_000),
            rss_txn: n(1_000_000, 10_000),
            transform_rows: n(1_000_000, 10_000),
        }
    }
}

const SINK_BATCH: usize = 5000;
const WAIT_RATES: [u32; 2] = [1000, 5000];

struct Context<'a> {
    args: &'a AllArgs,
    sizes: Sizes,
    servers: Servers,
    daemon: Option<PathBuf>,
}

impl Context<'_> {
    fn store_plan(&self) -> Vec<(String, u64)> {
        ["redis", "postgres", "duckdb"]
            .map(|s| (s.to_owned(), self.sizes.sink_rows))
            .to_vec()
    }

    fn message_plan(&self) -> Vec<(String, u64)> {
        vec![
            ("redis_stream".into(), self.sizes.stream_rows),
            ("nats".into(), self.sizes.nats_rows),
            ("rabbitmq".into(), self.sizes.rabbitmq_rows),
        ]
    }

    /// Fails, before anything is measured, naming a missing tool (and its package) or a
    /// server that does not answer.
    fn preflight(&self, group: Group) -> anyhow::Result<()> {
        let pg = || tools::reachable_url("PostgreSQL", &self.args.pg, 5432);
        match group {
            Group::Log | Group::Transforms => Ok(()),
            Group::Pg => {
                tools::require(pg::TOOLS)?;
                pg()?;
                free_slots(&self.args.pg, 6)
            }
            Group::Mysql => {
                tools::require(mysql::TOOLS)?;
                tools::reachable_url("MariaDB", &self.args.mysql, 3306)
            }
            Group::Kafka => {
                tools::require(&[tools::PSQL])?;
                pg()?;
                free_slots(&self.args.pg, 3)
            }
            Group::Sinks => sinks::preflight(&self.servers, &self.store_plan()),
            Group::Messages => sinks::preflight(&self.servers, &self.message_plan()),
            Group::Wait => {
                tools::require(wait::TOOLS)?;
                pg()?;
                tools::reachable_url("Redis", &self.args.redis, 6379)?;
                free_slots(&self.args.pg, 1)
            }
            Group::Rss => {
                tools::require(&[tools::PSQL])?;
                pg()?;
                free_slots(&self.args.pg, 1)
            }
        }
    }

    /// One run of `group`: its figures.
    fn measure(&self, group: Group, run: usize, dir: &Path) -> anyhow::Result<Vec<Figure>> {
        let s = &self.sizes;
        let a = self.args;
        Ok(match group {
            Group::Log => log::measure(
                dir,
                s.log_records,
                &[200],
                1000,
                &[log::Fsync::Batch, log::Fsync::Never],
                1,
            )?
            .into_iter()
            .map(|f| f.figure)
            .collect(),
            Group::Pg => pg::measure(&a.pg, s.pg_rows, s.pg_txns)?.figures,
            Group::Mysql => mysql::measure(&a.mysql, s.mysql_rows, s.mysql_small)?.0,
            Group::Kafka => kafka::measure(&a.pg, s.kafka_rows, 1, run)?
                .into_iter()
                .flatten()
                .collect(),
            Group::Sinks => sinks::measure(&self.servers, SINK_BATCH, &self.store_plan())?,
            Group::Messages => sinks::measure(&self.servers, SINK_BATCH, &self.message_plan())?,
            Group::Wait => {
                let daemon = self.daemon.as_deref().expect("checked by the preflight");
                WAIT_RATES
                    .iter()
                    .map(|&rate| wait::measure(&a.pg, &a.redis, daemon, rate, s.wait_seconds, None))
                    .collect::<anyhow::Result<_>>()?
            }
            Group::Rss => rss::measure(&a.pg, s.rss_snapshot, s.rss_txn)?,
            Group::Transforms => transforms::measure(s.transform_rows, None)?,
        })
    }
}

/// Fails unless the PostgreSQL server has `n` replication slots free (the benches make theirs
/// and drop them; the shared server has few).
fn free_slots(url: &str, n: i64) -> anyhow::Result<()> {
    let free: i64 = pg::psql(
        url,
        "select current_setting('max_replication_slots')::int - (select count(*) from pg_replication_slots)",
    )?
    .parse()?;
    anyhow::ensure!(
        free >= n,
        "the PostgreSQL server has {free} replication slots free, the bench needs {n}: \
         `select slot_name, database, active from pg_replication_slots` lists who holds them"
    );
    Ok(())
}

/// Drops the databases (and their slots) of earlier bench runs whose process is gone: an
/// interrupted run leaves its slots behind, holding WAL and the server's few slots.
fn clean_stale(args: &AllArgs) {
    let gone = |name: &str| {
        name.rsplit('_')
            .next()
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| {
                pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
            })
    };
    if let Ok(list) = pg::psql(
        &args.pg,
        "select datname from pg_database where datname ~ '^siphon_bench_([a-z]+_)?[0-9]+$'",
    ) {
        for db in list.lines().filter(|db| gone(db)) {
            eprintln!("dropping PostgreSQL database {db}, left by a bench run that is gone");
            let _ = pg::psql(
                &args.pg,
                &format!(
                    "select pg_drop_replication_slot(slot_name) from pg_replication_slots where database = '{db}' and not active"
                ),
            );
            let _ = pg::psql(
                &args.pg,
                &format!("drop database if exists {db} with (force)"),
            );
        }
    }
    if let Ok(list) = mysql::sql_at(&args.mysql, "show databases like 'siphon\\_bench\\_%'") {
        for db in list.lines().map(str::trim).filter(|db| gone(db)) {
            eprintln!("dropping MariaDB database {db}, left by a bench run that is gone");
            let _ = mysql::sql_at(&args.mysql, &format!("drop database if exists {db}"));
        }
    }
}

pub fn run(args: &AllArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let scale = if args.quick { 0.1 } else { args.scale };
    anyhow::ensure!(scale > 0.0, "--scale must be above 0");
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let groups: Vec<Group> = Group::value_variants()
        .iter()
        .copied()
        .filter(|g| args.only.is_empty() || args.only.contains(g))
        .collect();
    let context = Context {
        args,
        sizes: Sizes::new(scale),
        servers: Servers {
            postgres: args.pg.clone(),
            redis: args.redis.clone(),
            nats: args.nats.clone(),
            rabbitmq: args.rabbitmq.clone(),
        },
        daemon: if groups.contains(&Group::Wait) {
            Some(wait::daemon_binary()?)
        } else {
            None
        },
    };
    if groups
        .iter()
        .any(|g| !matches!(g, Group::Log | Group::Mysql | Group::Transforms))
    {
        clean_stale(args);
    }
    for &group in &groups {
        context
            .preflight(group)
            .map_err(|e| e.context(format!("group {}", group.name())))?;
    }
    let machine = Machine::read(args);
    warn_if_loaded();
    let tmp = tempfile::tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    eprintln!(
        "siphon-bench all: {} run(s) of {} at scale {scale}",
        args.runs,
        groups
            .iter()
            .map(|g| g.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut report = Report {
        args,
        scale,
        groups: &groups,
        machine: &machine,
        started,
        took: groups.iter().map(|g| (*g, Duration::ZERO)).collect(),
        runs: Vec::new(),
        not_measured: if groups.contains(&Group::Sinks) {
            vec![NotMeasured {
                what: "Elasticsearch sink".into(),
                why: "no Elasticsearch server on this machine (nor a package of one)".into(),
            }]
        } else {
            Vec::new()
        },
        failures: Vec::new(),
    };
    for run in 0..args.runs {
        let figures = context.one_run(run, &mut report, tmp.path());
        report.runs.push(figures);
        // Written after every run, so that an interrupted invocation leaves what it measured.
        if let Some(path) = &args.write {
            write_section(path, &report.section())?;
            eprintln!(
                "wrote the summary of {} run(s) into {}",
                report.runs.len(),
                path.display()
            );
        }
    }
    println!("{}", report.section());
    let failures = report.failures;
    anyhow::ensure!(
        failures.is_empty(),
        "{} group run(s) failed (listed above)",
        failures.len()
    );
    Ok(())
}

impl Context<'_> {
    /// Run `run` of every group; a group that fails is listed in `report`, the others go on.
    fn one_run(&self, run: usize, report: &mut Report<'_>, dir: &std::path::Path) -> Vec<Figure> {
        let mut figures = Vec::new();
        for (i, &group) in report.groups.iter().enumerate() {
            eprintln!(
                "[{}] run {}/{}: {} …",
                minutes(report.started.elapsed()),
                run + 1,
                self.args.runs,
                group.name()
            );
            let t = Instant::now();
            match self.measure(group, run, dir) {
                Ok(measured) => {
                    for f in &measured {
                        eprintln!("  {}", f.line());
                    }
                    figures.extend(measured);
                }
                Err(e) => {
                    eprintln!("  FAILED: {e:#}");
                    report
                        .failures
                        .push(format!("run {}, {}: {e:#}", run + 1, group.name()));
                }
            }
            report.took[i].1 += t.elapsed();
        }
        figures
    }
}

/// Says so when the load average passes the cores: other work moves the figures.
fn warn_if_loaded() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if load_average()
        .parse::<f64>()
        .is_ok_and(|l| l > cores as f64)
    {
        eprintln!(
            "note: the load average is {} on {cores} cores: other work moves the figures \
             (ratios less than rates); the summary records it",
            load_average()
        );
    }
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

/// Where and on what the run ran.
#[derive(Debug)]
struct Machine {
    date: String,
    commit: String,
    description: String,
    servers: String,
}

impl Machine {
    fn read(args: &AllArgs) -> Self {
        let out = |cmd: &mut Command| {
            cmd.output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        let repo = args
            .write
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let git = |a: &[&str]| out(Command::new("git").arg("-C").arg(&repo).args(a));
        let mut commit = git(&["rev-parse", "--short", "HEAD"]);
        if commit.is_empty() {
            commit = "unknown (not in a git checkout)".into();
        } else {
            let changed: Vec<String> = git(&["status", "--porcelain", "--untracked-files=no"])
                .lines()
                .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
                .collect();
            if !changed.is_empty() {
                let mut list = changed
                    .iter()
                    .take(8)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if changed.len() > 8 {
                    list.push_str(&format!(" and {} more", changed.len() - 8));
                }
                commit.push_str(&format!(
                    "-dirty (uncommitted changes in the working tree: {list})"
                ));
            }
        }
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let model = out(Command::new("lscpu").env("LC_ALL", "C"))
            .lines()
            .find_map(|l| l.strip_prefix("Model name:"))
            .map_or("unknown CPU".into(), |m| m.trim().to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        let memory = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(String::new(), |kb| {
                format!(", {:.0} GB of memory", kb / 1e6 * 1.024)
            });
        let load = load_average();
        let mut servers = Vec::new();
        if let Ok(v) = pg::psql(&args.pg, "show server_version") {
            servers.push(format!(
                "PostgreSQL {}",
                v.split_whitespace().next().unwrap_or("")
            ));
        }
        if let Ok(v) = mysql::sql_at(&args.mysql, "select version()") {
            servers.push(format!("MariaDB {v}"));
        }
        let redis = out(Command::new("redis-cli").args(["-u", &args.redis, "info", "server"]));
        if let Some(v) = redis.lines().find_map(|l| l.strip_prefix("redis_version:")) {
            servers.push(format!("Redis {}", v.trim()));
        }
        Self {
            date: out(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])),
            commit,
            description: format!(
                "{cores} cores ({model}), Linux {kernel}{memory}; load average {load} at the start"
            ),
            servers: servers.join(", "),
        }
    }
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

/// What an invocation measured so far, and where.
struct Report<'a> {
    args: &'a AllArgs,
    scale: f64,
    groups: &'a [Group],
    machine: &'a Machine,
    started: Instant,
    /// Each group's time over the runs so far.
    took: Vec<(Group, Duration)>,
    /// Each run's figures.
    runs: Vec<Vec<Figure>>,
    not_measured: Vec<NotMeasured>,
    failures: Vec<String>,
}

impl Report<'_> {
    /// The summary section: heading, how it was made, the table, what was not measured, failures.
    fn section(&self) -> String {
        let Self {
            args,
            scale,
            groups,
            machine,
            started,
            took,
            runs,
            not_measured,
            failures,
        } = self;
        let scale = *scale;
        let invocation = std::iter::once("siphon-bench".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        let command = match std::env::var("SIPHON_BENCH_COMMAND") {
            Ok(c) if !c.trim().is_empty() => format!("`{}` (`{invocation}`)", c.trim()),
            _ => format!("`{invocation}`"),
        };
        let per_group = took
            .iter()
            .map(|(g, d)| format!("{} {}", g.name(), minutes(*d / runs.len().max(1) as u32)))
            .collect::<Vec<_>>()
            .join(", ");
        let scale_note = if scale == 1.0 {
            "1 (the issue's sizes)".to_owned()
        } else {
            format!("{scale} (not the issue's sizes: a quick look, not a result)")
        };
        let out = format!(
            "{HEADING}\n\n\
         Written by `siphon-bench all --write`, replaced on each run; the sections after this one \
         are the history, written at each issue, with the workloads in detail.\n\n\
         - Command: {command}\n\
         - Date: {}; {} run(s) took {} (min:s){}, a run's groups: {per_group}\n\
         - Commit: {}\n\
         - Machine: {}, {} at the end (other work on the machine moves both sides of a ratio)\n\
         - Servers: {}\n\
         - Scale: {scale_note}; groups: {}\n\n\
         How to read it: a ratio is siphon's rate over its reference's, both measured in the same \
         run (above 1: siphon is faster). Where a bench reads the same work twice a side \
         (reference, siphon, siphon, reference: the PostgreSQL and MariaDB sources), the run's \
         ratio is of the two sides' total times. The siphon and reference columns give each \
         run's rate per second (k thousand, M million); min / median / max are over the runs. A \
         ratio target is met when the median meets it, a latency or memory bound when every run \
         does. The targets are issue 22's, or the issue named. Peak RSS is the `VmHWM` of a \
         process running that workload alone (the bench re-run as a child); MB = 10^6 bytes.\n\n",
            machine.date,
            runs.len(),
            minutes(started.elapsed()),
            if runs.len() < args.runs {
                format!(" (incomplete: {} of {} runs so far)", runs.len(), args.runs)
            } else {
                String::new()
            },
            machine.commit,
            machine.description,
            load_average(),
            if machine.servers.is_empty() {
                "?"
            } else {
                &machine.servers
            },
            groups
                .iter()
                .map(|g| g.name())
                .collect::<Vec<_>>()
                .join(", "),
        );
        let mut out = wrap(&out, 96);
        out.push_str(&summary_table(runs, not_measured));
        if !failures.is_empty() {
            out.push_str("\nFailed (\"—\" in the table):\n\n");
            for f in failures {
                out.push_str(&format!("- {}\n", f.replace('\n', " ")));
            }
        }
        out
    }
}

/// `text` with its lines wrapped at `width` characters (a list item's continuation indented
/// by two spaces), as the rest of BENCHMARKS.md is.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let indent = if line.starts_with("- ") { "  " } else { "" };
        let mut current = String::new();
        for word in line.split(' ') {
            if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > width {
                out.push_str(&current);
                out.push('\n');
                current = indent.to_owned();
            } else if !current.is_empty() && current != indent {
                current.push(' ');
            }
            current.push_str(word);
        }
        out.push_str(&current);
        out.push('\n');
    }
    out
}

/// Replaces the summary section of the file at `path` with `section` (or puts it before the
/// first section when it has none).
fn write_section(path: &Path, section: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let new = replace_section(&text, section);
    std::fs::write(path, new)?;
    Ok(())
}

fn replace_section(text: &str, section: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let section = section.trim_end();
    let is_h2 = |l: &str| l.starts_with("## ");
    let (start, end) = match lines.iter().position(|l| l.trim_end() == HEADING) {
        Some(s) => {
            let e = lines[s + 1..]
                .iter()
                .position(|l| is_h2(l))
                .map_or(lines.len(), |p| s + 1 + p);
            (s, e)
        }
        None => {
            let s = lines.iter().position(|l| is_h2(l)).unwrap_or(lines.len());
            (s, s)
        }
    };
    let mut out = String::new();
    for l in &lines[..start] {
        out.push_str(l);
        out.push('\n');
    }
    if start > 0 && !lines[start - 1].trim().is_empty() {
        out.push('\n');
    }
    out.push_str(section);
    out.push_str("\n\n");
    for l in &lines[end..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_goes_before_the_first_and_is_replaced_after() {
        let doc = "# Benchmarks\n\nIntro.\n\n## The log\n\nText.\n";
        let once = replace_section(doc, &format!("{HEADING}\n\nfirst"));
        assert_eq!(
            once,
            format!("# Benchmarks\n\nIntro.\n\n{HEADING}\n\nfirst\n\n## The log\n\nText.\n")
        );
        let twice = replace_section(&once, &format!("{HEADING}\n\nsecond\n"));
        assert_eq!(twice, once.replace("first", "second"));
    }

    #[test]
    fn wrap_keeps_words_and_indents_list_items() {
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc\n");
        assert_eq!(wrap("- aa bb cc", 7), "- aa bb\n  cc\n");
        assert_eq!(wrap("a\n\nb", 5), "a\n\nb\n");
    }

    #[test]
    fn the_issue_sizes_at_scale_one() {
        let s = Sizes::new(1.0);
        assert_eq!(
            (s.pg_rows, s.pg_txns, s.rss_snapshot, s.rss_txn),
            (1_000_000, 100_000, 10_000_000, 1_000_000)
        );
        let q = Sizes::new(0.1);
        assert_eq!((q.pg_txns % 4, q.wait_seconds), (0, 8));
    }
}
