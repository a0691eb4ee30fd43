//! The one writer of a Kafka log: gives each record its siphon offset, turns it into its
//! Kafka records, and commits them with the checkpoint, in one Kafka transaction (or, without
//! transactions, acknowledged before the checkpoint is written).
//!
//! Offsets are given in append order by this one process (a second one fences it), so they
//! are dense and increase per key whatever partition a key's records land in; an aborted
//! transaction's offsets are given again to the records that replace it.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use siphon_core::event::Event;
use siphon_core::log::{LogId, LogRecord, NewRecord};
use siphon_core::position::PositionDecoder;
use siphon_core::source::now_ms;
use siphon_core::{Error, Result};
use siphon_kafka::headers::RecordHeaders;
use siphon_kafka::{OutRecord, Publisher, RecordEncoder, TopicSpec, Topics, distinct_topics};

use crate::checkpoint::{Checkpoint, INLINE_LIMIT, LastRecord};
use crate::config::Names;
use crate::schemas::KafkaSchemas;

/// What the writer needs to know of its log.
pub(crate) struct Writer {
    pub publisher: Publisher,
    pub encoder: RecordEncoder,
    pub topics: Arc<Topics>,
    pub topic_spec: TopicSpec,
    pub names: Names,
    pub schemas: Arc<KafkaSchemas>,
    pub positions: Arc<dyn PositionDecoder>,
    pub log_id: LogId,
    /// The offset the next record gets.
    pub next_offset: u64,
    /// Every record below this is committed.
    pub committed: u64,
    /// The last record sent (maybe not committed yet), and the last committed.
    pub last: Option<LogRecord>,
    pub last_committed: Option<LogRecord>,
    /// When the open transaction began.
    pub open_since: Option<Instant>,
    /// Schema versions sent in the open transaction.
    pub schemas_sent: usize,
    /// A failure left this writer unable to go on (fenced): every call fails with it.
    pub failed: Option<String>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("next_offset", &self.next_offset)
            .field("committed", &self.committed)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Sends `records`, giving them the next offsets; with `commit`, commits them (and what
    /// was sent before) with the checkpoint. Blocks. On an error nothing since the last commit
    /// is written: the writer is back at its last commit.
    pub fn append(&mut self, records: Vec<NewRecord>, commit: bool) -> Result<Range<u64>> {
        if let Some(why) = &self.failed {
            return Err(Error::permanent(why.clone()));
        }
        let first = self.next_offset;
        let started = Instant::now();
        let count = records.len();
        let result = self.send(records).and_then(|()| {
            let sent = started.elapsed();
            if commit {
                self.commit()?;
            }
            tracing::debug!(
                records = count,
                commit,
                sent_us = sent.as_micros() as u64,
                total_us = started.elapsed().as_micros() as u64,
                "kafka append"
            );
            Ok(())
        });
        match result {
            Ok(()) => Ok(first..self.next_offset),
            Err(e) => {
                self.roll_back();
                if !e.is_transient() {
                    self.failed = Some(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// Commits the open transaction if it has been open longer than `limit`.
    pub fn commit_if_older(&mut self, limit: std::time::Duration) -> Result<()> {
        if self.failed.is_none()
            && self.open_since.is_some_and(|t| t.elapsed() >= limit)
            && let Err(e) = self.commit()
        {
            self.roll_back();
            return Err(e);
        }
        Ok(())
    }

    fn send(&mut self, records: Vec<NewRecord>) -> Result<()> {
        let timestamp_ms = now_ms();
        let mut out = Vec::with_capacity(records.len() + 1);
        let mut last = None;
        // The Kafka record of the last log record, whose place the checkpoint keeps when it
        // is too large to hold.
        let mut last_at = None;
        for record in records {
            let offset = self.next_offset;
            self.next_offset += 1;
            let log_record = LogRecord {
                offset,
                timestamp_ms,
                flags: record.flags,
                key: record.key,
                value: record.value,
            };
            last_at =
                (log_record.key.len() + log_record.value.len() > INLINE_LIMIT).then_some(out.len());
            self.encode(&log_record, &mut out)?;
            last = Some(log_record);
        }
        let topics = distinct_topics(out.iter().map(|r| r.topic.clone()));
        self.topics.ensure(&topics, &self.topic_spec)?;
        // Readers learn of a topic from the catalog, in this transaction at the latest.
        self.schemas.note_topics(&topics);
        // The schema versions the records name go first (without transactions they must be
        // acknowledged before any record naming them is written).
        let pending = self.schemas.pending(timestamp_ms)?;
        let new_schemas = pending.len().saturating_sub(self.schemas_sent);
        for schema in &pending[pending.len() - new_schemas..] {
            self.publisher.send(schema, None)?;
        }
        if new_schemas > 0 && !self.publisher.transactional() {
            self.publisher.flush()?;
        }
        self.schemas_sent = pending.len();
        if self.open_since.is_none() && !out.is_empty() {
            self.open_since = Some(Instant::now());
        }
        for (i, record) in out.iter().enumerate() {
            let remember = (Some(i) == last_at).then_some(record.headers.offset);
            self.publisher.send(record, remember)?;
        }
        if let Some(last) = last {
            self.last = Some(last);
        }
        Ok(())
    }

    /// The Kafka records of one log record: an event's Debezium records, or a record that is
    /// not an event as itself in the records topic.
    fn encode(&mut self, record: &LogRecord, out: &mut Vec<OutRecord>) -> Result<()> {
        if Event::is_encoded(&record.value) {
            let event = Event::decode(&record.value, &*self.schemas, &*self.positions)?;
            let headers = RecordHeaders {
                offset: record.offset,
                flags: record.flags,
                event: Some(record.value.clone()),
                key: Some(record.key.clone()),
                position: Some(event.source.position.commit_point()),
                txid: event.source.tx_id.map(|id| id.to_string()),
                ..RecordHeaders::default()
            };
            out.extend(self.encoder.encode(&event, headers, record.timestamp_ms)?);
        } else {
            out.push(OutRecord {
                topic: self.names.records.clone(),
                key: (!record.key.is_empty()).then(|| record.key.clone()),
                value: Some(record.value.clone()),
                headers: RecordHeaders {
                    offset: record.offset,
                    flags: record.flags,
                    ..RecordHeaders::default()
                },
                timestamp_ms: record.timestamp_ms,
            });
        }
        Ok(())
    }

    /// Makes the schema versions registered since durable: with the open transaction, if
    /// one is (they go first in it), else in a transaction of their own now. Blocks.
    pub fn commit_schemas(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::permanent(why.clone()));
        }
        if self.open_since.is_some() {
            return self.send(Vec::new());
        }
        self.append(Vec::new(), true).map(drop)
    }

    /// Writes the checkpoint as it stands (a new log's identity), committed. Blocks.
    pub fn write_checkpoint(&mut self) -> Result<()> {
        self.checkpoint().inspect_err(|_| self.roll_back())
    }

    /// Commits what was sent, with the checkpoint.
    fn commit(&mut self) -> Result<()> {
        if self.open_since.is_none() && self.schemas_sent == 0 {
            return Ok(());
        }
        self.checkpoint()
    }

    /// Sends the checkpoint and commits.
    fn checkpoint(&mut self) -> Result<()> {
        let last = match &self.last {
            Some(record) if record.value.len() + record.key.len() <= INLINE_LIMIT => {
                Some(LastRecord::inline(record))
            }
            Some(record) => {
                // Large: kept by where it landed, which its acknowledgement tells.
                self.publisher.flush()?;
                let place = self.publisher.remembered(record.offset).ok_or_else(|| {
                    Error::transient(
                        "kafka: the last record's place is not known after its acknowledgement",
                    )
                })?;
                Some(LastRecord::at(record, place))
            }
            None => None,
        };
        let checkpoint = Checkpoint {
            log_id: self.log_id.clone(),
            next_offset: self.next_offset,
            last,
        };
        self.publisher
            .send(&checkpoint.record(&self.names.offsets, now_ms())?, None)?;
        self.publisher.commit()?;
        self.committed = self.next_offset;
        self.last_committed = self.last.clone();
        self.schemas.committed(self.schemas_sent);
        self.schemas_sent = 0;
        self.open_since = None;
        Ok(())
    }

    /// Back to the last commit: the open transaction is aborted, its offsets given again.
    fn roll_back(&mut self) {
        self.publisher.abort();
        self.next_offset = self.committed;
        self.last = self.last_committed.clone();
        self.schemas_sent = 0;
        self.open_since = None;
    }
}
