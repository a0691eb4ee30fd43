//! `siphon log tail` and `siphon log stats`.

use std::io::Write;
use std::process::ExitCode;

use siphon_core::Event;
use siphon_format::debezium::Modes;
use siphon_format::envelope::{JsonFormat, envelope};
use siphon_format::json::row_json;
use std::sync::Arc;

use siphon_core::log::{ChangeLog, LogRecord, RecordFlags};

use super::TailFormat;
use crate::config::Config;

/// The pipeline's log, read-only beside the daemon.
pub(super) fn open(config: &Config, pipeline: &str) -> anyhow::Result<Arc<dyn ChangeLog>> {
    let p = config.pipeline(pipeline)?;
    let ctx = config.log_context(pipeline, p);
    p.log.open_existing(&ctx)?.ok_or_else(|| {
        anyhow::anyhow!(
            "pipeline {pipeline} has no change log yet in {} (run the daemon first)",
            ctx.dir.display()
        )
    })
}

/// A record as `--format pretty` prints it: offset, flags, key and the event's envelope.
fn pretty(record: &LogRecord, event: &Event) -> serde_json::Value {
    serde_json::json!({
        "offset": record.offset,
        "appended_ms": record.timestamp_ms,
        "ends_transaction": record.flags.contains(RecordFlags::TXN_END),
        "key": event.key.as_ref().map(row_json),
        "event": envelope(event),
    })
}

pub(super) async fn tail(
    config: &Config,
    pipeline: &str,
    from: Option<u64>,
    follow: bool,
    format: TailFormat,
    (debezium, schemas): (&[String], bool),
) -> anyhow::Result<ExitCode> {
    let mut modes = Modes::default();
    for property in debezium {
        modes
            .set(property)
            .map_err(|e| anyhow::anyhow!("--debezium {e}"))?;
    }
    let log = open(config, pipeline)?;
    let positions = config.pipeline(pipeline)?.positions();
    let start = log.start_offset();
    let from = from
        .unwrap_or_else(|| log.durable_end().saturating_sub(10))
        .max(start);
    let mut reader = log.reader(from)?;
    let mut out = std::io::stdout().lock();
    loop {
        let batch = reader.read_available(1000)?;
        for record in &batch {
            let text = match Event::decode(&record.value, log.schemas(), &*positions) {
                // A record that does not decode: its offset and the error.
                Err(e) => {
                    serde_json::json!({"offset": record.offset, "error": e.to_string()}).to_string()
                }
                Ok(event) => match format {
                    TailFormat::Pretty => serde_json::to_string_pretty(&pretty(record, &event))?,
                    TailFormat::Jsonl => serde_json::to_string(
                        &JsonFormat {
                            schemas,
                            transactions: false,
                            modes,
                        }
                        .encode(&event),
                    )?,
                    TailFormat::Records => {
                        siphon_format::envelope::records(&event, &modes, schemas)
                            .iter()
                            .map(serde_json::to_string)
                            .collect::<Result<Vec<_>, _>>()?
                            .join("\n")
                    }
                },
            };
            if text.is_empty() {
                continue;
            }
            // A closed pipe (`| head`) ends the command quietly.
            if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if batch.is_empty() {
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
                waited = reader.wait() => waited?,
            }
        }
    }
}

pub(super) fn stats(config: &Config) -> anyhow::Result<ExitCode> {
    let statuses = super::status::offline_statuses(config)?;
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>9}",
        "pipeline", "start", "end", "size", "segments"
    );
    for p in statuses {
        println!(
            "{:<16} {:>12} {:>12} {:>12} {:>9}",
            p.name,
            p.log.start_offset,
            p.log.end_offset,
            siphon_core::units::ByteSize(p.log.size_bytes).to_string(),
            p.log.segments
        );
        for (sink, s) in &p.sinks {
            println!(
                "  sink {sink:<12} cursor {:>12}  lag {:>10} records",
                s.next_offset, s.lag_records
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
