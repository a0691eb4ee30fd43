//! Reading the log as a member of a Kafka consumer group (`consumer_group = true` on a sink):
//! the group's members split the log's topics — one a table, each of one partition — so
//! that each table is read in log order by one member, and a sink scales out over daemons
//! and machines. The group remembers in Kafka (its committed offsets) where each table got
//! to once the member's store applied it; a member that takes a table over reads on from
//! there, applying again (idempotently) what the store had applied after the last commit.
//!
//! One partition a table is what keeps a table's records in order across a rebalance: a
//! truncate lands after the rows before it, a key change's two halves together. A topic of
//! more partitions is refused with the reason.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use siphon_core::log::{GroupPositions, GroupReader, LogReader, LogRecord};
use siphon_core::{Error, Result};
use siphon_kafka::config::Connection;
use siphon_kafka::{Quiet, kafka_error};
use tokio::sync::Notify;

use crate::reader::locate;
use crate::schemas::KafkaSchemas;
use siphon_kafka::consume::{Tp, log_record, message_tp};

/// How often a member looks for tables (topics) that appeared.
const TOPIC_REFRESH: Duration = Duration::from_secs(5);

/// How long a member giving tables back waits for its store to apply what it handed out.
const REVOKE_PATIENCE: Duration = Duration::from_secs(60);

/// A member's consumer: logs rebalances, and gives tables back only once its store applied
/// what it handed out of them. Otherwise a batch still being applied could land after the
/// table's next member applied newer records — an insert after the delete that follows it —
/// and a store without per-key versions (Redis) would keep the older row.
#[derive(Debug, Default)]
struct Member {
    /// What the member handed out and its store has not applied yet.
    handed: Handed,
    /// Records polled and not handed out yet (counted under `handed`'s lock when taken).
    polled: Arc<AtomicUsize>,
    /// The member is stopping: nothing more will be applied.
    stop: Arc<AtomicBool>,
}

impl ClientContext for Member {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        Quiet.log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        Quiet.error(error, reason);
    }
}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        if tpl.count() == 0 {
            return;
        }
        // Everything polled (no poll happens meanwhile: this runs inside one) is handed out
        // and applied first; a record is taken from the channel and handed out under the
        // lock, so none is between the two. Nothing is dropped: librdkafka may go on past
        // what was polled when a table comes back to this member.
        let settled = || {
            let handed = self.handed.lock().unwrap();
            handed.is_empty() && self.polled.load(Ordering::SeqCst) == 0
        };
        let started = Instant::now();
        while !settled() && !self.stop.load(Ordering::Relaxed) {
            if started.elapsed() > REVOKE_PATIENCE {
                tracing::warn!(
                    waited = ?REVOKE_PATIENCE,
                    "consumer group: tables given back before the store applied what this member read of them"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let tables: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| e.topic().to_owned())
                    .collect();
                tracing::info!(tables = ?tables, "consumer group: this member reads these tables");
            }
            Rebalance::Revoke(tpl) => {
                tracing::info!(count = tpl.count(), "consumer group: tables handed back");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "consumer group rebalance"),
        }
    }
}

type MemberConsumer = BaseConsumer<Member>;

/// What the member handed out, in the order it did, until the store applied it.
type Handed = Arc<Mutex<VecDeque<(u64, Tp, i64)>>>;

/// A polled record, or the consumer's failure.
enum Polled {
    Record {
        tp: Tp,
        offset: i64,
        record: Option<LogRecord>,
    },
    Failed(Error),
}

/// The log's catalog and settings, which a member subscribes by.
pub(crate) struct Membership {
    pub connection: Connection,
    pub client_id: String,
    /// This daemon's name in its groups (Kafka's static membership): a daemon that
    /// restarts takes its tables back at once, without a rebalance of the others.
    pub member_id: String,
    pub schemas: Arc<KafkaSchemas>,
    pub records_topic: String,
    pub timeout: Duration,
}

/// The member id kept in `dir` (made the first time): the same daemon, with the same data
/// directory, is the same member.
pub(crate) fn member_id(dir: &std::path::Path) -> Result<String> {
    // A daemon's sinks join their groups at once; each made an id of its own (and all but
    // one failed to rename the shared temporary file), so one is made at a time.
    static MAKING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MAKING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = dir.join("member-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("read", &path)(e)),
    }
    std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    let id = format!("siphon-{}", siphon_core::log::LogId::random());
    siphon_core::fsutil::write_atomic(&path, id.as_bytes())?;
    Ok(id)
}

/// The tables a member subscribes to: every topic of the catalog, each of one partition.
fn topics(consumer: &MemberConsumer, membership: &Membership) -> Result<BTreeSet<String>> {
    membership.schemas.refresh()?;
    let topics: BTreeSet<String> = membership.schemas.topics().into_iter().collect();
    let metadata = consumer
        .fetch_metadata(None, membership.timeout)
        .map_err(|e| kafka_error("reading the cluster's topics", &e))?;
    for topic in metadata.topics() {
        if topics.contains(topic.name()) && topic.partitions().len() > 1 {
            return Err(Error::permanent(format!(
                "consumer_group: topic {} has {} partitions; a consumer group shares the log by table, and a table read by several members could see its truncates and key changes out of order: give each table's topic one partition (topics.partitions = 1, the default), or read this sink without consumer_group",
                topic.name(),
                topic.partitions().len()
            )));
        }
    }
    Ok(topics)
}

/// Joins group `group` and reads the tables it gives this member; with `from` (a replay),
/// from each table's first record at or after that offset.
pub(crate) fn join(membership: Membership, group: &str, from: Option<u64>) -> Result<GroupReader> {
    let replay = match from {
        Some(from) => Some(Replay {
            from,
            probe: siphon_kafka::consume::consumer(
                &membership.connection,
                &membership.client_id,
                true,
            )?,
        }),
        None => None,
    };
    let mut config = membership.connection.client_config(&membership.client_id)?;
    config
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A table the group never read starts at its beginning.
        .set("auto.offset.reset", "earliest")
        // Tables, not partitions, are what is shared: spread them over the members (range,
        // the default, gives a one-partition topic always to the same member).
        .set("partition.assignment.strategy", "roundrobin")
        .set("group.instance.id", &membership.member_id)
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "16384")
        .set("receive.message.max.bytes", "2147483647");
    let member = Member::default();
    let (handed, polled, stop) = (
        member.handed.clone(),
        member.polled.clone(),
        member.stop.clone(),
    );
    let consumer: Arc<MemberConsumer> = Arc::new(
        BaseConsumer::from_config_and_context(&config, member)
            .map_err(|e| kafka_error("creating a consumer", &e))?,
    );
    let subscribed = topics(&consumer, &membership)?;
    subscribe(&consumer, &subscribed)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(256);
    let notify = Arc::new(Notify::new());
    {
        let (consumer, notify, stop) = (consumer.clone(), notify.clone(), stop.clone());
        std::thread::Builder::new()
            .name("siphon-kafka-member".into())
            .spawn(move || {
                poll_loop(
                    &consumer,
                    &membership,
                    subscribed,
                    replay,
                    &tx,
                    &notify,
                    &stop,
                );
            })
            .map_err(|e| Error::permanent(format!("starting a Kafka reader thread: {e}")))?;
    }
    Ok(GroupReader {
        reader: Box::new(MemberReader {
            rx,
            notify,
            handed: handed.clone(),
            polled,
            next: 0,
            stop,
        }),
        positions: Arc::new(MemberPositions { consumer, handed }),
    })
}

fn subscribe(consumer: &MemberConsumer, topics: &BTreeSet<String>) -> Result<()> {
    if topics.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(|e| kafka_error("joining the consumer group", &e))
}

/// A replay a member starts once the group gave it its tables.
struct Replay {
    /// The siphon offset to read each table from.
    from: u64,
    /// A consumer that finds where that is in a partition.
    probe: siphon_kafka::consume::PartitionConsumer,
}

impl Replay {
    /// Once the group gave this member its tables (`false` before): commits, as the group's
    /// positions, every table's first record at or after `from` — the tables other members
    /// hold too, so that a member stopped for the replay reads them from there — and moves
    /// this member to those of its own tables.
    fn start(&self, consumer: &MemberConsumer, membership: &Membership) -> Result<bool> {
        let timeout = membership.timeout;
        let assigned = consumer
            .assignment()
            .map_err(|e| kafka_error("reading the member's tables", &e))?;
        if assigned.count() == 0 {
            return Ok(false);
        }
        let mut positions = TopicPartitionList::new();
        for topic in topics(consumer, membership)? {
            let tp: Tp = (topic.as_str().into(), 0);
            let position = match locate(&self.probe, &tp, self.from, timeout) {
                // A seek or a commit takes a real offset, not "the beginning".
                Ok(Offset::Beginning) => match consumer.fetch_watermarks(&topic, 0, timeout) {
                    Ok((low, _)) => Offset::Offset(low),
                    Err(e) if siphon_kafka::consume::is_unknown_topic(&e) => continue,
                    Err(e) => return Err(kafka_error("reading a table's extent", &e)),
                },
                Ok(position) => position,
                Err(e) => return Err(e),
            };
            positions
                .add_partition_offset(&topic, 0, position)
                .map_err(|e| kafka_error("listing positions", &e))?;
        }
        let mut own = TopicPartitionList::new();
        for element in assigned.elements() {
            if let Some(start) = positions.find_partition(element.topic(), element.partition()) {
                own.add_partition_offset(element.topic(), element.partition(), start.offset())
                    .map_err(|e| kafka_error("listing positions", &e))?;
            }
        }
        let moved = consumer
            .seek_partitions(own, timeout)
            .map_err(|e| kafka_error("moving to the replay's start", &e))?;
        for element in moved.elements() {
            if let Err(e) = element.error() {
                return Err(kafka_error(
                    &format!("moving {} to the replay's start", element.topic()),
                    &e,
                ));
            }
        }
        consumer
            .commit(&positions, CommitMode::Sync)
            .map_err(|e| kafka_error("committing the replay's start", &e))?;
        tracing::info!(
            from = self.from,
            tables = positions.count(),
            own = moved.count(),
            "consumer group: the tables' positions moved to the replay's start"
        );
        Ok(true)
    }
}

/// Polls (which also serves the group's rebalances) and hands records over; subscribes to
/// tables that appear. With a replay, hands nothing over until it moved to the replay's
/// start.
fn poll_loop(
    consumer: &MemberConsumer,
    membership: &Membership,
    mut subscribed: BTreeSet<String>,
    mut replay: Option<Replay>,
    tx: &std::sync::mpsc::SyncSender<Polled>,
    notify: &Notify,
    stop: &AtomicBool,
) {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut refreshed = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if refreshed.elapsed() >= TOPIC_REFRESH {
            refreshed = Instant::now();
            match topics(consumer, membership) {
                Ok(now) if now != subscribed => {
                    tracing::info!(tables = now.len(), "consumer group: new tables to read");
                    if let Err(e) = subscribe(consumer, &now) {
                        tracing::warn!(error = %e, "consumer group: subscribing to new tables");
                    } else {
                        subscribed = now;
                    }
                }
                Ok(_) => {}
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "consumer group: looking for new tables");
                }
                Err(e) => {
                    let _ = tx.send(Polled::Failed(e));
                    notify.notify_one();
                    return;
                }
            }
        }
        let polled = consumer.poll(Duration::from_millis(100));
        if let Some(pending) = &replay {
            // What it polled before is from where the group was: read again after the move.
            match pending.start(consumer, membership) {
                Ok(true) => replay = None,
                Ok(false) => {}
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "consumer group: starting the replay");
                }
                Err(e) => {
                    let _ = tx.send(Polled::Failed(e));
                    notify.notify_one();
                    return;
                }
            }
            continue;
        }
        let polled = match polled {
            None => continue,
            Some(Ok(message)) => Polled::Record {
                tp: message_tp(&mut names, &message),
                offset: message.offset(),
                record: log_record(&message, &membership.records_topic),
            },
            Some(Err(KafkaError::PartitionEOF(_))) => continue,
            Some(Err(e)) => {
                let error = kafka_error("reading the change log in a consumer group", &e);
                if error.is_transient() {
                    tracing::warn!(%error, "consumer group");
                    continue;
                }
                Polled::Failed(error)
            }
        };
        let failed = matches!(polled, Polled::Failed(_));
        if !failed {
            consumer.context().polled.fetch_add(1, Ordering::SeqCst);
        }
        let sent = tx.send(polled).is_ok();
        notify.notify_one();
        if !sent || failed {
            return;
        }
    }
    consumer.unsubscribe();
}

/// The member's records, each table's in log order.
struct MemberReader {
    rx: std::sync::mpsc::Receiver<Polled>,
    notify: Arc<Notify>,
    handed: Handed,
    /// Records polled and not taken from `rx` yet.
    polled: Arc<AtomicUsize>,
    /// One past the highest offset handed out.
    next: u64,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for MemberReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberReader")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Drop for MemberReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[async_trait]
impl LogReader for MemberReader {
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.rx.try_recv() {
                Ok(Polled::Record { tp, offset, record }) => {
                    // Taken and handed out at once, as `Member::pre_rebalance` sees them.
                    let mut handed = self.handed.lock().unwrap();
                    self.polled.fetch_sub(1, Ordering::SeqCst);
                    let Some(record) = record else { continue };
                    handed.push_back((record.offset, tp, offset));
                    drop(handed);
                    self.next = self.next.max(record.offset + 1);
                    out.push(record);
                }
                Ok(Polled::Failed(e)) => return Err(e),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(Error::transient("kafka: the group reader's thread stopped"));
                }
            }
        }
        Ok(out)
    }

    async fn wait(&mut self) -> Result<()> {
        tokio::select! {
            () = self.notify.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        Ok(())
    }

    fn position(&self) -> u64 {
        self.next
    }
}

/// Where the group remembers what this member's store applied.
struct MemberPositions {
    consumer: Arc<MemberConsumer>,
    handed: Handed,
}

impl std::fmt::Debug for MemberPositions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberPositions").finish_non_exhaustive()
    }
}

impl GroupPositions for MemberPositions {
    fn applied_through(&self, offset: u64) -> Result<()> {
        let mut applied: HashMap<Tp, i64> = HashMap::new();
        {
            let mut handed = self.handed.lock().unwrap();
            while let Some((seq, tp, kafka_offset)) = handed.pop_front() {
                let next = applied.entry(tp).or_insert(kafka_offset + 1);
                *next = (*next).max(kafka_offset + 1);
                if seq == offset {
                    break;
                }
            }
        }
        if applied.is_empty() {
            return Ok(());
        }
        let mut positions = TopicPartitionList::new();
        for ((topic, partition), next) in &applied {
            positions
                .add_partition_offset(topic, *partition, Offset::Offset(*next))
                .map_err(|e| kafka_error("listing positions", &e))?;
        }
        // A table handed to another member meanwhile is refused here; that member reads it
        // on from the last position the group took, which costs only records applied again.
        self.consumer
            .commit(&positions, CommitMode::Async)
            .map_err(|e| kafka_error("committing the group's positions", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::member_id;

    /// The sinks of a daemon join their groups at once: they all get the one member id its
    /// data directory keeps.
    #[test]
    fn sinks_joining_at_once_share_one_member_id() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let start = std::sync::Barrier::new(4);
            let ids: Vec<String> = std::thread::scope(|s| {
                let joins: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            member_id(dir.path()).unwrap()
                        })
                    })
                    .collect();
                joins.into_iter().map(|j| j.join().unwrap()).collect()
            });
            assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
            assert_eq!(member_id(dir.path()).unwrap(), ids[0]);
        }
    }
}
