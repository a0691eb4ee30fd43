//! `siphon replay`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::client::AdminClient;
use crate::config::Config;
use crate::runtime::State;

/// Progress on a terminal as a bar, elsewhere as a log line every few seconds.
struct Progress {
    bar: Option<ProgressBar>,
    last_line: Instant,
}

impl Progress {
    fn new(from: u64, until: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(until.saturating_sub(from));
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} replay [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Progress {
            bar,
            last_line: Instant::now(),
        }
    }

    fn update(&mut self, from: u64, next: u64, until: u64) {
        let done = next.saturating_sub(from).min(until.saturating_sub(from));
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None if self.last_line.elapsed() > Duration::from_secs(5) => {
                tracing::info!(
                    applied = done,
                    of = until.saturating_sub(from),
                    "replay progress"
                );
                self.last_line = Instant::now();
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

/// Where a replay starts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Start {
    /// At this offset.
    Offset(u64),
    /// At the first record the log took at or after this time (ms since the epoch).
    Time(i64),
}

/// A time as `--from-time` takes it: RFC 3339 (UTC where it names no zone) or a span back
/// from now; ms since the epoch.
pub(super) fn parse_time(text: &str) -> Result<i64, String> {
    let at = match humantime::parse_rfc3339_weak(text.trim()) {
        Ok(at) => at,
        Err(_) => {
            let span = humantime::parse_duration(text.trim()).map_err(|_| {
                format!(
                    "{text:?} is neither a time (2026-12-03T10:00:00Z) nor a span back from now (90m, 2h)"
                )
            })?;
            std::time::SystemTime::now()
                .checked_sub(span)
                .ok_or_else(|| format!("{text:?} reaches back before 1970"))?
        }
    };
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .map_err(|_| format!("{text:?} is before 1970"))
}

pub(super) async fn replay(
    config: &Config,
    pipeline: &str,
    sink: &str,
    start: Start,
    reset: bool,
) -> anyhow::Result<ExitCode> {
    let p = config.pipeline(pipeline)?;
    if !p.sinks.contains_key(sink) {
        anyhow::bail!(
            "pipeline {pipeline} has no sink {sink:?}; configured: {}",
            p.sinks.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let from = match start {
        Start::Offset(offset) => offset,
        Start::Time(time_ms) => {
            let log = super::log::open(config, pipeline)?;
            let offset = tokio::task::spawn_blocking(move || log.offset_at_time(time_ms)).await??;
            eprintln!(
                "the first record the log took at or after {} is at offset {offset}",
                humantime::format_rfc3339_millis(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(time_ms.max(0) as u64)
                )
            );
            offset
        }
    };
    let client = AdminClient::new(config)?;
    if p.sinks[sink].delivery.consumer_group {
        // A member holds some tables: its replay has no end to wait for here.
        anyhow::ensure!(
            client.is_up().await,
            "{pipeline}/{sink} reads the log as a member of consumer group siphon.{pipeline}.{sink}: start its daemon, then replay through it"
        );
        client.replay(pipeline, sink, from, reset).await?;
        eprintln!(
            "{pipeline}/{sink} replays from offset {from} in consumer group siphon.{pipeline}.{sink}: every table's position moves there once the group gave the member its tables (stop the group's other members, or they go on from theirs); `siphon status` shows its progress"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let applied = if client.is_up().await {
        let until = client.replay(pipeline, sink, from, reset).await?;
        eprintln!(
            "replaying {pipeline}/{sink} from offset {from} to {until} in the running daemon"
        );
        let mut progress = Progress::new(from, until);
        loop {
            let statuses = client.pipelines().await?;
            let s = statuses
                .iter()
                .find(|s| s.name == pipeline)
                .and_then(|p| p.sinks.get(sink))
                .ok_or_else(|| anyhow::anyhow!("the daemon no longer reports {pipeline}/{sink}"))?;
            progress.update(from, s.next_offset, until);
            match s.component.state {
                State::Failed | State::NeedsReplay => {
                    anyhow::bail!(
                        "replay stopped: {}",
                        s.component.last_error.clone().unwrap_or_default()
                    )
                }
                _ if s.replay_until.is_none() && s.next_offset >= until => break,
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        progress.finish();
        until.saturating_sub(from)
    } else {
        eprintln!(
            "the daemon is not running: replaying {pipeline}/{sink} from offset {from} offline"
        );
        let tables = match &p.source {
            Some(source) => match source.build(pipeline).tables().await {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(error = %e, "the source cannot list its tables; the sink opens without them");
                    Vec::new()
                }
            },
            // The source runs elsewhere: the tables the log has schemas of.
            None => Vec::new(),
        };
        let mut progress: Option<Progress> = None;
        let status = crate::runtime::replay_offline(
            config,
            pipeline,
            sink,
            from,
            reset,
            tables,
            |s, until| {
                progress
                    .get_or_insert_with(|| Progress::new(from, until))
                    .update(from, s.next_offset, until);
            },
        )
        .await?;
        if let Some(p) = &progress {
            p.finish();
        }
        status.next_offset.saturating_sub(from)
    };
    eprintln!(
        "replay done: {applied} records re-applied to {pipeline}/{sink} in {:.1?}",
        started.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}
