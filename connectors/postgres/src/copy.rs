//! Rows of `COPY … TO STDOUT` (text format): tab-separated, `\N` for NULL, backslash escapes.

use std::borrow::Cow;

/// Splits one line (without its newline) into column texts, borrowing from the line where no
/// escape needs undoing.
pub fn parse_line(line: &[u8]) -> Result<Vec<Option<Cow<'_, str>>>, String> {
    let mut out = Vec::new();
    for field in line.split(|b| *b == b'\t') {
        if field == b"\\N" {
            out.push(None);
            continue;
        }
        if !field.contains(&b'\\') {
            let text = std::str::from_utf8(field).map_err(|e| format!("not UTF-8: {e}"))?;
            out.push(Some(Cow::Borrowed(text)));
            continue;
        }
        let mut bytes = Vec::with_capacity(field.len());
        let mut i = 0;
        while i < field.len() {
            let b = field[i];
            i += 1;
            if b != b'\\' {
                bytes.push(b);
                continue;
            }
            let Some(&e) = field.get(i) else {
                return Err("a line ends in a backslash".into());
            };
            i += 1;
            match e {
                b'b' => bytes.push(8),
                b'f' => bytes.push(12),
                b'n' => bytes.push(b'\n'),
                b'r' => bytes.push(b'\r'),
                b't' => bytes.push(b'\t'),
                b'v' => bytes.push(11),
                b'x' => {
                    let hex: Vec<u8> = field[i..]
                        .iter()
                        .take(2)
                        .take_while(|c| c.is_ascii_hexdigit())
                        .copied()
                        .collect();
                    i += hex.len();
                    let text = std::str::from_utf8(&hex).map_err(|e| e.to_string())?;
                    bytes.push(
                        u8::from_str_radix(text, 16).map_err(|_| "bad \\x escape".to_string())?,
                    );
                }
                b'0'..=b'7' => {
                    let mut v = u32::from(e - b'0');
                    for _ in 0..2 {
                        match field.get(i) {
                            Some(d @ b'0'..=b'7') => {
                                v = v * 8 + u32::from(d - b'0');
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    bytes.push(v as u8);
                }
                other => bytes.push(other),
            }
        }
        out.push(Some(Cow::Owned(
            String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?,
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_nulls_and_escapes() {
        assert_eq!(
            parse_line(b"1\t\\N\ta\\tb\\nc\\\\d\t\\101\\x42").unwrap(),
            vec![
                Some("1".into()),
                None,
                Some("a\tb\nc\\d".into()),
                Some("AB".into())
            ]
        );
        assert_eq!(parse_line(b"").unwrap(), vec![Some(Cow::Borrowed(""))]);
        assert!(parse_line(b"bad\\").is_err());
    }
}
