//! Cuts the log into sink batches that end on source-transaction boundaries.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use siphon_core::Result;
use siphon_core::log::{LogReader, LogRecord, RecordFlags};
use tokio::sync::Notify;

/// Reads a log for one sink and hands out batches of at most `max` records that end with
/// the last record of a source transaction whenever one is within reach. Only a transaction
/// larger than `max` is split, and never between the two halves of a key change (a record
/// flagged `WITH_NEXT` and the next), which may make such a batch one longer. A batch that
/// could take more waits up to `linger` for the log to grow, unless `hurry` is notified (a
/// read-your-writes wait is waiting for this sink). On a log that does not promise whole
/// transactions ([`LogPromises::whole_transactions`]) every record counts as a
/// transaction's end. Every method is cancel-safe.
///
/// [`LogPromises::whole_transactions`]: siphon_core::log::LogPromises::whole_transactions
#[derive(Debug)]
pub struct Batcher {
    reader: Box<dyn LogReader>,
    pending: VecDeque<LogRecord>,
    max: usize,
    linger: Duration,
    hurry: Arc<Notify>,
    whole_transactions: bool,
}

impl Batcher {
    pub fn new(
        reader: Box<dyn LogReader>,
        max: usize,
        linger: Duration,
        hurry: Arc<Notify>,
        whole_transactions: bool,
    ) -> Self {
        Batcher {
            reader,
            pending: VecDeque::new(),
            max,
            linger,
            hurry,
            whole_transactions,
        }
    }

    fn fill(&mut self) -> Result<()> {
        // One more than a batch when the record at its end goes with the next one.
        let limit = self.max
            + usize::from(
                self.pending
                    .get(self.max.saturating_sub(1))
                    .is_some_and(|r| r.flags.contains(RecordFlags::WITH_NEXT)),
            );
        let room = limit.saturating_sub(self.pending.len());
        if room > 0 {
            self.pending.extend(self.reader.read_available(room)?);
        }
        Ok(())
    }

    /// Where to cut a full batch inside a transaction larger than a batch: after `max`
    /// records, or one earlier or later so as not to part a key change; `None` until the
    /// record that completes it is read.
    fn split_point(&self) -> Option<usize> {
        let joined = |i: usize| self.pending[i].flags.contains(RecordFlags::WITH_NEXT);
        match self.max {
            n if !joined(n - 1) => Some(n),
            n if n > 1 => Some(n - 1),
            n => (self.pending.len() > n).then_some(n + 1),
        }
    }

    /// Length of the longest prefix of `pending` that ends a transaction, within `max` (never
    /// between the halves of a key change).
    fn complete_prefix(&self) -> usize {
        self.pending
            .iter()
            .take(self.max)
            .rposition(|r| {
                (r.flags.contains(RecordFlags::TXN_END) || !self.whole_transactions)
                    && !r.flags.contains(RecordFlags::WITH_NEXT)
            })
            .map_or(0, |i| i + 1)
    }

    /// The next batch; waits until there is one.
    pub async fn next(&mut self) -> Result<Vec<LogRecord>> {
        loop {
            self.fill()?;
            if self.pending.len() >= self.max {
                let n = match self.complete_prefix() {
                    0 => self.split_point(), // one transaction larger than a batch
                    n => Some(n),
                };
                if let Some(n) = n {
                    return Ok(self.pending.drain(..n).collect());
                }
            }
            if self.complete_prefix() > 0 {
                // Give the source a moment to fill the batch further, unless someone waits
                // to read what it holds.
                if !self.linger.is_zero() {
                    tokio::select! {
                        _ = tokio::time::timeout(self.linger, self.reader.wait()) => {}
                        () = self.hurry.notified() => {}
                    }
                    // Whatever is durable by now goes too. A wait hurries the sink once the
                    // records it needs are durable: a batch without them would make it wait
                    // for the next one.
                    self.fill()?;
                }
                let n = self.complete_prefix();
                return Ok(self.pending.drain(..n).collect());
            }
            // Nothing, or an unfinished transaction: wait for more of the log.
            self.reader.wait().await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::log::{ChangeLog, NewRecord};
    use siphon_core::testing::MemoryLog;
    use siphon_log_file::FileLog;

    use super::*;

    fn rec(end: bool) -> NewRecord {
        NewRecord {
            key: vec![],
            value: vec![1],
            flags: if end {
                RecordFlags::TXN_END
            } else {
                RecordFlags::default()
            },
        }
    }

    fn joined() -> NewRecord {
        NewRecord {
            flags: RecordFlags::WITH_NEXT,
            ..rec(false)
        }
    }

    #[tokio::test]
    async fn batches_end_on_transaction_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path(), Default::default()).unwrap();
        // Transactions of 3, 2, then an unfinished one of 2.
        log.append(vec![
            rec(false),
            rec(false),
            rec(true),
            rec(false),
            rec(true),
            rec(false),
            rec(false),
        ])
        .await
        .unwrap();
        let mut b = Batcher::new(
            log.reader(0).unwrap(),
            4,
            Duration::ZERO,
            Arc::default(),
            true,
        );
        let offsets = |v: Vec<LogRecord>| v.iter().map(|r| r.offset).collect::<Vec<_>>();
        assert_eq!(offsets(b.next().await.unwrap()), [0, 1, 2]);
        assert_eq!(offsets(b.next().await.unwrap()), [3, 4]);
        // The unfinished transaction waits for its end.
        let waiting = tokio::time::timeout(Duration::from_millis(100), b.next()).await;
        assert!(waiting.is_err(), "an unfinished transaction was handed out");
        log.append(vec![rec(true)]).await.unwrap();
        assert_eq!(offsets(b.next().await.unwrap()), [5, 6, 7]);
        // A transaction larger than a batch is split.
        log.append((0..9).map(|i| rec(i == 8)).collect())
            .await
            .unwrap();
        assert_eq!(offsets(b.next().await.unwrap()), [8, 9, 10, 11]);
        assert_eq!(offsets(b.next().await.unwrap()), [12, 13, 14, 15]);
        assert_eq!(offsets(b.next().await.unwrap()), [16]);
    }

    /// A log holding one transaction, and a batcher of it whose linger is far longer than a
    /// test may take, and what hurries it.
    async fn lingering_batcher() -> (tempfile::TempDir, FileLog, Batcher, Arc<Notify>) {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path(), Default::default()).unwrap();
        log.append(vec![rec(true)]).await.unwrap();
        let hurry = Arc::new(Notify::new());
        let batcher = Batcher::new(
            log.reader(0).unwrap(),
            4,
            Duration::from_secs(3600),
            hurry.clone(),
            true,
        );
        (dir, log, batcher, hurry)
    }

    #[tokio::test]
    async fn a_waiting_reader_cuts_the_linger_short() {
        let (_dir, _log, mut b, hurry) = lingering_batcher().await;
        let lingering = tokio::time::timeout(Duration::from_millis(100), b.next()).await;
        assert!(
            lingering.is_err(),
            "a batch with room went without lingering"
        );
        hurry.notify_one();
        let batch = tokio::time::timeout(Duration::from_secs(10), b.next())
            .await
            .expect("the linger went on after the hurry")
            .unwrap();
        assert_eq!(batch.len(), 1);
    }

    #[tokio::test]
    async fn a_hurried_batch_takes_the_records_durable_by_then() {
        // A wait hurries the sink once the records it needs are durable. The log's growth and
        // the hurry then wake the lingering batcher at the same moment; whichever it sees
        // first, the batch holds those records. (Either wake-up is picked at random: the
        // attempts make a batch that went without them all but certain to be seen.)
        for attempt in 0..24 {
            let (_dir, log, mut b, hurry) = lingering_batcher().await;
            let batch = tokio::spawn(async move { b.next().await });
            // The batcher lingers over the first transaction...
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                !batch.is_finished(),
                "a batch with room went without lingering"
            );
            // ...when the waited-for one becomes durable, and the wait hurries the sink,
            // before the batcher runs again.
            log.append_blocking(&[rec(true)]).unwrap();
            hurry.notify_one();
            let batch = tokio::time::timeout(Duration::from_secs(10), batch)
                .await
                .expect("the linger went on after the hurry")
                .unwrap()
                .unwrap();
            assert_eq!(
                batch.iter().map(|r| r.offset).collect::<Vec<_>>(),
                [0, 1],
                "attempt {attempt}: the hurried batch went without the durable record"
            );
        }
    }

    #[tokio::test]
    async fn a_key_change_is_never_split_between_batches() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path(), Default::default()).unwrap();
        let offsets = |v: Vec<LogRecord>| v.iter().map(|r| r.offset).collect::<Vec<_>>();
        // A big transaction whose 4th record is the first half of a key change.
        log.append(vec![
            rec(false),
            rec(false),
            rec(false),
            joined(),
            rec(false),
            rec(false),
            rec(true),
        ])
        .await
        .unwrap();
        let mut b = Batcher::new(
            log.reader(0).unwrap(),
            4,
            Duration::ZERO,
            Arc::default(),
            true,
        );
        assert_eq!(offsets(b.next().await.unwrap()), [0, 1, 2]);
        assert_eq!(offsets(b.next().await.unwrap()), [3, 4, 5, 6]);
        // With batches of one record, the pair goes together.
        log.append(vec![joined(), rec(false), rec(true)])
            .await
            .unwrap();
        let mut b = Batcher::new(
            log.reader(7).unwrap(),
            1,
            Duration::ZERO,
            Arc::default(),
            true,
        );
        assert_eq!(offsets(b.next().await.unwrap()), [7, 8]);
        assert_eq!(offsets(b.next().await.unwrap()), [9]);
        // After compaction every record ends a transaction, the first half of a key change
        // included: still no cut after it.
        log.append(vec![
            rec(true),
            NewRecord {
                flags: RecordFlags::WITH_NEXT.with(RecordFlags::TXN_END),
                ..rec(false)
            },
            rec(true),
        ])
        .await
        .unwrap();
        let mut b = Batcher::new(
            log.reader(10).unwrap(),
            2,
            Duration::ZERO,
            Arc::default(),
            true,
        );
        assert_eq!(offsets(b.next().await.unwrap()), [10]);
        assert_eq!(offsets(b.next().await.unwrap()), [11, 12]);
    }

    /// A log that does not promise whole transactions: no record waits for a mark that may
    /// never come.
    #[tokio::test]
    async fn without_transaction_marks_every_record_ends_a_batch() {
        let log = MemoryLog::default();
        log.append(vec![rec(false), rec(false), rec(false)])
            .await
            .unwrap();
        let mut b = Batcher::new(
            log.reader(0).unwrap(),
            2,
            Duration::ZERO,
            Arc::default(),
            false,
        );
        let offsets = |v: Vec<LogRecord>| v.iter().map(|r| r.offset).collect::<Vec<_>>();
        assert_eq!(offsets(b.next().await.unwrap()), [0, 1]);
        assert_eq!(offsets(b.next().await.unwrap()), [2]);
    }
}
