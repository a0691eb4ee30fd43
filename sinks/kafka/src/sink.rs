//! The Kafka sink.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::{TableInfo, now_ms};
use siphon_core::{Error, Result};
use siphon_kafka::config::{KafkaSettings, Seek};
use siphon_kafka::consume::{consumer, latest_of_key, reach};
use siphon_kafka::headers::RecordHeaders;
use siphon_kafka::{Delivery, OutRecord, Publisher, RecordEncoder, TopicSpec, Topics};

use crate::config::KafkaSinkConfig;

/// The key of the one cursor record in the cursor topic.
const CURSOR_KEY: &[u8] = b"cursor";

/// The cursor as the cursor topic keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Cursor {
    log_id: Option<LogId>,
    next_offset: u64,
}

/// What a connected sink holds; every call on it blocks.
struct Connected {
    publisher: Publisher,
    topics: Topics,
    encoder: RecordEncoder,
}

/// Publishes a pipeline's events to Kafka; see the crate documentation.
pub struct KafkaSink {
    settings: KafkaSettings,
    pipeline: String,
    cursor_topic: String,
    transactional_id: String,
    topic_spec: TopicSpec,
    connected: Option<Connected>,
    /// The log its cursor is a position in (given at open).
    log: Option<LogId>,
    /// The stored cursor as of the last open or batch.
    cursor: Option<u64>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("pipeline", &self.pipeline)
            .field("cursor_topic", &self.cursor_topic)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

/// Runs `f` on the blocking pool (librdkafka's calls block).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::permanent(format!("a Kafka sink task failed: {e}")))
}

impl KafkaSink {
    /// Sink `sink` of pipeline `pipeline` (they name its cursor topic and producer).
    pub fn new(config: &KafkaSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let settings = config.kafka();
        Ok(KafkaSink {
            cursor_topic: config
                .cursor_topic
                .clone()
                .unwrap_or_else(|| format!("siphon.{pipeline}.{sink}.cursor")),
            transactional_id: settings
                .transactional_id
                .clone()
                .unwrap_or_else(|| format!("siphon.{pipeline}.{sink}")),
            topic_spec: TopicSpec {
                partitions: settings.topics.partitions,
                replication_factor: settings.topics.replication_factor,
                config: settings.topics.topic_config(),
            },
            settings,
            pipeline: pipeline.to_owned(),
            connected: None,
            log: None,
            cursor: None,
        })
    }

    fn timeout(&self) -> Duration {
        self.settings.timeout.0
    }

    /// Connects: a transactional producer fences the earlier ones of this sink. Blocks.
    fn connect(&self) -> Result<Connected> {
        let connection = self.settings.connection();
        let delivery = if self.settings.transactions {
            Delivery::Transactional {
                id: self.transactional_id.clone(),
            }
        } else {
            Delivery::Idempotent
        };
        let client_id = format!("siphon-{}-sink", self.pipeline);
        let publisher = Publisher::connect(
            &connection,
            &client_id,
            delivery,
            &[(
                "compression.type",
                self.settings.compression.name().to_owned(),
            )],
            self.timeout(),
        )?;
        let topics = Topics::connect(&connection, &client_id, self.timeout())?;
        topics.ensure(
            std::slice::from_ref(&self.cursor_topic),
            &TopicSpec {
                partitions: 1,
                replication_factor: self.settings.topics.replication_factor,
                config: [("cleanup.policy".to_owned(), "compact".to_owned())].into(),
            },
        )?;
        let encoder = RecordEncoder::new(
            self.settings.prefix(&self.pipeline),
            self.settings.encoding(),
            self.settings.topics.cleanup_policy.compacts(),
            self.timeout(),
        )?;
        Ok(Connected {
            publisher,
            topics,
            encoder,
        })
    }

    /// The cursor the cursor topic holds. Blocks.
    fn stored_cursor(&self) -> Result<Option<Cursor>> {
        let reader = consumer(
            &self.settings.connection(),
            &format!("siphon-{}-sink", self.pipeline),
            true,
        )?;
        latest_of_key(
            &reader,
            &self.cursor_topic,
            CURSOR_KEY,
            self.timeout(),
            self.settings.seek == Seek::Beginning,
        )?
        .map(|payload| {
            serde_json::from_slice(&payload).map_err(|e| {
                Error::permanent(format!(
                    "kafka: the cursor in {} does not decode ({e}); delete it to publish from the log's start",
                    self.cursor_topic
                ))
            })
        })
        .transpose()
    }

    /// The cursor's record: at `next`, or deleted (a tombstone) with `None`.
    fn cursor_record(&self, next_offset: Option<u64>) -> Result<OutRecord> {
        let value = next_offset
            .map(|next_offset| {
                let cursor = Cursor {
                    log_id: self.log.clone(),
                    next_offset,
                };
                serde_json::to_vec(&cursor).map_err(|e| Error::Codec(e.to_string()))
            })
            .transpose()?;
        Ok(OutRecord {
            topic: self.cursor_topic.clone(),
            key: Some(CURSOR_KEY.to_vec()),
            value,
            headers: RecordHeaders::default(),
            timestamp_ms: now_ms(),
        })
    }

    /// Publishes the Kafka records of `records` and the cursor `next` in one transaction (or
    /// acknowledged in turn). On an error nothing of it counts: the producer is back at its
    /// last commit. The records are made on the blocking thread too: a new table version's
    /// Avro schemas are registered there.
    async fn publish(&mut self, records: Vec<SinkRecord>, next: Option<u64>) -> Result<()> {
        let mut connected = match self.connected.take() {
            Some(c) => c,
            None => {
                let sink = self.clone_settings();
                blocking(move || sink.connect()).await??
            }
        };
        let cursor = self.cursor_record(next)?;
        let spec = self.topic_spec.clone();
        let (connected, result) = blocking(move || {
            let result = encode(&mut connected.encoder, &records)
                .and_then(|records| send_all(&mut connected, &records, &cursor, &spec));
            if result.is_err() {
                connected.publisher.abort();
            }
            (connected, result)
        })
        .await?;
        match result {
            Ok(()) => {
                self.connected = Some(connected);
                self.cursor = next;
                Ok(())
            }
            Err(e) if e.is_transient() => {
                self.connected = Some(connected);
                Err(e)
            }
            // A producer failed for good but not fenced is made anew on the next call: the
            // new one aborts what this one left open, and the batch goes again from the
            // cursor.
            Err(e) if connected.publisher.failed_unfenced() => {
                Err(Error::transient(format!("{e}; making a new producer")))
            }
            Err(e) => Err(e),
        }
    }

    /// What connecting needs, apart from the connection itself.
    fn clone_settings(&self) -> KafkaSink {
        KafkaSink {
            settings: self.settings.clone(),
            pipeline: self.pipeline.clone(),
            cursor_topic: self.cursor_topic.clone(),
            transactional_id: self.transactional_id.clone(),
            topic_spec: self.topic_spec.clone(),
            connected: None,
            log: self.log.clone(),
            cursor: self.cursor,
        }
    }
}

/// The Kafka records of `records`. Blocks (a new table version's Avro schemas are registered).
fn encode(encoder: &mut RecordEncoder, records: &[SinkRecord]) -> Result<Vec<OutRecord>> {
    let mut out = Vec::with_capacity(records.len() + 1);
    for record in records {
        let event = &record.event;
        let headers = RecordHeaders {
            offset: record.offset,
            position: Some(event.source.position.commit_point()),
            txid: event.source.tx_id.map(|id| id.to_string()),
            ..RecordHeaders::default()
        };
        out.extend(encoder.encode(event, headers, event.ts_ms)?);
    }
    Ok(out)
}

/// Sends the records and then the cursor, and commits. Blocks.
fn send_all(
    connected: &mut Connected,
    records: &[OutRecord],
    cursor: &OutRecord,
    spec: &TopicSpec,
) -> Result<()> {
    let mut topics: Vec<String> = records.iter().map(|r| r.topic.clone()).collect();
    topics.sort_unstable();
    topics.dedup();
    connected.topics.ensure(&topics, spec)?;
    for record in records {
        connected.publisher.send(record, None)?;
    }
    if !connected.publisher.transactional() {
        // The cursor only once the records are acknowledged.
        connected.publisher.flush()?;
    }
    connected.publisher.send(cursor, None)?;
    connected.publisher.commit()
}

#[async_trait]
impl Sink for KafkaSink {
    async fn check(&mut self) -> Result<()> {
        let settings = self.settings.clone();
        let client_id = format!("siphon-{}-check", self.pipeline);
        blocking(move || reach(&settings, &client_id)).await?
    }

    async fn open(&mut self, _tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        let sink = self.clone_settings();
        let (connected, stored) =
            blocking(move || -> Result<_> { Ok((sink.connect()?, sink.stored_cursor()?)) })
                .await??;
        self.connected = Some(connected);
        self.cursor = stored.as_ref().map(|c| c.next_offset);
        Ok(stored.map(|c| StoreCursor {
            next_offset: c.next_offset,
            log: c.log_id,
        }))
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        // Below the stored cursor everything is published already (in the log's one order;
        // a consumer group's stretches skip nothing).
        let published = if batch.ordered {
            self.cursor.unwrap_or(0)
        } else {
            0
        };
        if batch.end <= published {
            return Ok(());
        }
        let records = batch
            .records
            .iter()
            .filter(|r| r.offset >= published)
            .cloned()
            .collect();
        self.publish(records, Some(batch.end)).await
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.publish(Vec::new(), Some(next)).await
    }

    /// Empties the tables' topics (Kafka's DeleteRecords; a compacted topic refuses it and
    /// keeps its records, which the log's records published again then supersede) and
    /// deletes the cursor.
    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        let prefix = self.settings.prefix(&self.pipeline);
        let topics: Vec<String> = tables
            .iter()
            .map(|t| siphon_kafka::table_topic(&prefix, t.name.namespace(), t.name.table()))
            .collect();
        let connection = self.settings.connection();
        let client_id = format!("siphon-{}-sink", self.pipeline);
        let timeout = self.timeout();
        blocking(move || {
            Topics::connect(&connection, &client_id, timeout)?.delete_records(&topics)
        })
        .await??;
        self.publish(Vec::new(), None).await
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    /// Every event goes out: the log never compacts what it has not published.
    fn keeps_history(&self) -> bool {
        true
    }
}
