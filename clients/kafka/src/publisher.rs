//! Produces records to Kafka, transactionally or idempotently, for the Kafka log and the
//! Kafka sink.
//!
//! Transactional: records go into a Kafka transaction (begun by the first record after a
//! commit) that [`Publisher::commit`] commits — with whatever position record the caller put
//! in it, so that a crash leaves the records and their position or neither; a reader with
//! `isolation.level = read_committed` never sees the records of an aborted transaction. The
//! producer's `transactional.id` fences every earlier producer of the same id, so a second
//! process for the same pipeline stops the first one's writes (its next call fails with a
//! permanent error that says so).
//!
//! Idempotent (for brokers without transactions): records are produced with
//! `enable.idempotence` (no duplicate or reordering within a partition while the producer
//! lives), and [`Publisher::commit`] waits until every record is acknowledged.
//!
//! Every method but [`Publisher::send`] blocks: call them off the async runtime's threads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use siphon_core::{Error, Result};

use crate::config::Connection;
use crate::error::{is_fence, is_fenced, kafka_error};
use crate::records::OutRecord;

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
}

/// Follows deliveries: the first failure since the last commit, and where the latest record
/// sent to be remembered landed (by the number it was sent with).
#[derive(Debug, Default)]
struct Deliveries {
    failed: Mutex<Option<KafkaError>>,
    remembered: Mutex<Option<(u64, Place)>>,
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        crate::context::log_line(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::context::log_error(&error, reason);
    }
}

impl ProducerContext for Deliveries {
    /// 0, or 1 + the number of a record whose place to remember.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        match result {
            Ok(message) if opaque > 0 => {
                let number = opaque as u64 - 1;
                let mut remembered = self.remembered.lock().unwrap();
                if remembered.as_ref().is_none_or(|(n, _)| *n <= number) {
                    *remembered = Some((
                        number,
                        Place {
                            topic: message.topic().to_owned(),
                            partition: message.partition(),
                            offset: message.offset(),
                        },
                    ));
                }
            }
            Ok(_) => {}
            Err((e, _)) => {
                let mut failed = self.failed.lock().unwrap();
                if failed.is_none() {
                    *failed = Some(e.clone());
                }
            }
        }
    }
}

/// How a publisher makes what it sends durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Kafka transactions under this `transactional.id`.
    Transactional {
        /// The producer's `transactional.id`: one per pipeline (or sink).
        id: String,
    },
    /// An idempotent producer; no transactions.
    Idempotent,
}

/// A producer of siphon's records. One that librdkafka failed for good but not fenced (an
/// idempotent producer's sequence lost with a restarted broker, say) is made anew, with the
/// same `transactional.id`, by the next [`Publisher::abort`] — which every caller makes after
/// an error, going back to its last commit: the error that met it is transient, and the new
/// producer aborts what the old one left open. A producer that failed so while a commit was
/// under way (its records all answered, the commit sent) may or may not have committed: that
/// error is permanent, for the caller to learn where it stands as at a start.
pub struct Publisher {
    producer: BaseProducer<Deliveries>,
    /// What the producer was made with, to make it anew.
    config: ClientConfig,
    delivery: Delivery,
    /// A transaction is open.
    open: bool,
    timeout: Duration,
    /// Records sent, for serving acknowledgements now and then.
    sent: u64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("delivery", &self.delivery)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

/// Attempts at committing a transaction whose commit failed in a way worth retrying.
const COMMIT_ATTEMPTS: usize = 5;

impl Publisher {
    /// Connects a producer with `client_id`; a transactional one fences the earlier producers
    /// of its id (blocks up to `timeout`). `client` settings the caller adds (compression,
    /// linger) go in `extra`.
    pub fn connect(
        connection: &Connection,
        client_id: &str,
        delivery: Delivery,
        extra: &[(&str, String)],
        timeout: Duration,
    ) -> Result<Self> {
        let mut config = connection.client_config(client_id)?;
        for (key, value) in extra {
            config.set(*key, value);
        }
        let timeout_ms = timeout.as_millis().to_string();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // The Java client's partitioner, so that keys land where Kafka's tools expect them.
            .set("partitioner", "murmur2_random")
            .set("message.timeout.ms", &timeout_ms)
            .set("socket.timeout.ms", &timeout_ms);
        if let Delivery::Transactional { id } = &delivery {
            config
                .set("transactional.id", id)
                .set("transaction.timeout.ms", "60000");
        }
        Ok(Publisher {
            producer: producer(&config, &delivery, timeout)?,
            config,
            delivery,
            open: false,
            timeout,
            sent: 0,
        })
    }

    /// Whether a transaction is open (records sent since the last commit).
    pub fn in_transaction(&self) -> bool {
        self.open
    }

    /// Whether this publisher uses transactions.
    pub fn transactional(&self) -> bool {
        matches!(self.delivery, Delivery::Transactional { .. })
    }

    /// Sends a record (beginning a transaction if none is open); `remember` (a number the
    /// caller gives it) keeps where it lands ([`Publisher::remembered`], once flushed). Waits
    /// only while librdkafka's queue is full.
    pub fn send(&mut self, record: &OutRecord, remember: Option<u64>) -> Result<()> {
        if self.transactional() && !self.open {
            self.producer
                .begin_transaction()
                .map_err(|e| self.error("beginning a transaction", &e))?;
            self.open = true;
        }
        let headers = record.headers.to_owned_headers();
        let opaque = remember.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX - 1) + 1);
        let mut base = BaseRecord::with_opaque_to(&record.topic, opaque)
            .headers(headers)
            .timestamp(record.timestamp_ms);
        if let Some(key) = &record.key {
            base = base.key(key);
        }
        if let Some(value) = &record.value {
            base = base.payload(value);
        }
        let started = Instant::now();
        loop {
            match self.producer.send(base) {
                Ok(()) => {
                    self.sent += 1;
                    // Acknowledgements are served by the caller's polls (a thread of
                    // librdkafka's own would serve them only every 100ms, and a commit waits
                    // for them): now and then, and at every flush.
                    if self.sent.is_multiple_of(1024) {
                        self.producer.poll(Duration::ZERO);
                    }
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if started.elapsed() < self.timeout =>
                {
                    base = back;
                    self.producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => {
                    return Err(self.error(&format!("producing to {}", record.topic), &e));
                }
            }
        }
    }

    /// Waits until every record sent is acknowledged (or failed).
    pub fn flush(&mut self) -> Result<()> {
        self.drain()?;
        match self.producer.context().failed.lock().unwrap().take() {
            Some(e) => Err(self.error("producing", &e)),
            None => Ok(()),
        }
    }

    /// Where the record sent with `remember = Some(number)` landed, once flushed.
    pub fn remembered(&self, number: u64) -> Option<Place> {
        match &*self.producer.context().remembered.lock().unwrap() {
            Some((n, place)) if *n == number => Some(place.clone()),
            _ => None,
        }
    }

    /// Makes everything sent durable: commits the open transaction, or waits for every
    /// acknowledgement. On an error nothing since the last commit may be taken as written
    /// (the transaction was aborted): the caller starts again from its last commit.
    pub fn commit(&mut self) -> Result<()> {
        if !self.transactional() {
            return self.flush();
        }
        if !self.open {
            return Ok(());
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // rdkafka's commit flushes first, polling in steps of 100ms that it waits out
            // whole: with nothing in flight it goes straight to the commit.
            if let Err(e) = self.drain() {
                self.abort();
                return Err(e);
            }
            // A producer that failed for good on a record's answer never sent the commit:
            // nothing of the transaction is written, and a new producer takes over.
            if let Some(reason) = self.failed_unfenced() {
                self.abort();
                return Err(Error::transient(format!(
                    "kafka: committing a transaction: the producer failed for good before the commit ({reason}); a new one takes over"
                )));
            }
            match self.producer.commit_transaction(self.timeout) {
                Ok(()) => {
                    self.open = false;
                    self.producer.context().failed.lock().unwrap().take();
                    return Ok(());
                }
                Err(KafkaError::Transaction(t))
                    if t.is_retriable() && !t.txn_requires_abort() && attempt < COMMIT_ATTEMPTS =>
                {
                    tracing::warn!(error = %t, attempt, "committing a Kafka transaction; retrying");
                }
                Err(e) => {
                    let error = match self.failed_unfenced() {
                        Some(reason) => Error::permanent(format!(
                            "kafka: committing a transaction: the producer failed for good while committing ({reason}): whether the transaction committed is unknown"
                        )),
                        None => self.error("committing a transaction", &e),
                    };
                    if error.is_transient() {
                        self.abort();
                    }
                    self.open = false;
                    return Err(error);
                }
            }
        }
    }

    /// Serves acknowledgements until nothing is in flight (librdkafka frees a record once its
    /// acknowledgement is served).
    fn drain(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::transient(format!(
                    "kafka: the brokers did not acknowledge {} records within {:?}",
                    self.producer.in_flight_count(),
                    self.timeout
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Why librdkafka failed this producer for good, if it did and not for a fence (an
    /// idempotent producer's sequence lost with a restarted broker, say): it may write no
    /// more, but a new one with the same `transactional.id` may — it aborts what this one left
    /// open.
    pub fn failed_unfenced(&self) -> Option<String> {
        self.producer
            .client()
            .fatal_error()
            .filter(|(code, _)| !is_fence(*code))
            .map(|(_, reason)| reason)
    }

    /// Aborts the open transaction, if any (what was sent since the last commit is dropped),
    /// and makes a producer that failed for good, unfenced, anew.
    pub fn abort(&mut self) {
        if self.open
            && self.failed_unfenced().is_none()
            && let Err(e) = self.producer.abort_transaction(self.timeout)
        {
            tracing::warn!(error = %e, "aborting a Kafka transaction");
        }
        self.open = false;
        self.producer.context().failed.lock().unwrap().take();
        if let Err(e) = self.renew_if_failed() {
            tracing::warn!(error = %e, "making a Kafka producer anew (tried again at the next send)");
        }
    }

    /// Makes the producer anew if librdkafka failed it for good, unfenced.
    fn renew_if_failed(&mut self) -> Result<()> {
        if self.failed_unfenced().is_some() {
            self.producer = producer(&self.config, &self.delivery, self.timeout)?;
            self.open = false;
            tracing::info!(
                transactional_id = self.id(),
                "a Kafka producer that failed for good was made anew"
            );
        }
        Ok(())
    }

    fn id(&self) -> &str {
        match &self.delivery {
            Delivery::Transactional { id } => id,
            Delivery::Idempotent => "",
        }
    }

    /// `e`, met while doing `what`, as siphon's error. Once librdkafka has met a fatal error
    /// every call fails with `Fatal`: the fatal error itself says why (another producer
    /// fenced this one, most often).
    fn error(&self, what: &str, e: &KafkaError) -> Error {
        if is_fenced(e) {
            return fenced(self.id());
        }
        if let Some((code, reason)) = self.producer.client().fatal_error() {
            if is_fence(code) {
                return fenced(self.id());
            }
            return Error::transient(format!(
                "kafka: {what}: the producer failed for good ({reason}); a new one takes over"
            ));
        }
        match e {
            // Abortable: the transaction is gone, the producer usable; starting again helps.
            KafkaError::Transaction(t) if !t.is_fatal() => {
                Error::transient(format!("kafka: {what}: {t}"))
            }
            other => kafka_error(what, other),
        }
    }
}

/// A producer made with `config`; a transactional one fences the earlier producers of its id
/// (blocks up to `timeout`).
fn producer(
    config: &ClientConfig,
    delivery: &Delivery,
    timeout: Duration,
) -> Result<BaseProducer<Deliveries>> {
    let producer: BaseProducer<Deliveries> =
        BaseProducer::from_config_and_context(config, Deliveries::default())
            .map_err(|e| kafka_error("creating a producer", &e))?;
    if let Delivery::Transactional { id } = delivery {
        producer.init_transactions(timeout).map_err(|e| {
            if is_fenced(&e) {
                fenced(id)
            } else {
                kafka_error(&format!("starting the transactional producer {id}"), &e)
            }
        })?;
    }
    Ok(producer)
}

/// Another producer with the same `transactional.id` started: this one may write no more.
fn fenced(id: &str) -> Error {
    Error::permanent(format!(
        "kafka: another producer took over transactional.id {id:?} (a second siphon for this pipeline started?): this one stops writing"
    ))
}
