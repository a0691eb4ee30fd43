//! Reads and decodes a sink's next batch, and passes it through the sink's stages, while the
//! sink applies the current one: decoding costs about as much as a fast store's write, so
//! doing both at once keeps both busy.

use std::sync::Arc;

use siphon_core::log::{ChangeLog, LogRecord, RecordFlags};
use siphon_core::position::PositionDecoder;
use siphon_core::sink::stage::Stages;
use siphon_core::sink::{SinkBatch, SinkRecord};
use siphon_core::{Error, Event};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::batcher::Batcher;

/// A batch ready for the sink.
#[derive(Debug)]
pub(super) struct DecodedBatch {
    /// Offset of the batch's first log record.
    pub first_offset: u64,
    /// Append time of its last log record, ms since the epoch.
    pub last_append_ms: i64,
    /// Where its last log record's change committed in the source, and when (ms since the
    /// epoch), whether or not this sink takes that record.
    pub last_commit: Option<(String, i64)>,
    /// The records this sink takes (routed, excluded columns removed; maybe none), the end
    /// of the stretch and whether it ends a source transaction.
    pub batch: SinkBatch,
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
    /// Starts reading `batcher`'s batches for a sink whose events pass through `stages`; the
    /// batches are `ordered` (the log's one order, see `SinkBatch::ordered`) or a consumer
    /// group's share of the log.
    pub fn start(
        mut batcher: Batcher,
        stages: Stages,
        log: Arc<dyn ChangeLog>,
        positions: Arc<dyn PositionDecoder>,
        ordered: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let task = tokio::spawn(async move {
            loop {
                let fetched = match batcher.next().await {
                    Ok(records) => match decode(&records, &stages, &*log, &*positions, ordered) {
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
        last_append_ms: last.timestamp_ms,
        last_commit: None,
        batch: SinkBatch {
            records: Vec::with_capacity(records.len()),
            end: last.offset + 1,
            ends_transaction: last.flags.contains(RecordFlags::TXN_END)
                || !(ordered && log.promises().whole_transactions()),
            ordered,
        },
    };
    for r in records {
        let decoded_event = Event::decode(&r.value, schemas, positions);
        if r.offset == last.offset
            && let Ok(event) = &decoded_event
        {
            decoded.last_commit = Some((event.source.position.commit_point(), event.source.ts_ms));
        }
        match decoded_event {
            Ok(mut event) => {
                if stages.apply(&mut event) {
                    decoded.batch.records.push(SinkRecord {
                        offset: r.offset,
                        event,
                    });
                }
            }
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
