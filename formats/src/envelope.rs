//! Debezium's change event envelope and records: what an event stream's consumers read —
//! the `payload` (`before`, `after`, `source`, `op`, …), optionally wrapped with Kafka
//! Connect's `schema`, and the `{"topic", "key", "value"}` records with their tombstones.

use std::collections::HashMap;

use serde_json::{Map, Value as Json, json};
use siphon_core::event::{Event, Row};
use siphon_core::schema::{SchemaId, TableSchema};

use crate::debezium::{self, Modes, key_schema, topic};
use crate::json::value_schema;

/// Whether to wrap each event as `{"schema":…,"payload":…}` or write the payload alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JsonFormat {
    /// Include Kafka Connect's `schema` next to the payload.
    pub schemas: bool,
    /// Fill the `transaction` block (Debezium's `provide.transaction.metadata`).
    pub transactions: bool,
    /// Debezium's handling modes for the values.
    pub modes: Modes,
}

impl JsonFormat {
    /// The event as one JSON document in this format.
    pub fn encode(self, event: &Event) -> Json {
        let payload = envelope_in(event, self.transactions, &self.modes);
        if !self.schemas {
            return payload;
        }
        // From the table's schema record where the event has one, else from its values.
        let schema = match event.schema.as_deref() {
            Some(table) => debezium::envelope_schema(event, table, &self.modes),
            None => envelope_schema(event),
        };
        json!({ "schema": schema, "payload": payload })
    }
}

/// Kafka Connect's `schema` parts of records, serialized, by table schema version: every event
/// of a version has the same envelope schema and key schema, so that a writer of many events
/// (the Kafka log) makes each once. Events without a table schema get theirs from their values,
/// each its own.
#[derive(Debug, Default)]
pub struct SchemaCache {
    by_version: HashMap<SchemaId, CachedSchemas>,
}

/// One version's serialized schemas.
#[derive(Debug)]
struct CachedSchemas {
    value: String,
    key: String,
}

impl JsonFormat {
    /// The event's record value as JSON text in this format, its `schema` from `cache`.
    pub fn value_bytes(self, event: &Event, cache: &mut SchemaCache) -> Vec<u8> {
        let payload = envelope_in(event, self.transactions, &self.modes);
        match (self.schemas, event.schema.as_deref()) {
            (true, Some(table)) => {
                let cached = cache.of(event, table, &self.modes);
                wrap(&cached.value, &payload)
            }
            (true, None) => {
                to_bytes(&json!({ "schema": envelope_schema(event), "payload": payload }))
            }
            (false, _) => to_bytes(&payload),
        }
    }

    /// The event's row state as JSON text in this format (Debezium's ExtractNewRecordState):
    /// its `after` row alone, with the columns a stage added, or `null` without one.
    pub fn row_state_bytes(self, event: &Event) -> Vec<u8> {
        let payload = row_state(event, &self.modes);
        if !self.schemas {
            return to_bytes(&payload);
        }
        let schema = row_state_schema(event, &self.modes);
        to_bytes(&json!({ "schema": schema, "payload": payload }))
    }

    /// The event's record key as JSON text in this format (`None` for a table without a
    /// primary key), its `schema` from `cache`.
    pub fn key_bytes(self, event: &Event, cache: &mut SchemaCache) -> Option<Vec<u8>> {
        let key = debezium::key(event, &self.modes);
        if key.is_null() {
            return None;
        }
        Some(match (self.schemas, event.schema.as_deref()) {
            (true, Some(table)) => wrap(&cache.of(event, table, &self.modes).key, &key),
            _ => to_bytes(&key),
        })
    }
}

impl SchemaCache {
    fn of(&mut self, event: &Event, table: &TableSchema, modes: &Modes) -> &CachedSchemas {
        self.by_version
            .entry(table.id)
            .or_insert_with(|| CachedSchemas {
                value: debezium::envelope_schema(event, table, modes).to_string(),
                key: key_schema(event, table, modes).to_string(),
            })
    }
}

/// A row state's payload: the event's `after` row (with the columns a stage added), or
/// `null` without one.
pub fn row_state(event: &Event, modes: &Modes) -> Json {
    event.after.as_ref().map_or(Json::Null, |row| {
        debezium::row(row, event.schema.as_deref(), modes)
    })
}

/// A row state's Kafka Connect schema, named `<topic>.Value` as Debezium names it: the
/// table's columns and those a stage added, from the table's schema where the event has
/// one, else from its values.
pub fn row_state_schema(event: &Event, modes: &Modes) -> Json {
    let name = format!("{}.Value", topic(event));
    match event.schema.as_deref() {
        Some(table) => debezium::row_state_schema(event.after.as_ref(), table, &name, modes),
        None => {
            let mut schema = row_schema(event.after.as_ref(), &name, "");
            if let Some(fields) = schema.as_object_mut() {
                fields.remove("field");
            }
            schema
        }
    }
}

/// `{"schema":<schema>,"payload":<payload>}`, the schema already serialized.
fn wrap(schema: &str, payload: &Json) -> Vec<u8> {
    let mut out = Vec::with_capacity(schema.len() + 512);
    out.extend_from_slice(b"{\"schema\":");
    out.extend_from_slice(schema.as_bytes());
    out.extend_from_slice(b",\"payload\":");
    serde_json::to_writer(&mut out, payload).expect("JSON values serialize");
    out.push(b'}');
    out
}

fn to_bytes(doc: &Json) -> Vec<u8> {
    serde_json::to_vec(doc).expect("JSON values serialize")
}

/// The Debezium change event envelope (the `payload`), its values as Debezium writes them
/// ([`crate::debezium`]), without transaction metadata (`transaction` is `null`, as in
/// Debezium by default).
pub fn envelope(event: &Event) -> Json {
    envelope_in(event, false, &Modes::default())
}

/// [`envelope`], with the `transaction` block filled when `transactions` is set, its values
/// in `modes`.
pub fn envelope_in(event: &Event, transactions: bool, modes: &Modes) -> Json {
    envelope_with(event, transactions, modes, debezium::row)
}

/// [`envelope_in`] for a format whose schema holds no null in a NOT NULL column (Avro): a
/// column a row lacks there takes the value Debezium invents ([`debezium::row_whole`]).
pub fn envelope_whole(event: &Event, transactions: bool, modes: &Modes) -> Json {
    envelope_with(event, transactions, modes, debezium::row_whole)
}

fn envelope_with(
    event: &Event,
    transactions: bool,
    modes: &Modes,
    row_json: fn(&Row, Option<&TableSchema>, &Modes) -> Json,
) -> Json {
    let schema = event.schema.as_deref();
    let row = |r: &Option<Row>| {
        r.as_ref()
            .map_or(Json::Null, |r| row_json(r, schema, modes))
    };
    json!({
        "before": row(&event.before),
        "after": row(&event.after),
        "source": source_json(event),
        "transaction": event.transaction.as_ref().filter(|_| transactions).map_or(Json::Null, |t| json!({
            "id": t.id,
            "total_order": t.total_order,
            "data_collection_order": t.data_collection_order,
        })),
        "op": event.op.code(),
        "ts_ms": event.ts_ms,
        "ts_us": event.ts_ms * 1000,
        "ts_ns": i128::from(event.ts_ms) * 1_000_000,
    })
}

fn source_json(event: &Event) -> Json {
    let s = &event.source;
    let mut m = Map::new();
    m.insert(
        "version".into(),
        json!(concat!("siphon-", env!("CARGO_PKG_VERSION"))),
    );
    m.insert("connector".into(), json!(s.connector));
    m.insert("name".into(), json!(s.name));
    m.insert("ts_ms".into(), json!(s.ts_ms));
    m.insert("snapshot".into(), json!(s.snapshot.as_str()));
    m.insert("db".into(), json!(s.db));
    m.insert("ts_us".into(), json!(s.ts_ms * 1000));
    m.insert("ts_ns".into(), json!(i128::from(s.ts_ms) * 1_000_000));
    // The connector's own fields, as its Debezium connector writes them.
    for (field, value) in s.position.debezium_source(s.fields()).fields {
        m.insert(field.into(), value);
    }
    Json::Object(m)
}

fn row_schema(row: Option<&Row>, name: &str, field: &str) -> Json {
    let fields: Vec<Json> = row
        .map(|r| {
            r.iter()
                .map(|(c, v)| {
                    let mut s = value_schema(v);
                    s["field"] = json!(c);
                    s
                })
                .collect()
        })
        .unwrap_or_default();
    json!({"type": "struct", "fields": fields, "optional": true, "name": name, "field": field})
}

fn envelope_schema(event: &Event) -> Json {
    let prefix = topic(event);
    let value_name = format!("{prefix}.Value");
    // before and after share the table's columns; take them from whichever row is present.
    let shape = event.after.as_ref().or(event.before.as_ref());
    let source_fields: Vec<Json> = source_json(event)
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let ty = match v {
                        Json::Number(_) => "int64",
                        Json::Bool(_) => "boolean",
                        _ => "string",
                    };
                    json!({"type": ty, "optional": true, "field": k})
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "type": "struct",
        "optional": false,
        "name": format!("{prefix}.Envelope"),
        "fields": [
            row_schema(shape, &value_name, "before"),
            row_schema(shape, &value_name, "after"),
            {"type": "struct", "fields": source_fields, "optional": false,
             "name": "io.siphon.connector.Source", "field": "source"},
            {"type": "struct", "optional": true, "name": "event.block", "field": "transaction",
             "fields": [
                {"type": "string", "optional": false, "field": "id"},
                {"type": "int64", "optional": false, "field": "total_order"},
                {"type": "int64", "optional": false, "field": "data_collection_order"}]},
            {"type": "string", "optional": false, "field": "op"},
            {"type": "int64", "optional": true, "field": "ts_ms"},
            {"type": "int64", "optional": true, "field": "ts_us"},
            {"type": "int64", "optional": true, "field": "ts_ns"},
        ],
    })
}

/// Debezium's record key of an event: its primary key's values (`null` for a table without
/// one), wrapped as `{"schema":…,"payload":…}` when `schemas` and the event has a table schema.
pub fn key_document(event: &Event, modes: &Modes, schemas: bool) -> Json {
    let key = debezium::key(event, modes);
    match event.schema.as_deref() {
        Some(schema) if schemas => {
            json!({"schema": key_schema(event, schema, modes), "payload": key})
        }
        _ => key,
    }
}

/// The records Debezium's PostgreSQL connector emits for an event with its defaults
/// (`tombstones.on.delete = true`, `skipped.operations = t`): `{"topic", "key", "value"}`,
/// a delete followed by its tombstone (a `null` value, for Kafka's log compaction), nothing
/// for a truncate.
pub fn records(event: &Event, modes: &Modes, schemas: bool) -> Vec<Json> {
    let (topic, key) = (topic(event), key_document(event, modes, schemas));
    let format = JsonFormat {
        schemas,
        transactions: false,
        modes: *modes,
    };
    let value = || format.encode(event);
    match event.op {
        siphon_core::event::Op::Truncate => Vec::new(),
        siphon_core::event::Op::Delete => vec![
            json!({"topic": topic, "key": key, "value": value()}),
            json!({"topic": topic, "key": key, "value": null}),
        ],
        _ => vec![json!({"topic": topic, "key": key, "value": value()})],
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::{Op, Value};
    use siphon_core::schema::{Column, ColumnKind, SchemaStore};
    use siphon_core::testing::{MemorySchemas, event, row};

    use super::*;

    /// The cached schemas write the same documents as building them whole.
    #[test]
    fn cached_schemas_write_the_same_records() {
        let column = |name: &str, kind: ColumnKind| Column {
            name: name.into(),
            type_name: "text".into(),
            type_id: 25,
            type_modifier: -1,
            kind,
            nullable: true,
            generated: false,
        };
        let table = MemorySchemas::default()
            .register(&TableSchema {
                id: SchemaId::UNREGISTERED,
                connector: "test".into(),
                server: "test".into(),
                database: "test".into(),
                schema: Some("public".into()),
                table: "items".into(),
                columns: vec![
                    column("id", ColumnKind::Int64),
                    column("name", ColumnKind::Text { length: None }),
                    column("note", ColumnKind::Text { length: None }),
                ],
                key: vec![0],
            })
            .unwrap();
        let mut cache = SchemaCache::default();
        for schemas in [true, false] {
            let format = JsonFormat {
                schemas,
                ..JsonFormat::default()
            };
            for (i, op) in [Op::Read, Op::Update, Op::Delete].into_iter().enumerate() {
                let id = i as i64;
                let mut e = event("items", op, id, None, Some(row(id, "x", Value::Null)));
                e.schema = Some(table.clone());
                let value: Json =
                    serde_json::from_slice(&format.value_bytes(&e, &mut cache)).unwrap();
                assert_eq!(value, format.encode(&e));
                let key: Json =
                    serde_json::from_slice(&format.key_bytes(&e, &mut cache).unwrap()).unwrap();
                assert_eq!(key, key_document(&e, &format.modes, schemas));
            }
        }
    }
}
