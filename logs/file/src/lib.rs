//! The embedded file log (`kind = "file"`, the default): segment files of length-prefixed,
//! CRC32C-checked records.
//!
//! ```text
//! <dir>/LOCK                          held by the one process that writes
//! <dir>/00000000000000000000.log      records, each framed (see `frame`)
//! <dir>/00000000000000000000.idx      sparse index, written when the segment is closed
//! <dir>/00000000000000052113.log      the next segment starts at its first offset
//!
//! <dir>/ID                            the log's identity, made with the log
//! <dir>/schemas                       the table schemas its records refer to
//! <dir>/cleaned-to                    where compaction has cleaned the log to
//! <dir>/durable-end                   the writer's durable end, for readers in other processes
//! ```
//!
//! On open the last segment is scanned and cut at the first torn or damaged record, which can
//! only be one that was never fsynced (a closed segment is fsynced before the next opens).

mod compact;
mod config;
mod frame;
mod maintain;
mod reader;
mod schemas;
mod segment;

use std::fs::{self, File};
use std::io::IoSlice;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;

pub use config::{FileLogConfig, FsyncPolicy};
pub use reader::FileLogReader;
pub use schemas::SchemaRegistry;

use siphon_core::kind::{Kind, LogContext, LogKind};
use siphon_core::log::{
    ChangeLog, Consumer, LogId, LogPromises, LogReader, LogRecord, LogStats, MaintenanceReport,
    NewRecord,
};
use siphon_core::schema::SchemaStore;
use siphon_core::source::now_ms;
use siphon_core::{Error, Result, fsutil};

use self::frame::{FRAME_FIXED, check_size, encode_frame, frame_header};
use self::segment::{ScanEnd, Segment, SegmentCursor, SegmentWriter, index_path, log_path};

/// The embedded file log. Cheap to clone; all clones share one log.
#[derive(Clone, Debug)]
pub struct FileLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    id: LogId,
    schemas: SchemaRegistry,
    config: FileLogConfig,
    /// Closed segments and, last, the active one.
    segments: RwLock<Vec<Segment>>,
    /// `None` when opened read-only.
    writer: Option<Mutex<Writer>>,
    /// Offset after the last durable record.
    durable: watch::Sender<u64>,
    /// Where the writer tells other processes the durable end (`None` read-only).
    durable_mark: Option<File>,
    /// Serializes retention and compaction.
    maintenance: Mutex<()>,
    /// Fsyncs of segment files since open.
    fsyncs: AtomicU64,
}

#[derive(Debug)]
struct Writer {
    file: SegmentWriter,
    next_offset: u64,
    last_timestamp_ms: i64,
    buf: Vec<u8>,
    /// Offset after the last record written but not yet fsynced (with `fsync != batch`).
    unsynced_end: Option<u64>,
    /// An fsync failed: what was written may be gone from the disk although it reads back,
    /// so this writer takes nothing more (a restart recovers the log from what is durable).
    failed: Option<String>,
    last_sync: Instant,
    _lock: File,
}

impl FileLog {
    /// Opens (or creates) the log in `dir` for writing, recovering from a crash: the last
    /// segment is cut at its first torn or damaged record. Fails if another process has it.
    pub fn open(dir: impl AsRef<Path>, config: FileLogConfig) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
        let lock_path = dir.join("LOCK");
        let lock = File::create(&lock_path).map_err(Error::io("create", &lock_path))?;
        lock.try_lock().map_err(|_| {
            Error::Config(format!(
                "the change log in {} is in use by another siphon process (stop it, or use its \
                 admin API)",
                dir.display()
            ))
        })?;
        let mut segments = load_segments(&dir, &config, true)?;
        let id = match read_id(&dir)? {
            Some(id) => id,
            None => {
                let id = LogId::random();
                fsutil::write_atomic(&dir.join(ID_FILE), format!("{id}\n").as_bytes())?;
                if !segments.is_empty() {
                    tracing::warn!(log = %dir.display(), %id, "the change log had no identity (an older siphon made it): it has one now");
                }
                id
            }
        };
        if segments.is_empty() {
            segments.push(Segment::empty(0));
        }
        let active = segments.last().unwrap();
        let file = SegmentWriter::open(log_path(&dir, active.base), active.size)?;
        // What the last run wrote may never have been fsynced (it crashed first): make it
        // durable before a reader sees it, or a crash of the machine could take back records
        // a sink has applied.
        let mut fsyncs = 0;
        if active.size > 0 && config.fsync != FsyncPolicy::Never {
            file.sync()?;
            fsyncs += 1;
        }
        fsutil::sync_dir(&dir)?;
        let end = active.end();
        let writer = Writer {
            file,
            next_offset: end,
            last_timestamp_ms: active.last_timestamp_ms,
            buf: Vec::with_capacity(1 << 20),
            unsynced_end: None,
            failed: None,
            last_sync: Instant::now(),
            _lock: lock,
        };
        let schemas = SchemaRegistry::open(&dir)?;
        let mark_path = dir.join(DURABLE_MARK_FILE);
        let durable_mark = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&mark_path)
            .map_err(Error::io("open", &mark_path))?;
        write_mark(&durable_mark, end);
        let log = FileLog {
            inner: Arc::new(Inner {
                dir,
                id,
                schemas,
                config,
                segments: RwLock::new(segments),
                writer: Some(Mutex::new(writer)),
                durable: watch::Sender::new(end),
                durable_mark: Some(durable_mark),
                maintenance: Mutex::default(),
                fsyncs: AtomicU64::new(fsyncs),
            }),
        };
        if log.inner.config.fsync == FsyncPolicy::Interval {
            spawn_flusher(
                Arc::downgrade(&log.inner),
                log.inner.config.fsync_interval.0,
            );
        }
        Ok(log)
    }

    /// Opens the log of a running (or stopped) daemon for reading only: nothing is changed on
    /// disk; [`FileLog::refresh`] picks up what the writer appended since, as readers do when
    /// they wait.
    pub fn open_read_only(dir: impl AsRef<Path>, config: FileLogConfig) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::Config(format!("no change log in {}", dir.display())));
        }
        let segments = load_segments(&dir, &config, false)?;
        let end = durable_end_of(&dir, &segments);
        let id = read_id(&dir)?.ok_or_else(|| {
            Error::Config(format!(
                "the change log in {} has no identity yet (an older siphon made it); start the daemon once",
                dir.display()
            ))
        })?;
        let schemas = SchemaRegistry::open_read_only(&dir)?;
        Ok(FileLog {
            inner: Arc::new(Inner {
                dir,
                id,
                schemas,
                config,
                segments: RwLock::new(segments),
                writer: None,
                durable: watch::Sender::new(end),
                durable_mark: None,
                maintenance: Mutex::default(),
                fsyncs: AtomicU64::new(0),
            }),
        })
    }

    /// Whether it was opened read-only.
    fn is_read_only(&self) -> bool {
        self.inner.writer.is_none()
    }

    /// Read-only logs: rescans for records the writing process appended since.
    pub fn refresh(&self) -> Result<()> {
        if !self.is_read_only() {
            return Ok(());
        }
        let segments = load_segments(&self.inner.dir, &self.inner.config, false)?;
        let end = durable_end_of(&self.inner.dir, &segments);
        *self.inner.segments.write().unwrap() = segments;
        self.inner
            .durable
            .send_if_modified(|e| std::mem::replace(e, end) != end);
        Ok(())
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Appends, blocking the calling thread (see [`ChangeLog::append`]).
    pub fn append_blocking(&self, records: &[NewRecord]) -> Result<Range<u64>> {
        self.append_with(records, true)
    }

    /// Appends without making the records durable yet, blocking the calling thread (see
    /// [`ChangeLog::append_unsynced`]).
    pub fn append_unsynced_blocking(&self, records: &[NewRecord]) -> Result<Range<u64>> {
        self.append_with(records, false)
    }

    /// Writes `records`; with `sync`, makes them durable as the fsync policy says (`batch`:
    /// now; `interval`: by the flusher, see [`ChangeLog::append`]; `never`: not at all).
    fn append_with(&self, records: &[NewRecord], sync: bool) -> Result<Range<u64>> {
        let inner = &self.inner;
        for rec in records {
            check_size(&rec.key, &rec.value)?;
        }
        let mut w = inner.writer.as_ref().ok_or_else(read_only)?.lock().unwrap();
        if let Some(failed) = &w.failed {
            return Err(Error::permanent(format!(
                "the change log stopped taking records after a failure ({failed}); restart siphon"
            )));
        }
        let first = w.next_offset;
        let mut pending: Vec<(u64, i64, u64, u64)> = Vec::with_capacity(records.len());
        let mut active_size = inner.segments.read().unwrap().last().map_or(0, |s| s.size);
        let timestamp_ms = now_ms().max(w.last_timestamp_ms);
        let mut chunk_start = 0;
        for (i, rec) in records.iter().enumerate() {
            let offset = w.next_offset;
            let len = (FRAME_FIXED + rec.key.len() + rec.value.len()) as u64;
            if active_size > 0 && active_size + len > inner.config.segment_size.0 {
                // Close the active segment before this record, which starts the next one.
                inner.write_records(
                    &mut w,
                    &records[chunk_start..i],
                    timestamp_ms,
                    &mut pending,
                )?;
                inner.roll(&mut w, offset)?;
                chunk_start = i;
                active_size = 0;
            }
            pending.push((offset, timestamp_ms, active_size, len));
            active_size += len;
            w.next_offset += 1;
        }
        inner.write_records(&mut w, &records[chunk_start..], timestamp_ms, &mut pending)?;
        w.last_timestamp_ms = timestamp_ms;
        let end = w.next_offset;
        match inner.config.fsync {
            FsyncPolicy::Batch if sync => inner.sync_through(&mut w, end)?,
            FsyncPolicy::Batch => w.unsynced_end = Some(end),
            FsyncPolicy::Never => inner.publish(end),
            FsyncPolicy::Interval => {
                w.unsynced_end = Some(end);
                if w.last_sync.elapsed() >= inner.config.fsync_interval.0 {
                    inner.sync(&mut w)?;
                }
            }
        }
        Ok(first..end)
    }

    /// Fsyncs what is appended, blocking the calling thread; returns the durable end.
    #[cfg(test)]
    pub(crate) fn flush_blocking(&self) -> Result<u64> {
        if let Some(w) = &self.inner.writer {
            let mut w = w.lock().unwrap();
            self.inner.sync(&mut w)?;
        }
        Ok(self.inner.durable_end())
    }

    /// A reader from `from`, with its concrete type.
    pub fn file_reader(&self, from: u64) -> Result<FileLogReader> {
        let start = self.inner.start_offset();
        if from < start {
            return Err(Error::OffsetOutOfRange {
                requested: from,
                start,
                end: self.inner.durable_end(),
            });
        }
        Ok(FileLogReader::new(self.clone(), from))
    }

    /// The last durable record, blocking the calling thread.
    pub fn last_record_blocking(&self) -> Result<Option<LogRecord>> {
        // What this process wrote counts, durable or not yet: the next append makes it so
        // (and a crash's recovery fsyncs the tail it finds).
        let limit = match &self.inner.writer {
            Some(w) => w.lock().unwrap().next_offset,
            None => self.inner.durable_end(),
        };
        if limit == 0 {
            return Ok(None);
        }
        // Compaction keeps the last durable record, so it is at `limit - 1`.
        let Some((_, mut cursor)) = self.inner.cursor_at(limit - 1)? else {
            return Ok(None);
        };
        let mut found = None;
        while let segment::Next::Record(rec) = cursor.next(limit)? {
            found = Some(rec);
        }
        Ok(found)
    }

    /// Retention and compaction, blocking the calling thread (see [`ChangeLog::maintain`]).
    pub fn maintain_blocking(&self, consumers: &[Consumer]) -> Result<MaintenanceReport> {
        maintain::run(self, consumers)
    }
}

/// `kind = "file"`, the default log.
#[derive(Debug)]
pub struct FileLogKind;

impl Kind for FileLogKind {
    const NAME: &'static str = "file";
    type Config = FileLogConfig;

    fn validate(config: &FileLogConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl LogKind for FileLogKind {
    fn open(config: &FileLogConfig, ctx: &LogContext) -> Result<Arc<dyn ChangeLog>> {
        Ok(Arc::new(FileLog::open(&ctx.dir, config.clone())?))
    }

    fn open_existing(
        config: &FileLogConfig,
        ctx: &LogContext,
    ) -> Result<Option<Arc<dyn ChangeLog>>> {
        if !ctx.dir.is_dir() {
            return Ok(None);
        }
        Ok(Some(Arc::new(FileLog::open_read_only(
            &ctx.dir,
            config.clone(),
        )?)))
    }

    fn retention(config: &FileLogConfig) -> String {
        let mut kept = Vec::new();
        if let Some(age) = &config.retention {
            kept.push(format!("{age} once read"));
        }
        if let Some(size) = &config.retention_size {
            kept.push(format!("{size} once read"));
        }
        if let Some(cap) = &config.max_size {
            kept.push(format!("at most {cap}"));
        }
        if kept.is_empty() {
            kept.push("every segment".to_owned());
        }
        if config.compaction {
            kept.push("compacted to each key's newest record".to_owned());
        }
        kept.join(", ")
    }
}

/// The file holding the log's identity.
const ID_FILE: &str = "ID";

/// The file where the writer keeps its durable end for readers in other processes: the
/// segments may hold records past it that are written but not yet fsynced, which a reader
/// must not see. Written, not fsynced: after a machine's crash the writer's recovery makes
/// the tail durable and writes it again.
const DURABLE_MARK_FILE: &str = "durable-end";

/// Tells readers in other processes the durable end (a failure only leaves them behind).
fn write_mark(mark: &File, end: u64) {
    use std::os::unix::fs::FileExt;
    if let Err(e) = mark.write_at(&end.to_le_bytes(), 0) {
        tracing::warn!(error = %e, "writing the change log's durable end for readers");
    }
}

/// What a reader in another process may read of `segments`: up to the writer's durable end,
/// or all of them where no writer ever said (a log an older siphon wrote).
fn durable_end_of(dir: &Path, segments: &[Segment]) -> u64 {
    let end = segments.last().map_or(0, Segment::end);
    match fs::read(dir.join(DURABLE_MARK_FILE)) {
        Ok(bytes) if bytes.len() == 8 => {
            end.min(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        }
        _ => end,
    }
}

/// The log's identity, if it has one yet. A damaged identity is an error: taking a new one
/// would make every store rebuild itself.
fn read_id(dir: &Path) -> Result<Option<LogId>> {
    let path = dir.join(ID_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => LogId::parse(&text).map(Some).ok_or_else(|| Error::Corrupt {
            path,
            position: 0,
            reason: "not a log identity; delete the file to give the log a new one (every \
                     sink's store is then rebuilt)"
                .into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io {
            op: "read",
            path,
            source: e,
        }),
    }
}

fn read_only() -> Error {
    Error::Config("this change log was opened read-only".into())
}

/// Lists and loads the segments of `dir`: index files for closed segments, a scan of the last
/// one. With `repair`, a damaged tail of the last segment is cut off.
fn load_segments(dir: &Path, config: &FileLogConfig, repair: bool) -> Result<Vec<Segment>> {
    if repair {
        compact::remove_leftovers(dir)?;
    }
    let bases = segment::list_bases(dir)?;
    let interval = config.index_interval.0;
    let mut segments = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let path = log_path(dir, base);
        let file_len = fs::metadata(&path).map_err(Error::io("stat", &path))?.len();
        let is_last = i + 1 == bases.len();
        if !is_last && let Some(seg) = segment::read_index(dir, base, file_len) {
            segments.push(seg);
            continue;
        }
        let mut seg = Segment::empty(base);
        match segment::scan(&path, &mut seg, 0, interval)? {
            ScanEnd::Clean => {}
            ScanEnd::Damaged {
                position,
                offset,
                reason,
            } if is_last => {
                if let Some((intact, at)) =
                    segment::first_record_after(&path, position, seg.last_offset)?
                {
                    return Err(Error::DamagedRecord {
                        offset,
                        path,
                        position,
                        reason: format!(
                            "{reason}; whole records follow it (record {intact} at byte {at}), so \
                             it is not a write a crash cut short, and recovery does not cut the \
                             log there"
                        ),
                    });
                }
                if repair {
                    tracing::warn!(
                        segment = %path.display(), position, reason,
                        cut = file_len - position,
                        "recovering the change log: cutting a torn tail that was never fsynced"
                    );
                    let f = fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(Error::io("open", &path))?;
                    f.set_len(position).map_err(Error::io("truncate", &path))?;
                    f.sync_all().map_err(Error::io("fsync", &path))?;
                }
            }
            ScanEnd::Damaged {
                position,
                offset,
                reason,
            } => {
                return Err(Error::DamagedRecord {
                    offset,
                    path,
                    position,
                    reason,
                });
            }
        }
        if !is_last && repair {
            segment::write_index(dir, &seg)?;
        }
        segments.push(seg);
    }
    Ok(segments)
}

fn spawn_flusher(log: Weak<Inner>, every: Duration) {
    std::thread::Builder::new()
        .name("siphon-log-fsync".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(inner) = log.upgrade() else { return };
                let Some(writer) = &inner.writer else { return };
                let mut w = writer.lock().unwrap();
                if let Err(e) = inner.sync(&mut w) {
                    tracing::error!(error = %e, "change log fsync failed");
                }
            }
        })
        .expect("spawning the log's fsync thread");
}

impl Inner {
    /// A cursor in the segment holding `offset`, positioned at or before it, with the
    /// segment's base; `None` if no segment holds it. The file is opened under the segments'
    /// lock, which compaction holds while it swaps a segment's file and index, so that the
    /// position always belongs to the file opened.
    fn cursor_at(&self, offset: u64) -> Result<Option<(u64, SegmentCursor)>> {
        let segments = self.segments.read().unwrap();
        let start = segments.first().map_or(0, |s| s.base);
        if offset < start {
            return Err(Error::OffsetOutOfRange {
                requested: offset,
                start,
                end: self.durable_end(),
            });
        }
        let i = segments.partition_point(|s| s.base <= offset);
        let Some(seg) = i.checked_sub(1).map(|i| &segments[i]) else {
            return Ok(None);
        };
        let cursor = SegmentCursor::open(log_path(&self.dir, seg.base), seg.seek_point(offset))?;
        Ok(Some((seg.base, cursor)))
    }

    fn start_offset(&self) -> u64 {
        self.segments.read().unwrap().first().map_or(0, |s| s.base)
    }

    fn durable_end(&self) -> u64 {
        *self.durable.borrow()
    }

    fn publish(&self, end: u64) {
        let advanced = self.durable.send_if_modified(|e| {
            let advanced = end > *e;
            *e = (*e).max(end);
            advanced
        });
        if advanced && let Some(mark) = &self.durable_mark {
            write_mark(mark, end);
        }
    }

    fn sync_through(&self, w: &mut Writer, end: u64) -> Result<()> {
        w.unsynced_end = Some(end);
        self.sync(w)
    }

    fn sync(&self, w: &mut Writer) -> Result<()> {
        if let Some(end) = w.unsynced_end.take() {
            // After a failed fsync the kernel may have dropped the pages: nothing written
            // since the last good one may be called durable, ever.
            if let Err(e) = w.file.sync() {
                w.failed = Some(format!("a failed fsync: {e}"));
                return Err(e);
            }
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            self.publish(end);
        }
        w.last_sync = Instant::now();
        Ok(())
    }

    /// Writes `records` (whose offsets and positions `pending` holds) to the active segment in
    /// one vectored write, and notes them in its metadata. Small records are copied into one
    /// buffer; large values are written from where they are, without a copy.
    fn write_records(
        &self,
        w: &mut Writer,
        records: &[NewRecord],
        timestamp_ms: i64,
        pending: &mut Vec<(u64, i64, u64, u64)>,
    ) -> Result<()> {
        enum Part<'a> {
            Buffered(Range<usize>),
            Borrowed(&'a [u8]),
        }
        const COPY_BELOW: usize = 1024;
        let mut buf = std::mem::take(&mut w.buf);
        buf.clear();
        let mut parts = Vec::new();
        let mut run_start = 0;
        for (rec, (offset, ..)) in records.iter().zip(pending.iter()) {
            if rec.value.len() < COPY_BELOW {
                encode_frame(
                    &mut buf,
                    *offset,
                    timestamp_ms,
                    rec.flags,
                    &rec.key,
                    &rec.value,
                );
            } else {
                let header = frame_header(*offset, timestamp_ms, rec.flags, &rec.key, &rec.value);
                buf.extend_from_slice(&header);
                buf.extend_from_slice(&rec.key);
                parts.push(Part::Buffered(run_start..buf.len()));
                parts.push(Part::Borrowed(&rec.value));
                run_start = buf.len();
            }
        }
        parts.push(Part::Buffered(run_start..buf.len()));
        let mut slices: Vec<IoSlice<'_>> = parts
            .iter()
            .map(|p| match p {
                Part::Buffered(r) => IoSlice::new(&buf[r.clone()]),
                Part::Borrowed(b) => IoSlice::new(b),
            })
            .filter(|s| !s.is_empty())
            .collect();
        let written = w.file.write_all_vectored(&mut slices);
        drop(slices);
        w.buf = buf;
        if let Err(e) = written {
            // A full disk, say: the records of this write were not taken. The segment loses
            // the bytes it got of them and the offsets go back, so that the next append
            // writes whole records at those offsets (recovery would otherwise cut the segment
            // there, and every record after it).
            self.cut_back(w, pending.first().map(|p| p.0));
            return Err(e);
        }
        let interval = self.config.index_interval.0;
        let mut segments = self.segments.write().unwrap();
        let active = segments
            .last_mut()
            .expect("a writable log has an active segment");
        for (offset, ts, position, len) in pending.drain(..) {
            active.note(offset, ts, position, len, interval);
        }
        Ok(())
    }

    /// Takes back a write that failed: the active segment is cut to the records noted in it,
    /// and the next offset is `first_unwritten`. Where the cut itself fails, the writer takes
    /// nothing more (a restart recovers the log).
    fn cut_back(&self, w: &mut Writer, first_unwritten: Option<u64>) {
        let size = self.segments.read().unwrap().last().map_or(0, |s| s.size);
        if let Err(e) = w.file.file.set_len(size) {
            w.failed = Some(format!("cutting back a failed write: {e}"));
        }
        if let Some(offset) = first_unwritten {
            w.next_offset = offset;
        }
    }

    /// Closes the active segment (fsync, index file) and starts a new one at `base`.
    fn roll(&self, w: &mut Writer, base: u64) -> Result<()> {
        // Under `fsync = "never"` the machine's crash is out of scope, as documented.
        if self.config.fsync != FsyncPolicy::Never
            && let Err(e) = w.file.sync()
        {
            w.failed = Some(format!("a failed fsync: {e}"));
            return Err(e);
        }
        let closed = self
            .segments
            .read()
            .unwrap()
            .last()
            .cloned()
            .expect("active segment");
        if let Err(e) = segment::write_index(&self.dir, &closed) {
            // An index only saves a scan: without one the segment is scanned on open.
            tracing::warn!(segment = closed.base, error = %e, "could not write a segment's index");
            let _ = fs::remove_file(index_path(&self.dir, closed.base));
        }
        // The new file is made durable before the writer switches to it: a failure leaves the
        // writer on the full segment, which the next append tries to close again.
        let next = SegmentWriter::open(log_path(&self.dir, base), 0)?;
        if self.config.fsync != FsyncPolicy::Never {
            fsutil::sync_dir(&self.dir)?;
        }
        w.file = next;
        if self.config.fsync != FsyncPolicy::Never {
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        // Everything before the new segment is durable now, the records this very append
        // wrote before the roll included: readers and compaction may see all of a closed
        // segment.
        w.unsynced_end = None;
        self.publish(base);
        self.segments.write().unwrap().push(Segment::empty(base));
        Ok(())
    }
}

#[async_trait]
impl ChangeLog for FileLog {
    async fn append(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        let log = self.clone();
        let range = blocking(move || log.append_blocking(&records)).await?;
        if self.inner.config.fsync == FsyncPolicy::Interval {
            // The flusher's next fsync makes them durable, together with whatever else was
            // appended meanwhile.
            let end = range.end;
            self.inner
                .durable
                .subscribe()
                .wait_for(|durable| *durable >= end)
                .await
                .map_err(|_| Error::Cancelled)?;
        }
        Ok(range)
    }

    async fn append_unsynced(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        let log = self.clone();
        blocking(move || log.append_unsynced_blocking(&records)).await
    }

    fn schemas(&self) -> &dyn SchemaStore {
        &self.inner.schemas
    }

    fn id(&self) -> &LogId {
        &self.inner.id
    }

    fn start_offset(&self) -> u64 {
        self.inner.start_offset()
    }

    fn durable_end(&self) -> u64 {
        self.inner.durable_end()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.durable.subscribe()
    }

    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>> {
        Ok(Box::new(self.file_reader(from)?))
    }

    async fn last_record(&self) -> Result<Option<LogRecord>> {
        let log = self.clone();
        blocking(move || log.last_record_blocking()).await
    }

    async fn maintain(&self, consumers: &[Consumer]) -> Result<MaintenanceReport> {
        let log = self.clone();
        let consumers = consumers.to_vec();
        blocking(move || log.maintain_blocking(&consumers)).await
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        Some(self.inner.config.maintenance_interval.0)
    }

    fn promises(&self) -> LogPromises {
        LogPromises {
            total_order: true,
            dense_offsets: true,
            transaction_marks: true,
        }
    }

    fn stats(&self) -> LogStats {
        let segments = self.inner.segments.read().unwrap();
        LogStats {
            start_offset: segments.first().map_or(0, |s| s.base),
            end_offset: self.inner.durable_end(),
            size_bytes: segments.iter().map(|s| s.size).sum(),
            segments: segments.len(),
            fsyncs: self.inner.fsyncs.load(Ordering::Relaxed),
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::permanent(format!("log task failed: {e}")))?
}

#[cfg(test)]
mod tests;
