//! A view's documents as changes of one table, which any sink applies as it applies a
//! table's changes: the view's name is the table, the root's primary key the key.

use serde_json::Value as Json;
use siphon_core::event::{DOCUMENT_CONNECTOR, Event, Op, Row, SnapshotMarker, SourceInfo, Value};
use siphon_core::name::TableName;
use siphon_core::source::TableInfo;

use crate::view::Document;

/// The table a view's documents are changes of: the view's name in the root's namespace
/// (`shop.order_documents`), keyed as the root.
pub fn document_table(view: &str, root: &TableName, root_key: Vec<String>) -> TableInfo {
    TableInfo {
        name: TableName::new(root.namespace(), view),
        key_columns: root_key,
    }
}

impl Document {
    /// The document as a change of `table` (see [`document_table`]): an upsert of the
    /// document's fields, or a delete where the root row is gone. `source` is the source
    /// transaction's last change, whose position and time the document carries.
    pub fn into_event(self, table: &TableName, mut source: SourceInfo, ts_ms: i64) -> Event {
        source.connector = DOCUMENT_CONNECTOR.into();
        match source.schema {
            Some(_) => source.schema = Some(table.namespace().into()),
            None => source.db = table.namespace().into(),
        }
        source.table = table.table().into();
        source.snapshot = SnapshotMarker::False;
        let after = self.body.map(|body| match body {
            Json::Object(fields) => Row(fields
                .into_iter()
                .map(|(name, value)| (name.into(), field(value)))
                .collect()),
            other => Row(vec![("document".into(), field(other))]),
        });
        Event {
            op: if after.is_some() {
                Op::Create
            } else {
                Op::Delete
            },
            before: None,
            after,
            key: Some(self.key),
            source,
            ts_ms,
            transaction: None,
            key_change: None,
            schema: None,
        }
    }
}

/// A top-level field as a value whose JSON is `json` again: nested objects and arrays (and
/// integers beyond a double's) as [`Value::Json`], which stores of documents embed (see [`Event::is_document`]).
fn field(json: Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(b),
        // A whole number a double holds exactly, as siphon's JSON writes integers as numbers;
        // any other number as it is written.
        Json::Number(n) => match n.as_i64() {
            Some(i) if i.unsigned_abs() <= 1 << 53 => Value::Int(i),
            _ if n.is_f64() => Value::Float64(n.as_f64().unwrap_or(f64::NAN)),
            _ => Value::Json(n.to_string()),
        },
        Json::String(s) => Value::Text(s),
        nested @ (Json::Array(_) | Json::Object(_)) => Value::Json(nested.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use siphon_format::json::field_json;

    use super::*;

    #[test]
    fn a_document_is_an_upsert_whose_fields_give_its_json_back() {
        let body = json!({"id": 7, "big": 18446744073709551615u64, "total": 1.5, "status": "new",
                          "customer": {"name": "Ann"}, "lines": [{"line": 1}], "note": null});
        let key = Row(vec![("id".into(), Value::Int(7))]);
        let table = TableName::new("public", "order_documents");
        let source = siphon_core::testing::event("orders", Op::Create, 7, None, None).source;
        let event = Document {
            key: key.clone(),
            body: Some(body.clone()),
        }
        .into_event(&table, source, 5);
        assert!(event.is_document());
        assert_eq!(event.op, Op::Create);
        assert_eq!(event.key, Some(key.clone()));
        assert_eq!(event.source.table_name(), table);
        let after = event.after.unwrap();
        let back: serde_json::Map<String, Json> = after
            .iter()
            .map(|(c, v)| (c.to_owned(), field_json(v, true)))
            .collect();
        assert_eq!(Json::Object(back), body);

        let source = siphon_core::testing::event("orders", Op::Delete, 7, None, None).source;
        let gone = Document { key, body: None }.into_event(&table, source, 5);
        assert_eq!((gone.op, gone.after), (Op::Delete, None));
    }
}
