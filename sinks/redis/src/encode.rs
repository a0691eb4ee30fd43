//! From net changes to the arguments of the apply script.

use siphon_core::event::{Row, Value};
use siphon_core::json::value_json;
use siphon_core::sink::changes::{Change, key_text, value_text};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::{Event, SourceInfo};

use crate::config::{RedisFormat, RedisMode};

/// Applies changes and moves the cursor, atomically (Redis runs a script as one step).
///
/// KEYS: the cursor key, then one key per change. ARGV: the cursor after this call, the TTL
/// in ms (0: none), then per change `op, offset, n_set, n_del`, `n_set` field/value pairs and
/// `n_del` fields. Ops: `d` delete, `h` replace the hash, `p` update some fields of the hash,
/// `s` set the string. A change below the stored cursor was applied before and is skipped.
pub(crate) const APPLY_SCRIPT: &str = r"
local cursor = tonumber(redis.call('GET', KEYS[1]) or '0')
local next_cursor = tonumber(ARGV[1])
if next_cursor <= cursor then return cursor end
local ttl = tonumber(ARGV[2])
local a = 3
for i = 2, #KEYS do
  local key, op, offset = KEYS[i], ARGV[a], tonumber(ARGV[a + 1])
  local n_set, n_del = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local set_from, del_from = a + 4, a + 4 + 2 * n_set
  a = del_from + n_del
  if offset >= cursor then
    if op == 'd' then
      redis.call('DEL', key)
    elseif op == 's' then
      redis.call('SET', key, ARGV[set_from + 1])
    else
      if op == 'h' then redis.call('DEL', key) end
      if n_set > 0 then redis.call('HSET', key, unpack(ARGV, set_from, del_from - 1)) end
      if n_del > 0 then redis.call('HDEL', key, unpack(ARGV, del_from, a - 1)) end
    end
    if ttl > 0 and op ~= 'd' then redis.call('PEXPIRE', key, ttl) end
  end
end
redis.call('SET', KEYS[1], next_cursor)
return next_cursor
";

/// Names keys and encodes rows for one sink.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    pub prefix: String,
    pub key: NameTemplate,
    pub mode: RedisMode,
    pub format: RedisFormat,
}

/// The arguments of one script call.
#[derive(Debug, Default)]
pub(crate) struct ScriptArgs {
    pub keys: Vec<String>,
    pub args: Vec<Vec<u8>>,
}

impl Encoder {
    /// The Redis key of an event's row.
    pub fn row_key(&self, event: &Event) -> Option<String> {
        let key = event.key.as_ref()?;
        Some(self.render(&event.source, &key_text(key)))
    }

    fn render(&self, source: &SourceInfo, key: &str) -> String {
        let mut out = self.prefix.clone();
        out.push_str(&self.key.render(&[
            ("schema", source.namespace()),
            ("table", &source.table),
            ("key", key),
        ]));
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

    /// Adds one change (not a truncate) to `call`. `stored` is the key's stored JSON document
    /// when the row has unchanged columns and the format is JSON.
    pub fn push(
        &self,
        call: &mut ScriptArgs,
        change: &Change<'_>,
        stored: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<(), String> {
        let event = change.event();
        let key = self
            .row_key(event)
            .ok_or("the table has no primary key, so its rows have no Redis key")?;
        call.keys.push(key);
        let offset = change.offset().to_string().into_bytes();
        let write = match change {
            Change::Upsert { row, .. } if self.mode == RedisMode::Upsert => match self.format {
                RedisFormat::Hash => hash_fields(row),
                RedisFormat::Json => KeyWrite {
                    op: b"s",
                    set: vec![(String::new(), json_document(row, stored).into_bytes())],
                    del: Vec::new(),
                },
            },
            _ => KeyWrite {
                op: b"d",
                set: Vec::new(),
                del: Vec::new(),
            },
        };
        let KeyWrite { op, set, del } = write;
        call.args.push(op.to_vec());
        call.args.push(offset);
        call.args.push(set.len().to_string().into_bytes());
        call.args.push(del.len().to_string().into_bytes());
        for (field, value) in set {
            call.args.push(field.into_bytes());
            call.args.push(value);
        }
        call.args.extend(del.into_iter().map(String::into_bytes));
        Ok(())
    }
}

/// What the script does to one key: the op, fields to set and fields to remove.
struct KeyWrite {
    op: &'static [u8],
    set: Vec<(String, Vec<u8>)>,
    del: Vec<String>,
}

/// `h` with every non-null column, or `p` when some columns are unchanged: those keep their
/// stored field, null ones are removed.
fn hash_fields(row: &Row) -> KeyWrite {
    let partial = row.iter().any(|(_, v)| *v == Value::Unchanged);
    let mut set = Vec::with_capacity(row.len());
    let mut del = Vec::new();
    for (column, value) in row.iter() {
        match value {
            Value::Unchanged => {}
            Value::Null => {
                if partial {
                    del.push(column.to_owned());
                }
            }
            v => set.push((column.to_owned(), value_text(v).into_owned().into_bytes())),
        }
    }
    KeyWrite {
        op: if partial { b"p" } else { b"h" },
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
