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
use siphon_format::envelope::{JsonFormat, SchemaCache, envelope_whole};

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
        })
    }

    /// The topic of an event's table.
    pub fn topic(&self, event: &Event) -> String {
        topic_name(&[&self.prefix, event.source.namespace(), &event.source.table])
    }

    /// The records of `event` (with `headers`): the change, and after a delete its tombstone.
    pub fn encode(
        &mut self,
        event: &Event,
        headers: RecordHeaders,
        timestamp_ms: i64,
    ) -> Result<Vec<OutRecord>> {
        let topic = self.topic(event);
        let format = JsonFormat {
            schemas: self.encoding.schemas,
            transactions: self.encoding.transaction_metadata,
            modes: self.encoding.modes,
        };
        let (key, value) = match &mut self.avro {
            None => (
                format.key_bytes(event, &mut self.schemas),
                format.value_bytes(event, &mut self.schemas),
            ),
            Some(avro) => avro.encode(event, &topic, format)?,
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
        let mut out = Vec::with_capacity(2);
        if event.op == Op::Delete && key.is_some() {
            let tombstone = OutRecord {
                topic: topic.clone(),
                key: key.clone(),
                value: None,
                headers: RecordHeaders {
                    offset: headers.offset,
                    ..RecordHeaders::default()
                },
                timestamp_ms,
            };
            out.push(OutRecord {
                topic,
                key,
                value: Some(value),
                headers,
                timestamp_ms,
            });
            out.push(tombstone);
        } else {
            out.push(OutRecord {
                topic,
                key,
                value: Some(value),
                headers,
                timestamp_ms,
            });
        }
        Ok(out)
    }
}

/// Avro records: each table version's key and value schemas, made and registered once.
#[derive(Debug)]
struct AvroRecords {
    registry: Registry,
    versions: HashMap<SchemaId, AvroVersion>,
}

/// A table version's Avro schemas and their ids in the registry (the key's where the table has
/// a primary key).
#[derive(Debug)]
struct AvroVersion {
    key: Option<(AvroSchema, u32)>,
    value: (AvroSchema, u32),
    /// A value that did not fit its Avro type was reported.
    warned: bool,
}

impl AvroRecords {
    /// The event's key (`None` without a primary key) and value in Confluent's wire format.
    /// Blocks on the registry the first time a table version is met.
    fn encode(
        &mut self,
        event: &Event,
        topic: &str,
        format: JsonFormat,
    ) -> Result<(Option<Vec<u8>>, Vec<u8>)> {
        let Some(table) = event.schema.as_deref() else {
            return Err(Error::permanent(format!(
                "format = \"avro\" needs each table's schema, and the {} source's events of {} have none: use format = \"json\"",
                event.source.connector,
                event.source.table_name()
            )));
        };
        if !self.versions.contains_key(&table.id) {
            let made = self.version(event, table, topic, format)?;
            self.versions.insert(table.id, made);
        }
        let version = self.versions.get_mut(&table.id).expect("made above");
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
        let (schema, id) = &version.value;
        let mut value = registry::framed(*id, 512);
        mismatched.extend(schema.write(
            &envelope_whole(event, format.transactions, &format.modes),
            &mut value,
        ));
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

    /// Makes a table version's Avro schemas and registers them.
    fn version(
        &mut self,
        event: &Event,
        table: &TableSchema,
        topic: &str,
        format: JsonFormat,
    ) -> Result<AvroVersion> {
        let avro = |connect: &serde_json::Value| {
            AvroSchema::from_connect(connect).map_err(|e| {
                Error::permanent(format!(
                    "the Avro schema of {}: {e}",
                    event.source.table_name()
                ))
            })
        };
        let key = if table.key.is_empty() {
            None
        } else {
            let schema = avro(&debezium::key_schema(event, table, &format.modes))?;
            let id = self
                .registry
                .register(&registry::subject(topic, true), schema.text())?;
            Some((schema, id))
        };
        let schema = avro(&debezium::envelope_schema(event, table, &format.modes))?;
        let id = self
            .registry
            .register(&registry::subject(topic, false), schema.text())?;
        Ok(AvroVersion {
            key,
            value: (schema, id),
            warned: false,
        })
    }
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
