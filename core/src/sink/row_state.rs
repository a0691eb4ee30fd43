//! Debezium's ExtractNewRecordState as a stage: an event becomes its row state — the row as
//! it is after the change, with fields saying what happened (`__op`, `__table`, `__lsn` or
//! `__gtid`, `__ts_ms`) — for consumers that want rows, not change envelopes.

use serde::Deserialize;
use serde_json::Value as Json;

use crate::event::{Event, Op, Row, Value};
use crate::sink::stage::Stage;

/// A field the row state adds, named `__<field>` as Debezium's `add.fields` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowField {
    /// `__op`: c, u, d, r or t.
    Op,
    /// `__table`: the table's name.
    Table,
    /// Where the change committed in the source, as Debezium's `source` block has it:
    /// `__lsn` (PostgreSQL) or `__gtid` (MySQL/MariaDB: the GTID, null for a change without
    /// one).
    Position,
    /// `__ts_ms`: when siphon processed the change (the envelope's `ts_ms`).
    TsMs,
}

/// What becomes of a delete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteHandling {
    /// The row as it was, with `__deleted: "true"` (and every other row `__deleted:
    /// "false"`): Debezium's `rewrite`.
    #[default]
    Rewrite,
    /// No row: the message's value is `null` (Kafka's tombstone, where there is one).
    Tombstone,
    /// Dropped: consumers never hear of deletes.
    Drop,
}

/// The row-state stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowState {
    /// The fields it adds, in this order.
    pub fields: Vec<RowField>,
    /// What becomes of a delete.
    pub deletes: DeleteHandling,
}

impl RowState {
    /// Every field Debezium's `add.fields` names here.
    pub fn all_fields() -> Vec<RowField> {
        vec![
            RowField::Op,
            RowField::Table,
            RowField::Position,
            RowField::TsMs,
        ]
    }

    fn add_fields(&self, event: &Event, row: &mut Row) {
        for field in &self.fields {
            match field {
                RowField::Op => row
                    .0
                    .push(("__op".into(), Value::Text(event.op.code().into()))),
                RowField::Table => row.0.push((
                    "__table".into(),
                    Value::Text(event.source.table.to_string()),
                )),
                RowField::TsMs => row.0.push(("__ts_ms".into(), Value::Int(event.ts_ms))),
                RowField::Position => {
                    let source = event.source.position.debezium_source(event.source.fields());
                    for (name, value) in source.fields {
                        let value = match (name, value) {
                            ("lsn", Json::Number(n)) => n.as_i64().map(Value::Int),
                            ("gtid", Json::String(gtid)) => Some(Value::Text(gtid)),
                            // Null where a change has no GTID (a snapshot read, a server
                            // without GTIDs), so that every row of a table has the same
                            // fields: one Avro schema serves them all.
                            ("gtid", Json::Null) => Some(Value::Null),
                            _ => None,
                        };
                        if let Some(value) = value {
                            row.0.push((format!("__{name}").into(), value));
                        }
                    }
                }
            }
        }
        if self.deletes == DeleteHandling::Rewrite {
            let deleted = if event.op == Op::Delete {
                "true"
            } else {
                "false"
            };
            row.0
                .push(("__deleted".into(), Value::Text(deleted.into())));
        }
    }
}

impl Stage for RowState {
    /// The event's `after` becomes its row state; a delete's per [`DeleteHandling`], a
    /// truncate's the fields alone (it names no row).
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        let row = match event.op {
            Op::Delete => match self.deletes {
                DeleteHandling::Drop => return Ok(false),
                DeleteHandling::Tombstone => {
                    event.after = None;
                    return Ok(true);
                }
                DeleteHandling::Rewrite => event
                    .before
                    .clone()
                    .or_else(|| event.key.clone())
                    .unwrap_or_default(),
            },
            Op::Truncate => Row::default(),
            Op::Create | Op::Update | Op::Read => event.after.take().unwrap_or_default(),
        };
        let mut row = row;
        self.add_fields(event, &mut row);
        event.after = Some(row);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{event, row};

    fn stage(deletes: DeleteHandling) -> RowState {
        RowState {
            fields: RowState::all_fields(),
            deletes,
        }
    }

    #[test]
    fn a_change_becomes_its_row_with_what_happened() {
        let mut updated = event(
            "compliance",
            Op::Update,
            7,
            Some(row(7, "old", Value::Null)),
            Some(row(7, "new", Value::Null)),
        );
        assert_eq!(stage(DeleteHandling::Rewrite).apply(&mut updated), Ok(true));
        let after = updated.after.unwrap();
        assert_eq!(after.get("name"), Some(&Value::Text("new".into())));
        assert_eq!(after.get("__op"), Some(&Value::Text("u".into())));
        assert_eq!(
            after.get("__table"),
            Some(&Value::Text("compliance".into()))
        );
        assert_eq!(after.get("__ts_ms"), Some(&Value::Int(updated.ts_ms)));
        assert_eq!(after.get("__deleted"), Some(&Value::Text("false".into())));
    }

    /// A binlog position with a GTID or without one.
    #[derive(Debug)]
    struct Binlog(Option<&'static str>);

    impl crate::position::Position for Binlog {
        fn encode(&self) -> Vec<u8> {
            Vec::new()
        }

        fn commit_point(&self) -> String {
            String::new()
        }

        fn debezium_source(
            &self,
            _: crate::position::SourceFields<'_>,
        ) -> crate::position::DebeziumSource {
            crate::position::DebeziumSource {
                fields: vec![
                    ("gtid", serde_json::json!(self.0)),
                    ("pos", serde_json::json!(4)),
                ],
                schema_name: "test.Source",
                schema_fields: vec![("string", true, "gtid"), ("int64", false, "pos")],
            }
        }

        fn to_json(&self) -> Json {
            Json::Null
        }
    }

    /// Every row of a table has the same fields: a change without a GTID has `__gtid` null,
    /// so that one schema (Avro's) serves every row. The first row of a table version made it
    /// before: a snapshot read without a GTID left `__gtid` out of every Avro value after.
    #[test]
    fn a_change_without_a_gtid_has_it_null() {
        let with = |gtid| {
            let mut e = event(
                "compliance",
                Op::Create,
                1,
                None,
                Some(row(1, "x", Value::Null)),
            );
            e.source.position = crate::position::SourcePosition::new(Binlog(gtid));
            assert_eq!(stage(DeleteHandling::Rewrite).apply(&mut e), Ok(true));
            e.after.unwrap()
        };
        assert_eq!(
            with(Some("0-1-7")).get("__gtid"),
            Some(&Value::Text("0-1-7".into()))
        );
        assert_eq!(with(None).get("__gtid"), Some(&Value::Null));
    }

    #[test]
    fn a_delete_is_rewritten_tombstoned_or_dropped() {
        let deleted = || {
            event(
                "compliance",
                Op::Delete,
                7,
                Some(row(7, "gone", Value::Null)),
                None,
            )
        };
        let mut rewritten = deleted();
        assert_eq!(
            stage(DeleteHandling::Rewrite).apply(&mut rewritten),
            Ok(true)
        );
        let after = rewritten.after.unwrap();
        assert_eq!(after.get("name"), Some(&Value::Text("gone".into())));
        assert_eq!(after.get("__deleted"), Some(&Value::Text("true".into())));
        let mut tombstone = deleted();
        assert_eq!(
            stage(DeleteHandling::Tombstone).apply(&mut tombstone),
            Ok(true)
        );
        assert_eq!(tombstone.after, None);
        assert_eq!(stage(DeleteHandling::Drop).apply(&mut deleted()), Ok(false));
    }
}
