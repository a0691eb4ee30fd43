//! Retention (delete whole closed segments) and key compaction (rewrite closed segments keeping
//! the newest record of each key).
//!
//! Compaction keeps a map of every key in the log to its newest offset in memory while it runs:
//! its memory grows with the number of distinct keys, not with the log's size.

use std::collections::{HashMap, HashSet};
use std::fs;

use super::segment::{self, Next, Segment, SegmentCursor, index_path, log_path};
use super::{FileLog, now_ms};
use crate::log::record::encode_frame;
use crate::log::{Consumer, MaintenanceReport, RecordFlags};
use crate::{Error, Result, fsutil};

pub(super) fn run(log: &FileLog, consumers: &[Consumer]) -> Result<MaintenanceReport> {
    let inner = &log.inner;
    if inner.writer.is_none() {
        return Err(super::read_only());
    }
    let mut state = inner.maintenance.lock().unwrap();
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
        // Compaction reads the whole log: only when a segment closed or a history sink moved.
        let closed_end = inner.segments.read().unwrap().last().map_or(0, |s| s.base);
        if (closed_end, min_history) != state.compacted {
            compact(log, min_all, min_history, &mut report)?;
            state.compacted = (closed_end, min_history);
        }
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

/// Reads every record of a segment up to `limit`, calling `f` with each.
fn for_each_record(
    log: &FileLog,
    seg: &Segment,
    limit: u64,
    mut f: impl FnMut(crate::log::LogRecord) -> Result<()>,
) -> Result<()> {
    let mut cursor = SegmentCursor::open(log_path(&log.inner.dir, seg.base), 0)?;
    while let Next::Record(rec) = cursor.next(limit)? {
        f(rec)?;
    }
    Ok(())
}

fn compact(
    log: &FileLog,
    min_all: u64,
    min_history: u64,
    report: &mut MaintenanceReport,
) -> Result<()> {
    let inner = &log.inner;
    let segments = inner.segments.read().unwrap().clone();
    let limit = inner.durable_end();
    // Only closed, durable segments that every history-keeping sink has read completely (a
    // closed segment's offsets run to the next one's base).
    let eligible: Vec<&Segment> = segments
        .windows(2)
        .filter(|pair| pair[1].base <= min_history && pair[1].base <= limit)
        .map(|pair| &pair[0])
        .collect();
    if eligible.is_empty() {
        return Ok(());
    }
    // Per key, the records a replay needs: the newest one, and while that one leaves columns
    // unchanged (PARTIAL), the ones before it back to a whole row. A row whose key an update
    // changed takes those columns from the old key's row: its chain goes on with the old
    // key's, through the delete that ends the old key (flagged WITH_NEXT; the new key's
    // create has the next offset, which compaction never changes).
    let mut chains: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    // The chain of the old key of a key change, until its create is read.
    let mut moving: Option<Vec<u64>> = None;
    for seg in &segments {
        for_each_record(log, seg, limit, |rec| {
            let moved_from =
                moving.take_if(|old| old.last().is_some_and(|&delete| delete + 1 == rec.offset));
            if rec.key.is_empty() {
                return Ok(());
            }
            let chain = chains.entry(rec.key).or_default();
            if rec.flags.contains(RecordFlags::WITH_NEXT) {
                let mut old = std::mem::take(chain);
                old.push(rec.offset);
                moving = Some(old);
            } else if rec.flags.contains(RecordFlags::PARTIAL) {
                if let Some(old) = moved_from {
                    *chain = old;
                }
            } else {
                chain.clear();
            }
            chain.push(rec.offset);
            Ok(())
        })?;
    }
    let mut needed: HashSet<u64> = chains.into_values().flatten().collect();
    // A key change whose create is not durable yet: its new row will need the old key's.
    needed.extend(moving.into_iter().flatten());
    let delete_horizon = now_ms() - inner.config.delete_retention.0.as_millis() as i64;
    let interval = inner.config.index_interval.0;
    // Keys with a row kept so far (in offset order): a later delete of such a key never
    // expires, or that row would come back in a replay.
    let mut rows_kept: HashSet<Vec<u8>> = HashSet::new();
    for seg in eligible {
        let mut kept = Vec::new();
        let mut compacted = Segment::empty(seg.base);
        let mut dropped = 0u64;
        for_each_record(log, seg, limit, |rec| {
            // The log's last record stays whatever it is: a source resumes from its position.
            // (No other record is kept for its position: a superseded upsert kept that way
            // would outlive the delete after it and bring the row back in a replay.)
            let is_last = rec.offset + 1 == limit;
            let tombstone = rec.flags.contains(RecordFlags::TOMBSTONE);
            let superseded = !rec.key.is_empty() && !needed.contains(&rec.offset);
            // A keyless record is never compacted, a delete of a keyless table included.
            let expired_delete = !rec.key.is_empty()
                && tombstone
                && !rows_kept.contains(&rec.key)
                && rec.offset < min_all
                && rec.timestamp_ms < delete_horizon;
            if !is_last && (superseded || expired_delete) {
                dropped += 1;
                return Ok(());
            }
            if !tombstone && !rec.key.is_empty() {
                rows_kept.insert(rec.key.clone());
            }
            // A compacted stretch no longer holds whole transactions: every record stands
            // alone, but for the first half of a key change, which goes with the next, and the
            // log's last record, whose mark tells a source whether its transaction ended.
            let start = kept.len();
            let flags = if rec.flags.contains(RecordFlags::WITH_NEXT) || is_last {
                rec.flags
            } else {
                rec.flags.with(RecordFlags::TXN_END)
            };
            encode_frame(
                &mut kept,
                rec.offset,
                rec.timestamp_ms,
                flags,
                &rec.key,
                &rec.value,
            );
            let len = (kept.len() - start) as u64;
            compacted.note(rec.offset, rec.timestamp_ms, start as u64, len, interval);
            Ok(())
        })?;
        if dropped == 0 {
            continue;
        }
        let path = log_path(&inner.dir, seg.base);
        let staged = fsutil::stage(&path, &kept)?;
        {
            // Readers open a segment's file and take a position from its index under this
            // lock: they get the old file with the old index or the new with the new.
            let mut live = inner.segments.write().unwrap();
            fsutil::commit_staged(&staged, &path)?;
            if let Some(s) = live.iter_mut().find(|s| s.base == seg.base) {
                *s = compacted.clone();
            }
        }
        fsutil::sync_dir(&inner.dir)?;
        segment::write_index(&inner.dir, &compacted)?;
        report.records_compacted += dropped;
        report.bytes_freed += seg.size - compacted.size;
    }
    Ok(())
}
