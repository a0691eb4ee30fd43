//! The Kafka change log (`kind = "kafka"`): for pipelines that outgrow one machine. The log
//! is a set of Kafka topics that every Kafka consumer reads as Debezium's:
//!
//! ```text
//! <prefix>.<schema>.<table>      one topic per table: key = the primary key, value = the
//!                                Debezium event (JSON or Avro), a tombstone after each delete,
//!                                siphon's headers (siphon_kafka::headers) on each record
//! siphon.<pipeline>.offsets      compacted: the log's identity, the next siphon offset and the
//!                                last record (with the source's position), in every transaction
//! siphon.<pipeline>.schemas      compacted: the table schema versions the records refer to
//! siphon.<pipeline>.records      records that are not events (none in a pipeline)
//! ```
//!
//! **Offsets.** The one writer (the daemon running the source; a second one fences it through
//! the producer's `transactional.id`) gives every record a siphon offset, dense and in append
//! order across all topics, in its `siphon.offset` header. It is the version every store
//! guards with: a key's records get increasing offsets whatever partition they land in, also
//! after a topic gains partitions. The next offset commits with the records in each
//! transaction (the checkpoint), so a restarted writer goes on from there.
//!
//! **Exactly once.** An append is one Kafka transaction holding its records, the schema
//! versions they name, and the checkpoint; readers use `read_committed`. A crash leaves the
//! whole append and its position, or neither; the source resumes after the checkpoint's last
//! record. Without transactions (`transactions = false`) records are acknowledged before the
//! checkpoint is written, and a restarted writer numbers on past the highest offset any
//! partition holds: a crash may write records again, under new offsets (at least once).
//!
//! **Reading.** A reader merges every partition by siphon offset ([`reader`]): one total
//! order, whole transactions, as on the file log.

mod checkpoint;
mod config;
mod group;
mod reader;
mod schemas;
mod writer;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use siphon_core::kind::{Kind, LogContext, LogKind};
use siphon_core::log::{
    ChangeLog, Consumer, GroupReader, LogId, LogPromises, LogReader, LogRecord, LogStats,
    MaintenanceReport, NewRecord,
};
use siphon_core::schema::{SchemaId, SchemaLookup, SchemaStore, TableSchema};
use siphon_core::{Error, Result};
use siphon_kafka::config::Connection;
use siphon_kafka::{Delivery, Publisher, RecordEncoder, TopicSpec, Topics};
use tokio::sync::watch;

pub use config::{KafkaLogConfig, Names};
pub use schemas::KafkaSchemas;
pub use siphon_kafka::config::Seek;

use self::checkpoint::{Checkpoint, LastRecord};
use self::reader::{OrderedReader, Topology};
use self::writer::Writer;
use siphon_kafka::consume::{self, consumer};

/// A Kafka change log, opened for its writer or read-only. Cheap to clone.
#[derive(Clone, Debug)]
pub struct KafkaLog {
    inner: Arc<Inner>,
}

struct Inner {
    config: KafkaLogConfig,
    /// The directory siphon keeps for the log (this daemon's member id).
    dir: std::path::PathBuf,
    connection: Connection,
    names: Names,
    pipeline: String,
    id: LogId,
    schemas: LogSchemas,
    /// `None` when opened read-only.
    writer: Option<Arc<Mutex<Writer>>>,
    /// The offset after the last committed record.
    durable: watch::Sender<u64>,
    /// Read-only: the last record, as the latest checkpoint names it.
    last: Mutex<Option<LastRecord>>,
    /// Stops the threads that follow the log.
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaLog")
            .field("pipeline", &self.pipeline)
            .field("id", &self.id)
            .field("writer", &self.writer.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The log's schemas: a version registered by the writer is committed before `register`
/// returns (with the transaction that is open, if one is: the records that name it are in it
/// or after it).
#[derive(Debug)]
struct LogSchemas {
    store: Arc<KafkaSchemas>,
    writer: Weak<Mutex<Writer>>,
}

impl SchemaStore for LogSchemas {
    fn register(&self, schema: &TableSchema) -> Result<Arc<TableSchema>> {
        let registered = self.store.register(schema)?;
        if let Some(writer) = self.writer.upgrade() {
            writer.lock().unwrap().commit_schemas()?;
        }
        Ok(registered)
    }

    fn all(&self) -> Vec<Arc<TableSchema>> {
        self.store.all()
    }
}

impl SchemaLookup for LogSchemas {
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        self.store.schema(id)
    }
}

/// Runs `f` on the blocking pool (librdkafka's calls block).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::permanent(format!("a Kafka log task failed: {e}")))?
}

/// Makes the log's own topics (its offsets' and schemas', compacted) where missing; the
/// topics client and the settings of the records' topics.
fn log_topics(
    config: &KafkaLogConfig,
    connection: &Connection,
    pipeline: &str,
    names: &Names,
) -> Result<(Arc<Topics>, TopicSpec)> {
    let timeout = config.timeout.0;
    let topics = Arc::new(Topics::connect(
        connection,
        &format!("siphon-{pipeline}-admin"),
        timeout,
    )?);
    let compacted = TopicSpec {
        partitions: 1,
        replication_factor: config.topics.replication_factor,
        config: [("cleanup.policy".to_owned(), "compact".to_owned())].into(),
    };
    topics.ensure(&[names.offsets.clone(), names.schemas.clone()], &compacted)?;
    let topic_spec = TopicSpec {
        partitions: config.topics.partitions,
        replication_factor: config.topics.replication_factor,
        config: config.topics.topic_config(),
    };
    Ok((topics, topic_spec))
}

/// Where the log stands for its writer: its identity (new where no checkpoint is), the next
/// offset, and its last record. Without transactions, records written after the checkpoint
/// (acknowledged or not) keep their offsets: numbering goes on past the highest.
fn where_it_stands(
    config: &KafkaLogConfig,
    connection: &Connection,
    pipeline: &str,
    schemas: &Arc<KafkaSchemas>,
    checkpoint: Option<&Checkpoint>,
) -> Result<(LogId, u64, Option<LogRecord>)> {
    let names = config.names(pipeline);
    let timeout = config.timeout.0;
    let from_beginning = config.seek == Seek::Beginning;
    let helper = consumer(connection, &format!("siphon-{pipeline}-open"), true)?;
    let (id, mut next_offset, last) = match checkpoint {
        Some(c) => (
            c.log_id.clone(),
            c.next_offset,
            c.last
                .as_ref()
                .map(|l| l.record(&helper, &names.records, timeout, from_beginning))
                .transpose()?,
        ),
        None => (LogId::random(), 0, None),
    };
    if !config.transactions {
        // Records written after the checkpoint (acknowledged or not) keep their offsets:
        // number on past the highest.
        let all = reader::log_partitions(&helper, &topology(schemas, &names, config))?;
        for tp in &all {
            if let Some(highest) = consume::last_offset(&helper, tp, timeout)? {
                next_offset = next_offset.max(highest + 1);
            }
        }
    }
    Ok((id, next_offset, last))
}

impl KafkaLog {
    /// Opens pipeline `ctx.pipeline`'s log for its one writer: fences every earlier writer,
    /// then reads where the log stands (its identity, next offset, schemas), creating the
    /// log's own topics when missing. Blocks.
    pub fn open(config: &KafkaLogConfig, ctx: &LogContext) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let pipeline = &ctx.pipeline;
        let names = config.names(pipeline);
        let connection = config.kafka().connection();
        let timeout = config.timeout.0;
        let delivery = if config.transactions {
            Delivery::Transactional {
                id: names.transactional_id.clone(),
            }
        } else {
            Delivery::Idempotent
        };
        let publisher = Publisher::connect(
            &connection,
            &format!("siphon-{pipeline}-writer"),
            delivery,
            // librdkafka's linger (5 ms) gathers the records of an append into few requests:
            // with 0 each record went alone, at 60% of the speed (BENCHMARKS.md); a commit
            // sends what waits at once.
            &[("compression.type", config.compression.name().to_owned())],
            timeout,
        )?;
        // Fenced first, then read: what an earlier writer left is settled by now.
        let helper = consumer(&connection, &format!("siphon-{pipeline}-open"), true)?;
        let from_beginning = config.seek == Seek::Beginning;
        let checkpoint = Checkpoint::latest(&helper, &names.offsets, timeout, from_beginning)?;
        let schemas = Arc::new(KafkaSchemas::load(
            &names.schemas,
            helper,
            false,
            timeout,
            from_beginning,
        )?);
        let (topics, topic_spec) = log_topics(config, &connection, pipeline, &names)?;
        let encoder = RecordEncoder::new(
            names.prefix.clone(),
            config.kafka().encoding(),
            config.topics.cleanup_policy.compacts(),
            timeout,
        )?;
        let (id, next_offset, last) =
            where_it_stands(config, &connection, pipeline, &schemas, checkpoint.as_ref())?;
        let mut writer = Writer {
            publisher,
            encoder,
            topics,
            topic_spec,
            names: names.clone(),
            schemas: schemas.clone(),
            positions: ctx.positions.clone(),
            log_id: id.clone(),
            next_offset,
            committed: next_offset,
            last: last.clone(),
            last_committed: last,
            open_since: None,
            schemas_sent: 0,
            failed: None,
        };
        if checkpoint.is_none() {
            // The identity is durable before any store can keep it with a cursor.
            writer.write_checkpoint()?;
            tracing::info!(pipeline, log = %id, "made a new Kafka change log");
        }
        let writer = Arc::new(Mutex::new(writer));
        let log = KafkaLog {
            inner: Arc::new(Inner {
                config: config.clone(),
                dir: ctx.dir.clone(),
                connection,
                names,
                pipeline: pipeline.clone(),
                id,
                schemas: LogSchemas {
                    store: schemas,
                    writer: Arc::downgrade(&writer),
                },
                writer: Some(writer),
                durable: watch::Sender::new(next_offset),
                last: Mutex::default(),
                stop: Arc::default(),
            }),
        };
        log.spawn_committer();
        Ok(log)
    }

    /// Opens pipeline `ctx.pipeline`'s log read-only (sinks only, `status`, `log tail`): it
    /// follows the writer's commits. `None` where no writer made it yet. Blocks.
    pub fn open_read_only(config: &KafkaLogConfig, ctx: &LogContext) -> Result<Option<Self>> {
        config.validate().map_err(Error::Config)?;
        let pipeline = &ctx.pipeline;
        let names = config.names(pipeline);
        let connection = config.kafka().connection();
        let timeout = config.timeout.0;
        let helper = consumer(&connection, &format!("siphon-{pipeline}-open"), true)?;
        let from_beginning = config.seek == Seek::Beginning;
        let Some(checkpoint) =
            Checkpoint::latest(&helper, &names.offsets, timeout, from_beginning)?
        else {
            return Ok(None);
        };
        let schemas_consumer = consumer(&connection, &format!("siphon-{pipeline}-schemas"), true)?;
        let schemas = Arc::new(KafkaSchemas::load(
            &names.schemas,
            schemas_consumer,
            true,
            timeout,
            from_beginning,
        )?);
        let log = KafkaLog {
            inner: Arc::new(Inner {
                config: config.clone(),
                dir: ctx.dir.clone(),
                connection,
                names,
                pipeline: pipeline.clone(),
                id: checkpoint.log_id.clone(),
                schemas: LogSchemas {
                    store: schemas,
                    writer: Weak::new(),
                },
                writer: None,
                durable: watch::Sender::new(checkpoint.next_offset),
                last: Mutex::new(checkpoint.last),
                stop: Arc::default(),
            }),
        };
        log.follow_checkpoints()?;
        Ok(Some(log))
    }

    /// Follows the offsets topic in a thread of its own: the writer's commits move the
    /// durable end. With `seek = "beginning"` it reads the latest checkpoint from the
    /// topic's beginning now and then instead (a broker that drops records past an aborted
    /// transaction would keep a follower from seeing new ones).
    fn follow_checkpoints(&self) -> Result<()> {
        let inner = Arc::downgrade(&self.inner);
        let stop = self.inner.stop.clone();
        let topic = self.inner.names.offsets.clone();
        let timeout = self.inner.config.timeout.0;
        let from_beginning = self.inner.config.seek == Seek::Beginning;
        let follower = consumer(
            &self.inner.connection,
            &format!("siphon-{}-follow", self.inner.pipeline),
            from_beginning,
        )?;
        let (_, high) =
            rdkafka::consumer::Consumer::fetch_watermarks(&follower, &topic, 0, timeout)
                .map_err(|e| siphon_kafka::kafka_error("reading the offsets topic", &e))?;
        let take = move |c: Checkpoint| {
            if let Some(inner) = inner.upgrade() {
                *inner.last.lock().unwrap() = c.last;
                inner.durable.send_if_modified(|end| {
                    let moved = c.next_offset > *end;
                    *end = (*end).max(c.next_offset);
                    moved
                });
            }
        };
        std::thread::Builder::new()
            .name("siphon-kafka-follow".into())
            .spawn(move || {
                let stopped = || stop.load(Ordering::Relaxed);
                let result = if from_beginning {
                    loop {
                        std::thread::sleep(Duration::from_millis(250));
                        if stopped() {
                            break Ok(());
                        }
                        match Checkpoint::latest(&follower, &topic, timeout, true) {
                            Ok(Some(c)) => take(c),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "reading the Kafka log's offsets topic")
                            }
                        }
                    }
                } else {
                    checkpoint::follow(&follower, &topic, high, &stopped, take)
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "following the Kafka log's offsets topic stopped");
                }
            })
            .map_err(|e| Error::permanent(format!("starting a thread: {e}")))?;
        Ok(())
    }

    /// Commits a transaction left open by appends of an open source transaction within
    /// `commit_interval`, on a task of its own.
    fn spawn_committer(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        let every = self.inner.config.commit_interval.0;
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every / 4).await;
                let Some(log) = inner.upgrade().map(|inner| KafkaLog { inner }) else {
                    return;
                };
                let result = blocking(move || {
                    let writer = log.inner.writer.as_ref().expect("the writer's log");
                    let mut writer = writer.lock().unwrap();
                    let done = writer.commit_if_older(every);
                    log.inner.durable.send_replace(writer.committed);
                    done
                })
                .await;
                if let Err(e) = result {
                    tracing::warn!(error = %e, "committing an open Kafka transaction");
                }
            }
        });
    }

    fn writer(&self) -> Result<&Arc<Mutex<Writer>>> {
        self.inner
            .writer
            .as_ref()
            .ok_or_else(|| Error::Config("the Kafka change log was opened read-only".into()))
    }

    async fn write(&self, records: Vec<NewRecord>, commit: bool) -> Result<Range<u64>> {
        self.writer()?;
        let log = self.clone();
        blocking(move || {
            let mut writer = log.writer()?.lock().unwrap();
            let result = writer.append(records, commit);
            log.inner.durable.send_if_modified(|end| {
                let moved = *end != writer.committed;
                *end = writer.committed;
                moved
            });
            result
        })
        .await
    }
}

/// How a reader finds a log's topics, and how it reads them.
fn topology(schemas: &Arc<KafkaSchemas>, names: &Names, config: &KafkaLogConfig) -> Topology {
    Topology {
        schemas: schemas.clone(),
        records_topic: names.records.clone(),
        timeout: config.timeout.0,
        from_beginning: config.seek == Seek::Beginning,
        dense: dense_offsets(config),
    }
}

/// Whether the log's offsets are dense: each one committed once, none compacted away.
fn dense_offsets(config: &KafkaLogConfig) -> bool {
    config.transactions && !config.topics.cleanup_policy.compacts()
}

#[async_trait]
impl ChangeLog for KafkaLog {
    async fn append(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.write(records, true).await
    }

    async fn append_unsynced(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.write(records, false).await
    }

    fn id(&self) -> &LogId {
        &self.inner.id
    }

    fn schemas(&self) -> &dyn SchemaStore {
        &self.inner.schemas
    }

    fn start_offset(&self) -> u64 {
        0
    }

    fn durable_end(&self) -> u64 {
        *self.inner.durable.borrow()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.durable.subscribe()
    }

    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>> {
        let client_id = format!("siphon-{}-reader", self.inner.pipeline);
        let probe = consumer(&self.inner.connection, &client_id, true)?;
        let consumer = consumer(&self.inner.connection, &client_id, false)?;
        Ok(Box::new(OrderedReader::open(
            &probe,
            consumer,
            topology(
                &self.inner.schemas.store,
                &self.inner.names,
                &self.inner.config,
            ),
            from,
            self.inner.durable.subscribe(),
        )?))
    }

    async fn last_record(&self) -> Result<Option<LogRecord>> {
        let log = self.clone();
        blocking(move || match &log.inner.writer {
            Some(writer) => Ok(writer.lock().unwrap().last.clone()),
            None => {
                let last = log.inner.last.lock().unwrap().clone();
                match last {
                    None => Ok(None),
                    Some(last) => {
                        let helper = consumer(
                            &log.inner.connection,
                            &format!("siphon-{}-open", log.inner.pipeline),
                            true,
                        )?;
                        last.record(
                            &helper,
                            &log.inner.names.records,
                            log.inner.config.timeout.0,
                            log.inner.config.seek == Seek::Beginning,
                        )
                        .map(Some)
                    }
                }
            }
        })
        .await
    }

    async fn maintain(&self, _consumers: &[Consumer]) -> Result<MaintenanceReport> {
        // The brokers keep the topics (their retention and compaction).
        Ok(MaintenanceReport::default())
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        None
    }

    fn stats(&self) -> LogStats {
        LogStats {
            start_offset: 0,
            end_offset: self.durable_end(),
            ..LogStats::default()
        }
    }

    /// Each partition's first record at or after the time, by Kafka's time index (a record's
    /// Kafka timestamp is when the log took it): the lowest of their siphon offsets.
    fn offset_at_time(&self, time_ms: i64) -> Result<u64> {
        let timeout = self.inner.config.timeout.0;
        let consumer = consumer(
            &self.inner.connection,
            &format!("siphon-{}-time", self.inner.pipeline),
            true,
        )?;
        let partitions = reader::log_partitions(
            &consumer,
            &topology(
                &self.inner.schemas.store,
                &self.inner.names,
                &self.inner.config,
            ),
        )?;
        let mut wanted = rdkafka::TopicPartitionList::new();
        for (topic, partition) in &partitions {
            wanted
                .add_partition_offset(topic, *partition, rdkafka::Offset::Offset(time_ms))
                .map_err(|e| siphon_kafka::kafka_error("listing partitions", &e))?;
        }
        let found = rdkafka::consumer::Consumer::offsets_for_times(&consumer, wanted, timeout)
            .map_err(|e| siphon_kafka::kafka_error("finding records by time", &e))?;
        let mut first = self.durable_end();
        for tp in &partitions {
            let Some(rdkafka::Offset::Offset(at)) =
                found.find_partition(&tp.0, tp.1).map(|e| e.offset())
            else {
                // No record at or after the time.
                continue;
            };
            let (_, high) =
                rdkafka::consumer::Consumer::fetch_watermarks(&consumer, &tp.0, tp.1, timeout)
                    .map_err(|e| siphon_kafka::kafka_error("reading a partition's extent", &e))?;
            if let Some((_, offset)) = consume::first_at_or_after(&consumer, tp, at, high, timeout)?
            {
                first = first.min(offset);
            }
        }
        Ok(first)
    }

    fn group_reader(&self, group: &str, from: Option<u64>) -> Option<Result<GroupReader>> {
        let member_id = match group::member_id(&self.inner.dir) {
            Ok(id) => id,
            Err(e) => return Some(Err(e)),
        };
        let membership = group::Membership {
            connection: self.inner.connection.clone(),
            client_id: format!("siphon-{}-member", self.inner.pipeline),
            member_id,
            schemas: self.inner.schemas.store.clone(),
            records_topic: self.inner.names.records.clone(),
            timeout: self.inner.config.timeout.0,
        };
        Some(group::join(membership, group, from))
    }

    fn promises(&self) -> LogPromises {
        LogPromises {
            total_order: true,
            // Compaction, and records written again without transactions, leave gaps.
            dense_offsets: dense_offsets(&self.inner.config),
            transaction_marks: true,
        }
    }
}

/// `kind = "kafka"`.
#[derive(Debug)]
pub struct KafkaLogKind;

impl Kind for KafkaLogKind {
    const NAME: &'static str = "kafka";
    type Config = KafkaLogConfig;

    fn validate(config: &KafkaLogConfig) -> std::result::Result<(), String> {
        config.validate()
    }

    fn build_note() -> Option<&'static str> {
        Some("librdkafka 2.12, built in")
    }
}

impl LogKind for KafkaLogKind {
    const SHARED: bool = true;

    fn check(config: &KafkaLogConfig) -> Result<()> {
        siphon_kafka::consume::reach(&config.kafka(), "siphon-check")
    }

    fn open(config: &KafkaLogConfig, ctx: &LogContext) -> Result<Arc<dyn ChangeLog>> {
        Ok(Arc::new(KafkaLog::open(config, ctx)?))
    }

    fn open_existing(
        config: &KafkaLogConfig,
        ctx: &LogContext,
    ) -> Result<Option<Arc<dyn ChangeLog>>> {
        Ok(KafkaLog::open_read_only(config, ctx)?.map(|log| Arc::new(log) as Arc<dyn ChangeLog>))
    }

    fn retention(_: &KafkaLogConfig) -> String {
        "the topics' own (retention.ms, cleanup.policy)".to_owned()
    }
}
