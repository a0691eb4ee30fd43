//! PostgreSQL's binary format of values (COPY … (FORMAT binary)): cheaper to read than text,
//! and exact. Types siphon keeps as text ([`PgType::Other`]) have no binary decoder here;
//! the snapshot reads such columns as `::text`.

use siphon_core::Value;

use crate::values::PgType;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

/// Whether values of `ty` can be read in binary (no part of it is kept as server text).
pub fn supported(ty: &PgType) -> bool {
    match ty {
        PgType::Other(_) => false,
        PgType::Array(elem) => supported(elem),
        _ => true,
    }
}

fn take<const N: usize>(b: &mut &[u8]) -> Result<[u8; N], String> {
    if b.len() < N {
        return Err("binary value too short".into());
    }
    let (head, tail) = b.split_at(N);
    *b = tail;
    Ok(head.try_into().expect("N bytes"))
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("not UTF-8: {e}"))
}

/// Decodes one binary value of `ty`.
pub fn decode(ty: &PgType, mut b: &[u8]) -> Result<Value, String> {
    let b = &mut b;
    Ok(match ty {
        PgType::Bool => Value::Bool(take::<1>(b)?[0] != 0),
        PgType::Int => match b.len() {
            2 => Value::Int(i64::from(i16::from_be_bytes(take(b)?))),
            4 => Value::Int(i64::from(i32::from_be_bytes(take(b)?))),
            8 => Value::Int(i64::from_be_bytes(take(b)?)),
            n => return Err(format!("integer of {n} bytes")),
        },
        PgType::Float32 => Value::Float32(f32::from_be_bytes(take(b)?)),
        PgType::Float64 => Value::Float64(f64::from_be_bytes(take(b)?)),
        PgType::Numeric => Value::Decimal(numeric(b)?),
        PgType::Text => Value::Text(utf8(b)?),
        PgType::Enum => Value::Enum(utf8(b)?),
        PgType::Json => match b.first() {
            // jsonb starts with its format version (1); json is plain text, which never
            // starts with that byte.
            Some(1) => Value::Json(utf8(&b[1..])?),
            _ => Value::Json(utf8(b)?),
        },
        PgType::Bytea => Value::Bytes(b.to_vec()),
        PgType::Uuid => Value::Uuid(take(b)?),
        PgType::Date => Value::Date(match i32::from_be_bytes(take(b)?) {
            i32::MAX => i32::MAX,
            i32::MIN => i32::MIN,
            d => d
                .checked_add(PG_EPOCH_DAYS)
                .ok_or("date past i32 days from 1970")?,
        }),
        PgType::Time => Value::Time(i64::from_be_bytes(take(b)?)),
        PgType::TimeTz => {
            let micros = i64::from_be_bytes(take(b)?);
            // PostgreSQL stores the zone in seconds west of UTC.
            let west = i32::from_be_bytes(take(b)?);
            Value::TimeTz {
                micros,
                offset_seconds: -west,
            }
        }
        PgType::Timestamp | PgType::TimestampTz => {
            let us = match i64::from_be_bytes(take(b)?) {
                i64::MAX => i64::MAX,
                i64::MIN => i64::MIN,
                // PostgreSQL's last thirty years (to 294276 AD) pass i64 microseconds
                // from 1970: no value siphon holds.
                us => us
                    .checked_add(PG_EPOCH_MICROS)
                    .ok_or("timestamp past i64 microseconds from 1970")?,
            };
            if *ty == PgType::Timestamp {
                Value::Timestamp(us)
            } else {
                Value::TimestampTz(us)
            }
        }
        PgType::Interval => {
            let micros = i64::from_be_bytes(take(b)?);
            let days = i32::from_be_bytes(take(b)?);
            let months = i32::from_be_bytes(take(b)?);
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        PgType::Array(elem) => array(elem, b)?,
        PgType::Other(name) => return Err(format!("no binary decoder for {name}")),
    })
}

/// Numeric: digit groups of base 10000 to exact decimal text.
fn numeric(b: &mut &[u8]) -> Result<String, String> {
    let ndigits = i16::from_be_bytes(take(b)?) as usize;
    let weight = i32::from(i16::from_be_bytes(take(b)?));
    let sign = u16::from_be_bytes(take(b)?);
    let dscale = u16::from_be_bytes(take(b)?) as usize;
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => {}
    }
    let digits = (0..ndigits)
        .map(|_| take::<2>(b).map(i16::from_be_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let group = |i: i32| {
        if i >= 0 {
            digits.get(i as usize).copied().unwrap_or(0)
        } else {
            0
        }
    };
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        for i in 0..=weight {
            if i == 0 {
                out.push_str(&group(i).to_string());
            } else {
                out.push_str(&format!("{:04}", group(i)));
            }
        }
    }
    if dscale > 0 {
        out.push('.');
        let mut frac = String::new();
        let mut i = weight + 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", group(i)));
            i += 1;
        }
        out.push_str(&frac[..dscale]);
    }
    Ok(out)
}

/// An array: dimensions, then the elements in row-major order.
fn array(elem: &PgType, b: &mut &[u8]) -> Result<Value, String> {
    let ndim = i32::from_be_bytes(take(b)?);
    let _has_nulls = i32::from_be_bytes(take(b)?);
    let _elem_oid = u32::from_be_bytes(take(b)?);
    match ndim {
        0 => return Ok(Value::Array(Vec::new())),
        n if n < 0 => return Err(format!("array of {n} dimensions")),
        _ => {}
    }
    let dims = (0..ndim)
        .map(|_| {
            let len = i32::from_be_bytes(take(b)?);
            let _lower = i32::from_be_bytes(take(b)?);
            Ok(len.max(0) as usize)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let total = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or("array dimensions past any size")?;
    if total == 0 {
        return Ok(Value::Array(Vec::new()));
    }
    // Each element takes its 4-byte length at least: the dimensions may not claim more than
    // the bytes hold (nor size the vector by the claim).
    if total > b.len() / 4 {
        return Err(format!("array of {total} elements in {} bytes", b.len()));
    }
    let mut items = Vec::with_capacity(total);
    for _ in 0..total {
        let len = i32::from_be_bytes(take(b)?);
        if len < 0 {
            items.push(Value::Null);
        } else {
            let len = len as usize;
            if b.len() < len {
                return Err("array element too short".into());
            }
            let (v, rest) = b.split_at(len);
            *b = rest;
            items.push(decode(elem, v)?);
        }
    }
    // Nest from the innermost dimension out.
    for &d in dims[1..].iter().rev() {
        items = items.chunks(d).map(|c| Value::Array(c.to_vec())).collect();
    }
    Ok(Value::Array(items))
}

/// Splits COPY binary data into tuples of fields (`None` for NULL).
#[derive(Debug, Default)]
pub struct CopyReader {
    header_done: bool,
}

/// What the next bytes of a COPY stream hold.
pub enum Tuple<'a> {
    /// A tuple's fields.
    Fields(Vec<Option<&'a [u8]>>),
    /// The end-of-data marker.
    End,
}

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

impl CopyReader {
    /// The next tuple in `buf` and the bytes it took; `None` if `buf` does not hold a whole one.
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> Result<Option<(Tuple<'a>, usize)>, String> {
        let mut at = 0;
        if !self.header_done {
            if buf.len() < SIGNATURE.len() + 8 {
                return Ok(None);
            }
            if !buf.starts_with(SIGNATURE) {
                return Err("not COPY binary data".into());
            }
            let ext = u32::from_be_bytes(
                buf[SIGNATURE.len() + 4..SIGNATURE.len() + 8]
                    .try_into()
                    .expect("4 bytes"),
            ) as usize;
            let header = SIGNATURE.len() + 8 + ext;
            if buf.len() < header {
                return Ok(None);
            }
            at = header;
            self.header_done = true;
        }
        let Some(count) = buf.get(at..at + 2) else {
            return Ok(None);
        };
        let count = i16::from_be_bytes(count.try_into().expect("2 bytes"));
        let mut pos = at + 2;
        if count < 0 {
            return Ok(Some((Tuple::End, pos)));
        }
        let mut fields = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let Some(len) = buf.get(pos..pos + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes(len.try_into().expect("4 bytes"));
            pos += 4;
            if len < 0 {
                fields.push(None);
                continue;
            }
            let Some(v) = buf.get(pos..pos + len as usize) else {
                return Ok(None);
            };
            fields.push(Some(v));
            pos += len as usize;
        }
        Ok(Some((Tuple::Fields(fields), pos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(ndigits: i16, weight: i16, sign: u16, dscale: u16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&ndigits.to_be_bytes());
        v.extend_from_slice(&weight.to_be_bytes());
        v.extend_from_slice(&sign.to_be_bytes());
        v.extend_from_slice(&dscale.to_be_bytes());
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    fn array_bytes(dims: &[i32], elements: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(dims.len() as i32).to_be_bytes());
        v.extend_from_slice(&0i32.to_be_bytes());
        v.extend_from_slice(&23u32.to_be_bytes());
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
            v.extend_from_slice(&1i32.to_be_bytes());
        }
        for e in elements {
            v.extend_from_slice(&(e.len() as i32).to_be_bytes());
            v.extend_from_slice(e);
        }
        v
    }

    /// Found by the pgoutput fuzz target (out of memory: a binary int4[] value whose
    /// dimensions claimed half a billion elements sized the vector before any was read).
    #[test]
    fn array_dimensions_do_not_size_memory_or_panic() {
        let ints = PgType::Array(Box::new(PgType::Int));
        // 2^40 elements claimed, one there.
        let claimed = array_bytes(&[1 << 20, 1 << 20], &[&7i32.to_be_bytes()]);
        assert!(decode(&ints, &claimed).is_err());
        // Dimensions whose product overflows.
        let overflow = array_bytes(&[i32::MAX, i32::MAX, i32::MAX], &[]);
        assert!(decode(&ints, &overflow).is_err());
        // A dimension of length 0 holds nothing.
        let empty = array_bytes(&[2, 0], &[]);
        // Found by the same target later: a negative count of dimensions, an element after.
        let mut negative = array_bytes(&[], &[&7i32.to_be_bytes()]);
        negative[..4].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(decode(&ints, &negative).is_err());
        assert_eq!(decode(&ints, &empty), Ok(Value::Array(Vec::new())));
        // What fits still decodes.
        let two = array_bytes(&[2], &[&1i32.to_be_bytes(), &2i32.to_be_bytes()]);
        assert_eq!(
            decode(&ints, &two),
            Ok(Value::Array(vec![Value::Int(1), Value::Int(2)]))
        );
    }

    /// Found by the pgoutput fuzz target: a binary timestamp within PostgreSQL's range but
    /// past i64 microseconds from 1970 (its last thirty years, to 294276 AD) overflowed
    /// moving to the Unix epoch; so would a date past i32 days (read beside it).
    #[test]
    fn times_past_the_unix_epochs_range_are_errors() {
        // PostgreSQL's END_TIMESTAMP less a microsecond: 294276-12-31 23:59:59.999999.
        let end = 9_223_371_331_199_999_999i64.to_be_bytes();
        assert!(decode(&PgType::Timestamp, &end).is_err());
        assert!(decode(&PgType::TimestampTz, &end).is_err());
        assert!(decode(&PgType::Date, &(i32::MAX - 1).to_be_bytes()).is_err());
        assert_eq!(
            decode(&PgType::Timestamp, &0i64.to_be_bytes()),
            Ok(Value::Timestamp(PG_EPOCH_MICROS))
        );
        assert_eq!(
            decode(&PgType::TimestampTz, &i64::MAX.to_be_bytes()),
            Ok(Value::TimestampTz(i64::MAX))
        );
    }

    #[test]
    fn numerics() {
        let n = |b: Vec<u8>| numeric(&mut b.as_slice()).unwrap();
        assert_eq!(n(numeric_bytes(2, 0, 0, 4, &[12, 3400])), "12.3400");
        assert_eq!(n(numeric_bytes(1, -1, 0x4000, 5, &[1200])), "-0.12000");
        assert_eq!(n(numeric_bytes(2, 1, 0, 0, &[1, 2])), "10002");
        assert_eq!(n(numeric_bytes(0, 0, 0, 2, &[])), "0.00");
        assert_eq!(n(numeric_bytes(1, -2, 0, 6, &[5000])), "0.000050");
        assert_eq!(n(numeric_bytes(0, 0, 0xC000, 0, &[])), "NaN");
    }
}
