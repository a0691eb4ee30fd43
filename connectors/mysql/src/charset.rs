//! MySQL's character sets. A binlog row image holds a text column's bytes in the column's own
//! character set (a query's results arrive in the connection's, utf8mb4): `latin1`'s 'café'
//! is `63 61 66 e9`, which read as UTF-8 is "caf\u{FFFD}" — as is 'cafè'. So the stream
//! decodes each column by its set, with the WHATWG decoders of `encoding_rs`; the sets those
//! do not cover are refused, naming the column, before a value of them is read.

use std::collections::HashMap;

use encoding_rs::Encoding;
use mysql_async::prelude::Queryable;
use siphon_core::Result;

use crate::catalog::my_error;

/// How a text column's characters are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charset(&'static Encoding);

impl Charset {
    /// `utf8mb4`, `utf8mb3` (`utf8`), and what a query's results come in.
    pub const UTF8: Charset = Charset(encoding_rs::UTF_8);

    /// The set the server calls `name`; `None` for one siphon has no decoder of.
    pub fn by_name(name: &str) -> Option<Charset> {
        use encoding_rs::*;
        let encoding = match name.to_ascii_lowercase().as_str() {
            "utf8" | "utf8mb3" | "utf8mb4" => UTF_8,
            // ASCII is a subset of both; MySQL's latin1 is Windows-1252 (0x80 is €).
            "ascii" | "latin1" => WINDOWS_1252,
            "latin2" => ISO_8859_2,
            // ISO 8859-9; WHATWG reads it as its superset, Windows-1254.
            "latin5" => WINDOWS_1254,
            "latin7" => ISO_8859_13,
            "greek" => ISO_8859_7,
            "hebrew" => ISO_8859_8,
            "cp1250" => WINDOWS_1250,
            "cp1251" => WINDOWS_1251,
            "cp1256" => WINDOWS_1256,
            "cp1257" => WINDOWS_1257,
            "cp866" => IBM866,
            "koi8r" => KOI8_R,
            "koi8u" => KOI8_U,
            "macroman" => MACINTOSH,
            "tis620" => WINDOWS_874,
            // WHATWG's Shift_JIS is Microsoft's cp932, a superset of sjis.
            "sjis" | "cp932" => SHIFT_JIS,
            "ujis" | "eucjpms" => EUC_JP,
            "euckr" => EUC_KR,
            "gb2312" | "gbk" => GBK,
            "gb18030" => GB18030,
            "big5" => BIG5,
            "ucs2" | "utf16" => UTF_16BE,
            "utf16le" => UTF_16LE,
            _ => return None,
        };
        Some(Charset(encoding))
    }

    /// `bytes` as text, and whether all of them decoded (those that did not are replaced with
    /// U+FFFD; the caller warns).
    pub fn decode(self, bytes: &[u8]) -> (String, bool) {
        if self == Charset::UTF8 {
            return match std::str::from_utf8(bytes) {
                Ok(s) => (s.to_owned(), true),
                Err(_) => (String::from_utf8_lossy(bytes).into_owned(), false),
            };
        }
        let (text, malformed) = self.0.decode_without_bom_handling(bytes);
        (text.into_owned(), !malformed)
    }
}

/// The server's collations by id (a table map names a column's set by its collation), and
/// their character sets.
#[derive(Debug, Clone, Default)]
pub struct Collations(HashMap<u16, String>);

impl Collations {
    /// As the server lists them. MariaDB (10.10 and later) lists the collations a table map
    /// may name by an id of their set's own (`utf8mb4_uca1400_ai_ci` is 2304) only in
    /// COLLATION_CHARACTER_SET_APPLICABILITY, with COLLATIONS giving them no id; MySQL's
    /// applicability table has no ids at all.
    pub async fn read(conn: &mut mysql_async::Conn) -> Result<Collations> {
        let mut rows: Vec<(Option<u64>, Option<String>)> = conn
            .query("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
            .await
            .map_err(|e| my_error("reading the server's collations", &e))?;
        if let Ok(more) = conn
            .query::<(Option<u64>, Option<String>), _>(
                "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY",
            )
            .await
        {
            rows.extend(more);
        }
        Ok(Collations(
            rows.into_iter()
                .filter_map(|(id, set)| Some((u16::try_from(id?).ok()?, set?)))
                .collect(),
        ))
    }

    /// The character set of collation `id`.
    pub fn charset(&self, id: u16) -> Option<&str> {
        self.0.get(&id).map(String::as_str)
    }
}

/// The error for a column in a set siphon cannot decode.
pub fn unsupported(column: &str, set: &str) -> siphon_core::Error {
    siphon_core::Error::permanent(format!(
        "column {column} is in the character set {set}, which siphon cannot decode from the \
         binlog; convert it (ALTER TABLE … MODIFY … CHARACTER SET utf8mb4) or leave the table out"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_decode_by_their_set() {
        let latin1 = Charset::by_name("latin1").unwrap();
        assert_eq!(latin1.decode(b"caf\xe9"), ("café".into(), true));
        assert_eq!(latin1.decode(b"caf\xe8"), ("cafè".into(), true));
        assert_eq!(latin1.decode(b"\x80"), ("€".into(), true));
        let koi8 = Charset::by_name("koi8r").unwrap();
        assert_eq!(koi8.decode(b"\xd0\xd2\xc9"), ("при".into(), true));
        let sjis = Charset::by_name("sjis").unwrap();
        assert_eq!(sjis.decode(b"\x93\xfa\x96\x7b"), ("日本".into(), true));
        let ucs2 = Charset::by_name("ucs2").unwrap();
        assert_eq!(ucs2.decode(b"\x00a\x00\xe9"), ("aé".into(), true));
        assert!(!Charset::UTF8.decode(b"\xff").1, "not UTF-8");
        for refused in [
            "utf32", "cp850", "cp852", "swe7", "dec8", "hp8", "keybcs2", "armscii8", "geostd8",
            "macce",
        ] {
            assert_eq!(Charset::by_name(refused), None, "{refused}");
        }
    }
}
