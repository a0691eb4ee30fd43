//! From net changes to Redis commands.

use siphon_core::event::{Row, Value};
use siphon_core::json::value_json;
use siphon_core::sink::changes::{Change, key_text, value_text};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::{Event, SourceInfo};

use crate::config::{RedisFormat, RedisMode};

/// Names keys and encodes rows for one sink.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    pub prefix: String,
    pub key: NameTemplate,
    pub mode: RedisMode,
    pub format: RedisFormat,
}

impl Encoder {
    /// The Redis key of an event's row.
    pub fn row_key(&self, event: &Event) -> Option<String> {
        let key = event.key.as_ref()?;
        Some(self.render(&event.source, &key_text(key)))
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

    /// Adds the commands of one change (not a truncate) to the row `key` to `pipe`; returns how many.
    /// `stored` is the key's stored JSON document when the row has unchanged columns and the
    /// format is JSON.
    pub fn push(
        &self,
        pipe: &mut redis::Pipeline,
        key: &str,
        change: &Change<'_>,
        stored: Option<&serde_json::Map<String, serde_json::Value>>,
        ttl_ms: u64,
    ) -> usize {
        let row = match change {
            Change::Upsert { row, .. } if self.mode == RedisMode::Upsert => row,
            _ => {
                pipe.del(key);
                return 1;
            }
        };
        let mut commands = 0;
        match self.format {
            RedisFormat::Json => {
                pipe.set(key, json_document(row, stored));
                commands += 1;
            }
            RedisFormat::Hash => {
                let KeyWrite { replace, set, del } = hash_fields(row);
                if replace {
                    pipe.del(key);
                    commands += 1;
                }
                if !set.is_empty() {
                    pipe.hset_multiple(key, &set);
                    commands += 1;
                }
                if !del.is_empty() {
                    pipe.hdel(key, del);
                    commands += 1;
                }
            }
        }
        if ttl_ms > 0 {
            pipe.pexpire(key, i64::try_from(ttl_ms).unwrap_or(i64::MAX));
            commands += 1;
        }
        commands
    }
}

/// A hash write: whether it replaces the hash, fields to set and fields to remove.
struct KeyWrite<'r> {
    replace: bool,
    set: Vec<(&'r str, std::borrow::Cow<'r, str>)>,
    del: Vec<&'r str>,
}

/// The whole hash (every non-null column), or when some columns are unchanged, an update:
/// those keep their stored field and null ones are removed.
fn hash_fields(row: &Row) -> KeyWrite<'_> {
    let partial = row.iter().any(|(_, v)| *v == Value::Unchanged);
    let mut set = Vec::with_capacity(row.len());
    let mut del = Vec::new();
    for (column, value) in row.iter() {
        match value {
            Value::Unchanged => {}
            Value::Null => {
                if partial {
                    del.push(column);
                }
            }
            v => set.push((column, value_text(v))),
        }
    }
    KeyWrite {
        replace: !partial,
        set,
        del,
    }
}

/// The row as a JSON object; an unchanged column takes its value from `stored`.
pub(crate) fn json_document(
    row: &Row,
    stored: Option<&serde_json::Map<String, serde_json::Value>>,
) -> String {
    let mut doc = serde_json::Map::with_capacity(row.len());
    for (column, value) in row.iter() {
        let json = match value {
            Value::Unchanged => match stored.and_then(|s| s.get(column)) {
                Some(v) => v.clone(),
                None => continue,
            },
            v => value_json(v),
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
