//! The incremental snapshot as the stream runs it: new tables looked for between
//! transactions, chunks read between watermarks whose rows the binlog then confirms.

use super::*;

/// An incremental snapshot as the stream runs it, and the tables the patterns name.
pub(super) struct IncrementalState {
    pub(super) progress: Progress,
    /// The captured tables at the last look ("database.table").
    pub(super) known: BTreeSet<TableName>,
    /// A DDL passed since: look at the tables again.
    pub(super) tables_changed: bool,
    /// Tables the binlog showed created since the last look.
    pub(super) created: BTreeSet<TableName>,
    /// The chunk whose watermarks the stream waits for.
    pub(super) chunk: Option<Chunk>,
    pub(super) reader: Option<TableReader>,
    /// The connection chunks are read and watermarks written on, opened when first needed.
    pub(super) conn: Option<mysql_async::Conn>,
    pub(super) watermarks: Watermarks,
}

/// The incremental snapshot's connection, opened when first needed.
pub(super) async fn query_conn<'c>(
    slot: &'c mut Option<mysql_async::Conn>,
    opts: &mysql_async::Opts,
) -> Result<&'c mut mysql_async::Conn> {
    if let Some(conn) = slot {
        return Ok(conn);
    }
    let mut conn = mysql_async::Conn::new(opts.clone())
        .await
        .map_err(|e| my_error("connecting for an incremental snapshot", &e))?;
    // As the snapshot: TIMESTAMP values in UTC, as the binlog holds them. A chunk read
    // queued behind a DDL's metadata lock holds up the stream: it gives up after 10 s (a
    // transient error: the stream starts again and reads the chunk again).
    conn.query_drop("SET SESSION time_zone = '+00:00', SESSION lock_wait_timeout = 10")
        .await
        .map_err(|e| my_error("preparing the incremental snapshot's connection", &e))?;
    Ok(slot.insert(conn))
}

impl Stream<'_> {
    /// Between transactions: looks for tables a DDL made, and, with no chunk open, takes what
    /// was asked of the incremental snapshot (saved at once, so that a failed read loses no
    /// request) and reads its next chunk between watermarks.
    pub(super) async fn between_transactions(&self, state: &mut State) -> Result<()> {
        let mut changed = false;
        if std::mem::take(&mut state.snapshot.tables_changed) {
            changed |= self.poll_tables(state).await?;
        }
        if state.snapshot.chunk.is_none() {
            changed |= state.snapshot.progress.take_requests(&self.ctx.metrics);
        }
        // A chunk read fails once the table changed since its reader was made (a dropped
        // column, ahead of the stream's DDL event): made again from the catalog, once.
        let mut fresh_reader = false;
        loop {
            if std::mem::take(&mut changed) {
                self.save(state)?;
                state.snapshot.progress.report(&self.ctx.metrics);
            }
            let snapshot = &mut state.snapshot;
            if snapshot.chunk.is_some() || !snapshot.progress.wants_chunk() {
                return Ok(());
            }
            let name = snapshot
                .progress
                .tables
                .front()
                .expect("wants a chunk")
                .clone();
            let conn = query_conn(&mut snapshot.conn, &self.opts).await?;
            if snapshot.reader.as_ref().is_none_or(|r| r.name != name) {
                snapshot.reader =
                    TableReader::prepare(conn, (self.ctx, &self.factory), self.config, &name)
                        .await?;
            }
            match &snapshot.reader {
                Some(reader) => {
                    let after = snapshot.progress.after.as_deref();
                    match reader
                        .read(conn, &mut snapshot.watermarks, &self.factory, after)
                        .await
                    {
                        Ok(chunk) => snapshot.chunk = Some(chunk),
                        Err(e) if !e.is_transient() && !fresh_reader => {
                            tracing::info!(table = %name, error = %e, "incremental snapshot: reading the table's shape again");
                            snapshot.reader = None;
                            fresh_reader = true;
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    snapshot.progress.next_table();
                    changed = true;
                }
            }
        }
    }

    /// Tables that match the patterns and were not there at the last look: snapshotted
    /// incrementally, since the rows of one renamed into a captured database are in no binlog
    /// event siphon read. Not those the binlog showed created (`CREATE TABLE`, also
    /// `… SELECT`, whose rows the binlog carries as row events): their rows all follow.
    /// Whether anything changed.
    pub(super) async fn poll_tables(&self, state: &mut State) -> Result<bool> {
        let snapshot = &mut state.snapshot;
        let conn = query_conn(&mut snapshot.conn, &self.opts).await?;
        let (now, added) = crate::catalog::tables_since(conn, self.config, &snapshot.known).await?;
        let added: Vec<TableName> = added
            .into_iter()
            .filter(|t| !snapshot.created.contains(t))
            .collect();
        snapshot.created.clear();
        if now == snapshot.known {
            return Ok(false);
        }
        if !added.is_empty() {
            tracing::info!(tables = ?added, "new tables match the source's patterns: snapshotting them incrementally");
            snapshot.progress.request(added);
        }
        snapshot.known = now;
        Ok(true)
    }

    /// A row of the watermark table: the open chunk's window opens at its low watermark; at
    /// its high one the chunk's rows are appended, placed at this transaction.
    pub(super) async fn watermark(
        &self,
        state: &mut State,
        rows: &RowsEventData<'_>,
        tme: &TableMapEvent<'_>,
    ) -> Result<()> {
        for pair in rows.rows(tme) {
            let (_, after) =
                pair.map_err(|e| Error::permanent(format!("decoding a watermark row: {e}")))?;
            let Some(mark) = after
                .as_ref()
                .and_then(|r| incremental::watermark_in(r, &self.ctx.pipeline))
            else {
                continue;
            };
            let Some(mut closed) = state
                .snapshot
                .chunk
                .as_mut()
                .and_then(|c| c.watermark(&mark))
            else {
                continue;
            };
            state.snapshot.chunk = None;
            let place = match &state.transaction {
                Some(t) => t.place.clone(),
                // A rows event outside a transaction (not written so by siphon): placed where
                // it is.
                None => Place {
                    file: state.file.clone(),
                    pos: state.next_pos,
                    row: 0,
                    gtid: None,
                    server_id: self.server_id,
                    ts_ms: 0,
                    snapshot: SnapshotMarker::Incremental,
                },
            };
            incremental::place(&mut closed.rows, &place);
            let n = closed.rows.len();
            if n > 0 {
                // After every change before the high watermark.
                self.append_pending(&mut state.pending).await?;
                self.ctx.append(&closed.rows, true).await?;
            }
            state.snapshot.progress.chunk_done(n, closed.next_after);
            self.save(state)?;
            state.snapshot.progress.report(&self.ctx.metrics);
        }
        Ok(())
    }
}
