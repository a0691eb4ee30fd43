//! Each value, schema and mode as the real Debezium writes it.

use super::schema::kind_schema;
use super::*;

fn column(type_id: u32, type_modifier: i32, kind: ColumnKind) -> Column {
    Column {
        name: "c".into(),
        type_name: String::new(),
        type_id,
        type_modifier,
        kind,
        nullable: true,
        generated: false,
    }
}

/// The shapes the real Debezium 3.6.3 printed for these values on this machine
/// (`tests/debezium.rs` compares whole streams; these pin the encoders one by one).
#[test]
fn numbers_and_times_come_out_as_debezium_prints_them() {
    let cases: Vec<(Value, Option<Column>, Json)> = vec![
        (
            Value::Int(9_007_199_254_740_993),
            None,
            json!(9_007_199_254_740_993_i64),
        ),
        (Value::Float32(f32::NAN), None, json!("NaN")),
        (Value::Float64(f64::NEG_INFINITY), None, json!("-Infinity")),
        (Value::Decimal("NaN".into()), None, json!("NAN")),
        (Value::Bytes(vec![0, 255, 16]), None, json!("AP8Q")),
        (Value::Date(19_782), None, json!("2024-02-29Z")),
        (Value::Time(36_672_123_456), None, json!("10:11:12.123456Z")),
        (Value::Time(36_672_123_000), None, json!("10:11:12.123Z")),
        // A zoned timestamp: the column's digits, zeros kept.
        (
            Value::TimestampTz(1_709_201_502_511_560),
            Some(column(1184, -1, ColumnKind::TimestampTz)),
            json!("2024-02-29T10:11:42.511560Z"),
        ),
        (
            Value::TimestampTz(1_709_201_502_000_000),
            Some(column(1184, -1, ColumnKind::TimestampTz)),
            json!("2024-02-29T10:11:42.000000Z"),
        ),
        (
            Value::TimestampTz(1_709_201_502_510_000),
            Some(column(1184, 3, ColumnKind::TimestampTz)),
            json!("2024-02-29T10:11:42.510Z"),
        ),
        (Value::Time(0), None, json!("00:00:00Z")),
        (
            Value::TimeTz {
                micros: 36_672_500_000,
                offset_seconds: 19_800,
            },
            None,
            json!("04:41:12.5Z"),
        ),
        (
            Value::TimeTz {
                micros: 0,
                offset_seconds: -43_200,
            },
            None,
            json!("12:00:00Z"),
        ),
        (
            Value::Timestamp(1_709_201_472_500_000),
            None,
            json!("2024-02-29T10:11:12.5Z"),
        ),
        (
            Value::Timestamp(-2_208_988_800_000_000),
            None,
            json!("1900-01-01T00:00:00Z"),
        ),
        (Value::TimestampTz(i64::MIN), None, json!("-infinity")),
        (
            Value::Interval {
                months: 14,
                days: 3,
                micros: 14_706_789_000,
            },
            None,
            json!("P1Y2M3DT4H5M6.789S"),
        ),
        (
            Value::Interval {
                months: -12,
                days: -2,
                micros: -1,
            },
            None,
            json!("P-1Y0M-2DT0H0M-0.000001S"),
        ),
    ];
    assert_values(cases);
}

/// The types siphon keeps as text (money, oid, bit strings) and unchanged (TOAST) values,
/// as the real Debezium printed them.
#[test]
fn text_kept_types_and_unchanged_values_come_out_as_debezium_prints_them() {
    let cases: Vec<(Value, Option<Column>, Json)> = vec![
        (
            Value::Other {
                type_name: "money".into(),
                text: "$1,234.56".into(),
            },
            None,
            json!("1234.56"),
        ),
        (
            Value::Other {
                type_name: "money".into(),
                text: "-$0.50".into(),
            },
            None,
            json!("-0.50"),
        ),
        (
            Value::Other {
                type_name: "oid".into(),
                text: "4000000000".into(),
            },
            None,
            json!(4_000_000_000_u64),
        ),
        (
            Value::Other {
                type_name: "bit".into(),
                text: "1".into(),
            },
            Some(column(BIT, 1, ColumnKind::Other)),
            json!(true),
        ),
        (
            Value::Other {
                type_name: "bit".into(),
                text: "101000000001".into(),
            },
            Some(column(BIT, 12, ColumnKind::Other)),
            json!("AQo="),
        ),
        (
            Value::Other {
                type_name: "varbit".into(),
                text: "10101".into(),
            },
            Some(column(VARBIT, -1, ColumnKind::Other)),
            json!("FQ=="),
        ),
        (
            Value::Other {
                type_name: "bit".into(),
                text: "000000000000".into(),
            },
            Some(column(BIT, 12, ColumnKind::Other)),
            json!(""),
        ),
        (
            Value::Unchanged,
            Some(column(17, -1, ColumnKind::Bytes)),
            json!(BASE64.encode(UNAVAILABLE)),
        ),
        (
            Value::Unchanged,
            Some(column(
                1009,
                -1,
                ColumnKind::Array(Box::new(ColumnKind::Text { length: None })),
            )),
            json!([UNAVAILABLE]),
        ),
    ];
    assert_values(cases);
}

/// Each value in the default modes is what Debezium printed.
fn assert_values(cases: Vec<(Value, Option<Column>, Json)>) {
    for (v, c, want) in cases {
        assert_eq!(value(&v, c.as_ref(), &Modes::default()), want, "{v:?}");
    }
}

/// Debezium's other modes, as the real one printed these values.
#[test]
fn the_other_modes_come_out_as_debezium_prints_them() {
    let mut debezium_defaults = Modes::default();
    for p in [
        "decimal.handling.mode=precise",
        "time.precision.mode=adaptive",
        "interval.handling.mode=numeric",
        "binary.handling.mode=bytes",
    ] {
        debezium_defaults.set(p).unwrap();
    }
    let numeric = |scale| {
        column(
            1700,
            -1,
            ColumnKind::Decimal {
                precision: None,
                scale,
            },
        )
    };
    let cases: Vec<(Value, Column, Json)> = vec![
        (
            Value::Decimal("12.3400".into()),
            numeric(None),
            json!({"scale": 2, "value": "BNI="}),
        ),
        (
            Value::Decimal("0.00001".into()),
            numeric(None),
            json!({"scale": 5, "value": "AQ=="}),
        ),
        (
            Value::Decimal("12.34".into()),
            numeric(Some(2)),
            json!("BNI="),
        ),
        (
            Value::Decimal("-0.01".into()),
            numeric(Some(2)),
            json!("/w=="),
        ),
        (Value::Decimal("NaN".into()), numeric(None), Json::Null),
        (
            Value::Other {
                type_name: "money".into(),
                text: "-$0.50".into(),
            },
            column(MONEY, -1, ColumnKind::Other),
            json!("zg=="),
        ),
        (
            Value::Date(10_956),
            column(1082, -1, ColumnKind::Date),
            json!(10_956),
        ),
        (
            Value::Time(36_672_123_456),
            column(1083, -1, ColumnKind::Time),
            json!(36_672_123_456_i64),
        ),
        (
            Value::Time(36_672_123_000),
            column(1083, 3, ColumnKind::Time),
            json!(36_672_123),
        ),
        (
            Value::Timestamp(1_709_201_472_123_000),
            column(1114, 3, ColumnKind::Timestamp),
            json!(1_709_201_472_123_i64),
        ),
        (
            Value::Interval {
                months: 14,
                days: 3,
                micros: 14_706_789_000,
            },
            column(1186, -1, ColumnKind::Interval),
            json!(37_091_106_789_000_i64),
        ),
    ];
    for (v, c, want) in cases {
        assert_eq!(value(&v, Some(&c), &debezium_defaults), want, "{v:?}");
    }
    let mut hex = Modes::default();
    hex.set("binary.handling.mode=hex").unwrap();
    assert_eq!(
        value(&Value::Bytes(vec![0, 255, 16]), None, &hex),
        json!("00ff10")
    );
    let err = Modes::default()
        .set("time.precision.mode=nanos")
        .unwrap_err();
    assert!(err.contains("adaptive_time_microseconds"), "{err}");
    let err = Modes::default().set("snapshot.mode=never").unwrap_err();
    assert!(err.contains("allowed: decimal.handling.mode"), "{err}");
}

/// MySQL's types as Debezium's MySQL connector documents them (its MariaDB connector
/// shares the converters; neither runs against MariaDB 10.11 here): `bit(n)` as
/// io.debezium.data.Bits, little-endian and ceil(n/8) bytes long; geometry as
/// io.debezium.data.geometry.Geometry {wkb, srid} (srid null for 0), a point column's as
/// io.debezium.data.geometry.Point {x, y, wkb, srid}; `year` as
/// io.debezium.time.Year; `time` as MicroTime and `datetime(p)` as Timestamp (p ≤ 3) or
/// MicroTimestamp in adaptive_time_microseconds, the connector's default.
#[test]
fn mysql_types_come_out_as_debezium_documents_them() {
    let mysql = |type_name: &str, type_modifier: i32, kind: ColumnKind| Column {
        type_name: type_name.into(),
        ..column(0, type_modifier, kind)
    };
    let mut modes = Modes::default();
    modes
        .set("time.precision.mode=adaptive_time_microseconds")
        .unwrap();
    let bits = mysql("bit(12)", 12, ColumnKind::Bytes);
    // b'1010 0000 0011' as the server sends it: 0x0a 0x03.
    assert_eq!(
        value(&Value::Bytes(vec![0x0a, 0x03]), Some(&bits), &modes),
        json!(BASE64.encode([0x03, 0x0a]))
    );
    assert_eq!(
        value(&Value::Bytes(vec![0x01]), Some(&bits), &modes),
        json!(BASE64.encode([0x01, 0x00])),
        "padded to the column's bytes"
    );
    let bits_schema = kind_schema(&bits.kind, &bits, &modes);
    assert_eq!(bits_schema["name"], "io.debezium.data.Bits");
    assert_eq!(bits_schema["parameters"]["length"], "12");

    // POINT(1 2) with SRID 4326, in a GEOMETRY column and in a POINT column.
    let wkb: Vec<u8> = [1u8, 1, 0, 0, 0]
        .into_iter()
        .chain(1f64.to_le_bytes())
        .chain(2f64.to_le_bytes())
        .collect();
    let point = |srid| Value::Geometry {
        wkb: wkb.clone(),
        srid,
    };
    let geometry = mysql("geometry", -1, ColumnKind::Geometry { point: false });
    assert_eq!(
        value(&point(4326), Some(&geometry), &modes),
        json!({"wkb": BASE64.encode(&wkb), "srid": 4326})
    );
    assert_eq!(
        value(&point(0), Some(&geometry), &modes),
        json!({"wkb": BASE64.encode(&wkb), "srid": null})
    );
    let schema = kind_schema(&geometry.kind, &geometry, &modes);
    assert_eq!(schema["name"], "io.debezium.data.geometry.Geometry");
    let points = mysql("point", -1, ColumnKind::Geometry { point: true });
    assert_eq!(
        value(&point(4326), Some(&points), &modes).to_string(),
        json!({"x": 1.0, "y": 2.0, "wkb": BASE64.encode(&wkb), "srid": 4326}).to_string(),
        "Debezium's Point: the coordinates first"
    );
    let schema = kind_schema(&points.kind, &points, &modes);
    assert_eq!(schema["name"], "io.debezium.data.geometry.Point");
    // The WKB is a struct's bytes: base64 in every binary mode.
    modes.set("binary.handling.mode=hex").unwrap();
    assert_eq!(
        value(&point(0), Some(&geometry), &modes)["wkb"],
        json!(BASE64.encode(&wkb))
    );

    let year = mysql("year", -1, ColumnKind::Int32);
    assert_eq!(value(&Value::Int(2024), Some(&year), &modes), json!(2024));
    assert_eq!(
        kind_schema(&year.kind, &year, &modes)["name"],
        "io.debezium.time.Year"
    );

    let time = mysql("time(3)", 3, ColumnKind::Duration);
    assert_eq!(
        value(&Value::Time(-93_784_500_000), Some(&time), &modes),
        json!(-93_784_500_000_i64),
        "a negative time past a day, in microseconds"
    );
    assert_eq!(
        value(
            &Value::Time(-93_784_500_000),
            Some(&time),
            &Modes::default()
        ),
        json!("-26:03:04.5Z"),
        "and as an ISO time, every hour kept"
    );
    assert_eq!(
        kind_schema(&time.kind, &time, &modes)["name"],
        "io.debezium.time.MicroTime"
    );
    let datetime3 = mysql("datetime(3)", 3, ColumnKind::Timestamp);
    assert_eq!(
        value(
            &Value::Timestamp(1_709_201_472_123_000),
            Some(&datetime3),
            &modes
        ),
        json!(1_709_201_472_123_i64)
    );
    let datetime6 = mysql("datetime(6)", 6, ColumnKind::Timestamp);
    assert_eq!(
        value(
            &Value::Timestamp(1_709_201_472_123_456),
            Some(&datetime6),
            &modes
        ),
        json!(1_709_201_472_123_456_i64)
    );
    assert_eq!(
        kind_schema(&datetime6.kind, &datetime6, &modes)["name"],
        "io.debezium.time.MicroTimestamp"
    );
}
