//! Reading a Kafka log in siphon-offset order: every partition of the log's topics, merged by
//! the `siphon.offset` header, so that a reader sees one total order — whole source
//! transactions, a truncate before the rows after it, a key change's two halves together —
//! although Kafka orders each partition only.
//!
//! The merge hands out the lowest offset at the heads of the partitions' queues. That is the
//! next one when offsets are dense (the writer gives them densely). Where the next offset is
//! in no queue (a gap: compaction removed records, or a record is still on its way), the
//! lowest head may go only once no partition can still deliver a lower one: each partition
//! holds a record already (a partition's records come in increasing offsets), or was found
//! *exhausted* — everything below its high watermark consumed — by a check made after that
//! head was polled. Since the writer commits offsets in increasing order, a record committed
//! after the check has a higher offset than every record committed before it, that head
//! included. A head older than any transaction can stay open (its timestamp five minutes
//! before the check) needs no newer check. Topics are found the same way: a check reads the
//! catalog's topics written since (a topic enters it in the transaction of its first record)
//! and assigns those it had not seen, so a topic whose first record is older than a head is
//! assigned before that head goes.
//!
//! One thread per reader polls the consumer and answers the reader's requests (checks,
//! pauses) in the order of what it polled, so that a check's answer comes after every record
//! polled before it. Memory stays bounded: past a budget, every partition with records
//! waiting is paused (the merge never needs more of a partition that has records waiting)
//! and resumed once its queue is empty.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use siphon_core::log::{LogReader, LogRecord};
use siphon_core::source::now_ms;
use siphon_core::{Error, Result};
use siphon_kafka::kafka_error;
use tokio::sync::{Notify, watch};

use crate::schemas::KafkaSchemas;
use siphon_kafka::consume::{PartitionConsumer, Tp, first_at_or_after, log_record, message_tp};

/// How long a transaction can stay open, and then some for clocks that differ: a record
/// older than this before a check was committed before it.
/// How long a read that has records waits for the durable ones not fetched yet.
const SETTLE: Duration = Duration::from_millis(200);

const OPEN_TRANSACTION_BOUND_MS: i64 = 5 * 60 * 1000;

/// Records buffered in the queues past which partitions with records waiting are paused.
const BUFFER_BUDGET: usize = 32 << 20;

/// How long the merge waits at a gap before asking for a check.
const GAP_PATIENCE: Duration = Duration::from_millis(100);

/// How long an idle reader behind the log's end waits before looking for topics it lacks.
const BEHIND_PATIENCE: Duration = Duration::from_millis(500);

/// What the reading thread hands over, in the order it happened.
enum Fetched {
    /// A record polled (a tombstone or foreign record as `None`), when it was polled.
    Record {
        tp: Tp,
        record: Option<LogRecord>,
        polled: Instant,
    },
    /// A check's answer: partitions found exhausted, and partitions newly assigned, as of
    /// `at` (when the check began) and the wall clock then.
    Checked {
        at: Instant,
        wall_ms: i64,
        exhausted: Vec<Tp>,
        assigned: Vec<Tp>,
    },
    /// The consumer failed.
    Failed(Error),
}

/// What the reader asks the reading thread.
enum Request {
    /// Find new topics and partitions, and which of these partitions are exhausted.
    Check(Vec<Tp>),
    Pause(Vec<Tp>),
    Resume(Vec<Tp>),
}

/// One partition's records waiting for the merge.
#[derive(Debug, Default)]
struct Queue {
    records: VecDeque<(LogRecord, Instant)>,
    bytes: usize,
    paused: bool,
    /// The last check that found it exhausted: when it began, and the wall clock then.
    exhausted: Option<(Instant, i64)>,
}

/// What the log gives a reader to find its topics with.
#[derive(Clone)]
pub(crate) struct Topology {
    /// The catalog, which names the topics.
    pub schemas: Arc<KafkaSchemas>,
    /// The topic of records that are not events.
    pub records_topic: String,
    /// The longest wait for the brokers.
    pub timeout: Duration,
    /// Start every partition at its beginning (see `Seek::Beginning`).
    pub from_beginning: bool,
    /// The log's offsets are dense: a missing one is an error, never a gap to pass.
    pub dense: bool,
}

/// Where the reading thread hands over what it polled: a bounded queue (which
/// [`LogReader::read_available`], not being async, may block on) and a notification (which
/// [`LogReader::wait`] awaits).
struct Handoff {
    tx: std::sync::mpsc::SyncSender<Fetched>,
    notify: Arc<Notify>,
}

impl Handoff {
    /// Hands `fetched` over; `false` once the reader is gone.
    fn send(&self, fetched: Fetched) -> bool {
        let sent = self.tx.send(fetched).is_ok();
        self.notify.notify_one();
        sent
    }
}

/// A reader of the whole log in offset order.
pub(crate) struct OrderedReader {
    fetched: std::sync::mpsc::Receiver<Fetched>,
    notify: Arc<Notify>,
    requests: std::sync::mpsc::Sender<Request>,
    queues: HashMap<Tp, Queue>,
    /// The heads of the non-empty queues, lowest offset first.
    heads: BinaryHeap<Reverse<(u64, Tp)>>,
    next: u64,
    buffered: usize,
    /// When the set of topics was last brought up to date.
    topics_known: (Instant, i64),
    durable: watch::Receiver<u64>,
    /// Since when the merge has been unable to hand out what it holds (or the log's end).
    stuck_since: Option<Instant>,
    /// The log's end when the check on its way was asked for.
    check_in_flight: Option<u64>,
    /// How long `read_available` may wait for records the log holds.
    timeout: Duration,
    /// The log's end can no longer be followed (its watch is gone).
    durable_closed: bool,
    /// Its offsets are dense (see [`Topology::dense`]).
    dense: bool,
    /// Offsets the log committed that no partition delivered although each was read to its
    /// end: an error for the reader's caller.
    missing: Option<(u64, u64)>,
    _thread: ThreadGuard,
}

impl std::fmt::Debug for OrderedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderedReader")
            .field("next", &self.next)
            .field("partitions", &self.queues.len())
            .finish_non_exhaustive()
    }
}

/// Stops the reading thread when the reader goes.
struct ThreadGuard(Arc<std::sync::atomic::AtomicBool>);

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl OrderedReader {
    /// A reader of every partition of the log's topics from offset `from`: each partition is
    /// positioned at its first record at or after `from` (found with `probe`, which reports
    /// partition ends; `consumer` reads, and has read nothing yet, so that the positions it
    /// reports are its own). Blocks while it finds them.
    pub fn open(
        probe: &PartitionConsumer,
        consumer: PartitionConsumer,
        topology: Topology,
        from: u64,
        durable: watch::Receiver<u64>,
    ) -> Result<Self> {
        let started = (Instant::now(), now_ms());
        let topics = expected_topics(&topology)?;
        let partitions = partitions_of(&consumer, &topics, topology.timeout)?;
        let mut assignment = TopicPartitionList::new();
        let mut starts = HashMap::new();
        for tp in &partitions {
            let offset = if topology.from_beginning {
                Offset::Beginning
            } else {
                locate(probe, tp, from, topology.timeout)?
            };
            assignment
                .add_partition_offset(&tp.0, tp.1, offset)
                .map_err(|e| kafka_error("assigning partitions", &e))?;
            tracing::debug!(topic = %tp.0, partition = tp.1, from, ?offset, "kafka reader starts");
            starts.insert(tp.clone(), offset);
        }
        consumer
            .assign(&assignment)
            .map_err(|e| kafka_error("assigning partitions", &e))?;
        let (fetched_tx, fetched) = std::sync::mpsc::sync_channel(256);
        let notify = Arc::new(Notify::new());
        let handoff = Handoff {
            tx: fetched_tx,
            notify: notify.clone(),
        };
        let (requests, requests_rx) = std::sync::mpsc::channel();
        let timeout = topology.timeout;
        let topology_dense = topology.dense;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread_stop = stop.clone();
        let assigned = starts;
        std::thread::Builder::new()
            .name("siphon-kafka-reader".into())
            .spawn(move || {
                read_loop(
                    &consumer,
                    &topology,
                    assigned,
                    &handoff,
                    &requests_rx,
                    &thread_stop,
                );
            })
            .map_err(|e| Error::permanent(format!("starting a Kafka reader thread: {e}")))?;
        Ok(OrderedReader {
            fetched,
            notify,
            requests,
            queues: partitions
                .into_iter()
                .map(|tp| (tp, Queue::default()))
                .collect(),
            heads: BinaryHeap::new(),
            next: from,
            buffered: 0,
            topics_known: started,
            durable,
            stuck_since: None,
            check_in_flight: None,
            timeout,
            durable_closed: false,
            dense: topology_dense,
            missing: None,
            _thread: ThreadGuard(stop),
        })
    }

    fn take(&mut self, fetched: Fetched) -> Result<()> {
        match fetched {
            Fetched::Record { tp, record, polled } => {
                let Some(record) = record.filter(|r| r.offset >= self.next) else {
                    return Ok(());
                };
                let Some(queue) = self.queues.get_mut(&tp) else {
                    return Ok(());
                };
                let bytes = record.key.len() + record.value.len();
                if queue.records.is_empty() {
                    self.heads.push(Reverse((record.offset, tp.clone())));
                }
                queue.records.push_back((record, polled));
                queue.bytes += bytes;
                self.buffered += bytes;
            }
            Fetched::Checked {
                at,
                wall_ms,
                exhausted,
                assigned,
            } => {
                let end_then = self.check_in_flight.take().unwrap_or(0);
                tracing::debug!(
                    next = self.next,
                    durable = *self.durable.borrow(),
                    heads = ?self.heads.peek(),
                    exhausted = exhausted.len(),
                    assigned = assigned.len(),
                    partitions = self.queues.len(),
                    "kafka reader check"
                );
                self.topics_known = (at, wall_ms);
                for tp in assigned {
                    self.queues.entry(tp).or_default();
                }
                for tp in exhausted {
                    if let Some(queue) = self.queues.get_mut(&tp) {
                        queue.exhausted = Some((at, wall_ms));
                    }
                }
                // Everything consumed, nothing waiting: every record below the end the log
                // had when the check was asked for has been handed out (the rest of them
                // were compacted away).
                if self.heads.is_empty()
                    && self
                        .queues
                        .values()
                        .all(|q| q.exhausted == Some((at, wall_ms)))
                    && end_then > self.next
                {
                    if self.dense {
                        self.missing = Some((self.next, end_then));
                    } else {
                        self.next = end_then;
                    }
                }
            }
            Fetched::Failed(e) => return Err(e),
        }
        Ok(())
    }

    /// Whether no partition can still deliver an offset below the head `(record, polled)`:
    /// every empty queue's partition was found exhausted after it was polled, and the
    /// topics were brought up to date after it too (or it is older than any open
    /// transaction then).
    fn may_pass_gap(&self, record: &LogRecord, polled: Instant) -> bool {
        let after = |(at, wall): (Instant, i64)| {
            at > polled || record.timestamp_ms + OPEN_TRANSACTION_BOUND_MS < wall
        };
        after(self.topics_known)
            && self
                .queues
                .values()
                .filter(|q| q.records.is_empty())
                .all(|q| q.exhausted.is_some_and(after))
    }

    /// Pops the lowest head if the merge may hand it out.
    fn pop(&mut self) -> Option<LogRecord> {
        loop {
            let Reverse((offset, tp)) = self.heads.peek()?.clone();
            let queue = self.queues.get(&tp).expect("a head has a queue");
            let (record, polled) = queue.records.front().expect("a head is queued");
            // Not durable yet (written without a transaction, its checkpoint still to come).
            if offset >= *self.durable.borrow() && offset >= self.next {
                return None;
            }
            // At or below the next offset: the next one, or one handed out already (dropped
            // below).
            if offset > self.next {
                if !self.may_pass_gap(record, *polled) {
                    return None;
                }
                if self.dense {
                    // Dense offsets have no gap: the brokers did not deliver them.
                    self.missing = Some((self.next, offset));
                    return None;
                }
            }
            self.heads.pop();
            let queue = self.queues.get_mut(&tp).expect("a head has a queue");
            let (record, _) = queue.records.pop_front().expect("a head is queued");
            let bytes = record.key.len() + record.value.len();
            queue.bytes -= bytes;
            self.buffered -= bytes;
            if let Some((next, _)) = queue.records.front() {
                self.heads.push(Reverse((next.offset, tp.clone())));
            } else if queue.paused {
                queue.paused = false;
                let _ = self.requests.send(Request::Resume(vec![tp.clone()]));
            }
            if record.offset < self.next {
                continue;
            }
            self.next = record.offset + 1;
            return Some(record);
        }
    }

    /// Past the budget, pauses every partition with records waiting.
    fn balance(&mut self) {
        if self.buffered <= BUFFER_BUDGET {
            return;
        }
        let pause: Vec<Tp> = self
            .queues
            .iter_mut()
            .filter(|(_, q)| !q.paused && !q.records.is_empty())
            .map(|(tp, q)| {
                q.paused = true;
                tp.clone()
            })
            .collect();
        if !pause.is_empty() {
            let _ = self.requests.send(Request::Pause(pause));
        }
    }

    /// Asks for a check of the empty partitions (and for new topics), unless one is on its
    /// way.
    fn request_check(&mut self) {
        if self.check_in_flight.is_some() {
            return;
        }
        let end = *self.durable.borrow();
        let empty: Vec<Tp> = self
            .queues
            .iter()
            .filter(|(_, q)| q.records.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect();
        if self.requests.send(Request::Check(empty)).is_ok() {
            self.check_in_flight = Some(end);
        }
    }

    /// Whether the log holds records past what the merge handed out.
    fn behind(&self) -> bool {
        *self.durable.borrow() > self.next
    }

    /// How long the merge waits for records before it asks for a check: not long at a gap
    /// with records waiting, longer when nothing came (a topic it lacks).
    fn patience(&self) -> Duration {
        if self.heads.is_empty() {
            BEHIND_PATIENCE
        } else {
            GAP_PATIENCE
        }
    }

    /// Notes whether the merge is stuck (behind the log's end with nothing to hand out) and
    /// asks for a check once it has been for a while.
    fn note_progress(&mut self, progressed: bool) {
        if progressed || !self.behind() {
            self.stuck_since = None;
            return;
        }
        let since = *self.stuck_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.patience() {
            self.request_check();
        }
    }
}

#[async_trait]
impl LogReader for OrderedReader {
    /// The records the log holds from the position, up to `max`: while the log holds
    /// records past the position and none can be handed out yet, it waits for them (up to
    /// the log's timeout), since what the log holds is durable now.
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut out = Vec::new();
        loop {
            if let Some((first, end)) = self.missing.take() {
                return Err(Error::transient(format!(
                    "kafka: the change log committed offsets {first}..{end}, but no partition delivered them although each was read to its end (a broker whose read_committed fetches drop records past an aborted transaction does this: noida-db 0.2.3 does; set seek = \"beginning\" for it); reading again"
                )));
            }
            loop {
                match self.fetched.try_recv() {
                    Ok(fetched) => self.take(fetched)?,
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        return Err(Error::transient("kafka: the reading thread stopped"));
                    }
                }
            }
            while out.len() < max {
                match self.pop() {
                    Some(record) => out.push(record),
                    None => break,
                }
            }
            self.note_progress(!out.is_empty());
            // Records durable but not fetched yet (another partition's, a moment behind) are
            // waited for a little once some came, so a reader gets what is durable at once.
            let now = Instant::now();
            if out.len() >= max
                || !self.behind()
                || now >= deadline
                || (!out.is_empty() && now >= started + SETTLE)
            {
                break;
            }
            match self.fetched.recv_timeout(Duration::from_millis(20)) {
                Ok(fetched) => self.take(fetched)?,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::transient("kafka: the reading thread stopped"));
                }
            }
        }
        self.balance();
        Ok(out)
    }

    async fn wait(&mut self) -> Result<()> {
        self.note_progress(false);
        let until_check = self
            .stuck_since
            .map_or(Duration::from_secs(1), |since| {
                self.patience().saturating_sub(since.elapsed())
            })
            .max(Duration::from_millis(5));
        tokio::select! {
            () = self.notify.notified() => Ok(()),
            () = tokio::time::sleep(until_check) => Ok(()),
            changed = self.durable.changed(), if !self.durable_closed => {
                self.durable_closed = changed.is_err();
                Ok(())
            }
        }
    }

    fn position(&self) -> u64 {
        self.next
    }
}

/// The partitions of the log's topics as they are now.
pub(crate) fn log_partitions(consumer: &PartitionConsumer, topology: &Topology) -> Result<Vec<Tp>> {
    partitions_of(consumer, &expected_topics(topology)?, topology.timeout)
}

/// The topics the log's records are in, as its catalog says now.
fn expected_topics(topology: &Topology) -> Result<Vec<String>> {
    topology.schemas.refresh()?;
    Ok(topology.schemas.topics())
}

/// The partitions of those of `topics` that exist.
fn partitions_of(
    consumer: &PartitionConsumer,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<Tp>> {
    let metadata = consumer
        .fetch_metadata(None, timeout)
        .map_err(|e| kafka_error("reading the cluster's topics", &e))?;
    let wanted: HashSet<&str> = topics.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for topic in metadata.topics() {
        if wanted.contains(topic.name()) && topic.error().is_none() {
            let name: Arc<str> = topic.name().into();
            out.extend(topic.partitions().iter().map(|p| (name.clone(), p.id())));
        }
    }
    out.sort();
    Ok(out)
}

/// Where to start reading a partition for siphon offset `from`: the Kafka offset of its first
/// record at or after it (searched back from the end, where a reader resuming usually is).
/// The answer is checked (the record there is at or after `from`, the one before it below):
/// an end-of-partition event left from an earlier probe would end a probe early and send the
/// search too far back; the search then runs again.
pub(crate) fn locate(
    consumer: &PartitionConsumer,
    tp: &Tp,
    from: u64,
    timeout: Duration,
) -> Result<Offset> {
    if from == 0 {
        return Ok(Offset::Beginning);
    }
    for _ in 0..3 {
        let (low, high) = consumer
            .fetch_watermarks(&tp.0, tp.1, timeout)
            .map_err(|e| kafka_error(&format!("reading the extent of {}", tp.0), &e))?;
        let found = search(consumer, tp, from, low, high, timeout)?;
        let at_or_after = first_at_or_after(consumer, tp, found, high, timeout)?;
        let before = if found > low {
            first_at_or_after(consumer, tp, found - 1, high, timeout)?
        } else {
            None
        };
        let here_ok = at_or_after.is_none_or(|(_, seq)| seq >= from);
        let before_ok = before.is_none_or(|(offset, seq)| offset >= found || seq < from);
        if here_ok && before_ok {
            return Ok(Offset::Offset(found));
        }
        tracing::debug!(topic = %tp.0, partition = tp.1, from, found, "a partition search gave a wrong answer; searching again");
    }
    Err(Error::transient(format!(
        "kafka: finding siphon offset {from} in {}[{}] gave a different answer each time; trying again",
        tp.0, tp.1
    )))
}

/// The Kafka offset of a partition's first record at or after siphon offset `from`, within
/// `[low, high]`.
fn search(
    consumer: &PartitionConsumer,
    tp: &Tp,
    from: u64,
    low: i64,
    high: i64,
    timeout: Duration,
) -> Result<i64> {
    // The answer lies in [lo, hi]: records before lo are below `from`.
    let mut hi = high;
    let mut lo = low;
    let mut back = 1;
    loop {
        let probe = (high - back).max(low);
        match first_at_or_after(consumer, tp, probe, hi, timeout)? {
            Some((offset, seq)) if seq < from => {
                lo = offset + 1;
                break;
            }
            _ => hi = probe,
        }
        if probe == low {
            break;
        }
        back *= 2;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match first_at_or_after(consumer, tp, mid, hi, timeout)? {
            Some((offset, seq)) if seq < from => lo = offset + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// The reading thread: polls, and answers requests between polls.
fn read_loop(
    consumer: &PartitionConsumer,
    topology: &Topology,
    mut assigned: HashMap<Tp, Offset>,
    fetched: &Handoff,
    requests: &std::sync::mpsc::Receiver<Request>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let mut names: HashMap<String, Arc<str>> = assigned
        .keys()
        .map(|(t, _)| (t.to_string(), t.clone()))
        .collect();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        while let Ok(request) = requests.try_recv() {
            let answer = match request {
                Request::Check(empty) => check(consumer, topology, &mut assigned, &empty),
                Request::Pause(tps) => pause(consumer, &tps, true).map(|()| None),
                Request::Resume(tps) => pause(consumer, &tps, false).map(|()| None),
            };
            let sent = match answer {
                Ok(Some(answer)) => fetched.send(answer),
                Ok(None) => true,
                Err(e) => fetched.send(Fetched::Failed(e)),
            };
            if !sent {
                return;
            }
        }
        let fetched_one = match consumer.poll(Duration::from_millis(50)) {
            None => continue,
            Some(Ok(message)) => Fetched::Record {
                tp: message_tp(&mut names, &message),
                record: log_record(&message, &topology.records_topic),
                polled: Instant::now(),
            },
            // The ends of partitions: the checks find those themselves.
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => continue,
            Some(Err(e)) => Fetched::Failed(kafka_error("reading the change log", &e)),
        };
        let failed = matches!(fetched_one, Fetched::Failed(_));
        if !fetched.send(fetched_one) || failed {
            return;
        }
    }
}

fn pause(consumer: &PartitionConsumer, tps: &[Tp], pause: bool) -> Result<()> {
    let mut list = TopicPartitionList::new();
    for (topic, partition) in tps {
        list.add_partition(topic, *partition);
    }
    let done = if pause {
        consumer.pause(&list)
    } else {
        consumer.resume(&list)
    };
    done.map_err(|e| kafka_error("pausing or resuming partitions", &e))
}

/// Assigns the partitions of topics that appeared, and finds which of `empty` are exhausted
/// (everything below their high watermark consumed).
fn check(
    consumer: &PartitionConsumer,
    topology: &Topology,
    assigned: &mut HashMap<Tp, Offset>,
    empty: &[Tp],
) -> Result<Option<Fetched>> {
    let at = Instant::now();
    let wall_ms = now_ms();
    let topics = expected_topics(topology)?;
    let now = partitions_of(consumer, &topics, topology.timeout)?;
    let new: Vec<Tp> = now
        .into_iter()
        .filter(|tp| !assigned.contains_key(tp))
        .collect();
    if !new.is_empty() {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in &new {
            list.add_partition_offset(topic, *partition, Offset::Beginning)
                .map_err(|e| kafka_error("assigning partitions", &e))?;
        }
        consumer
            .incremental_assign(&list)
            .map_err(|e| kafka_error("assigning new partitions", &e))?;
        tracing::debug!(partitions = ?new, "reading new partitions of the change log");
        assigned.extend(new.iter().map(|tp| (tp.clone(), Offset::Beginning)));
    }
    let positions = consumer
        .position()
        .map_err(|e| kafka_error("reading positions", &e))?;
    let mut exhausted = Vec::new();
    for tp in empty {
        let (low, high) = consumer
            .fetch_watermarks(&tp.0, tp.1, topology.timeout)
            .map_err(|e| kafka_error(&format!("reading the extent of {}", tp.0), &e))?;
        let position = positions.find_partition(&tp.0, tp.1).map(|e| e.offset());
        // Nothing consumed yet: where it was assigned to start.
        let position = match (position, assigned.get(tp)) {
            (Some(Offset::Offset(p)), _) => p,
            (_, Some(Offset::Offset(start))) => *start,
            _ => low,
        };
        let done = position >= high;
        if done {
            exhausted.push(tp.clone());
        }
    }
    Ok(Some(Fetched::Checked {
        at,
        wall_ms,
        exhausted,
        assigned: new,
    }))
}
