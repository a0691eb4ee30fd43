//! Debezium's JSON for change events: each value as Debezium 3.x's PostgreSQL connector
//! writes it with `decimal.handling.mode=string`, `time.precision.mode=isostring`,
//! `interval.handling.mode=string`, `binary.handling.mode=base64` and
//! `hstore.handling.mode=json` (checked against the real Debezium: `tests/debezium.rs`),
//! keys, topics and tombstones.
//!
//! Where Debezium loses a value siphon keeps it (README, "siphon vs Debezium encodings"):
//! infinite dates and timestamps stay `infinity`/`-infinity` (Debezium prints a date 292
//! million years away), `24:00:00` stays (Debezium: `00:00:00Z`), and a numeric array
//! holding NaN keeps its elements (Debezium: null).
//!
//! The store encoding of values ([`crate::json::value_json`]) is a different one: sinks keep
//! exact values in their own form; this module is what consumers of the event stream read.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, NaiveDate, NaiveTime};
use serde_json::{Map, Value as Json, json};

use crate::event::{Event, Row, Value};
use crate::json::UNAVAILABLE;
use crate::schema::{Column, ColumnKind, TableSchema};

/// PostgreSQL's type OIDs that Debezium encodes apart from their text.
const MONEY: u32 = 790;
const OID: u32 = 26;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;

/// A row as Debezium's JSON object, each value typed by its column where the schema has it.
/// With a schema every column is there, in the table's order, as in Debezium: one the row
/// lacks (the non-key columns of a delete's old row) is `null`.
pub fn row(row: &Row, schema: Option<&TableSchema>) -> Json {
    let Some(schema) = schema else {
        return Json::Object(
            row.iter()
                .map(|(c, v)| (c.to_owned(), value(v, None)))
                .collect::<Map<_, _>>(),
        );
    };
    Json::Object(
        schema
            .columns
            .iter()
            .map(|column| {
                let v = row.get(&column.name).unwrap_or(&Value::Null);
                (column.name.to_string(), value(v, Some(column)))
            })
            .collect::<Map<_, _>>(),
    )
}

/// The records Debezium's PostgreSQL connector emits for an event with its defaults
/// (`tombstones.on.delete = true`, `skipped.operations = t`): `{"topic", "key", "value"}`,
/// a delete followed by its tombstone (a `null` value, for Kafka's log compaction), nothing
/// for a truncate.
pub fn records(event: &Event) -> Vec<Json> {
    let (topic, key) = (topic(event), self::key(event));
    match event.op {
        crate::event::Op::Truncate => Vec::new(),
        crate::event::Op::Delete => vec![
            json!({"topic": topic, "key": key, "value": crate::json::envelope(event)}),
            json!({"topic": topic, "key": key, "value": null}),
        ],
        _ => vec![json!({"topic": topic, "key": key, "value": crate::json::envelope(event)})],
    }
}

/// Debezium's topic of an event: `<server name>.<schema>.<table>` (`<db>.<table>` where the
/// source has no schemas).
pub fn topic(event: &Event) -> String {
    format!("{}.{}", event.source.name, event.source.qualified_table())
}

/// Debezium's record key: the primary-key columns, or `null` for a table without one.
pub fn key(event: &Event) -> Json {
    let Some(key) = &event.key else {
        return Json::Null;
    };
    let schema = event.schema.as_deref();
    Json::Object(
        key.iter()
            .map(|(c, v)| (c.to_owned(), value(v, schema.and_then(|s| s.column(c)))))
            .collect::<Map<_, _>>(),
    )
}

/// One value.
pub fn value(value: &Value, column: Option<&Column>) -> Json {
    let kind = column.map(|c| &c.kind);
    match value {
        Value::Null => Json::Null,
        Value::Unchanged => unavailable(kind),
        Value::Array(items) => {
            let element = match kind {
                Some(ColumnKind::Array(element)) => Some(element),
                _ => None,
            };
            // The element's column: the array's, with the element's kind.
            let element_column = column.zip(element).map(|(c, e)| Column {
                kind: (**e).clone(),
                ..c.clone()
            });
            Json::Array(
                items
                    .iter()
                    .map(|v| self::value(v, element_column.as_ref()))
                    .collect(),
            )
        }
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::UInt(u) => json!(u),
        // Through its shortest text so that 0.1f32 prints "0.1", not 0.10000000149011612.
        Value::Float32(f) => float(f.to_string().parse().unwrap_or(f64::from(*f))),
        Value::Float64(f) => float(*f),
        Value::Decimal(s) => json!(decimal(s)),
        Value::Text(s) | Value::Json(s) | Value::Enum(s) => json!(s),
        Value::Bytes(b) => json!(BASE64.encode(b)),
        // The hyphenated text, as in the store encoding.
        Value::Uuid(_) => crate::json::value_json(value),
        Value::Date(days) => json!(date(*days)),
        Value::Time(micros) => json!(format!("{}Z", time(*micros))),
        Value::TimeTz {
            micros,
            offset_seconds,
        } => {
            let utc = (micros - i64::from(*offset_seconds) * 1_000_000).rem_euclid(DAY_MICROS);
            json!(format!("{}Z", time(utc)))
        }
        Value::Timestamp(us) | Value::TimestampTz(us) => json!(timestamp(*us)),
        Value::Interval {
            months,
            days,
            micros,
        } => json!(interval(*months, *days, *micros)),
        Value::Other { type_name, text } => other(type_name, text, column),
    }
}

const DAY_MICROS: i64 = 86_400_000_000;

/// Debezium's placeholder for a value PostgreSQL did not send, in the column's own type.
fn unavailable(kind: Option<&ColumnKind>) -> Json {
    match kind {
        Some(ColumnKind::Bytes) => json!(BASE64.encode(UNAVAILABLE)),
        Some(ColumnKind::Array(element)) => Json::Array(vec![unavailable(Some(element))]),
        _ => json!(UNAVAILABLE),
    }
}

fn float(v: f64) -> Json {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(v)
    }
}

/// A decimal as Debezium's string mode prints it (NaN in capitals, as Java's BigDecimal
/// cannot hold it and Debezium spells the special value itself).
fn decimal(s: &str) -> String {
    match s {
        "NaN" => "NAN".into(),
        other => other.to_owned(),
    }
}

/// A value of a type siphon keeps as text, as Debezium encodes it: money as a plain
/// decimal, oid as a number, bit(1) as a boolean, other bit strings as bytes (the bits as an
/// unsigned number, least significant byte first, without leading zero bytes); the rest as
/// the text.
fn other(type_name: &str, text: &str, column: Option<&Column>) -> Json {
    let type_id = column.map_or(0, |c| c.type_id);
    let is = |id: u32, name: &str| type_id == id || (type_id == 0 && type_name == name);
    if is(MONEY, "money") {
        return json!(money(text));
    }
    if is(OID, "oid") {
        return text
            .parse::<u64>()
            .map_or_else(|_| json!(text), |n| json!(n));
    }
    if is(BIT, "bit") || is(VARBIT, "varbit") {
        let single = column.map_or(text.len() == 1 && type_name == "bit", |c| {
            c.type_id == BIT && c.type_modifier == 1
        });
        if single {
            return json!(text == "1");
        }
        return json!(BASE64.encode(bits_le(text)));
    }
    json!(text)
}

/// `$1,234.56` / `-$0.50` / `1.234,56 €` as a plain decimal: the digits, the sign and the
/// last `.` or `,` when two digits or fewer follow it (the locale's decimal mark).
fn money(text: &str) -> String {
    let negative = text.contains('-') || text.contains('(');
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    let (whole, fraction) = match kept.rfind(['.', ',']) {
        Some(at) if kept.len() - at - 1 <= 2 => (&kept[..at], &kept[at + 1..]),
        _ => (kept.as_str(), ""),
    };
    let digits: String = whole.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if fraction.is_empty() {
        format!("{sign}{digits}")
    } else {
        format!("{sign}{digits}.{fraction}")
    }
}

/// A bit string (`101000000001`) as Debezium's bytes: the unsigned number, least significant
/// byte first, no zero bytes at the top (all zero bits: no bytes).
fn bits_le(text: &str) -> Vec<u8> {
    let bits: Vec<bool> = text.chars().map(|c| c == '1').collect();
    let mut bytes: Vec<u8> = bits
        .rchunks(8)
        .map(|chunk| chunk.iter().fold(0u8, |b, &bit| (b << 1) | u8::from(bit)))
        .collect();
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

const EPOCH: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();

fn date(days: i32) -> String {
    match days {
        i32::MAX => "infinity".into(),
        i32::MIN => "-infinity".into(),
        d => EPOCH
            .checked_add_signed(chrono::TimeDelta::days(i64::from(d)))
            .map_or_else(
                || d.to_string(),
                |date| format!("{}Z", date.format("%Y-%m-%d")),
            ),
    }
}

/// `HH:MM:SS` and a fraction without trailing zeros.
fn time(micros: i64) -> String {
    if micros == DAY_MICROS {
        return "24:00:00".into();
    }
    let secs = micros.div_euclid(1_000_000);
    let t = NaiveTime::from_num_seconds_from_midnight_opt(secs as u32, 0).unwrap_or_default();
    format!(
        "{}{}",
        t.format("%H:%M:%S"),
        fraction(micros.rem_euclid(1_000_000))
    )
}

/// `.123` for 123000 µs; nothing for 0.
fn fraction(micros: i64) -> String {
    if micros == 0 {
        return String::new();
    }
    let digits = format!("{micros:06}");
    format!(".{}", digits.trim_end_matches('0'))
}

fn timestamp(micros: i64) -> String {
    match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        us => match DateTime::from_timestamp_micros(us) {
            Some(dt) => format!(
                "{}{}Z",
                dt.naive_utc().format("%Y-%m-%dT%H:%M:%S"),
                fraction(us.rem_euclid(1_000_000))
            ),
            None => us.to_string(),
        },
    }
}

/// ISO 8601 as Debezium's string mode prints an interval: every part, each with its sign,
/// seconds with a fraction without trailing zeros (`P1Y2M3DT4H5M6.789S`,
/// `P-1Y0M-2DT0H0M-0.000001S`).
fn interval(months: i32, days: i32, micros: i64) -> String {
    let (years, months) = (months / 12, months % 12);
    let hours = micros / 3_600_000_000;
    let minutes = micros % 3_600_000_000 / 60_000_000;
    let rest = micros % 60_000_000;
    let (sign, rest) = if rest < 0 { ("-", -rest) } else { ("", rest) };
    format!(
        "P{years}Y{months}M{days}DT{hours}H{minutes}M{sign}{}{}S",
        rest / 1_000_000,
        fraction(rest % 1_000_000)
    )
}

#[cfg(test)]
mod tests {
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
    fn values_come_out_as_debezium_prints_them() {
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
        for (v, c, want) in cases {
            assert_eq!(value(&v, c.as_ref()), want, "{v:?}");
        }
    }
}
