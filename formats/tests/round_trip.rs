//! Property tests: any value siphon holds comes back from its JSON form, and from its Avro
//! form read by another implementation (the `apache-avro` crate), as it went in.

use apache_avro::reader::datum::GenericDatumReader;
use proptest::prelude::*;
use serde_json::Value as Json;
use siphon_core::event::{Event, Op, Row, Value};
use siphon_core::schema::{Column, ColumnKind, SchemaId, TableSchema};
use siphon_core::testing::values::{same_value, value};
use siphon_format::avro::AvroSchema;
use siphon_format::envelope::JsonFormat;
use siphon_format::json::{decode_value, value_json, value_schema};
use siphon_test_support::avro_connect_json;

/// A column kind and a value of it, as a source makes them (or null).
fn column() -> impl Strategy<Value = (ColumnKind, Value)> {
    (0..19usize, any::<bool>()).prop_flat_map(|(kind, null)| {
        let (kind, values) = kind_and_values(kind);
        let values = if null {
            Just(Value::Null).boxed()
        } else {
            values
        };
        values.prop_map(move |v| (kind.clone(), v))
    })
}

/// Column kind `i` and a strategy for its values.
fn kind_and_values(i: usize) -> (ColumnKind, BoxedStrategy<Value>) {
    const DAY_MICROS: i64 = 86_400_000_000;
    let text = || any::<String>().prop_map(Value::Text).boxed();
    match i {
        0 => (ColumnKind::Bool, any::<bool>().prop_map(Value::Bool).boxed()),
        1 => (ColumnKind::Int16, any::<i16>().prop_map(|i| Value::Int(i.into())).boxed()),
        2 => (ColumnKind::Int32, any::<i32>().prop_map(|i| Value::Int(i.into())).boxed()),
        3 => (ColumnKind::Int64, any::<i64>().prop_map(Value::Int).boxed()),
        4 => (ColumnKind::Float32, any::<f32>().prop_map(Value::Float32).boxed()),
        5 => (ColumnKind::Float64, any::<f64>().prop_map(Value::Float64).boxed()),
        6 => (
            ColumnKind::Decimal { precision: Some(12), scale: Some(3) },
            "-?(0|[1-9][0-9]{0,8})\\.[0-9]{3}".prop_map(Value::Decimal).boxed(),
        ),
        7 => (
            ColumnKind::Decimal { precision: None, scale: None },
            "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,20})?|NaN|Infinity|-Infinity"
                .prop_map(Value::Decimal)
                .boxed(),
        ),
        8 => (ColumnKind::Text { length: None }, text()),
        9 => (
            ColumnKind::Bytes,
            prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes).boxed(),
        ),
        10 => (
            ColumnKind::Json { binary: true },
            "\\{\"[a-z]{1,4}\": [0-9]{1,5}\\}".prop_map(Value::Json).boxed(),
        ),
        11 => (ColumnKind::Uuid, any::<[u8; 16]>().prop_map(Value::Uuid).boxed()),
        // Every day, past chrono's years and the infinities at the ends included.
        12 => (ColumnKind::Date, any::<i32>().prop_map(Value::Date).boxed()),
        13 => (ColumnKind::Time, (0..=DAY_MICROS).prop_map(Value::Time).boxed()),
        14 => (
            ColumnKind::Duration,
            (-3_020_399_000_000i64..=3_020_399_000_000).prop_map(Value::Time).boxed(),
        ),
        15 => (ColumnKind::Timestamp, any::<i64>().prop_map(Value::Timestamp).boxed()),
        16 => (ColumnKind::TimestampTz, any::<i64>().prop_map(Value::TimestampTz).boxed()),
        17 => (
            ColumnKind::Interval,
            (any::<i32>(), any::<i32>(), any::<i64>())
                .prop_map(|(months, days, micros)| Value::Interval { months, days, micros })
                .boxed(),
        ),
        _ => (
            ColumnKind::Array(Box::new(ColumnKind::Int32)),
            prop::collection::vec(
                prop_oneof![4 => any::<i32>().prop_map(|i| Value::Int(i.into())), 1 => Just(Value::Null)],
                0..5,
            )
            .prop_map(Value::Array)
            .boxed(),
        ),
    }
}

/// An insert into a table of these columns (`c0`, `c1`, …), with its schema.
fn event_of(columns: Vec<(ColumnKind, Value)>) -> Event {
    let schema = TableSchema {
        id: SchemaId(1),
        connector: "postgresql".into(),
        server: "test".into(),
        database: "db".into(),
        schema: Some("public".into()),
        table: "every_kind".into(),
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, (kind, _))| Column {
                name: format!("c{i}").as_str().into(),
                type_name: String::new(),
                type_id: 0,
                type_modifier: -1,
                kind: kind.clone(),
                nullable: true,
                generated: false,
            })
            .collect(),
        key: vec![],
    };
    let after: Row = columns
        .into_iter()
        .enumerate()
        .map(|(i, (_, v))| (format!("c{i}"), v))
        .collect();
    let mut event = siphon_core::testing::event("every_kind", Op::Create, 1, None, Some(after));
    event.key = None;
    event.schema = Some(std::sync::Arc::new(schema));
    event
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// value → JSON text → value, through the schema siphon gives the value.
    #[test]
    fn any_value_round_trips_through_json(v in value()) {
        let schema = value_schema(&v);
        let text = serde_json::to_string(&value_json(&v)).unwrap();
        let parsed: Json = serde_json::from_str(&text).unwrap();
        let back = decode_value(&parsed, &schema)
            .map_err(|e| TestCaseError::fail(format!("{v:?} as {text}: {e}")))?;
        prop_assert!(same_value(&back, &v), "{:?} as {} came back as {:?}", v, text, back);
    }

    /// An event whose columns are of every kind, as the Kafka sink and log write it: its
    /// Avro (siphon's writer, with the schema text it registers, read back by `apache-avro`)
    /// says exactly what its Debezium JSON says, and no value is written as another kind.
    #[test]
    fn any_event_says_the_same_in_avro_and_in_json(columns in prop::collection::vec(column(), 1..6)) {
        let event = event_of(columns);
        let json = JsonFormat { schemas: true, ..JsonFormat::default() }.encode(&event);
        let avro = AvroSchema::from_connect(&json["schema"])
            .map_err(|e| TestCaseError::fail(format!("no Avro schema for {}: {e}", json["schema"])))?;
        let mut bytes = Vec::new();
        let mismatched = avro.write(&json["payload"], &mut bytes);
        prop_assert!(mismatched.is_empty(), "written as another kind at {:?}: {}", mismatched, json["payload"]["after"]);
        let schema = apache_avro::Schema::parse_str(avro.text()).unwrap();
        let read = GenericDatumReader::builder(&schema)
            .build()
            .and_then(|reader| reader.read_value(&mut bytes.as_slice()))
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", json["payload"]["after"])))?;
        let read = avro_connect_json(read).unwrap();
        prop_assert_eq!(&read["after"], &json["payload"]["after"]);
    }
}
