//! The binlog event decoders (connectors/mysql): a binlog's events as a MariaDB or MySQL
//! server sends them (the input is a binlog file's bytes, cut at each header's size), read
//! by `mysql_common` and then by the stream's own steps — MariaDB's GTID events, rotations,
//! statements, XA prepares, table maps to shapes, row images. Invariants: no panic; siphon's
//! row-image decoder and `mysql_common`'s agree where both read an image; every event made
//! survives the log's encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use siphon_core::testing::MemorySchemas;
use siphon_fuzz::{assert_round_trip, binlog};
use siphon_source_mysql::fuzzing::Binlog;

fuzz_target!(|data: &[u8]| {
    let schemas = MemorySchemas::default();
    let mut stream = Binlog::default();
    for event in binlog::events(data) {
        let Ok(events) = stream.event(&schemas, &event) else {
            continue;
        };
        for event in &events {
            assert_round_trip(event, &schemas);
        }
    }
    assert!(
        stream.disagreements.is_empty(),
        "the row-image decoders disagree:\n{}",
        stream.disagreements.join("\n")
    );
});
