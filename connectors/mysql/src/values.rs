//! Values as the server sends them — a binlog row image (decoded by `mysql_common` with the
//! table map) or a binary-protocol result row (the snapshot) — into siphon's values, by the
//! column's type. A value that does not decode travels as text, with a warning.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use mysql_async::Value as My;
use siphon_core::Value;

use crate::charset::Charset;
use crate::columns::{ColumnInfo, DataType};

const EPOCH: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();

/// The value of `column`. Zero dates (`0000-00-00`), which no calendar holds, are NULL, as
/// Debezium makes them.
pub fn value(column: &ColumnInfo, v: My) -> Value {
    match decode(&column.data_type, v) {
        Ok(value) => value,
        Err(v) => {
            tracing::warn!(column = %column.name, value = ?v, "a value siphon cannot decode: kept as text");
            Value::Text(text(v))
        }
    }
}

/// Decodes `v`, or gives it back.
fn decode(data_type: &DataType, v: My) -> Result<Value, My> {
    let utf8 = |b: Vec<u8>| String::from_utf8(b).map_err(|e| My::Bytes(e.into_bytes()));
    Ok(match (data_type, v) {
        (_, My::NULL) => Value::Null,
        (DataType::Integer, My::Int(i)) => Value::Int(i),
        (DataType::Integer, My::UInt(u)) => Value::Int(i64::try_from(u).map_err(|_| My::UInt(u))?),
        (DataType::BigUnsigned, My::UInt(u)) => Value::Decimal(u.to_string()),
        // The binlog carries unsigned bigints as their two's complement when the table map
        // lacks signedness.
        (DataType::BigUnsigned, My::Int(i)) => Value::Decimal((i as u64).to_string()),
        (DataType::Float, My::Float(f)) => Value::Float32(f),
        (DataType::Float, My::Double(d)) => Value::Float64(d),
        (DataType::Decimal, My::Bytes(b)) if is_decimal(&b) => Value::Decimal(utf8(b)?),
        (DataType::Bit1, My::Bytes(b)) => Value::Bool(b.iter().any(|x| *x != 0)),
        (DataType::Bit1, My::Int(i)) => Value::Bool(i != 0),
        (DataType::Bits | DataType::Binary, My::Bytes(b)) => Value::Bytes(b),
        (DataType::Geometry, My::Bytes(b)) => geometry(&b).ok_or(My::Bytes(b))?,
        (DataType::FixedBinary(n), My::Bytes(b)) => Value::Bytes(padded(&b, *n)),
        (DataType::Bits, My::Int(i)) => Value::Bytes(trimmed_be(i as u64)),
        (DataType::Bits, My::UInt(u)) => Value::Bytes(trimmed_be(u)),
        (DataType::Text(set), My::Bytes(b)) => Value::Text(text_in(*set, b)),
        (DataType::Set(_), My::Bytes(b)) => Value::Text(utf8(b)?),
        (DataType::Json, My::Bytes(b)) => Value::Json(utf8(b)?),
        (DataType::Enum(_), My::Int(i)) => {
            Value::Enum(data_type.enum_label(i as u64).ok_or(My::Int(i))?)
        }
        (DataType::Enum(_), My::Bytes(b)) => Value::Enum(utf8(b)?),
        (DataType::Set(_), My::Int(bits)) => {
            Value::Text(data_type.set_labels(bits as u64).ok_or(My::Int(bits))?)
        }
        (DataType::Date | DataType::DateTime | DataType::Timestamp, My::Date(0, 0, 0, ..)) => {
            Value::Null
        }
        (DataType::Date, My::Date(y, m, d, h, mi, s, us)) => {
            match NaiveDate::from_ymd_opt(i32::from(y), u32::from(m), u32::from(d))
                .and_then(|date| i32::try_from((date - EPOCH).num_days()).ok())
            {
                Some(days) => Value::Date(days),
                None => return Err(My::Date(y, m, d, h, mi, s, us)),
            }
        }
        (DataType::DateTime, v @ My::Date(..)) => Value::Timestamp(micros(&v).ok_or(v)?),
        // The snapshot's session runs in UTC, so its TIMESTAMPs are UTC.
        (DataType::Timestamp, v @ My::Date(..)) => Value::TimestampTz(micros(&v).ok_or(v)?),
        // The binlog gives a TIMESTAMP as seconds since the epoch, with its fraction; 0 is
        // the zero TIMESTAMP, NULL as a query reads it.
        (DataType::Timestamp, My::Bytes(b)) => match epoch_micros(&b).ok_or(My::Bytes(b))? {
            0 => Value::Null,
            micros => Value::TimestampTz(micros),
        },
        (DataType::Time, My::Time(negative, days, h, m, s, us)) => {
            let micros =
                ((i64::from(days) * 24 + i64::from(h)) * 3600 + i64::from(m) * 60 + i64::from(s))
                    * 1_000_000
                    + i64::from(us);
            Value::Time(if negative { -micros } else { micros })
        }
        (DataType::Integer, My::Bytes(b)) => Value::Int(
            std::str::from_utf8(&b)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or(My::Bytes(b))?,
        ),
        (_, v) => return Err(v),
    })
}

/// Whether `b` is a decimal number's text (`-12.30`): mysql_common writes the digit groups of
/// bytes no server writes as it finds them (`1234567890.-1`).
fn is_decimal(b: &[u8]) -> bool {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let (whole, fraction) = match digits.iter().position(|c| *c == b'.') {
        Some(dot) => (&digits[..dot], Some(&digits[dot + 1..])),
        None => (digits, None),
    };
    let all_digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    all_digits(whole) && fraction.is_none_or(all_digits)
}

/// Text in `set`; where some bytes do not decode, they are replaced, with a warning.
pub fn text_in<'b>(set: Charset, bytes: impl Into<std::borrow::Cow<'b, [u8]>>) -> String {
    let (text, clean) = set.decode(bytes);
    if !clean {
        tracing::warn!(charset = ?set, "a string with bytes its character set does not hold: kept with U+FFFD in their place");
    }
    text
}

/// A `binary(n)` value with the trailing zero bytes the binlog dropped put back.
pub fn padded(bytes: &[u8], n: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if out.len() < n {
        out.resize(n, 0);
    }
    out
}

/// `seconds[.fraction]` since the epoch, in microseconds. mysql_common writes the seconds,
/// four bytes unsigned in the row image, as signed: those past 2038-01-19 (MariaDB 11.5
/// holds them to 2106) come negative, and are put back.
fn epoch_micros(b: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(b).ok()?;
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = format!("{frac:0<6}");
    let secs = match secs.parse::<i64>().ok()? {
        s if s < 0 => s + (1 << 32),
        s => s,
    };
    Some(secs.checked_mul(1_000_000)? + frac.get(..6)?.parse::<i64>().ok()?)
}

fn micros(v: &My) -> Option<i64> {
    let My::Date(y, mo, d, h, mi, s, us) = v else {
        return None;
    };
    let at = NaiveDateTime::new(
        NaiveDate::from_ymd_opt(i32::from(*y), u32::from(*mo), u32::from(*d))?,
        NaiveTime::from_hms_micro_opt(u32::from(*h), u32::from(*mi), u32::from(*s), *us)?,
    );
    Some(at.and_utc().timestamp_micros())
}

/// The bytes of a bit value, most significant first, without leading zero bytes.
fn trimmed_be(v: u64) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(7);
    bytes[first..].to_vec()
}

/// A value as text, for one that does not decode.
fn text(v: My) -> String {
    match v {
        My::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
        other => other.as_sql(true),
    }
}

/// MySQL's internal geometry — the SRID, 4 bytes little-endian, then standard WKB — as a
/// [`Value::Geometry`]; `None` for fewer bytes than an SRID and a WKB header.
pub fn geometry(internal: &[u8]) -> Option<Value> {
    if internal.len() < 4 + 5 {
        return None;
    }
    let (srid, wkb) = internal.split_at(4);
    Some(Value::Geometry {
        wkb: wkb.to_vec(),
        srid: u32::from_le_bytes(srid.try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::from_catalog;

    fn col(data_type: &str, column_type: &str) -> ColumnInfo {
        from_catalog(
            "c",
            data_type,
            column_type,
            true,
            (Some(10), Some(2)),
            false,
        )
    }

    #[test]
    fn values_decode_by_the_column_type() {
        assert_eq!(value(&col("int", "int"), My::Int(-5)), Value::Int(-5));
        assert_eq!(
            value(&col("bigint", "bigint unsigned"), My::Int(-1)),
            Value::Decimal("18446744073709551615".into())
        );
        assert_eq!(
            value(
                &col("decimal", "decimal(10,2)"),
                My::Bytes(b"-12.50".to_vec())
            ),
            Value::Decimal("-12.50".into())
        );
        assert_eq!(
            value(&col("enum", "enum('a','b')"), My::Int(2)),
            Value::Enum("b".into())
        );
        assert_eq!(
            value(&col("set", "set('a','b','c')"), My::Int(5)),
            Value::Text("a,c".into())
        );
        assert_eq!(
            value(
                &col("timestamp", "timestamp(6)"),
                My::Bytes(b"1700000000.5".to_vec())
            ),
            Value::TimestampTz(1_700_000_000_500_000)
        );
        assert_eq!(
            value(
                &col("datetime", "datetime"),
                My::Date(2024, 2, 29, 10, 11, 12, 5)
            ),
            Value::Timestamp(1_709_201_472_000_005)
        );
        assert_eq!(
            value(&col("date", "date"), My::Date(0, 0, 0, 0, 0, 0, 0)),
            Value::Null
        );
        assert_eq!(
            value(&col("time", "time"), My::Time(true, 1, 2, 0, 0, 0)),
            Value::Time(-(26 * 3600 * 1_000_000))
        );
        assert_eq!(
            value(&col("bit", "bit(1)"), My::Bytes(vec![1])),
            Value::Bool(true)
        );
        assert_eq!(
            value(&col("int", "int"), My::Bytes(vec![0xff])),
            Value::Text("\u{fffd}".into()),
            "an undecodable value travels as text"
        );
    }
}
