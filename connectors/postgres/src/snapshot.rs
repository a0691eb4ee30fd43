//! The consistent initial snapshot: every table read with COPY inside a REPEATABLE READ
//! transaction that uses the slot's exported snapshot, several tables at once, row by row.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use siphon_core::event::{Op, ReadEncoder, ReadMeta, SnapshotMarker};
use siphon_core::log::{NewRecord, RecordFlags};
use siphon_core::source::{SourceContext, encode_events, now_ms};
use siphon_core::{Error, Event, Result, Value};
use tokio::sync::mpsc;

use crate::binary;
use crate::binary::PG_EPOCH_MICROS;
use crate::catalog::{Table, pg_error, quote_ident, quote_literal};
use crate::events::{EventFactory, Place, Shape};
use crate::position::PgPosition;

/// Rows per message from a reader to the appender.
const BATCH: usize = 1000;
/// Events per append.
const APPEND: usize = 20_000;
/// Rows between two fsyncs of the snapshot.
const SYNC_EVERY: u64 = 200_000;

/// What to snapshot and how.
pub struct Snapshot {
    pub conn: crate::Conn,
    pub snapshot_name: String,
    pub consistent_point: u64,
    pub tables: Vec<(Table, Shape)>,
    pub parallelism: usize,
    pub factory: EventFactory,
    /// The log holds events of an earlier snapshot or stream (a snapshot that did not finish,
    /// or a lost slot): each table is truncated first, so that rows deleted since then do
    /// not survive in the sinks.
    pub replaces_earlier: bool,
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
        let tables: Arc<Vec<Table>> =
            Arc::new(self.tables.iter().map(|(t, _)| t.clone()).collect());
        let work = chunks(&self.tables, self.parallelism);
        let mut markers = Markers::new(&work);
        let now_pg = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64))
            - PG_EPOCH_MICROS;
        let (mut workers, mut rx) = self.spawn_readers(work, &tables, &shapes, now_pg);
        let bar = progress_bar(total_estimate);
        ctx.metrics.set("snapshot_running", 1.0);
        ctx.metrics.set("snapshot_rows", 0.0);
        ctx.metrics
            .set("snapshot_rows_estimated", total_estimate as f64);
        if self.replaces_earlier {
            self.truncate_earlier(ctx, &shapes, now_pg).await?;
        }
        let mut rows = 0u64;
        let mut synced_at = 0u64;
        let mut pending: Vec<NewRecord> = Vec::with_capacity(APPEND + BATCH);
        let mut last_progress = Instant::now();
        loop {
            let next = tokio::select! {
                _ = ctx.cancel.cancelled() => {
                    workers.abort_all();
                    return Err(Error::Cancelled);
                }
                next = rx.recv() => next,
            };
            let Some(item) = next else { break };
            let batch = match item? {
                Piece::Rows(batch) => *batch,
                Piece::ChunkDone(table) => {
                    markers.chunk_done(table, &mut pending)?;
                    continue;
                }
            };
            rows += batch.records.len() as u64;
            markers.take(batch, &mut pending)?;
            if pending.len() >= APPEND {
                // Durable (and visible to sinks) every SYNC_EVERY rows and at the end; nothing is
                // confirmed upstream before the snapshot is done, so an fsync per batch buys
                // nothing but stalls.
                let batch = std::mem::take(&mut pending);
                if rows - synced_at >= SYNC_EVERY {
                    ctx.append_records(batch).await?;
                    synced_at = rows;
                } else {
                    ctx.append_records_unsynced(batch).await?;
                }
            }
            ctx.metrics.set("snapshot_rows", rows as f64);
            if let Some(bar) = &bar {
                bar.set_position(rows);
            }
            if last_progress.elapsed() > Duration::from_secs(5) {
                tracing::info!(pipeline = %ctx.pipeline, rows, estimated_rows = total_estimate, "snapshot progress");
                last_progress = Instant::now();
            }
        }
        while let Some(done) = workers.join_next().await {
            done.map_err(|e| Error::permanent(format!("a snapshot reader failed: {e}")))?;
        }
        markers.finish(&mut pending)?;
        if !pending.is_empty() {
            ctx.append_records(pending).await?;
        }
        ctx.metrics.set("snapshot_rows", rows as f64);
        ctx.metrics.set("snapshot_running", 0.0);
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        tracing::info!(pipeline = %ctx.pipeline, rows, elapsed = ?started.elapsed(), "snapshot done");
        Ok(rows)
    }
}

impl Snapshot {
    /// As many readers as there are chunks to read at once (a big table makes several), each
    /// taking the next chunk of `work`; they decode and encode rows in batches, sent to the
    /// receiver, and the appender only writes them.
    fn spawn_readers(
        &self,
        work: VecDeque<Chunk>,
        tables: &Arc<Vec<Table>>,
        shapes: &[Shape],
        now_pg: i64,
    ) -> (tokio::task::JoinSet<()>, mpsc::Receiver<Result<Piece>>) {
        let readers = self.parallelism.min(work.len()).max(1);
        let queue: Arc<Mutex<VecDeque<Chunk>>> = Arc::new(Mutex::new(work));
        let (tx, rx) = mpsc::channel::<Result<Piece>>(32);
        let next_index = Arc::new(AtomicU64::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..readers {
            let reader = Reader {
                conn: self.conn.clone(),
                snapshot_name: self.snapshot_name.clone(),
                queue: queue.clone(),
                tables: tables.clone(),
                shapes: shapes.to_vec(),
                factory: self.factory.clone(),
                consistent_point: self.consistent_point,
                commit_time_micros: now_pg,
                next_index: next_index.clone(),
            };
            let tx = tx.clone();
            workers.spawn(async move {
                if let Err(e) = reader.read_tables(&tx).await {
                    let _ = tx.send(Err(e)).await;
                }
            });
        }
        (workers, rx)
    }

    /// The log holds an earlier snapshot or stream: a truncate event for each table first.
    async fn truncate_earlier(
        &self,
        ctx: &SourceContext,
        shapes: &[Shape],
        now_pg: i64,
    ) -> Result<()> {
        let truncates: Vec<Event> = shapes
            .iter()
            .map(|shape| {
                let at = Place::snapshot(self.consistent_point, now_pg, 0, None);
                self.factory
                    .event(shape, Op::Truncate, None, None, None, at)
            })
            .collect();
        ctx.append(&truncates, true).await?;
        tracing::info!(pipeline = %ctx.pipeline, tables = truncates.len(), "the log holds an earlier snapshot or stream: its tables are truncated before this snapshot");
        Ok(())
    }
}

/// On a terminal, a bar of the snapshot's rows (the logs and metrics carry the same).
fn progress_bar(estimate: i64) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(estimate.max(0) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "snapshot [{bar:40}] {pos}/~{len} rows ({per_sec}, eta {eta})",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar
    })
}

/// Debezium's markers: the snapshot's first row `first`, each other table's first
/// `first_in_data_collection`, each table's last `last_in_data_collection` but the very last,
/// `last`. A table's newest last row waits until the next batch of it comes or all its
/// chunks are read, so that it can still be marked.
struct Markers {
    /// Each table's newest row, held back.
    held: HashMap<usize, (NewRecord, Event)>,
    /// Tables whose first row was read.
    started: HashSet<usize>,
    /// Chunks each table has still to read, and the tables with any.
    chunks_left: HashMap<usize, usize>,
    tables_left: usize,
}

impl Markers {
    fn new(work: &VecDeque<Chunk>) -> Markers {
        let mut chunks_left: HashMap<usize, usize> = HashMap::new();
        for chunk in work {
            *chunks_left.entry(chunk.table).or_default() += 1;
        }
        Markers {
            held: HashMap::new(),
            started: HashSet::new(),
            tables_left: chunks_left.len(),
            chunks_left,
        }
    }

    /// A chunk of `table` is read to its end: once all of them are, and unless it is the
    /// last table to finish, its last row is its own.
    fn chunk_done(&mut self, table: usize, pending: &mut Vec<NewRecord>) -> Result<()> {
        let left = self.chunks_left.entry(table).or_default();
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.tables_left = self.tables_left.saturating_sub(1);
            if self.tables_left > 0
                && let Some((_, event)) = self.held.remove(&table)
            {
                pending.push(remark(event, SnapshotMarker::LastInTable)?);
            }
        }
        Ok(())
    }

    /// A batch's rows go to `pending`, its first marked when it starts its table, its last
    /// held back (and the row held before it released).
    fn take(&mut self, mut batch: Encoded, pending: &mut Vec<NewRecord>) -> Result<()> {
        if self.started.insert(batch.table) {
            let marker = if self.started.len() == 1 {
                SnapshotMarker::First
            } else {
                SnapshotMarker::FirstInTable
            };
            let mut first = batch.first_event.clone();
            first.source.snapshot = marker;
            let flags = batch.records[0].flags;
            batch.records[0] = encode_events(&[first.clone()], &[])?.remove(0);
            batch.records[0].flags = flags;
            if batch.records.len() == 1 {
                batch.last_event = first;
            }
        }
        let last = batch.records.pop().expect("batches are not empty");
        if let Some((record, _)) = self.held.insert(batch.table, (last, batch.last_event)) {
            pending.push(record);
        }
        pending.append(&mut batch.records);
        Ok(())
    }

    /// What still waits is the last table's last row (and, had a reader stopped early,
    /// others, which keep their order by table): the very last is `last`.
    fn finish(self, pending: &mut Vec<NewRecord>) -> Result<()> {
        let mut rest: Vec<(usize, (NewRecord, Event))> = self.held.into_iter().collect();
        rest.sort_by_key(|(table, _)| *table);
        if let Some((_, (_, last))) = rest.pop() {
            pending.extend(rest.into_iter().map(|(_, (record, _))| record));
            pending.push(remark(last, SnapshotMarker::Last)?);
        }
        Ok(())
    }
}

/// The snapshot's last row of a table re-marked, ending its "transaction" as before.
fn remark(mut event: Event, marker: SnapshotMarker) -> Result<NewRecord> {
    event.source.snapshot = marker;
    Ok(encode_events(&[event], &[0])?.remove(0))
}

/// What a reader sends the appender.
enum Piece {
    /// A batch of rows (boxed: a batch is large, the other variant an index).
    Rows(Box<Encoded>),
    /// A chunk of that table (by index) is read to its end.
    ChunkDone(usize),
}

/// A batch of rows of one table, encoded for the log; its last record ends a "transaction"
/// (so sinks may apply it), and its first and last events are kept to be re-marked if they
/// are their table's or the snapshot's first or last.
struct Encoded {
    /// The table's index in the snapshot.
    table: usize,
    records: Vec<NewRecord>,
    first_event: Event,
    last_event: Event,
}

/// A part of a table for one reader: one of its leaves (itself, or a partition), pages
/// `[first, end)` of it (to its end when `end` is `None`) or the whole leaf.
#[derive(Debug, Clone)]
struct Chunk {
    table: usize,
    leaf: usize,
    pages: Option<(i64, Option<i64>)>,
}

/// Pages per reader below which a table is not split.
const MIN_CHUNK_PAGES: i64 = 1000;

/// The work of a snapshot: each table whole, or a big one split into page ranges so that
/// several readers share it (TID range scans, PostgreSQL 14+).
fn chunks(tables: &[(Table, Shape)], parallelism: usize) -> VecDeque<Chunk> {
    let mut out = VecDeque::new();
    for (table, (t, _)) in tables.iter().enumerate() {
        for (leaf, l) in t.leaves.iter().enumerate() {
            let n = (l.pages / MIN_CHUNK_PAGES).clamp(1, parallelism.max(1) as i64);
            if n == 1 {
                out.push_back(Chunk {
                    table,
                    leaf,
                    pages: None,
                });
                continue;
            }
            let per = l.pages / n;
            for k in 0..n {
                let end = (k + 1 < n).then(|| (k + 1) * per);
                out.push_back(Chunk {
                    table,
                    leaf,
                    pages: Some((k * per, end)),
                });
            }
        }
    }
    out
}

/// One snapshot reader: takes chunks from the queue until it is empty.
struct Reader {
    conn: crate::Conn,
    snapshot_name: String,
    queue: Arc<Mutex<VecDeque<Chunk>>>,
    tables: Arc<Vec<Table>>,
    shapes: Vec<Shape>,
    factory: EventFactory,
    consistent_point: u64,
    commit_time_micros: i64,
    next_index: Arc<AtomicU64>,
}

impl Reader {
    /// The records of `rows` of table `shape`, encoded straight from their values (see
    /// [`ReadEncoder`]); only the batch's first and last rows become events, which the
    /// snapshot's markers may need to mark again.
    fn encode(
        &self,
        (table, shape): (usize, &Shape),
        encoder: &ReadEncoder,
        rows: Vec<Vec<Value>>,
        xid: Option<u32>,
    ) -> Result<Encoded> {
        let first = self
            .next_index
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        let place = |i: usize| {
            Place::snapshot(
                self.consistent_point,
                self.commit_time_micros,
                first + i as u64,
                xid,
            )
        };
        // Read now: one time for the batch, its rows read within the same moment.
        let ts_ms = now_ms();
        let mut position = Vec::with_capacity(16);
        let mut records = Vec::with_capacity(rows.len());
        for (i, values) in rows.iter().enumerate() {
            let at = place(i);
            PgPosition {
                commit_lsn: at.commit_lsn,
                lsn: at.lsn,
                index: at.index,
            }
            .encode_into(&mut position);
            records.push(encoder.record(
                values,
                &ReadMeta {
                    position: &position,
                    tx_id: at.xid.map(u64::from),
                    source_ts_ms: (at.commit_time_micros + PG_EPOCH_MICROS) / 1000,
                    snapshot: at.snapshot,
                    ts_ms,
                },
            )?);
        }
        let last = records.last_mut().expect("batches are not empty");
        last.flags = last.flags.with(RecordFlags::TXN_END);
        let event = |i: usize, values: Vec<Value>| {
            let row = shape.row(values);
            let key = shape.key_of(&row);
            let mut event = self
                .factory
                .event(shape, Op::Read, None, Some(row), key, place(i));
            event.ts_ms = ts_ms;
            event
        };
        let first_event = event(0, rows[0].clone());
        let last_index = rows.len() - 1;
        let last_event = event(last_index, rows.into_iter().last().expect("not empty"));
        Ok(Encoded {
            table,
            records,
            first_event,
            last_event,
        })
    }

    /// Encodes the rows in `rows` (leaving it empty) and sends them to the appender; `false`
    /// once the appender has stopped.
    async fn send(
        &self,
        tx: &mpsc::Sender<Result<Piece>>,
        table: (usize, &Shape),
        encoder: &ReadEncoder,
        rows: &mut Vec<Vec<Value>>,
        xid: Option<u32>,
    ) -> Result<bool> {
        let batch = self.encode(table, encoder, std::mem::take(rows), xid)?;
        Ok(tx.send(Ok(Piece::Rows(Box::new(batch)))).await.is_ok())
    }

    /// Begins a chunk's transaction in the exported snapshot; the snapshot rows' txId
    /// (Debezium gives one): the first transaction the exported snapshot does not see, as a
    /// 32-bit xid like the stream's.
    async fn begin_chunk(&self, client: &tokio_postgres::Client) -> Result<Option<u32>> {
        client
            .batch_execute(&format!(
                "begin isolation level repeatable read read only; set transaction snapshot {}",
                quote_literal(&self.snapshot_name)
            ))
            .await
            .map_err(|e| pg_error("starting the snapshot transaction", &e))?;
        let xid: Option<u32> = client
            .query_one(
                "select (txid_snapshot_xmax(txid_current_snapshot()) % 4294967296)::bigint",
                &[],
            )
            .await
            .map_err(|e| pg_error("reading the snapshot's transaction id", &e))?
            .get::<_, i64>(0)
            .try_into()
            .ok();
        Ok(xid)
    }

    async fn read_tables(&self, tx: &mpsc::Sender<Result<Piece>>) -> Result<()> {
        let client = self.conn.connect().await?;
        loop {
            let Some(chunk) = self.queue.lock().unwrap().pop_front() else {
                return Ok(());
            };
            let table_index = chunk.table;
            let (table, shape) = (&self.tables[table_index], &self.shapes[table_index]);
            let xid = self.begin_chunk(&client).await?;
            let (sql, binary) = copy_sql(table, shape, &chunk);
            let stream = client
                .copy_out(sql.as_str())
                .await
                .map_err(|e| pg_error("reading a table", &e))?;
            let mut stream = std::pin::pin!(stream);
            let mut carry: Vec<u8> = Vec::new();
            let mut rows = 0u64;
            let mut out: Vec<Vec<Value>> = Vec::with_capacity(BATCH);
            let encoder = ReadEncoder::new(shape.table_schema.clone())?;
            let mut tuples = binary::CopyReader::default();
            let bad = |e: String| Error::permanent(format!("COPY of {}: {e}", table.table_name()));
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| pg_error("reading a table", &e))?;
                carry.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some((tuple, used)) = tuples.next(&carry[start..]).map_err(bad)? {
                    start += used;
                    let binary::Tuple::Fields(fields) = tuple else {
                        continue;
                    };
                    let values = fields
                        .into_iter()
                        .enumerate()
                        .map(|(c, f)| match f {
                            None => Value::Null,
                            Some(bytes) if binary[c] => binary::decode(&shape.columns[c].1, bytes)
                                .unwrap_or_else(|e| {
                                    shape.undecodable(c, &String::from_utf8_lossy(bytes), &e)
                                }),
                            Some(bytes) => shape.decode(c, String::from_utf8_lossy(bytes)),
                        })
                        .collect();
                    out.push(values);
                    if out.len() >= BATCH
                        && !self
                            .send(tx, (table_index, shape), &encoder, &mut out, xid)
                            .await?
                    {
                        return Ok(()); // the appender stopped
                    }
                    rows += 1;
                }
                carry.drain(..start);
            }
            if !out.is_empty()
                && !self
                    .send(tx, (table_index, shape), &encoder, &mut out, xid)
                    .await?
            {
                return Ok(());
            }
            if tx.send(Ok(Piece::ChunkDone(table_index))).await.is_err() {
                return Ok(());
            }
            client
                .batch_execute("commit")
                .await
                .map_err(|e| pg_error("ending the snapshot transaction", &e))?;
            let leaf = &table.leaves[chunk.leaf].quoted;
            tracing::info!(table = %table.table_name(), %leaf, pages = ?chunk.pages, rows, "table snapshot done");
        }
    }
}

/// The COPY that reads `chunk` of `table`, and which of its columns come in binary.
fn copy_sql(table: &Table, shape: &Shape, chunk: &Chunk) -> (String, Vec<bool>) {
    // Binary COPY: no text to parse. A column whose type siphon keeps as text is read
    // as its type's output function prints it, which is what pgoutput sends: not
    // `::text`, which for some types is a cast of its own (`'192.168.0.1'::inet::text`
    // is `192.168.0.1/32`).
    let binary: Vec<bool> = shape
        .columns
        .iter()
        .map(|(_, ty)| binary::supported(ty))
        .collect();
    let columns: Vec<String> = shape
        .columns
        .iter()
        .zip(&binary)
        .map(|((c, _), &bin)| {
            let c = quote_ident(c);
            if bin {
                c
            } else {
                format!("case when {c} is null then null else format('%s', {c}) end")
            }
        })
        .collect();
    let range = match chunk.pages {
        None => String::new(),
        Some((first, None)) => format!(" where ctid >= '({first},0)'::tid"),
        Some((first, Some(end))) => {
            format!(" where ctid >= '({first},0)'::tid and ctid < '({end},0)'::tid")
        }
    };
    let leaf = &table.leaves[chunk.leaf];
    let sql = format!(
        "copy (select {} from {}{range}) to stdout (format binary)",
        columns.join(", "),
        leaf.quoted
    );
    (sql, binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pages: &[i64]) -> (Table, Shape) {
        let t = Table {
            oid: 1,
            schema: "s".into(),
            name: "t".into(),
            key: vec![],
            columns: vec![],
            replica_identity: 'd',
            estimated_rows: 0,
            leaves: pages
                .iter()
                .map(|&pages| crate::catalog::Leaf {
                    quoted: "s.t".into(),
                    pages,
                    estimated_rows: 0,
                })
                .collect(),
        };
        (
            t,
            Shape {
                schema: "s".into(),
                table: "t".into(),
                columns: vec![],
                key: vec![],
                table_schema: std::sync::Arc::new(siphon_core::schema::TableSchema {
                    id: siphon_core::schema::SchemaId::UNREGISTERED,
                    connector: "postgresql".into(),
                    server: "p".into(),
                    database: "d".into(),
                    schema: Some("s".into()),
                    table: "t".into(),
                    columns: vec![],
                    key: vec![],
                }),
            },
        )
    }

    #[test]
    fn big_tables_are_split_between_readers_and_the_last_chunk_is_open_ended() {
        let got: Vec<_> = chunks(&[table(&[10]), table(&[9000]), table(&[5, 2000])], 3)
            .into_iter()
            .map(|c| (c.table, c.leaf, c.pages))
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, None),
                (1, 0, Some((0, Some(3000)))),
                (1, 0, Some((3000, Some(6000)))),
                (1, 0, Some((6000, None))),
                // A partitioned table: each partition, and a big one split.
                (2, 0, None),
                (2, 1, Some((0, Some(1000)))),
                (2, 1, Some((1000, None))),
            ]
        );
        // Too small to split, or one reader only.
        assert!(
            chunks(&[table(&[1500])], 4)
                .iter()
                .all(|c| c.pages.is_none())
        );
        assert!(
            chunks(&[table(&[90_000])], 1)
                .iter()
                .all(|c| c.pages.is_none())
        );
    }
}
