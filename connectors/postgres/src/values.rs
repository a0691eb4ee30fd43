//! PostgreSQL's text output of each type, to exact event values. pgoutput (text mode) and
//! `COPY … TO STDOUT` both produce this text, so snapshots and streaming share one decoder.

use std::borrow::Cow;

use chrono::NaiveDate;
use siphon_core::Value;

/// How siphon decodes a column type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgType {
    /// bool
    Bool,
    /// int2, int4, int8, oid
    Int,
    /// float4
    Float32,
    /// float8
    Float64,
    /// numeric: exact text
    Numeric,
    /// text, varchar, char, name
    Text,
    /// bytea (hex output)
    Bytea,
    /// date
    Date,
    /// time
    Time,
    /// timetz
    TimeTz,
    /// timestamp
    Timestamp,
    /// timestamptz
    TimestampTz,
    /// interval (IntervalStyle postgres, the default)
    Interval,
    /// uuid
    Uuid,
    /// json, jsonb
    Json,
    /// an enum type
    Enum,
    /// an array of the element type
    Array(Box<PgType>),
    /// anything else, kept as the server prints it, with the type's name
    Other(String),
}

impl PgType {
    /// The built-in types by OID, arrays included.
    pub fn builtin(oid: u32) -> Option<PgType> {
        use PgType::*;
        Some(match oid {
            16 => Bool,
            20 | 21 | 23 => Int,
            // An oid is unsigned: kept as text so that no value comes out negative.
            26 => Other("oid".into()),
            700 => Float32,
            701 => Float64,
            1700 => Numeric,
            25 | 1043 | 1042 | 19 | 18 => Text,
            17 => Bytea,
            1082 => Date,
            1083 => Time,
            1266 => TimeTz,
            1114 => Timestamp,
            1184 => TimestampTz,
            1186 => Interval,
            2950 => Uuid,
            114 | 3802 => Json,
            869 => Other("inet".into()),
            650 => Other("cidr".into()),
            829 => Other("macaddr".into()),
            774 => Other("macaddr8".into()),
            790 => Other("money".into()),
            1560 => Other("bit".into()),
            1562 => Other("varbit".into()),
            1000 => Array(Box::new(Bool)),
            1005 | 1007 | 1016 => Array(Box::new(Int)),
            1028 => Array(Box::new(Other("oid".into()))),
            1021 => Array(Box::new(Float32)),
            1022 => Array(Box::new(Float64)),
            1231 => Array(Box::new(Numeric)),
            1009 | 1015 | 1014 | 1003 | 1002 => Array(Box::new(Text)),
            1001 => Array(Box::new(Bytea)),
            1182 => Array(Box::new(Date)),
            1183 => Array(Box::new(Time)),
            1270 => Array(Box::new(TimeTz)),
            1115 => Array(Box::new(Timestamp)),
            1185 => Array(Box::new(TimestampTz)),
            1187 => Array(Box::new(Interval)),
            2951 => Array(Box::new(Uuid)),
            199 | 3807 => Array(Box::new(Json)),
            1041 => Array(Box::new(Other("inet".into()))),
            651 => Array(Box::new(Other("cidr".into()))),
            1040 => Array(Box::new(Other("macaddr".into()))),
            791 => Array(Box::new(Other("money".into()))),
            1561 => Array(Box::new(Other("bit".into()))),
            1563 => Array(Box::new(Other("varbit".into()))),
            _ => return None,
        })
    }
}

/// Like [`decode_text`] for text that may be borrowed or owned: text-like values take an owned
/// buffer as it is, other types parse without copying. On error the text comes back.
pub fn decode_cow<'a>(ty: &PgType, text: Cow<'a, str>) -> Result<Value, (String, Cow<'a, str>)> {
    Ok(match ty {
        PgType::Text => Value::Text(text.into_owned()),
        PgType::Numeric => Value::Decimal(text.into_owned()),
        PgType::Json => Value::Json(text.into_owned()),
        PgType::Enum => Value::Enum(text.into_owned()),
        PgType::Other(name) => Value::Other {
            type_name: name.clone(),
            text: text.into_owned(),
        },
        _ => return decode_text(ty, &text).map_err(|e| (e, text)),
    })
}

/// Decodes the server's text for a value of `ty`.
pub fn decode_text(ty: &PgType, text: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("not a valid {what}: {text:?}");
    Ok(match ty {
        PgType::Bool => match text {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => return Err(bad("bool")),
        },
        PgType::Int => Value::Int(text.parse().map_err(|_| bad("integer"))?),
        PgType::Float32 => Value::Float32(parse_float(text).ok_or_else(|| bad("float4"))? as f32),
        PgType::Float64 => Value::Float64(parse_float(text).ok_or_else(|| bad("float8"))?),
        PgType::Numeric => Value::Decimal(text.to_owned()),
        PgType::Text => Value::Text(text.to_owned()),
        PgType::Bytea => Value::Bytes(parse_bytea(text).ok_or_else(|| bad("bytea"))?),
        PgType::Date => Value::Date(parse_date(text).ok_or_else(|| bad("date"))?),
        PgType::Time => Value::Time(parse_time(text).ok_or_else(|| bad("time"))?),
        PgType::TimeTz => {
            let (time, offset) = split_offset(text).ok_or_else(|| bad("timetz"))?;
            Value::TimeTz {
                micros: parse_time(time).ok_or_else(|| bad("timetz"))?,
                offset_seconds: offset,
            }
        }
        PgType::Timestamp => {
            Value::Timestamp(parse_timestamp(text).ok_or_else(|| bad("timestamp"))?)
        }
        PgType::TimestampTz => {
            Value::TimestampTz(parse_timestamptz(text).ok_or_else(|| bad("timestamptz"))?)
        }
        PgType::Interval => {
            let (months, days, micros) = parse_interval(text).ok_or_else(|| bad("interval"))?;
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        PgType::Uuid => Value::Uuid(parse_uuid(text).ok_or_else(|| bad("uuid"))?),
        PgType::Json => Value::Json(text.to_owned()),
        PgType::Enum => Value::Enum(text.to_owned()),
        PgType::Array(elem) => parse_array(elem, text)?,
        PgType::Other(name) => Value::Other {
            type_name: name.clone(),
            text: text.to_owned(),
        },
    })
}

fn parse_float(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

fn parse_bytea(text: &str) -> Option<Vec<u8>> {
    let hex = text.strip_prefix("\\x")?;
    if !hex.is_ascii() || hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let bytes = parse_bytea(&format!("\\x{hex}"))?;
    bytes.try_into().ok()
}

const EPOCH: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();

/// Splits a trailing " BC" off; PostgreSQL's year 1 BC is year 0 in ISO counting.
fn era(text: &str) -> (&str, bool) {
    match text.strip_suffix(" BC") {
        Some(t) => (t, true),
        None => (text, false),
    }
}

fn parse_naive_date(text: &str, bc: bool) -> Option<NaiveDate> {
    let mut parts = text.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    NaiveDate::from_ymd_opt(if bc { 1 - year } else { year }, month, day)
}

fn parse_date(text: &str) -> Option<i32> {
    match text {
        "infinity" => Some(i32::MAX),
        "-infinity" => Some(i32::MIN),
        _ => {
            let (t, bc) = era(text);
            i32::try_from(
                parse_naive_date(t, bc)?
                    .signed_duration_since(EPOCH)
                    .num_days(),
            )
            .ok()
        }
    }
}

/// "HH:MM:SS[.ffffff]" (hand-written: this runs for every time and timestamp value).
fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let num = |s: &[u8]| -> Option<i64> {
        s.iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (h, m, sec) = (num(&b[0..2])?, num(&b[3..5])?, num(&b[6..8])?);
    if h > 24 || m > 59 || sec > 60 || (h == 24 && (m, sec) != (0, 0)) {
        return None;
    }
    let frac = match &b[8..] {
        [] => 0,
        [b'.', digits @ ..] if !digits.is_empty() && digits.len() <= 6 => {
            num(digits)? * 10i64.pow(6 - digits.len() as u32)
        }
        _ => return None,
    };
    Some(((h * 60 + m) * 60 + sec) * 1_000_000 + frac)
}

/// Splits "…+05:30" into the rest and the offset in seconds (east positive).
fn split_offset(text: &str) -> Option<(&str, i32)> {
    let at = text.rfind(['+', '-'])?;
    // A date's dashes come before the time; the offset's sign comes after a digit of the time.
    if at < text.find(':').unwrap_or(0) {
        return None;
    }
    let (rest, off) = text.split_at(at);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let mut secs = 0;
    for (i, part) in off[1..].split(':').enumerate() {
        let n: i32 = part.parse().ok()?;
        secs += n * [3600, 60, 1].get(i)?;
    }
    Some((rest, sign * secs))
}

/// Microseconds since the epoch of a "YYYY-MM-DD HH:MM:SS[.ffffff][ BC]" local time.
fn parse_naive_datetime(text: &str) -> Option<i64> {
    let (t, bc) = era(text);
    let (date, time) = t.split_once(' ')?;
    let days = parse_naive_date(date, bc)?
        .signed_duration_since(EPOCH)
        .num_days();
    Some(days * 86_400_000_000 + parse_time(time)?)
}

fn parse_timestamp(text: &str) -> Option<i64> {
    match text {
        "infinity" => Some(i64::MAX),
        "-infinity" => Some(i64::MIN),
        _ => parse_naive_datetime(text),
    }
}

fn parse_timestamptz(text: &str) -> Option<i64> {
    match text {
        "infinity" => Some(i64::MAX),
        "-infinity" => Some(i64::MIN),
        _ => {
            let (t, bc) = era(text);
            let (rest, offset) = split_offset(t)?;
            let local = if bc {
                parse_naive_datetime(&format!("{rest} BC"))?
            } else {
                parse_naive_datetime(rest)?
            };
            Some(local - i64::from(offset) * 1_000_000)
        }
    }
}

/// IntervalStyle `postgres`: "1 year 2 mons -3 days 04:05:06.789".
fn parse_interval(text: &str) -> Option<(i32, i32, i64)> {
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i64);
    let mut tokens = text.split_whitespace().peekable();
    while let Some(tok) = tokens.next() {
        if tok.contains(':') {
            let (neg, t) = match tok.strip_prefix('-') {
                Some(t) => (true, t),
                None => (false, tok.strip_prefix('+').unwrap_or(tok)),
            };
            let mut parts = t.split(':');
            let h: i64 = parts.next()?.parse().ok()?;
            let m: i64 = parts.next()?.parse().ok()?;
            let s = parts.next().unwrap_or("0");
            let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
            let frac_us: i64 = if frac.is_empty() {
                0
            } else {
                format!("{frac:0<6}").get(..6)?.parse().ok()?
            };
            let us = h * 3_600_000_000
                + m * 60_000_000
                + whole.parse::<i64>().ok()? * 1_000_000
                + frac_us;
            micros += if neg { -us } else { us };
            continue;
        }
        let n: i64 = tok.parse().ok()?;
        match tokens.next()?.trim_end_matches('s') {
            "year" => months += n * 12,
            "mon" => months += n,
            "day" => days += n,
            _ => return None,
        }
    }
    Some((
        i32::try_from(months).ok()?,
        i32::try_from(days).ok()?,
        micros,
    ))
}

/// An array literal: `{1,2,NULL}`, `{{"a b","c\"d"},{e,NULL}}`, `[0:1]={1,2}`.
fn parse_array(elem: &PgType, text: &str) -> Result<Value, String> {
    let body = match text.strip_prefix('[') {
        Some(_) => text
            .split_once('=')
            .map(|(_, b)| b)
            .ok_or_else(|| format!("bad array {text:?}"))?,
        None => text,
    };
    let mut chars = body.chars().peekable();
    let value =
        parse_array_level(elem, &mut chars).ok_or_else(|| format!("bad array {text:?}"))??;
    if chars.next().is_some() {
        return Err(format!("trailing text after array {text:?}"));
    }
    Ok(value)
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn parse_array_level(elem: &PgType, chars: &mut Chars<'_>) -> Option<Result<Value, String>> {
    if chars.next()? != '{' {
        return None;
    }
    let mut items = Vec::new();
    if chars.peek() == Some(&'}') {
        chars.next();
        return Some(Ok(Value::Array(items)));
    }
    loop {
        let item = match chars.peek()? {
            '{' => match parse_array_level(elem, chars)? {
                Ok(v) => v,
                Err(e) => return Some(Err(e)),
            },
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next()? {
                        '\\' => s.push(chars.next()?),
                        '"' => break,
                        c => s.push(c),
                    }
                }
                match decode_text(elem, &s) {
                    Ok(v) => v,
                    Err(e) => return Some(Err(e)),
                }
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '}' {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                if s.eq_ignore_ascii_case("NULL") {
                    Value::Null
                } else {
                    match decode_text(elem, s.trim()) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        };
        items.push(item);
        match chars.next()? {
            ',' => {}
            '}' => return Some(Ok(Value::Array(items))),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ty: impl std::borrow::Borrow<PgType>, text: &str) -> Value {
        decode_text(ty.borrow(), text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn scalars() {
        assert_eq!(d(PgType::Bool, "t"), Value::Bool(true));
        assert_eq!(d(PgType::Int, "-9223372036854775808"), Value::Int(i64::MIN));
        assert_eq!(d(PgType::Float32, "0.1"), Value::Float32(0.1));
        assert!(matches!(d(PgType::Float64, "NaN"), Value::Float64(f) if f.is_nan()));
        assert_eq!(
            d(PgType::Float64, "-Infinity"),
            Value::Float64(f64::NEG_INFINITY)
        );
        assert_eq!(
            d(PgType::Numeric, "12.3400"),
            Value::Decimal("12.3400".into())
        );
        assert_eq!(
            d(PgType::Bytea, "\\x00ff10"),
            Value::Bytes(vec![0, 255, 16])
        );
        assert_eq!(
            d(PgType::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Value::Uuid([
                0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
                0x0a, 0x11
            ])
        );
    }

    #[test]
    fn dates_and_times() {
        assert_eq!(d(PgType::Date, "1970-01-02"), Value::Date(1));
        assert_eq!(d(PgType::Date, "infinity"), Value::Date(i32::MAX));
        assert_eq!(d(PgType::Date, "0001-01-01 BC"), Value::Date(-719_528)); // ISO year 0
        assert_eq!(
            d(PgType::Time, "01:02:03.000004"),
            Value::Time(3_723_000_004)
        );
        assert_eq!(d(PgType::Time, "24:00:00"), Value::Time(86_400_000_000));
        assert_eq!(
            d(PgType::TimeTz, "01:00:00+05:30"),
            Value::TimeTz {
                micros: 3_600_000_000,
                offset_seconds: 19_800
            }
        );
        assert_eq!(
            d(PgType::TimeTz, "01:00:00-08"),
            Value::TimeTz {
                micros: 3_600_000_000,
                offset_seconds: -28_800
            }
        );
        assert_eq!(
            d(PgType::Timestamp, "1970-01-01 00:00:01.5"),
            Value::Timestamp(1_500_000)
        );
        assert_eq!(
            d(PgType::TimestampTz, "1970-01-01 01:00:00+01"),
            Value::TimestampTz(0)
        );
        assert_eq!(
            d(PgType::TimestampTz, "2023-11-14 22:13:20.123456+00"),
            Value::TimestampTz(1_700_000_000_123_456)
        );
        assert_eq!(
            d(PgType::TimestampTz, "-infinity"),
            Value::TimestampTz(i64::MIN)
        );
    }

    #[test]
    fn intervals() {
        let iv = |months, days, micros| Value::Interval {
            months,
            days,
            micros,
        };
        assert_eq!(
            d(PgType::Interval, "1 year 2 mons 3 days 04:05:06.789"),
            iv(14, 3, 14_706_789_000)
        );
        assert_eq!(
            d(PgType::Interval, "-1 days -00:00:03"),
            iv(0, -1, -3_000_000)
        );
        assert_eq!(d(PgType::Interval, "00:00:00"), iv(0, 0, 0));
        assert_eq!(d(PgType::Interval, "-2 years +3 mons"), iv(-21, 0, 0));
    }

    #[test]
    fn arrays() {
        let ints = PgType::Array(Box::new(PgType::Int));
        assert_eq!(
            d(ints.clone(), "{1,NULL,3}"),
            Value::Array(vec![Value::Int(1), Value::Null, Value::Int(3)])
        );
        assert_eq!(d(ints.clone(), "{}"), Value::Array(vec![]));
        assert_eq!(
            d(ints.clone(), "{{1,2},{3,4}}"),
            Value::Array(vec![
                Value::Array(vec![Value::Int(1), Value::Int(2)]),
                Value::Array(vec![Value::Int(3), Value::Int(4)])
            ])
        );
        assert_eq!(
            d(ints, "[0:1]={7,8}"),
            Value::Array(vec![Value::Int(7), Value::Int(8)])
        );
        let texts = PgType::Array(Box::new(PgType::Text));
        assert_eq!(
            d(texts, r#"{"a b","c\"d",NULL,"NULL",plain}"#),
            Value::Array(vec![
                Value::Text("a b".into()),
                Value::Text("c\"d".into()),
                Value::Null,
                Value::Text("NULL".into()),
                Value::Text("plain".into())
            ])
        );
    }

    #[test]
    fn bad_text_is_an_error_not_a_panic() {
        assert!(decode_text(&PgType::Int, "twelve").is_err());
        assert!(decode_text(&PgType::Array(Box::new(PgType::Int)), "{1,2").is_err());
        assert!(decode_text(&PgType::Date, "yesterday").is_err());
    }

    /// Found by the pgoutput fuzz target: hex text with a character of more than one byte
    /// panicked, cut inside it.
    #[test]
    fn hex_with_other_characters_is_an_error_not_a_panic() {
        assert!(decode_text(&PgType::Uuid, "a\u{21a}ebc999c0b4ef8bb6d6bb9bd380a11").is_err());
        assert!(decode_text(&PgType::Bytea, "\\x\u{21a}\u{21a}").is_err());
        assert_eq!(
            decode_text(&PgType::Bytea, "\\xdeadbeef"),
            Ok(Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]))
        );
    }
}
