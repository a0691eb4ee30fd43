//! Reading the file log from an offset, waking on appends.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::FileLog;
use super::segment::{Next, SegmentCursor};
use siphon_core::log::{LogReader, LogRecord};
use siphon_core::{Error, Result};

/// How often a reader of a read-only log looks for the writer's new records.
const READ_ONLY_POLL: Duration = Duration::from_millis(250);

/// Reads a [`FileLog`] in order. Sees only durable records.
#[derive(Debug)]
pub struct FileLogReader {
    log: FileLog,
    /// Offset of the next record to return (or the first one after it, across gaps).
    next: u64,
    /// The open segment and its base.
    current: Option<(u64, SegmentCursor)>,
    durable: watch::Receiver<u64>,
}

impl FileLogReader {
    pub(super) fn new(log: FileLog, from: u64) -> Self {
        let durable = log.inner.durable.subscribe();
        FileLogReader {
            log,
            next: from,
            current: None,
            durable,
        }
    }

    /// Opens the segment holding `self.next`; `false` if the log has nothing there yet.
    fn open_current(&mut self) -> Result<bool> {
        self.current = self.log.inner.cursor_at(self.next)?;
        Ok(self.current.is_some())
    }

    /// The base of the segment after `base`, if there is one.
    fn following(&self, base: u64) -> Option<u64> {
        let segments = self.log.inner.segments.read().unwrap();
        segments.iter().find(|s| s.base > base).map(|s| s.base)
    }
}

#[async_trait]
impl LogReader for FileLogReader {
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>> {
        let limit = self.log.inner.durable_end();
        // At most one record an offset: sized once rather than grown record by record.
        let room = limit.saturating_sub(self.next).min(max as u64).min(1 << 16);
        let mut out = Vec::with_capacity(room as usize);
        while out.len() < max && self.next < limit {
            if self.current.is_none() && !self.open_current()? {
                break;
            }
            let (base, cursor) = self.current.as_mut().expect("opened above");
            match cursor.next(limit)? {
                Next::Record(rec) if rec.offset < self.next => {}
                Next::Record(rec) => {
                    self.next = rec.offset + 1;
                    out.push(rec);
                }
                Next::End => {
                    let base = *base;
                    match self.following(base) {
                        // The rest of this segment is gone (compacted): go on in the next one.
                        Some(next_base) => {
                            self.next = self.next.max(next_base);
                            self.current = None;
                        }
                        None => break,
                    }
                }
            }
        }
        Ok(out)
    }

    async fn wait(&mut self) -> Result<()> {
        let next = self.next;
        if self.log.is_read_only() {
            // Another process appends: look for its records now and then.
            tokio::time::sleep(READ_ONLY_POLL).await;
            return self.log.refresh();
        }
        self.durable
            .wait_for(|end| *end > next)
            .await
            .map(|_| ())
            .map_err(|_| Error::Cancelled)
    }

    fn position(&self) -> u64 {
        self.next
    }
}
