//! The message-sink compliance suite: what every message sink (Redis Streams, NATS
//! JetStream, RabbitMQ, webhooks, Kafka) promises a consumer, checked against its real
//! broker through a [`MessageHarness`]. A message sink's test implements [`Broker`] for its
//! broker and runs this suite and the sink compliance suite on it through [`OnBroker`].

use crate::event::{Op, Value};
use crate::sink::{Sink, SinkBatch, SinkRecord};

use super::{SinkHarness, StoreState, TABLE, event, log_id, record, row, tables};

/// One message a consumer got: the event's id and its value.
pub type Delivered = (String, serde_json::Value);

/// A message sink under test and a consumer of its destination.
#[async_trait::async_trait]
pub trait MessageHarness: Send {
    /// The sink under test.
    fn sink(&mut self) -> &mut dyn Sink;

    /// Replaces the sink with a new one of the same settings (a daemon started again).
    fn restart(&mut self);

    /// Every message of the compliance table a consumer got so far, in arrival order.
    async fn delivered(&mut self) -> Vec<Delivered>;

    /// Whether the broker keeps each event once (by its id), rather than at least once.
    fn exactly_once(&self) -> bool;

    /// Breaks the sink's connection as a broker restart would; `false` if this harness
    /// cannot.
    async fn break_connection(&mut self) -> bool;
}

/// A message sink's broker as both compliance suites use it: all a new message sink's test
/// gives besides its broker's setup.
#[async_trait::async_trait]
pub trait Broker: Send + std::fmt::Debug {
    /// The sink's type.
    type Sink: Sink + std::fmt::Debug + 'static;

    /// A new sink on this broker, as a (re)started daemon makes it: every call gives one of
    /// the same settings.
    fn sink(&self) -> Self::Sink;

    /// Every message of table `public.<table>` a consumer got so far, in arrival order: each
    /// event's id and its value.
    async fn messages(&mut self, table: &str) -> Vec<Delivered>;

    /// Whether the broker keeps each event once (by its id), rather than at least once.
    fn exactly_once(&self) -> bool;

    /// Breaks the sink's connection as a broker restart would; `false` if this broker
    /// cannot.
    async fn break_connection(&mut self) -> bool;
}

/// A sink on a [`Broker`], as both suites' harness: `run_compliance_suite(async ||
/// OnBroker::new(…))` and `run_message_compliance_suite(async || OnBroker::new(…))`.
#[derive(Debug)]
pub struct OnBroker<B: Broker> {
    broker: B,
    sink: B::Sink,
}

impl<B: Broker> OnBroker<B> {
    /// A new sink on `broker`.
    pub fn new(broker: B) -> Self {
        OnBroker {
            sink: broker.sink(),
            broker,
        }
    }
}

#[async_trait::async_trait]
impl<B: Broker> SinkHarness for OnBroker<B> {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        let messages = self.broker.messages(table).await;
        StoreState::Lines(messages.into_iter().map(|(_, value)| value).collect())
    }
}

#[async_trait::async_trait]
impl<B: Broker> MessageHarness for OnBroker<B> {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    fn restart(&mut self) {
        self.sink = self.broker.sink();
    }

    async fn delivered(&mut self) -> Vec<Delivered> {
        self.broker.messages(TABLE).await
    }

    fn exactly_once(&self) -> bool {
        self.broker.exactly_once()
    }

    async fn break_connection(&mut self) -> bool {
        self.broker.break_connection().await
    }
}

/// Creates of ids `ids` in the compliance table, at offsets `first`, `first + 1`, ….
pub fn creates(first: u64, ids: std::ops::Range<i64>) -> Vec<SinkRecord> {
    ids.enumerate()
        .map(|(i, id)| {
            record(
                first + i as u64,
                event(TABLE, Op::Create, id, None, Some(row(id, "x", Value::Null))),
            )
        })
        .collect()
}

async fn apply(h: &mut impl MessageHarness, offsets: std::ops::Range<u64>) -> crate::Result<()> {
    let records = creates(offsets.start, offsets.start as i64..offsets.end as i64);
    let mut batch = SinkBatch::whole(records);
    batch.end = offsets.end;
    h.sink().apply(&batch).await
}

/// Checks what a consumer got: every copy of an id the same message, no duplicate where
/// the broker keeps each event once, and the first copies the offsets `expected` in order.
fn check_delivered(delivered: &[Delivered], exactly_once: bool, expected: std::ops::Range<u64>) {
    let mut first: Vec<&Delivered> = Vec::new();
    for message in delivered {
        match first.iter().find(|(id, _)| *id == message.0) {
            Some(seen) => {
                assert!(!exactly_once, "{} delivered twice", message.0);
                assert_eq!(seen.1, message.1, "two messages under id {}", message.0);
            }
            None => first.push(message),
        }
    }
    let ids: Vec<&str> = first.iter().map(|(id, _)| id.as_str()).collect();
    let want: Vec<String> = expected
        .map(|offset| format!("{}:{offset}", log_id()))
        .collect();
    assert_eq!(
        ids, want,
        "the events a consumer got, first copies in order"
    );
}

/// Opens the sink again as the runtime does after a transient error: retried while the
/// broker, restarting, answers that it is not ready yet (a Redis loading its data set), for
/// at most 30 s.
async fn reopen(h: &mut impl MessageHarness) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match h.sink().open(&tables(), &log_id()).await {
            Ok(_) => return,
            Err(e) if e.is_transient() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
}

/// Runs every check, each against a fresh harness from `make` whose sink is opened on the
/// suite's tables; panics on the first failure with what was expected.
pub async fn run_message_compliance_suite<H: MessageHarness>(mut make: impl AsyncFnMut() -> H) {
    // A batch applied twice adds nothing new, or only copies under the same ids.
    let mut h = make().await;
    h.sink().open(&tables(), &log_id()).await.expect("open");
    apply(&mut h, 0..4).await.expect("apply");
    apply(&mut h, 0..4).await.expect("apply again");
    let exactly_once = h.exactly_once();
    check_delivered(&h.delivered().await, exactly_once, 0..4);

    // A restart goes on after the last confirmed message: from the cursor the broker
    // keeps, if it keeps one, else from the runtime's (the batch's end).
    let mut h = make().await;
    h.sink().open(&tables(), &log_id()).await.expect("open");
    apply(&mut h, 0..4).await.expect("apply");
    h.restart();
    let cursor = h.sink().open(&tables(), &log_id()).await.expect("reopen");
    if let Some(cursor) = cursor {
        assert_eq!(cursor.next_offset, 4, "the cursor the broker keeps");
    }
    apply(&mut h, 4..8).await.expect("apply after the restart");
    check_delivered(&h.delivered().await, exactly_once, 0..8);

    // A broken connection is a transient error, and retried (open, then the batch again)
    // it goes through.
    let mut h = make().await;
    h.sink().open(&tables(), &log_id()).await.expect("open");
    apply(&mut h, 0..2).await.expect("apply");
    if h.break_connection().await {
        if let Err(e) = apply(&mut h, 2..4).await {
            assert!(e.is_transient(), "a broken connection is transient: {e}");
            reopen(&mut h).await;
            apply(&mut h, 2..4).await.expect("the batch again");
        }
        check_delivered(&h.delivered().await, exactly_once, 0..4);
    }
}
