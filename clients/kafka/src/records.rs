//! The Kafka records of an event, as Debezium writes them: one topic per table
//! (`<prefix>.<schema>.<table>`), the primary key as the record key, the change event as the
//! value (Debezium's JSON, or Avro in Confluent's wire format), a tombstone (the key with no
//! value) after each delete; and siphon's headers on each.

use std::collections::HashMap;
use std::time::Duration;

use siphon_core::event::{Event, Op};
use siphon_core::schema::{SchemaId, TableSchema};
use siphon_core::{Error, Result};
use siphon_format::avro::AvroSchema;
use siphon_format::debezium;
use siphon_format::envelope::{self, JsonFormat, SchemaCache, envelope_whole};

use crate::config::{Encoding, RecordFormat};
use crate::headers::RecordHeaders;
use crate::registry::{self, Registry};

/// One record to produce.
#[derive(Debug, Clone)]
pub struct OutRecord {
    /// Its topic.
    pub topic: String,
    /// The record key (`None`: no key).
    pub key: Option<Vec<u8>>,
    /// The value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
    /// siphon's headers.
    pub headers: RecordHeaders,
    /// The record's timestamp, ms since the epoch (when the log took it).
    pub timestamp_ms: i64,
}

/// A Kafka topic name from siphon's parts: what Kafka does not allow in one (anything but
/// ASCII letters, digits, `.`, `_` and `-`) becomes `_`, as Debezium does.
pub fn topic_name(parts: &[&str]) -> String {
    let joined = parts.join(".");
    joined
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Each of `topics` once, sorted.
pub fn distinct_topics(topics: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut topics: Vec<String> = topics.into_iter().collect();
    topics.sort_unstable();
    topics.dedup();
    topics
}

/// The topic of a table: `<prefix>.<namespace>.<table>` (Debezium's naming).
pub fn table_topic(prefix: &str, namespace: &str, table: &str) -> String {
    topic_name(&[prefix, namespace, table])
}

/// Turns events into their Kafka records.
#[derive(Debug)]
pub struct RecordEncoder {
    /// First part of every table's topic (Debezium's `topic.prefix`).
    prefix: String,
    encoding: Encoding,
    /// The topics are compacted: every record needs a key.
    compacted: bool,
    /// The JSON schemas of each table version, made once.
    schemas: SchemaCache,
    /// With `format = "avro"`: the registry, and each table version's Avro schemas.
    avro: Option<AvroRecords>,
    /// Values are row states (events a row-state stage shaped): the `after` row alone, no
    /// tombstone after a delete but where the row state is one.
    row_states: bool,
}

impl RecordEncoder {
    /// An encoder for topics named `<prefix>.<schema>.<table>`, records in `encoding`; a
    /// schema registry's calls wait at most `timeout`.
    pub fn new(
        prefix: impl Into<String>,
        encoding: Encoding,
        compacted: bool,
        timeout: Duration,
    ) -> Result<Self> {
        let avro = match (&encoding.format, &encoding.registry) {
            (RecordFormat::Json, _) => None,
            (RecordFormat::Avro, Some(registry)) => Some(AvroRecords {
                registry: Registry::new(registry, timeout)?,
                versions: HashMap::new(),
            }),
            (RecordFormat::Avro, None) => {
                return Err(Error::Config(
                    "format = \"avro\" needs a schema registry: set registry.url".into(),
                ));
            }
        };
        Ok(RecordEncoder {
            prefix: prefix.into(),
            encoding,
            compacted,
            schemas: SchemaCache::default(),
            avro,
            row_states: false,
        })
    }

    /// The encoder, its values row states (Debezium's ExtractNewRecordState) of events a
    /// row-state stage shaped: the row alone, a value-less record (a tombstone) where the
    /// stage left no row.
    pub fn with_row_states(mut self) -> Self {
        self.row_states = true;
        self
    }

    /// The topic of an event's table.
    pub fn topic(&self, event: &Event) -> String {
        topic_name(&[&self.prefix, event.source.namespace(), &event.source.table])
    }

    /// The records of `event` (with `headers`) in its table's topic: the change, and after a
    /// delete its tombstone.
    pub fn encode(
        &mut self,
        event: &Event,
        headers: RecordHeaders,
        timestamp_ms: i64,
    ) -> Result<Vec<OutRecord>> {
        let topic = self.topic(event);
        self.encode_to(event, topic, headers, timestamp_ms)
    }

    /// The records of `event` (with `headers`) in `topic`: the change, and after a delete
    /// its tombstone (with row states, the tombstone only where the row state is one).
    pub fn encode_to(
        &mut self,
        event: &Event,
        topic: String,
        headers: RecordHeaders,
        timestamp_ms: i64,
    ) -> Result<Vec<OutRecord>> {
        let format = JsonFormat {
            schemas: self.encoding.schemas,
            transactions: self.encoding.transaction_metadata,
            modes: self.encoding.modes,
        };
        let (key, value) = match &mut self.avro {
            None => (
                format.key_bytes(event, &mut self.schemas),
                if !self.row_states {
                    Some(format.value_bytes(event, &mut self.schemas))
                } else {
                    event.after.is_some().then(|| format.row_state_bytes(event))
                },
            ),
            Some(avro) => avro.encode(event, &topic, format, self.row_states)?,
        };
        let key = match key {
            None if self.compacted => {
                if event.op != Op::Truncate {
                    return Err(Error::permanent(format!(
                        "table {} has no primary key, so its records cannot be kept in a compacted topic ({topic}): give it one, leave it out of the source's tables, or use topics.cleanup_policy = \"delete\"",
                        event.source.table_name()
                    )));
                }
                // A compacted topic refuses records without a key: a truncate gets an empty
                // one (JSON's `{}`, also in Avro: a truncate names no row).
                Some(b"{}".to_vec())
            }
            key => key,
        };
        let tombstone =
            (event.op == Op::Delete && key.is_some() && !self.row_states).then(|| OutRecord {
                topic: topic.clone(),
                key: key.clone(),
                value: None,
                headers: RecordHeaders {
                    offset: headers.offset,
                    ..RecordHeaders::default()
                },
                timestamp_ms,
            });
        let change = OutRecord {
            topic,
            key,
            value,
            headers,
            timestamp_ms,
        };
        Ok(std::iter::once(change).chain(tombstone).collect())
    }
}

/// Avro records: each table version's key and value schemas, made and registered once per
/// topic (a sink's destination may send a table to several, each with subjects of its own).
#[derive(Debug)]
struct AvroRecords {
    registry: Registry,
    versions: HashMap<String, HashMap<SchemaId, AvroVersion>>,
}

/// A record's key and value bytes (`None`: no key; no value, a tombstone).
type KeyAndValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A table version's Avro schemas and their ids in the registry (the key's where the table has
/// a primary key; the value's once a value is written).
#[derive(Debug)]
struct AvroVersion {
    key: Option<(AvroSchema, u32)>,
    value: Option<(AvroSchema, u32)>,
    /// A value that did not fit its Avro type was reported.
    warned: bool,
}

impl AvroRecords {
    /// The event's key (`None` without a primary key) and value (`None`: a row state without
    /// a row) in Confluent's wire format; the value the change envelope, or with `row_states`
    /// the row state. Blocks on the registry the first time a table version is met.
    fn encode(
        &mut self,
        event: &Event,
        topic: &str,
        format: JsonFormat,
        row_states: bool,
    ) -> Result<KeyAndValue> {
        let Some(table) = event.schema.as_deref() else {
            return Err(Error::permanent(format!(
                "format = \"avro\" needs each table's schema, and the {} source's events of {} have none: use format = \"json\"",
                event.source.connector,
                event.source.table_name()
            )));
        };
        if !self
            .versions
            .get(topic)
            .is_some_and(|v| v.contains_key(&table.id))
        {
            let key = self.key_schema(event, table, topic, format)?;
            self.versions.entry(topic.to_owned()).or_default().insert(
                table.id,
                AvroVersion {
                    key,
                    value: None,
                    warned: false,
                },
            );
        }
        let document = match row_states {
            false => Some(envelope_whole(event, format.transactions, &format.modes)),
            true => event
                .after
                .is_some()
                .then(|| envelope::row_state(event, &format.modes)),
        };
        if document.is_some() && self.version(topic, table.id).value.is_none() {
            let connect = match row_states {
                false => debezium::envelope_schema(event, table, &format.modes),
                true => envelope::row_state_schema(event, &format.modes),
            };
            let schema = avro_schema(event, &connect)?;
            let id = self
                .registry
                .register(&registry::subject(topic, false), schema.text())?;
            self.version(topic, table.id).value = Some((schema, id));
        }
        let version = self.version(topic, table.id);
        // A truncate names no row: no key.
        let mut mismatched = Vec::new();
        let key = match (&version.key, debezium::key(event, &format.modes)) {
            (Some((schema, id)), key) if !key.is_null() => {
                let mut out = registry::framed(*id, 64);
                mismatched.extend(schema.write(&key, &mut out));
                Some(out)
            }
            _ => None,
        };
        let value = match (&version.value, document) {
            (Some((schema, id)), Some(document)) => {
                let mut out = registry::framed(*id, 512);
                mismatched.extend(schema.write(&document, &mut out));
                Some(out)
            }
            _ => None,
        };
        if !mismatched.is_empty() && !version.warned {
            version.warned = true;
            tracing::warn!(
                table = %event.source.table_name(),
                fields = ?mismatched,
                "a value does not fit its Avro type: written as the type's zero (said once per table version)"
            );
        }
        Ok((key, value))
    }

    /// The schemas of table version `id` in `topic`, made by [`AvroRecords::encode`].
    fn version(&mut self, topic: &str, id: SchemaId) -> &mut AvroVersion {
        self.versions
            .get_mut(topic)
            .and_then(|versions| versions.get_mut(&id))
            .expect("made before it is asked for")
    }

    /// Makes a table version's key schema and registers it (`None`: no primary key).
    fn key_schema(
        &mut self,
        event: &Event,
        table: &TableSchema,
        topic: &str,
        format: JsonFormat,
    ) -> Result<Option<(AvroSchema, u32)>> {
        if table.key.is_empty() {
            return Ok(None);
        }
        let schema = avro_schema(event, &debezium::key_schema(event, table, &format.modes))?;
        let id = self
            .registry
            .register(&registry::subject(topic, true), schema.text())?;
        Ok(Some((schema, id)))
    }
}

/// The Avro schema of a Kafka Connect schema of `event`'s table.
fn avro_schema(event: &Event, connect: &serde_json::Value) -> Result<AvroSchema> {
    AvroSchema::from_connect(connect).map_err(|e| {
        Error::permanent(format!(
            "the Avro schema of {}: {e}",
            event.source.table_name()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_keep_only_what_kafka_allows() {
        assert_eq!(
            topic_name(&["shop", "public", "orders"]),
            "shop.public.orders"
        );
        assert_eq!(
            topic_name(&["shop", "my schema", "Ordres€"]),
            "shop.my_schema.Ordres_"
        );
    }
}
