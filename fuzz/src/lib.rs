//! What siphon's fuzz targets share: how an input is cut into a decoder's units (framed
//! messages, binlog events), a rows event built from a column list ([`rows`]), the events'
//! round trip through the log's encoding, and the inputs' formats, which `examples/seed.rs`
//! writes the seed corpora in.

pub mod binlog;
pub mod rows;
pub mod segments;

use std::sync::Arc;

use siphon_core::Event;
use siphon_core::position::{PositionDecoder, SourcePosition};
use siphon_core::schema::{SchemaId, SchemaLookup, TableSchema};

/// Messages framed as a length (4 bytes, big-endian) and its bytes, as the replication
/// protocol's CopyData frames them; a length past the end takes what is left.
pub fn frames(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if data.len() < 4 {
            return None;
        }
        let len = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
        let len = len.min(data.len() - 4);
        let (message, rest) = data[4..].split_at(len);
        data = rest;
        Some(message)
    })
}

/// Frames `messages` as [`frames`] reads them.
pub fn frame(messages: &[impl AsRef<[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&(m.as_ref().len() as u32).to_be_bytes());
        out.extend_from_slice(m.as_ref());
    }
    out
}

/// The positions of every source this build has, as the daemon reads them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Positions;

impl PositionDecoder for Positions {
    fn decode(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        use siphon_core::kind::decode_position;
        decode_position::<siphon_source_postgres::PostgresKind>(connector, bytes)
            .or_else(|| decode_position::<siphon_source_mysql::MysqlKind>(connector, bytes))
            .or_else(|| decode_position::<siphon_source_generator::GeneratorKind>(connector, bytes))
    }
}

/// Schemas by id (`schemas[i]` has id `i + 1`), as a log's registry holds them.
#[derive(Debug, Clone, Default)]
pub struct Schemas(pub Vec<Arc<TableSchema>>);

impl SchemaLookup for Schemas {
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        self.0.get((id.0 as usize).checked_sub(1)?).cloned()
    }
}

/// An event that decoded must encode, and decode again to the same event: what the log
/// stores is what a reader gets. Panics (the fuzzer's finding) where it does not.
pub fn assert_round_trip(event: &Event, schemas: &dyn SchemaLookup) {
    let bytes = event
        .encode()
        .unwrap_or_else(|e| panic!("an event siphon made does not encode: {e}\n{event:?}"));
    let back = Event::decode(&bytes, schemas, &Positions)
        .unwrap_or_else(|e| panic!("an encoded event does not decode: {e}\n{event:?}"));
    // Debug, not ==: a NaN is itself here.
    let (before, after) = (format!("{event:?}"), format!("{back:?}"));
    assert_eq!(before, after, "an event changed through the log's encoding");
}
