//! One segment file: its metadata, sparse index, scanning and the index file written when the
//! segment is closed.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::frame::{FRAME_HEADER, FrameError, FrameReader, body_offset, framed_len, parse_header};
use siphon_core::log::LogRecord;
use siphon_core::{Error, Result};

const INDEX_MAGIC: &[u8; 8] = b"SIPHIDX1";

/// A segment's metadata and sparse index: `(offset, byte position)` every `index_interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset in the file name; every record in the file has this offset or a later one.
    pub base: u64,
    /// Bytes of valid records.
    pub size: u64,
    /// Offset of the last record, if any.
    pub last_offset: Option<u64>,
    /// Append time of the last record.
    pub last_timestamp_ms: i64,
    /// Number of records.
    pub records: u64,
    /// Sparse index, ascending.
    pub index: Vec<(u64, u64)>,
}

impl Segment {
    pub fn empty(base: u64) -> Self {
        Segment {
            base,
            size: 0,
            last_offset: None,
            last_timestamp_ms: 0,
            records: 0,
            index: Vec::new(),
        }
    }

    /// Offset after the last record.
    pub fn end(&self) -> u64 {
        self.last_offset.map_or(self.base, |o| o + 1)
    }

    /// Where to scan from for `offset`: an indexed record at or before it, or the start.
    pub fn seek_point(&self, offset: u64) -> SeekPoint {
        match self.index.partition_point(|(o, _)| *o <= offset) {
            0 => SeekPoint {
                position: 0,
                offset: self.base,
            },
            i => SeekPoint {
                position: self.index[i - 1].1,
                offset: self.index[i - 1].0,
            },
        }
    }

    /// Adds a record written at `position` to the metadata.
    pub fn note(
        &mut self,
        record_offset: u64,
        timestamp_ms: i64,
        position: u64,
        len: u64,
        interval: u64,
    ) {
        let last_indexed = self.index.last().map(|(_, p)| *p);
        if last_indexed.is_none_or(|p| position >= p + interval) {
            self.index.push((record_offset, position));
        }
        self.size = position + len;
        self.last_offset = Some(record_offset);
        self.last_timestamp_ms = timestamp_ms;
        self.records += 1;
    }
}

pub(crate) fn log_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

pub(crate) fn index_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.idx"))
}

/// Bases of the segment files in `dir`, ascending.
pub(crate) fn list_bases(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let name = entry.map_err(Error::io("list", dir))?.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".log")
            && let Ok(base) = stem.parse::<u64>()
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// A byte position of a segment file on a record boundary, and the offset of the record there
/// (at least: the first offset a record there can have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeekPoint {
    pub position: u64,
    pub offset: u64,
}

/// How a scan ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// At the end of the file, on a record boundary.
    Clean,
    /// At a torn or damaged record at this byte position, which would have had `offset`.
    Damaged {
        position: u64,
        offset: u64,
        reason: String,
    },
}

/// Reads a segment from byte `from` (a record boundary, with `seg` describing what is before
/// it) to its end, completing `seg`. Stops at the first torn or damaged record.
pub(crate) fn scan(path: &Path, seg: &mut Segment, from: u64, interval: u64) -> Result<ScanEnd> {
    let file = File::open(path).map_err(Error::io("open", path))?;
    let mut r = FrameReader::new(file);
    r.seek(from).map_err(Error::io("seek", path))?;
    let mut pos = from;
    loop {
        match r.next() {
            Ok(rec) => {
                if seg.last_offset.is_some_and(|last| rec.offset <= last) || rec.offset < seg.base {
                    return Ok(ScanEnd::Damaged {
                        position: pos,
                        offset: seg.end(),
                        reason: format!("offset {} out of order", rec.offset),
                    });
                }
                let len = framed_len(&rec) as u64;
                seg.note(rec.offset, rec.timestamp_ms, pos, len, interval);
                pos += len;
            }
            Err(FrameError::Eof { clean: true }) => return Ok(ScanEnd::Clean),
            Err(FrameError::Eof { clean: false }) => {
                return Ok(ScanEnd::Damaged {
                    position: pos,
                    offset: seg.end(),
                    reason: "torn record".into(),
                });
            }
            Err(FrameError::Corrupt(reason)) => {
                return Ok(ScanEnd::Damaged {
                    position: pos,
                    offset: seg.end(),
                    reason,
                });
            }
            Err(FrameError::Io(e)) => {
                return Err(Error::Io {
                    op: "read",
                    path: path.into(),
                    source: e,
                });
            }
        }
    }
}

/// The first whole record that starts after byte `damaged` of a segment file and has an offset
/// after `after`, as `(offset, byte position)`. Recovery tells a torn tail (nothing whole after
/// it: a write a crash cut short, never confirmed) from damage in the middle (whole records
/// after it, written, synced and maybe confirmed to the database) by it. Reads in bounded
/// windows, whatever the lengths the damaged bytes claim.
pub(crate) fn first_record_after(
    path: &Path,
    damaged: u64,
    after: Option<u64>,
) -> Result<Option<(u64, u64)>> {
    use std::os::unix::fs::FileExt;
    const WINDOW: u64 = 1 << 20;
    let file = File::open(path).map_err(Error::io("open", path))?;
    let len = file.metadata().map_err(Error::io("stat", path))?.len();
    let read_at = |buf: &mut Vec<u8>, at: u64, n: u64| -> Result<()> {
        buf.resize(n as usize, 0);
        file.read_exact_at(buf, at).map_err(Error::io("read", path))
    };
    let (mut window, mut window_start) = (Vec::new(), 0u64);
    let mut chunk = Vec::new();
    let mut position = damaged + 1;
    while position + FRAME_HEADER as u64 <= len {
        if position + FRAME_HEADER as u64 > window_start + window.len() as u64 {
            window_start = position;
            read_at(&mut window, position, WINDOW.min(len - position))?;
        }
        let at = (position - window_start) as usize;
        let header = window[at..at + FRAME_HEADER].try_into().expect("8 bytes");
        let body_at = position + FRAME_HEADER as u64;
        if let Some((body_len, crc)) = parse_header(header)
            && body_at + body_len as u64 <= len
        {
            // The checksum over the body, read in windows.
            let (mut sum, mut done, mut head) = (0u32, 0u64, None);
            while done < body_len as u64 {
                let n = WINDOW.min(body_len as u64 - done);
                read_at(&mut chunk, body_at + done, n)?;
                sum = crc32c::crc32c_append(sum, &chunk);
                head = head.or_else(|| body_offset(&chunk));
                done += n;
            }
            if sum == crc
                && let Some(offset) = head
                && after.is_none_or(|a| offset > a)
            {
                return Ok(Some((offset, position)));
            }
        }
        position += 1;
    }
    Ok(None)
}

/// Writes the index file of a closed segment. Not fsynced: an index lost or damaged by a crash
/// fails its checksum or length check, and the segment is scanned instead.
pub(crate) fn write_index(dir: &Path, seg: &Segment) -> Result<()> {
    let mut out = Vec::with_capacity(56 + seg.index.len() * 16);
    out.extend_from_slice(INDEX_MAGIC);
    out.extend_from_slice(&seg.size.to_le_bytes());
    out.extend_from_slice(&seg.last_offset.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&seg.last_timestamp_ms.to_le_bytes());
    out.extend_from_slice(&seg.records.to_le_bytes());
    out.extend_from_slice(&(seg.index.len() as u64).to_le_bytes());
    for (o, p) in &seg.index {
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&p.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    let path = index_path(dir, seg.base);
    siphon_core::fsutil::replace(&path, &out, false)
}

/// Reads a closed segment's index file; `None` if it is missing, damaged, or does not match
/// the segment file's length (then the caller rescans the segment).
pub(crate) fn read_index(dir: &Path, base: u64, file_len: u64) -> Option<Segment> {
    let mut bytes = Vec::new();
    File::open(index_path(dir, base))
        .ok()?
        .read_to_end(&mut bytes)
        .ok()?;
    let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?)
        || !body.starts_with(INDEX_MAGIC)
    {
        return None;
    }
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            body.get(8 + i * 8..16 + i * 8)?.try_into().ok()?,
        ))
    };
    let size = word(0)?;
    if size != file_len {
        return None;
    }
    let last = word(1)?;
    let n = word(4)? as usize;
    let index = (0..n)
        .map(|i| Some((word(5 + 2 * i)?, word(6 + 2 * i)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(Segment {
        base,
        size,
        last_offset: (last != u64::MAX).then_some(last),
        last_timestamp_ms: word(2)? as i64,
        records: word(3)?,
        index,
    })
}

/// Reads records of one segment from byte `from`, in order, stopping at its end.
pub(crate) struct SegmentCursor {
    path: PathBuf,
    reader: FrameReader,
    position: u64,
    /// The offset of the record at `position` (at least: the first one it can have).
    offset: u64,
}

impl std::fmt::Debug for SegmentCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentCursor")
            .field("path", &self.path)
            .field("position", &self.position)
            .field("offset", &self.offset)
            .finish()
    }
}

/// What the next read of a cursor found.
pub(crate) enum Next {
    Record(LogRecord),
    /// Nothing (more) readable yet at this position.
    End,
}

impl SegmentCursor {
    pub fn open(path: PathBuf, from: SeekPoint) -> Result<Self> {
        let file = File::open(&path).map_err(Error::io("open", &path))?;
        let mut reader = FrameReader::new(file);
        reader
            .seek(from.position)
            .map_err(Error::io("seek", &path))?;
        Ok(SegmentCursor {
            path,
            reader,
            position: from.position,
            offset: from.offset,
        })
    }

    /// The next record, or `End` at the end of what is written. A record beyond `limit`
    /// is not consumed: the cursor stays before it.
    pub fn next(&mut self, limit: u64) -> Result<Next> {
        let start = self.position;
        match self.reader.next() {
            Ok(rec) if rec.offset < limit => {
                self.position += framed_len(&rec) as u64;
                self.offset = rec.offset + 1;
                Ok(Next::Record(rec))
            }
            // Not durable yet, or not completely written yet: read it again later.
            Ok(_) | Err(FrameError::Eof { .. }) => {
                self.reader
                    .seek(start)
                    .map_err(Error::io("seek", &self.path))?;
                Ok(Next::End)
            }
            Err(FrameError::Corrupt(reason)) => Err(Error::DamagedRecord {
                offset: self.offset,
                path: self.path.clone(),
                position: start,
                reason,
            }),
            Err(FrameError::Io(e)) => Err(Error::Io {
                op: "read",
                path: self.path.clone(),
                source: e,
            }),
        }
    }
}

/// Appends to the active segment file.
#[derive(Debug)]
pub(crate) struct SegmentWriter {
    pub path: PathBuf,
    pub file: File,
}

impl SegmentWriter {
    pub fn open(path: PathBuf, truncate_to: u64) -> Result<Self> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(Error::io("open", &path))?;
        if file.metadata().map_err(Error::io("stat", &path))?.len() != truncate_to {
            file.set_len(truncate_to)
                .map_err(Error::io("truncate", &path))?;
            file.sync_all().map_err(Error::io("fsync", &path))?;
        }
        Ok(SegmentWriter { path, file })
    }

    /// Writes every slice, however many writes it takes.
    pub fn write_all_vectored(&mut self, mut slices: &mut [std::io::IoSlice<'_>]) -> Result<()> {
        while !slices.is_empty() {
            match self.file.write_vectored(slices) {
                Ok(0) => {
                    let e = std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing");
                    return Err(Error::Io {
                        op: "write",
                        path: self.path.clone(),
                        source: e,
                    });
                }
                Ok(n) => std::io::IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Io {
                        op: "write",
                        path: self.path.clone(),
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(Error::io("fsync", &self.path))
    }
}
