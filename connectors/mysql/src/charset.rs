//! MySQL's character sets. A binlog row image holds a text column's bytes in the column's own
//! character set (a query's results arrive in the connection's, utf8mb4): `latin1`'s 'café'
//! is `63 61 66 e9`, which read as UTF-8 is "caf\u{FFFD}" — as is 'cafè'. So the stream
//! decodes each column by its set, with the WHATWG decoders of `encoding_rs`; the sets those
//! do not cover are refused, naming the column, before a value of them is read.

use std::borrow::Cow;
use std::collections::HashMap;

use encoding_rs::Encoding;
use mysql_async::prelude::Queryable;
use siphon_core::Result;

use crate::errors::my_error;

/// How a text column's characters are encoded: a WHATWG decoder, and where MariaDB maps
/// some bytes otherwise (checked against MariaDB 10.11 for every byte of the single-byte sets
/// and every character of the multi-byte ones: see the test), those bytes or characters
/// put right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charset {
    encoding: &'static Encoding,
    fixes: Fixes,
}

/// Where the server's conversion to Unicode differs from the WHATWG decoder's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixes {
    None,
    /// A single-byte set: these bytes are these characters (`?` where the server has none).
    Bytes(&'static [(u8, char)]),
    /// These characters of the decoder are these (JIS X 0208 against Microsoft's mapping).
    Chars(&'static [(char, char)]),
    /// ASCII: every byte past 0x7f is `?`.
    Ascii,
}

/// C1 control characters where Windows code pages have printable ones.
macro_rules! c1 {
    ($($b:literal),*) => { &[$(($b, char::from_u32($b as u32).unwrap())),*] };
}

const LATIN5: &[(u8, char)] = c1!(
    0x80, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x91, 0x92, 0x93, 0x94,
    0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9f
);
const TIS620: &[(u8, char)] = &[
    (0x80, '\u{80}'),
    (0x85, '\u{85}'),
    (0x91, '\u{91}'),
    (0x92, '\u{92}'),
    (0x93, '\u{93}'),
    (0x94, '\u{94}'),
    (0x95, '\u{95}'),
    (0x96, '\u{96}'),
    (0x97, '\u{97}'),
    (0xa0, '\u{fffd}'),
];
const KOI8U: &[(u8, char)] = &[(0x95, '\u{2022}'), (0xae, '\u{255d}'), (0xbe, '\u{256c}')];
const CP866: &[(u8, char)] = &[(0xfc, '\u{207f}'), (0xfd, '\u{b2}')];
const GREEK: &[(u8, char)] = &[
    (0xa1, '\u{2bd}'),
    (0xa2, '\u{2bc}'),
    (0xa4, '?'),
    (0xa5, '?'),
    (0xaa, '?'),
    (0xae, '?'),
    (0xd2, '?'),
    (0xff, '?'),
];
const HEBREW: &[(u8, char)] = &[
    (0xa1, '?'),
    (0xaf, '\u{203e}'),
    (0xbf, '?'),
    (0xc0, '?'),
    (0xc1, '?'),
    (0xc2, '?'),
    (0xc3, '?'),
    (0xc4, '?'),
    (0xc5, '?'),
    (0xc6, '?'),
    (0xc7, '?'),
    (0xc8, '?'),
    (0xc9, '?'),
    (0xca, '?'),
    (0xcb, '?'),
    (0xcc, '?'),
    (0xcd, '?'),
    (0xce, '?'),
    (0xcf, '?'),
    (0xd0, '?'),
    (0xd1, '?'),
    (0xd2, '?'),
    (0xd3, '?'),
    (0xd4, '?'),
    (0xd5, '?'),
    (0xd6, '?'),
    (0xd7, '?'),
    (0xd8, '?'),
    (0xd9, '?'),
    (0xda, '?'),
    (0xdb, '?'),
    (0xdc, '?'),
    (0xdd, '?'),
    (0xde, '?'),
    (0xfb, '?'),
    (0xfc, '?'),
    (0xff, '?'),
];
const CP1250: &[(u8, char)] = &[
    (0x81, '?'),
    (0x83, '?'),
    (0x88, '?'),
    (0x90, '?'),
    (0x98, '?'),
];
const CP1251: &[(u8, char)] = &[(0x98, '?')];
const CP1256: &[(u8, char)] = &[
    (0x8a, '?'),
    (0x8f, '?'),
    (0x98, '?'),
    (0x9a, '?'),
    (0x9f, '?'),
    (0xaa, '?'),
    (0xc0, '?'),
    (0xff, '?'),
];
const CP1257: &[(u8, char)] = &[
    (0x81, '?'),
    (0x83, '?'),
    (0x88, '?'),
    (0x8a, '?'),
    (0x8c, '?'),
    (0x90, '?'),
    (0x98, '?'),
    (0x9a, '?'),
    (0x9c, '?'),
    (0x9f, '?'),
    (0xa1, '?'),
    (0xa5, '?'),
];
/// MySQL's sjis is JIS X 0208 (0x8160 is WAVE DASH); WHATWG's Shift_JIS is Microsoft's.
const SJIS: &[(char, char)] = &[
    ('\u{ff3c}', '\\'),
    ('\u{ff5e}', '\u{301c}'),
    ('\u{2225}', '\u{2016}'),
    ('\u{ff0d}', '\u{2212}'),
    ('\u{ffe0}', '\u{a2}'),
    ('\u{ffe1}', '\u{a3}'),
    ('\u{ffe2}', '\u{ac}'),
];
/// GB 2312 read with the GBK decoder.
const GB2312: &[(char, char)] = &[('\u{b7}', '\u{30fb}'), ('\u{2014}', '\u{2015}')];

impl Charset {
    /// `utf8mb4`, `utf8mb3` (`utf8`), and what a query's results come in.
    pub const UTF8: Charset = Charset {
        encoding: encoding_rs::UTF_8,
        fixes: Fixes::None,
    };

    /// The set the server calls `name`; `None` for one siphon has no decoder of that agrees
    /// with the server's (`big5`, `ujis` and `eucjpms` differ in whole blocks, `gb18030` has
    /// not been checked), or none at all (`utf32`, `cp850`, `swe7`, …).
    pub fn by_name(name: &str) -> Option<Charset> {
        use encoding_rs::*;
        let (encoding, fixes) = match name.to_ascii_lowercase().as_str() {
            "utf8" | "utf8mb3" | "utf8mb4" => (UTF_8, Fixes::None),
            "ascii" => (WINDOWS_1252, Fixes::Ascii),
            // MySQL's latin1 is Windows-1252 (0x80 is €).
            "latin1" => (WINDOWS_1252, Fixes::None),
            "latin2" => (ISO_8859_2, Fixes::None),
            // ISO 8859-9, which WHATWG reads as its superset, Windows-1254.
            "latin5" => (WINDOWS_1254, Fixes::Bytes(LATIN5)),
            "latin7" => (ISO_8859_13, Fixes::None),
            "greek" => (ISO_8859_7, Fixes::Bytes(GREEK)),
            "hebrew" => (ISO_8859_8, Fixes::Bytes(HEBREW)),
            "cp1250" => (WINDOWS_1250, Fixes::Bytes(CP1250)),
            "cp1251" => (WINDOWS_1251, Fixes::Bytes(CP1251)),
            "cp1256" => (WINDOWS_1256, Fixes::Bytes(CP1256)),
            "cp1257" => (WINDOWS_1257, Fixes::Bytes(CP1257)),
            "cp866" => (IBM866, Fixes::Bytes(CP866)),
            "koi8r" => (KOI8_R, Fixes::None),
            "koi8u" => (KOI8_U, Fixes::Bytes(KOI8U)),
            "macroman" => (MACINTOSH, Fixes::None),
            "tis620" => (WINDOWS_874, Fixes::Bytes(TIS620)),
            "cp932" => (SHIFT_JIS, Fixes::None),
            "sjis" => (SHIFT_JIS, Fixes::Chars(SJIS)),
            "euckr" => (EUC_KR, Fixes::None),
            "gbk" => (GBK, Fixes::None),
            "gb2312" => (GBK, Fixes::Chars(GB2312)),
            "ucs2" | "utf16" => (UTF_16BE, Fixes::None),
            "utf16le" => (UTF_16LE, Fixes::None),
            _ => return None,
        };
        Some(Charset { encoding, fixes })
    }

    /// `bytes` as text, and whether all of them decoded (those that did not are replaced with
    /// U+FFFD; the caller warns).
    /// Owned UTF-8 bytes become the text without a copy.
    pub fn decode<'b>(self, bytes: impl Into<Cow<'b, [u8]>>) -> (String, bool) {
        let bytes = bytes.into();
        if self == Charset::UTF8 {
            return match bytes {
                Cow::Owned(owned) => match String::from_utf8(owned) {
                    Ok(s) => (s, true),
                    Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), false),
                },
                Cow::Borrowed(b) => match std::str::from_utf8(b) {
                    Ok(s) => (s.to_owned(), true),
                    Err(_) => (String::from_utf8_lossy(b).into_owned(), false),
                },
            };
        }
        let bytes = &*bytes;
        if self.fixes == Fixes::Ascii {
            let text = bytes
                .iter()
                .map(|&b| if b < 0x80 { char::from(b) } else { '?' })
                .collect();
            return (text, true);
        }
        let (text, malformed) = self.encoding.decode_without_bom_handling(bytes);
        let text = match self.fixes {
            // One character a byte.
            Fixes::Bytes(table) => text
                .chars()
                .zip(bytes)
                .map(|(c, b)| {
                    table
                        .iter()
                        .find(|(byte, _)| byte == b)
                        .map_or(c, |(_, fixed)| *fixed)
                })
                .collect(),
            Fixes::Chars(table) => text
                .chars()
                .map(|c| {
                    table
                        .iter()
                        .find(|(from, _)| *from == c)
                        .map_or(c, |(_, to)| *to)
                })
                .collect(),
            Fixes::None | Fixes::Ascii => text.into_owned(),
        };
        (text, !malformed)
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

impl FromIterator<(u16, String)> for Collations {
    /// A server's list, given rather than read (the fuzz targets').
    fn from_iter<I: IntoIterator<Item = (u16, String)>>(pairs: I) -> Self {
        Collations(pairs.into_iter().collect())
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

    /// Bytes handed over decode as the same bytes lent do, valid UTF-8 or not.
    #[test]
    fn owned_bytes_decode_as_borrowed_ones() {
        for bytes in [&b"caf\xc3\xa9"[..], b"", b"a\xffb", b"\xc3"] {
            assert_eq!(
                Charset::UTF8.decode(bytes.to_vec()),
                Charset::UTF8.decode(bytes)
            );
        }
        assert_eq!(Charset::UTF8.decode(b"a\xffb".to_vec()).0, "a\u{fffd}b");
    }

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
        assert_eq!(
            sjis.decode(b"\x81\x60").0,
            "\u{301c}",
            "WAVE DASH, as in JIS"
        );
        let cp932 = Charset::by_name("cp932").unwrap();
        assert_eq!(
            cp932.decode(b"\x81\x60").0,
            "\u{ff5e}",
            "as Microsoft maps it"
        );
        assert_eq!(
            Charset::by_name("latin5").unwrap().decode(b"\x80\xfd").0,
            "\u{80}ı"
        );
        assert_eq!(Charset::by_name("ascii").unwrap().decode(b"a\xe9").0, "a?");
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

    /// Every byte of each single-byte set, and every two-byte character of the multi-byte
    /// ones (a sample of UCS-2/UTF-16's), decodes as the server converts it to utf8mb4.
    #[tokio::test(flavor = "multi_thread")]
    async fn each_set_decodes_as_the_server_converts_it() {
        let db = siphon_test_support::mysql().await.unwrap();
        let mut conn = db.conn().await.unwrap();
        let single = [
            "ascii", "latin1", "latin2", "latin5", "latin7", "greek", "hebrew", "cp1250", "cp1251",
            "cp1256", "cp1257", "cp866", "koi8r", "koi8u", "macroman", "tis620",
        ];
        let double = [
            "sjis", "cp932", "euckr", "gbk", "gb2312", "ucs2", "utf16", "utf16le",
        ];
        let mut checked = 0;
        for set in single.into_iter().chain(double) {
            let charset = Charset::by_name(set).unwrap();
            let sequences: Vec<Vec<u8>> = if single.contains(&set) {
                (0..=255u8).map(|b| vec![b]).collect()
            } else if set.starts_with("u") {
                (0..=0xffffu32)
                    .step_by(7)
                    .map(|c| (c as u16).to_be_bytes().to_vec())
                    .collect()
            } else {
                (0x81..=0xfeu8)
                    .flat_map(|lead| (0x40..=0xfeu8).map(move |trail| vec![lead, trail]))
                    .collect()
            };
            let sequences: Vec<Vec<u8>> = match set {
                "utf16le" => sequences
                    .into_iter()
                    .map(|mut s| {
                        s.reverse();
                        s
                    })
                    .collect(),
                _ => sequences,
            };
            for batch in sequences.chunks(1000) {
                let columns: Vec<String> = batch
                    .iter()
                    .map(|b| {
                        let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
                        format!("HEX(CONVERT(CAST(UNHEX('{hex}') AS CHAR CHARACTER SET {set}) USING utf8mb4))")
                    })
                    .collect();
                let row: mysql_async::Row = conn
                    .query_first(format!("SELECT {}", columns.join(", ")))
                    .await
                    .unwrap()
                    .unwrap();
                for (i, bytes) in batch.iter().enumerate() {
                    let server: Option<String> = row.get(i).unwrap();
                    let server = server.unwrap_or_default();
                    let server = String::from_utf8(
                        (0..server.len())
                            .step_by(2)
                            .map(|j| u8::from_str_radix(&server[j..j + 2], 16).unwrap())
                            .collect(),
                    )
                    .unwrap_or_else(|_| "\u{fffd}".into());
                    // Of the multi-byte sets, the characters they have (not what the server
                    // calls invalid, which a column never holds in strict mode).
                    if !single.contains(&set)
                        && (server.contains('?')
                            || server.contains('\u{fffd}')
                            || server.is_empty())
                    {
                        continue;
                    }
                    let (ours, _) = charset.decode(bytes);
                    assert_eq!(ours, server, "{set} {bytes:02x?}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 60_000, "{checked} sequences compared");
    }
}
