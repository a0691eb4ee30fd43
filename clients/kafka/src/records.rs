//! The Kafka records of an event, as Debezium writes them: one topic per table
//! (`<prefix>.<schema>.<table>`), the primary key as the record key, the change event as the
//! value, a tombstone (the key with no value) after each delete; and siphon's headers on each.

use siphon_core::event::{Event, Op};
use siphon_core::{Error, Result};
use siphon_format::envelope::{JsonFormat, SchemaCache};

use crate::config::{Encoding, RecordFormat};
use crate::headers::RecordHeaders;

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
}

impl RecordEncoder {
    /// An encoder for topics named `<prefix>.<schema>.<table>`, records in `encoding`.
    pub fn new(prefix: impl Into<String>, encoding: Encoding, compacted: bool) -> Result<Self> {
        if encoding.format == RecordFormat::Avro {
            return Err(Error::Config(
                "format = \"avro\" is not available in this build of the Kafka encoder".into(),
            ));
        }
        Ok(RecordEncoder {
            prefix: prefix.into(),
            encoding,
            compacted,
            schemas: SchemaCache::default(),
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
        let key = match format.key_bytes(event, &mut self.schemas) {
            None if self.compacted => {
                if event.op != Op::Truncate {
                    return Err(Error::permanent(format!(
                        "table {} has no primary key, so its records cannot be kept in a compacted topic ({topic}): give it one, leave it out of the source's tables, or use topics.cleanup_policy = \"delete\"",
                        event.source.table_name()
                    )));
                }
                // A compacted topic refuses records without a key: a truncate gets an empty one.
                Some(b"{}".to_vec())
            }
            key => key,
        };
        let value = format.value_bytes(event, &mut self.schemas);
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
