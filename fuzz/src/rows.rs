//! A table map and a rows event built from a column list, for `binlog_rows`: the columns'
//! types chosen by the input, so that every type's row image is reached, each table map
//! well formed (a table map's own bytes, mutated, mostly stop at its parser).
//!
//! ```text
//! spec   = kind:u8  count:u8  column{count}  rows-data   (a table of at most 255 columns)
//! kind   = which rows event: % 6 over WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1
//!          (MariaDB's), WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS (MySQL's, v2)
//! column = type:u8 (% TYPES.len(): an index into TYPES)  metadata (as many bytes as
//!          the type has)  flags:u8  labels (an ENUM or SET only)
//! flags  = bit 0 nullable, bit 1 unsigned, bit 2 in the key, bits 3-7 % COLLATIONS.len()
//! labels = count:u8 (% 8)  (len:u8 (% 16)  bytes){count}
//! ```
//!
//! The table map carries full row metadata (`binlog_row_metadata = FULL`): names, signedness,
//! character sets per column, enum and set labels, the primary key.

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;

use crate::binlog;

/// The column types a table map may name, by their byte.
pub const TYPES: &[u8] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 245, 246, 247, 248, 249,
    250, 251, 252, 253, 254, 255,
];

/// Collation ids a character column may have (as the fuzzing module's server lists them).
pub const COLLATIONS: &[u16] = &[
    45, 46, 224, 2304, 33, 83, 8, 47, 63, 11, 9, 51, 7, 13, 95, 19, 28, 24, 35, 54, 56, 1, 60, 248,
    255,
];

/// The rows event types `kind` picks from.
pub const ROWS_KINDS: [u8; 6] = [23, 24, 25, 30, 31, 32];

/// Bytes of a type's metadata in a table map (`mysql_common`'s `get_metadata`).
pub fn metadata_len(ty: u8) -> usize {
    match ty {
        4 | 5 | 17 | 18 | 19 | 245 | 249..=252 | 255 => 1,
        15 | 16 | 246..=248 | 254 => 2,
        _ => 0,
    }
}

/// The type a column's values have: a STRING's metadata names an ENUM's or SET's.
fn real_type(ty: u8, meta: &[u8]) -> u8 {
    match (ty, meta.first()) {
        (254, Some(&(247 | 248))) => meta[0],
        _ => ty,
    }
}

fn is_numeric(ty: u8) -> bool {
    ColumnType::try_from(ty).is_ok_and(|t| t.is_numeric_type())
}

/// Character columns as siphon counts them for their character sets (geometry included).
fn is_character(ty: u8) -> bool {
    matches!(ty, 254 | 253 | 15 | 252 | 255)
}

fn is_label(ty: u8) -> bool {
    matches!(ty, 247 | 248)
}

/// A length-encoded integer.
fn lenenc(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// One column of a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub ty: u8,
    pub meta: Vec<u8>,
    pub nullable: bool,
    pub unsigned: bool,
    pub key: bool,
    pub collation: u16,
    pub labels: Vec<Vec<u8>>,
}

/// A spec read: the rows event's type, the columns, the rows data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub kind: u8,
    pub columns: Vec<Column>,
    pub rows: Vec<u8>,
}

impl Spec {
    /// Reads a spec; `None` where the input ends inside its columns.
    pub fn read(data: &[u8]) -> Option<Spec> {
        let mut at = 0;
        let mut next = || {
            let b = *data.get(at)?;
            at += 1;
            Some(b)
        };
        let kind = ROWS_KINDS[usize::from(next()?) % ROWS_KINDS.len()];
        let count = next()?;
        let mut columns = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let ty = TYPES[usize::from(next()?) % TYPES.len()];
            let meta = (0..metadata_len(ty))
                .map(|_| next())
                .collect::<Option<Vec<u8>>>()?;
            let flags = next()?;
            let mut labels = Vec::new();
            if is_label(real_type(ty, &meta)) {
                for _ in 0..next()? % 8 {
                    let len = next()? % 16;
                    labels.push((0..len).map(|_| next()).collect::<Option<Vec<u8>>>()?);
                }
            }
            columns.push(Column {
                ty,
                meta,
                nullable: flags & 1 != 0,
                unsigned: flags & 2 != 0,
                key: flags & 4 != 0,
                collation: COLLATIONS[usize::from(flags >> 3) % COLLATIONS.len()],
                labels,
            });
        }
        Some(Spec {
            kind,
            columns,
            rows: data[at..].to_vec(),
        })
    }

    /// The bytes [`Spec::read`] reads this spec from.
    pub fn write(&self) -> Vec<u8> {
        let mut out = vec![
            ROWS_KINDS.iter().position(|k| *k == self.kind).unwrap_or(0) as u8,
            self.columns.len() as u8,
        ];
        for c in &self.columns {
            out.push(TYPES.iter().position(|t| *t == c.ty).unwrap_or(0) as u8);
            out.extend_from_slice(&c.meta);
            let collation = COLLATIONS
                .iter()
                .position(|id| *id == c.collation)
                .unwrap_or(0) as u8;
            out.push(
                u8::from(c.nullable)
                    | u8::from(c.unsigned) << 1
                    | u8::from(c.key) << 2
                    | collation << 3,
            );
            if is_label(real_type(c.ty, &c.meta)) {
                out.push(c.labels.len() as u8);
                for l in &c.labels {
                    out.push(l.len() as u8);
                    out.extend_from_slice(l);
                }
            }
        }
        out.extend_from_slice(&self.rows);
        out
    }

    /// The table map event and the rows event, as the server sends them (no checksums: the
    /// default format description has none).
    pub fn events(&self) -> [Vec<u8>; 2] {
        const TABLE_ID: u64 = 42;
        let n = self.columns.len();
        let real: Vec<u8> = self
            .columns
            .iter()
            .map(|c| real_type(c.ty, &c.meta))
            .collect();
        let bitmap = |bit: &dyn Fn(usize) -> bool, len: usize, msb_first: bool| {
            let mut bytes = vec![0u8; len.div_ceil(8)];
            for i in (0..len).filter(|&i| bit(i)) {
                bytes[i / 8] |= if msb_first {
                    0x80 >> (i % 8)
                } else {
                    1 << (i % 8)
                };
            }
            bytes
        };

        let mut map = Vec::new();
        map.extend_from_slice(&TABLE_ID.to_le_bytes()[..6]);
        map.extend_from_slice(&1u16.to_le_bytes());
        for name in [&b"db"[..], b"t"] {
            map.push(name.len() as u8);
            map.extend_from_slice(name);
            map.push(0);
        }
        lenenc(&mut map, n as u64);
        map.extend(self.columns.iter().map(|c| c.ty));
        let meta: Vec<u8> = self.columns.iter().flat_map(|c| c.meta.clone()).collect();
        lenenc(&mut map, meta.len() as u64);
        map.extend_from_slice(&meta);
        map.extend(bitmap(&|i| self.columns[i].nullable, n, false));
        let mut field = |kind: u8, value: Vec<u8>| {
            map.push(kind);
            lenenc(&mut map, value.len() as u64);
            map.extend_from_slice(&value);
        };
        let numeric: Vec<&Column> = self.columns.iter().filter(|c| is_numeric(c.ty)).collect();
        if !numeric.is_empty() {
            field(1, bitmap(&|i| numeric[i].unsigned, numeric.len(), true));
        }
        let mut sets = Vec::new();
        let mut label_sets = Vec::new();
        for (c, ty) in self.columns.iter().zip(&real) {
            if is_character(*ty) {
                lenenc(&mut sets, u64::from(c.collation));
            } else if is_label(*ty) {
                lenenc(&mut label_sets, u64::from(c.collation));
            }
        }
        if !sets.is_empty() {
            field(3, sets);
        }
        let mut names = Vec::new();
        for i in 0..n {
            let name = format!("c{i}");
            lenenc(&mut names, name.len() as u64);
            names.extend_from_slice(name.as_bytes());
        }
        field(4, names);
        for (kind, label_type) in [(5, 248), (6, 247)] {
            let mut value = Vec::new();
            for (c, _) in self
                .columns
                .iter()
                .zip(&real)
                .filter(|(_, t)| **t == label_type)
            {
                lenenc(&mut value, c.labels.len() as u64);
                for l in &c.labels {
                    lenenc(&mut value, l.len() as u64);
                    value.extend_from_slice(l);
                }
            }
            if !value.is_empty() {
                field(kind, value);
            }
        }
        let mut key = Vec::new();
        for (i, _) in self.columns.iter().enumerate().filter(|(_, c)| c.key) {
            lenenc(&mut key, i as u64);
        }
        if !key.is_empty() {
            field(8, key);
        }
        if !label_sets.is_empty() {
            field(11, label_sets);
        }

        let mut rows = Vec::new();
        rows.extend_from_slice(&TABLE_ID.to_le_bytes()[..6]);
        rows.extend_from_slice(&1u16.to_le_bytes());
        if self.kind >= 30 {
            rows.extend_from_slice(&2u16.to_le_bytes());
        }
        lenenc(&mut rows, n as u64);
        let present = bitmap(&|_| true, n, false);
        rows.extend_from_slice(&present);
        if matches!(self.kind, 24 | 31) {
            rows.extend_from_slice(&present);
        }
        rows.extend_from_slice(&self.rows);

        let map = binlog::event(19, 1, 4, &map);
        let rows = binlog::event(self.kind, 1, 4 + map.len() as u32, &rows);
        [map, rows]
    }

    /// The spec of a real table map and a rows event of its table (`kind`, its rows data),
    /// for the seed corpus; `None` for a table map it cannot describe.
    pub fn of(tme: &TableMapEvent<'_>, kind: u8, rows: &[u8]) -> Option<Spec> {
        let n = tme.columns_count() as usize;
        if n > 255 {
            return None;
        }
        let mut columns = Vec::with_capacity(n);
        for i in 0..n {
            let ty = tme.get_raw_column_type(i).ok()?? as u8;
            let meta = tme.get_column_metadata(i)?.to_vec();
            columns.push(Column {
                ty,
                nullable: tme.null_bitmask().get(i).is_some_and(|b| *b),
                unsigned: false,
                key: false,
                collation: 45,
                labels: Vec::new(),
                meta,
            });
        }
        let numeric: Vec<usize> = (0..n).filter(|&i| is_numeric(columns[i].ty)).collect();
        let character: Vec<usize> = (0..n)
            .filter(|&i| is_character(real_type(columns[i].ty, &columns[i].meta)))
            .collect();
        let labelled = |t: u8| -> Vec<usize> {
            (0..n)
                .filter(|&i| real_type(columns[i].ty, &columns[i].meta) == t)
                .collect()
        };
        let (enums, sets, label_columns) = (labelled(247), labelled(248), {
            let mut both = labelled(247);
            both.extend(labelled(248));
            both.sort_unstable();
            both
        });
        for field in tme.iter_optional_meta() {
            match field.ok()? {
                OptionalMetadataField::Signedness(bits) => {
                    for (i, b) in numeric.iter().zip(bits.iter()) {
                        columns[*i].unsigned = *b;
                    }
                }
                OptionalMetadataField::DefaultCharset(c) => {
                    for &i in &character {
                        columns[i].collation = c.default_charset();
                    }
                    for e in c.iter_non_default().filter_map(|e| e.ok()) {
                        if let Some(&i) = character.get(e.column_index() as usize) {
                            columns[i].collation = e.charset();
                        }
                    }
                }
                OptionalMetadataField::ColumnCharset(c) => {
                    for (i, id) in character.iter().zip(c.iter_charsets()) {
                        columns[*i].collation = id.ok()?;
                    }
                }
                OptionalMetadataField::EnumAndSetDefaultCharset(c) => {
                    for &i in &label_columns {
                        columns[i].collation = c.default_charset();
                    }
                }
                OptionalMetadataField::EnumAndSetColumnCharset(c) => {
                    for (i, id) in label_columns.iter().zip(c.iter_charsets()) {
                        columns[*i].collation = id.ok()?;
                    }
                }
                OptionalMetadataField::EnumStrValue(list) => {
                    for (i, v) in enums.iter().zip(list.iter_values()) {
                        columns[*i].labels = v
                            .ok()?
                            .values()
                            .iter()
                            .map(|s| s.value_raw().to_vec())
                            .collect();
                    }
                }
                OptionalMetadataField::SetStrValue(list) => {
                    for (i, v) in sets.iter().zip(list.iter_values()) {
                        columns[*i].labels = v
                            .ok()?
                            .values()
                            .iter()
                            .map(|s| s.value_raw().to_vec())
                            .collect();
                    }
                }
                OptionalMetadataField::SimplePrimaryKey(keys) => {
                    for k in keys.iter_indexes() {
                        columns.get_mut(k.ok()? as usize)?.key = true;
                    }
                }
                OptionalMetadataField::PrimaryKeyWithPrefix(keys) => {
                    for k in keys.iter_keys() {
                        columns.get_mut(k.ok()?.column_index() as usize)?.key = true;
                    }
                }
                _ => {}
            }
        }
        for c in &mut columns {
            if !COLLATIONS.contains(&c.collation) {
                c.collation = 45;
            }
            c.labels.truncate(7);
            for l in &mut c.labels {
                l.truncate(15);
            }
        }
        Some(Spec {
            kind,
            columns,
            rows: rows.to_vec(),
        })
    }
}
