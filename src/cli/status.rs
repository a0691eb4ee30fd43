//! `siphon status`.

use std::process::ExitCode;

use siphon_core::offsets::OffsetStore;

use super::client::AdminClient;
use crate::config::Config;
use crate::runtime::status::{ComponentStatus, PipelineStatus, SinkStatus, State};

pub(super) async fn status(config: &Config, json: bool) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(config)?;
    let (running, statuses) = if client.is_up().await {
        (true, client.pipelines().await?)
    } else {
        (false, offline_statuses(config)?)
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&statuses)?);
    } else {
        print!("{}", render(&statuses, running, config));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the data directory says while the daemon is down.
pub(super) fn offline_statuses(config: &Config) -> anyhow::Result<Vec<PipelineStatus>> {
    let mut out = Vec::new();
    for (name, p) in &config.pipelines {
        let dir = config.pipeline_dir(name);
        let log = p
            .log
            .open_existing(&config.log_context(name, p))?
            .map(|log| log.stats())
            .unwrap_or_default();
        let offsets = OffsetStore::open_existing(dir.join("offsets"));
        let offline = |kind: &str| ComponentStatus {
            kind: kind.into(),
            state: State::Offline,
            ..Default::default()
        };
        let mut status = PipelineStatus {
            name: name.clone(),
            source: offline(p.source_kind()),
            log,
            log_retention: p.log.retention(),
            ..Default::default()
        };
        for (sink, sc) in &p.sinks {
            let mut component = offline(sc.spec.kind());
            let cursor = offsets.sink(sink).unwrap_or_else(|e| {
                component.last_error = Some(format!("the saved cursor cannot be read ({e})"));
                Default::default()
            });
            if cursor.lost.is_some() {
                component.state = State::NeedsReplay;
            }
            status.sinks.insert(
                sink.clone(),
                SinkStatus {
                    component,
                    next_offset: cursor.next_offset,
                    lost: cursor.lost,
                    ..Default::default()
                },
            );
        }
        status.compute_lag(crate::runtime::now_ms());
        out.push(status);
    }
    Ok(out)
}

fn state_name(s: State) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn render(statuses: &[PipelineStatus], running: bool, config: &Config) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if running {
        let _ = writeln!(
            out,
            "daemon: running (admin API on {})",
            config.admin.listen
        );
    } else {
        let _ = writeln!(
            out,
            "daemon: not running (figures from {})",
            config.data_dir.display()
        );
    }
    for p in statuses {
        let behind = if running {
            format!("  behind {:.1}s", p.source_behind_ms as f64 / 1000.0)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "\npipeline {}\n  source  {:<10} {}{behind}{}\n  log     offsets {}..{}  {} in {} segment(s)",
            p.name,
            p.source.kind,
            state_name(p.source.state),
            p.source
                .last_error
                .as_deref()
                .map(|e| format!("  last error: {e}"))
                .unwrap_or_default(),
            p.log.start_offset,
            p.log.end_offset,
            siphon_core::units::ByteSize(p.log.size_bytes),
            p.log.segments,
        );
        if !p.source_metrics.is_empty() {
            let gauges: Vec<String> = p
                .source_metrics
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(out, "          {}", gauges.join(", "));
        }
        for (name, s) in &p.sinks {
            let _ = writeln!(
                out,
                "  sink {name:<12} {:<8} {:<12} cursor {:<10} lag {} records / {} ms{}",
                s.component.kind,
                state_name(s.component.state),
                s.next_offset,
                s.lag_records,
                s.lag_ms,
                s.component
                    .last_error
                    .as_deref()
                    .map(|e| format!("\n      last error: {e}"))
                    .unwrap_or_default(),
            );
        }
    }
    out
}
