//! XA transactions in the stream: a prepared branch's rows spooled, durably, until its
//! COMMIT (appended at the commit's place in the binlog) or ROLLBACK (dropped), across
//! restarts.

use super::*;

impl Stream<'_> {
    /// The open group (one is begun where none is: MySQL without GTIDs) is an XA
    /// transaction's prepare group (`xid`, where its start names it).
    pub(super) fn xa_start(&self, state: &mut State, start: u64, xid: Option<Xid>) {
        if state.transaction.is_none() {
            self.begin(state, start, None, self.server_id, false);
        }
        let transaction = state.transaction.as_mut().expect("begun");
        let at = xa::place_key(&transaction.place);
        transaction.standalone = false;
        transaction.xa = Some(Branch {
            known: state.xa.iter().any(|p| p.at == at),
            xid,
            spool: None,
        });
        // Read again: a COMMIT from here on may be its.
        state.xa_ahead.remove(&at);
    }

    /// The XA_prepare event ending the open XA group: its rows are spooled, durably, and the
    /// checkpoint names it — or, committed in one phase (MySQL), it is an ordinary
    /// transaction, committed now.
    pub(super) async fn xa_prepared(
        &self,
        state: &mut State,
        one_phase: bool,
        xid: Option<Xid>,
        timestamp: u32,
    ) -> Result<()> {
        let Some(transaction) = &mut state.transaction else {
            return Ok(());
        };
        let branch = transaction.xa.take().unwrap_or(Branch {
            xid: None,
            spool: None,
            known: false,
        });
        let at = xa::place_key(&transaction.place);
        let transaction_place = transaction.place.clone();
        let rest = std::mem::take(&mut transaction.events);
        if one_phase {
            // Its rows again, into the log this time: what was spooled first.
            transaction.place.row = 0;
            if let Some(spool) = branch.spool {
                spool.finish()?;
                self.replay_spool(state, &xa::spool_path(self.ctx, &at))
                    .await?;
                crate::spool::remove(&xa::spool_path(self.ctx, &at))?;
            }
            self.push(state, rest).await?;
            return self.commit(state, timestamp).await;
        }
        state.transaction = None;
        if branch.known {
            return Ok(());
        }
        let Some(xid) = xid.or(branch.xid) else {
            return Err(Error::permanent(format!(
                "an XA transaction prepared at {at} names no XID"
            )));
        };
        let mut spool = match branch.spool {
            Some(spool) => spool,
            None => SpoolWriter::create(&xa::spool_path(self.ctx, &at))?,
        };
        let encoded = rest.iter().map(Event::encode).collect::<Result<Vec<_>>>()?;
        spool.append(encoded.iter().map(Vec::as_slice))?;
        let rows = spool.count();
        spool.finish()?;
        tracing::info!(%xid, rows, "XA transaction prepared: its rows wait for its COMMIT or ROLLBACK");
        let place = &transaction_place;
        state.xa.retain(|p| p.xid != xid);
        state.xa.push(xa::Prepared {
            xid,
            at,
            file: place.file.clone(),
            pos: place.pos,
            gtid: place.gtid.clone(),
            rows,
            committing: None,
        });
        self.save(state)
    }

    /// `XA COMMIT` (`commit`) or `XA ROLLBACK` of a prepared transaction, in the open
    /// (standalone) group: committed, its rows are appended at this group's place, from its
    /// spool; either way it is forgotten once the group is durable.
    ///
    /// Which prepared transaction it ends: the one already being committed here (a restart
    /// read this group again), else the one of that XID prepared before this group — not one
    /// whose prepare group the stream has yet to read again after a restart (an XID may be
    /// used again once its transaction ended). A group whose rows the log holds, and which no
    /// prepared transaction is being committed at, ended one that is forgotten already.
    pub(super) async fn xa_resolve(
        &self,
        state: &mut State,
        xid: &Xid,
        commit: bool,
        timestamp: u32,
    ) -> Result<()> {
        if state.transaction.is_none() {
            let start = state.next_pos;
            self.begin(state, start, None, self.server_id, true);
        }
        let place = state.transaction.as_ref().expect("begun").place.clone();
        let here = xa::place_key(&place);
        let held = state.held.as_ref().is_some_and(|h| h.is(&place));
        let found = state
            .xa
            .iter()
            .position(|p| p.committing.as_ref() == Some(&here))
            .or_else(|| {
                state.xa.iter().position(|p| {
                    !held
                        && p.xid == *xid
                        && p.committing.is_none()
                        && !state.xa_ahead.contains(&p.at)
                })
            });
        let Some(prepared) = found else {
            if !held {
                tracing::warn!(%xid, commit, "an XA transaction siphon did not see prepared (before its snapshot or start position) ended: any rows it had are not in the log");
            }
            return self.commit(state, timestamp).await;
        };
        let path = xa::spool_path(self.ctx, &state.xa[prepared].at);
        if commit && state.xa[prepared].rows > 0 {
            // Where it commits, before its rows go in: a restart finding the log ending with
            // this group knows it committed.
            if state.xa[prepared].committing.as_ref() != Some(&here) {
                state.xa[prepared].committing = Some(here);
                self.save(state)?;
            }
            self.replay_spool(state, &path).await?;
            self.commit(state, timestamp).await?;
            self.flush(state).await?;
            state.xa.remove(prepared);
            self.save(state)?;
        } else {
            // Nothing of it reaches the log: forgotten before the group's end is saved.
            state.xa.remove(prepared);
            self.save(state)?;
            self.commit(state, timestamp).await?;
        }
        crate::spool::remove(&path)
    }

    /// The spooled rows at `path` into the open transaction, placed there.
    pub(super) async fn replay_spool(
        &self,
        state: &mut State,
        path: &std::path::Path,
    ) -> Result<()> {
        let mut reader = SpoolReader::open(path)?;
        loop {
            let blobs = reader.read(PART)?;
            if blobs.is_empty() {
                return Ok(());
            }
            let place = state.transaction.as_ref().expect("open").place.clone();
            let events = blobs
                .iter()
                .map(|b| {
                    let mut event = Event::decode(b, self.ctx.log.schemas(), &crate::MysqlKind)?;
                    events::move_to(&mut event, &place);
                    Ok(event)
                })
                .collect::<Result<Vec<_>>>()?;
            self.push(state, events).await?;
        }
    }
}
