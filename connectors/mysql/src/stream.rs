//! The binlog stream, as a replica: row events decoded with their table maps into events,
//! appended whole transactions at a time, those read while the server has more waiting with
//! one fsync (group commit).
//!
//! Positions: each event carries its transaction's start (binlog file and the position of
//! its GTID or BEGIN event) and its index among the transaction's captured rows. On restart
//! the stream begins at the last durable event's transaction start and drops that
//! transaction's rows up to the event's index: nothing twice, nothing missed. A large
//! transaction is appended in parts as it arrives (bounded memory); only its end makes it
//! durable.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::spool::{SpoolReader, SpoolWriter};
use futures_util::{FutureExt, StreamExt};
use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{Event as BinlogEvent, EventData, RowsEventData, TableMapEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest};
use siphon_core::event::format_uuid;
use siphon_core::event::{Op, Row, SnapshotMarker};
use siphon_core::schema::TableSchema;
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, KeyChange, Result, TableName};
use siphon_incremental::{Chunk, Progress};

use crate::charset::Collations;
use crate::columns::{ColumnInfo, DataType, Shape, from_table_map};
use crate::ddl::{self, Statement, TableChange, Xid};
use crate::errors::my_error;
use crate::events::{self, EventFactory, Place, key_of};
use crate::gtid::{Gtid, GtidState};
use crate::incremental::{self, TableReader, Watermarks};
use crate::position::MysqlPosition;
use crate::resume::{Held, Resume};
use crate::rows::RowDecoder;
use crate::values::value;
use crate::xa;
use crate::{Checkpoint, GtidCheckpoint, MysqlConfig};

// The fuzz targets' way in (`fuzz/`): a child of this module, so that it drives the stream's
// own private steps (images, rows, MariaDB's GTID events) without widening them.
#[doc(hidden)]
pub mod fuzzing;

/// Events of an open transaction appended (without waiting) once this many are held.
const PART: usize = 4096;
/// How long, at most, read transactions wait for the next group commit while the server
/// always has more to send.
const PENDING_AT_MOST: std::time::Duration = std::time::Duration::from_millis(100);
/// How often, at most, a stream under load saves its GTID state.
const GTID_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// MariaDB's event types that `mysql_common` does not know.
const MARIADB_ANNOTATE_ROWS: u8 = 160;
const MARIADB_GTID: u8 = 162;
/// MariaDB's compressed row events (`log_bin_compress`), refused at start.
const MARIADB_COMPRESSED_ROWS: std::ops::RangeInclusive<u8> = 166..=171;
/// An event the server made up for the replica (a Rotate or format description at the
/// stream's start): its position is not a place in the binlog.
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;

/// A transaction being read.
struct Transaction {
    place: Place,
    events: Vec<Event>,
    /// Events of it already appended (parts of a large transaction).
    appended: bool,
    /// Ends at its next QUERY event (a DDL, or a non-transactional engine's statement).
    standalone: bool,
    /// A branch of an XA transaction, whose rows wait in a spool for its outcome.
    xa: Option<Branch>,
}

/// An XA transaction's prepare group being read.
struct Branch {
    /// Its id, where the group's start names it (MariaDB's GTID event, MySQL's XA START);
    /// the XA_prepare event that ends the group always does.
    xid: Option<Xid>,
    /// Its rows so far beyond one part.
    spool: Option<SpoolWriter>,
    /// Read again after a restart: its rows are spooled already.
    known: bool,
}

/// The stream of one pipeline's source.
pub struct Stream<'a> {
    pub ctx: &'a SourceContext,
    /// The source's checkpoint, which the stream saves its GTID state into.
    pub checkpoint: Checkpoint,
    pub config: &'a MysqlConfig,
    pub opts: mysql_async::Opts,
    pub factory: EventFactory,
    pub server_id: u32,
    pub mariadb: bool,
}

impl Stream<'_> {
    /// Streams from `resume` until cancelled or failed.
    pub async fn run(&self, resume: Resume) -> Result<()> {
        let mut conn = mysql_async::Conn::new(self.opts.clone())
            .await
            .map_err(|e| my_error("connecting for the binlog", &e))?;
        // The first Rotate carries the checksum after the file name (mysql_async#189).
        let checksum: Option<String> = conn
            .query_first("SELECT @@binlog_checksum")
            .await
            .map_err(|e| my_error("reading binlog_checksum", &e))?;
        let checksummed = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
        let collations = Collations::read(&mut conn).await?;
        // MariaDB: the GTID state the stream keeps from here on.
        let gtids = match (&resume.gtids, self.mariadb) {
            (Some(gtids), _) => Some(gtids.clone()),
            (None, true) => {
                let at: Option<String> = conn
                    .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (&resume.file, resume.pos))
                    .await
                    .map_err(|e| my_error("reading the GTID state at the binlog position", &e))?;
                at.as_deref().and_then(GtidState::parse)
            }
            (None, false) => None,
        };
        let heartbeat_ns = self.config.heartbeat_interval.0.as_nanos();
        let mut setup = vec![format!("SET @master_heartbeat_period = {heartbeat_ns}")];
        if self.mariadb {
            // Real GTID events (type 162) instead of their MySQL-compatible stand-ins.
            setup.push("SET @mariadb_slave_capability = 4".into());
        }
        if let Some(state) = &resume.gtids {
            setup.push(format!("SET @slave_connect_state = '{state}'"));
        }
        for sql in setup {
            conn.query_drop(&sql)
                .await
                .map_err(|e| my_error("preparing the binlog connection", &e))?;
        }
        let request = BinlogStreamRequest::new(self.server_id)
            .with_filename(resume.file.as_bytes())
            .with_pos(resume.pos);
        let mut stream = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| my_error("requesting the binlog", &e))?;
        match &resume.gtids {
            Some(state) => {
                tracing::info!(gtid = %state, server_id = self.server_id, "streaming the binlog after this GTID state");
            }
            None => {
                tracing::info!(file = %resume.file, pos = resume.pos, server_id = self.server_id, "streaming the binlog");
            }
        }
        self.ctx.metrics.connected();
        let mut state = State {
            file: resume.file.clone(),
            next_pos: resume.pos,
            checksummed_rotate: checksummed,
            held: resume.held.clone(),
            transaction: None,
            shapes: HashMap::new(),
            collations,
            generic_decodes: 0,
            gtids,
            gtids_saved: None,
            saved: self.checkpoint.gtids.clone(),
            xa: self.checkpoint.xa.clone(),
            xa_ahead: self
                .checkpoint
                .xa
                .iter()
                .filter(|p| p.read_again_from(&resume))
                .map(|p| p.at.clone())
                .collect(),
            pending: Pending::default(),
            snapshot: IncrementalState {
                progress: self.checkpoint.incremental.clone(),
                known: self.checkpoint.tables.clone().unwrap_or_default(),
                tables_changed: false,
                created: BTreeSet::new(),
                chunk: None,
                reader: None,
                conn: None,
                watermarks: Watermarks::new(self.config, &self.ctx.pipeline),
            },
        };
        state.snapshot.progress.report(&self.ctx.metrics);
        self.save_gtids(&mut state, true)?;
        loop {
            if self.ctx.cancel.is_cancelled() {
                // Stopped: what is pending goes to the log; between transactions the GTID
                // state is exact, for a restart by GTID on a server that no longer holds this
                // binlog file.
                self.flush(&mut state).await?;
                if state.transaction.is_none() {
                    self.save_gtids(&mut state, true)?;
                }
                return Ok(());
            }
            if state.transaction.is_none() {
                self.between_transactions(&mut state).await?;
            }
            // Whatever the server has sent already joins the pending transactions; when nothing
            // more is waiting, they go to the log with one fsync (group commit).
            if state
                .pending
                .since
                .is_some_and(|since| since.elapsed() >= PENDING_AT_MOST)
            {
                // Always more to read (a backlog): the pending transactions wait no longer.
                self.flush(&mut state).await?;
            }
            let next = match stream.next().now_or_never() {
                Some(next) => next,
                None => {
                    self.flush(&mut state).await?;
                    tokio::select! {
                        () = self.ctx.cancel.cancelled() => continue,
                        // An incremental snapshot asked for: taken above, between transactions.
                        () = self.ctx.metrics.nudged(), if state.transaction.is_none() => continue,
                        next = stream.next() => next,
                    }
                }
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => return Err(my_error("reading the binlog", &e)),
                None => return Err(Error::transient("the server ended the binlog stream")),
            };
            self.handle(&mut state, &stream, &event).await?;
        }
    }

    async fn handle(
        &self,
        state: &mut State,
        stream: &BinlogStream,
        event: &BinlogEvent,
    ) -> Result<()> {
        let header = event.header();
        let kind = header.event_type_raw();
        let artificial = header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0;
        // Where this event starts: from its own header (a stream resumed by GTID does not
        // begin where the previous event ended), else after the last one.
        let start = if artificial {
            state.next_pos
        } else {
            u64::from(header.log_pos()).saturating_sub(u64::from(header.event_size()))
        };
        match kind {
            MARIADB_GTID => {
                if let Some(g) = mariadb_gtid(event.data(), header.server_id()) {
                    if let Some(state) = &mut state.gtids {
                        state.advance(g.gtid);
                    }
                    self.begin(
                        state,
                        start,
                        Some(g.gtid.to_string()),
                        header.server_id(),
                        g.standalone,
                    );
                    if let Some(xid) = g.prepared_xa {
                        self.xa_start(state, start, Some(xid));
                    }
                }
            }
            MARIADB_ANNOTATE_ROWS => {}
            k if MARIADB_COMPRESSED_ROWS.contains(&k) => {
                return Err(Error::permanent(
                    "the binlog holds compressed row events: set log_bin_compress = OFF on the server",
                ));
            }
            _ => match event
                .read_data()
                .map_err(|e| Error::permanent(format!("decoding a binlog event: {e}")))?
            {
                Some(EventData::RotateEvent(rotate)) => {
                    state.file = rotated_to(rotate.name_raw(), state.checksummed_rotate);
                    state.checksummed_rotate = false;
                    state.next_pos = rotate.position();
                    return Ok(());
                }
                Some(EventData::GtidEvent(g)) => {
                    // A group without BEGIN is one statement (a DDL), which ends it.
                    let gtid = format!("{}:{}", format_uuid(&g.sid()), g.gno());
                    self.begin(state, start, Some(gtid), header.server_id(), true);
                }
                // MySQL with gtid_mode = OFF starts each group so.
                Some(EventData::AnonymousGtidEvent(_)) => {
                    self.begin(state, start, None, header.server_id(), true);
                }
                Some(EventData::QueryEvent(q)) => {
                    let sql = q.query();
                    match ddl::statement(&sql, &q.schema()) {
                        Statement::Begin => match &mut state.transaction {
                            // MySQL's GTID event began it; BEGIN says it is more than one
                            // statement.
                            Some(t) => t.standalone = false,
                            None => self.begin(state, start, None, header.server_id(), false),
                        },
                        Statement::Commit => self.commit(state, header.timestamp()).await?,
                        Statement::XaStart(xid) => self.xa_start(state, start, xid),
                        Statement::XaCommit {
                            one_phase: true, ..
                        } if state.transaction.as_ref().is_some_and(|t| t.xa.is_some()) => {
                            self.xa_prepared(state, true, None, header.timestamp())
                                .await?;
                        }
                        Statement::XaCommit { xid, .. } => {
                            self.xa_resolve(state, &xid, true, header.timestamp())
                                .await?;
                        }
                        Statement::XaRollback(xid) => {
                            self.xa_resolve(state, &xid, false, header.timestamp())
                                .await?;
                        }
                        statement => {
                            if let Statement::Tables(changes) = &statement {
                                if changes.is_empty() {
                                    tracing::warn!(
                                        statement = %sql.chars().take(200).collect::<String>(),
                                        "a DDL statement whose tables siphon cannot read: if it removed or \
                                         replaced a captured table's rows, snapshot that table again \
                                         (siphon snapshot <pipeline> <database.table>)"
                                    );
                                }
                                self.tables_changed(state, changes, start, header.server_id())
                                    .await?;
                            }
                            // A statement outside BEGIN/COMMIT (a DDL): its own transaction.
                            if state.transaction.as_ref().is_some_and(|t| t.standalone) {
                                self.commit(state, header.timestamp()).await?;
                            }
                        }
                    }
                }
                Some(EventData::XidEvent(_)) => self.commit(state, header.timestamp()).await?,
                Some(EventData::XaPrepareLogEvent(body)) => {
                    let (one_phase, xid) = xa::prepare_event(&body).ok_or_else(|| {
                        Error::permanent("an XA_prepare event siphon cannot read")
                    })?;
                    self.xa_prepared(state, one_phase, Some(xid), header.timestamp())
                        .await?;
                }
                Some(EventData::RowsEvent(rows)) => {
                    self.rows(state, stream, &rows, header.timestamp()).await?;
                }
                Some(EventData::HeartbeatEvent) if state.transaction.is_none() => {
                    self.flush(state).await?;
                    self.ctx.metrics.caught_up();
                    self.report_reached(state);
                    self.save_gtids(state, true)?;
                }
                _ => {}
            },
        }
        if !artificial && kind != EventType::HEARTBEAT_EVENT as u8 {
            state.next_pos = u64::from(header.log_pos());
        }
        Ok(())
    }

    fn begin(
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
    async fn rows(
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
        let op = match rows {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => Op::Create,
            RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => Op::Delete,
        };
        let decoded = decoder
            .filter(|_| {
                !matches!(rows, RowsEventData::PartialUpdateRowsEvent(_))
                    && rows.columns_before_image().is_none_or(|b| b.all())
                    && rows.columns_after_image().is_none_or(|b| b.all())
            })
            .and_then(|d| images(&d, &shape, rows.rows_data(), op));
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
    async fn push(&self, state: &mut State, events: Vec<Event>) -> Result<()> {
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

    /// The open group (one is begun where none is: MySQL without GTIDs) is an XA
    /// transaction's prepare group (`xid`, where its start names it).
    fn xa_start(&self, state: &mut State, start: u64, xid: Option<Xid>) {
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
    async fn xa_prepared(
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
    async fn xa_resolve(
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
    async fn replay_spool(&self, state: &mut State, path: &std::path::Path) -> Result<()> {
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

    /// A statement changed tables (`changes`; none readable: any may have). The table maps
    /// that follow describe the tables as they now are. A chunk being read of one of them is
    /// read again, in its new shape (its high watermark then matches nothing); the patterns
    /// may name tables they did not (looked at between transactions). A captured table whose
    /// rows the statement removed gets a truncate event in the statement's transaction — one
    /// renamed in over it brings rows no binlog event carries, so it is snapshotted again.
    async fn tables_changed(
        &self,
        state: &mut State,
        changes: &[TableChange],
        start: u64,
        server_id: u32,
    ) -> Result<()> {
        let snapshot = &mut state.snapshot;
        snapshot.tables_changed = true;
        let touched =
            |table: &TableName| changes.is_empty() || changes.iter().any(|c| c.touches(table));
        if snapshot.progress.tables.front().is_some_and(&touched) {
            snapshot.chunk = None;
        }
        if snapshot.reader.as_ref().is_some_and(|r| touched(&r.name)) {
            snapshot.reader = None;
        }
        // The tables the log holds rows of, by their latest schema.
        let schemas = self.ctx.log.schemas().all();
        let logged = |db: &str, table: Option<&str>| -> Vec<Arc<TableSchema>> {
            schemas
                .iter()
                .filter(|s| {
                    &*s.connector == "mysql"
                        && &*s.database == db
                        && table.is_none_or(|t| &*s.table == t)
                })
                .cloned()
                .collect()
        };
        let mut emptied = Vec::new();
        let mut read_again = Vec::new();
        for change in changes {
            match change {
                TableChange::Created(t) => {
                    snapshot.created.insert(t.clone());
                }
                TableChange::Replaced(t) => {
                    snapshot.created.insert(t.clone());
                    emptied.push(t.clone());
                }
                TableChange::Truncated(t)
                | TableChange::Dropped(t)
                | TableChange::RenamedFrom(t) => {
                    emptied.push(t.clone());
                }
                TableChange::RenamedTo(t) | TableChange::Refreshed(t) => {
                    emptied.push(t.clone());
                    read_again.push(t.clone());
                }
                // Every table of it the log holds, whether or not the catalog still showed
                // it at the last look (dropped while siphon was down or behind).
                TableChange::DatabaseDropped(d) => emptied.extend(
                    logged(d, None)
                        .iter()
                        .map(|s| s.name())
                        .collect::<BTreeSet<_>>(),
                ),
                TableChange::Altered(_) => {}
            }
        }
        let captured = |t: &TableName| self.config.captures(t.namespace(), t.table());
        let read_again: Vec<TableName> = read_again.into_iter().filter(captured).collect();
        if !read_again.is_empty() {
            tracing::info!(tables = ?read_again, "tables whose rows changed without row events: snapshotting them incrementally");
            // From their first key, also one being read now: its rows are other rows.
            snapshot.progress.restart(read_again);
            self.save(state)?;
        }
        let mut truncated = Vec::new();
        for t in emptied.iter().filter(|t| captured(t)) {
            let (db, table) = (t.namespace(), t.table());
            let schema = logged(db, Some(table)).into_iter().max_by_key(|s| s.id);
            let schema = match schema {
                Some(schema) => schema,
                // Replaced while new to the log: its shape registered now, so that reading
                // this statement again after a restart makes the same events.
                None if changes.contains(&TableChange::Replaced(t.clone())) => {
                    let conn = query_conn(&mut state.snapshot.conn, &self.opts).await?;
                    match crate::catalog::columns(conn, db, table).await {
                        Ok((columns, key)) if !columns.is_empty() => {
                            Shape::new((db, table), columns, key, &self.factory.name, |s| {
                                self.ctx.register_schema(s)
                            })?
                            .schema
                        }
                        _ => continue,
                    }
                }
                // Nothing of it is in the log: nothing to truncate in any store.
                None => continue,
            };
            truncated.push(schema);
        }
        if truncated.is_empty() {
            return Ok(());
        }
        if state.transaction.is_none() {
            self.begin(state, start, None, server_id, true);
        }
        let place = state.transaction.as_ref().expect("begun").place.clone();
        let events = truncated
            .iter()
            .map(|schema| self.factory.truncate(schema, &place))
            .collect();
        self.push(state, events).await
    }

    /// Ends the open transaction: its events become durable, the last marked as its end.
    async fn commit(&self, state: &mut State, timestamp: u32) -> Result<()> {
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
    async fn flush(&self, state: &mut State) -> Result<()> {
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
    async fn append_pending(&self, pending: &mut Pending) -> Result<()> {
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
    fn report_reached(&self, state: &State) {
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
    fn save_gtids(&self, state: &mut State, idle: bool) -> Result<()> {
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
    fn save(&self, state: &State) -> Result<()> {
        self.ctx.offsets.save_source_checkpoint(&Checkpoint {
            gtids: state.saved.clone(),
            xa: state.xa.clone(),
            incremental: state.snapshot.progress.clone(),
            tables: Some(state.snapshot.known.clone()),
            ..self.checkpoint.clone()
        })
    }

    /// Between transactions: looks for tables a DDL made, and, with no chunk open, takes what
    /// was asked of the incremental snapshot (saved at once, so that a failed read loses no
    /// request) and reads its next chunk between watermarks.
    async fn between_transactions(&self, state: &mut State) -> Result<()> {
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
    async fn poll_tables(&self, state: &mut State) -> Result<bool> {
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
    async fn watermark(
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

/// An incremental snapshot as the stream runs it, and the tables the patterns name.
struct IncrementalState {
    progress: Progress,
    /// The captured tables at the last look ("database.table").
    known: BTreeSet<TableName>,
    /// A DDL passed since: look at the tables again.
    tables_changed: bool,
    /// Tables the binlog showed created since the last look.
    created: BTreeSet<TableName>,
    /// The chunk whose watermarks the stream waits for.
    chunk: Option<Chunk>,
    reader: Option<TableReader>,
    /// The connection chunks are read and watermarks written on, opened when first needed.
    conn: Option<mysql_async::Conn>,
    watermarks: Watermarks,
}

/// The incremental snapshot's connection, opened when first needed.
async fn query_conn<'c>(
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

/// Transactions read and not yet in the log: appended together, with one fsync, when the
/// server has sent nothing more (group commit).
#[derive(Default)]
struct Pending {
    events: Vec<Event>,
    /// Indices of the events that end a transaction.
    ends: Vec<usize>,
    /// Commit time (ms since the epoch) of the newest transaction pending.
    commit_ms: Option<i64>,
    /// When the oldest became pending.
    since: Option<std::time::Instant>,
}

/// What the stream keeps between events.
struct State {
    /// Transactions read, not yet in the log.
    pending: Pending,
    /// The GTID checkpoint last saved.
    saved: Option<GtidCheckpoint>,
    /// Prepared XA transactions whose outcome has not come yet.
    xa: Vec<xa::Prepared>,
    /// Those of them (by place) whose prepare group the stream reads again after a restart:
    /// no COMMIT before it is theirs.
    xa_ahead: BTreeSet<String>,
    /// The incremental snapshot, and the tables known.
    snapshot: IncrementalState,
    /// The binlog file being read.
    file: String,
    /// The position after the last event read: where the next one starts.
    next_pos: u64,
    /// The next Rotate is the stream's first, whose file name ends in the checksum's bytes.
    checksummed_rotate: bool,
    /// The transaction the log holds rows of, skipped up to the last row held.
    held: Option<Held>,
    /// MariaDB: the GTID state after the last transaction read.
    gtids: Option<GtidState>,
    /// When the GTID state was last saved, and what it was.
    gtids_saved: Option<(std::time::Instant, GtidState)>,
    transaction: Option<Transaction>,
    /// Table shapes by table id, with the table map they were made from and siphon's own
    /// decoder of their row images (none where a column's type needs `mysql_common`'s).
    shapes: HashMap<u64, Mapped>,
    /// The server's collations: a table map names its columns' character sets by them.
    collations: Collations,
    /// Rows events read by `mysql_common`'s decoder rather than siphon's.
    generic_decodes: u64,
}

/// A table id's table map, and what was made of it.
struct Mapped {
    table_map: TableMapEvent<'static>,
    shape: Arc<Shape>,
    decoder: Option<Arc<RowDecoder>>,
}

impl State {
    /// The shape of a table map: made (and its schema registered) when the map differs from
    /// the one seen before for that table id.
    fn shape(
        &mut self,
        ctx: &SourceContext,
        factory: &EventFactory,
        table_id: u64,
        tme: &TableMapEvent<'_>,
    ) -> Result<(Arc<Shape>, Option<Arc<RowDecoder>>)> {
        if let Some(mapped) = self.shapes.get(&table_id)
            && mapped.table_map == *tme
        {
            return Ok((mapped.shape.clone(), mapped.decoder.clone()));
        }
        let (columns, key) = from_table_map(tme, &self.collations)?;
        let shape = Arc::new(Shape::new(
            (&tme.database_name(), &tme.table_name()),
            columns,
            key,
            &factory.name,
            |s| ctx.register_schema(s),
        )?);
        let decoder = RowDecoder::new(tme, &shape.columns).map(Arc::new);
        self.shapes.insert(
            table_id,
            Mapped {
                table_map: tme.clone().into_owned(),
                shape: shape.clone(),
                decoder: decoder.clone(),
            },
        );
        Ok((shape, decoder))
    }
}

/// The (before, after) images of a rows event's data by siphon's decoder; `None` if the bytes
/// do not decode (then `mysql_common`'s decoder reads them).
fn images(
    decoder: &RowDecoder,
    shape: &Shape,
    data: &[u8],
    op: Op,
) -> Option<Vec<(Option<Row>, Option<Row>)>> {
    let (before, after) = match op {
        Op::Create => (false, true),
        Op::Update => (true, true),
        _ => (true, false),
    };
    let mut at = 0;
    let mut out = Vec::new();
    let image = |at: &mut usize| -> Option<Row> {
        let (values, used) = decoder.image(data.get(*at..)?, &shape.columns)?;
        *at += used;
        Some(Row(shape
            .columns
            .iter()
            .map(|c| c.name.clone())
            .zip(values)
            .collect()))
    };
    while at < data.len() {
        let b = if before { Some(image(&mut at)?) } else { None };
        let a = if after { Some(image(&mut at)?) } else { None };
        out.push((b, a));
    }
    if out.is_empty() && !data.is_empty() {
        return None;
    }
    Some(out)
}

/// A row image as a row of `shape`'s columns (the full image: every column, in order).
fn row(shape: &Shape, image: BinlogRow) -> Result<Row> {
    if image.len() != shape.columns.len() {
        return Err(Error::permanent(format!(
            "a row image of {}.{} holds {} of its {} columns: set binlog_row_image = FULL on the server",
            shape.database,
            shape.table,
            image.len(),
            shape.columns.len()
        )));
    }
    let values = image
        .unwrap()
        .into_iter()
        .zip(&shape.columns)
        .map(|(v, c)| {
            let v = match v {
                BinlogValue::Value(v) => generic_fixups(c, v),
                BinlogValue::Jsonb(document) => match crate::json::document(&document) {
                    Some(text) => mysql_async::Value::Bytes(text.into_bytes()),
                    None => {
                        tracing::warn!(column = %c.name, "a binary JSON value siphon cannot read: NULL");
                        mysql_async::Value::NULL
                    }
                },
                // Stopping is the only way not to lose the value: the row image holds only
                // an edit of it.
                BinlogValue::JsonDiff(_) => {
                    return Err(Error::permanent(format!(
                        "a partial JSON update of {}.{}.{} (binlog_row_value_options = \
                         PARTIAL_JSON in the writing session): the binlog holds only the edit, \
                         which siphon does not apply; set binlog_row_value_options = '' \
                         globally and in every session",
                        shape.database, shape.table, c.name
                    )));
                }
            };
            Ok((c.name.clone(), value(c, v)))
        })
        .collect::<Result<_>>()?;
    Ok(Row(values))
}

/// Corrects what `mysql_common` (0.35) reads differently from the server.
fn generic_fixups(c: &ColumnInfo, v: mysql_async::Value) -> mysql_async::Value {
    match v {
        // A SET is its bitmask, little-endian, in the row image (the result set's form is the
        // labels' text).
        mysql_async::Value::Bytes(b) if matches!(c.data_type, DataType::Set(_)) => {
            mysql_async::Value::Int(
                b.iter()
                    .rev()
                    .fold(0_i64, |bits, byte| bits << 8 | i64::from(*byte)),
            )
        }
        // It reads a signed MEDIUMINT without its sign: the high byte zero, -1 comes as
        // 16777215.
        mysql_async::Value::Int(i) if c.column.type_name == "mediumint" && i >= 1 << 23 => {
            mysql_async::Value::Int(i - (1 << 24))
        }
        // It reads YEAR 0000 (the byte 0) as 1900, which no YEAR holds (1901 to 2155).
        mysql_async::Value::Bytes(b) if c.column.type_name == "year" && b == b"1900" => {
            mysql_async::Value::Int(0)
        }
        v => v,
    }
}

/// Sets an event's index within its transaction (position `row`, transaction order).
fn set_row(event: &mut Event, index: u64) {
    if let Some(at) = event.source.position.get::<MysqlPosition>() {
        let moved = MysqlPosition {
            row: u32::try_from(index).unwrap_or(u32::MAX),
            ..at.clone()
        };
        event.source.position = siphon_core::SourcePosition::new(moved);
    }
    if let Some(t) = &mut event.transaction {
        t.total_order = index + 1;
    }
}

/// What a MariaDB GTID event says of the group it starts.
#[derive(Debug, PartialEq, Eq)]
struct MariadbGtid {
    gtid: Gtid,
    /// It stands alone (a DDL: no BEGIN/COMMIT around it).
    standalone: bool,
    /// It is a prepared XA transaction's: this one's.
    prepared_xa: Option<Xid>,
}

/// A MariaDB GTID event. Body: sequence (8 bytes), domain (4), flags (1); with
/// FL_GROUP_COMMIT_ID (2) a commit id (8); with FL_PREPARED_XA (64) or FL_COMPLETED_XA (128)
/// the XID: format id (4), gtrid and bqual lengths (1 each), their bytes.
fn mariadb_gtid(body: &[u8], server: u32) -> Option<MariadbGtid> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    let flags = *body.get(12)?;
    let mut at = 13 + if flags & 2 != 0 { 8 } else { 0 };
    let prepared_xa = if flags & 64 != 0 {
        let format = u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?);
        let (gtrid, bqual) = (
            usize::from(*body.get(at + 4)?),
            usize::from(*body.get(at + 5)?),
        );
        at += 6;
        let data = body.get(at..at + gtrid + bqual)?;
        Some(Xid {
            format,
            gtrid: data[..gtrid].to_vec(),
            bqual: data[gtrid..].to_vec(),
        })
    } else {
        None
    };
    Some(MariadbGtid {
        gtid: Gtid {
            domain,
            server,
            seq,
        },
        standalone: flags & 1 != 0,
        prepared_xa,
    })
}

/// The file a Rotate event moves to. The stream's first Rotate, which the server makes up and
/// sends before the format description, carries the checksum's 4 bytes after the name, which
/// `mysql_common` cannot strip before it knows the format (mysql_async#189).
fn rotated_to(name: &[u8], checksummed: bool) -> String {
    let name = match name.len().checked_sub(4) {
        Some(end) if checksummed => &name[..end],
        _ => name,
    };
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_gtid_events_decode_from_their_bytes() {
        // Recorded from MariaDB 10.11 (mariadb-binlog --hexdump): "GTID 0-1-658 trans" and
        // "GTID 0-1-659 ddl", each with its CRC32 after the body.
        let trans = [
            0x92, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0, 0, 0, 0, 0, 0, 0xe1, 0xb1, 0x62,
            0xae,
        ];
        let ddl = [
            0x93, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0, 0, 0xd2, 0x14, 0x8e,
            0x9e,
        ];
        let text = |g: Option<MariadbGtid>| g.map(|g| (g.gtid.to_string(), g.standalone));
        assert_eq!(
            text(mariadb_gtid(&trans, 1)),
            Some(("0-1-658".into(), false))
        );
        assert_eq!(text(mariadb_gtid(&ddl, 1)), Some(("0-1-659".into(), true)));
        assert_eq!(
            mariadb_gtid(&trans[..12], 1),
            None,
            "a cut event is no GTID"
        );
        // "GTID 0-1-4" of XA PREPARE 'a' (flags: prepared XA, transactional, parallel), then
        // the multi-engine extra flags; and a group-commit one of 'gc1236' (commit id 907).
        let prepared = [
            4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 1, 0, 0, 0, 1, 0, b'a', 1, 0xff,
        ];
        let g = mariadb_gtid(&prepared, 1).unwrap();
        assert_eq!(
            (
                g.gtid.to_string(),
                g.standalone,
                g.prepared_xa.map(|x| x.to_string())
            ),
            ("0-1-4".into(), false, Some("X'61',X'',1".into()))
        );
        let mut grouped = vec![4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4e];
        grouped.extend(907u64.to_le_bytes());
        grouped.extend([1, 0, 0, 0, 6, 0]);
        grouped.extend(b"gc1236");
        assert_eq!(
            mariadb_gtid(&grouped, 1)
                .and_then(|g| g.prepared_xa)
                .map(|x| x.gtrid),
            Some(b"gc1236".to_vec())
        );
    }

    /// An event as a server sends it without checksums: the common header, then `body`.
    fn binlog_event(kind: u8, body: &[u8]) -> Vec<u8> {
        let size = (19 + body.len()) as u32;
        let mut out = vec![0, 0, 0, 0, kind, 1, 0, 0, 0];
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(body);
        out
    }

    /// Found by the binlog_rows fuzz target (siphon's decoder and mysql_common's disagreeing):
    /// mysql_common reads a signed MEDIUMINT without its sign, so that a table read by its
    /// decoder (here for MySQL's binary JSON column) got -1 as 16777215.
    #[test]
    fn the_generic_decoder_reads_negative_mediumints() {
        // Table map of d.t (mi mediumint, o time null: pre-5.6, which only mysql_common's
        // decoder reads), full metadata: signedness, names.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[2, 9, 11, 0, 0b10]);
        map.extend_from_slice(&[1, 1, 0b0000_0000]);
        map.extend_from_slice(&[4, 5, 2, b'm', b'i', 1, b'o']);
        // A v2 write rows event of two rows: -1 and -8388608, the time null.
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11];
        rows.extend_from_slice(&[0b10, 0xff, 0xff, 0xff, 0b10, 0x00, 0x00, 0x80]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let values: Vec<_> = events
            .iter()
            .map(|e| e.after.as_ref().unwrap().get("mi").cloned())
            .collect();
        assert_eq!(
            values,
            [
                Some(siphon_core::Value::Int(-1)),
                Some(siphon_core::Value::Int(-8_388_608))
            ]
        );
    }

    /// Found by the binlog_event fuzz target (the decoders disagreeing): mysql_common reads
    /// YEAR 0000 (byte 0) as 1900, where siphon's decoder and a query read 0.
    #[test]
    fn the_generic_decoder_reads_the_zero_year() {
        // Table map of d.t (y year, o pre-5.6 time null) with names; rows: 0000 and 2155.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[2, 13, 11, 0, 0b10]);
        map.extend_from_slice(&[1, 1, 0b0000_0000]);
        map.extend_from_slice(&[4, 4, 1, b'y', 1, b'o']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11];
        rows.extend_from_slice(&[0b10, 0, 0b10, 255]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let values: Vec<_> = events
            .iter()
            .map(|e| e.after.as_ref().unwrap().get("y").cloned())
            .collect();
        assert_eq!(
            values,
            [
                Some(siphon_core::Value::Int(0)),
                Some(siphon_core::Value::Int(2155))
            ]
        );
    }

    /// Found by the binlog_rows fuzz target (out of memory): the rows of a table map with no
    /// columns take no bytes, so reading them never ended.
    #[test]
    fn a_table_map_without_columns_is_refused() {
        let map = [1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0, 0, 0];
        let rows = [1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, b'o', b'n', b'e'];
        assert!(rows_after_map(&map, 31, &rows).is_err());
    }

    /// Found by the binlog_rows fuzz target (an allocation of 8 EiB): a DECIMAL whose table
    /// map gives a scale past its precision made mysql_common's reader size its buffer by
    /// the difference, wrapped.
    #[test]
    fn a_decimal_of_scale_past_its_precision_is_refused() {
        // Table map of d.t (n decimal(2,5)) with its name; a row of two bytes.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 246, 2, 2, 5, 0]);
        map.extend_from_slice(&[4, 2, 1, b'n']);
        let rows = [1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0, 0x80, 0x01];
        assert!(rows_after_map(&map, 30, &rows).is_err());
    }

    /// Found by the binlog fuzz targets (the decoders disagreeing): a binary DECIMAL whose
    /// digit group holds more than its digits (four digits holding 65535) read as
    /// "1234567890.65535" by siphon's decoder and "1234567890.-1" by mysql_common's; no
    /// server writes it, and it is no decimal: it travels as text.
    #[test]
    fn a_decimal_group_past_its_digits_travels_as_text() {
        // Table map of d.t (n decimal(14,4)) with its name; MySQL's documented
        // 1234567890.1234 (81 0D FB 38 D2 04 D2) with its fraction's group made FF FF.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 246, 2, 14, 4, 0]);
        map.extend_from_slice(&[1, 1, 0, 4, 2, 1, b'n']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0];
        rows.extend_from_slice(&[0x81, 0x0d, 0xfb, 0x38, 0xd2, 0xff, 0xff]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let value = events[0].after.as_ref().unwrap().get("n").cloned();
        assert!(
            matches!(value, Some(siphon_core::Value::Text(_))),
            "{value:?}"
        );
        assert!(
            stream.disagreements.is_empty(),
            "{:?}",
            stream.disagreements
        );
    }

    /// Found by the binlog fuzz targets: mysql_common's row reader indexes a column's
    /// metadata by its type unchecked, so a table map whose column lacks it (a VAR_STRING,
    /// which a table map gives none; a TYPED_ARRAY with none) panicked there.
    #[test]
    fn a_column_without_the_metadata_its_type_needs_is_refused() {
        for ty in [253, 244] {
            // Table map of d.t (v of type `ty`, no metadata) with its name; a row.
            let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
            map.extend_from_slice(&[1, ty, 0, 0]);
            map.extend_from_slice(&[4, 2, 1, b'v']);
            let rows = [1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0, 1, b'x'];
            let schemas = siphon_core::testing::MemorySchemas::default();
            let mut stream = fuzzing::Binlog::default();
            stream.event(&schemas, &binlog_event(19, &map)).unwrap();
            assert!(
                stream.event(&schemas, &binlog_event(30, &rows)).is_err(),
                "type {ty}"
            );
        }
    }

    /// Found by the binlog_rows fuzz target (the decoders disagreeing again on YEAR 0000):
    /// MariaDB's table map counts YEAR among the unsigned numbers, so its type read
    /// "year unsigned" — another schema version than the catalog's "year" — and the zero year
    /// escaped the fix above.
    #[test]
    fn a_year_the_table_map_calls_unsigned_is_a_year() {
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[2, 13, 245, 1, 4, 0b10]);
        map.extend_from_slice(&[1, 1, 0b1000_0000]);
        map.extend_from_slice(&[4, 4, 1, b'y', 1, b'j']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11];
        rows.extend_from_slice(&[0b10, 0]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let event = &events[0];
        assert_eq!(
            event.after.as_ref().unwrap().get("y"),
            Some(&siphon_core::Value::Int(0))
        );
        assert_eq!(event.schema.as_ref().unwrap().columns[0].type_name, "year");
    }

    /// Found by the binlog_event fuzz target (the decoders disagreeing): mysql_common reads
    /// a TIMESTAMP's seconds as signed, so one past 2038-01-19 (MariaDB 11.5 holds them to
    /// 2106) came out before 1970 from its decoder, where siphon's reads them unsigned.
    #[test]
    fn the_generic_decoder_reads_timestamps_past_2038() {
        // Table map of d.t (ts timestamp(0), o pre-5.6 time null) with names; 0xF6000000
        // seconds.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[2, 17, 11, 1, 0, 0b10]);
        map.extend_from_slice(&[4, 5, 2, b't', b's', 1, b'o']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11];
        rows.extend_from_slice(&[0b10, 0xf6, 0, 0, 0]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        assert_eq!(
            events[0].after.as_ref().unwrap().get("ts"),
            Some(&siphon_core::Value::TimestampTz(0xf600_0000 * 1_000_000))
        );
    }

    /// Read beside the TIMESTAMP finding: a table map giving a temporal column more than six
    /// digits of fraction (no server does) made siphon's decoder read up to 128 bytes of
    /// fraction and overflow adding them.
    #[test]
    fn a_fraction_of_more_than_six_digits_is_refused() {
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 17, 1, 16, 0]);
        map.extend_from_slice(&[4, 3, 2, b't', b's']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0];
        rows.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        rows.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert!(rows_after_map(&map, 30, &rows).is_err());
    }

    /// Found by the binlog_event fuzz target (the decoders disagreeing): a TIMESTAMP(6)
    /// whose three bytes of fraction hold more than six digits (8388607 µs) read as 8.4 s
    /// past its second by siphon's decoder and as 8388607 cut to its first six digits by
    /// mysql_common's; no server writes it, and it is no instant: it travels as text.
    #[test]
    fn a_fraction_past_its_digits_travels_as_text() {
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 17, 1, 6, 0]);
        map.extend_from_slice(&[4, 3, 2, b't', b's']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0];
        rows.extend_from_slice(&[0x60, 0, 0, 0, 0x7f, 0xff, 0xff]);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let value = events[0].after.as_ref().unwrap().get("ts").cloned();
        assert!(
            matches!(value, Some(siphon_core::Value::Text(_))),
            "{value:?}"
        );
    }

    /// Found by the binlog_rows fuzz target (the decoders disagreeing): a BIT column whose
    /// table map gives its last byte more than 7 bits (210) took 2 bytes in siphon's
    /// decoder and 28 in mysql_common's.
    #[test]
    fn a_bit_column_of_more_than_seven_bits_in_its_last_byte_is_refused() {
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 16, 2, 210, 1, 0]);
        map.extend_from_slice(&[4, 2, 1, b'b']);
        let rows = [1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0, 9, 1];
        assert!(rows_after_map(&map, 30, &rows).is_err());
    }

    /// A table map of d.t (tm time(2), j json) with names, and a v2 write rows event of one
    /// row: TIME(2) -00:00:01.50 and the JSON document `json`.
    fn time_and_json(json: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[2, 19, 245, 2, 2, 4, 0b11]);
        map.extend_from_slice(&[4, 5, 2, b't', b'm', 1, b'j']);
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11, 0b00];
        // -1.5 s: the integer part -2 (+ 1 as read) and the fraction 0x100 - 50, offset by
        // 0x800000.
        rows.extend_from_slice(&[0x7f, 0xff, 0xfe, 0xce]);
        rows.extend_from_slice(&(json.len() as u32).to_le_bytes());
        rows.extend_from_slice(json);
        (map, rows)
    }

    /// Before: a table with a JSON column went to mysql_common's decoder, which reads a
    /// negative TIME(1)/TIME(2) with a fraction 625 hours off and makes a whole document
    /// holding a DECIMAL, DATE or TIME (an opaque scalar) NULL. siphon's decoder reads both.
    #[test]
    fn mysql_json_tables_read_negative_short_fraction_times_and_opaque_scalars() {
        // {"p": 12.50}: a small object whose one value is an opaque DECIMAL(4,2).
        let json = [
            0x00, 1, 0, 18, 0, 11, 0, 1, 0, 0x0f, 12, 0, b'p', 246, 4, 4, 2, 0x8c, 0x32,
        ];
        let (map, rows) = time_and_json(&json);
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, &map)).unwrap();
        let events = stream.event(&schemas, &binlog_event(30, &rows)).unwrap();
        let after = events[0].after.as_ref().unwrap();
        assert_eq!(after.get("tm"), Some(&siphon_core::Value::Time(-1_500_000)));
        assert_eq!(
            after.get("j"),
            Some(&siphon_core::Value::Json(r#"{"p": 12.50}"#.into()))
        );
    }

    /// Before: a partial JSON update (`binlog_row_value_options = PARTIAL_JSON`, settable per
    /// session on MySQL 8) carried the column as NULL, with a warning. Only its edit is in the
    /// binlog, so the stream stops, naming the setting.
    #[test]
    fn a_partial_json_update_stops_the_stream_naming_the_setting() {
        let (map, _) = time_and_json(&[]);
        // A partial update rows event (type 39): columns bitmaps, then the before image
        // (TIME(2) zero, JSON null), then the after image: its value options (partial JSON),
        // which JSON columns are partial, its null bitmap, and a JSON that is a diff
        // (REPLACE at path "$" of the literal true).
        let mut rows = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0b11, 0b11];
        rows.extend_from_slice(&[0b00, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        rows.extend_from_slice(&[0x01, 0b1, 0b00, 0x80, 0, 0, 0]);
        let diff = [0, 1, b'$', 2, 0x04, 0x01];
        rows.extend_from_slice(&(diff.len() as u32).to_le_bytes());
        rows.extend_from_slice(&diff);
        let error = rows_after_map(&map, 39, &rows).unwrap_err().to_string();
        assert!(
            error.contains("binlog_row_value_options") && error.contains("d.t.j"),
            "{error}"
        );
    }

    /// What a rows event of kind `kind` makes after table map `map`, on a fresh stream.
    fn rows_after_map(map: &[u8], kind: u8, rows: &[u8]) -> Result<Vec<Event>> {
        let schemas = siphon_core::testing::MemorySchemas::default();
        let mut stream = fuzzing::Binlog::default();
        stream.event(&schemas, &binlog_event(19, map)).unwrap();
        stream.event(&schemas, &binlog_event(kind, rows))
    }

    /// Found by the binlog_event fuzz target (capacity overflow): a table map's ENUM labels
    /// counting more labels than the field has bytes made mysql_common size a vector by the
    /// count; siphon reads the labels itself and refuses such a list.
    #[test]
    fn enum_labels_counting_past_their_bytes_are_refused() {
        // Table map of d.t (e enum('a','b')) with its name, then its ENUM labels; a row of it.
        let mut map = vec![1, 0, 0, 0, 0, 0, 1, 0, 1, b'd', 0, 1, b't', 0];
        map.extend_from_slice(&[1, 254, 2, 247, 1, 0]);
        map.extend_from_slice(&[4, 2, 1, b'e']);
        let rows = [1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 1, 0, 2];
        let read = |labels: &[u8]| rows_after_map(&[&map[..], labels].concat(), 30, &rows);
        read(&[6, 5, 2, 1, b'a', 1, b'b']).unwrap();
        let huge = read(&[6, 9, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        let error = huge.unwrap_err();
        assert!(error.to_string().contains("labels cut short"), "{error}");
        assert!(read(&[6, 4, 2, 1, b'a', 5]).is_err());
    }

    #[test]
    fn the_first_rotate_loses_its_checksum_bytes() {
        assert_eq!(
            rotated_to(b"mysql-bin.000007\xe1\xb1\x62\xae", true),
            "mysql-bin.000007"
        );
        assert_eq!(rotated_to(b"mysql-bin.000008", false), "mysql-bin.000008");
    }
}
