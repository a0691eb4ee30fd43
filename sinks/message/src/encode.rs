//! An event as a message.

use std::borrow::Cow;

use siphon_core::event::{Event, Op};
use siphon_core::log::LogId;
use siphon_core::sink::SinkRecord;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::row_state::RowState;
use siphon_core::sink::stage::Stage;
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_format::envelope::{JsonFormat, SchemaCache};

use crate::config::{DESTINATION_PLACEHOLDERS, MessageSettings, ValueForm};
use crate::outbox::{OutboxConfig, OutboxRouter, Routed};

/// One event as every message sink sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The stream, subject or routing key it goes to.
    pub destination: String,
    /// Debezium's key JSON (`None` for a table without a primary key).
    pub key: Option<Vec<u8>>,
    /// Debezium's envelope JSON, or the row state's.
    pub value: Vec<u8>,
    /// The event's id, `<log identity>:<offset>`: the same for the same event however often
    /// it is sent, and unique across logs (a rebuilt log has another identity).
    pub id: String,
    /// The event's offset in the change log (its version).
    pub offset: u64,
    /// The source's position of its commit (an LSN, a GTID or binlog position).
    pub position: String,
    /// The source transaction's id, if any.
    pub txid: Option<String>,
    /// Debezium's operation code: c, u, d, r or t.
    pub op: &'static str,
    /// Headers made of the row (an outbox row's `id` and those its settings name), beside
    /// siphon's.
    pub row_headers: Vec<(String, String)>,
}

/// The header names of a message's facts, for the brokers that carry headers.
pub mod header {
    /// The event's id, `<log identity>:<offset>`.
    pub const ID: &str = "siphon.id";
    /// The event's offset in the change log.
    pub const OFFSET: &str = "siphon.offset";
    /// Debezium's operation code.
    pub const OP: &str = "siphon.op";
    /// The source's position of the commit.
    pub const POSITION: &str = "siphon.position";
    /// The source transaction's id.
    pub const TXID: &str = "siphon.txid";
    /// Debezium's key JSON, for brokers whose messages have no key.
    pub const KEY: &str = "debezium.key";
}

impl Message {
    /// The facts a consumer dedupes and orders by, as headers (the transaction's only when
    /// the event has one), then those made of the row.
    pub fn headers(&self) -> Vec<(&str, String)> {
        let mut out = vec![
            (header::ID, self.id.clone()),
            (header::OFFSET, self.offset.to_string()),
            (header::OP, self.op.to_owned()),
            (header::POSITION, self.position.clone()),
        ];
        if let Some(txid) = &self.txid {
            out.push((header::TXID, txid.clone()));
        }
        out.extend(
            self.row_headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.clone())),
        );
        out
    }
}

/// What a consumer dedupes and orders an event by, beside its offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The event's id, `<log identity>:<offset>`.
    pub id: String,
    /// The source's position of its commit.
    pub position: String,
    /// The source transaction's id, if any.
    pub txid: Option<String>,
}

impl Facts {
    /// The facts of `record` of log `log`.
    pub fn of(record: &SinkRecord, log: &LogId) -> Facts {
        let source = &record.event.source;
        Facts {
            id: format!("{log}:{}", record.offset),
            position: source.position.commit_point(),
            txid: source.tx_id.map(|id| id.to_string()),
        }
    }
}

/// Makes messages of a pipeline's events.
#[derive(Debug)]
pub struct MessageEncoder {
    destination: NameTemplate,
    prefix: String,
    values: ValueEncoder,
}

impl MessageEncoder {
    /// An encoder for pipeline `pipeline`'s events.
    pub fn new(settings: &MessageSettings, pipeline: &str) -> Result<Self, String> {
        settings.validate()?;
        Ok(MessageEncoder {
            destination: NameTemplate::parse(&settings.destination, DESTINATION_PLACEHOLDERS)
                .map_err(|e| format!("destination: {e}"))?,
            prefix: settings
                .prefix
                .clone()
                .unwrap_or_else(|| pipeline.to_owned()),
            values: ValueEncoder::new(
                settings.value,
                &settings.row_state,
                &settings.outbox,
                JsonFormat {
                    schemas: settings.schemas,
                    transactions: settings.transaction_metadata,
                    modes: settings.debezium,
                },
            )?,
        })
    }

    /// `record` of log `log` as a message; `None` for an event that sends nothing (a
    /// delete the row state drops, with `deletes = "drop"`; a change of an outbox table
    /// other than an insert). An error (an outbox row without a destination) names the
    /// table and the column.
    pub fn encode(&mut self, record: &SinkRecord, log: &LogId) -> Result<Option<Message>> {
        let event = &record.event;
        let (destination, key, value, row_headers) = match self.values.encode(event)? {
            None => return Ok(None),
            Some(Encoded::Value(value)) => (
                self.destination(event),
                self.values.key(event),
                value,
                Vec::new(),
            ),
            Some(Encoded::Routed(routed)) => {
                (routed.destination, routed.key, routed.value, routed.headers)
            }
        };
        let Facts { id, position, txid } = Facts::of(record, log);
        Ok(Some(Message {
            destination,
            key,
            value,
            id,
            offset: record.offset,
            position,
            txid,
            op: event.op.code(),
            row_headers,
        }))
    }

    /// The outbox router, where values are routed outbox rows.
    pub fn outbox(&self) -> Option<&OutboxRouter> {
        self.values.outbox()
    }

    /// See [`ValueEncoder::shape`].
    pub fn shape<'a>(&self, event: &'a Event) -> Option<Cow<'a, Event>> {
        self.values.shape(event)
    }

    /// Where `event` goes.
    pub fn destination(&self, event: &Event) -> String {
        self.render(event.source.namespace(), &event.source.table, event.op)
    }

    /// Every destination `table`'s events can have (one for each operation when the
    /// template names `{op}`); routed outbox rows have one pattern, their route `*`.
    pub fn destinations_of(&self, table: &TableInfo) -> Vec<String> {
        if let Some(router) = self.outbox() {
            return vec![router.destination_pattern()];
        }
        let mut all: Vec<String> = [Op::Create, Op::Update, Op::Delete, Op::Read, Op::Truncate]
            .into_iter()
            .map(|op| self.render(table.name.namespace(), table.name.table(), op))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    fn render(&self, schema: &str, table: &str, op: Op) -> String {
        self.destination.render(&[
            ("prefix", &self.prefix),
            ("schema", schema),
            ("table", table),
            ("op", op.code()),
        ])
    }
}

/// An event's value as JSON text, as `value` chose it — Debezium's envelope, the row state
/// (ExtractNewRecordState) or a routed outbox row: the one encoding of values of the message
/// sinks, the Kafka sink's JSON and the JSON-lines sinks (`file`, `stdout`).
#[derive(Debug)]
pub struct ValueEncoder {
    format: JsonFormat,
    schemas: SchemaCache,
    form: Form,
}

/// A value, as [`ValueForm`] chose it, with what making it takes.
#[derive(Debug)]
enum Form {
    Envelope,
    Row(RowState),
    Outbox(OutboxRouter),
}

/// What [`ValueEncoder::encode`] makes of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoded {
    /// The envelope's or the row state's JSON text.
    Value(Vec<u8>),
    /// An outbox row's message parts.
    Routed(Routed),
}

impl ValueEncoder {
    /// Values in `format` of the form `value` (with `row_state` or `outbox`, where it is
    /// theirs). An error names the key.
    pub fn new(
        value: ValueForm,
        row_state: &RowState,
        outbox: &OutboxConfig,
        format: JsonFormat,
    ) -> Result<Self, String> {
        Ok(ValueEncoder {
            form: match value {
                ValueForm::Envelope => Form::Envelope,
                ValueForm::Row => Form::Row(row_state.clone()),
                ValueForm::Outbox => {
                    Form::Outbox(OutboxRouter::new(outbox, format.schemas, format.modes)?)
                }
            },
            format,
            schemas: SchemaCache::default(),
        })
    }

    /// `event`'s value; `None` for an event that has none (a delete the row state drops; a
    /// change of an outbox table other than an insert). An error (an outbox row without a
    /// destination) names the table and the column.
    pub fn encode(&mut self, event: &Event) -> Result<Option<Encoded>> {
        if let Form::Outbox(router) = &self.form {
            return Ok(router
                .route(event)
                .map_err(Error::permanent)?
                .map(Encoded::Routed));
        }
        let Some(shaped) = self.shape(event) else {
            return Ok(None);
        };
        Ok(Some(Encoded::Value(match &shaped {
            Cow::Borrowed(event) => self.format.value_bytes(event, &mut self.schemas),
            Cow::Owned(state) => self.format.row_state_bytes(state),
        })))
    }

    /// `event`'s key as JSON text in this format (`None` for a table without a primary key).
    pub fn key(&mut self, event: &Event) -> Option<Vec<u8>> {
        self.format.key_bytes(event, &mut self.schemas)
    }

    /// The outbox router, where values are routed outbox rows.
    pub fn outbox(&self) -> Option<&OutboxRouter> {
        match &self.form {
            Form::Outbox(router) => Some(router),
            _ => None,
        }
    }

    /// The event a value is made of: `event` itself, or its row state (`None` when the row
    /// state drops it). An outbox row's value is the router's ([`ValueEncoder::outbox`]).
    pub fn shape<'a>(&self, event: &'a Event) -> Option<Cow<'a, Event>> {
        match &self.form {
            Form::Envelope | Form::Outbox(_) => Some(Cow::Borrowed(event)),
            Form::Row(stage) => {
                let mut state = event.clone();
                // The row state drops an event or passes it; it never fails.
                matches!(stage.apply(&mut state), Ok(true)).then_some(Cow::Owned(state))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::Op;
    use siphon_core::testing::{compliance_table, event, log_id, record, row};

    use super::*;

    fn settings(destination: &str) -> MessageSettings {
        MessageSettings {
            destination: destination.into(),
            prefix: None,
            schemas: false,
            transaction_metadata: false,
            debezium: Default::default(),
            value: ValueForm::Envelope,
            row_state: RowState {
                fields: RowState::all_fields(),
                deletes: Default::default(),
            },
            outbox: Default::default(),
        }
    }

    #[test]
    fn a_message_goes_where_its_template_says_with_debeziums_key_and_value() {
        let mut encoder =
            MessageEncoder::new(&settings("{prefix}.{schema}.{table}"), "shop").unwrap();
        let created = event(
            "compliance",
            Op::Create,
            7,
            None,
            Some(row(7, "seven", siphon_core::event::Value::Null)),
        );
        let message = encoder
            .encode(&record(41, created), &log_id())
            .unwrap()
            .unwrap();
        assert_eq!(message.destination, "shop.public.compliance");
        assert_eq!(message.id, format!("{}:41", log_id()));
        assert_eq!((message.offset, message.op), (41, "c"));
        let key: serde_json::Value = serde_json::from_slice(&message.key.unwrap()).unwrap();
        assert_eq!(key, serde_json::json!({ "id": 7 }));
        let value: serde_json::Value = serde_json::from_slice(&message.value).unwrap();
        assert_eq!(value["op"], "c");
        assert_eq!(value["after"]["name"], "seven");
    }

    #[test]
    fn a_row_state_value_is_the_row_with_what_happened_and_a_dropped_delete_no_message() {
        let mut settings = settings("{prefix}.{schema}.{table}");
        settings.value = ValueForm::Row;
        let mut encoder = MessageEncoder::new(&settings, "shop").unwrap();
        let updated = event(
            "compliance",
            Op::Update,
            7,
            None,
            Some(row(7, "seven", siphon_core::event::Value::Null)),
        );
        let message = encoder
            .encode(&record(3, updated), &log_id())
            .unwrap()
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&message.value).unwrap();
        assert_eq!(value["name"], "seven");
        assert_eq!(value["__op"], "u");
        assert_eq!(value["__table"], "compliance");
        assert_eq!(value["__deleted"], "false");
        assert_eq!(message.op, "u");
        let deleted = event(
            "compliance",
            Op::Delete,
            7,
            Some(row(7, "seven", siphon_core::event::Value::Null)),
            None,
        );
        let rewritten = encoder
            .encode(&record(4, deleted.clone()), &log_id())
            .unwrap()
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&rewritten.value).unwrap();
        assert_eq!(
            (value["id"].as_i64(), &value["__deleted"]),
            (Some(7), &serde_json::json!("true"))
        );
        settings.row_state.deletes = siphon_core::sink::row_state::DeleteHandling::Drop;
        let mut dropping = MessageEncoder::new(&settings, "shop").unwrap();
        assert_eq!(
            dropping.encode(&record(4, deleted), &log_id()).unwrap(),
            None
        );
    }

    #[test]
    fn a_template_with_op_gives_a_table_a_destination_per_operation() {
        let encoder = MessageEncoder::new(&settings("cdc:{table}:{op}"), "shop").unwrap();
        assert_eq!(
            encoder.destinations_of(&compliance_table()),
            [
                "cdc:compliance:c",
                "cdc:compliance:d",
                "cdc:compliance:r",
                "cdc:compliance:t",
                "cdc:compliance:u"
            ]
        );
        let error = MessageEncoder::new(&settings("{prefix}.{db}"), "shop").unwrap_err();
        assert!(
            error.starts_with("destination:") && error.contains("{db}"),
            "{error}"
        );
    }
}
