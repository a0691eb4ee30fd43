//! Streaming: pgoutput messages from the slot to events in the log, each change once, and the
//! flush position confirmed to the server only once the log holds everything before it.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Duration;

use futures_util::FutureExt;
use pgwire_replication::{ReplicationClient, ReplicationEvent};
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, KeyChange, Result, Row, TablePattern, Value};
use tokio_postgres::Client;

use crate::binary::PG_EPOCH_MICROS;
use crate::catalog::{self, ColumnRef, TypeCache, pg_error};
use crate::events::{EventFactory, Place, Shape};
use crate::incremental::{self, RecentCommits, TableReader};
use crate::pgoutput::{self, Message, Relation, TupleValue};
use crate::position::Lsn;
use siphon_incremental::{Chunk, Closed, Progress};

// The fuzz targets' way in (`fuzz/`): a child of this module, so that it drives the stream's
// own private steps (`split`) without widening them.
#[doc(hidden)]
pub mod fuzzing;

/// Events appended per call while a transaction is open (it streams through, never held
/// whole in memory).
const CHUNK: usize = 1000;

/// Events received and not yet in the log, and the position to confirm once they are.
#[derive(Default)]
struct Pending {
    events: Vec<Event>,
    /// Indices of the events that end a transaction.
    ends: Vec<usize>,
    /// The server position to confirm once `events` are durable.
    confirm: Option<pgwire_replication::Lsn>,
    /// Commit time (ms since the epoch) of the newest transaction whose events are pending.
    commit_ms: Option<i64>,
}

/// What the incremental snapshot does next.
enum NextChunk {
    /// A chunk was read: its window opens at its low watermark.
    Read(Chunk),
    /// A chunk cannot be read yet (a transaction's commit not visible yet): in a moment.
    Later,
    /// Nothing to read.
    None,
}

/// What the stream waits for next.
enum Next {
    /// A replication event, or the stream's failure.
    Event(pgwire_replication::Result<Option<ReplicationEvent>>),
    /// Time to look for tables created since.
    PollTables,
    /// Time to try reading a chunk again.
    RetryChunk,
    /// Shutdown.
    Shutdown,
}

/// What the stream does once nothing is waiting from the server.
enum Idle {
    /// An event arrived.
    Event(pgwire_replication::Result<Option<ReplicationEvent>>),
    /// Look again (a chunk is due to be read).
    Again,
    /// Shutdown.
    Shutdown,
}

/// What the stream keeps from one event to the next.
struct Streaming {
    /// The tables' shapes, by relation id.
    shapes: HashMap<u32, Shape>,
    types: TypeCache,
    /// The transaction being received.
    tx: Option<Transaction>,
    pending: Pending,
    heartbeat: tokio::time::Interval,
    lag: tokio::time::Interval,
    table_poll: tokio::time::Interval,
    /// The incremental snapshot's.
    progress: Progress,
    commits: RecentCommits,
    /// When to try again a chunk that could not be read yet, and the wait before that.
    retry_chunk: Option<(tokio::time::Instant, Duration)>,
    chunk: Option<Chunk>,
    reader: Option<TableReader>,
}

impl Streaming {
    async fn new(progress: Progress, stream: &Stream<'_>) -> Streaming {
        let mut heartbeat =
            tokio::time::interval(stream.heartbeat.unwrap_or(Duration::from_secs(3600)));
        heartbeat.tick().await;
        let mut table_poll = tokio::time::interval(stream.table_poll_interval);
        table_poll.tick().await;
        Streaming {
            shapes: HashMap::new(),
            types: TypeCache::default(),
            tx: None,
            pending: Pending::default(),
            heartbeat,
            lag: tokio::time::interval(stream.lag_interval),
            table_poll,
            progress,
            commits: RecentCommits::default(),
            retry_chunk: None,
            chunk: None,
            reader: None,
        }
    }
}

/// The transaction being received.
#[derive(Debug)]
struct Transaction {
    final_lsn: u64,
    xid: u32,
    commit_time_micros: i64,
    next_index: u64,
    /// Each table's count of events.
    per_table: HashMap<u32, u64>,
}

impl Transaction {
    /// The transaction begun by a Begin message.
    fn begun(final_lsn: u64, xid: u32, commit_time_micros: i64) -> Self {
        Transaction {
            final_lsn,
            xid,
            commit_time_micros,
            next_index: 0,
            per_table: HashMap::new(),
        }
    }

    /// The event of `change` of table `shape`, at `wal_start`, counted among the
    /// transaction's and its table's; with its index in the transaction.
    fn event(
        &mut self,
        factory: &EventFactory,
        shape: &Shape,
        wal_start: u64,
        (relation, op, before, after, key_change): Change,
    ) -> (u64, Event) {
        let index = self.next_index;
        self.next_index += 1;
        let table_order = self.per_table.entry(relation).or_default();
        *table_order += 1;
        let key = match op {
            Op::Truncate => None,
            Op::Delete => before.as_ref().and_then(|r| shape.key_of(r)),
            _ => after.as_ref().and_then(|r| shape.key_of(r)),
        };
        let at = Place {
            commit_lsn: self.final_lsn,
            lsn: wal_start,
            index,
            xid: Some(self.xid),
            commit_time_micros: self.commit_time_micros,
            snapshot: SnapshotMarker::False,
            table_order: *table_order,
        };
        let mut event = factory.event(shape, op, before, after, key, at);
        event.key_change = key_change;
        (index, event)
    }
}

/// Streams until cancelled or the connection fails.
pub struct Stream<'a> {
    pub ctx: &'a SourceContext,
    /// The source's checkpoint, which the stream saves an incremental snapshot's progress in.
    pub checkpoint: crate::Checkpoint,
    /// The publication: the tables an incremental snapshot may read.
    pub publication: String,
    /// The configured table patterns, and how often to look for new tables matching them.
    pub patterns: Vec<TablePattern>,
    pub table_poll_interval: Duration,
    pub repl: &'a mut ReplicationClient,
    pub client: &'a Client,
    pub factory: EventFactory,
    /// The last streamed event the log holds: (commit LSN, index). Anything at or before it
    /// was appended before a restart and is dropped.
    pub resume_after: Option<(u64, u64)>,
    pub heartbeat: Option<Duration>,
    /// The slot, whose lag behind the server's WAL is reported every `lag_interval`.
    pub slot: String,
    pub lag_interval: Duration,
    /// In binary mode: the source's permission to use it, withdrawn (and the stream ended
    /// with a transient error, so that it restarts in text) when a table gains a column
    /// siphon reads only as text.
    pub binary: Option<&'a mut bool>,
}

impl Stream<'_> {
    pub async fn run(mut self) -> Result<()> {
        let mut s = Streaming::new(self.checkpoint.incremental.clone(), &self).await;
        s.progress.report(&self.ctx.metrics);
        loop {
            // Whatever the server has sent already joins the batch; when nothing more is
            // waiting, the batch goes to the log with one fsync (group commit).
            // Shutdown is checked before an event is taken, so none is ever taken and dropped.
            if self.ctx.cancel.is_cancelled() {
                self.flush(&mut s.pending, s.tx.is_some()).await?;
                return Ok(());
            }
            let event = match self.repl.recv().now_or_never() {
                Some(event) => event,
                None => match self.when_idle(&mut s).await? {
                    Idle::Event(event) => event,
                    // Back to the top, which reads the chunk when nothing is waiting.
                    Idle::Again => continue,
                    Idle::Shutdown => return Ok(()),
                },
            };
            let event = match event {
                Ok(Some(e)) => e,
                Ok(None) => return Err(Error::transient("the replication stream ended")),
                Err(e) => return Err(crate::replication_error(&e)),
            };
            if self.handle(&mut s, event).await?.is_break() {
                return Ok(());
            }
        }
    }

    /// Nothing is waiting from the server: the batch goes to the log, an incremental
    /// snapshot's next chunk is read when nothing is open, and the stream waits for the next
    /// event, or for a timer.
    async fn when_idle(&mut self, s: &mut Streaming) -> Result<Idle> {
        self.flush(&mut s.pending, s.tx.is_some()).await?;
        if s.tx.is_none() {
            // Nothing waiting, nothing open: the log holds all the server sent.
            self.ctx.metrics.caught_up();
            // (Not before a chunk that could not be read is due again: each try writes a
            // watermark.)
            let due = s
                .retry_chunk
                .is_none_or(|(at, _)| tokio::time::Instant::now() >= at);
            if s.chunk.is_none() && due {
                match self
                    .next_chunk(&mut s.types, &mut s.progress, &mut s.reader, &mut s.commits)
                    .await?
                {
                    NextChunk::Read(read) => {
                        s.chunk = Some(read);
                        s.retry_chunk = None;
                    }
                    NextChunk::Later => {
                        let wait = s
                            .retry_chunk
                            .map_or(Duration::from_millis(20), |(_, wait)| {
                                (wait * 2).min(Duration::from_secs(1))
                            });
                        s.retry_chunk = Some((tokio::time::Instant::now() + wait, wait));
                    }
                    NextChunk::None => s.retry_chunk = None,
                }
            }
        }
        loop {
            match self
                .next_event(
                    &mut s.heartbeat,
                    &mut s.lag,
                    &mut s.table_poll,
                    s.retry_chunk.map(|(at, _)| at),
                )
                .await?
            {
                Next::Event(event) => return Ok(Idle::Event(event)),
                Next::PollTables => self.poll_tables(&mut s.progress).await?,
                Next::RetryChunk => return Ok(Idle::Again),
                Next::Shutdown => return Ok(Idle::Shutdown),
            }
        }
    }

    /// Takes one replication event; `Break` once the server has stopped the stream.
    async fn handle(
        &mut self,
        s: &mut Streaming,
        event: ReplicationEvent,
    ) -> Result<ControlFlow<()>> {
        match event {
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => {
                self.ctx.metrics.working();
                s.tx = Some(Transaction::begun(
                    final_lsn.as_u64(),
                    xid,
                    commit_time_micros,
                ));
            }
            ReplicationEvent::XLogData {
                wal_start, data, ..
            } => {
                let message =
                    pgoutput::decode(data).map_err(|e| Error::permanent(e.to_string()))?;
                match message {
                    Message::Relation(r) => self.relation(s, &r).await?,
                    change @ (Message::Insert { .. }
                    | Message::Update { .. }
                    | Message::Delete { .. }
                    | Message::Truncate { .. }) => {
                        self.change(s, wal_start.as_u64(), change).await?;
                    }
                    Message::Begin { .. }
                    | Message::Commit { .. }
                    | Message::Origin { .. }
                    | Message::Type { .. }
                    | Message::Logical { .. } => {}
                }
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                let pending = &mut s.pending;
                let first_of_tx = pending.ends.last().map_or(0, |e| e + 1);
                if pending.events.len() > first_of_tx {
                    pending.ends.push(pending.events.len() - 1);
                }
                if let Some(t) = s.tx.take() {
                    pending.commit_ms = Some((t.commit_time_micros + PG_EPOCH_MICROS) / 1000);
                    s.commits.committed(t.xid);
                }
                // Once the log holds the whole transaction, the server may forget it.
                pending.confirm = Some(end_lsn);
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                // Between transactions, once everything received is in the log, the server's
                // position can be confirmed even when the captured tables are idle.
                if s.tx.is_none() {
                    s.pending.confirm = Some(s.pending.confirm.map_or(wal_end, |c| c.max(wal_end)));
                }
            }
            ReplicationEvent::Message {
                prefix,
                content,
                lsn,
                ..
            } if prefix == incremental::WATERMARK => {
                let text = std::str::from_utf8(&content).unwrap_or_default();
                if let Some(mut closed) = s.chunk.as_mut().and_then(|c| c.watermark(text)) {
                    s.chunk = None;
                    incremental::place(&mut closed.rows, lsn.as_u64());
                    self.append_chunk(&mut s.pending, &mut s.progress, closed)
                        .await?;
                }
            }
            ReplicationEvent::Message { .. } => {}
            ReplicationEvent::StoppedAt { .. } => return Ok(ControlFlow::Break(())),
        }
        Ok(ControlFlow::Continue(()))
    }

    /// A table's description, which the server sends before the table's first change and
    /// again after it changed.
    async fn relation(&mut self, s: &mut Streaming, r: &Relation) -> Result<()> {
        if s.reader
            .as_ref()
            .is_some_and(|t| t.name.namespace() == r.namespace && t.name.table() == r.name)
        {
            // The table may have changed (the server says so before its next change after a
            // DDL): its reader is made again, and an open chunk of it read again in its new
            // shape.
            s.reader = None;
            s.chunk = None;
        }
        let shape = self.shape(r, &mut s.types).await?;
        if self.binary.is_some() && !shape.binary_decodable() {
            if let Some(allowed) = self.binary.take() {
                *allowed = false;
            }
            return Err(Error::transient(format!(
                "{}.{} has a column siphon reads only as text: streaming again in text mode",
                r.namespace, r.name
            )));
        }
        s.shapes.insert(r.id, shape);
        Ok(())
    }

    /// A change of the open transaction, at `wal_start`: its events join the pending batch,
    /// which goes to the log a part at a time while the transaction is large.
    async fn change(&mut self, s: &mut Streaming, wal_start: u64, change: Message) -> Result<()> {
        let t =
            s.tx.as_mut()
                .ok_or_else(|| Error::permanent("a change arrived outside a transaction"))?;
        for change in split(&s.shapes, change)? {
            let shape = &s.shapes[&change.0];
            let (index, event) = t.event(&self.factory, shape, wal_start, change);
            if self
                .resume_after
                .is_some_and(|done| (t.final_lsn, index) <= done)
            {
                continue; // the log has it from before a restart
            }
            if let Some(chunk) = &mut s.chunk {
                chunk.saw(&event);
            }
            s.pending.events.push(event);
            if s.pending.events.len() > CHUNK {
                self.flush(&mut s.pending, true).await?;
            }
        }
        Ok(())
    }

    /// Appends what is pending (keeping the newest event of an open transaction back, so that
    /// its commit can mark it), then confirms the position.
    async fn flush(&mut self, pending: &mut Pending, transaction_open: bool) -> Result<()> {
        let first_open = pending.ends.last().map_or(0, |e| e + 1);
        let keep = usize::from(transaction_open && pending.events.len() > first_open);
        let n = pending.events.len() - keep;
        if n > 0 && pending.ends.is_empty() && transaction_open {
            // Only the start of an open transaction: durable with its commit, no fsync now.
            self.ctx
                .append_open_transaction(&pending.events[..n])
                .await?;
            pending.events.drain(..n);
        } else if n > 0 {
            self.ctx
                .append_marked(&pending.events[..n], &pending.ends)
                .await?;
            pending.events.drain(..n);
            pending.ends.clear();
        }
        if let Some(lsn) = pending.confirm.take() {
            self.repl.update_applied_lsn(lsn);
            // Everything before `lsn` is durable: a read-your-writes wait up to it can end.
            self.ctx.metrics.reached(
                std::sync::Arc::new(Lsn(lsn.as_u64())),
                self.ctx.log.durable_end(),
            );
        }
        if let Some(commit_ms) = pending
            .commit_ms
            .take()
            .filter(|_| pending.events.is_empty())
        {
            self.ctx.metrics.committed(commit_ms);
        }
        Ok(())
    }

    /// Tables that match the patterns but are not captured yet (created since): added to the
    /// publication, and to the incremental snapshot (durably, before their rows are read), so
    /// that rows written before they joined reach the log too.
    async fn poll_tables(&self, progress: &mut Progress) -> Result<()> {
        let tables = catalog::tables(self.client, &self.patterns).await?;
        catalog::ensure_publication(self.client, &self.publication, &tables, |added| {
            tracing::info!(tables = ?added, "new tables join the publication: snapshotting them incrementally");
            progress.request(added.iter().cloned());
            self.save_progress(progress)
        })
        .await?;
        Ok(())
    }

    /// Takes what was asked of the incremental snapshot into `progress` (saved at once, so
    /// that a failed read loses no request) and reads the next chunk between watermarks, if a
    /// table is left; tables that cannot be read are dropped on the way.
    async fn next_chunk(
        &self,
        types: &mut TypeCache,
        progress: &mut Progress,
        reader: &mut Option<TableReader>,
        commits: &mut RecentCommits,
    ) -> Result<NextChunk> {
        let mut changed = progress.take_requests(&self.ctx.metrics);
        // A chunk read fails once the table changed since its reader was made (a dropped
        // column): made again from the catalog, once.
        let mut fresh_reader = false;
        loop {
            if std::mem::take(&mut changed) {
                self.save_progress(progress)?;
            }
            let Some(name) = progress.tables.front().filter(|_| progress.wants_chunk()) else {
                return Ok(NextChunk::None);
            };
            if reader.as_ref().is_none_or(|r| r.name != *name) {
                *reader = TableReader::prepare(
                    self.client,
                    types,
                    (self.ctx, &self.factory),
                    &self.publication,
                    name,
                )
                .await?;
            }
            match reader {
                Some(r) => {
                    match r
                        .read(
                            self.client,
                            &self.factory,
                            progress.after.as_deref(),
                            (commits, self.ctx),
                        )
                        .await
                    {
                        Ok(Some(chunk)) => return Ok(NextChunk::Read(chunk)),
                        Ok(None) => return Ok(NextChunk::Later),
                        Err(e) if !e.is_transient() && !fresh_reader => {
                            tracing::info!(table = %name, error = %e, "incremental snapshot: reading the table's shape again");
                            *reader = None;
                            fresh_reader = true;
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    progress.next_table();
                    changed = true;
                }
            }
        }
    }

    /// Appends a closed chunk's rows (durable), then records how far the snapshot is.
    async fn append_chunk(
        &mut self,
        pending: &mut Pending,
        progress: &mut Progress,
        closed: Closed,
    ) -> Result<()> {
        let n = closed.rows.len();
        if n > 0 {
            pending.events.extend(closed.rows);
            pending.ends.push(pending.events.len() - 1);
        }
        self.flush(pending, false).await?;
        progress.chunk_done(n, closed.next_after);
        self.save_progress(progress)
    }

    fn save_progress(&self, progress: &Progress) -> Result<()> {
        self.ctx
            .offsets
            .save_source_checkpoint(&crate::Checkpoint {
                incremental: progress.clone(),
                ..self.checkpoint.clone()
            })?;
        progress.report(&self.ctx.metrics);
        Ok(())
    }

    async fn write_heartbeat(&self) -> Result<()> {
        self.client
            .batch_execute("select pg_logical_emit_message(false, 'siphon_heartbeat', '')")
            .await
            .map_err(|e| pg_error("writing a heartbeat", &e))
    }

    /// Waits for the next replication event, writing heartbeats meanwhile; `None` on shutdown.
    async fn next_event(
        &mut self,
        heartbeat: &mut tokio::time::Interval,
        lag: &mut tokio::time::Interval,
        table_poll: &mut tokio::time::Interval,
        retry_chunk: Option<tokio::time::Instant>,
    ) -> Result<Next> {
        loop {
            tokio::select! {
                biased;
                _ = self.ctx.cancel.cancelled() => return Ok(Next::Shutdown),
                _ = table_poll.tick() => return Ok(Next::PollTables),
                () = tokio::time::sleep_until(retry_chunk.unwrap_or_else(tokio::time::Instant::now)), if retry_chunk.is_some() => return Ok(Next::RetryChunk),
                // A heartbeat on schedule, or now for a read-your-writes wait: WAL written
                // after the waited-for position, which the stream then passes.
                _ = heartbeat.tick(), if self.heartbeat.is_some() => self.write_heartbeat().await?,
                () = self.ctx.metrics.nudged() => self.write_heartbeat().await?,
                _ = lag.tick() => self.report_lag().await,
                event = self.repl.recv() => return Ok(Next::Event(event)),
            }
        }
    }

    /// How far the slot's confirmed position is behind the server's WAL: what the server keeps
    /// for siphon. A failed query only skips one report.
    async fn report_lag(&self) {
        let lag = self
            .client
            .query_opt(
                "select (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 from pg_replication_slots where slot_name = $1",
                &[&self.slot],
            )
            .await;
        if let Ok(Some(row)) = lag
            && let Some(bytes) = row.get::<_, Option<i64>>(0)
        {
            self.ctx.metrics.set("slot_lag_bytes", bytes as f64);
        }
    }

    /// The shape of a table from its Relation message; the key is its primary key now. A
    /// replica identity changed to an index other than the primary key while streaming is
    /// refused, as at start.
    async fn shape(&self, r: &Relation, types: &mut TypeCache) -> Result<Shape> {
        let key = catalog::primary_key(self.client, r.id).await?;
        if r.replica_identity == b'i' {
            let identity: Vec<String> = r
                .columns
                .iter()
                .filter(|c| c.key)
                .map(|c| c.name.clone())
                .collect();
            if !catalog::identity_is_key(&identity, &key) {
                let name = format!("{}.{}", r.namespace, r.name);
                let quoted = format!(
                    "{}.{}",
                    catalog::quote_ident(&r.namespace),
                    catalog::quote_ident(&r.name)
                );
                return Err(catalog::identity_error(&name, &quoted, &identity, &key));
            }
        }
        let columns: Vec<ColumnRef> = r
            .columns
            .iter()
            .map(|c| ColumnRef {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
            })
            .collect();
        Shape::resolve(
            self.client,
            types,
            (self.ctx, &self.factory),
            (r.id, &r.namespace, &r.name),
            &columns,
            &key,
        )
        .await
    }
}

type Change = (u32, Op, Option<Row>, Option<Row>, Option<KeyChange>);

/// The events one change message makes. An update that changes the primary key becomes a
/// delete of the old key and an insert of the new row, as Debezium does, each naming the
/// other's key: the stores move the row, taking the columns the update left unchanged
/// (TOASTed values, which PostgreSQL does not send) from the old key's row.
fn split(shapes: &HashMap<u32, Shape>, message: Message) -> Result<Vec<Change>> {
    let shape = |id: u32| {
        shapes.get(&id).ok_or_else(|| {
            Error::permanent(format!(
                "a change to relation {id} came before its Relation message"
            ))
        })
    };
    Ok(match message {
        Message::Insert { relation, new } => vec![(
            relation,
            Op::Create,
            None,
            Some(row(shape(relation)?, &new)?),
            None,
        )],
        Message::Update {
            relation, old, new, ..
        } => {
            let s = shape(relation)?;
            let after = row(s, &new)?;
            let before = old.map(|o| row(s, &o)).transpose()?;
            let keys = before.as_ref().map(|b| (s.key_of(b), s.key_of(&after)));
            match keys {
                Some((Some(old_key), Some(new_key))) if old_key != new_key => vec![
                    (
                        relation,
                        Op::Delete,
                        before,
                        None,
                        Some(KeyChange::To(new_key)),
                    ),
                    (
                        relation,
                        Op::Create,
                        None,
                        Some(after),
                        Some(KeyChange::From(old_key)),
                    ),
                ],
                _ => vec![(relation, Op::Update, before, Some(after), None)],
            }
        }
        Message::Delete { relation, old, .. } => vec![(
            relation,
            Op::Delete,
            Some(row(shape(relation)?, &old)?),
            None,
            None,
        )],
        Message::Truncate { relations, .. } => relations
            .into_iter()
            .filter(|r| shapes.contains_key(r))
            .map(|r| (r, Op::Truncate, None, None, None))
            .collect(),
        _ => Vec::new(),
    })
}

/// A tuple's row: a value for each of the table's columns, or an error (the server sends
/// every column of a row; a tuple of others is not one of this table's).
fn row(shape: &Shape, tuple: &[TupleValue]) -> Result<Row> {
    if tuple.len() != shape.columns.len() {
        return Err(Error::permanent(format!(
            "a change to {}.{} carries {} values for its {} columns",
            shape.schema,
            shape.table,
            tuple.len(),
            shape.columns.len()
        )));
    }
    let values = tuple
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            TupleValue::Null => Value::Null,
            TupleValue::Unchanged => Value::Unchanged,
            TupleValue::Text(b) => match std::str::from_utf8(b) {
                Ok(t) => shape.decode(i, std::borrow::Cow::Borrowed(t)),
                Err(_) => Value::Other {
                    type_name: "bytes".into(),
                    text: String::from_utf8_lossy(b).into_owned(),
                },
            },
            TupleValue::Binary(b) => crate::binary::decode(&shape.columns[i].1, b)
                .unwrap_or_else(|e| shape.undecodable(i, &String::from_utf8_lossy(b), &e)),
        })
        .collect();
    Ok(shape.row(values))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes};
    use siphon_core::testing::MemorySchemas;

    use super::fuzzing::Stream;

    /// Found by the pgoutput fuzz target: a change whose tuple holds fewer columns than its
    /// table's Relation message panicked taking the row's key.
    #[test]
    fn a_change_of_other_columns_than_its_relation_is_an_error() {
        let mut rel = vec![b'R'];
        rel.put_u32(16384);
        rel.put_slice(b"public\0orders\0");
        rel.put_u8(b'd');
        rel.put_i16(2);
        rel.put_u8(0);
        rel.put_slice(b"note\0");
        rel.put_u32(25);
        rel.put_i32(-1);
        rel.put_u8(1);
        rel.put_slice(b"id\0");
        rel.put_u32(20);
        rel.put_i32(-1);
        let mut begin = vec![b'B'];
        begin.put_u64(0x100);
        begin.put_i64(0);
        begin.put_u32(7);
        let mut ins = vec![b'I'];
        ins.put_u32(16384);
        ins.put_u8(b'N');
        ins.put_i16(1);
        ins.put_u8(b't');
        ins.put_u32(1);
        ins.put_u8(b'a');
        let schemas = MemorySchemas::default();
        let mut stream = Stream::default();
        for m in [rel, begin] {
            stream.message(&schemas, 1, Bytes::from(m)).unwrap();
        }
        assert!(stream.message(&schemas, 2, Bytes::from(ins)).is_err());
    }
}
