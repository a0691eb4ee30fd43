//! The headers siphon puts on every Kafka record it writes, and reads back.
//!
//! | header | value |
//! |---|---|
//! | `siphon.offset` | the record's siphon offset, 8 bytes big-endian: the version a store guards with |
//! | `siphon.flags` | the log record's flags, 1 byte (transaction end, tombstone, partial row, key change) |
//! | `siphon.event` | the event in siphon's own encoding (what the file log stores): siphon's sinks read it, exactly |
//! | `siphon.key` | the log key (table and primary-key values) |
//! | `siphon.position` | where the change committed in the source (an LSN, a GTID), as text |
//! | `siphon.txid` | the source transaction's id, as text |
//! | `siphon.id` | the Kafka sink's: the event's id, `<log identity>:<offset>`, as every message sink gives it |
//!
//! The key and value are the Debezium record every other consumer reads.

use rdkafka::message::{Header, Headers, OwnedHeaders};
use siphon_core::log::RecordFlags;

/// `siphon.offset`.
pub const OFFSET: &str = "siphon.offset";
/// `siphon.flags`.
pub const FLAGS: &str = "siphon.flags";
/// `siphon.event`.
pub const EVENT: &str = "siphon.event";
/// `siphon.key`.
pub const KEY: &str = "siphon.key";
/// `siphon.position`.
pub const POSITION: &str = "siphon.position";
/// `siphon.txid`.
pub const TXID: &str = "siphon.txid";
/// `siphon.id`.
pub const ID: &str = "siphon.id";

/// What siphon reads back from a record's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiphonHeaders<'a> {
    /// `siphon.offset`.
    pub offset: Option<u64>,
    /// `siphon.flags`.
    pub flags: RecordFlags,
    /// `siphon.event`.
    pub event: Option<&'a [u8]>,
    /// `siphon.key`.
    pub key: Option<&'a [u8]>,
}

impl<'a> SiphonHeaders<'a> {
    /// Reads siphon's headers from `headers` (others are ignored).
    pub fn read(headers: &'a impl Headers) -> Self {
        let mut out = SiphonHeaders::default();
        for header in headers.iter() {
            let Some(value) = header.value else { continue };
            match header.key {
                OFFSET => out.offset = value.try_into().ok().map(u64::from_be_bytes),
                FLAGS => out.flags = RecordFlags(value.first().copied().unwrap_or(0)),
                EVENT => out.event = Some(value),
                KEY => out.key = Some(value),
                _ => {}
            }
        }
        out
    }
}

/// The headers of one record as written.
#[derive(Debug, Clone, Default)]
pub struct RecordHeaders {
    /// `siphon.offset`.
    pub offset: u64,
    /// `siphon.flags`.
    pub flags: RecordFlags,
    /// `siphon.event`, for event records.
    pub event: Option<Vec<u8>>,
    /// `siphon.key`.
    pub key: Option<Vec<u8>>,
    /// `siphon.position`.
    pub position: Option<String>,
    /// `siphon.txid`.
    pub txid: Option<String>,
    /// `siphon.id`.
    pub id: Option<String>,
    /// Headers made of the row (an outbox row's `id` and those its settings name), each
    /// value as text.
    pub row: Vec<(String, String)>,
}

impl RecordHeaders {
    /// As librdkafka takes them.
    pub fn to_owned_headers(&self) -> OwnedHeaders {
        let offset = self.offset.to_be_bytes();
        let flags = [self.flags.0];
        let mut headers = OwnedHeaders::new_with_capacity(7)
            .insert(Header {
                key: OFFSET,
                value: Some(&offset),
            })
            .insert(Header {
                key: FLAGS,
                value: Some(&flags),
            });
        let texts = [
            (EVENT, self.event.as_deref()),
            (KEY, self.key.as_deref()),
            (POSITION, self.position.as_deref().map(str::as_bytes)),
            (TXID, self.txid.as_deref().map(str::as_bytes)),
            (ID, self.id.as_deref().map(str::as_bytes)),
        ];
        for (key, value) in texts {
            if let Some(value) = value {
                headers = headers.insert(Header {
                    key,
                    value: Some(value),
                });
            }
        }
        for (key, value) in &self.row {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_as_written() {
        let written = RecordHeaders {
            offset: 1 << 40,
            flags: RecordFlags::TXN_END.with(RecordFlags::PARTIAL),
            event: Some(vec![5, 1, 2]),
            key: Some(b"k".to_vec()),
            position: Some("0/16B3748".into()),
            txid: Some("771".into()),
            id: None,
            row: vec![("id".into(), "e-1".into())],
        };
        let owned = written.to_owned_headers();
        let read = SiphonHeaders::read(&owned);
        assert_eq!(read.offset, Some(1 << 40));
        assert_eq!(read.flags, written.flags);
        assert_eq!(read.event, Some(&[5u8, 1, 2][..]));
        assert_eq!(read.key, Some(&b"k"[..]));
    }
}
