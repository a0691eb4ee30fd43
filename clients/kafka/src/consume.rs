//! Consumers that read chosen partitions (no consumer group) of the topics siphon writes,
//! and what they read records as.

use std::time::{Duration, Instant};

use crate::config::{Connection, KafkaSettings, RecordFormat};
use crate::context::Quiet;
use crate::error::kafka_error;
use crate::headers::SiphonHeaders;
use crate::registry::Registry;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use siphon_core::log::LogRecord;
use siphon_core::{Error, Result};

/// A topic and partition.
pub type Tp = (std::sync::Arc<str>, i32);

/// A message's topic and partition, its topic's name shared with the earlier messages of that
/// topic in `names` (one allocation a topic, not one a record).
pub fn message_tp(
    names: &mut std::collections::HashMap<String, std::sync::Arc<str>>,
    message: &BorrowedMessage<'_>,
) -> Tp {
    let topic = names
        .entry(message.topic().to_owned())
        .or_insert_with(|| message.topic().into())
        .clone();
    (topic, message.partition())
}

/// A consumer of chosen partitions.
pub type PartitionConsumer = BaseConsumer<Quiet>;

/// A consumer that sees only committed records (`read_committed`), of partitions it is
/// assigned; `eof` makes it report the end of each (for reading a partition to its end).
pub fn consumer(connection: &Connection, client_id: &str, eof: bool) -> Result<PartitionConsumer> {
    let mut config = connection.client_config(client_id)?;
    config
        // librdkafka's consumer needs a group even to read assigned partitions; this one
        // never joins or commits.
        .set("group.id", client_id)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A position the topic no longer holds is an error, never a silent jump.
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", if eof { "true" } else { "false" })
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "16384")
        // Brokers that ignore fetch.max.bytes (noida-db answers a fetch with everything from
        // the offset on) would otherwise fail every fetch of a long backlog.
        .set("receive.message.max.bytes", "2147483647");
    BaseConsumer::from_config_and_context(&config, Quiet)
        .map_err(|e| kafka_error("creating a consumer", &e))
}

/// Reads `topic`'s partition `partition` from `start` to its end as it is now (what a
/// `read_committed` reader sees), handing each message to `each`. A topic that does not
/// exist reads as empty. Blocks: the consumer must have been made with `eof`.
pub fn read_partition(
    consumer: &PartitionConsumer,
    topic: &str,
    partition: i32,
    start: Offset,
    timeout: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>) -> Result<()>,
) -> Result<()> {
    let (low, high) = match consumer.fetch_watermarks(topic, partition, timeout) {
        Ok(marks) => marks,
        Err(e) if is_unknown_topic(&e) => return Ok(()),
        Err(e) => return Err(kafka_error(&format!("reading the extent of {topic}"), &e)),
    };
    let start_at = match start {
        Offset::Offset(o) => o.max(low),
        Offset::OffsetTail(n) => (high - n).max(low),
        _ => low,
    };
    if start_at >= high {
        return Ok(());
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(start_at))
        .map_err(|e| kafka_error("assigning a partition", &e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error(&format!("reading {topic}"), &e))?;
    let mut last_progress = Instant::now();
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                last_progress = Instant::now();
                let offset = message.offset();
                each(&message)?;
                if offset + 1 >= high {
                    break;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(kafka_error(&format!("reading {topic}"), &e)),
            None if last_progress.elapsed() > timeout => {
                return Err(Error::transient(format!(
                    "kafka: reading {topic}[{partition}]: no answer within {timeout:?}"
                )));
            }
            None => {}
        }
    }
    let _ = consumer.unassign();
    Ok(())
}

/// Reaches the brokers (their metadata) and, for Avro, the schema registry (its subjects),
/// changing nothing: `siphon check --connect`. Blocks.
pub fn reach(settings: &KafkaSettings, client_id: &str) -> Result<()> {
    let timeout = settings.timeout.0;
    consumer(&settings.connection(), client_id, false)?
        .fetch_metadata(None, timeout)
        .map_err(|e| kafka_error("reaching the brokers", &e))?;
    match (&settings.format, &settings.registry) {
        (RecordFormat::Avro, Some(registry)) => Registry::new(registry, timeout)?.check(),
        _ => Ok(()),
    }
}

/// Whether a Kafka error says the topic or partition does not exist.
pub fn is_unknown_topic(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownPartition
        )
    )
}

/// A record of the log as a reader gets it: an event record (its `siphon.event` header), or
/// a record that is not an event (in `records_topic`: the Kafka key and value). `None` for a
/// tombstone or a record siphon did not write.
pub fn log_record(message: &BorrowedMessage<'_>, records_topic: &str) -> Option<LogRecord> {
    let siphon = SiphonHeaders::read(message.headers()?);
    let offset = siphon.offset?;
    let (key, value) = match siphon.event {
        Some(event) => (siphon.key.unwrap_or_default().to_vec(), event.to_vec()),
        // librdkafka keeps an empty value as none.
        None if message.topic() == records_topic => (
            message.key().unwrap_or_default().to_vec(),
            message.payload().unwrap_or_default().to_vec(),
        ),
        None => return None,
    };
    Some(LogRecord {
        offset,
        timestamp_ms: message.timestamp().to_millis().unwrap_or(0),
        flags: siphon.flags,
        key,
        value,
    })
}

/// The first record of a partition at or after Kafka offset `at`, below `end`: its Kafka
/// offset and siphon offset. Blocks. `consumer` must report partition ends (`eof`): a
/// consumer's position is no answer, since it may still be that of an earlier assignment.
pub fn first_at_or_after(
    consumer: &PartitionConsumer,
    tp: &Tp,
    at: i64,
    end: i64,
    timeout: Duration,
) -> Result<Option<(i64, u64)>> {
    if at >= end {
        return Ok(None);
    }
    // What an earlier assignment fetched may still wait in the queue, a partition end among
    // it, which would read as this one's: stop it and drain the queue first.
    let _ = consumer.unassign();
    while consumer.poll(Duration::ZERO).is_some() {}
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&tp.0, tp.1, Offset::Offset(at))
        .map_err(|e| kafka_error("assigning a partition", &e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error("locating a position", &e))?;
    let started = Instant::now();
    loop {
        match consumer.poll(Duration::from_millis(50)) {
            // Only what this assignment reads counts (librdkafka drops what an earlier one
            // fetched; this is belt and braces).
            Some(Ok(message))
                if message.partition() != tp.1
                    || message.topic() != &*tp.0
                    || message.offset() < at => {}
            Some(Ok(message)) => {
                if message.offset() >= end {
                    return Ok(None);
                }
                // A tombstone carries its delete's offset too.
                if let Some(offset) = message
                    .headers()
                    .and_then(|h| SiphonHeaders::read(h).offset)
                {
                    return Ok(Some((message.offset(), offset)));
                }
            }
            // The end of the partition (only this one is assigned).
            Some(Err(KafkaError::PartitionEOF(p))) if p == tp.1 => return Ok(None),
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => return Err(kafka_error("locating a position", &e)),
            None if started.elapsed() > timeout => {
                return Err(Error::transient(format!(
                    "kafka: reading {}[{}] at {at}: no answer within {timeout:?}",
                    tp.0, tp.1
                )));
            }
            None => {}
        }
    }
}

/// The highest siphon offset in a partition (of its last record), searched back from its end.
/// Blocks.
pub fn last_offset(
    consumer: &PartitionConsumer,
    tp: &Tp,
    timeout: Duration,
) -> Result<Option<u64>> {
    let (low, high) = match consumer.fetch_watermarks(&tp.0, tp.1, timeout) {
        Ok(marks) => marks,
        Err(e) if is_unknown_topic(&e) => return Ok(None),
        Err(e) => return Err(kafka_error(&format!("reading the extent of {}", tp.0), &e)),
    };
    let mut back = 1;
    while high - back >= low {
        let probe = high - back;
        let mut found = None;
        let mut at = probe;
        // The records from the probe to the end: the last one's offset is the highest.
        while let Some((offset, seq)) = first_at_or_after(consumer, tp, at, high, timeout)? {
            found = Some(seq);
            at = offset + 1;
        }
        if found.is_some() {
            return Ok(found);
        }
        back *= 2;
    }
    Ok(None)
}

/// The value of the latest record of `key` in partition 0 of `topic` (`None` where it has
/// none, or the topic is missing): looked for back from the end, further each time, since
/// the end holds the latest (the whole partition `from_beginning`, for brokers whose
/// `read_committed` fetches go wrong past an aborted transaction). Blocks.
pub fn latest_of_key(
    consumer: &PartitionConsumer,
    topic: &str,
    key: &[u8],
    timeout: Duration,
    from_beginning: bool,
) -> Result<Option<Vec<u8>>> {
    let mut back = if from_beginning { i64::MAX / 2 } else { 16 };
    loop {
        let (low, high) = match consumer.fetch_watermarks(topic, 0, timeout) {
            Ok(marks) => marks,
            Err(e) if is_unknown_topic(&e) => return Ok(None),
            Err(e) => return Err(kafka_error(&format!("reading the extent of {topic}"), &e)),
        };
        let mut latest = None;
        read_partition(
            consumer,
            topic,
            0,
            Offset::Offset((high.saturating_sub(back)).max(low)),
            timeout,
            |message| {
                if message.key() == Some(key) {
                    // A tombstone deleted what came before.
                    latest = Some(message.payload().map(<[u8]>::to_vec));
                }
                Ok(())
            },
        )?;
        if latest.is_some() || high.saturating_sub(back) <= low {
            return Ok(latest.flatten());
        }
        back = back.saturating_mul(8);
    }
}
