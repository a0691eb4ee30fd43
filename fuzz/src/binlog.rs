//! Binlog events as the server sends them: one event per packet, its header's size its
//! length. An input is a binlog file's bytes (with or without its magic number), cut at each
//! header's size as a reader of the file cuts it.

/// A binlog file's first bytes.
pub const MAGIC: &[u8] = b"\xfebin";
/// An event's common header: timestamp, type, server id, size, next position, flags.
pub const HEADER: usize = 19;
/// The least an event holds past its header here: its checksum and a byte. A server's
/// events always do; `mysql_common`, which reads them, indexes into shorter ones (the
/// framing is the server's and the packet layer's, not siphon's decoders').
const LEAST_BODY: usize = 5;

/// The events of `data`, each with its size field made its length: a size past the end
/// takes what is left, a size shorter than the least event takes the least.
pub fn events(data: &[u8]) -> Vec<Vec<u8>> {
    let mut data = data.strip_prefix(MAGIC).unwrap_or(data);
    let mut out = Vec::new();
    while data.len() >= HEADER + LEAST_BODY {
        let size = u32::from_le_bytes(data[9..13].try_into().unwrap()) as usize;
        let size = size.clamp(HEADER + LEAST_BODY, data.len());
        let mut event = data[..size].to_vec();
        event[9..13].copy_from_slice(&(size as u32).to_le_bytes());
        out.push(event);
        data = &data[size..];
    }
    out
}

/// An event of type `kind` with body `body` (checksum included, if any), at position `pos`.
pub fn event(kind: u8, server_id: u32, pos: u32, body: &[u8]) -> Vec<u8> {
    let size = (HEADER + body.len()) as u32;
    let mut out = Vec::with_capacity(size as usize);
    out.extend_from_slice(&1_700_000_000u32.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&server_id.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&pos.wrapping_add(size).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(body);
    out
}
