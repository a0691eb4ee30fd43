//! Peak memory of the PostgreSQL source on its two largest workloads, each alone in a process:
//! a snapshot of a big table, and one big transaction streamed from a slot's backlog. The
//! bench runs itself again (the hidden `rss-child` subcommand) for each, so that the figure is
//! that workload's and nothing else's (no reference tool's buffers, no earlier workload's
//! high-water mark); the child runs the source into a file log, as the daemon does, and reports
//! its own `VmHWM` when the log holds every row.

use std::process::{Command, Stdio};

use siphon_source_postgres::SnapshotMode;

use crate::figure::{Figure, Measure, Target, thousands};
use crate::pg::{BULK, TABLE, psql};

/// Both workloads: the `snapshot_rows`-row snapshot and the `txn_rows`-row transaction.
pub fn measure(url: &str, snapshot_rows: u64, txn_rows: u64) -> anyhow::Result<Vec<Figure>> {
    let db = format!("siphon_bench_rss_{}", std::process::id());
    crate::pg::in_database(url, &db, |db_url| {
        psql(db_url, TABLE)?;
        // The floor: the same child stopped as soon as its source started, on an empty table.
        let floor = child(db_url, "rss_floor", true, 0)?;
        psql(
            db_url,
            "select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = 'rss_floor'",
        )?;
        psql(
            db_url,
            "select pg_create_logical_replication_slot('rss_txn', 'pgoutput')",
        )?;
        psql(db_url, &BULK.replace("$ROWS", &txn_rows.to_string()))?;
        let txn = child(db_url, "rss_txn", false, txn_rows)?;
        psql(db_url, "select pg_drop_replication_slot('rss_txn')")?;
        if snapshot_rows > txn_rows {
            psql(
                db_url,
                &BULK.replace("$ROWS", &(snapshot_rows - txn_rows).to_string()),
            )?;
        }
        let table: u64 = psql(db_url, "select count(*) from orders")?.parse()?;
        let snapshot = child(db_url, "rss_snapshot", true, table)?;
        let figure = |what: &str, workload: String, mb| Figure {
            what: what.into(),
            workload,
            measure: Measure::PeakRss { mb },
            target: Target::new(100.0, 22),
        };
        Ok(vec![
            Figure {
                target: None,
                ..figure(
                    "peak RSS, the floor",
                    "the same process stopped once its source started (binary, libraries, runtime)"
                        .into(),
                    floor,
                )
            },
            figure(
                "peak RSS, PostgreSQL snapshot",
                format!("{} rows, alone in a process", thousands(table)),
                snapshot,
            ),
            figure(
                "peak RSS, PostgreSQL streaming",
                format!(
                    "1 transaction of {} rows, alone in a process",
                    thousands(txn_rows)
                ),
                txn,
            ),
        ])
    })
}

/// Runs `rss-child` on `slot` (a snapshot, or the slot's backlog) until the log holds
/// `records`; returns its peak RSS in MB.
fn child(db_url: &str, slot: &str, snapshot: bool, records: u64) -> anyhow::Result<f64> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args([
        "rss-child",
        "--url",
        db_url,
        "--slot",
        slot,
        "--records",
        &records.to_string(),
    ]);
    if snapshot {
        command.arg("--snapshot");
    }
    let out = command.stderr(Stdio::inherit()).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "the child measuring {slot} failed ({}): {text}",
        out.status
    );
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| anyhow::anyhow!("the child printed no {name}: {text}"))
    };
    let kib = field("peak_kib=")?;
    let seconds = field("seconds=")?;
    eprintln!(
        "  rss-child {slot}: {} records in {seconds:.1} s, peak {:.1} MB",
        thousands(records),
        kib * 1024.0 / 1e6
    );
    Ok(kib * 1024.0 / 1e6)
}

/// The child: the source on `slot` into a file log of a temporary directory until it holds
/// `records` records; prints `peak_kib=… seconds=…`.
pub fn child_main(url: &str, slot: &str, snapshot: bool, records: u64) -> anyhow::Result<()> {
    let rt = crate::pg::runtime()?;
    let dir = tempfile::tempdir()?;
    let mode = if snapshot {
        SnapshotMode::Initial
    } else {
        SnapshotMode::Never
    };
    let took = rt.block_on(crate::pg::siphon_in(&dir, url, slot, mode, records))?;
    println!(
        "peak_kib={} seconds={}",
        crate::pg::peak_rss_kib(),
        took.as_secs_f64()
    );
    Ok(())
}
