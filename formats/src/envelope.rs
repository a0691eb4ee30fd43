//! Debezium's change event envelope and records: what an event stream's consumers read —
//! the `payload` (`before`, `after`, `source`, `op`, …), optionally wrapped with Kafka
//! Connect's `schema`, and the `{"topic", "key", "value"}` records with their tombstones.

use serde_json::{Map, Value as Json, json};
use siphon_core::event::{Event, Row, SnapshotMarker};

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

/// The Debezium change event envelope (the `payload`), its values as Debezium writes them
/// ([`crate::debezium`]), without transaction metadata (`transaction` is `null`, as in
/// Debezium by default).
pub fn envelope(event: &Event) -> Json {
    envelope_in(event, false, &Modes::default())
}

/// [`envelope`], with the `transaction` block filled when `transactions` is set, its values
/// in `modes`.
pub fn envelope_in(event: &Event, transactions: bool, modes: &Modes) -> Json {
    let schema = event.schema.as_deref();
    let row = |r: &Option<Row>| {
        r.as_ref()
            .map_or(Json::Null, |r| debezium::row(r, schema, modes))
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
    let snapshot = match s.snapshot {
        SnapshotMarker::False => "false",
        SnapshotMarker::True => "true",
        SnapshotMarker::Last => "last",
        SnapshotMarker::First => "first",
        SnapshotMarker::FirstInTable => "first_in_data_collection",
        SnapshotMarker::LastInTable => "last_in_data_collection",
        SnapshotMarker::Incremental => "incremental",
    };
    m.insert("snapshot".into(), json!(snapshot));
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
