//! The row-image decoders (connectors/mysql): a table map whose columns' types, metadata,
//! signedness, character sets and labels the input chooses (every column type MySQL and
//! MariaDB write), and a rows event (MariaDB's v1 or MySQL's v2) of that table with the
//! input's row data (siphon/fuzz/src/rows.rs has the format). Invariants: no panic; siphon's
//! decoder and `mysql_common`'s agree where both read an image; every event made survives
//! the log's encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use siphon_core::testing::MemorySchemas;
use siphon_fuzz::assert_round_trip;
use siphon_fuzz::rows::Spec;
use siphon_source_mysql::fuzzing::Binlog;

fuzz_target!(|data: &[u8]| {
    let Some(spec) = Spec::read(data) else {
        return;
    };
    let schemas = MemorySchemas::default();
    let mut stream = Binlog::default();
    for event in spec.events() {
        let Ok(events) = stream.event(&schemas, &event) else {
            return;
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
