//! `json::decode_value` (formats/src/json.rs) on its own: a value and the Kafka Connect
//! schema it is read by, as the input's JSON array `[value, schema]`. Invariants: no panic;
//! what decoded is written back (`value_json`, `value_schema`) and reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value as Json;
use siphon_format::json::{decode_value, value_json, value_schema, value_text};

fuzz_target!(|data: &[u8]| {
    let Ok(Json::Array(pair)) = serde_json::from_slice::<Json>(data) else {
        return;
    };
    let [json, schema] = &pair[..] else {
        return;
    };
    let Ok(value) = decode_value(json, schema) else {
        return;
    };
    let (written, its_schema) = (value_json(&value), value_schema(&value));
    let back = decode_value(&written, &its_schema).unwrap_or_else(|e| {
        panic!("{value:?} written as {written} ({its_schema}) does not read back: {e}")
    });
    assert_eq!(
        format!("{value:?}"),
        format!("{back:?}"),
        "written as {written} ({its_schema})"
    );
    let _ = value_text(&value);
});
