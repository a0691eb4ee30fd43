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
pub fn decimal(precision: usize, scale: usize, data: &[u8]) -> Option<(String, usize)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
