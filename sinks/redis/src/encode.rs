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
    // HMSET, as redis-rs sent it (Redis before 4.0 has no HSET of several fields).
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
    out.command(2 + 2 * fields).arg("HMSET").arg(key);
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;
    use siphon_format::json::value_text;

    use super::*;

    /// The hash's commands as the sink built them through redis-rs before it wrote RESP
    /// itself: the oracle the direct encoding is held to.
    fn through_redis_rs(key: &str, row: &Row, stored: Option<&StoredRow>) -> Vec<u8> {
        let mut set: Vec<(&str, Cow<'_, str>)> = Vec::new();
        let mut nulls = Vec::new();
        for (column, value) in row.iter() {
            match value {
                Value::Null => nulls.push(column),
                Value::Unchanged => {
                    if let Some(StoredRow::Hash(fields)) = stored
                        && let Some(text) = fields.get(column)
                    {
                        set.push((column, Cow::Borrowed(text.as_str())));
                    }
                }
                v => set.push((column, value_text(v))),
            }
        }
        let mut pipe = redis::pipe();
        if set.is_empty() {
            pipe.del(key);
        } else {
            pipe.hset_multiple(key, &set);
            if !nulls.is_empty() {
                pipe.hdel(key, nulls);
            }
        }
        pipe.get_packed_pipeline()
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(Value::Unchanged),
            any::<i64>().prop_map(Value::Int),
            any::<bool>().prop_map(Value::Bool),
            ".*".prop_map(Value::Text),
            "-?[0-9]{1,20}\\.[0-9]{0,6}".prop_map(Value::Decimal),
        ]
    }

    proptest! {
        /// Any row, with or without a stored hash to fill its unchanged columns from: the
        /// same commands, byte for byte, as redis-rs packed them.
        #[test]
        fn a_hash_is_encoded_as_redis_rs_encoded_it(
            values in proptest::collection::vec(value(), 1..8),
            stored in proptest::option::of(proptest::collection::hash_map("c[0-9]", ".*", 0..8)),
            key in ".{0,40}",
        ) {
            let row = Row(values
                .into_iter()
                .enumerate()
                .map(|(i, v)| (format!("c{i}").into(), v))
                .collect());
            let stored = stored.map(StoredRow::Hash);
            let mut direct = Commands::default();
            let more = push_hash(&mut direct, &key, &row, stored.as_ref());
            prop_assert_eq!(direct.len(), 1 + more);
            let oracle = through_redis_rs(&key, &row, stored.as_ref());
            prop_assert_eq!(direct.bytes(), oracle.as_slice());
        }
    }

    #[test]
    fn the_other_commands_are_encoded_as_redis_rs_encoded_them() {
        let mut direct = Commands::default();
        direct.command(2).arg("DEL").arg("k:1");
        direct.command(3).arg("SET").arg("k:1").arg("{\"id\":1}");
        direct
            .command(3)
            .arg("PEXPIRE")
            .arg("k:1")
            .arg(itoa::Buffer::new().format(i64::MAX));
        let mut pipe = redis::pipe();
        pipe.del("k:1")
            .set("k:1", "{\"id\":1}")
            .pexpire("k:1", i64::MAX);
        assert_eq!(direct.bytes(), pipe.get_packed_pipeline().as_slice());
    }
}
