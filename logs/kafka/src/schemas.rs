//! The Kafka log's catalog, in the pipeline's compacted schemas topic: every table schema
//! version (key `schema/<id>`, value the version as JSON) and every topic the log's records
//! are in (key `topic/<name>`), so that a reader knows where to read.
//!
//! The writer registers a version or a topic in memory and sends it in its next transaction
//! (a version whose transaction aborted is given again, under the same id, with the next
//! one), before the records that refer to it: readers in other processes see it no later than
//! the first record that needs it. A reader that meets a schema id it does not hold reads the
//! topic on to its end.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::Offset;
use rdkafka::message::Message;
use siphon_core::schema::{SchemaId, SchemaLookup, SchemaStore, SchemaVersions, TableSchema};
use siphon_core::{Error, Result};
use siphon_kafka::OutRecord;
use siphon_kafka::headers::RecordHeaders;

use siphon_kafka::consume::{PartitionConsumer, read_partition};

/// The schemas of one Kafka log.
pub struct KafkaSchemas {
    topic: String,
    inner: Mutex<Registry>,
    /// Reads versions registered since by the writer, in a process that does not write.
    follower: Option<Mutex<PartitionConsumer>>,
    timeout: Duration,
    /// Every read starts at the topic's beginning (see `Seek::Beginning`).
    from_beginning: bool,
}

impl std::fmt::Debug for KafkaSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSchemas")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Registry {
    versions: SchemaVersions,
    /// The topics the log's records are in.
    topics: BTreeSet<String>,
    /// Registered, not yet sent in a committed transaction (the writer's).
    pending: Vec<Entry>,
    /// The next offset of the topic to read.
    read_to: i64,
}

/// One record of the catalog.
#[derive(Debug, Clone)]
enum Entry {
    Schema(Arc<TableSchema>),
    Topic(String),
}

const SCHEMA_KEY: &str = "schema/";
const TOPIC_KEY: &str = "topic/";

impl KafkaSchemas {
    /// The versions in `topic`, read to its end with `consumer`; the consumer stays to follow
    /// the topic when `follow` (a process that does not write).
    pub(crate) fn load(
        topic: &str,
        consumer: PartitionConsumer,
        follow: bool,
        timeout: Duration,
        from_beginning: bool,
    ) -> Result<Self> {
        let schemas = KafkaSchemas {
            topic: topic.to_owned(),
            inner: Mutex::default(),
            follower: Some(Mutex::new(consumer)),
            timeout,
            from_beginning,
        };
        schemas.read_new()?;
        Ok(KafkaSchemas {
            follower: if follow { schemas.follower } else { None },
            ..schemas
        })
    }

    /// Reads the versions written since the last read.
    fn read_new(&self) -> Result<()> {
        let Some(follower) = &self.follower else {
            return Ok(());
        };
        let consumer = follower.lock().unwrap();
        let start = if self.from_beginning {
            0
        } else {
            self.inner.lock().unwrap().read_to
        };
        let mut found = Vec::new();
        let mut topics = Vec::new();
        let mut next = start;
        read_partition(
            &consumer,
            &self.topic,
            0,
            Offset::Offset(start),
            self.timeout,
            |message| {
                next = message.offset() + 1;
                let key = message
                    .key()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                if let Some(topic) = key.strip_prefix(TOPIC_KEY) {
                    topics.push(topic.to_owned());
                } else if let (true, Some(payload)) =
                    (key.starts_with(SCHEMA_KEY), message.payload())
                {
                    let schema: TableSchema =
                        serde_json::from_slice(payload).map_err(|e| Error::Corrupt {
                            path: self.topic.clone().into(),
                            position: message.offset() as u64,
                            reason: format!("a schema record that does not decode: {e}"),
                        })?;
                    found.push(schema);
                }
                Ok(())
            },
        )?;
        let mut registry = self.inner.lock().unwrap();
        registry.read_to = registry.read_to.max(next);
        registry.topics.extend(topics);
        for schema in found {
            let next = registry.versions.next_id();
            if schema.id == next {
                registry.versions.add(Arc::new(schema));
            } else if schema.id > next {
                return Err(Error::Corrupt {
                    path: self.topic.clone().into(),
                    position: 0,
                    reason: format!("schema {} where {} was expected", schema.id.0, next.0),
                });
            }
            // An id already held: the same version, sent again after an abort.
        }
        Ok(())
    }

    /// The records of the versions and topics registered and not yet committed, for the
    /// writer's next transaction.
    pub(crate) fn pending(&self, timestamp_ms: i64) -> Result<Vec<OutRecord>> {
        let registry = self.inner.lock().unwrap();
        registry
            .pending
            .iter()
            .map(|entry| {
                let (key, value) = match entry {
                    Entry::Schema(schema) => (
                        format!("{SCHEMA_KEY}{}", schema.id.0),
                        serde_json::to_vec(&**schema).map_err(|e| Error::Codec(e.to_string()))?,
                    ),
                    Entry::Topic(topic) => (format!("{TOPIC_KEY}{topic}"), b"{}".to_vec()),
                };
                Ok(OutRecord {
                    topic: self.topic.clone(),
                    key: Some(key.into_bytes()),
                    value: Some(value),
                    headers: RecordHeaders::default(),
                    timestamp_ms,
                })
            })
            .collect()
    }

    /// The entries sent so far are committed: `count` of the pending ones.
    pub(crate) fn committed(&self, count: usize) {
        let mut registry = self.inner.lock().unwrap();
        let count = count.min(registry.pending.len());
        registry.pending.drain(..count);
    }

    /// Notes the topics the writer's records go to; those not known yet become pending.
    pub(crate) fn note_topics<'t>(&self, topics: impl IntoIterator<Item = &'t String>) {
        let mut registry = self.inner.lock().unwrap();
        for topic in topics {
            if registry.topics.insert(topic.clone()) {
                registry.pending.push(Entry::Topic(topic.clone()));
            }
        }
    }

    /// The topics the log's records are in.
    pub(crate) fn topics(&self) -> Vec<String> {
        self.inner.lock().unwrap().topics.iter().cloned().collect()
    }

    /// Reads versions registered since (a process that does not write); a no-op in the
    /// writer's.
    pub(crate) fn refresh(&self) -> Result<()> {
        self.read_new()
    }
}

impl SchemaStore for KafkaSchemas {
    fn register(&self, schema: &TableSchema) -> Result<Arc<TableSchema>> {
        if let Some(reason) = schema.invalid() {
            return Err(Error::Codec(reason));
        }
        if self.follower.is_some() {
            return Err(Error::Config(
                "the Kafka log was opened read-only: no schema can be registered".into(),
            ));
        }
        let mut registry = self.inner.lock().unwrap();
        if let Some(found) = registry.versions.find(schema) {
            return Ok(found);
        }
        let registered = registry.versions.next_version(schema)?;
        let id = registered.id;
        registry.versions.add(registered.clone());
        registry.pending.push(Entry::Schema(registered.clone()));
        tracing::debug!(table = %registered.name(), id = id.0, "registered a table schema");
        Ok(registered)
    }

    fn all(&self) -> Vec<Arc<TableSchema>> {
        self.inner.lock().unwrap().versions.all()
    }
}

impl SchemaLookup for KafkaSchemas {
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        if let Some(found) = self.inner.lock().unwrap().versions.get(id) {
            return Some(found);
        }
        // Another process writes: it may have registered it since.
        if let Err(e) = self.read_new() {
            tracing::warn!(error = %e, topic = %self.topic, "reading the schemas topic");
        }
        self.inner.lock().unwrap().versions.get(id)
    }
}
