//! The transactional outbox, routed as Debezium's outbox EventRouter routes it: each row
//! inserted into an outbox table (`id`, `aggregatetype`, `aggregateid`, `type`, `payload`)
//! becomes one message — its destination from the row's `aggregatetype`
//! (`outbox.event.<aggregatetype>`), its key the row's `aggregateid`, its value the
//! `payload` column's value, and the header `id` the row's `id` (with further headers from
//! chosen columns). Updates, deletes and truncates of the outbox table send nothing, as in
//! Debezium (which warns on an update): a service inserts its events and may delete them in
//! the same transaction.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value as Json, json};
use siphon_core::event::{Event, Op, Row, Value};
use siphon_core::schema::Column;
use siphon_core::sink::routing::NameTemplate;
use siphon_format::debezium::{self, Modes};

/// The placeholder of the outbox's `destination`: the route column's value.
pub const ROUTE_PLACEHOLDERS: &[&str] = &["route"];

/// `[…sinks.NAME.outbox]`, with `value = "outbox"`: which columns of the outbox table make
/// each message. Every key has Debezium's default.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxConfig {
    /// The column of the event's id, sent as the header `id` (Debezium's
    /// `table.field.event.id`). Default: "id".
    pub id: String,
    /// The column of the message key (`table.field.event.key`). Default: "aggregateid".
    pub key: String,
    /// The column of the message value (`table.field.event.payload`). Default: "payload".
    pub payload: String,
    /// The column the destination is chosen by (`route.by.field`). Default: "aggregatetype".
    pub route_by: String,
    /// Where each message goes: a template of `{route}`, the `route_by` column's value
    /// (`route.topic.replacement`). Default: "outbox.event.{route}".
    pub destination: String,
    /// Further headers, header name → column (`table.fields.additional.placement` with
    /// `column:header:name`), e.g. `{ eventType = "type" }`.
    pub headers: BTreeMap<String, String>,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            id: "id".into(),
            key: "aggregateid".into(),
            payload: "payload".into(),
            route_by: "aggregatetype".into(),
            destination: "outbox.event.{route}".into(),
            headers: BTreeMap::new(),
        }
    }
}

/// One outbox row as a message's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// The destination, `destination` with the row's route.
    pub destination: String,
    /// The key column's value as JSON text (`None` where it is NULL).
    pub key: Option<Vec<u8>>,
    /// The payload column's value as JSON text.
    pub value: Vec<u8>,
    /// `id` and the configured headers, each value as text (a JSON string's characters,
    /// any other value's JSON); a NULL column sends no header.
    pub headers: Vec<(String, String)>,
}

/// Routes outbox rows; see the module documentation.
#[derive(Debug)]
pub struct OutboxRouter {
    config: OutboxConfig,
    destination: NameTemplate,
    /// Wrap keys and values as `{"schema":…,"payload":…}`.
    schemas: bool,
    modes: Modes,
}

impl OutboxRouter {
    /// A router writing values in `modes`, wrapped with their schemas where `schemas` says.
    /// An error names the key.
    pub fn new(config: &OutboxConfig, schemas: bool, modes: Modes) -> Result<Self, String> {
        let destination = NameTemplate::parse(&config.destination, ROUTE_PLACEHOLDERS)
            .map_err(|e| format!("outbox.destination: {e}"))?;
        for (key, column) in [
            ("id", &config.id),
            ("key", &config.key),
            ("payload", &config.payload),
            ("route_by", &config.route_by),
        ]
        .into_iter()
        .chain(config.headers.values().map(|c| ("headers", c)))
        {
            if column.is_empty() {
                return Err(format!("outbox.{key}: a column name, not \"\""));
            }
        }
        Ok(OutboxRouter {
            config: config.clone(),
            destination,
            schemas,
            modes,
        })
    }

    /// Every destination a table's rows can go to, as one pattern: `{route}` as `*`.
    pub fn destination_pattern(&self) -> String {
        self.destination.render(&[("route", "*")])
    }

    /// The message of an inserted (or snapshot-read) outbox row; `None` for any other
    /// change. An error (a column the table lacks, a NULL route) names the table and the
    /// column.
    pub fn route(&self, event: &Event) -> Result<Option<Routed>, String> {
        if !matches!(event.op, Op::Create | Op::Read) {
            return Ok(None);
        }
        let Some(row) = &event.after else {
            return Ok(None);
        };
        let cell = Cell { event, row };
        let route = match cell.json(&self.config.route_by, &self.modes)? {
            Json::String(route) => route,
            Json::Null => {
                return Err(format!(
                    "outbox: a row of {} has no {} (NULL), so it has no destination",
                    event.source.table_name(),
                    self.config.route_by
                ));
            }
            other => other.to_string(),
        };
        let key = cell.json(&self.config.key, &self.modes)?;
        let key = (!key.is_null()).then(|| self.wrap(&cell, &self.config.key, key));
        let payload = cell.json(&self.config.payload, &self.modes)?;
        let value = self.wrap(&cell, &self.config.payload, payload);
        let mut headers = Vec::with_capacity(1 + self.config.headers.len());
        for (name, column) in std::iter::once(("id", &self.config.id))
            .chain(self.config.headers.iter().map(|(n, c)| (n.as_str(), c)))
        {
            let text = match cell.json(column, &self.modes)? {
                Json::Null => continue,
                Json::String(text) => text,
                other => other.to_string(),
            };
            headers.push((name.to_owned(), text));
        }
        Ok(Some(Routed {
            destination: self.destination.render(&[("route", &route)]),
            key,
            value,
            headers,
        }))
    }

    /// A column's value as a record's key or value: wrapped with the column's schema
    /// where the sink wraps them.
    fn wrap(&self, cell: &Cell<'_>, column: &str, value: Json) -> Vec<u8> {
        let doc = if self.schemas {
            let schema = match cell.column(column) {
                Some(column) => debezium::column_schema(column, &self.modes),
                None => {
                    siphon_format::json::value_schema(cell.row.get(column).unwrap_or(&Value::Null))
                }
            };
            json!({ "schema": schema, "payload": value })
        } else {
            value
        };
        serde_json::to_vec(&doc).expect("JSON values serialize")
    }
}

/// The columns of one outbox row.
struct Cell<'a> {
    event: &'a Event,
    row: &'a Row,
}

impl Cell<'_> {
    fn column(&self, name: &str) -> Option<&Column> {
        self.event.schema.as_deref().and_then(|s| s.column(name))
    }

    /// A column's value as Debezium writes it; a column the row lacks is an error.
    fn json(&self, name: &str, modes: &Modes) -> Result<Json, String> {
        let value = self.row.get(name).ok_or_else(|| {
            format!(
                "outbox: {} has no column {name}: send only the outbox table to this sink (its tables), or name its columns in [outbox]",
                self.event.source.table_name()
            )
        })?;
        Ok(debezium::value(value, self.column(name), modes))
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::Op;
    use siphon_core::testing::event;

    use super::*;

    fn outbox_row(route: Value) -> Row {
        [
            ("id", Value::Text("e-1".into())),
            ("aggregatetype", route),
            ("aggregateid", Value::Text("o-7".into())),
            ("type", Value::Text("OrderCreated".into())),
            ("payload", Value::Text("{\"total\": 3}".into())),
        ]
        .into_iter()
        .collect()
    }

    fn router(schemas: bool) -> OutboxRouter {
        let config = OutboxConfig {
            headers: [("eventType".to_owned(), "type".to_owned())].into(),
            ..OutboxConfig::default()
        };
        OutboxRouter::new(&config, schemas, Modes::default()).unwrap()
    }

    #[test]
    fn an_inserted_row_goes_to_its_aggregate_types_destination_keyed_by_its_aggregate() {
        let created = event(
            "outbox",
            Op::Create,
            1,
            None,
            Some(outbox_row(Value::Text("order".into()))),
        );
        let routed = router(false).route(&created).unwrap().unwrap();
        assert_eq!(routed.destination, "outbox.event.order");
        assert_eq!(routed.key.as_deref(), Some(&b"\"o-7\""[..]));
        assert_eq!(routed.value, b"\"{\\\"total\\\": 3}\"");
        assert_eq!(
            routed.headers,
            vec![
                ("id".to_owned(), "e-1".to_owned()),
                ("eventType".to_owned(), "OrderCreated".to_owned())
            ]
        );
        let wrapped = router(true).route(&created).unwrap().unwrap();
        let key: Json = serde_json::from_slice(&wrapped.key.unwrap()).unwrap();
        assert_eq!(key["payload"], "o-7");
        assert_eq!(key["schema"]["type"], "string");
    }

    #[test]
    fn updates_deletes_and_truncates_send_nothing() {
        for op in [Op::Update, Op::Delete, Op::Truncate] {
            let row = outbox_row(Value::Text("order".into()));
            let changed = event("outbox", op, 1, Some(row.clone()), Some(row));
            assert_eq!(router(false).route(&changed).unwrap(), None, "{op:?}");
        }
    }

    #[test]
    fn a_missing_column_or_a_null_route_is_an_error_naming_it() {
        let null_route = event("outbox", Op::Create, 1, None, Some(outbox_row(Value::Null)));
        let error = router(false).route(&null_route).unwrap_err();
        assert!(error.contains("aggregatetype"), "{error}");
        let mut row = outbox_row(Value::Text("order".into()));
        row.0.retain(|(column, _)| &**column != "payload");
        let error = router(false)
            .route(&event("outbox", Op::Create, 1, None, Some(row)))
            .unwrap_err();
        assert!(error.contains("no column payload"), "{error}");
        let bad = OutboxConfig {
            destination: "outbox.{table}".into(),
            ..OutboxConfig::default()
        };
        let error = OutboxRouter::new(&bad, false, Modes::default()).unwrap_err();
        assert!(error.starts_with("outbox.destination"), "{error}");
    }
}
