//! Reads and decodes a sink's next batch, and passes it through the sink's stages, while the
//! sink applies the current one: decoding costs about as much as a fast store's write, so
//! doing both at once keeps both busy.

use std::sync::Arc;

use siphon_core::log::{ChangeLog, LogRecord, RecordFlags};
use siphon_core::position::PositionDecoder;
use siphon_core::sink::stage::Stages;
use siphon_core::sink::{SinkBatch, SinkRecord};
use siphon_core::{Error, Event, SourceInfo};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::batcher::Batcher;
use super::view::SinkView;

/// A batch ready for the sink.
#[derive(Debug)]
pub(super) struct DecodedBatch {
    /// Offset of the batch's first log record.
    pub first_offset: u64,
    /// When its first log record's change committed in the source (its append time if it
    /// does not decode), ms since the epoch: the oldest change the batch brings.
    pub first_commit_ms: i64,
    /// Append time of its last log record, ms since the epoch.
    pub last_append_ms: i64,
    /// Where its last log record's change committed in the source, and when (ms since the
    /// epoch), whether or not this sink takes that record.
    pub last_commit: Option<(String, i64)>,
    /// Where its last log record's change came from (a view's documents carry it).
    pub last_source: Option<SourceInfo>,
    /// The records this sink takes (routed, excluded columns removed, transformed; maybe
    /// none), the end of the stretch and whether it ends a source transaction.
    pub batch: SinkBatch,
    /// The records a stage could not pass, as the log holds them, and why: dead-lettered or
    /// the sink's error, as its `on_error` says.
    pub failed: Vec<(SinkRecord, String)>,
}

/// What the reading side hands over.
#[derive(Debug)]
pub(super) enum Fetched {
    Batch(DecodedBatch),
    /// The log could not be read (records lost to the size cap, damage).
    ReadFailed(Error),
    /// A record could not be decoded.
    Undecodable {
        offset: u64,
        error: Error,
    },
}

/// The reading task of one sink, one batch ahead; stopped when dropped.
#[derive(Debug)]
pub(super) struct Prefetch {
    rx: mpsc::Receiver<Fetched>,
    task: JoinHandle<()>,
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Prefetch {
    /// Starts reading `batcher`'s batches for a sink whose events pass through `stages` (and
    /// then `view`, whose documents it takes); the batches are `ordered` (the log's one
    /// order, see `SinkBatch::ordered`) or a consumer group's share of the log.
    pub fn start(
        mut batcher: Batcher,
        stages: Stages,
        view: Option<Arc<SinkView>>,
        log: Arc<dyn ChangeLog>,
        positions: Arc<dyn PositionDecoder>,
        ordered: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let reading = view.as_ref().map(|v| v.reading());
        let task = tokio::spawn(async move {
            loop {
                let fetched = match batcher.next().await {
                    Ok(records) => match decode(&records, &stages, &*log, &*positions, ordered) {
                        Some(Fetched::Batch(batch)) if let Some(view) = &view => {
                            match documents(view.clone(), batch, reading.unwrap_or(0)).await {
                                Ok(batch) => Fetched::Batch(batch),
                                Err(e) => Fetched::ReadFailed(e),
                            }
                        }
                        Some(fetched) => fetched,
                        None => continue,
                    },
                    Err(e) => Fetched::ReadFailed(e),
                };
                let last = !matches!(fetched, Fetched::Batch(_));
                if tx.send(fetched).await.is_err() || last {
                    return;
                }
            }
        });
        Prefetch { rx, task }
    }

    /// The next batch, or why there is none; cancel-safe.
    pub async fn next(&mut self) -> Fetched {
        self.rx.recv().await.unwrap_or_else(|| {
            Fetched::ReadFailed(Error::permanent("the log reading task stopped"))
        })
    }
}

/// Decodes one batch and passes its events through the sink's stages (`None` for no records). The stretch ends a transaction when
/// its last log record does, whether or not this sink takes that record (on a log without
/// whole transactions, every stretch does).
fn decode(
    records: &[LogRecord],
    stages: &Stages,
    log: &dyn ChangeLog,
    positions: &dyn PositionDecoder,
    ordered: bool,
) -> Option<Fetched> {
    let schemas = log.schemas();
    let (first, last) = (records.first()?, records.last()?);
    let mut decoded = DecodedBatch {
        first_offset: first.offset,
        first_commit_ms: first.timestamp_ms,
        last_append_ms: last.timestamp_ms,
        last_commit: None,
        last_source: None,
        batch: SinkBatch {
            records: Vec::with_capacity(records.len()),
            end: last.offset + 1,
            ends_transaction: last.flags.contains(RecordFlags::TXN_END)
                || !(ordered && log.promises().whole_transactions()),
            ordered,
        },
        failed: Vec::new(),
    };
    for r in records {
        let decoded_event = Event::decode(&r.value, schemas, positions);
        if r.offset == first.offset
            && let Ok(event) = &decoded_event
        {
            decoded.first_commit_ms = event.source.ts_ms;
        }
        if r.offset == last.offset
            && let Ok(event) = &decoded_event
        {
            decoded.last_commit = Some((event.source.position.commit_point(), event.source.ts_ms));
            decoded.last_source = Some(event.source.clone());
        }
        match decoded_event {
            Ok(mut event) => match stages.apply(&mut event) {
                Ok(true) => decoded.batch.records.push(SinkRecord {
                    offset: r.offset,
                    event,
                }),
                Ok(false) => {}
                Err(reason) => {
                    // The event as the log holds it: a stage may have changed it before
                    // failing. It decoded a moment ago.
                    let event = match Event::decode(&r.value, schemas, positions) {
                        Ok(event) => event,
                        Err(error) => {
                            return Some(Fetched::Undecodable {
                                offset: r.offset,
                                error,
                            });
                        }
                    };
                    let record = SinkRecord {
                        offset: r.offset,
                        event,
                    };
                    decoded.failed.push((record, reason));
                }
            },
            Err(error) => {
                return Some(Fetched::Undecodable {
                    offset: r.offset,
                    error,
                });
            }
        }
    }
    Some(Fetched::Batch(decoded))
}

/// Passes `decoded` through `view` ([`SinkView::documents`]) where blocking is allowed.
async fn documents(
    view: Arc<SinkView>,
    mut decoded: DecodedBatch,
    reading: u64,
) -> Result<DecodedBatch, Error> {
    tokio::task::spawn_blocking(move || {
        view.documents(&mut decoded.batch, decoded.last_source.as_ref(), reading)
            .map(|()| decoded)
    })
    .await
    .unwrap_or_else(|e| Err(Error::permanent(format!("the view's task: {e}"))))
}
