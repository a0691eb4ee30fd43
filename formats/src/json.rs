//! Debezium-compatible JSON: the change event envelope (`payload`, optionally with `schema`)
//! and the lossless JSON encoding of each value (see DESIGN.md, "JSON encoding of values").
//!
//! Decoding a value back needs its schema field, because JSON alone cannot tell a decimal
//! from text; [`decode_value`] takes the field that [`value_schema`] produced.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value as Json, json};

use std::borrow::Cow;

use siphon_core::event::{Row, Value, format_uuid};

use crate::calendar;

/// Microseconds in a day.
const DAY_MICROS: i64 = 86_400_000_000;

/// Debezium's placeholder for a value that was not sent (an unchanged TOAST column).
pub const UNAVAILABLE: &str = "__debezium_unavailable_value";

/// Largest integer a JSON reader using doubles holds exactly (2^53).
const MAX_SAFE_INT: i64 = 1 << 53;

/// A row as a JSON object.
pub fn row_json(row: &Row) -> Json {
    Json::Object(
        row.iter()
            .map(|(c, v)| (c.to_owned(), value_json(v)))
            .collect(),
    )
}

fn int_json(v: i128) -> Json {
    if v.unsigned_abs() <= MAX_SAFE_INT as u128 {
        json!(v as i64)
    } else {
        json!(v.to_string())
    }
}

/// A float; NaN and the infinities as the strings Debezium writes.
pub(crate) fn float_json(v: f64) -> Json {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(v)
    }
}

/// A field of a row in a store of JSON documents: [`value_json`], but a view's document
/// (`document`, see [`siphon_core::Event::is_document`]) embeds its JSON fields (its nested
/// objects and arrays, and its tables' JSON columns) as JSON.
pub fn field_json(value: &Value, document: bool) -> Json {
    match value {
        Value::Json(text) if document => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
        v => value_json(v),
    }
}

/// One value in siphon's default, lossless JSON encoding.
pub fn value_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => int_json(i128::from(*i)),
        Value::UInt(u) => int_json(i128::from(*u)),
        // Through its shortest text so that 0.1f32 prints "0.1", not 0.10000000149011612.
        Value::Float32(f) => float_json(f.to_string().parse().unwrap_or(f64::from(*f))),
        Value::Float64(f) => float_json(*f),
        Value::Decimal(s) | Value::Text(s) | Value::Json(s) | Value::Enum(s) => json!(s),
        Value::Other { text, .. } => json!(text),
        Value::Bytes(b) => json!(BASE64.encode(b)),
        Value::Uuid(u) => json!(format_uuid(u)),
        Value::Date(d) => json!(format_date(*d)),
        Value::Time(us) => json!(format_time(*us, Fraction::Micros)),
        Value::TimeTz {
            micros,
            offset_seconds,
        } => {
            json!(format!(
                "{}{}",
                format_time(*micros, Fraction::Micros),
                format_offset(*offset_seconds)
            ))
        }
        Value::Timestamp(us) => json!(format_timestamp(*us, "", Fraction::Micros)),
        Value::TimestampTz(us) => json!(format_timestamp(*us, "Z", Fraction::Micros)),
        Value::Interval {
            months,
            days,
            micros,
        } => json!(format_interval(*months, *days, *micros, Fraction::Micros)),
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Unchanged => json!(UNAVAILABLE),
        Value::Geometry { wkb, srid } => crate::spatial::geometry_json(wkb, *srid),
    }
}

pub(crate) fn format_date(days: i32) -> String {
    match days {
        i32::MAX => "infinity".into(),
        i32::MIN => "-infinity".into(),
        d => calendar::date_text(i64::from(d)),
    }
}

/// How a fraction of a second is written: six digits (the store encoding, which parses
/// back), without trailing zeros (Debezium's ISO times and timestamps), or exactly this many
/// digits, zeros included (Debezium's zoned timestamps, by the column's precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fraction {
    Micros,
    Trimmed,
    Digits(usize),
}

/// `HH:MM:SS` and the fraction. A time outside a day (MySQL's `TIME` is a span: `-05:01:02.5`,
/// `100:00:00`) as MySQL prints it: the sign, then every hour.
pub(crate) fn format_time(micros: i64, style: Fraction) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let secs = abs / 1_000_000;
    format!(
        "{sign}{:02}:{:02}:{:02}{}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        format_fraction((abs % 1_000_000) as i64, style)
    )
}

/// `.123456` (or `.123` trimmed) for 123456 µs, nothing for 0; with `Digits(n)` always `n`
/// digits (none for 0).
fn format_fraction(micros: i64, style: Fraction) -> String {
    let digits = format!("{micros:06}");
    match style {
        Fraction::Digits(0) => String::new(),
        Fraction::Digits(n) => format!(".{}", &digits[..n.min(6)]),
        _ if micros == 0 => String::new(),
        Fraction::Micros => format!(".{digits}"),
        Fraction::Trimmed => format!(".{}", digits.trim_end_matches('0')),
    }
}

fn format_offset(seconds: i32) -> String {
    if seconds == 0 {
        return "Z".into();
    }
    let sign = if seconds < 0 { '-' } else { '+' };
    let s = seconds.unsigned_abs();
    if s.is_multiple_of(60) {
        format!("{sign}{:02}:{:02}", s / 3600, s / 60 % 60)
    } else {
        format!("{sign}{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }
}

/// An ISO timestamp followed by `zone`; infinities as `infinity`, `-infinity`.
pub(crate) fn format_timestamp(micros: i64, zone: &str, style: Fraction) -> String {
    match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        us => {
            let of_day = us.rem_euclid(DAY_MICROS);
            let secs = of_day / 1_000_000;
            format!(
                "{}T{:02}:{:02}:{:02}{}{zone}",
                calendar::date_text(us.div_euclid(DAY_MICROS)),
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                format_fraction(of_day % 1_000_000, style)
            )
        }
    }
}

/// ISO 8601 as Debezium's string mode prints an interval: every part, each with its sign
/// (`P1Y2M3DT4H5M6.789S`, `P-1Y0M-2DT0H0M-0.000001S`).
pub(crate) fn format_interval(months: i32, days: i32, micros: i64, style: Fraction) -> String {
    let (years, months) = (months / 12, months % 12);
    let hours = micros / 3_600_000_000;
    let minutes = micros % 3_600_000_000 / 60_000_000;
    let rest = micros % 60_000_000;
    let (sign, rest) = if rest < 0 { ("-", -rest) } else { ("", rest) };
    format!(
        "P{years}Y{months}M{days}DT{hours}H{minutes}M{sign}{}{}S",
        rest / 1_000_000,
        format_fraction(rest % 1_000_000, style)
    )
}

/// Kafka Connect's schema of one value, as [`decode_value`] reads it back.
pub fn value_schema(value: &Value) -> Json {
    let (ty, name): (&str, Option<&str>) = match value {
        Value::Null | Value::Unchanged | Value::Text(_) => ("string", None),
        Value::Bool(_) => ("boolean", None),
        Value::Int(_) => ("int64", None),
        Value::UInt(_) => ("int64", Some("siphon.UInt64")),
        Value::Float32(_) => ("float", None),
        Value::Float64(_) => ("double", None),
        Value::Decimal(_) => ("string", Some("siphon.Decimal")),
        Value::Bytes(_) => ("bytes", None),
        Value::Json(_) => ("string", Some("io.debezium.data.Json")),
        Value::Uuid(_) => ("string", Some("io.debezium.data.Uuid")),
        Value::Date(_) => ("string", Some("siphon.IsoDate")),
        Value::Time(_) => ("string", Some("siphon.IsoTime")),
        Value::TimeTz { .. } => ("string", Some("io.debezium.time.ZonedTime")),
        Value::Timestamp(_) => ("string", Some("siphon.IsoTimestamp")),
        Value::TimestampTz(_) => ("string", Some("io.debezium.time.ZonedTimestamp")),
        Value::Interval { .. } => ("string", Some("io.debezium.time.Interval")),
        Value::Enum(_) => ("string", Some("io.debezium.data.Enum")),
        Value::Other { type_name, .. } => {
            return json!({"type": "string", "optional": true, "name": "siphon.Other",
                          "parameters": {"type": type_name}});
        }
        Value::Geometry { .. } => return crate::spatial::schema(false),
        Value::Array(items) => {
            // The first item that says what the items are: not null, and for arrays of
            // arrays one that holds a value somewhere (`[[], [1]]` is an array of int arrays).
            fn telling(v: &Value) -> bool {
                match v {
                    Value::Null => false,
                    Value::Array(items) => items.iter().any(telling),
                    _ => true,
                }
            }
            let item = items
                .iter()
                .find(|v| telling(v))
                .or_else(|| items.iter().find(|v| !matches!(v, Value::Null)))
                .unwrap_or(&Value::Null);
            return json!({"type": "array", "optional": true, "items": value_schema(item)});
        }
    };
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    m.insert("optional".into(), json!(true));
    if let Some(name) = name {
        m.insert("name".into(), json!(name));
    }
    Json::Object(m)
}

/// Reads back one value that [`value_json`] wrote, given the schema [`value_schema`] gave it.
pub fn decode_value(json: &Json, schema: &Json) -> Result<Value, String> {
    if json.is_null() {
        return Ok(Value::Null);
    }
    if json.as_str() == Some(UNAVAILABLE) {
        return Ok(Value::Unchanged);
    }
    let ty = schema["type"].as_str().unwrap_or("string");
    let name = schema["name"].as_str().unwrap_or("");
    let text = || {
        json.as_str()
            .ok_or_else(|| format!("expected a string, found {json}"))
    };
    let bad = |what: &str| format!("bad {what}: {json}");
    Ok(match (ty, name) {
        ("boolean", _) => Value::Bool(json.as_bool().ok_or_else(|| bad("boolean"))?),
        ("int64", "siphon.UInt64") => Value::UInt(parse_number(json).ok_or_else(|| bad("u64"))?),
        ("int64", _) => Value::Int(parse_number(json).ok_or_else(|| bad("integer"))?),
        ("float", _) => Value::Float32(parse_float(json).ok_or_else(|| bad("float"))? as f32),
        ("double", _) => Value::Float64(parse_float(json).ok_or_else(|| bad("double"))?),
        ("bytes", _) => Value::Bytes(BASE64.decode(text()?).map_err(|e| e.to_string())?),
        ("struct", crate::spatial::GEOMETRY) => crate::spatial::decode(json)?,
        ("array", _) => Value::Array(
            json.as_array()
                .ok_or_else(|| bad("array"))?
                .iter()
                .map(|item| decode_value(item, &schema["items"]))
                .collect::<Result<_, _>>()?,
        ),
        (_, "siphon.Decimal") => Value::Decimal(text()?.to_owned()),
        (_, "io.debezium.data.Json") => Value::Json(text()?.to_owned()),
        (_, "io.debezium.data.Enum") => Value::Enum(text()?.to_owned()),
        (_, "siphon.Other") => Value::Other {
            type_name: schema["parameters"]["type"]
                .as_str()
                .unwrap_or("unknown")
                .to_owned(),
            text: text()?.to_owned(),
        },
        (_, "io.debezium.data.Uuid") => {
            Value::Uuid(parse_uuid(text()?).ok_or_else(|| bad("uuid"))?)
        }
        (_, "siphon.IsoDate") => Value::Date(parse_date(text()?).ok_or_else(|| bad("date"))?),
        (_, "siphon.IsoTime") => Value::Time(parse_time(text()?).ok_or_else(|| bad("time"))?),
        (_, "io.debezium.time.ZonedTime") => {
            let (micros, offset_seconds) = parse_timetz(text()?).ok_or_else(|| bad("timetz"))?;
            Value::TimeTz {
                micros,
                offset_seconds,
            }
        }
        (_, "siphon.IsoTimestamp") => {
            Value::Timestamp(parse_timestamp(text()?, false).ok_or_else(|| bad("timestamp"))?)
        }
        (_, "io.debezium.time.ZonedTimestamp") => {
            Value::TimestampTz(parse_timestamp(text()?, true).ok_or_else(|| bad("timestamptz"))?)
        }
        (_, "io.debezium.time.Interval") => {
            let (months, days, micros) = parse_interval(text()?).ok_or_else(|| bad("interval"))?;
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        _ => Value::Text(text()?.to_owned()),
    })
}

fn parse_number<T: std::str::FromStr + TryFrom<i64> + TryFrom<u64>>(json: &Json) -> Option<T> {
    match json {
        Json::Number(n) => n
            .as_i64()
            .and_then(|i| T::try_from(i).ok())
            .or_else(|| n.as_u64().and_then(|u| T::try_from(u).ok())),
        Json::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A JSON number, or the text Debezium's JSON gives a float that is no number (`"NaN"`,
/// `"Infinity"`, `"-Infinity"`).
pub(crate) fn parse_float(json: &Json) -> Option<f64> {
    match json {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn parse_date(s: &str) -> Option<i32> {
    match s {
        "infinity" => Some(i32::MAX),
        "-infinity" => Some(i32::MIN),
        _ => i32::try_from(calendar::parse_date(s)?).ok(),
    }
}

/// What [`format_time`] writes: `[-]HH:MM:SS[.ffffff]`, hours past 23 included.
fn parse_time(s: &str) -> Option<i64> {
    let (negative, s) = s.strip_prefix('-').map_or((false, s), |rest| (true, rest));
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    let mut parts = whole.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        || ![h, m, sec].into_iter().all(digits)
        || (m.len(), sec.len()) != (2, 2)
        || fraction.len() > 6
        || !(fraction.is_empty() || digits(fraction))
    {
        return None;
    }
    let (h, m, sec): (i64, i64, i64) = (h.parse().ok()?, m.parse().ok()?, sec.parse().ok()?);
    if m > 59 || sec > 59 {
        return None;
    }
    let micros = format!("{fraction:0<6}").parse::<i64>().ok()?;
    // Checked: more hours than microseconds in an i64 hold are no time siphon wrote.
    let total = (h.checked_mul(3600)?.checked_add(m * 60 + sec)?)
        .checked_mul(1_000_000)?
        .checked_add(micros)?;
    Some(if negative { -total } else { total })
}

fn parse_timetz(s: &str) -> Option<(i64, i32)> {
    if let Some(t) = s.strip_suffix('Z') {
        return Some((parse_time(t)?, 0));
    }
    let at = s.rfind(['+', '-'])?;
    let (t, off) = s.split_at(at);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let parts: Vec<i32> = off[1..]
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let secs = parts
        .first()?
        .checked_mul(3600)?
        .checked_add(parts.get(1).unwrap_or(&0).checked_mul(60)?)?
        .checked_add(*parts.get(2).unwrap_or(&0))?;
    Some((parse_time(t)?, sign * secs))
}

fn parse_timestamp(s: &str, zoned: bool) -> Option<i64> {
    match s {
        "infinity" => return Some(i64::MAX),
        "-infinity" => return Some(i64::MIN),
        _ => {}
    }
    let s = if zoned { s.strip_suffix('Z')? } else { s };
    let (date, time) = s.split_once('T')?;
    let of_day = parse_time(time).filter(|t| (0..DAY_MICROS).contains(t))?;
    calendar::parse_date(date)?
        .checked_mul(DAY_MICROS)?
        .checked_add(of_day)
}

fn parse_interval(s: &str) -> Option<(i32, i32, i64)> {
    let rest = s.strip_prefix('P')?;
    let (date, time) = rest.split_once('T')?;
    let mut date_parts = [0i64; 3];
    let mut d = date;
    for (i, unit) in ['Y', 'M', 'D'].into_iter().enumerate() {
        let (n, r) = d.split_once(unit)?;
        date_parts[i] = n.parse().ok()?;
        d = r;
    }
    let (h, r) = time.split_once('H')?;
    let (m, r) = r.split_once('M')?;
    let sec = r.strip_suffix('S')?;
    let negative = sec.starts_with('-');
    let sec = sec.trim_start_matches('-');
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let frac_us: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").get(..6)?.parse().ok()?
    };
    // Checked: a span past what the types hold is no interval siphon wrote.
    let mut sec_us = whole
        .parse::<i64>()
        .ok()?
        .checked_mul(1_000_000)?
        .checked_add(frac_us)?;
    if negative {
        sec_us = -sec_us;
    }
    let micros = h
        .parse::<i64>()
        .ok()?
        .checked_mul(3_600_000_000)?
        .checked_add(m.parse::<i64>().ok()?.checked_mul(60_000_000)?)?
        .checked_add(sec_us)?;
    let months = i32::try_from(date_parts[0].checked_mul(12)?.checked_add(date_parts[1])?).ok()?;
    Some((months, i32::try_from(date_parts[2]).ok()?, micros))
}

/// A key as one string, for key names and document ids: the value of a one-column key as
/// text (`42`, `b0c1…`, `alice`); the values of a composite key joined by `:`, with `\` and
/// `:` escaped by `\`.
pub fn key_text(key: &Row) -> String {
    match key.0.as_slice() {
        [(_, value)] => with_value_text(value, str::to_owned),
        columns => {
            let mut out = String::new();
            for (i, (_, value)) in columns.iter().enumerate() {
                if i > 0 {
                    out.push(':');
                }
                for c in value_text(value).chars() {
                    if c == ':' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
            }
            out
        }
    }
}

/// A value as plain text: its JSON encoding ([`value_json`]), without the quotes when that
/// is a string. `None` for SQL NULL.
pub fn value_text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::Text(s) | Value::Decimal(s) | Value::Json(s) | Value::Enum(s) => Cow::Borrowed(s),
        Value::Other { text, .. } => Cow::Borrowed(text),
        Value::Int(i) => Cow::Owned(i.to_string()),
        other => match value_json(other) {
            serde_json::Value::String(s) => Cow::Owned(s),
            json => Cow::Owned(json.to_string()),
        },
    }
}

/// Calls `f` with the value's text (as [`value_text`]), an integer's formatted on the stack:
/// for encoders that copy the text straight into their output.
pub fn with_value_text<R>(value: &Value, f: impl FnOnce(&str) -> R) -> R {
    match value {
        Value::Int(i) => f(itoa::Buffer::new().format(*i)),
        other => f(&value_text(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the json_value fuzz target: an interval whose seconds overflow i64 in
    /// microseconds panicked (overflow) instead of being a bad value.
    #[test]
    fn an_interval_past_the_range_is_an_error_not_a_panic() {
        let input: &[u8] = b"[\"P0Y0M9DT18H0M03333333333333333333S\",{\"\":true,\"name\":\"io.debezium.time.Interval\"}]";
        let [json, schema] = serde_json::from_slice::<[Json; 2]>(input).unwrap();
        assert!(decode_value(&json, &schema).is_err());
    }

    /// Found by the json_value fuzz target: a time of more hours than i64 holds in
    /// microseconds panicked (overflow) instead of being a bad value; so did a zone offset
    /// of more hours than i32 holds in seconds (read beside it).
    #[test]
    fn a_time_past_the_range_is_an_error_not_a_panic() {
        let input: &[u8] = b"[\"-000000000000000000000000000008607285862829974418:00:02.50060\",{\"\":true,\"name\":\"siphon.IsoTime\"}]";
        let [json, schema] = serde_json::from_slice::<[Json; 2]>(input).unwrap();
        assert!(decode_value(&json, &schema).is_err());
        let zoned = serde_json::json!({"name": "io.debezium.time.ZonedTime"});
        assert!(decode_value(&Json::from("10:00:00+999999:00"), &zoned).is_err());
    }

    fn every_value() -> Vec<Value> {
        vec![
            Value::Null,
            Value::Bool(true),
            Value::Int(-42),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
            Value::Int(MAX_SAFE_INT + 1),
            Value::UInt(u64::MAX),
            Value::Float32(0.1),
            Value::Float32(f32::INFINITY),
            Value::Float64(1.0e-300),
            Value::Float64(f64::NEG_INFINITY),
            Value::Decimal("12.3400".into()),
            Value::Decimal("NaN".into()),
            Value::Decimal("-123456789012345678901234567890.000000000000000000001".into()),
            Value::Text("héllo \"quoted\" \n".into()),
            Value::Bytes(vec![0, 1, 254, 255]),
            Value::Json(r#"{"a": [1, 2.50, null]}"#.into()),
            Value::Uuid(*b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x12\x34\x56\x78\x9a\xbc\xde\xf0"),
            Value::Date(0),
            Value::Date(-719_528),
            Value::Date(i32::MAX),
            Value::Date(i32::MIN),
            Value::Time(0),
            Value::Time(86_399_999_999),
            Value::Time(86_400_000_000),
            // MySQL's TIME: below zero and past a day.
            Value::Time(-18_062_500_000),
            Value::Time(360_000_000_000),
            Value::Time(-3_020_399_000_000),
            Value::TimeTz {
                micros: 45_296_000_001,
                offset_seconds: -(5 * 3600 + 30 * 60),
            },
            Value::TimeTz {
                micros: 1,
                offset_seconds: 3,
            },
            Value::Timestamp(1_700_000_000_123_456),
            Value::Timestamp(-62_135_596_800_000_000),
            Value::TimestampTz(1),
            Value::TimestampTz(i64::MAX),
            Value::TimestampTz(i64::MIN),
            Value::Interval {
                months: 14,
                days: 3,
                micros: 4 * 3_600_000_000 + 5_000_007,
            },
            Value::Interval {
                months: -1,
                days: -2,
                micros: -3_000_001,
            },
            Value::Interval {
                months: 0,
                days: 0,
                micros: 0,
            },
            Value::Array(vec![Value::Int(1), Value::Null, Value::Int(3)]),
            Value::Array(vec![
                Value::Array(vec![Value::Text("a".into()), Value::Text("b".into())]),
                Value::Array(vec![Value::Text("c".into()), Value::Null]),
            ]),
            Value::Array(vec![]),
            // Found by the property tests (formats/tests/round_trip.rs): an array of arrays
            // whose first is empty, dates and timestamps past chrono's ±262,143 years, a double that
            // serde_json read one bit off without `float_roundtrip`.
            Value::Array(vec![
                Value::Array(vec![]),
                Value::Array(vec![Value::Bool(false)]),
            ]),
            Value::Date(2_000_000_000),
            Value::Timestamp(9_000_000_000_000_000_000),
            Value::Float64(-1.922_626_462_371_643_5e-111),
            Value::Enum("happy".into()),
            Value::Other {
                type_name: "inet".into(),
                text: "192.168.0.1/24".into(),
            },
            Value::Unchanged,
            Value::Geometry {
                wkb: vec![1, 7, 0, 0, 0, 0, 0, 0, 0],
                srid: 4326,
            },
        ]
    }

    #[test]
    fn every_value_round_trips_through_json() {
        for value in every_value() {
            let schema = value_schema(&value);
            let encoded = value_json(&value);
            let text = serde_json::to_string(&encoded).unwrap();
            let reparsed: Json = serde_json::from_str(&text).unwrap();
            let decoded = decode_value(&reparsed, &schema)
                .unwrap_or_else(|e| panic!("{value:?} as {text}: {e}"));
            // NaN != NaN: compare the bits of floats.
            match (&value, &decoded) {
                (Value::Float64(a), Value::Float64(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                _ => assert_eq!(decoded, value, "{text} with schema {schema}"),
            }
        }
    }

    #[test]
    fn encodings_are_readable() {
        let cases = [
            (Value::Int(MAX_SAFE_INT + 1), json!("9007199254740993")),
            (Value::Int(MAX_SAFE_INT), json!(9007199254740992i64)),
            (Value::Float32(0.1), json!(0.1)),
            (Value::Float64(f64::NAN), json!("NaN")),
            (Value::Decimal("12.3400".into()), json!("12.3400")),
            (
                Value::TimestampTz(1_700_000_000_123_456),
                json!("2023-11-14T22:13:20.123456Z"),
            ),
            (Value::Timestamp(0), json!("1970-01-01T00:00:00")),
            (Value::Date(19_000), json!("2022-01-08")),
            (Value::Time(3_723_000_004), json!("01:02:03.000004")),
            (Value::Time(-18_062_500_000), json!("-05:01:02.500000")),
            (Value::Time(360_000_000_000), json!("100:00:00")),
            (Value::Time(86_400_000_000), json!("24:00:00")),
            (
                Value::TimeTz {
                    micros: 0,
                    offset_seconds: 3600,
                },
                json!("00:00:00+01:00"),
            ),
            (
                Value::Interval {
                    months: 14,
                    days: 3,
                    micros: 4 * 3_600_000_000 + 5_500_000,
                },
                json!("P1Y2M3DT4H0M5.500000S"),
            ),
            (Value::Bytes(b"hi".to_vec()), json!("aGk=")),
            (
                Value::Uuid([0xab; 16]),
                json!("abababab-abab-abab-abab-abababababab"),
            ),
            (Value::Unchanged, json!(UNAVAILABLE)),
        ];
        for (value, expected) in cases {
            assert_eq!(value_json(&value), expected, "{value:?}");
        }
    }

    #[test]
    fn composite_keys_escape_their_separator() {
        let key = Row(vec![
            ("a".into(), Value::Text("x:y".into())),
            ("b".into(), Value::Int(7)),
        ]);
        assert_eq!(key_text(&key), r"x\:y:7");
        assert_eq!(key_text(&Row(vec![("id".into(), Value::Int(42))])), "42");
    }
}
