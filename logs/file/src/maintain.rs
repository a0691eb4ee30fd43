//! Retention (delete whole closed segments) and, in [`super::compact`], key compaction.

use std::fs;

use super::segment::{index_path, log_path};
use super::{FileLog, compact, now_ms};
use siphon_core::log::{Consumer, MaintenanceReport};
use siphon_core::{Error, Result, fsutil};

pub(super) fn run(log: &FileLog, consumers: &[Consumer]) -> Result<MaintenanceReport> {
    let inner = &log.inner;
    if inner.writer.is_none() {
        return Err(super::read_only());
    }
    let _one_at_a_time = inner.maintenance.lock().unwrap();
    let end = inner.durable_end();
    let min_all = consumers.iter().map(|c| c.next_offset).min().unwrap_or(end);
    let mut report = MaintenanceReport::default();
    apply_retention(log, consumers, min_all, &mut report)?;
    if inner.config.compaction {
        let min_history = consumers
            .iter()
            .filter(|c| c.keeps_history)
            .map(|c| c.next_offset)
            .min()
            .unwrap_or(u64::MAX);
        // Closed, durable segments that every history-keeping sink has read completely (a
        // closed segment's offsets run to the next one's base).
        let eligible_end = inner
            .segments
            .read()
            .unwrap()
            .windows(2)
            .map(|pair| pair[1].base)
            .take_while(|&next| next <= min_history && next <= end)
            .last()
            .unwrap_or(0);
        compact::pass(log, min_all, eligible_end, &mut report)?;
    }
    Ok(report)
}

fn apply_retention(
    log: &FileLog,
    consumers: &[Consumer],
    min_all: u64,
    report: &mut MaintenanceReport,
) -> Result<()> {
    let inner = &log.inner;
    let cfg = &inner.config;
    let now = now_ms();
    loop {
        let (oldest, oldest_end, total) = {
            let segments = inner.segments.read().unwrap();
            if segments.len() < 2 {
                return Ok(()); // the active segment is never deleted
            }
            (
                segments[0].clone(),
                segments[1].base,
                segments.iter().map(|s| s.size).sum::<u64>(),
            )
        };
        // Nor is the segment holding the last record (the active one may be empty): a source
        // resumes from it.
        if oldest_end >= inner.durable_end() {
            return Ok(());
        }
        let expired = cfg
            .retention
            .is_some_and(|r| oldest.last_timestamp_ms < now - r.0.as_millis() as i64)
            || cfg.retention_size.is_some_and(|s| total > s.0);
        // The segment's offsets run to the next one's base, whatever compaction left in it.
        let read_by_all = oldest_end <= min_all;
        let over_cap = cfg.max_size.is_some_and(|m| total > m.0);
        if !(expired && read_by_all || over_cap) {
            return Ok(());
        }
        if !read_by_all {
            for c in consumers.iter().filter(|c| c.next_offset < oldest_end) {
                let lost = c.next_offset.max(oldest.base)..oldest_end;
                tracing::error!(
                    sink = %c.name, first_lost = lost.start, end_lost = lost.end,
                    "the change log reached max_size: deleting records this sink has not read; \
                     it must be rebuilt with `siphon replay`"
                );
                report.lost.push((c.name.clone(), lost));
            }
        }
        inner.segments.write().unwrap().remove(0);
        let log_file = log_path(&inner.dir, oldest.base);
        fs::remove_file(&log_file).map_err(Error::io("remove", &log_file))?;
        let _ = fs::remove_file(index_path(&inner.dir, oldest.base));
        fsutil::sync_dir(&inner.dir)?;
        report.segments_deleted += 1;
        report.bytes_freed += oldest.size;
    }
}
