//! Arbitrary values for property tests: every kind of [`Value`], arrays of one kind (nested
//! ones too) with nulls among them, as a column holds them.

use proptest::prelude::*;

use crate::event::Value;

/// Debezium's placeholder for a value PostgreSQL did not send; a text equal to it cannot be
/// told from [`Value::Unchanged`] in JSON (Debezium has the same ambiguity), so the texts
/// made here never are.
const PLACEHOLDER: &str = "__debezium_unavailable_value";

fn text() -> impl Strategy<Value = String> {
    any::<String>().prop_filter("the unavailable-value placeholder", |s| s != PLACEHOLDER)
}

/// An exact decimal in canonical text, or one of PostgreSQL's special values.
fn decimal() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,20})?",
        1 => Just("NaN".to_owned()),
        1 => Just("Infinity".to_owned()),
        1 => Just("-Infinity".to_owned()),
    ]
}

/// A JSON document, as text.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z ]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
    .prop_map(|doc| doc.to_string())
}

/// Kinds of [`scalar_of`].
const KINDS: usize = 19;

/// A value that is not an array, of every kind but [`Value::Null`] and [`Value::Unchanged`].
pub fn scalar() -> BoxedStrategy<Value> {
    (0..KINDS).prop_flat_map(scalar_of).boxed()
}

/// A scalar of kind `kind` (`0..KINDS`).
fn scalar_of(kind: usize) -> BoxedStrategy<Value> {
    const DAY_MICROS: i64 = 86_400_000_000;
    match kind {
        0 => any::<bool>().prop_map(Value::Bool).boxed(),
        1 => any::<i64>().prop_map(Value::Int).boxed(),
        2 => any::<u64>().prop_map(Value::UInt).boxed(),
        3 => any::<f32>().prop_map(Value::Float32).boxed(),
        4 => any::<f64>().prop_map(Value::Float64).boxed(),
        5 => decimal().prop_map(Value::Decimal).boxed(),
        6 => text().prop_map(Value::Text).boxed(),
        7 => prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(Value::Bytes)
            .boxed(),
        8 => json_text().prop_map(Value::Json).boxed(),
        9 => any::<[u8; 16]>().prop_map(Value::Uuid).boxed(),
        10 => any::<i32>().prop_map(Value::Date).boxed(),
        // PostgreSQL's time is 00:00 to 24:00; MySQL's TIME is ±838:59:59.
        11 => (-3_020_399_000_000i64..=3_020_399_000_000)
            .prop_map(Value::Time)
            .boxed(),
        12 => (0..=DAY_MICROS, -57_599i32..=57_599)
            .prop_map(|(micros, offset_seconds)| Value::TimeTz {
                micros,
                offset_seconds,
            })
            .boxed(),
        13 => any::<i64>().prop_map(Value::Timestamp).boxed(),
        14 => any::<i64>().prop_map(Value::TimestampTz).boxed(),
        15 => (any::<i32>(), any::<i32>(), any::<i64>())
            .prop_map(|(months, days, micros)| Value::Interval {
                months,
                days,
                micros,
            })
            .boxed(),
        16 => text().prop_map(Value::Enum).boxed(),
        17 => (prop::collection::vec(any::<u8>(), 0..32), any::<u32>())
            .prop_map(|(wkb, srid)| Value::Geometry { wkb, srid })
            .boxed(),
        // One type, as the items of an array column are.
        _ => text()
            .prop_map(|text| Value::Other {
                type_name: "inet".into(),
                text,
            })
            .boxed(),
    }
}

/// A column's value: null, unchanged, a scalar, or an array of one kind of scalar (nested
/// arrays of it too) with nulls among them.
pub fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => Just(Value::Unchanged),
        12 => scalar(),
        2 => (0..KINDS).prop_flat_map(|kind| array_of(kind, 2)),
    ]
}

/// An array of scalars of kind `kind` and nulls, or (`depth` > 1) of such arrays.
fn array_of(kind: usize, depth: u32) -> BoxedStrategy<Value> {
    let item = prop_oneof![4 => scalar_of(kind), 1 => Just(Value::Null)];
    let flat = prop::collection::vec(item, 0..5).prop_map(Value::Array);
    if depth <= 1 {
        return flat.boxed();
    }
    prop_oneof![
        3 => flat,
        1 => prop::collection::vec(array_of(kind, depth - 1), 1..3).prop_map(Value::Array),
    ]
    .boxed()
}

/// Whether two values are the same, floats compared bit for bit (NaN is itself).
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float32(x), Value::Float32(y)) => x.to_bits() == y.to_bits(),
        (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        _ => a == b,
    }
}
