//! Key compaction, bounded and incremental, as Kafka's log cleaner: the log is clean below
//! `cleaned_to` (each key's records there are only those a replay needs). A pass reads the
//! dirty records after it into a key map of bounded size — stopping early, and leaving the
//! rest to the next pass, where the map is full — then rewrites the segments from the log's
//! start up to where the map stopped against it, and moves `cleaned_to` there. So its memory
//! is the map's, whatever the log's size; and a pass runs only once the dirty part is worth a
//! rewrite (`compaction_dirty_ratio`), which bounds the rewriting to a constant factor of
//! what is appended.
//!
//! What a replay needs of a key: its newest record; while that one leaves columns unchanged
//! (PARTIAL), the records before it back to a whole row; and for a row whose key an update
//! changed (a delete flagged WITH_NEXT, then the new key's PARTIAL create) the old key's
//! records back to a whole row too. A pass makes those old-key records the new key's: it
//! rewrites them under the new key (their values, the events, are untouched), so that later
//! passes compact them with it and no pass needs to remember the key change; the delete stays
//! the old key's, and is kept while its create is (records before it may serve the new row,
//! under the new key, and without the delete a replay would bring the old row back). Deletes
//! expire after `delete_retention` once every sink has read them.

use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::FileLog;
use super::segment::{self, Next, SeekPoint, Segment, SegmentCursor, log_path};
use crate::frame::encode_frame;
use siphon_core::log::{LogRecord, MaintenanceReport, RecordFlags};
use siphon_core::source::now_ms;
use siphon_core::{Error, Result, fsutil};

/// Where compaction keeps `cleaned_to`, beside the segments.
const STATE_FILE: &str = "cleaned-to";

/// Memory an entry of the map's side tables (its moves) costs besides its keys' bytes.
const ENTRY_OVERHEAD: usize = 64;

/// The allocator's share of a key's heap copy besides its bytes.
const KEY_HEAP_OVERHEAD: usize = 16;

/// Bytes a bucket of the key table takes: its `(key, entry)` slot and its control byte.
const BUCKET: usize = std::mem::size_of::<(Vec<u8>, Entry)>() + 1;

/// Keys a hash table of `buckets` buckets holds before it grows (hashbrown's load factor).
fn capacity_of(buckets: usize) -> usize {
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
}

/// Buckets of the key table for a budget, sized once so that it never grows (a growing table
/// holds its old and new buckets at once, and rounds up to a power of two): the most buckets
/// whose table and keys of `key_len` bytes fit in `budget`, at least four.
fn buckets_for(budget: usize, key_len: usize) -> usize {
    let cost = |buckets: usize| {
        buckets * BUCKET + 16 + capacity_of(buckets) * (key_len + KEY_HEAP_OVERHEAD)
    };
    let mut buckets = 4;
    while cost(buckets * 2) <= budget {
        buckets *= 2;
    }
    buckets
}

/// The offset below which the log in `dir` is clean (0 for a log never compacted).
pub(super) fn cleaned_to(dir: &Path) -> Result<u64> {
    let path = dir.join(STATE_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|e| Error::Corrupt {
            path,
            position: 0,
            reason: format!("not an offset: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::Io {
            op: "read",
            path,
            source: e,
        }),
    }
}

/// Removes what a pass that did not finish left (segments being rewritten).
pub(super) fn remove_leftovers(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let path = entry.map_err(Error::io("list", dir))?.path();
        if path.extension().is_some_and(|e| e == "compacting") && path.is_file() {
            fs::remove_file(&path).map_err(Error::io("remove", &path))?;
        }
    }
    Ok(())
}

fn save_cleaned_to(dir: &Path, offset: u64) -> Result<()> {
    fsutil::write_atomic(&dir.join(STATE_FILE), offset.to_string().as_bytes())
}

/// A key's chain as a pass sees it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The key's own records from this offset on are needed (0: all of them — the dirty part
    /// holds no whole row of it, so its chain reaches into the clean part).
    own_from: u64,
    /// Its chain begins with another key's records, moved to it by this key change.
    moved_in: Option<usize>,
}

/// A key change whose new row takes columns from the old key's records: those records (the
/// old key's own from `own_from`, or those moved into it by `moved_in`, before the delete)
/// become the new key's. (Found by the old key, in `KeyMap::moves_of`.)
#[derive(Debug)]
struct Move {
    own_from: u64,
    moved_in: Option<usize>,
    delete: u64,
    new: Vec<u8>,
}

/// What a pass learns of the dirty records, in at most `budget` bytes.
#[derive(Debug)]
struct KeyMap {
    /// Each key's chain, in a table sized at the first key (`buckets_for`) that never grows.
    entries: HashMap<Vec<u8>, Entry>,
    moves: Vec<Move>,
    /// Moves by their old key.
    moves_of: HashMap<Vec<u8>, Vec<usize>>,
    /// Records a pass that did not finish moved (flagged MOVED) and that the dirty part holds
    /// again, by the key they were moved to: they belong to the next move into that key.
    moved_before: HashMap<Vec<u8>, Vec<u64>>,
    /// Such records, by offset, with the move that took them again.
    moved_again: HashMap<u64, usize>,
    /// Bytes taken: the key table's buckets, the keys' copies, the moves.
    used: usize,
    budget: usize,
    /// The last record read is the first half of a key change: its key and offset.
    key_change: Option<(Vec<u8>, u64)>,
}

impl KeyMap {
    fn new(budget: usize) -> KeyMap {
        KeyMap {
            entries: HashMap::new(),
            moves: Vec::new(),
            moves_of: HashMap::new(),
            moved_before: HashMap::new(),
            moved_again: HashMap::new(),
            used: 0,
            budget,
            key_change: None,
        }
    }

    /// Whether `rec` fits (its key may be new, and a key change may add a move and a key).
    fn fits(&self, rec: &LogRecord) -> bool {
        if rec.key.is_empty() {
            return true;
        }
        let (table, room) = match self.entries.capacity() {
            0 => {
                let buckets = buckets_for(self.budget, rec.key.len());
                (buckets * BUCKET, capacity_of(buckets))
            }
            capacity => (0, capacity), // the table is in `used`
        };
        let new_keys = 1 + usize::from(self.key_change.is_some());
        let more = table
            + 2 * (rec.key.len() + KEY_HEAP_OVERHEAD)
            + self
                .key_change
                .as_ref()
                .map_or(0, |(k, _)| 2 * k.len() + rec.key.len() + ENTRY_OVERHEAD);
        self.used + more <= self.budget && self.entries.len() + new_keys <= room
    }

    fn set(&mut self, key: &[u8], entry: Entry) {
        if self.entries.capacity() == 0 {
            let buckets = buckets_for(self.budget, key.len());
            self.entries = HashMap::with_capacity(capacity_of(buckets));
            self.used += buckets * BUCKET;
        }
        match self.entries.get_mut(key) {
            Some(e) => *e = entry,
            None => {
                self.used += key.len() + KEY_HEAP_OVERHEAD;
                self.entries.insert(key.to_vec(), entry);
            }
        }
    }

    /// Takes a dirty record, in offset order.
    fn see(&mut self, rec: &LogRecord) {
        if rec.key.is_empty() {
            return;
        }
        if rec.flags.contains(RecordFlags::MOVED) {
            // Moved by a pass that did not finish: its fate is its move's, not its key's own.
            self.used += 16;
            self.moved_before
                .entry(rec.key.clone())
                .or_default()
                .push(rec.offset);
            return;
        }
        if let Some((old, delete)) = self.key_change.take() {
            if rec.offset == delete + 1 && rec.flags.contains(RecordFlags::PARTIAL) {
                // The new row takes what it left unchanged from the old key's chain before the
                // delete, which becomes its own; the delete stays the old key's: its newest
                // record, which a sink behind must still read.
                let before = self.entries.get(&old).copied().unwrap_or(Entry {
                    own_from: 0,
                    moved_in: None,
                });
                let index = self.moves.len();
                self.used += old.len() + rec.key.len() + ENTRY_OVERHEAD;
                self.moves_of.entry(old.clone()).or_default().push(index);
                for offset in self.moved_before.remove(&rec.key).unwrap_or_default() {
                    self.moved_again.insert(offset, index);
                }
                self.moves.push(Move {
                    own_from: before.own_from,
                    moved_in: before.moved_in,
                    delete,
                    new: rec.key.clone(),
                });
                self.set(
                    &old,
                    Entry {
                        own_from: delete,
                        moved_in: None,
                    },
                );
                self.set(
                    &rec.key,
                    Entry {
                        own_from: rec.offset,
                        moved_in: Some(index),
                    },
                );
                return;
            }
            // Its create is whole: the delete ends the old key like any other.
            self.set(
                &old,
                Entry {
                    own_from: delete,
                    moved_in: None,
                },
            );
        }
        if rec.flags.contains(RecordFlags::WITH_NEXT) {
            self.key_change = Some((rec.key.clone(), rec.offset));
        } else if rec.flags.contains(RecordFlags::PARTIAL) {
            if !self.entries.contains_key(&rec.key) {
                self.set(
                    &rec.key,
                    Entry {
                        own_from: 0,
                        moved_in: None,
                    },
                );
            }
        } else {
            self.set(
                &rec.key,
                Entry {
                    own_from: rec.offset,
                    moved_in: None,
                },
            );
        }
    }

    /// What becomes of a record below the pass's end: dropped (superseded), or kept under
    /// this key (its own, or the key its row moved to), and whether a move brought it there.
    fn fate<'a>(&'a self, rec: &'a LogRecord) -> Fate<'a> {
        let moved = rec.flags.contains(RecordFlags::MOVED);
        if moved
            && self
                .moved_before
                .get(&rec.key)
                .is_some_and(|offsets| offsets.contains(&rec.offset))
        {
            // Moved by a pass that did not finish, its move past where this one reads: kept,
            // for a later pass to judge.
            return Fate::Kept {
                key: &rec.key,
                moved: true,
                chain_start: false,
            };
        }
        let (mut key, mut via): (&[u8], Option<usize>) = (
            &rec.key,
            moved
                .then(|| self.moved_again.get(&rec.offset).copied())
                .flatten(),
        );
        while let Some(&next) = self.moves_of.get(key).and_then(|moves| {
            moves.iter().find(|&&m| {
                let m = &self.moves[m];
                rec.offset < m.delete
                    && match via {
                        None => rec.offset >= m.own_from,
                        Some(from) => m.moved_in == Some(from),
                    }
            })
        }) {
            key = &self.moves[next].new;
            via = Some(next);
        }
        let kept = match (self.entries.get(key), via) {
            // A key this pass did not see: the clean part holds what it needs.
            (None, _) => true,
            (Some(e), None) => rec.offset >= e.own_from,
            (Some(e), Some(from)) => e.moved_in == Some(from),
        };
        let chain_start = match self.entries.get(key) {
            None => true,
            Some(e) => via.is_none() && e.own_from == rec.offset,
        };
        match kept {
            false => Fate::Dropped,
            true => Fate::Kept {
                key,
                moved: via.is_some(),
                chain_start,
            },
        }
    }
}

enum Fate<'a> {
    Dropped,
    Kept {
        key: &'a [u8],
        moved: bool,
        /// Nothing of its key before it is kept (a delete then may expire).
        chain_start: bool,
    },
}

/// One pass, if the dirty part is worth it: `min_all` is the lowest offset a sink has not
/// read, `eligible_end` where the segments a pass may touch end (closed, durable, read by
/// every sink that keeps history).
pub(super) fn pass(
    log: &FileLog,
    min_all: u64,
    eligible_end: u64,
    report: &mut MaintenanceReport,
) -> Result<()> {
    let inner = &log.inner;
    let config = &inner.config;
    let dir = &inner.dir;
    let clean = cleaned_to(dir)?;
    // The segments' extents (not their sparse indexes, which grow with the log).
    let segments: Vec<Extent> = inner
        .segments
        .read()
        .unwrap()
        .iter()
        .map(|s| Extent {
            base: s.base,
            size: s.size,
            end: s.end(),
            clean_at: s.seek_point(clean),
        })
        .collect();
    let limit = inner.durable_end();
    let clean = clean.max(segments.first().map_or(0, |s| s.base));
    if eligible_end <= clean {
        return Ok(());
    }
    if !worth_a_pass(
        &segments,
        clean,
        eligible_end,
        config.compaction_dirty_ratio,
    ) {
        return Ok(());
    }

    let (map, mut pass_end) = key_map(log, &segments, clean, (eligible_end, limit))?;
    // A key change is never split between passes: its delete waits for its create.
    if let Some((_, delete)) = &map.key_change {
        pass_end = pass_end.min(*delete);
    }
    if pass_end <= clean {
        // Nothing to do yet: the dirty part begins with a key change whose create is not
        // eligible yet, or the map cannot hold one record.
        if map.key_change.is_none() {
            tracing::warn!(
                compaction_memory = %config.compaction_memory,
                "compaction: the key map is too small for one record; raise compaction_memory"
            );
        }
        return Ok(());
    }
    if pass_end < eligible_end {
        tracing::info!(
            cleaned_to = pass_end,
            dirty_end = eligible_end,
            "compaction: the key map is full; the next pass goes on from here"
        );
    }

    let delete_horizon = now_ms() - config.delete_retention.0.as_millis() as i64;
    for seg in segments.iter().filter(|s| s.base < pass_end) {
        rewrite(
            log,
            seg,
            |rec| {
                let keeper = Keeper {
                    pass_end,
                    limit,
                    min_all,
                    delete_horizon,
                };
                keeper.fate(rec, &map)
            },
            report,
        )?;
    }
    save_cleaned_to(dir, pass_end)
}

/// Whether the part of the log below `eligible_end` past `clean` is dirty enough for a pass:
/// its bytes at least `ratio` of those below `eligible_end`.
fn worth_a_pass(segments: &[Extent], clean: u64, eligible_end: u64, ratio: f64) -> bool {
    let (mut total, mut dirty) = (0u64, 0u64);
    for pair in segments.windows(2).filter(|p| p[1].base <= eligible_end) {
        let (seg, end) = (&pair[0], pair[1].base);
        total += seg.size;
        if seg.base >= clean {
            dirty += seg.size;
        } else if end > clean {
            dirty += seg.size * (end - clean) / (end - seg.base).max(1);
        }
    }
    total > 0 && (dirty as f64) >= ratio * total as f64
}

/// The key map of the dirty records (from `clean`, below `eligible_end`; those durable, below
/// `limit`), as far as it holds them, and where it stopped holding them (`eligible_end` if it
/// holds them all).
fn key_map(
    log: &FileLog,
    segments: &[Extent],
    clean: u64,
    (eligible_end, limit): (u64, u64),
) -> Result<(KeyMap, u64)> {
    let config = &log.inner.config;
    let mut map = KeyMap::new(config.compaction_memory.0 as usize);
    for seg in segments
        .iter()
        .filter(|s| s.end > clean && s.base < eligible_end)
    {
        let from = if seg.base < clean {
            seg.clean_at
        } else {
            seg.start()
        };
        let mut cursor = SegmentCursor::open(log_path(&log.inner.dir, seg.base), from)?;
        while let Next::Record(rec) = cursor.next(eligible_end.min(limit))? {
            if rec.offset < clean {
                continue;
            }
            if !map.fits(&rec) {
                return Ok((map, rec.offset));
            }
            map.see(&rec);
        }
    }
    Ok((map, eligible_end))
}

/// What a pass keeps of the records it rewrites.
struct Keeper {
    /// Records from here on are past the pass.
    pass_end: u64,
    /// The log's end: its last record stays as it is.
    limit: u64,
    /// The lowest offset a sink has not read.
    min_all: u64,
    /// A delete older than this (ms since the epoch) read by every sink may expire.
    delete_horizon: i64,
}

impl Keeper {
    /// A record's key and flags after the pass, or `None` where the pass drops it.
    fn fate(&self, rec: &LogRecord, map: &KeyMap) -> Kept {
        if rec.offset >= self.pass_end || rec.key.is_empty() || rec.offset + 1 == self.limit {
            // Past the pass, keyless (never compacted), or the log's last record, which a
            // source resumes from: as it is.
            return Some((rec.key.clone(), rec.flags));
        }
        let Fate::Kept {
            key,
            moved,
            chain_start,
        } = map.fate(rec)
        else {
            return None;
        };
        let tombstone = rec.flags.contains(RecordFlags::TOMBSTONE);
        let expired = tombstone
            && chain_start
            && !moved
            && rec.offset < self.min_all
            && rec.timestamp_ms < self.delete_horizon;
        if expired {
            return None;
        }
        // A compacted stretch no longer holds whole transactions: every record stands
        // alone, but for the first half of a key change, which goes with the next.
        let mut flags = if rec.flags.contains(RecordFlags::WITH_NEXT) {
            rec.flags
        } else {
            rec.flags.with(RecordFlags::TXN_END)
        };
        if moved {
            flags = flags.with(RecordFlags::MOVED);
        }
        Some((key.to_vec(), flags))
    }
}

/// Where a segment is, as a pass needs to know: not its sparse index.
#[derive(Debug, Clone, Copy)]
struct Extent {
    base: u64,
    size: u64,
    /// Offset after its last record.
    end: u64,
    /// Where to read from for the first record at or past `cleaned_to`.
    clean_at: SeekPoint,
}

impl Extent {
    /// The start of its file.
    fn start(&self) -> SeekPoint {
        SeekPoint {
            position: 0,
            offset: self.base,
        }
    }
}

/// What becomes of a record in a rewrite: kept with this key and these flags, or gone.
type Kept = Option<(Vec<u8>, RecordFlags)>;

#[cfg(test)]
thread_local! {
    /// Tests cut a pass short: the rewrite after this many fails.
    pub(super) static FAIL_REWRITE_AFTER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Rewrites a closed segment with what `keep` says of each record (its key and flags, or
/// gone), streaming: a record at a time is in memory. A segment left as it was is not
/// rewritten.
fn rewrite(
    log: &FileLog,
    seg: &Extent,
    mut keep: impl FnMut(&LogRecord) -> Kept,
    report: &mut MaintenanceReport,
) -> Result<()> {
    let inner = &log.inner;
    #[cfg(test)]
    if let Some(n) = FAIL_REWRITE_AFTER.get() {
        if n == 0 {
            return Err(Error::Io {
                op: "create",
                path: inner.dir.clone(),
                source: std::io::Error::other("a pass cut short by the test"),
            });
        }
        FAIL_REWRITE_AFTER.set(Some(n - 1));
    }
    let path = log_path(&inner.dir, seg.base);
    let mut staged_path = path.as_os_str().to_owned();
    staged_path.push(".compacting"); // removed on open if a pass does not finish
    let staged_path = std::path::PathBuf::from(staged_path);
    let file = fs::File::create(&staged_path).map_err(Error::io("create", &staged_path))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut compacted = Segment::empty(seg.base);
    let mut frame = Vec::new();
    let (mut dropped, mut changed) = (0u64, false);
    let interval = inner.config.index_interval.0;
    let mut cursor = SegmentCursor::open(path.clone(), seg.start())?;
    let limit = inner.durable_end();
    let mut emit = |rec: &LogRecord, kept: Kept| -> Result<()> {
        let Some((key, flags)) = kept else {
            dropped += 1;
            return Ok(());
        };
        changed |= key != rec.key || flags != rec.flags;
        frame.clear();
        encode_frame(
            &mut frame,
            rec.offset,
            rec.timestamp_ms,
            flags,
            &key,
            &rec.value,
        );
        out.write_all(&frame)
            .map_err(Error::io("write", &staged_path))?;
        let position = compacted.size;
        compacted.note(
            rec.offset,
            rec.timestamp_ms,
            position,
            frame.len() as u64,
            interval,
        );
        Ok(())
    };
    // The delete of a key change waits for its create: while the create is kept and takes
    // the old row's columns (PARTIAL), the records before the delete may serve it, under the
    // new key, and without the delete a replay would bring the old row back. So it stays
    // then, whatever its own key says of it.
    let mut key_change: Option<(LogRecord, Kept)> = None;
    while let Next::Record(rec) = cursor.next(limit)? {
        let kept = keep(&rec);
        if let Some((delete, delete_kept)) = key_change.take() {
            let carried = rec.offset == delete.offset + 1
                && rec.flags.contains(RecordFlags::PARTIAL)
                && kept.is_some();
            let delete_kept = match delete_kept {
                None if carried => Some((delete.key.clone(), delete.flags)),
                other => other,
            };
            emit(&delete, delete_kept)?;
        }
        if rec.flags.contains(RecordFlags::WITH_NEXT) {
            key_change = Some((rec, kept));
        } else {
            emit(&rec, kept)?;
        }
    }
    // Its create begins the next segment: kept, as it may be carried.
    if let Some((delete, delete_kept)) = key_change {
        let kept = delete_kept.or_else(|| Some((delete.key.clone(), delete.flags)));
        emit(&delete, kept)?;
    }
    if dropped == 0 && !changed {
        drop(out);
        let _ = fs::remove_file(&staged_path);
        return Ok(());
    }
    let file = out
        .into_inner()
        .map_err(|e| Error::io("write", &staged_path)(e.into_error()))?;
    file.sync_all().map_err(Error::io("fsync", &staged_path))?;
    {
        // Readers open a segment's file and take a position from its index under this lock:
        // they get the old file with the old index or the new with the new.
        let mut live = inner.segments.write().unwrap();
        // The old index first: the new file may have the old one's size (a record moved
        // under a longer key), so a stale index could pass for the new file's.
        match fs::remove_file(segment::index_path(&inner.dir, seg.base)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(
                    "remove",
                    segment::index_path(&inner.dir, seg.base),
                )(e));
            }
            _ => {}
        }
        fsutil::commit_staged(&staged_path, &path)?;
        if let Some(s) = live.iter_mut().find(|s| s.base == seg.base) {
            *s = compacted.clone();
        }
    }
    fsutil::sync_dir(&inner.dir)?;
    segment::write_index(&inner.dir, &compacted)?;
    report.records_compacted += dropped;
    report.bytes_freed += seg.size.saturating_sub(compacted.size);
    Ok(())
}
