//! `rename_columns`, `mask` and `truncate`: each changes some columns of some tables, in the
//! rows, the key and the schema alike. (`drop_columns` and `keep_columns` are the
//! routing's column filter, `siphon_core::sink::routing::ColumnFilter`.)

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use siphon_core::event::{Event, Row, Value};
use siphon_core::name::{Name, TablePattern, parse_column};
use siphon_core::schema::{Column, ColumnKind, TableSchema};
use siphon_core::sink::stage::{SchemaRewrites, Stage};
use siphon_core::source::TableInfo;

/// What happens to a chosen column.
#[derive(Debug)]
pub enum Change {
    /// It takes these names (old → new).
    Rename(BTreeMap<String, Name>),
    /// Its values are replaced (a text column from then on).
    Mask(Masker),
    /// Its values are cut to this many characters (bytes of a binary value).
    Truncate(usize),
}

/// How a mask replaces a value.
pub enum Masker {
    /// By this text.
    Fixed(String),
    /// By the lowercase hex of HMAC-SHA-256 of its text, under this key.
    Hmac(Hmac<Sha256>),
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Masker::Fixed(text) => f.debug_tuple("Fixed").field(text).finish(),
            // The key stays out of logs and errors.
            Masker::Hmac(_) => f.write_str("Hmac(<key>)"),
        }
    }
}

impl Masker {
    /// A keyed masker; `None` for an empty key.
    pub fn hmac(key: &[u8]) -> Option<Masker> {
        (!key.is_empty())
            .then(|| Hmac::new_from_slice(key).ok().map(Masker::Hmac))
            .flatten()
    }

    fn mask(&self, value: &Value) -> Value {
        match (self, value) {
            (_, Value::Null | Value::Unchanged) => value.clone(),
            (Masker::Fixed(text), _) => Value::Text(text.clone()),
            (Masker::Hmac(mac), value) => {
                let mut mac = mac.clone();
                match value {
                    Value::Bytes(b) => mac.update(b),
                    other => mac.update(siphon_format::json::value_text(other).as_bytes()),
                }
                Value::Text(hex(&mac.finalize().into_bytes()))
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        digits.extend_from_slice(&[DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]);
    }
    String::from_utf8(digits).expect("hex digits are ASCII")
}

/// Changes the chosen columns of the chosen tables.
#[derive(Debug)]
pub struct ColumnChange {
    /// Which columns: a name in every table, or in the tables a pattern matches.
    columns: Vec<(Option<TablePattern>, String)>,
    change: Change,
    schemas: SchemaRewrites,
}

impl ColumnChange {
    /// `change` on `columns` ("column" or "schema.table.column", `*` allowed in the table
    /// part).
    pub fn new(columns: &[String], change: Change) -> Result<ColumnChange, String> {
        Ok(ColumnChange {
            columns: columns
                .iter()
                .map(|c| parse_column(c))
                .collect::<Result<_, _>>()?,
            change,
            schemas: SchemaRewrites::default(),
        })
    }

    /// Renames in the tables `tables` matches (every table where it is empty).
    pub fn rename(
        tables: &[String],
        renames: &BTreeMap<String, String>,
    ) -> Result<ColumnChange, String> {
        let patterns: Vec<Option<TablePattern>> = if tables.is_empty() {
            vec![None]
        } else {
            tables
                .iter()
                .map(|t| TablePattern::parse(t).map(Some))
                .collect::<Result<_, _>>()?
        };
        let columns = patterns
            .iter()
            .flat_map(|p| renames.keys().map(move |c| (p.clone(), c.clone())))
            .collect();
        Ok(ColumnChange {
            columns,
            change: Change::Rename(
                renames
                    .iter()
                    .map(|(old, new)| (old.clone(), Name::from(new.as_str())))
                    .collect(),
            ),
            schemas: SchemaRewrites::default(),
        })
    }

    fn chosen(&self, schema: &str, table: &str, column: &str) -> bool {
        self.chosen_in(schema, table).is_chosen(column)
    }

    /// The columns chosen in table `schema.table`.
    fn chosen_in(&self, schema: &str, table: &str) -> Chosen<'_> {
        let matches = |(t, _): &(Option<TablePattern>, String)| {
            t.as_ref().is_none_or(|t| t.matches_parts(schema, table))
        };
        if self.columns.len() <= 64 {
            let mask = self
                .columns
                .iter()
                .enumerate()
                .filter(|(_, c)| matches(c))
                .fold(0u64, |mask, (i, _)| mask | 1 << i);
            Chosen::Mask(&self.columns, mask)
        } else {
            Chosen::Listed(
                self.columns
                    .iter()
                    .filter(|c| matches(c))
                    .map(|(_, c)| c.as_str())
                    .collect(),
            )
        }
    }

    /// Changes the `chosen` columns of `row`.
    fn change_row(&self, chosen: &Chosen<'_>, row: &mut Row) {
        for (column, value) in &mut row.0 {
            if !chosen.is_chosen(column) {
                continue;
            }
            match &self.change {
                Change::Rename(names) => {
                    if let Some(new) = names.get(&**column) {
                        *column = new.clone();
                    }
                }
                Change::Mask(masker) => *value = masker.mask(value),
                Change::Truncate(length) => truncate(value, *length),
            }
        }
    }

    fn change_column(&self, column: &Column) -> Column {
        let mut column = column.clone();
        match &self.change {
            Change::Rename(names) => {
                if let Some(new) = names.get(&*column.name) {
                    column.name = new.clone();
                }
            }
            Change::Mask(_) => {
                column.kind = ColumnKind::Text { length: None };
                column.type_name = "text".into();
                column.type_id = 0;
                column.type_modifier = -1;
            }
            Change::Truncate(_) => {}
        }
        column
    }
}

/// The columns a change chooses in one table: a mask over its column list (of up to 64), or
/// their names.
enum Chosen<'c> {
    Mask(&'c [(Option<TablePattern>, String)], u64),
    Listed(Vec<&'c str>),
}

impl Chosen<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Chosen::Mask(_, mask) => *mask == 0,
            Chosen::Listed(names) => names.is_empty(),
        }
    }

    fn is_chosen(&self, column: &str) -> bool {
        match self {
            Chosen::Mask(columns, mask) => columns
                .iter()
                .enumerate()
                .any(|(i, (_, c))| mask & (1 << i) != 0 && c == column),
            Chosen::Listed(names) => names.contains(&column),
        }
    }
}

fn truncate(value: &mut Value, length: usize) {
    match value {
        Value::Text(s) | Value::Json(s) => {
            if let Some((at, _)) = s.char_indices().nth(length) {
                s.truncate(at);
            }
        }
        Value::Bytes(b) => b.truncate(length),
        _ => {}
    }
}

impl Stage for ColumnChange {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        // The table's chosen columns, found once an event rather than once a column.
        let chosen = self.chosen_in(event.source.namespace(), &event.source.table);
        if chosen.is_empty() {
            return Ok(true);
        }
        for row in [&mut event.before, &mut event.after, &mut event.key]
            .into_iter()
            .flatten()
        {
            self.change_row(&chosen, row);
        }
        if let Some(s) = &mut event.schema {
            *s = self.schemas.get(s, |s| {
                let name = s.name();
                TableSchema {
                    columns: s
                        .columns
                        .iter()
                        .map(|c| {
                            if self.chosen(name.namespace(), name.table(), &c.name) {
                                self.change_column(c)
                            } else {
                                c.clone()
                            }
                        })
                        .collect(),
                    ..s.clone()
                }
            });
        }
        Ok(true)
    }

    fn table(&self, mut table: TableInfo) -> Option<TableInfo> {
        if let Change::Rename(names) = &self.change {
            let (schema, name) = (
                table.name.namespace().to_owned(),
                table.name.table().to_owned(),
            );
            for column in &mut table.key_columns {
                if self.chosen(&schema, &name, column)
                    && let Some(new) = names.get(column.as_str())
                {
                    *column = new.to_string();
                }
            }
        }
        Some(table)
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::Op;
    use siphon_core::testing::{event, row};

    use super::*;

    #[test]
    fn a_keyed_mask_is_the_hex_hmac_of_the_text() {
        let mask = ColumnChange::new(
            &["public.t.name".into()],
            Change::Mask(Masker::hmac(b"key").unwrap()),
        )
        .unwrap();
        let mut e = event(
            "t",
            Op::Create,
            1,
            None,
            Some(row(
                1,
                "The quick brown fox jumps over the lazy dog",
                Value::Null,
            )),
        );
        mask.apply(&mut e).unwrap();
        // RFC 4231-style check value: HMAC-SHA-256("key", "The quick brown fox…").
        assert_eq!(
            e.after.unwrap().get("name"),
            Some(&Value::Text(
                "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8".into()
            ))
        );
        let mut other = event("u", Op::Create, 1, None, Some(row(1, "a", Value::Null)));
        mask.apply(&mut other).unwrap();
        assert_eq!(
            other.after.unwrap().get("name"),
            Some(&Value::Text("a".into()))
        );
    }

    #[test]
    fn renames_reach_the_key_and_truncation_counts_characters() {
        let rename =
            ColumnChange::rename(&[], &BTreeMap::from([("id".into(), "order_id".into())])).unwrap();
        let mut e = event("t", Op::Create, 7, None, Some(row(7, "a", Value::Null)));
        rename.apply(&mut e).unwrap();
        assert_eq!(
            e.key.as_ref().unwrap().get("order_id"),
            Some(&Value::Int(7))
        );
        assert_eq!(
            e.after.as_ref().unwrap().get("order_id"),
            Some(&Value::Int(7))
        );
        let info = TableInfo {
            name: siphon_core::TableName::new("public", "t"),
            key_columns: vec!["id".into()],
        };
        assert_eq!(rename.table(info).unwrap().key_columns, ["order_id"]);
        let cut = ColumnChange::new(&["name".into()], Change::Truncate(3)).unwrap();
        let mut e = event("t", Op::Create, 1, None, Some(row(1, "héllo", Value::Null)));
        cut.apply(&mut e).unwrap();
        assert_eq!(
            e.after.unwrap().get("name"),
            Some(&Value::Text("hél".into()))
        );
    }
}
