//! The pgoutput decoder and the value decoders behind it (connectors/postgres), through the
//! stream's steps: a sequence of messages as the slot sends them, each framed by its length
//! (4 bytes, big-endian). Relation messages choose the columns' types (any OID: built-in
//! types decode, others travel as text); Insert, Update and Delete carry text or binary
//! values. Invariants: no panic; every event made survives the log's encoding.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use siphon_core::testing::MemorySchemas;
use siphon_fuzz::{assert_round_trip, frames};
use siphon_source_postgres::fuzzing::Stream;

fuzz_target!(|data: &[u8]| {
    let schemas = MemorySchemas::default();
    let mut stream = Stream::default();
    for (i, message) in frames(data).enumerate() {
        let Ok(events) = stream.message(&schemas, i as u64, Bytes::copy_from_slice(message)) else {
            continue;
        };
        for event in &events {
            assert_round_trip(event, &schemas);
        }
    }
});
