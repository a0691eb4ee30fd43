//! `siphon snapshot`: an incremental snapshot asked of the running daemon, stopped, paused or
//! resumed, and followed with a progress bar.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use siphon_core::TableName;

use super::client::AdminClient;
use crate::config::Config;

/// Asks for `tables` (or `control`: stop, pause, resume); with `follow`, shows the progress
/// until no table is left.
pub(super) async fn run(
    config: &Config,
    pipeline: &str,
    tables: &[TableName],
    control: Option<&str>,
    follow: bool,
) -> anyhow::Result<()> {
    let p = config.pipeline(pipeline)?;
    if control.is_none() {
        // Refused here, with the reason, rather than skipped by the source later.
        let captured = p.source(pipeline)?.build(pipeline).tables().await?;
        for table in tables {
            match captured.iter().find(|t| t.name == *table) {
                None => anyhow::bail!(
                    "{table} is not one of pipeline {pipeline}'s tables ({}); an incremental \
                     snapshot reads a table the source captures",
                    captured
                        .iter()
                        .map(|t| t.name.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(t) if t.key_columns.is_empty() => anyhow::bail!(
                    "{table} has no primary key: an incremental snapshot reads a table in \
                     primary-key chunks; add one, or replay the sinks after a new initial snapshot"
                ),
                Some(_) => {}
            }
        }
    }
    let client = AdminClient::new(config)?;
    if !client.is_up().await {
        anyhow::bail!(
            "no daemon answers on {}: an incremental snapshot runs in the running daemon (siphon run)",
            config.admin.listen
        );
    }
    match control {
        Some(action) => {
            client.snapshot_control(pipeline, action).await?;
            eprintln!("siphon snapshot {pipeline}: {action} asked");
        }
        None => {
            let names: Vec<String> = tables.iter().map(ToString::to_string).collect();
            let before = gauges(&client, pipeline).await?;
            client.snapshot(pipeline, tables).await?;
            if follow {
                self::follow(&client, pipeline, &before).await?;
            } else {
                eprintln!(
                    "siphon snapshot {pipeline}: {} queued; `siphon snapshot {pipeline} {} --follow` \
                     or `siphon status` shows its progress",
                    names.join(", "),
                    names.join(" ")
                );
            }
        }
    }
    Ok(())
}

/// The source's incremental-snapshot gauges (missing ones, before the source reports: -1).
struct Gauges {
    /// Requests made, and taken and reported by the source (after a restart of the daemon
    /// both start again at 0).
    requests: f64,
    requests_done: f64,
    tables_left: f64,
    paused: bool,
    rows: f64,
    /// The current table's rows read, and the database's estimate of its size.
    table_rows: f64,
    table_estimate: f64,
}

async fn gauges(client: &AdminClient, pipeline: &str) -> anyhow::Result<Gauges> {
    let statuses = client.pipelines().await?;
    let status = statuses
        .iter()
        .find(|s| s.name == pipeline)
        .ok_or_else(|| anyhow::anyhow!("the daemon no longer reports pipeline {pipeline}"))?;
    let gauge = |name: &str| {
        status
            .source_metrics
            .get(&format!("incremental_snapshot_{name}"))
            .copied()
            .unwrap_or(-1.0)
    };
    Ok(Gauges {
        requests: gauge("requests").max(0.0),
        requests_done: gauge("requests_done"),
        tables_left: gauge("tables_left"),
        paused: gauge("paused") > 0.0,
        rows: gauge("rows"),
        table_rows: gauge("table_rows"),
        table_estimate: gauge("table_rows_estimate"),
    })
}

/// Shows the progress (a bar on a terminal, a line every few seconds elsewhere) until the
/// source has taken the request and no table is left.
async fn follow(client: &AdminClient, pipeline: &str, before: &Gauges) -> anyhow::Result<()> {
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} snapshot [{bar:40}] {pos}/~{len} rows of this table ({per_sec}) {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar
    });
    let mut last_line = Instant::now();
    let now = loop {
        let now = gauges(client, pipeline).await?;
        if now.requests_done >= now.requests && now.tables_left == 0.0 {
            break now;
        }
        let message = format!(
            "{} table(s) left{}",
            now.tables_left,
            if now.paused { ", paused" } else { "" }
        );
        match &bar {
            Some(bar) => {
                // The estimate is the database's statistics: never below what was read.
                bar.set_length(now.table_estimate.max(now.table_rows) as u64);
                bar.set_position(now.table_rows as u64);
                bar.set_message(message);
            }
            None if last_line.elapsed() > Duration::from_secs(5) => {
                eprintln!(
                    "snapshot: {} rows of this table (~{} in it), {message}",
                    now.table_rows, now.table_estimate
                );
                last_line = Instant::now();
            }
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    eprintln!(
        "siphon snapshot {pipeline}: done, {} rows in {:.1?}",
        (now.rows - before.rows.max(0.0)).max(0.0),
        started.elapsed()
    );
    Ok(())
}
