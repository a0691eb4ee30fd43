//! Transactions as the stream reads them: begun at a GTID or BEGIN event, rows events
//! decoded into them, parts of a large one appended as they grow, and the whole made durable
//! at its commit with the GTID state and checkpoint saved after it.

use super::*;

impl Stream<'_> {
    pub(super) fn begin(
        &self,
        state: &mut State,
        start: u64,
        gtid: Option<String>,
        server_id: u32,
        standalone: bool,
    ) {
        self.ctx.metrics.working();
        state.transaction = Some(Transaction {
            place: Place {
                file: state.file.clone(),
                pos: start,
                row: 0,
                gtid,
                server_id,
                ts_ms: 0,
                snapshot: SnapshotMarker::False,
            },
            events: Vec::new(),
            appended: false,
            standalone,
            xa: None,
        });
    }

    /// The rows of one rows event, into the open transaction.
    pub(super) async fn rows(
        &self,
        state: &mut State,
        stream: &BinlogStream,
        rows: &RowsEventData<'_>,
        timestamp: u32,
    ) -> Result<()> {
        let Some(tme) = stream.get_tme(rows.table_id()) else {
            return Err(Error::permanent(format!(
                "a rows event of table id {} came before its table map",
                rows.table_id()
            )));
        };
        let (database, table) = (tme.database_name(), tme.table_name());
        if self.config.is_watermark_table(&database, &table) {
            return self.watermark(state, rows, tme).await;
        }
        if !self.config.captures(&database, &table) {
            return Ok(());
        }
        let (shape, decoder) = state.shape(self.ctx, &self.factory, rows.table_id(), tme)?;
        if state.transaction.is_none() {
            // A row event outside BEGIN/GTID (should not happen with ROW format): its own.
            let start = state.next_pos;
            self.begin(state, start, None, self.server_id, true);
        }
        let op = op_of(rows);
        let decoded = own_images(decoder.as_deref(), &shape, rows, op);
        let pairs = match decoded {
            Some(pairs) => pairs,
            None => {
                // Counted, so that status (and the tests) show which decoder read the stream.
                state.generic_decodes += 1;
                self.ctx
                    .metrics
                    .set("binlog_generic_decodes", state.generic_decodes as f64);
                rows.rows(tme)
                    .map(|pair| {
                        let (before, after) = pair
                            .map_err(|e| Error::permanent(format!("decoding a binlog row: {e}")))?;
                        Ok((
                            before.map(|r| row(&shape, r)).transpose()?,
                            after.map(|r| row(&shape, r)).transpose()?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        for (before, after) in pairs {
            let transaction = state.transaction.as_mut().expect("begun above");
            transaction.place.ts_ms = i64::from(timestamp) * 1000;
            let mut made = Vec::with_capacity(2);
            match (op, before, after) {
                (Op::Update, Some(b), Some(a))
                    if !shape.key.is_empty() && key_of(&shape, &b) != key_of(&shape, &a) =>
                {
                    // A primary-key change: a delete and a create, each naming the other's key,
                    // as Debezium emits it.
                    let (old_key, new_key) = (key_of(&shape, &b), key_of(&shape, &a));
                    let mut delete =
                        self.factory
                            .event(&shape, Op::Delete, Some(b), None, &transaction.place);
                    delete.key = Some(old_key.clone());
                    delete.key_change = Some(KeyChange::To(new_key));
                    made.push(delete);
                    let mut create =
                        self.factory
                            .event(&shape, Op::Create, None, Some(a), &transaction.place);
                    create.key_change = Some(KeyChange::From(old_key));
                    made.push(create);
                }
                (op, before, after) => {
                    made.push(
                        self.factory
                            .event(&shape, op, before, after, &transaction.place),
                    );
                }
            }
            self.push(state, made).await?;
        }
        Ok(())
    }

    /// Events into the open transaction, each at its index in it (those the log holds from
    /// before a restart left out); a part of a large transaction goes to the log (unsynced)
    /// once [`PART`] are held. An XA branch's rows go to its spool instead, and are not yet
    /// changes an incremental snapshot's window sees: the branch may roll back.
    pub(super) async fn push(&self, state: &mut State, events: Vec<Event>) -> Result<()> {
        let transaction = state.transaction.as_mut().expect("a transaction is open");
        if transaction.xa.as_ref().is_some_and(|b| b.known) {
            return Ok(());
        }
        for mut event in events {
            let index = transaction.place.row;
            transaction.place.row += 1;
            set_row(&mut event, index);
            if transaction.xa.is_some() {
                transaction.events.push(event);
                continue;
            }
            if let Some(chunk) = &mut state.snapshot.chunk {
                chunk.saw(&event);
            }
            let held = state
                .held
                .as_ref()
                .is_some_and(|h| h.holds(&transaction.place, index));
            if !held {
                transaction.events.push(event);
            }
        }
        if transaction.events.len() < PART {
            return Ok(());
        }
        if let Some(branch) = &mut transaction.xa {
            let at = xa::place_key(&transaction.place);
            let spool = match &mut branch.spool {
                Some(spool) => spool,
                None => branch
                    .spool
                    .insert(SpoolWriter::create(&xa::spool_path(self.ctx, &at))?),
            };
            let encoded = std::mem::take(&mut transaction.events)
                .iter()
                .map(Event::encode)
                .collect::<Result<Vec<_>>>()?;
            return spool.append(encoded.iter().map(Vec::as_slice));
        }
        if !transaction.appended {
            // The transactions before it go first.
            self.append_pending(&mut state.pending).await?;
        }
        // The newest event stays back, for the commit to mark as the transaction's end.
        let transaction = state.transaction.as_mut().expect("a transaction is open");
        let newest = transaction.events.pop();
        let part = std::mem::replace(&mut transaction.events, newest.into_iter().collect());
        self.ctx.append_open_transaction(&part).await?;
        transaction.appended = true;
        Ok(())
    }

    /// Ends the open transaction: its events become durable, the last marked as its end.
    pub(super) async fn commit(&self, state: &mut State, timestamp: u32) -> Result<()> {
        let Some(mut transaction) = state.transaction.take() else {
            return Ok(());
        };
        if state
            .held
            .as_ref()
            .is_some_and(|h| h.is(&transaction.place))
        {
            state.held = None;
        }
        let commit_ms = i64::from(timestamp) * 1000;
        for e in &mut transaction.events {
            e.source.ts_ms = commit_ms;
        }
        let pending = &mut state.pending;
        if transaction.appended {
            // Its first parts are in the log (after the transactions before it): its end makes
            // them durable.
            self.ctx.append(&transaction.events, true).await?;
            self.ctx.metrics.committed(commit_ms);
        } else if !transaction.events.is_empty() {
            pending.events.append(&mut transaction.events);
            pending.ends.push(pending.events.len() - 1);
            pending.commit_ms = Some(commit_ms);
            pending.since.get_or_insert_with(std::time::Instant::now);
            if pending.events.len() >= PART {
                self.append_pending(pending).await?;
            }
        }
        if state.pending.events.is_empty() {
            self.report_reached(state);
            self.save_gtids(state, false)?;
        }
        Ok(())
    }

    /// Makes the pending transactions durable, then, between transactions, reports how far
    /// the source has read and saves the GTID state.
    pub(super) async fn flush(&self, state: &mut State) -> Result<()> {
        if state.pending.events.is_empty() {
            return Ok(());
        }
        self.append_pending(&mut state.pending).await?;
        if state.transaction.is_none() {
            self.report_reached(state);
            self.save_gtids(state, false)?;
        }
        Ok(())
    }

    /// Appends the pending transactions with one fsync.
    pub(super) async fn append_pending(&self, pending: &mut Pending) -> Result<()> {
        if pending.events.is_empty() {
            return Ok(());
        }
        self.ctx
            .append_marked(&pending.events, &pending.ends)
            .await?;
        pending.events.clear();
        pending.ends.clear();
        pending.since = None;
        if let Some(commit_ms) = pending.commit_ms.take() {
            self.ctx.metrics.committed(commit_ms);
        }
        Ok(())
    }

    /// Every transaction up to the GTID state is in the log: a read-your-writes wait up to it
    /// can end.
    pub(super) fn report_reached(&self, state: &State) {
        if let Some(gtids) = state.gtids.as_ref().filter(|g| !g.is_empty()) {
            self.ctx
                .metrics
                .reached(Arc::new(gtids.clone()), self.ctx.log.durable_end());
        }
    }

    /// Saves the GTID state in the checkpoint, with the log's end it is current at: at most
    /// once a second unless `idle` with a state not saved yet. Only between transactions, with
    /// nothing pending: the state then counts exactly what the log holds durably. A restart
    /// reads the log's events after that end to bring the state up to the log's last event.
    pub(super) fn save_gtids(&self, state: &mut State, idle: bool) -> Result<()> {
        let Some(gtids) = &state.gtids else {
            return Ok(());
        };
        debug_assert!(state.transaction.is_none() && state.pending.events.is_empty());
        if state.held.is_some() {
            // Resumed inside a transaction: the checkpoint keeps the state before it until
            // that transaction is read again to its end.
            return Ok(());
        }
        let now = std::time::Instant::now();
        let due = match &state.gtids_saved {
            None => true,
            Some((at, saved)) => {
                saved != gtids && (idle || now.duration_since(*at) >= GTID_SAVE_INTERVAL)
            }
        };
        if !due {
            return Ok(());
        }
        state.saved = Some(GtidCheckpoint {
            state: gtids.to_string(),
            log_end: self.ctx.log.durable_end(),
            open: None,
        });
        state.gtids_saved = Some((now, gtids.clone()));
        self.save(state)
    }

    /// Saves the checkpoint: the GTID state last saved, the incremental snapshot's progress
    /// and the tables known.
    pub(super) fn save(&self, state: &State) -> Result<()> {
        self.ctx.offsets.save_source_checkpoint(&Checkpoint {
            gtids: state.saved.clone(),
            xa: state.xa.clone(),
            incremental: state.snapshot.progress.clone(),
            tables: Some(state.snapshot.known.clone()),
            ..self.checkpoint.clone()
        })
    }
}
