//! The Kafka sink.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use siphon_core::event::Event;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::{TableInfo, now_ms};
use siphon_core::{Error, Result};
use siphon_kafka::config::{KafkaSettings, Seek};
use siphon_kafka::consume::{consumer, latest_of_key, reach};
use siphon_kafka::headers::RecordHeaders;
use siphon_kafka::{
    Delivery, OutRecord, Publisher, RecordEncoder, TopicSpec, Topics, distinct_topics, topic_name,
};
use siphon_sink_message::{Facts, MessageEncoder, ValueForm};

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

/// How to reach the cluster and what to connect as: what the blocking calls take with them.
#[derive(Debug, Clone)]
struct Endpoint {
    settings: KafkaSettings,
    pipeline: String,
    cursor_topic: String,
    transactional_id: String,
    /// Values are row states.
    row_states: bool,
}

/// An event ready to become Kafka records: shaped (the row state, where values are row
/// states) or routed (an outbox row), its topic and headers known.
#[derive(Debug)]
struct Outgoing {
    body: Body,
    topic: String,
    headers: RecordHeaders,
}

/// What an outgoing event's records are made of.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a batch's bodies are made once and moved; boxing each event would allocate per event"
)]
enum Body {
    /// The event, its records made by the [`RecordEncoder`].
    Event(Event),
    /// An outbox row's one record, made already.
    Routed {
        key: Option<Vec<u8>>,
        value: Vec<u8>,
        timestamp_ms: i64,
    },
}

/// Publishes a pipeline's events to Kafka; see the crate documentation.
pub struct KafkaSink {
    endpoint: Endpoint,
    topic_spec: TopicSpec,
    /// What every message sink does to an event: its destination, the row state.
    messages: MessageEncoder,
    connected: Option<Connected>,
    /// The log its cursor is a position in (given at open).
    log: Option<LogId>,
    /// The stored cursor as of the last open or batch.
    cursor: Option<u64>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("pipeline", &self.endpoint.pipeline)
            .field("cursor_topic", &self.endpoint.cursor_topic)
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

impl Endpoint {
    fn timeout(&self) -> Duration {
        self.settings.timeout.0
    }

    fn client_id(&self) -> String {
        format!("siphon-{}-sink", self.pipeline)
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
        let publisher = Publisher::connect(
            &connection,
            &self.client_id(),
            delivery,
            &[(
                "compression.type",
                self.settings.compression.name().to_owned(),
            )],
            self.timeout(),
        )?;
        let topics = Topics::connect(&connection, &self.client_id(), self.timeout())?;
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
        let encoder = if self.row_states {
            encoder.with_row_states()
        } else {
            encoder
        };
        Ok(Connected {
            publisher,
            topics,
            encoder,
        })
    }

    /// The cursor the cursor topic holds. Blocks.
    fn stored_cursor(&self) -> Result<Option<Cursor>> {
        let reader = consumer(&self.settings.connection(), &self.client_id(), true)?;
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
}

impl KafkaSink {
    /// Sink `sink` of pipeline `pipeline` (they name its cursor topic and producer).
    pub fn new(config: &KafkaSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let settings = config.kafka();
        let messages = config.message();
        Ok(KafkaSink {
            endpoint: Endpoint {
                cursor_topic: config
                    .cursor_topic
                    .clone()
                    .unwrap_or_else(|| format!("siphon.{pipeline}.{sink}.cursor")),
                transactional_id: settings
                    .transactional_id
                    .clone()
                    .unwrap_or_else(|| format!("siphon.{pipeline}.{sink}")),
                row_states: messages.value == ValueForm::Row,
                pipeline: pipeline.to_owned(),
                settings: settings.clone(),
            },
            topic_spec: TopicSpec {
                partitions: settings.topics.partitions,
                replication_factor: settings.topics.replication_factor,
                config: settings.topics.topic_config(),
            },
            messages: MessageEncoder::new(&messages, pipeline).map_err(Error::Config)?,
            connected: None,
            log: None,
            cursor: None,
        })
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
            topic: self.endpoint.cursor_topic.clone(),
            key: Some(CURSOR_KEY.to_vec()),
            value,
            headers: RecordHeaders::default(),
            timestamp_ms: now_ms(),
        })
    }

    /// Every topic `tables`' events can go to, each once.
    fn topics_of(&self, tables: &[TableInfo]) -> Vec<String> {
        distinct_topics(
            tables
                .iter()
                .flat_map(|t| self.messages.destinations_of(t))
                .map(|destination| topic_name(&[&destination])),
        )
    }

    /// What `records` become before their Kafka records are made: shaped (a delete the row
    /// state drops is gone) or routed (only an outbox table's inserts are left), with their
    /// topics and headers. An error is an outbox row's without a destination.
    fn outgoing<'a>(
        &self,
        log: &LogId,
        records: impl Iterator<Item = &'a SinkRecord>,
    ) -> Result<Vec<Outgoing>> {
        let mut out = Vec::new();
        for record in records {
            let event = &record.event;
            let Facts { id, position, txid } = Facts::of(record, log);
            let headers = RecordHeaders {
                offset: record.offset,
                position: Some(position),
                txid,
                id: Some(id),
                ..RecordHeaders::default()
            };
            if let Some(router) = self.messages.outbox() {
                let Some(routed) = router.route(event).map_err(Error::permanent)? else {
                    continue;
                };
                out.push(Outgoing {
                    topic: topic_name(&[&routed.destination]),
                    headers: RecordHeaders {
                        row: routed.headers,
                        ..headers
                    },
                    body: Body::Routed {
                        key: routed.key,
                        value: routed.value,
                        timestamp_ms: event.ts_ms,
                    },
                });
                continue;
            }
            let Some(shaped) = self.messages.shape(event) else {
                continue;
            };
            out.push(Outgoing {
                topic: topic_name(&[&self.messages.destination(event)]),
                headers,
                body: Body::Event(shaped.into_owned()),
            });
        }
        Ok(out)
    }

    /// Publishes the Kafka records of `outgoing` and the cursor `next` in one transaction (or
    /// acknowledged in turn). On an error nothing of it counts: the producer is back at its
    /// last commit (one that failed for good, not fenced, is made anew by the next try). The
    /// records are made on the blocking thread too: a new table version's Avro schemas are
    /// registered there.
    async fn publish(&mut self, outgoing: Vec<Outgoing>, next: Option<u64>) -> Result<()> {
        let mut connected = match self.connected.take() {
            Some(c) => c,
            None => {
                let endpoint = self.endpoint.clone();
                blocking(move || endpoint.connect()).await??
            }
        };
        let cursor = self.cursor_record(next)?;
        let spec = self.topic_spec.clone();
        let (connected, result) = blocking(move || {
            let result = encode(&mut connected.encoder, outgoing)
                .and_then(|records| send_all(&mut connected, &records, &cursor, &spec));
            if result.is_err() {
                connected.publisher.abort();
            }
            (connected, result)
        })
        .await?;
        match result {
            Ok(()) => {
                self.cursor = next;
                self.connected = Some(connected);
                Ok(())
            }
            Err(e) if e.is_transient() => {
                self.connected = Some(connected);
                Err(e)
            }
            // A producer that failed for good while committing leaves the batch committed
            // or not: the cursor topic says which, and the sink reads it when it opens again.
            Err(e) if connected.publisher.failed_unfenced().is_some() => {
                Err(Error::transient(format!("{e}; the sink opens again")))
            }
            Err(e) => Err(e),
        }
    }
}

/// The Kafka records of `outgoing`. Blocks (a new table version's Avro schemas are
/// registered).
fn encode(encoder: &mut RecordEncoder, outgoing: Vec<Outgoing>) -> Result<Vec<OutRecord>> {
    let mut out = Vec::with_capacity(outgoing.len() + 1);
    for Outgoing {
        body,
        topic,
        headers,
    } in outgoing
    {
        match body {
            Body::Event(event) => {
                out.extend(encoder.encode_to(&event, topic, headers, event.ts_ms)?);
            }
            Body::Routed {
                key,
                value,
                timestamp_ms,
            } => out.push(OutRecord {
                topic,
                key,
                value: Some(value),
                headers,
                timestamp_ms,
            }),
        }
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
    connected.topics.ensure(
        &distinct_topics(records.iter().map(|r| r.topic.clone())),
        spec,
    )?;
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
        let settings = self.endpoint.settings.clone();
        let client_id = format!("siphon-{}-check", self.endpoint.pipeline);
        blocking(move || reach(&settings, &client_id)).await?
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        // Kafka refuses these names; an event sent there would go nowhere.
        if let Some(bad) = self
            .topics_of(tables)
            .into_iter()
            .find(|t| t.is_empty() || t == "." || t == ".." || t.len() > 249)
        {
            return Err(Error::Config(format!(
                "destination: {bad:?} is no Kafka topic name (1 to 249 characters, not \".\" or \"..\")"
            )));
        }
        self.log = Some(log.clone());
        let endpoint = self.endpoint.clone();
        let (connected, stored) =
            blocking(move || -> Result<_> { Ok((endpoint.connect()?, endpoint.stored_cursor()?)) })
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
        let log = self
            .log
            .as_ref()
            .ok_or_else(|| Error::permanent("kafka: a batch before the sink was opened"))?;
        let outgoing =
            self.outgoing(log, batch.records.iter().filter(|r| r.offset >= published))?;
        self.publish(outgoing, Some(batch.end)).await
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.publish(Vec::new(), Some(next)).await
    }

    /// Empties the tables' topics (Kafka's DeleteRecords; a compacted topic refuses it and
    /// keeps its records, which the log's records published again then supersede) and
    /// deletes the cursor.
    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        let topics = self.topics_of(tables);
        let endpoint = self.endpoint.clone();
        blocking(move || {
            Topics::connect(
                &endpoint.settings.connection(),
                &endpoint.client_id(),
                endpoint.timeout(),
            )?
            .delete_records(&topics)
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
