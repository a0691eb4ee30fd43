//! The record and its on-disk framing.
//!
//! ```text
//! frame = len:u32le  crc32c(body):u32le  body
//! body  = offset:u64le  timestamp_ms:i64le  flags:u8  key_len:u32le  key  value
//! ```

use std::io::{self, Read};

/// Bytes before the body: length and checksum.
pub(crate) const FRAME_HEADER: usize = 8;
/// Fixed part of a body.
const BODY_FIXED: usize = 8 + 8 + 1 + 4;
/// Largest body accepted when reading; a bigger length is a corrupt frame.
pub(crate) const MAX_BODY: usize = 1 << 30;

/// Flags of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordFlags(pub u8);

impl RecordFlags {
    /// The last record of a source transaction: a sink may commit after it.
    pub const TXN_END: RecordFlags = RecordFlags(1);
    /// The key's row is gone (a delete): compaction may drop the key after the grace period.
    pub const TOMBSTONE: RecordFlags = RecordFlags(2);
    /// The row leaves some columns unchanged (PostgreSQL TOAST): their values are in the
    /// key's earlier records, which compaction therefore keeps back to a whole row.
    pub const PARTIAL: RecordFlags = RecordFlags(4);
    /// This record and the next one are the two halves of a key change (the delete of the
    /// old key, the create of the new): a batch never ends between them, and compaction
    /// keeps the old key's records back to a whole row while the new key's row needs them.
    pub const WITH_NEXT: RecordFlags = RecordFlags(8);
    /// Compaction moved this record under the key of the row it serves (an old key's record
    /// that a key change's new row takes columns from): the key is not its event's.
    pub const MOVED: RecordFlags = RecordFlags(16);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: RecordFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags and `other`'s.
    #[must_use]
    pub fn with(self, other: RecordFlags) -> RecordFlags {
        RecordFlags(self.0 | other.0)
    }
}

/// A record to append; the log assigns offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// Compaction key (empty: never compacted).
    pub key: Vec<u8>,
    /// The payload (an encoded event).
    pub value: Vec<u8>,
    /// Flags.
    pub flags: RecordFlags,
}

/// A record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its offset.
    pub offset: u64,
    /// When it was appended, ms since the epoch.
    pub timestamp_ms: i64,
    /// Flags.
    pub flags: RecordFlags,
    /// Compaction key.
    pub key: Vec<u8>,
    /// Payload.
    pub value: Vec<u8>,
}

impl LogRecord {
    /// Bytes this record takes in a segment file.
    pub fn framed_len(&self) -> usize {
        FRAME_HEADER + BODY_FIXED + self.key.len() + self.value.len()
    }
}

/// Refuses a record a reader would take for damage (or whose length does not fit the frame).
pub(crate) fn check_size(key: &[u8], value: &[u8]) -> crate::Result<()> {
    let bytes = BODY_FIXED + key.len() + value.len();
    if bytes > MAX_BODY {
        return Err(crate::Error::TooLarge {
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

/// Reads one frame; `buf` is reused between calls.
pub(crate) fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<LogRecord, FrameError> {
    let mut header = [0u8; FRAME_HEADER];
    let got = read_full(r, &mut header).map_err(FrameError::Io)?;
    if got < FRAME_HEADER {
        return Err(FrameError::Eof { clean: got == 0 });
    }
    let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().unwrap());
    if !(BODY_FIXED..=MAX_BODY).contains(&len) {
        return Err(FrameError::Corrupt(format!(
            "impossible record length {len}"
        )));
    }
    buf.resize(len, 0);
    if read_full(r, buf).map_err(FrameError::Io)? < len {
        return Err(FrameError::Eof { clean: false });
    }
    if crc32c::crc32c(buf) != crc {
        return Err(FrameError::Corrupt("checksum mismatch".into()));
    }
    decode_body(buf).ok_or_else(|| FrameError::Corrupt("malformed record body".into()))
}

fn decode_body(b: &[u8]) -> Option<LogRecord> {
    let offset = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
    let timestamp_ms = i64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    let flags = RecordFlags(*b.get(16)?);
    let key_len = u32::from_le_bytes(b.get(17..21)?.try_into().ok()?) as usize;
    let key = b.get(21..21 + key_len)?.to_vec();
    let value = b.get(21 + key_len..)?.to_vec();
    Some(LogRecord {
        offset,
        timestamp_ms,
        flags,
        key,
        value,
    })
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
