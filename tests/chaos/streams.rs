//! What change streams say, kept small, and how it differs from what was committed.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use siphon_test_support::redis_conn;

use super::db::TABLES;

/// One committed change as a change stream carries it: its op and the row's `v` (none for a
/// delete, whose old row holds the key only).
pub type Change = (String, Option<i64>);

/// What one event of a change stream says, kept small (a long run's streams hold hundreds of
/// thousands).
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// A change of row `id` of `table`.
    Row(String, i64, Change),
    /// A truncate of `table`.
    Truncate(String),
    /// A snapshot read: no change.
    Read,
}

impl Said {
    /// What a Debezium envelope says.
    pub fn of(e: &Json) -> Said {
        let table = e["source"]["table"].as_str().unwrap_or_default().to_owned();
        match e["op"].as_str().unwrap_or_default() {
            "r" => Said::Read,
            "t" => Said::Truncate(table),
            "d" => Said::Row(
                table,
                e["before"]["id"].as_i64().unwrap_or(-1),
                ("d".into(), None),
            ),
            op => Said::Row(
                table,
                e["after"]["id"].as_i64().unwrap_or(-1),
                (op.into(), e["after"]["v"].as_i64()),
            ),
        }
    }
}

/// Every committed change, as the audit table says: each key's in commit order, and each
/// table's truncates.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    per_key: BTreeMap<(String, i64), Vec<Change>>,
    truncates: BTreeMap<String, usize>,
}

impl Changes {
    /// What a change stream's events say, in order.
    pub fn of(events: impl IntoIterator<Item = Said>) -> Changes {
        let mut out = Changes::default();
        for said in events {
            match said {
                Said::Read => {}
                Said::Truncate(table) => *out.truncates.entry(table).or_default() += 1,
                Said::Row(table, id, change) => {
                    out.per_key.entry((table, id)).or_default().push(change);
                }
            }
        }
        out
    }

    /// What the audit table's rows (table, op, id, v) say, in order.
    pub fn of_audit(rows: Vec<(String, String, Option<i64>, Option<i64>)>) -> Changes {
        Changes::of(
            rows.into_iter()
                .map(|(table, op, id, v)| match op.as_str() {
                    "t" => Said::Truncate(table),
                    _ => Said::Row(table, id.unwrap_or(-1), (op, v)),
                }),
        )
    }

    /// How many changes these are, truncates included.
    pub fn len(&self) -> usize {
        self.per_key.values().map(Vec::len).sum::<usize>() + self.truncates.values().sum::<usize>()
    }

    /// How `got` differs from these, a line per key (at most `limit` lines, then a count).
    pub fn differences(&self, got: &Changes, what: &str, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        let keys: std::collections::BTreeSet<_> =
            self.per_key.keys().chain(got.per_key.keys()).collect();
        for key in keys {
            let (want, have) = (
                self.per_key.get(key).map_or(&[][..], Vec::as_slice),
                got.per_key.get(key).map_or(&[][..], Vec::as_slice),
            );
            if want != have {
                out.push(format!(
                    "{what}: {}:{} committed {want:?}, got {have:?}",
                    key.0, key.1
                ));
            }
        }
        if self.truncates != got.truncates {
            out.push(format!(
                "{what}: truncates committed {:?}, got {:?}",
                self.truncates, got.truncates
            ));
        }
        limited(out, what, limit)
    }
}

/// Events under ids, as an at-least-once sink delivers them: the first copy of each id, in
/// order, and a mismatch for each copy unlike its first.
pub fn first_copies(
    what: &str,
    events: impl IntoIterator<Item = (String, Said)>,
    mismatches: &mut Vec<String>,
) -> Vec<Said> {
    let mut seen: std::collections::HashMap<String, Said> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (id, said) in events {
        match seen.get(&id) {
            Some(first) if *first != said => {
                mismatches.push(format!("{what}: two events under id {id}"));
            }
            Some(_) => {}
            None => {
                seen.insert(id, said.clone());
                out.push(said);
            }
        }
    }
    out
}

/// What every envelope in the Redis Streams sink's streams (`chaos.<schema>.<table>`) says,
/// stream by stream in order.
pub async fn redis_stream_events(url: &str, schema: &str) -> Vec<Said> {
    let mut conn = redis_conn(url).await.unwrap();
    let mut out = Vec::new();
    for (table, _) in TABLES {
        let entries: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
            .arg(format!("chaos.{schema}.{table}"))
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        out.extend(
            entries
                .iter()
                .map(|(_, fields)| Said::of(&serde_json::from_str(&fields["value"]).unwrap())),
        );
    }
    out
}

/// At most `limit` of `lines`, then a count of the rest.
pub fn limited(mut lines: Vec<String>, what: &str, limit: usize) -> Vec<String> {
    if lines.len() > limit {
        let more = lines.len() - limit;
        lines.truncate(limit);
        lines.push(format!("{what}: … and {more} more"));
    }
    lines
}
