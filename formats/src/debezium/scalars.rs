//! Values Debezium writes in a form of their own: decimals in each mode (Kafka Connect's
//! Decimal as two's complement), bytes, money, bit strings, MySQL's bits and years, dates,
//! times and intervals, and what it makes of an unchanged TOASTed value.

use super::*;

/// PostgreSQL's type OIDs that Debezium encodes apart from their text.
pub(super) const MONEY: u32 = 790;

pub(super) const OID: u32 = 26;

pub(super) const BIT: u32 = 1560;

pub(super) const VARBIT: u32 = 1562;

pub(super) const POINT: u32 = 600;

/// Debezium's placeholder for a value PostgreSQL did not send, in the column's own type.
pub(super) fn unavailable(kind: Option<&ColumnKind>, modes: &Modes) -> Json {
    match kind {
        Some(ColumnKind::Bytes) => bytes(UNAVAILABLE.as_bytes(), modes.binary),
        Some(ColumnKind::Array(element)) => Json::Array(vec![unavailable(Some(element), modes)]),
        _ => json!(UNAVAILABLE),
    }
}

/// Bytes as `binary.handling.mode` writes them.
pub(super) fn bytes(b: &[u8], mode: BinaryMode) -> Json {
    match mode {
        BinaryMode::Base64 | BinaryMode::Bytes => json!(BASE64.encode(b)),
        BinaryMode::Base64UrlSafe => json!(URL_SAFE.encode(b)),
        BinaryMode::Hex => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

/// A decimal as `decimal.handling.mode` writes it: `string` (NaN in capitals, as Debezium
/// spells the special value Java's BigDecimal cannot hold), `double`, or `precise`: Kafka
/// Connect's Decimal (the unscaled value's two's-complement bytes, base64) for a column with
/// a declared scale, Debezium's VariableScaleDecimal (`{"scale", "value"}`) for one without.
pub(super) fn decimal(s: &str, kind: Option<&ColumnKind>, mode: DecimalMode) -> Json {
    match mode {
        DecimalMode::String => json!(match s {
            "NaN" => "NAN",
            other => other,
        }),
        DecimalMode::Double => float_json(s.parse().unwrap_or(f64::NAN)),
        DecimalMode::Precise => {
            let Some((negative, digits, scale)) = unscaled(s) else {
                return Json::Null;
            };
            match kind {
                Some(ColumnKind::Decimal {
                    scale: Some(declared),
                    ..
                }) => {
                    let (digits, _) = rescale(&digits, scale, *declared);
                    json!(BASE64.encode(twos_complement(negative, &digits)))
                }
                _ => {
                    // Without a declared scale, Debezium drops the fraction's trailing zeros.
                    let zeros = digits.len() - digits.trim_end_matches('0').len();
                    let cut = zeros.min(scale as usize);
                    let digits = &digits[..digits.len() - cut];
                    json!({
                        "scale": scale - cut as u32,
                        "value": BASE64.encode(twos_complement(negative, digits)),
                    })
                }
            }
        }
    }
}

/// `-12.3400` as (negative, "123400", 4); `None` for NaN and the infinities.
pub(super) fn unscaled(s: &str) -> Option<(bool, String, u32)> {
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some((
        negative,
        format!("{whole}{fraction}"),
        fraction.len() as u32,
    ))
}

/// The digits of an unscaled value at `scale` brought to scale `to` (zeros added; cut when
/// smaller, which a value of a column with that scale never needs).
pub(super) fn rescale(digits: &str, scale: u32, to: u32) -> (String, u32) {
    if to >= scale {
        (format!("{digits}{}", "0".repeat((to - scale) as usize)), to)
    } else {
        let keep = digits.len().saturating_sub((scale - to) as usize);
        (digits[..keep].to_owned(), to)
    }
}

/// A decimal digit string as the big-endian two's-complement bytes Java's
/// `BigInteger.toByteArray` gives (the shortest that holds the sign).
pub(super) fn twos_complement(negative: bool, digits: &str) -> Vec<u8> {
    // Base-256 digits, least significant first, by repeated division of the decimal string.
    let mut decimal: Vec<u32> = digits.bytes().map(|b| u32::from(b - b'0')).collect();
    let mut magnitude = Vec::new();
    while decimal.iter().any(|&d| d != 0) {
        let mut rest = 0u32;
        for d in &mut decimal {
            let current = rest * 10 + *d;
            *d = current / 256;
            rest = current % 256;
        }
        magnitude.push(rest as u8);
    }
    let mut bytes: Vec<u8> = magnitude.into_iter().rev().collect();
    if bytes.is_empty() {
        bytes.push(0);
    }
    if bytes[0] & 0x80 != 0 {
        bytes.insert(0, 0);
    }
    if negative && bytes.iter().any(|&b| b != 0) {
        // Two's complement: invert and add one.
        for b in &mut bytes {
            *b = !*b;
        }
        for b in bytes.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
        // Drop a redundant leading 0xff whose next byte already carries the sign.
        while bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0x80 != 0 {
            bytes.remove(0);
        }
    }
    bytes
}

/// A value of a type siphon keeps as text, as Debezium encodes it: money as a plain
/// decimal, oid as a number, bit(1) as a boolean, other bit strings as bytes (the bits as an
/// unsigned number, least significant byte first, without leading zero bytes); the rest as
/// the text.
pub(super) fn other(type_name: &str, text: &str, column: Option<&Column>, modes: &Modes) -> Json {
    let type_id = column.map_or(0, |c| c.type_id);
    let is = |id: u32, name: &str| type_id == id || (type_id == 0 && type_name == name);
    if is(MONEY, "money") {
        // Debezium reads money as a decimal of scale 2 (money.fraction.digits).
        let money_kind = ColumnKind::Decimal {
            precision: None,
            scale: Some(2),
        };
        return decimal(&money(text), Some(&money_kind), modes.decimal);
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
        // Bit strings stay bytes whatever binary.handling.mode says (it is bytea's), so
        // JSON shows them in base64.
        return json!(BASE64.encode(bits_le(text)));
    }
    if is(POINT, "point")
        && let Some(point) = spatial::pg_point_json(text)
    {
        return point;
    }
    json!(text)
}

/// MySQL types whose Debezium form is not what their kind gives. A MySQL column has no type
/// id (PostgreSQL's always has its OID); its type name is MySQL's own spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MysqlType {
    /// `bit(n)`, n > 1: Debezium's Bits, little-endian.
    Bits(i32),
    /// `year`: Debezium's Year.
    Year,
}

pub(super) fn mysql_type(column: Option<&Column>) -> Option<MysqlType> {
    let column = column.filter(|c| c.type_id == 0)?;
    match column.type_name.as_str() {
        "year" => Some(MysqlType::Year),
        name if name.starts_with("bit(") && column.type_modifier > 1 => {
            Some(MysqlType::Bits(column.type_modifier))
        }
        _ => None,
    }
}

/// A MySQL bit value (its bytes most significant first, as the server sends them) as Debezium
/// writes it: little-endian, one byte per 8 bits of the column, rounded up.
pub(super) fn mysql_bits_le(big_endian: &[u8], bits: i32) -> Vec<u8> {
    let size = usize::try_from(bits).unwrap_or(0).div_ceil(8);
    let mut out: Vec<u8> = big_endian.iter().rev().copied().take(size).collect();
    out.resize(size, 0);
    out
}

/// `$1,234.56` / `-$0.50` / `1.234,56 €` as a plain decimal: the digits, the sign and the
/// last `.` or `,` when two digits or fewer follow it (the locale's decimal mark).
pub(super) fn money(text: &str) -> String {
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
pub(super) fn bits_le(text: &str) -> Vec<u8> {
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

/// `2024-02-29Z`; infinities as `infinity`, `-infinity`.
pub(super) fn date(days: i32) -> String {
    match days {
        i32::MAX | i32::MIN => format_date(days),
        d => format!("{}Z", format_date(d)),
    }
}

pub(super) fn time(micros: i64) -> String {
    format_time(micros, Fraction::Trimmed)
}

pub(super) fn timestamp(micros: i64) -> String {
    format_timestamp(micros, "Z", Fraction::Trimmed)
}

pub(super) fn interval(months: i32, days: i32, micros: i64) -> String {
    format_interval(months, days, micros, Fraction::Trimmed)
}

/// An interval in microseconds as Debezium's numeric mode counts it: a month is an average
/// one (365.25 / 12 days).
pub(super) fn interval_micros(months: i32, days: i32, micros: i64) -> i64 {
    const MONTH_MICROS: f64 = 365.25 / 12.0 * 86_400_000_000.0;
    (f64::from(months) * MONTH_MICROS) as i64 + i64::from(days) * DAY_MICROS + micros
}
