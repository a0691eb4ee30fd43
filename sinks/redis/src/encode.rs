//! From net changes to Redis commands.

use std::collections::HashMap;

use siphon_core::event::{Row, Value};
use siphon_core::sink::changes::Change;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::{Event, SourceInfo};
use siphon_format::json::field_json;
use siphon_format::json::{key_text, with_value_text};

use crate::config::{RedisFormat, RedisMode};
use crate::resp::Commands;

/// Names keys and encodes rows for one sink.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    pub prefix: String,
    pub key: NameTemplate,
    pub mode: RedisMode,
    pub format: RedisFormat,
}

/// A row as stored, read back to fill the columns a change left unchanged.
#[derive(Debug)]
pub(crate) enum StoredRow {
    /// A hash's fields.
    Hash(HashMap<String, String>),
    /// A JSON document's fields.
    Json(serde_json::Map<String, serde_json::Value>),
}

impl Encoder {
    /// The Redis key of an event's row.
    pub fn row_key(&self, event: &Event) -> Option<String> {
        Some(self.key_of(event, event.key.as_ref()?))
    }

    /// The Redis key of the row of the event's table with primary key `key`.
    pub fn key_of(&self, event: &Event, key: &Row) -> String {
        self.render(&event.source, &key_text(key))
    }

    fn render(&self, source: &SourceInfo, key: &str) -> String {
        let mut out = String::with_capacity(self.prefix.len() + 48);
        out.push_str(&self.prefix);
        self.key.render_into(
            &mut out,
            &[
                ("schema", source.namespace()),
                ("table", &source.table),
                ("key", key),
            ],
        );
        out
    }

    /// A `SCAN MATCH` pattern for every key of the event's table.
    pub fn table_pattern(&self, schema: &str, table: &str) -> String {
        let mut out = glob_escape(&self.prefix);
        out.push_str(&self.key.render(&[
            ("schema", &glob_escape(schema)),
            ("table", &glob_escape(table)),
            ("key", "*"),
        ]));
        out
    }

    /// Adds the commands of one change (not a truncate) to the row `key` to `out`; returns how
    /// many. A row is always written whole: the columns the change left unchanged come from
    /// `stored`, the row [`Change::unchanged_from`] names, and without it the key is deleted
    /// (a cache may lack a row, never serve part of one as the whole).
    pub fn push(
        &self,
        out: &mut Commands,
        key: &str,
        change: &Change<'_>,
        stored: Option<&StoredRow>,
        ttl_ms: u64,
    ) -> usize {
        let row = match change {
            Change::Upsert { row, .. } if self.mode == RedisMode::Upsert => row,
            _ => {
                out.command(2).arg("DEL").arg(key);
                return 1;
            }
        };
        if change.unchanged_from().is_some() && stored.is_none() {
            out.command(2).arg("DEL").arg(key);
            return 1;
        }
        let mut commands = 1;
        match self.format {
            RedisFormat::Json => {
                let document = json_document(row, stored, change.event().is_document());
                out.command(3).arg("SET").arg(key).arg(document);
            }
            // The row's fields set and its null columns' removed, in place: half the work of
            // deleting the hash and making it anew, for Redis as for the sink. (A column
            // dropped from the table keeps its field in rows written before.)
            RedisFormat::Hash => commands += push_hash(out, key, row, stored),
        }
        if ttl_ms > 0 {
            let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
            out.command(3)
                .arg("PEXPIRE")
                .arg(key)
                .arg(itoa::Buffer::new().format(ttl));
            commands += 1;
        }
        commands
    }
}

/// Adds the row's hash commands to `out`: every non-null column (an unchanged one from the
/// stored hash) set, the null columns' fields removed; the key deleted where no field is
/// left. Returns how many commands beyond the first.
fn push_hash(out: &mut Commands, key: &str, row: &Row, stored: Option<&StoredRow>) -> usize {
    let stored_text = |column: &str| match stored {
        Some(StoredRow::Hash(fields)) => fields.get(column),
        _ => None,
    };
    // A RESP command gives its length first: the fields are counted before they are written.
    let (mut fields, mut nulls) = (0, 0);
    for (column, value) in row.iter() {
        match value {
            Value::Null => nulls += 1,
            Value::Unchanged => fields += usize::from(stored_text(column).is_some()),
            _ => fields += 1,
        }
    }
    if fields == 0 {
        out.command(2).arg("DEL").arg(key);
        return 0;
    }
    out.command(2 + 2 * fields).arg("HSET").arg(key);
    for (column, value) in row.iter() {
        match value {
            Value::Null => {}
            Value::Unchanged => {
                if let Some(text) = stored_text(column) {
                    out.arg(column).arg(text);
                }
            }
            v => {
                out.arg(column);
                with_value_text(v, |text| out.arg(text));
            }
        }
    }
    if nulls == 0 {
        return 0;
    }
    out.command(2 + nulls).arg("HDEL").arg(key);
    for (column, value) in row.iter() {
        if let Value::Null = value {
            out.arg(column);
        }
    }
    1
}

/// The row as a JSON object; an unchanged column takes its value from `stored`.
pub(crate) fn json_document(row: &Row, stored: Option<&StoredRow>, document: bool) -> String {
    let mut doc = serde_json::Map::with_capacity(row.len());
    for (column, value) in row.iter() {
        let json = match value {
            Value::Unchanged => match stored {
                Some(StoredRow::Json(fields)) => match fields.get(column) {
                    Some(v) => v.clone(),
                    None => continue,
                },
                _ => continue,
            },
            v => field_json(v, document),
        };
        doc.insert(column.to_owned(), json);
    }
    serde_json::Value::Object(doc).to_string()
}

/// Escapes the characters `SCAN MATCH` treats as a pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
