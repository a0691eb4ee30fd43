//! MySQL's binary JSON (a JSON column in a row image) as the text the server gives for the same
//! value in a query, so that a document reads the same streamed as snapshotted: keys in their
//! stored order, `": "` and `", "` between names, values and entries, temporal scalars with six
//! fractional digits, a DECIMAL as its number, any other opaque scalar as
//! `"base64:type<code>:<data>"` (Debezium's `DatabaseJsonStringFormatter` writes the same).
//! `mysql_common` parses the binary form; its own conversion to JSON sorts the keys and refuses
//! a whole document holding any opaque scalar (a DECIMAL, DATE or TIME inside the JSON).

use std::fmt::Write as _;

use base64::Engine as _;
use mysql_async::consts::ColumnType;
use mysql_common::binlog::jsonb::{self, Array, ComplexValue, Object, StorageFormat};
use mysql_common::io::ParseBuf;

/// The text of the binary JSON `binary`, or `None` where the bytes hold no JSON document. An
/// empty value is JSON's `null`, as MySQL reads it.
pub fn text(binary: &[u8]) -> Option<String> {
    document(&ParseBuf(binary).parse(()).ok()?)
}

/// The text of a binary JSON document `mysql_common` has parsed; `None` where its inner bytes
/// hold no JSON.
pub fn document(value: &jsonb::Value<'_>) -> Option<String> {
    let mut out = String::new();
    write(value, &mut out)?;
    Some(out)
}

fn write(value: &jsonb::Value<'_>, out: &mut String) -> Option<()> {
    use jsonb::Value as J;
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::I16(x) => write!(out, "{x}").ok()?,
        J::U16(x) => write!(out, "{x}").ok()?,
        J::I32(x) => write!(out, "{x}").ok()?,
        J::U32(x) => write!(out, "{x}").ok()?,
        J::I64(x) => write!(out, "{x}").ok()?,
        J::U64(x) => write!(out, "{x}").ok()?,
        // The shortest text that reads back as the same double (`1.0`, `1e300`); MySQL's JSON
        // holds no infinity or NaN.
        J::F64(x) => out.push_str(&serde_json::Number::from_f64(*x)?.to_string()),
        J::String(s) => string(std::str::from_utf8(s.str_raw()).ok()?, out),
        J::SmallArray(a) => array(a, out)?,
        J::LargeArray(a) => array(a, out)?,
        J::SmallObject(o) => object(o, out)?,
        J::LargeObject(o) => object(o, out)?,
        J::Opaque(o) => opaque(o.value_type(), o.data_raw(), out)?,
    }
    Some(())
}

fn string(s: &str, out: &mut String) {
    // serde_json's escaping of a string is JSON's; it cannot fail for a `str`.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

fn array<T: StorageFormat>(a: &ComplexValue<'_, T, Array>, out: &mut String) -> Option<()> {
    out.push('[');
    for (i, element) in a.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(&element.ok()?, out)?;
    }
    out.push(']');
    Some(())
}

fn object<T: StorageFormat>(o: &ComplexValue<'_, T, Object>, out: &mut String) -> Option<()> {
    out.push('{');
    for (i, entry) in o.iter().enumerate() {
        let (key, value) = entry.ok()?;
        if i > 0 {
            out.push_str(", ");
        }
        string(std::str::from_utf8(key.value_raw()).ok()?, out);
        out.push_str(": ");
        write(&value, out)?;
    }
    out.push('}');
    Some(())
}

/// An opaque scalar: a MySQL value of a type JSON has none of, stored in the server's binary
/// form (a DECIMAL as its precision, scale and binary digits; a temporal as its packed 8-byte
/// integer).
fn opaque(ty: ColumnType, data: &[u8], out: &mut String) -> Option<()> {
    use ColumnType::*;
    let packed = || data.first_chunk::<8>().map(|b| i64::from_le_bytes(*b));
    match ty {
        MYSQL_TYPE_NEWDECIMAL => {
            let (precision, scale) = (usize::from(*data.first()?), usize::from(*data.get(1)?));
            let (text, _) = crate::binary::decimal(precision, scale, data.get(2..)?)?;
            out.push_str(&text);
        }
        MYSQL_TYPE_DATE => {
            let (date, _) = datetime(packed()?);
            write!(out, "\"{date}\"").ok()?;
        }
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_TIMESTAMP => {
            let (date, time) = datetime(packed()?);
            write!(out, "\"{date} {time}\"").ok()?;
        }
        MYSQL_TYPE_TIME => {
            let packed = packed()?;
            let sign = if packed < 0 { "-" } else { "" };
            let (hms, micros) = split(packed.unsigned_abs());
            let (hour, minute, second) = ((hms >> 12) % (1 << 10), (hms >> 6) % 64, hms % 64);
            write!(
                out,
                "\"{sign}{hour:02}:{minute:02}:{second:02}.{micros:06}\""
            )
            .ok()?;
        }
        _ => {
            let data = base64::engine::general_purpose::STANDARD.encode(data);
            write!(out, "\"base64:type{}:{data}\"", ty as u8).ok()?;
        }
    }
    Some(())
}

/// A packed value's integer part and its fraction (microseconds).
fn split(packed: u64) -> (u64, u64) {
    (packed >> 24, packed % (1 << 24))
}

/// A packed DATETIME (MySQL's `TIME_from_longlong_datetime_packed`) as its date and its time
/// of day (six fractional digits).
fn datetime(packed: i64) -> (String, String) {
    let (ymdhms, micros) = split(packed.unsigned_abs());
    let (ymd, hms) = (ymdhms >> 17, ymdhms % (1 << 17));
    let (year_month, day) = (ymd >> 5, ymd % 32);
    let (year, month) = (year_month / 13, year_month % 13);
    let (hour, minute, second) = (hms >> 12, (hms >> 6) % 64, hms % 64);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{hour:02}:{minute:02}:{second:02}.{micros:06}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small object of `entries` (key, type, value); MySQL's layout:
    /// count, size, key entries (offset, length), value entries (type, value), keys, values.
    fn small_object(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
        let n = entries.len();
        let header = 4 + n * 4 + n * 3;
        let keys: usize = entries.iter().map(|(k, ..)| k.len()).sum();
        let mut tail = Vec::new();
        let mut key_entries = Vec::new();
        let mut value_entries = Vec::new();
        let mut key_at = header;
        for (key, ..) in entries {
            key_entries.extend_from_slice(&(key_at as u16).to_le_bytes());
            key_entries.extend_from_slice(&(key.len() as u16).to_le_bytes());
            key_at += key.len();
        }
        let mut value_at = header + keys;
        for (_, ty, value) in entries {
            value_entries.push(*ty);
            // Literals and 16-bit integers sit in the entry itself (the small format).
            if matches!(ty, 0x04..=0x06) {
                let mut inline = value.to_vec();
                inline.resize(2, 0);
                value_entries.extend_from_slice(&inline);
            } else {
                value_entries.extend_from_slice(&(value_at as u16).to_le_bytes());
                tail.extend_from_slice(value);
                value_at += value.len();
            }
        }
        let size = value_at;
        let mut out = vec![0x00];
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&(size as u16).to_le_bytes());
        out.extend(key_entries);
        out.extend(value_entries);
        for (key, ..) in entries {
            out.extend_from_slice(key.as_bytes());
        }
        out.extend(tail);
        out
    }

    /// An opaque scalar's body: its column type, its length (one byte here) and its data.
    fn opaque_body(ty: ColumnType, data: &[u8]) -> Vec<u8> {
        let mut out = vec![ty as u8, data.len() as u8];
        out.extend_from_slice(data);
        out
    }

    fn packed_datetime(y: u64, mo: u64, d: u64, h: u64, mi: u64, s: u64, micros: u64) -> [u8; 8] {
        let ymdhms = ((y * 13 + mo) << 5 | d) << 17 | h << 12 | mi << 6 | s;
        ((ymdhms << 24 | micros) as i64).to_le_bytes()
    }

    #[test]
    fn scalars_and_containers_read_as_the_server_writes_them() {
        assert_eq!(text(&[]).as_deref(), Some("null"));
        assert_eq!(text(&[0x04, 0x01]).as_deref(), Some("true"));
        assert_eq!(text(&[0x05, 0xfe, 0xff]).as_deref(), Some("-2"));
        let mut double = vec![0x0b];
        double.extend_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(text(&double).as_deref(), Some("1.5"));
        assert_eq!(
            text(&[0x0c, 5, b'a', b'"', b'b', b'\n', b'c']).as_deref(),
            Some(r#""a\"b\nc""#)
        );
        // {"b": 1, "aa": "x"}: MySQL stores keys by length, then bytes, and prints them so.
        let doc = small_object(&[("b", 0x05, &[1, 0]), ("aa", 0x0c, &[1, b'x'])]);
        assert_eq!(text(&doc).as_deref(), Some(r#"{"b": 1, "aa": "x"}"#));
    }

    /// Found reading mysql_common's conversion: a document holding a DECIMAL, DATE or TIME
    /// (stored as opaque scalars) did not convert at all, and the stream carried the column
    /// as NULL.
    #[test]
    fn opaque_scalars_read_as_numbers_and_temporals() {
        // DECIMAL(4,2) 12.50: precision, scale, binary digits.
        let decimal = opaque_body(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[4, 2, 0x8c, 0x32]);
        let date = opaque_body(
            ColumnType::MYSQL_TYPE_DATE,
            &packed_datetime(2024, 2, 29, 0, 0, 0, 0),
        );
        let datetime = opaque_body(
            ColumnType::MYSQL_TYPE_DATETIME,
            &packed_datetime(1999, 12, 31, 23, 59, 58, 250_000),
        );
        // TIME -838:59:59.5: the packed value negated.
        let time_packed = -(((838u64 << 12 | 59 << 6 | 59) << 24 | 500_000) as i64);
        let time = opaque_body(ColumnType::MYSQL_TYPE_TIME, &time_packed.to_le_bytes());
        let geometry = opaque_body(ColumnType::MYSQL_TYPE_GEOMETRY, &[1, 2, 3]);
        let doc = small_object(&[
            ("d", 0x0f, &decimal),
            ("t", 0x0f, &time),
            ("da", 0x0f, &date),
            ("dt", 0x0f, &datetime),
            ("geo", 0x0f, &geometry),
        ]);
        assert_eq!(
            text(&doc).as_deref(),
            Some(
                r#"{"d": 12.50, "t": "-838:59:59.500000", "da": "2024-02-29", "dt": "1999-12-31 23:59:58.250000", "geo": "base64:type255:AQID"}"#
            )
        );
        // mysql_common's own conversion refuses the document.
        let value: jsonb::Value<'_> = ParseBuf(&doc).parse(()).unwrap();
        assert!(serde_json::Value::try_from(value).is_err());
    }

    #[test]
    fn bytes_that_hold_no_document_are_refused() {
        assert_eq!(text(&[0x7f]), None);
        assert_eq!(text(&[0x00, 9, 0]), None);
        assert_eq!(text(&[0x0c, 5, b'a']), None);
    }
}
