//! A change log in memory, for tests: it keeps every promise of [`ChangeLog`] within one
//! process (its records live as long as a handle to it) and compacts nothing. The log
//! compliance suite's own tests wrap it to show that the suite catches a broken log.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::MemorySchemas;
use crate::log::{
    ChangeLog, Consumer, LogId, LogPromises, LogReader, LogRecord, LogStats, MaintenanceReport,
    NewRecord,
};
use crate::schema::SchemaStore;
use crate::source::now_ms;
use crate::{Error, Result};

/// A log in memory; cheap to clone, clones share it.
#[derive(Debug, Clone)]
pub struct MemoryLog {
    inner: Arc<Inner>,
    writable: bool,
}

#[derive(Debug)]
struct Inner {
    id: LogId,
    schemas: MemorySchemas,
    /// Every record appended, durable or not, in offset order.
    records: Mutex<Vec<LogRecord>>,
    /// Offset after the last durable record.
    durable: watch::Sender<u64>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        MemoryLog {
            inner: Arc::new(Inner {
                id: LogId::random(),
                schemas: MemorySchemas::default(),
                records: Mutex::default(),
                durable: watch::Sender::new(0),
            }),
            writable: true,
        }
    }
}

impl MemoryLog {
    /// The same log, read-only (as a CLI beside the daemon opens it).
    pub fn read_only(&self) -> MemoryLog {
        MemoryLog {
            inner: self.inner.clone(),
            writable: false,
        }
    }

    /// The same log as a restarted process finds it: what was never made durable is gone.
    pub fn reopened(&self) -> MemoryLog {
        let end = *self.inner.durable.borrow();
        self.inner
            .records
            .lock()
            .unwrap()
            .retain(|r| r.offset < end);
        MemoryLog {
            inner: self.inner.clone(),
            writable: true,
        }
    }

    fn push(&self, records: Vec<NewRecord>, durable: bool) -> Result<Range<u64>> {
        if !self.writable {
            return Err(Error::Config("this change log was opened read-only".into()));
        }
        let mut held = self.inner.records.lock().unwrap();
        let first = held.last().map_or(0, |r| r.offset + 1);
        let timestamp_ms = now_ms();
        for (offset, r) in (first..).zip(records) {
            held.push(LogRecord {
                offset,
                timestamp_ms,
                flags: r.flags,
                key: r.key,
                value: r.value,
            });
        }
        let end = held.last().map_or(0, |r| r.offset + 1);
        if durable {
            self.inner.durable.send_replace(end);
        }
        Ok(first..end)
    }
}

#[async_trait]
impl ChangeLog for MemoryLog {
    async fn append(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.push(records, true)
    }

    async fn append_unsynced(&self, records: Vec<NewRecord>) -> Result<Range<u64>> {
        self.push(records, false)
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
        Ok(Box::new(MemoryReader {
            log: self.clone(),
            next: from,
            durable: self.inner.durable.subscribe(),
        }))
    }

    async fn last_record(&self) -> Result<Option<LogRecord>> {
        Ok(self.inner.records.lock().unwrap().last().cloned())
    }

    async fn maintain(&self, _: &[Consumer]) -> Result<MaintenanceReport> {
        Ok(MaintenanceReport::default())
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        None
    }

    fn stats(&self) -> LogStats {
        let records = self.inner.records.lock().unwrap();
        LogStats {
            start_offset: 0,
            end_offset: self.durable_end(),
            size_bytes: records
                .iter()
                .map(|r| (r.key.len() + r.value.len()) as u64)
                .sum(),
            segments: 1,
            fsyncs: 0,
        }
    }

    fn promises(&self) -> LogPromises {
        LogPromises {
            total_order: true,
            dense_offsets: true,
            transaction_marks: true,
        }
    }
}

/// Reads a [`MemoryLog`] in order; sees durable records only.
#[derive(Debug)]
struct MemoryReader {
    log: MemoryLog,
    next: u64,
    durable: watch::Receiver<u64>,
}

#[async_trait]
impl LogReader for MemoryReader {
    fn read_available(&mut self, max: usize) -> Result<Vec<LogRecord>> {
        let end = self.log.durable_end();
        let records = self.log.inner.records.lock().unwrap();
        let out: Vec<LogRecord> = records
            .iter()
            .filter(|r| r.offset >= self.next && r.offset < end)
            .take(max)
            .cloned()
            .collect();
        if let Some(last) = out.last() {
            self.next = last.offset + 1;
        }
        Ok(out)
    }

    async fn wait(&mut self) -> Result<()> {
        let next = self.next;
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
