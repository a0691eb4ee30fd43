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
use mysql_async::binlog::events::{
    BinlogEventHeader, Event as BinlogEvent, EventData, RowsEventData, TableMapEvent,
};
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
mod chunks;
#[doc(hidden)]
pub mod fuzzing;
mod images;
mod mariadb;
mod prepared;
mod table_changes;
#[cfg(test)]
mod tests;
mod transactions;

use chunks::{IncrementalState, query_conn};
use images::{Mapped, op_of, own_images, row, set_row};
use mariadb::{mariadb_gtid, rotated_to};

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
        let (mut stream, state) = self.connect(&resume).await?;
        self.ctx.metrics.connected();
        self.follow(&mut stream, state).await
    }

    /// Asks the server for the binlog from `resume`; the stream's state to begin with.
    async fn connect(&self, resume: &Resume) -> Result<(BinlogStream, State)> {
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
        let stream = conn
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
        let state = State {
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
                .filter(|p| p.read_again_from(resume))
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
        Ok((stream, state))
    }

    /// Reads the binlog into the log until cancelled or failed.
    async fn follow(&self, stream: &mut BinlogStream, mut state: State) -> Result<()> {
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
            self.handle(&mut state, stream, &event).await?;
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
                    self.statement(state, &q.query(), &q.schema(), start, &header)
                        .await?;
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

    /// A statement of the binlog (`sql`, in database `schema`), begun at `start`: a
    /// transaction's BEGIN or COMMIT, an XA step, or a DDL, which changes tables and, outside
    /// BEGIN/COMMIT, is a transaction of its own.
    async fn statement(
        &self,
        state: &mut State,
        sql: &str,
        schema: &str,
        start: u64,
        header: &BinlogEventHeader,
    ) -> Result<()> {
        match ddl::statement(sql, schema) {
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
        Ok(())
    }
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
