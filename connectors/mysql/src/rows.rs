//! siphon's own decoder of binlog row images: the values straight from the bytes, by the
//! table map's column types and metadata, into siphon's values — without the per-row column
//! descriptions and text round trips of `mysql_common`'s general decoder, which dominated the
//! streaming profile (BENCHMARKS.md). MySQL's binary JSON is parsed by `mysql_common` and
//! written as text by [`crate::json`]. Types it does not read (the pre-5.6 temporal formats,
//! the pre-5.0 DECIMAL, typed arrays) make a table use `mysql_common`'s decoder instead, which
//! is also where a partial image goes; the values are the same either way (`values::value`'s semantics; the oracle tests compare both with
//! `mariadb-binlog -v` and with a snapshot read).

use chrono::NaiveDate;
use mysql_async::binlog::events::TableMapEvent;
use mysql_async::consts::ColumnType;
use siphon_core::Value;

use crate::binary::{be, decimal, le};
use crate::charset::Charset;
use crate::columns::{ColumnInfo, DataType};

/// How one column's value is laid out in a row image.
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    /// A little-endian integer of this many bytes; signed or not.
    Int { bytes: usize, unsigned: bool },
    /// YEAR: one byte, 1900 + n (0: 0).
    Year,
    /// An IEEE float (4 bytes) or double (8).
    Float { bytes: usize },
    /// Binary DECIMAL(precision, scale).
    Decimal { precision: usize, scale: usize },
    /// DATE: 3 bytes.
    Date,
    /// DATETIME2 with this many fractional digits.
    DateTime2 { fsp: usize },
    /// TIMESTAMP2 with this many fractional digits.
    Timestamp2 { fsp: usize },
    /// TIME2 with this many fractional digits.
    Time2 { fsp: usize },
    /// A length-prefixed string (prefix of 1 to 4 bytes).
    Prefixed { prefix: usize },
    /// ENUM or SET: a little-endian number of this many bytes.
    Packed { bytes: usize },
    /// BIT: this many bytes, big-endian.
    Bit { bytes: usize },
    /// MySQL's binary JSON, after a length of this many bytes.
    Json { prefix: usize },
}

/// Decodes the row images of one table map's table.
#[derive(Debug, Clone)]
pub struct RowDecoder {
    layouts: Vec<Layout>,
}

impl RowDecoder {
    /// A decoder for the columns of `tme`, or `None` when a column's type is one it does not
    /// read.
    pub fn new(tme: &TableMapEvent<'_>, columns: &[ColumnInfo]) -> Option<RowDecoder> {
        let mut layouts = Vec::with_capacity(columns.len());
        for (i, column) in columns.iter().enumerate() {
            let ty = tme.get_column_type(i).ok()??;
            let meta = tme.get_column_metadata(i).unwrap_or(&[]);
            let unsigned = column.column.type_name.ends_with(" unsigned");
            use ColumnType::*;
            let layout = match ty {
                MYSQL_TYPE_TINY => Layout::Int { bytes: 1, unsigned },
                MYSQL_TYPE_SHORT => Layout::Int { bytes: 2, unsigned },
                MYSQL_TYPE_INT24 => Layout::Int { bytes: 3, unsigned },
                MYSQL_TYPE_LONG => Layout::Int { bytes: 4, unsigned },
                MYSQL_TYPE_LONGLONG => Layout::Int { bytes: 8, unsigned },
                MYSQL_TYPE_YEAR => Layout::Year,
                MYSQL_TYPE_FLOAT => Layout::Float { bytes: 4 },
                MYSQL_TYPE_DOUBLE => Layout::Float { bytes: 8 },
                MYSQL_TYPE_NEWDECIMAL => Layout::Decimal {
                    precision: usize::from(*meta.first()?),
                    scale: usize::from(*meta.get(1)?),
                },
                MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => Layout::Date,
                MYSQL_TYPE_DATETIME2 => Layout::DateTime2 {
                    fsp: usize::from(*meta.first()?),
                },
                MYSQL_TYPE_TIMESTAMP2 => Layout::Timestamp2 {
                    fsp: usize::from(*meta.first()?),
                },
                MYSQL_TYPE_TIME2 => Layout::Time2 {
                    fsp: usize::from(*meta.first()?),
                },
                MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => {
                    let max = u16::from_le_bytes([*meta.first()?, *meta.get(1)?]);
                    Layout::Prefixed {
                        prefix: if max < 256 { 1 } else { 2 },
                    }
                }
                // The table map's type of an ENUM or SET column is STRING, with the real type in
                // its metadata; mysql_common gives the real type, the pack length after it.
                MYSQL_TYPE_ENUM | MYSQL_TYPE_SET => Layout::Packed {
                    bytes: usize::from(*meta.get(1)?),
                },
                MYSQL_TYPE_STRING => {
                    let (b0, b1) = (*meta.first()?, *meta.get(1)?);
                    let real = if b0 & 0x30 != 0x30 { b0 | 0x30 } else { b0 };
                    match ColumnType::try_from(real).ok()? {
                        MYSQL_TYPE_ENUM | MYSQL_TYPE_SET => Layout::Packed {
                            bytes: usize::from(b1),
                        },
                        MYSQL_TYPE_STRING => {
                            let max = usize::from(b1) | (usize::from((b0 & 0x30) ^ 0x30) << 4);
                            Layout::Prefixed {
                                prefix: if max < 256 { 1 } else { 2 },
                            }
                        }
                        _ => return None,
                    }
                }
                MYSQL_TYPE_BLOB | MYSQL_TYPE_GEOMETRY => Layout::Prefixed {
                    prefix: usize::from(*meta.first()?),
                },
                MYSQL_TYPE_JSON => Layout::Json {
                    prefix: usize::from(*meta.first()?),
                },
                MYSQL_TYPE_BIT => {
                    let (bits, bytes) = (usize::from(*meta.first()?), usize::from(*meta.get(1)?));
                    Layout::Bit {
                        bytes: bytes + usize::from(bits > 0),
                    }
                }
                _ => return None,
            };
            if !matches!(
                layout,
                Layout::Prefixed { prefix: 1..=4 }
                    | Layout::Json { prefix: 1..=4 }
                    | Layout::Packed { bytes: 1..=8 }
                    | Layout::Bit { bytes: 1..=8 }
            ) && matches!(
                layout,
                Layout::Prefixed { .. }
                    | Layout::Json { .. }
                    | Layout::Packed { .. }
                    | Layout::Bit { .. }
            ) {
                return None;
            }
            layouts.push(layout);
        }
        Some(RowDecoder { layouts })
    }

    /// Decodes one image at the start of `data` (every column present: a full row image);
    /// returns its values and the bytes it took, or `None` if the bytes do not hold one.
    pub fn image(&self, data: &[u8], columns: &[ColumnInfo]) -> Option<(Vec<Value>, usize)> {
        let n = self.layouts.len();
        let nulls = data.get(..n.div_ceil(8))?;
        let mut at = nulls.len();
        let mut values = Vec::with_capacity(n);
        for (i, (layout, column)) in self.layouts.iter().zip(columns).enumerate() {
            if nulls[i / 8] >> (i % 8) & 1 == 1 {
                values.push(Value::Null);
                continue;
            }
            let (value, used) = decode(layout, &column.data_type, data.get(at..)?)?;
            values.push(value);
            at += used;
        }
        Some((values, at))
    }
}

/// Fractional seconds of `fsp` digits: their bytes and their value in microseconds; `None`
/// for bytes holding more digits than they have room for (no server writes them).
fn fraction(fsp: usize, data: &[u8]) -> Option<(i64, usize)> {
    let bytes = fsp.div_ceil(2);
    let raw = be(data.get(..bytes)?) as i64;
    if raw >= 100i64.pow(bytes as u32) {
        return None;
    }
    let scale = match bytes {
        0 => 0,
        1 => 10_000,
        2 => 100,
        _ => 1,
    };
    Some((raw * scale, bytes))
}

/// One value: decoded by its layout, made what the column's type says (as `values::value`).
fn decode(layout: &Layout, data_type: &DataType, data: &[u8]) -> Option<(Value, usize)> {
    Some(match layout {
        Layout::Int { bytes, unsigned } => {
            let raw = le(data.get(..*bytes)?);
            let value = if *unsigned {
                match data_type {
                    DataType::BigUnsigned => Value::Decimal(raw.to_string()),
                    _ => Value::Int(raw as i64),
                }
            } else {
                let shift = 64 - 8 * bytes;
                Value::Int(((raw << shift) as i64) >> shift)
            };
            (value, *bytes)
        }
        Layout::Year => {
            let y = i64::from(*data.first()?);
            (Value::Int(if y == 0 { 0 } else { 1900 + y }), 1)
        }
        Layout::Float { bytes: 4 } => (
            Value::Float32(f32::from_le_bytes(data.get(..4)?.try_into().ok()?)),
            4,
        ),
        Layout::Float { .. } => (
            Value::Float64(f64::from_le_bytes(data.get(..8)?.try_into().ok()?)),
            8,
        ),
        Layout::Decimal { precision, scale } => {
            let (text, size) = decimal(*precision, *scale, data)?;
            (Value::Decimal(text), size)
        }
        Layout::Date => date(data)?,
        Layout::DateTime2 { fsp } => datetime2(*fsp, data)?,
        Layout::Timestamp2 { fsp } => timestamp2(*fsp, data)?,
        Layout::Time2 { fsp } => time2(*fsp, data)?,
        Layout::Prefixed { prefix } => {
            let len = usize::try_from(le(data.get(..*prefix)?)).ok()?;
            let bytes = data.get(*prefix..*prefix + len)?;
            let value = match data_type {
                DataType::Text(set) => Value::Text(crate::values::text_in(*set, bytes)),
                DataType::Set(_) => Value::Text(crate::values::text_in(Charset::UTF8, bytes)),
                DataType::Json => Value::Json(String::from_utf8(bytes.to_vec()).ok()?),
                DataType::Enum(_) => Value::Enum(String::from_utf8(bytes.to_vec()).ok()?),
                DataType::FixedBinary(n) => Value::Bytes(crate::values::padded(bytes, *n)),
                DataType::Geometry => crate::values::geometry(bytes)?,
                _ => Value::Bytes(bytes.to_vec()),
            };
            (value, prefix + len)
        }
        Layout::Json { prefix } => {
            let len = usize::try_from(le(data.get(..*prefix)?)).ok()?;
            let binary = data.get(*prefix..*prefix + len)?;
            (Value::Json(crate::json::text(binary)?), prefix + len)
        }
        Layout::Packed { bytes } => {
            let raw = le(data.get(..*bytes)?);
            let value = match data_type {
                DataType::Enum(_) => Value::Enum(data_type.enum_label(raw)?),
                _ => Value::Text(data_type.set_labels(raw)?),
            };
            (value, *bytes)
        }
        Layout::Bit { bytes } => {
            let raw = data.get(..*bytes)?;
            let value = match data_type {
                DataType::Bit1 => Value::Bool(raw.iter().any(|b| *b != 0)),
                _ => Value::Bytes(raw.to_vec()),
            };
            (value, *bytes)
        }
    })
}

/// A DATE: 3 bytes, day, month and year packed; the zero date is NULL.
fn date(data: &[u8]) -> Option<(Value, usize)> {
    let v = le(data.get(..3)?);
    let (day, month, year) = (v & 31, (v >> 5) & 15, v >> 9);
    let value = if year == 0 && month == 0 && day == 0 {
        Value::Null
    } else {
        let date = NaiveDate::from_ymd_opt(year as i32, month as u32, day as u32)?;
        Value::Date(i32::try_from((date - NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days()).ok()?)
    };
    Some((value, 3))
}

/// A DATETIME2: 5 bytes of date and time, then the fraction; the zero date is NULL.
fn datetime2(fsp: usize, data: &[u8]) -> Option<(Value, usize)> {
    let int = be(data.get(..5)?) as i64 - 0x80_0000_0000;
    let (frac, used) = fraction(fsp, data.get(5..)?)?;
    let ymd = int >> 17;
    let (year_month, day) = (ymd >> 5, ymd & 31);
    let (year, month) = (year_month / 13, year_month % 13);
    let hms = int & 0x1_ffff;
    let (hour, minute, second) = (hms >> 12, (hms >> 6) & 63, hms & 63);
    let value = if year == 0 && month == 0 && day == 0 {
        Value::Null
    } else {
        let at = NaiveDate::from_ymd_opt(year as i32, month as u32, day as u32)?
            .and_hms_micro_opt(hour as u32, minute as u32, second as u32, frac as u32)?;
        Value::Timestamp(at.and_utc().timestamp_micros())
    };
    Some((value, 5 + used))
}

/// A TIMESTAMP2: seconds since the epoch (4 bytes), then the fraction.
fn timestamp2(fsp: usize, data: &[u8]) -> Option<(Value, usize)> {
    let secs = be(data.get(..4)?) as i64;
    let (frac, used) = fraction(fsp, data.get(4..)?)?;
    // 0 is the zero TIMESTAMP (the earliest a TIMESTAMP holds is 1970-01-01 00:00:01
    // UTC): NULL, as a query reads it.
    let value = match secs * 1_000_000 + frac {
        0 => Value::Null,
        micros => Value::TimestampTz(micros),
    };
    Some((value, 4 + used))
}

/// A TIME2: a signed span of hours, minutes, seconds and fraction.
fn time2(fsp: usize, data: &[u8]) -> Option<(Value, usize)> {
    // MySQL's my_time_packed_from_binary: a packed value of (hour, minute, second)
    // << 24 plus the fraction, offset to sort as unsigned.
    let (packed, used) = match fsp.div_ceil(2) {
        0 => ((be(data.get(..3)?) as i64 - 0x80_0000) << 24, 3),
        1 => {
            let mut int = be(data.get(..3)?) as i64 - 0x80_0000;
            let mut frac = i64::from(*data.get(3)?);
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x100;
            }
            ((int << 24) + frac * 10_000, 4)
        }
        2 => {
            let mut int = be(data.get(..3)?) as i64 - 0x80_0000;
            let mut frac = be(data.get(3..5)?) as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x1_0000;
            }
            ((int << 24) + frac * 100, 5)
        }
        _ => (be(data.get(..6)?) as i64 - 0x8000_0000_0000, 6),
    };
    let negative = packed < 0;
    let packed = packed.abs();
    let (int, frac) = (packed >> 24, packed % (1 << 24));
    let (hour, minute, second) = (
        (int >> 12) % (1 << 10),
        (int >> 6) % (1 << 6),
        int % (1 << 6),
    );
    let micros = ((hour * 60 + minute) * 60 + second) * 1_000_000 + frac;
    Some((Value::Time(if negative { -micros } else { micros }), used))
}
