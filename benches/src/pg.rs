//! `siphon-bench pg`: the PostgreSQL source against the server's own limits, on the same
//! workloads as `../shared/reference/pg_limit.sh`, in one run:
//!
//! 1. a single transaction inserting `rows` rows, streamed from a slot's backlog into the log
//!    (fsynced), vs `pg_recvlogical` (pgoutput, `-f /dev/null`) on another slot;
//! 2. `txns` one-row transactions, likewise;
//! 3. a snapshot of the `rows`-row table vs `COPY … TO STDOUT`.
//!
//! Each in the order reference, siphon, siphon, reference ([`abba`]). It also reports the
//! process's peak RSS (VmHWM) after streaming the big transaction (`siphon-bench all` measures
//! peak RSS in a process of its own: `rss.rs`).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::Event;
use siphon_core::log::{ChangeLog, LogReader};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{Source, SourceContext};
use siphon_log_file::FileLog;
use siphon_source_postgres::{PostgresConfig, PostgresSource, SnapshotMode};
use tokio_util::sync::CancellationToken;

use crate::figure::{Figure, Measure, Rates, Target, rate, thousands};
use crate::tools;

pub(crate) const TABLE: &str = "create table orders (id bigserial primary key, customer_id int not null, city text not null,
  amount numeric(12,2) not null, status text not null, note text, created_at timestamptz not null default now());
  create publication bench_pub for table orders;";

pub(crate) const BULK: &str = "insert into orders (customer_id, city, amount, status, note) select (random()*100000)::int,
  (array['Berlin','Paris','Tokyo','Lima','Oslo'])[1+floor(random()*5)::int], round((random()*1000)::numeric,2), 'paid', md5(g::text)
  from generate_series(1, $ROWS) g";

pub(crate) fn psql(url: &str, sql: &str) -> anyhow::Result<String> {
    let out = Command::new("psql")
        .args(["-X", "-q", "-At", "-d", url, "-c", sql])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

pub(crate) fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map_or(url, |(b, _)| b);
    format!("{base}/{db}")
}

/// pg_recvlogical on `slot` up to `end`; returns the elapsed time.
fn recvlogical(url: &str, slot: &str, end: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let status = Command::new("pg_recvlogical")
        .args([
            "-d",
            url,
            "-S",
            slot,
            "--start",
            "-E",
            end,
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=bench_pub",
        ])
        .args(["-f", "/dev/null", "--no-loop", "--fsync-interval=0"])
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed");
    Ok(started.elapsed())
}

/// The source on `slot` until the log holds `records` records (durably); returns the time.
async fn siphon(
    url: &str,
    slot: &str,
    snapshot: SnapshotMode,
    records: u64,
) -> anyhow::Result<Duration> {
    siphon_in(&tempfile::tempdir()?, url, slot, snapshot, records).await
}

/// [`siphon`] with its log in `dir`.
pub(crate) async fn siphon_in(
    dir: &tempfile::TempDir,
    url: &str,
    slot: &str,
    snapshot: SnapshotMode,
    records: u64,
) -> anyhow::Result<Duration> {
    let log = FileLog::open(dir.path().join("log"), Default::default())?;
    run_source(Arc::new(log), dir.path(), url, slot, snapshot, records).await
}

/// The source on `slot` into `log` (its offsets in `dir`) until the log holds `records`
/// records durably; returns the time.
pub(crate) async fn run_source(
    log: Arc<dyn ChangeLog>,
    dir: &std::path::Path,
    url: &str,
    slot: &str,
    snapshot: SnapshotMode,
    records: u64,
) -> anyhow::Result<Duration> {
    let cancel = CancellationToken::new();
    let ctx = SourceContext {
        pipeline: "bench".into(),
        log: log.clone(),
        offsets: OffsetStore::open(dir.join("offsets"))?,
        cancel: cancel.clone(),
        metrics: Default::default(),
    };
    let mut source = PostgresSource::new("bench", postgres_config(url, slot, snapshot));
    let metrics = ctx.metrics.clone();
    let started = Instant::now();
    let run = tokio::spawn(async move { source.run(&ctx).await });
    let mut end = log.subscribe();
    end.wait_for(|e| *e >= records).await?;
    let elapsed = started.elapsed();
    cancel.cancel();
    run.await??;
    if metrics.values().get("binary_tuples") != Some(&1.0) && snapshot == SnapshotMode::Never {
        eprintln!("note: the stream used text tuples, not binary");
    }
    Ok(elapsed)
}

/// The source's settings for the bench's `orders` table on `slot`.
pub(crate) fn postgres_config(url: &str, slot: &str, snapshot: SnapshotMode) -> PostgresConfig {
    PostgresConfig {
        url: siphon_core::ConnectionUrl::new(url),
        password: None,
        password_file: None,
        tables: vec!["public.orders".parse().unwrap()],
        slot: Some(slot.to_owned()),
        publication: Some("bench_pub".into()),
        snapshot,
        snapshot_parallelism: 2,
        heartbeat_interval: None,
        status_interval: siphon_core::units::HumanDuration(Duration::from_secs(10)),
        table_poll_interval: siphon_core::units::HumanDuration(Duration::from_secs(10)),
        drop_slot_on_stop: false,
        tls: None,
        tls_ca_file: None,
    }
}

/// The peak resident memory (`VmHWM`) of this process, in MiB.
pub(crate) fn peak_rss_mib() -> f64 {
    peak_rss_kib() / 1024.0
}

/// The peak resident memory (`VmHWM`) of this process, in KiB.
pub(crate) fn peak_rss_kib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// What `measure` found: the figures, and what the subcommand prints after them.
#[derive(Debug)]
pub struct PgResult {
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
}

/// The tools this bench runs.
pub const TOOLS: &[tools::Tool] = &[tools::PSQL, tools::PG_RECVLOGICAL, tools::PGBENCH];

pub fn run(url: &str, rows: u64, txns: u64) -> anyhow::Result<()> {
    tools::require(TOOLS)?;
    if std::env::var_os("SIPHON_BENCH_SNAPSHOT_ONLY").is_some() {
        return snapshot_only(url, rows);
    }
    let result = measure(url, rows, txns)?;
    for figure in &result.figures {
        report(figure);
    }
    for note in &result.notes {
        println!("\n{note}");
    }
    Ok(())
}

/// A database of its own for `f`, dropped after it with its replication slots.
pub(crate) fn in_database<T>(
    url: &str,
    db: &str,
    f: impl FnOnce(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    psql(url, &format!("drop database if exists {db} with (force)"))?;
    psql(url, &format!("create database {db}"))?;
    let result = f(&with_db(url, db));
    let _ = psql(
        url,
        &format!(
            "select pg_drop_replication_slot(slot_name) from pg_replication_slots where database = '{db}'"
        ),
    );
    let _ = psql(url, &format!("drop database if exists {db} with (force)"));
    result
}

/// The source's snapshot of `rows` rows alone, with no reference: a workload to profile
/// (`SIPHON_BENCH_SNAPSHOT_ONLY`).
fn snapshot_only(url: &str, rows: u64) -> anyhow::Result<()> {
    let rt = runtime()?;
    let db = format!("siphon_bench_{}", std::process::id());
    in_database(url, &db, |db_url| {
        psql(db_url, TABLE)?;
        psql(db_url, &BULK.replace("$ROWS", &rows.to_string()))?;
        let ours = rt.block_on(siphon(
            db_url,
            "siphon_snapshot",
            SnapshotMode::Initial,
            rows,
        ))?;
        println!(
            "| snapshot of {rows} rows | | {:.0} rows/s | |",
            rate(rows, ours)
        );
        Ok(())
    })
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The three workloads, each beside its reference.
pub fn measure(url: &str, rows: u64, txns: u64) -> anyhow::Result<PgResult> {
    let rt = runtime()?;
    let db = format!("siphon_bench_{}", std::process::id());
    in_database(url, &db, |db_url| {
        let mut figures = Vec::new();
        let mut notes = Vec::new();
        psql(db_url, TABLE)?;
        figures.push(bulk(&rt, db_url, rows)?);
        let rss = peak_rss_mib();
        figures.push(small(&rt, db_url, txns)?);
        figures.push(snapshot(&rt, db_url, rows, &mut notes)?);
        notes.push(format!(
            "peak RSS of this process after streaming the {rows}-row transaction: {rss:.0} MiB"
        ));
        Ok(PgResult { figures, notes })
    })
}

/// Streaming one transaction of `rows` rows, beside `pg_recvlogical`.
fn bulk(rt: &tokio::runtime::Runtime, db_url: &str, rows: u64) -> anyhow::Result<Figure> {
    create_slots(db_url, "bulk")?;
    psql(db_url, &BULK.replace("$ROWS", &rows.to_string()))?;
    let end = psql(db_url, "select pg_current_wal_lsn()")?;
    let (reference, ours) = abba(
        || recvlogical(db_url, "ref_bulk", &end),
        || recvlogical(db_url, "ref_bulk_2", &end),
        || rt.block_on(siphon(db_url, "siphon_bulk", SnapshotMode::Never, rows)),
        || rt.block_on(siphon(db_url, "siphon_bulk_2", SnapshotMode::Never, rows)),
    )?;
    drop_slots(db_url, "bulk")?;
    Ok(Figure {
        what: "PostgreSQL streaming".into(),
        workload: format!("1 transaction of {} rows", thousands(rows)),
        measure: Measure::Rates(Rates::timed(
            "rows",
            "pg_recvlogical",
            rows,
            &ours,
            &reference,
        )),
        target: Target::new(0.95, 3),
    })
}

/// Streaming `txns` one-row transactions (pgbench's), beside `pg_recvlogical`.
fn small(rt: &tokio::runtime::Runtime, db_url: &str, txns: u64) -> anyhow::Result<Figure> {
    create_slots(db_url, "small")?;
    let script = tempfile::NamedTempFile::new()?;
    std::fs::write(
        script.path(),
        "insert into orders (customer_id, city, amount, status, note) values (1, 'Oslo', 9.99, 'new', 'x');\n",
    )?;
    let pgbench = std::fs::read_dir("/usr/lib/postgresql")?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/pgbench"))
        .find(|p| p.exists());
    let pgbench =
        pgbench.ok_or_else(|| anyhow::anyhow!("pgbench not found under /usr/lib/postgresql"))?;
    let status = Command::new(pgbench)
        .args([
            "-n",
            "-c",
            "4",
            "-j",
            "2",
            "-t",
            &(txns / 4).to_string(),
            "-f",
        ])
        .arg(script.path())
        .arg(db_url)
        .env("PGOPTIONS", "-c synchronous_commit=off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "pgbench failed");
    let end = psql(db_url, "select pg_current_wal_lsn()")?;
    let n = txns / 4 * 4;
    let (reference, ours) = abba(
        || recvlogical(db_url, "ref_small", &end),
        || recvlogical(db_url, "ref_small_2", &end),
        || rt.block_on(siphon(db_url, "siphon_small", SnapshotMode::Never, n)),
        || rt.block_on(siphon(db_url, "siphon_small_2", SnapshotMode::Never, n)),
    )?;
    drop_slots(db_url, "small")?;
    Ok(Figure {
        what: "PostgreSQL streaming".into(),
        workload: format!("{} one-row transactions", thousands(n)),
        measure: Measure::Rates(Rates::timed("txns", "pg_recvlogical", n, &ours, &reference)),
        target: Target::new(0.95, 3),
    })
}

/// The snapshot of the table cut to `rows` rows, beside `COPY TO STDOUT`, in the same
/// symmetric order; what the log holds a row in `notes`.
fn snapshot(
    rt: &tokio::runtime::Runtime,
    db_url: &str,
    rows: u64,
    notes: &mut Vec<String>,
) -> anyhow::Result<Figure> {
    psql(db_url, &format!("delete from orders where id > {rows}"))?;
    psql(db_url, "vacuum orders")?;
    let count: u64 = psql(db_url, "select count(*) from orders")?.parse()?;
    let copy = || -> anyhow::Result<Duration> {
        let started = Instant::now();
        let status = Command::new("psql")
            .args(["-X", "-q", "-d", db_url, "-c", "copy orders to stdout"])
            .stdout(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "COPY failed");
        Ok(started.elapsed())
    };
    let dir = tempfile::tempdir()?;
    let (reference, ours) = abba(
        copy,
        copy,
        || {
            rt.block_on(siphon_in(
                &dir,
                db_url,
                "siphon_snapshot",
                SnapshotMode::Initial,
                count,
            ))
        },
        || {
            rt.block_on(siphon(
                db_url,
                "siphon_snapshot_2",
                SnapshotMode::Initial,
                count,
            ))
        },
    )?;
    for slot in ["siphon_snapshot", "siphon_snapshot_2"] {
        psql(
            db_url,
            &format!("select pg_drop_replication_slot('{slot}')"),
        )?;
    }
    let figure = Figure {
        what: "PostgreSQL snapshot".into(),
        workload: format!("{} rows", thousands(count)),
        measure: Measure::Rates(Rates::timed(
            "rows",
            "COPY TO STDOUT (psql)",
            count,
            &ours,
            &reference,
        )),
        target: Target::new(0.8, 22),
    };
    let (compact, named) = log_bytes(&dir)?;
    let copy_bytes: f64 = psql(
        db_url,
        "select sum(octet_length(o::text) - 1) from orders o",
    )?
    .parse()?;
    notes.push(format!(
        "log bytes per row of the snapshot: {:.0} (values and schema id), {:.0} with column names as before the schema records; COPY's text: {:.0}",
        compact / count as f64,
        named / count as f64,
        copy_bytes / count as f64
    ));
    Ok(figure)
}

/// Bytes of the log in `dir` on disk, and what the same records would take with their events
/// encoded with column names (the format before schema records), frames and keys included.
fn log_bytes(dir: &tempfile::TempDir) -> anyhow::Result<(f64, f64)> {
    let log = FileLog::open_read_only(dir.path().join("log"), Default::default())?;
    let on_disk = log.stats().size_bytes as f64;
    let mut reader = log.file_reader(0)?;
    let mut saved = 0f64;
    loop {
        let batch = reader.read_available(10_000)?;
        if batch.is_empty() {
            break;
        }
        for r in batch {
            let event = Event::decode(
                &r.value,
                log.schemas(),
                &siphon_source_postgres::PostgresKind,
            )?;
            let named = Event {
                schema: None,
                ..event
            }
            .encode()?;
            saved += named.len() as f64 - r.value.len() as f64;
        }
    }
    Ok((on_disk, on_disk + saved))
}

/// Drops the slots [`create_slots`] made for `workload`: the server has few (max_replication_slots).
fn drop_slots(db_url: &str, workload: &str) -> anyhow::Result<()> {
    for slot in ["ref", "siphon"] {
        for suffix in ["", "_2"] {
            psql(
                db_url,
                &format!("select pg_drop_replication_slot('{slot}_{workload}{suffix}')"),
            )?;
        }
    }
    Ok(())
}

/// Two slots for the reference and two for siphon, on the same changes.
fn create_slots(db_url: &str, workload: &str) -> anyhow::Result<()> {
    for slot in ["ref", "siphon"] {
        for suffix in ["", "_2"] {
            psql(
                db_url,
                &format!(
                    "select pg_create_logical_replication_slot('{slot}_{workload}{suffix}', 'pgoutput')"
                ),
            )?;
        }
    }
    Ok(())
}

/// Runs reference, siphon, siphon, reference (each on its own slot of the same changes) and
/// returns the pairs' times. Whoever reads a backlog first may pay for WAL not yet in the
/// page cache and for a checkpoint the load started; in the symmetric order both sides pay
/// alike.
pub(crate) fn abba(
    reference_a: impl FnOnce() -> anyhow::Result<Duration>,
    reference_b: impl FnOnce() -> anyhow::Result<Duration>,
    ours_a: impl FnOnce() -> anyhow::Result<Duration>,
    ours_b: impl FnOnce() -> anyhow::Result<Duration>,
) -> anyhow::Result<([Duration; 2], [Duration; 2])> {
    let r1 = reference_a()?;
    let o1 = ours_a()?;
    let o2 = ours_b()?;
    let r2 = reference_b()?;
    Ok(([r1, r2], [o1, o2]))
}

/// One table row: the rates of both sides (first and second run), and the ratio of the
/// total times (the position effects cancel), with the ratio of each adjacent pair.
pub(crate) fn report(figure: &Figure) {
    let Measure::Rates(r) = &figure.measure else {
        return;
    };
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pairs = r.pair_ratios();
    let pairs = match pairs.as_slice() {
        [first, second] => format!(" (first pair {first:.2}x, second {second:.2}x)"),
        _ => String::new(),
    };
    println!(
        "| {}, {}, vs {} | {} {unit}/s | {} {unit}/s | {:.2}x{pairs} |",
        figure.what,
        figure.workload,
        r.reference,
        list(&r.reference_rates),
        list(&r.siphon),
        r.ratio(),
        unit = r.unit,
    );
}
