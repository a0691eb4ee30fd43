//! The record's on-disk framing.
//!
//! ```text
//! frame = len:u32le  crc32c(body):u32le  body
//! body  = offset:u64le  timestamp_ms:i64le  flags:u8  key_len:u32le  key  value
//! ```

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use siphon_core::log::{LogRecord, RecordFlags};

/// Bytes before the body: length and checksum.
pub(crate) const FRAME_HEADER: usize = 8;
/// Fixed part of a body.
const BODY_FIXED: usize = 8 + 8 + 1 + 4;
/// Largest body accepted when reading; a bigger length is a corrupt frame.
pub(crate) const MAX_BODY: usize = 1 << 30;

/// Bytes a record takes in a segment file.
pub(crate) fn framed_len(record: &LogRecord) -> usize {
    FRAME_HEADER + BODY_FIXED + record.key.len() + record.value.len()
}

/// Refuses a record a reader would take for damage (or whose length does not fit the frame).
pub(crate) fn check_size(key: &[u8], value: &[u8]) -> siphon_core::Result<()> {
    let bytes = BODY_FIXED + key.len() + value.len();
    if bytes > MAX_BODY {
        return Err(siphon_core::Error::TooLarge {
            bytes,
            limit: MAX_BODY,
        });
    }
    Ok(())
}

/// Bytes of a frame before its key: length, checksum, offset, timestamp, flags, key length.
pub(crate) const FRAME_FIXED: usize = FRAME_HEADER + BODY_FIXED;

/// The fixed part of a frame; the key and value follow it. The checksum covers them too.
pub(crate) fn frame_header(
    offset: u64,
    timestamp_ms: i64,
    flags: RecordFlags,
    key: &[u8],
    value: &[u8],
) -> [u8; FRAME_FIXED] {
    let mut h = [0u8; FRAME_FIXED];
    let body_len = BODY_FIXED + key.len() + value.len();
    h[0..4].copy_from_slice(&(body_len as u32).to_le_bytes());
    h[8..16].copy_from_slice(&offset.to_le_bytes());
    h[16..24].copy_from_slice(&timestamp_ms.to_le_bytes());
    h[24] = flags.0;
    h[25..29].copy_from_slice(&(key.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&h[FRAME_HEADER..]), key),
        value,
    );
    h[4..8].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Appends the framed record to `out`, checksumming it in one pass.
pub(crate) fn encode_frame(
    out: &mut Vec<u8>,
    offset: u64,
    timestamp_ms: i64,
    flags: RecordFlags,
    key: &[u8],
    value: &[u8],
) {
    let start = out.len();
    let body_len = BODY_FIXED + key.len() + value.len();
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&timestamp_ms.to_le_bytes());
    out.push(flags.0);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32c::crc32c(&out[start + FRAME_HEADER..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The file ends inside the frame (a torn write) or exactly at its start (clean end).
    Eof { clean: bool },
    /// The frame is damaged.
    Corrupt(String),
    /// The file could not be read.
    Io(io::Error),
}

/// Bytes a [`FrameReader`] asks the file for at a time.
const READ_CHUNK: usize = 256 << 10;

/// Reads a file's frames in order through a buffer of its own, checking each frame where it
/// lies in the buffer and copying out only its key and value.
pub(crate) struct FrameReader {
    file: File,
    /// Bytes read from the file: `buf[at..end]` are not taken yet, and start at a frame.
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

impl FrameReader {
    pub fn new(file: File) -> Self {
        FrameReader {
            file,
            buf: Vec::new(),
            at: 0,
            end: 0,
        }
    }

    /// Reads the next frame.
    pub fn next(&mut self) -> Result<LogRecord, FrameError> {
        if !self.fill(FRAME_HEADER)? {
            return Err(FrameError::Eof {
                clean: self.at == self.end,
            });
        }
        let header = self.buf[self.at..self.at + FRAME_HEADER]
            .try_into()
            .expect("8 bytes");
        let Some((len, crc)) = parse_header(header) else {
            return Err(FrameError::Corrupt(format!(
                "impossible record length {}",
                u32::from_le_bytes(header[..4].try_into().unwrap())
            )));
        };
        if !self.fill(FRAME_HEADER + len)? {
            return Err(FrameError::Eof { clean: false });
        }
        let body = &self.buf[self.at + FRAME_HEADER..self.at + FRAME_HEADER + len];
        if crc32c::crc32c(body) != crc {
            return Err(FrameError::Corrupt("checksum mismatch".into()));
        }
        let record =
            decode_body(body).ok_or_else(|| FrameError::Corrupt("malformed record body".into()))?;
        self.at += FRAME_HEADER + len;
        Ok(record)
    }

    /// Forgets what is buffered and goes on reading at byte `position` of the file.
    pub fn seek(&mut self, position: u64) -> io::Result<()> {
        (self.at, self.end) = (0, 0);
        self.file.seek(SeekFrom::Start(position)).map(|_| ())
    }

    /// Reads until `n` bytes are buffered from `at`; `false` if the file ends first.
    fn fill(&mut self, n: usize) -> Result<bool, FrameError> {
        if self.end - self.at >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.at..self.end, 0);
        (self.at, self.end) = (0, self.end - self.at);
        if self.buf.len() < n {
            self.buf.resize(n.max(READ_CHUNK), 0);
        } else if self.buf.len() > READ_CHUNK && n.max(self.end) <= READ_CHUNK {
            // Back to the usual size once a large record is read.
            self.buf.truncate(READ_CHUNK);
            self.buf.shrink_to_fit();
        }
        while self.end < n {
            match self.file.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(got) => self.end += got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
        Ok(true)
    }
}

/// A frame header's body length and checksum; `None` for a length no record can have.
pub(crate) fn parse_header(header: &[u8; FRAME_HEADER]) -> Option<(usize, u32)> {
    let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().unwrap());
    (BODY_FIXED..=MAX_BODY).contains(&len).then_some((len, crc))
}

/// The offset a record body starts with.
pub(crate) fn body_offset(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(0..8)?.try_into().ok()?))
}

fn decode_body(b: &[u8]) -> Option<LogRecord> {
    let offset = body_offset(b)?;
    let timestamp_ms = i64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    let flags = RecordFlags(*b.get(16)?);
    let key_len = u32::from_le_bytes(b.get(17..21)?.try_into().ok()?) as usize;
    let key = b
        .get(BODY_FIXED..BODY_FIXED.checked_add(key_len)?)?
        .to_vec();
    let value = b[BODY_FIXED + key_len..].to_vec();
    Some(LogRecord {
        offset,
        timestamp_ms,
        flags,
        key,
        value,
    })
}
