//! The record's on-disk framing.
//!
//! ```text
//! frame = len:u32le  crc32c(body):u32le  body
//! body  = offset:u64le  timestamp_ms:i64le  flags:u8  key_len:u32le  key  value
//! ```

use std::io::{self, Read};

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

/// Reads one frame; `buf` is reused between calls.
pub(crate) fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<LogRecord, FrameError> {
    let mut header = [0u8; FRAME_HEADER];
    let got = read_full(r, &mut header).map_err(FrameError::Io)?;
    if got < FRAME_HEADER {
        return Err(FrameError::Eof { clean: got == 0 });
    }
    let Some((len, crc)) = parse_header(&header) else {
        return Err(FrameError::Corrupt(format!(
            "impossible record length {}",
            u32::from_le_bytes(header[..4].try_into().unwrap())
        )));
    };
    buf.resize(len, 0);
    if read_full(r, buf).map_err(FrameError::Io)? < len {
        return Err(FrameError::Eof { clean: false });
    }
    if crc32c::crc32c(buf) != crc {
        return Err(FrameError::Corrupt("checksum mismatch".into()));
    }
    decode_body(buf).ok_or_else(|| FrameError::Corrupt("malformed record body".into()))
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
