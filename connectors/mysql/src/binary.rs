//! MySQL's binary forms of numbers: little- and big-endian integers of up to 8 bytes, and the
//! binary DECIMAL (of row images, and of the DECIMALs inside binary JSON).

/// A little-endian unsigned integer of up to 8 bytes.
pub fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |v, b| v << 8 | u64::from(*b))
}

/// A big-endian unsigned integer of up to 8 bytes.
pub fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |v, b| v << 8 | u64::from(*b))
}

const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// A binary DECIMAL's text and size.
///
/// The value is its sign bit, then groups of up to nine decimal digits, each a big-endian
/// integer; a negative value has every bit inverted. The digits go straight into the text:
/// one allocation a value (a row image may hold many).
pub fn decimal(precision: usize, scale: usize, data: &[u8]) -> Option<(String, usize)> {
    let intg = precision.checked_sub(scale)?;
    let (intg0, intg0x) = (intg / 9, intg % 9);
    let (frac0, frac0x) = (scale / 9, scale % 9);
    let size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
    let bytes = data.get(..size)?;
    let positive = bytes.first()? & 0x80 != 0;
    let invert = if positive { 0 } else { 0xff };
    let mut at = 0;
    // A group of `digits` digits in `n` bytes; one holding more is no decimal (no server
    // writes it): `None`.
    let mut take = |n: usize, digits: usize| {
        let v = bytes[at..at + n]
            .iter()
            .enumerate()
            .fold(0u64, |v, (i, b)| {
                let sign = if at + i == 0 { 0x80 } else { 0 };
                v << 8 | u64::from(b ^ invert ^ sign)
            });
        at += n;
        (v < 10u64.pow(digits as u32)).then_some(v)
    };
    let mut text = String::with_capacity(precision + 2);
    if !positive {
        text.push('-');
    }
    let int_start = text.len();
    if intg0x > 0 {
        push_digits(&mut text, take(DIG2BYTES[intg0x], intg0x)?, intg0x);
    }
    for _ in 0..intg0 {
        push_digits(&mut text, take(4, 9)?, 9);
    }
    let zeros = text[int_start..].bytes().take_while(|&b| b == b'0').count();
    text.replace_range(int_start..int_start + zeros, "");
    if text.len() == int_start {
        text.push('0');
    }
    if scale > 0 {
        text.push('.');
        for _ in 0..frac0 {
            push_digits(&mut text, take(4, 9)?, 9);
        }
        if frac0x > 0 {
            push_digits(&mut text, take(DIG2BYTES[frac0x], frac0x)?, frac0x);
        }
    }
    Some((text, size))
}

/// Appends `value`'s last `width` decimal digits, zero-padded.
fn push_digits(text: &mut String, mut value: u64, width: usize) {
    let mut digits = [b'0'; 9];
    for d in digits[..width].iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
    text.extend(digits[..width].iter().map(|&d| char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The decoder as it was written first, with a string a digit group: the oracle of the
    /// one above.
    fn decimal_by_groups(precision: usize, scale: usize, data: &[u8]) -> Option<(String, usize)> {
        let intg = precision.checked_sub(scale)?;
        let (intg0, intg0x) = (intg / 9, intg % 9);
        let (frac0, frac0x) = (scale / 9, scale % 9);
        let size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
        let mut bytes = data.get(..size)?.to_vec();
        let positive = bytes.first()? & 0x80 != 0;
        bytes[0] ^= 0x80;
        if !positive {
            for b in &mut bytes {
                *b ^= 0xff;
            }
        }
        let mut at = 0;
        // A group of `digits` digits in `n` bytes; one holding more is no decimal (no server
        // writes it): `None`.
        let mut take = |n: usize, digits: usize| {
            let v = be(&bytes[at..at + n]);
            at += n;
            (v < 10u64.pow(digits as u32)).then_some(v)
        };
        let mut int_part = String::new();
        if intg0x > 0 {
            int_part.push_str(&take(DIG2BYTES[intg0x], intg0x)?.to_string());
        }
        for _ in 0..intg0 {
            let group = take(4, 9)?;
            if int_part.is_empty() {
                int_part.push_str(&group.to_string());
            } else {
                int_part.push_str(&format!("{group:09}"));
            }
        }
        let int_part = int_part.trim_start_matches('0');
        let mut text = String::with_capacity(precision + 2);
        if !positive {
            text.push('-');
        }
        text.push_str(if int_part.is_empty() { "0" } else { int_part });
        if scale > 0 {
            text.push('.');
            for _ in 0..frac0 {
                text.push_str(&format!("{:09}", take(4, 9)?));
            }
            if frac0x > 0 {
                text.push_str(&format!(
                    "{:0width$}",
                    take(DIG2BYTES[frac0x], frac0x)?,
                    width = frac0x
                ));
            }
        }
        Some((text, size))
    }

    proptest! {
        /// Any bytes, of any precision and scale MySQL allows, decode as the first decoder
        /// read them (the same text, the same size, refused alike).
        #[test]
        fn decimals_decode_as_the_group_by_group_decoder_did(
            precision in 1usize..=65,
            scale in 0usize..=30,
            data in proptest::collection::vec(any::<u8>(), 0..32),
            written in proptest::option::of(any::<bool>()),
        ) {
            let scale = scale.min(precision);
            // Bytes a server writes hold groups below 10^9: most runs take such bytes, of a
            // positive or (`Some(false)`) a negative value; the others any bytes.
            let data: Vec<u8> = match written {
                Some(positive) => data
                    .iter()
                    .enumerate()
                    .map(|(i, b)| {
                        let v = (b & 0x03) | if i == 0 { 0x80 } else { 0 };
                        if positive { v } else { v ^ 0xff }
                    })
                    .collect(),
                None => data,
            };
            prop_assert_eq!(
                decimal(precision, scale, &data),
                decimal_by_groups(precision, scale, &data)
            );
        }
    }

    #[test]
    fn binary_decimals_decode_exactly() {
        // MySQL's documented example: DECIMAL(14,4) 1234567890.1234 is 81 0D FB 38 D2 04 D2.
        let positive = [0x81, 0x0d, 0xfb, 0x38, 0xd2, 0x04, 0xd2];
        assert_eq!(
            decimal(14, 4, &positive),
            Some(("1234567890.1234".into(), 7))
        );
        let negative: Vec<u8> = positive.iter().map(|b| b ^ 0xff).collect();
        assert_eq!(
            decimal(14, 4, &negative),
            Some(("-1234567890.1234".into(), 7))
        );
        // DECIMAL(4,2) 0.00: the sign bit only.
        assert_eq!(decimal(4, 2, &[0x80, 0x00]), Some(("0.00".into(), 2)));
    }
}
