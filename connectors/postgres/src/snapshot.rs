//! The consistent initial snapshot: every table read with COPY inside a REPEATABLE READ
//! transaction that uses the slot's exported snapshot, several tables at once, row by row.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, Result, Row};
use tokio::sync::mpsc;

use crate::catalog::{Table, pg_error, quote_ident, quote_literal};
use crate::copy::parse_line;
use crate::events::{EventFactory, PG_EPOCH_MICROS, Place, Shape};

/// Rows per message from a reader to the appender.
const BATCH: usize = 1000;
/// Events per append (one fsync each).
const APPEND: usize = 20_000;

/// What to snapshot and how.
pub struct Snapshot {
    pub pg: tokio_postgres::Config,
    pub snapshot_name: String,
    pub consistent_point: u64,
    pub tables: Vec<(Table, Shape)>,
    pub parallelism: usize,
    pub factory: EventFactory,
}

impl Snapshot {
    /// Reads every table into the log; returns the rows read.
    pub async fn run(self, ctx: &SourceContext) -> Result<u64> {
        let started = Instant::now();
        let total_estimate: i64 = self.tables.iter().map(|(t, _)| t.estimated_rows).sum();
        tracing::info!(
            pipeline = %ctx.pipeline, tables = self.tables.len(), estimated_rows = total_estimate,
            consistent_point = self.consistent_point, "snapshot starting"
        );
        let shapes: Vec<Shape> = self.tables.iter().map(|(_, s)| s.clone()).collect();
        let queue: Arc<Mutex<VecDeque<(usize, Table)>>> = Arc::new(Mutex::new(
            self.tables
                .iter()
                .map(|(t, _)| t.clone())
                .enumerate()
                .collect(),
        ));
        // Rows travel in batches: one channel operation per thousand rows, not per row.
        let (tx, mut rx) = mpsc::channel::<Result<(usize, Vec<Row>)>>(8);
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.parallelism.min(self.tables.len()).max(1) {
            let (queue, tx, pg, name) = (
                queue.clone(),
                tx.clone(),
                self.pg.clone(),
                self.snapshot_name.clone(),
            );
            let shapes = shapes.clone();
            workers.spawn(async move {
                if let Err(e) = read_tables(&pg, &name, &queue, &shapes, &tx).await {
                    let _ = tx.send(Err(e)).await;
                }
            });
        }
        drop(tx);

        let now_pg = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64))
            - PG_EPOCH_MICROS;
        let mut index = 0u64;
        let mut batch: Vec<Event> = Vec::with_capacity(APPEND + 1);
        let mut last_progress = Instant::now();
        let mut held: Option<Event> = None;
        loop {
            let next = tokio::select! {
                _ = ctx.cancel.cancelled() => {
                    workers.abort_all();
                    return Err(Error::Cancelled);
                }
                next = rx.recv() => next,
            };
            let Some(item) = next else { break };
            let (table, rows) = item?;
            let shape = &shapes[table];
            for row in rows {
                let key = shape.key_of(&row);
                let at = Place {
                    commit_lsn: self.consistent_point,
                    lsn: self.consistent_point,
                    index,
                    xid: None,
                    commit_time_micros: now_pg,
                    snapshot: SnapshotMarker::True,
                    table_order: 0,
                };
                index += 1;
                // The newest row waits, so that the very last one can be marked `last`.
                if let Some(prev) =
                    held.replace(
                        self.factory
                            .event(shape, Op::Read, None, Some(row), key, at),
                    )
                {
                    batch.push(prev);
                }
                if batch.len() >= BATCH {
                    ctx.append(&batch, true).await?;
                    batch.clear();
                }
            }
            if last_progress.elapsed() > Duration::from_secs(5) {
                tracing::info!(pipeline = %ctx.pipeline, rows = index, estimated_rows = total_estimate, "snapshot progress");
                last_progress = Instant::now();
            }
        }
        while let Some(done) = workers.join_next().await {
            done.map_err(|e| Error::permanent(format!("a snapshot reader failed: {e}")))?;
        }
        if let Some(mut last) = held {
            last.source.snapshot = SnapshotMarker::Last;
            batch.push(last);
        }
        if !batch.is_empty() {
            ctx.append(&batch, true).await?;
        }
        tracing::info!(pipeline = %ctx.pipeline, rows = index, elapsed = ?started.elapsed(), "snapshot done");
        Ok(index)
    }
}

async fn read_tables(
    pg: &tokio_postgres::Config,
    snapshot_name: &str,
    queue: &Mutex<VecDeque<(usize, Table)>>,
    shapes: &[Shape],
    tx: &mpsc::Sender<Result<(usize, Vec<Row>)>>,
) -> Result<()> {
    let client = crate::connect(pg).await?;
    loop {
        let Some((i, table)) = queue.lock().unwrap().pop_front() else {
            return Ok(());
        };
        let shape = &shapes[i];
        client
            .batch_execute(&format!(
                "begin isolation level repeatable read read only; set transaction snapshot {}",
                quote_literal(snapshot_name)
            ))
            .await
            .map_err(|e| pg_error("starting the snapshot transaction", &e))?;
        let columns: Vec<String> = shape.columns.iter().map(|(c, _)| quote_ident(c)).collect();
        let sql = format!(
            "copy (select {} from {}) to stdout",
            columns.join(", "),
            table.quoted()
        );
        let stream = client
            .copy_out(sql.as_str())
            .await
            .map_err(|e| pg_error("reading a table", &e))?;
        let mut stream = std::pin::pin!(stream);
        let mut carry: Vec<u8> = Vec::new();
        let mut rows = 0u64;
        let mut out: Vec<Row> = Vec::with_capacity(BATCH);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| pg_error("reading a table", &e))?;
            carry.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(nl) = carry[start..].iter().position(|b| *b == b'\n') {
                let line = &carry[start..start + nl];
                let fields = parse_line(line)
                    .map_err(|e| Error::permanent(format!("COPY of {}: {e}", table.qualified())))?;
                let values = fields
                    .into_iter()
                    .enumerate()
                    .map(|(c, f)| f.map_or(siphon_core::Value::Null, |t| shape.decode_owned(c, t)))
                    .collect();
                out.push(shape.row(values));
                if out.len() >= BATCH && tx.send(Ok((i, std::mem::take(&mut out)))).await.is_err() {
                    return Ok(()); // the appender stopped
                }
                rows += 1;
                start += nl + 1;
            }
            carry.drain(..start);
        }
        if !out.is_empty() && tx.send(Ok((i, std::mem::take(&mut out)))).await.is_err() {
            return Ok(());
        }
        client
            .batch_execute("commit")
            .await
            .map_err(|e| pg_error("ending the snapshot transaction", &e))?;
        tracing::info!(table = %table.qualified(), rows, "table snapshot done");
    }
}
