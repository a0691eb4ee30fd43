//! The pipeline's offsets topic: one compacted key, `checkpoint`, rewritten in every
//! transaction, holding the log's identity, the next siphon offset, and the last record
//! appended (whose event carries the source's position: where the source resumes). It
//! commits with the records it covers, so a crash leaves both or neither.
//!
//! The last record is kept whole when it is small, else as where it lies in its topic.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rdkafka::consumer::Consumer as _;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use siphon_core::log::{LogId, LogRecord, RecordFlags};
use siphon_core::{Error, Result};
use siphon_kafka::headers::RecordHeaders;
use siphon_kafka::{OutRecord, Place, kafka_error};

use siphon_kafka::consume::{PartitionConsumer, latest_of_key, log_record, read_partition};

/// The key of the one checkpoint record.
pub(crate) const KEY: &[u8] = b"checkpoint";

/// A record larger than this is kept in the checkpoint by where it lies.
pub(crate) const INLINE_LIMIT: usize = 64 << 10;

/// The checkpoint as it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// The log's identity.
    pub log_id: LogId,
    /// The siphon offset the next record gets: every record below it is committed.
    pub next_offset: u64,
    /// The last record appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<LastRecord>,
}

/// The last record appended, whole or by its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastRecord {
    pub offset: u64,
    pub timestamp_ms: i64,
    pub flags: u8,
    /// The record's key and value (base64), when small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where it lies, when large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<StoredPlace>,
}

/// [`Place`], as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredPlace {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl LastRecord {
    /// `record`, whole.
    pub fn inline(record: &LogRecord) -> Self {
        LastRecord {
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            flags: record.flags.0,
            key: Some(STANDARD.encode(&record.key)),
            value: Some(STANDARD.encode(&record.value)),
            at: None,
        }
    }

    /// `record`, by the place it landed.
    pub fn at(record: &LogRecord, place: Place) -> Self {
        LastRecord {
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            flags: record.flags.0,
            key: None,
            value: None,
            at: Some(StoredPlace {
                topic: place.topic,
                partition: place.partition,
                offset: place.offset,
            }),
        }
    }

    /// The record, read from its place when it is not inline (from the partition's beginning
    /// with `from_beginning`).
    pub fn record(
        &self,
        consumer: &PartitionConsumer,
        records_topic: &str,
        timeout: Duration,
        from_beginning: bool,
    ) -> Result<LogRecord> {
        let bad = |why: String| Error::Corrupt {
            path: "kafka checkpoint".into(),
            position: self.offset,
            reason: why,
        };
        if let (Some(key), Some(value)) = (&self.key, &self.value) {
            return Ok(LogRecord {
                offset: self.offset,
                timestamp_ms: self.timestamp_ms,
                flags: RecordFlags(self.flags),
                key: STANDARD.decode(key).map_err(|e| bad(e.to_string()))?,
                value: STANDARD.decode(value).map_err(|e| bad(e.to_string()))?,
            });
        }
        let at = self
            .at
            .as_ref()
            .ok_or_else(|| bad("the last record is neither inline nor placed".into()))?;
        let mut found = None;
        read_partition(
            consumer,
            &at.topic,
            at.partition,
            if from_beginning {
                Offset::Beginning
            } else {
                Offset::Offset(at.offset)
            },
            timeout,
            |message| {
                if found.is_none() && message.offset() == at.offset {
                    found = log_record(message, records_topic);
                }
                Ok(())
            },
        )?;
        found.ok_or_else(|| {
            bad(format!(
                "the last record ({}[{}] at {}) is gone from its topic",
                at.topic, at.partition, at.offset
            ))
        })
    }
}

impl Checkpoint {
    /// Its record in `topic`.
    pub fn record(&self, topic: &str, timestamp_ms: i64) -> Result<OutRecord> {
        Ok(OutRecord {
            topic: topic.to_owned(),
            key: Some(KEY.to_vec()),
            value: Some(serde_json::to_vec(self).map_err(|e| Error::Codec(e.to_string()))?),
            headers: RecordHeaders::default(),
            timestamp_ms,
        })
    }

    /// The latest checkpoint in `topic` (`None` for a topic that has none, or none yet);
    /// reads the whole topic `from_beginning`.
    pub fn latest(
        consumer: &PartitionConsumer,
        topic: &str,
        timeout: Duration,
        from_beginning: bool,
    ) -> Result<Option<Checkpoint>> {
        latest_of_key(consumer, topic, KEY, timeout, from_beginning)?
            .map(|payload| {
                serde_json::from_slice(&payload).map_err(|e| Error::Corrupt {
                    path: topic.into(),
                    position: 0,
                    reason: format!("a checkpoint that does not decode: {e}"),
                })
            })
            .transpose()
    }
}

/// Follows the offsets topic from where `consumer` is assigned, handing each checkpoint to
/// `each`; blocks until `stop` says so (checked between polls).
pub(crate) fn follow(
    consumer: &PartitionConsumer,
    topic: &str,
    from: i64,
    stop: &dyn Fn() -> bool,
    mut each: impl FnMut(Checkpoint),
) -> Result<()> {
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(from))
        .map_err(|e| kafka_error("assigning the offsets topic", &e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error("following the offsets topic", &e))?;
    while !stop() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) if message.key() == Some(KEY) => {
                if let Some(checkpoint) = message
                    .payload()
                    .and_then(|p| serde_json::from_slice::<Checkpoint>(p).ok())
                {
                    each(checkpoint);
                }
            }
            Some(Ok(_)) | None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, topic, "following the offsets topic");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    Ok(())
}
