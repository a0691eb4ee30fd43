//! The log record decoder (`Event::decode`, core/src/event.rs, postcard): an encoded event in
//! any format siphon reads (5 and 4 now, 3 to 1 from earlier builds), its schema ids looked up
//! in the registry of real tables in fuzz/data/schemas.postcard (PostgreSQL, MariaDB and
//! generator tables, every column type). Invariants: no panic, no allocation sized by a
//! length field beyond the input; what decoded encodes and decodes back the same.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use siphon_core::Event;
use siphon_core::schema::TableSchema;
use siphon_fuzz::{Positions, Schemas, assert_round_trip};

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    let all: Vec<TableSchema> =
        postcard::from_bytes(include_bytes!("../data/schemas.postcard")).expect("the registry");
    Schemas(all.into_iter().map(Arc::new).collect())
});

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = Event::decode(data, &*SCHEMAS, &Positions) {
        assert_round_trip(&event, &*SCHEMAS);
    }
});
