//! The MySQL/MariaDB source (`kind = "mysql"`): a consistent snapshot, then the binlog read as
//! a replica, appended to the change log exactly once.
//!
//! The connection, the binlog protocol and the row-image decoding are `mysql_async`'s (with
//! `mysql_common`); MariaDB's own events (GTID, annotate rows) are read here from their bytes.
//! Each table map, with the server's full row metadata (`binlog_row_metadata = FULL`), is
//! authoritative for the rows that follow it: names, signedness, enum labels and the primary
//! key come from it, so a table altered mid-stream decodes right, and each shape is a schema
//! version in the log.

mod binary;
mod catalog;
mod charset;
mod columns;
mod config;
mod ddl;
mod errors;
mod events;
pub mod gtid;
mod incremental;
mod json;
mod position;
mod resume;
mod rows;
mod snapshot;
mod spool;
mod stream;
mod values;
mod xa;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use siphon_core::Event;
use siphon_core::event::SnapshotMarker;
use siphon_core::log::{LogId, RecordFlags};
use siphon_core::position::{SourcePoint, SourcePosition};
use siphon_core::source::{SnapshotMode, Source, SourceContext, TableInfo};
use siphon_core::{Error, Result, TableName};
use siphon_incremental::Progress;

pub use config::{MysqlConfig, TlsMode};
use events::EventFactory;
use gtid::{Gtid, GtidState};
pub use position::MysqlPosition;
use resume::{Held, Resume};
use siphon_core::kind::{Kind, SourceKind};
/// For the fuzz targets only (`fuzz/`): the binlog event and row-image decoders, which are
/// private, driven as the stream drives them. Not an API.
#[doc(hidden)]
pub use stream::fuzzing;

/// What the source keeps in the pipeline's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Checkpoint {
    /// Whether the snapshot finished.
    snapshot_done: bool,
    /// The binlog position the snapshot is consistent with: where streaming starts.
    file: String,
    /// Position in `file`.
    pos: u64,
    /// The change log the snapshot went into.
    log_id: Option<LogId>,
    /// MariaDB: the GTID state, saved by the stream now and then.
    #[serde(default)]
    gtids: Option<GtidCheckpoint>,
    /// Prepared XA transactions whose COMMIT or ROLLBACK has not come yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    xa: Vec<xa::Prepared>,
    /// An incremental snapshot in progress: the tables left and where the current one stands.
    #[serde(default, skip_serializing_if = "is_idle")]
    incremental: Progress,
    /// The tables the patterns named at the last look: one found later
    /// that is not among them is snapshotted incrementally. None in checkpoints of older
    /// siphons (then the tables found at start are taken as known).
    #[serde(default)]
    tables: Option<BTreeSet<TableName>>,
}

fn is_idle(progress: &Progress) -> bool {
    *progress == Progress::default()
}

/// MariaDB's GTID state as the stream last saved it. The log's last event names its own
/// transaction's GTID only; the state (one GTID per replication domain) that a restart
/// connects with is this one, brought up to date with the GTIDs of the events the log took
/// after it was saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GtidCheckpoint {
    /// The state after the last transaction read (`domain-server-sequence`, comma-separated).
    state: String,
    /// The log's durable end when saved: the state counts every transaction before it, and
    /// nothing after it (it is saved between transactions only, never with one open).
    log_end: u64,
    /// Written by siphon 0.1 (a transaction open when saved): such a state is not used.
    #[serde(default, skip_serializing)]
    open: Option<serde::de::IgnoredAny>,
}

/// `kind = "mysql"`.
#[derive(Debug)]
pub struct MysqlKind;

impl Kind for MysqlKind {
    const NAME: &'static str = "mysql";
    type Config = MysqlConfig;
    fn validate(config: &MysqlConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SourceKind for MysqlKind {
    const CONNECTOR: &'static str = "mysql";

    fn build(config: &MysqlConfig, pipeline: &str) -> Box<dyn Source> {
        Box::new(MysqlSource::new(pipeline, config.clone()))
    }

    fn decode_position(bytes: &[u8]) -> Option<SourcePosition> {
        MysqlPosition::decode(bytes).map(SourcePosition::new)
    }

    fn parse_point(param: &str, text: &str) -> Option<std::result::Result<SourcePoint, String>> {
        (param == "gtid").then(|| match GtidState::parse(text) {
            Some(state) => Ok(Arc::new(state) as SourcePoint),
            None => Err(format!(
                "gtid={text:?} is not a GTID state: domain-server-sequence, comma-separated"
            )),
        })
    }
}

/// The MySQL/MariaDB source of one pipeline.
#[derive(Debug)]
pub struct MysqlSource {
    pipeline: String,
    config: MysqlConfig,
}

impl MysqlSource {
    /// The source of pipeline `pipeline`.
    pub fn new(pipeline: &str, config: MysqlConfig) -> Self {
        MysqlSource {
            pipeline: pipeline.to_owned(),
            config,
        }
    }

    fn opts(&self) -> Result<mysql_async::Opts> {
        let opts = mysql_async::Opts::from_url(self.config.url.expose())
            .map_err(|e| Error::permanent(format!("url: {e}")))?;
        let mut builder = mysql_async::OptsBuilder::from_opts(opts);
        if let Some(p) = &self.config.password {
            builder = builder.pass(Some(p.expose().to_owned()));
        }
        if let Some(path) = &self.config.password_file {
            let secret = siphon_core::Secret::from_file(path)
                .map_err(|e| Error::permanent(format!("password_file {}: {e}", path.display())))?;
            builder = builder.pass(Some(secret.expose().to_owned()));
        }
        Ok(builder.ssl_opts(self.config.ssl_opts()).into())
    }

    async fn connect(&self) -> Result<mysql_async::Conn> {
        mysql_async::Conn::new(self.opts()?)
            .await
            .map_err(|e| errors::my_error("connecting to MySQL", &e))
    }

    /// The captured tables' shapes, from the catalog, their schemas registered.
    async fn shapes(
        &self,
        ctx: &SourceContext,
        conn: &mut mysql_async::Conn,
    ) -> Result<Vec<columns::Shape>> {
        let mut out = Vec::new();
        for name in catalog::tables(conn, &self.config).await? {
            let (columns, key) = catalog::columns(conn, name.namespace(), name.table()).await?;
            out.push(columns::Shape::new(
                (name.namespace(), name.table()),
                columns,
                key,
                &self.pipeline,
                |s| ctx.register_schema(s),
            )?);
        }
        Ok(out)
    }
}

#[async_trait]
impl Source for MysqlSource {
    async fn check(&mut self) -> Result<()> {
        let mut conn = self.connect().await?;
        catalog::preflight(&mut conn).await?;
        catalog::tables(&mut conn, &self.config).await.map(drop)
    }

    async fn tables(&mut self) -> Result<Vec<TableInfo>> {
        let mut conn = self.connect().await?;
        let mut out = Vec::new();
        for name in catalog::tables(&mut conn, &self.config).await? {
            let (columns, key) =
                catalog::columns(&mut conn, name.namespace(), name.table()).await?;
            out.push(TableInfo {
                name,
                key_columns: key.iter().map(|&i| columns[i].name.to_string()).collect(),
            });
        }
        Ok(out)
    }

    async fn columns(&mut self) -> Result<Option<BTreeMap<TableName, Vec<String>>>> {
        let mut conn = self.connect().await?;
        let mut out = BTreeMap::new();
        for name in catalog::tables(&mut conn, &self.config).await? {
            let (columns, _) = catalog::columns(&mut conn, name.namespace(), name.table()).await?;
            out.insert(name, columns.iter().map(|c| c.name.to_string()).collect());
        }
        Ok(Some(out))
    }

    async fn run(&mut self, ctx: &SourceContext) -> Result<()> {
        let mut conn = self.connect().await?;
        catalog::preflight(&mut conn).await?;
        let mariadb = catalog::is_mariadb(&mut conn).await?;
        let server_id = self.config.server_id(&self.pipeline);
        let factory = EventFactory {
            name: self.pipeline.as_str().into(),
        };
        // A checkpoint of another change log says nothing about this one.
        let checkpoint = ctx
            .offsets
            .source_checkpoint::<Checkpoint>()?
            .filter(|c| c.log_id.as_ref() == Some(ctx.log.id()))
            .unwrap_or_default();
        let resume = match resume_from_log(ctx, &checkpoint).await? {
            Some(resume) => Some(resume),
            None => checkpoint.snapshot_done.then(|| Resume {
                file: checkpoint.file.clone(),
                pos: checkpoint.pos,
                gtids: checkpoint
                    .gtids
                    .as_ref()
                    .and_then(|g| GtidState::parse(&g.state))
                    .filter(|g| !g.is_empty()),
                held: None,
            }),
        };
        let resume = if self
            .needs_snapshot(&mut conn, &checkpoint, resume.as_ref())
            .await?
        {
            match self
                .snapshot(ctx, &mut conn, &factory, (mariadb, server_id))
                .await
            {
                // Stopped mid-snapshot: the next start takes it again.
                Err(Error::Cancelled) => return Ok(()),
                other => other?,
            }
        } else if let Some(resume) = resume {
            resume
        } else {
            // snapshot = "never", first start: from the server's current position.
            let (file, pos, _) = catalog::binlog_position(&mut conn).await?;
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                snapshot_done: true,
                file: file.clone(),
                pos,
                log_id: Some(ctx.log.id().clone()),
                ..Checkpoint::default()
            })?;
            Resume {
                file,
                pos,
                gtids: None,
                held: None,
            }
        };
        let checkpoint = self.take_new_tables(ctx, &mut conn).await?;
        drop(conn);
        stream::Stream {
            ctx,
            checkpoint,
            config: &self.config,
            opts: self.opts()?,
            factory,
            server_id,
            mariadb,
        }
        .run(resume)
        .await
    }
}

impl MysqlSource {
    /// Whether to take a snapshot now, by `snapshot` and whether the server still holds the
    /// binlog where siphon stopped (`resume`); an error where it does not and no snapshot may
    /// be taken.
    async fn needs_snapshot(
        &self,
        conn: &mut mysql_async::Conn,
        checkpoint: &Checkpoint,
        resume: Option<&Resume>,
    ) -> Result<bool> {
        let files = catalog::binlog_files(conn).await?;
        let gone = match resume {
            Some(r) if !files.contains(&r.file) => match (&r.gtids, files.first()) {
                // By GTID (another server of the topology names its files otherwise): gone if
                // the server's oldest binlog begins after the state.
                (Some(state), Some(oldest)) => catalog::gtid_state_at_start(conn, oldest)
                    .await?
                    .is_none_or(|start| !state.covers(&start)),
                _ => true,
            },
            _ => false,
        };
        let need_snapshot = match self.config.snapshot {
            SnapshotMode::Never => false,
            SnapshotMode::Initial => !checkpoint.snapshot_done,
            SnapshotMode::WhenNeeded => !checkpoint.snapshot_done || gone,
        };
        if gone && !need_snapshot {
            let r = resume.expect("gone implies a position");
            let gtid = r
                .gtids
                .as_ref()
                .map(|g| format!(" (GTID state {g})"))
                .unwrap_or_default();
            return Err(Error::permanent(format!(
                "the server no longer holds binlog file {} (purged?), where siphon stopped reading at \
                 position {}{gtid}: the changes since are lost to it. Set snapshot = \"when_needed\" to \
                 take a new snapshot, then rebuild the sinks",
                r.file, r.pos
            )));
        }
        Ok(need_snapshot)
    }

    /// Takes a consistent snapshot of the tables; where the stream begins after it.
    async fn snapshot(
        &self,
        ctx: &SourceContext,
        conn: &mut mysql_async::Conn,
        factory: &EventFactory,
        (mariadb, server_id): (bool, u32),
    ) -> Result<Resume> {
        ctx.offsets.save_source_checkpoint(&Checkpoint {
            log_id: Some(ctx.log.id().clone()),
            ..Checkpoint::default()
        })?;
        // A transaction prepared now (XA) is in neither the snapshot nor the binlog after it: a
        // COMMIT of it later brings rows siphon never sees.
        let prepared: Vec<mysql_async::Row> =
            mysql_async::prelude::Queryable::query(&mut *conn, "XA RECOVER")
                .await
                .unwrap_or_default();
        if !prepared.is_empty() {
            tracing::warn!(
                transactions = prepared.len(),
                "prepared XA transactions are open while the snapshot is taken: their rows will be \
                 missing from the stores if they commit (XA RECOVER lists them; commit or roll them \
                 back before snapshotting)"
            );
        }
        let point = snapshot::begin(conn, mariadb).await?;
        ctx.metrics.connected();
        tracing::info!(pipeline = %self.pipeline, file = %point.file, pos = point.pos, gtid = ?point.gtid, "snapshot: consistent at this binlog position");
        let shapes = self.shapes(ctx, conn).await?;
        let replaces_earlier = ctx.log.durable_end() > ctx.log.start_offset();
        let read = snapshot::read(
            ctx,
            conn,
            factory,
            &shapes,
            (&point, server_id),
            replaces_earlier,
        )
        .await?;
        tracing::info!(pipeline = %self.pipeline, rows = read.rows, "snapshot: done");
        let mut incremental = Progress::default();
        incremental.request(read.rebuilt);
        ctx.offsets.save_source_checkpoint(&Checkpoint {
            incremental,
            snapshot_done: true,
            file: point.file.clone(),
            pos: point.pos,
            log_id: Some(ctx.log.id().clone()),
            tables: Some(shapes.iter().map(columns::Shape::name).collect()),
            ..Checkpoint::default()
        })?;
        Ok(Resume {
            file: point.file,
            pos: point.pos,
            gtids: None,
            held: None,
        })
    }

    /// The checkpoint, with the tables that appeared while siphon was down (created, renamed
    /// in, or named by patterns widened since) asked of the incremental snapshot: their
    /// earlier rows are in no binlog event siphon reads. Settles XA transactions too.
    async fn take_new_tables(
        &self,
        ctx: &SourceContext,
        conn: &mut mysql_async::Conn,
    ) -> Result<Checkpoint> {
        let mut checkpoint = ctx
            .offsets
            .source_checkpoint::<Checkpoint>()?
            .unwrap_or_default();
        let known = checkpoint.tables.clone();
        let (now, added) =
            catalog::tables_since(conn, &self.config, &known.clone().unwrap_or_default()).await?;
        if known.is_some() && !added.is_empty() {
            tracing::info!(tables = ?added, "new tables match the source's patterns: snapshotting them incrementally");
            checkpoint.incremental.request(added);
        }
        checkpoint.tables = Some(now);
        xa::settle(ctx, &mut checkpoint.xa).await?;
        ctx.offsets.save_source_checkpoint(&checkpoint)?;
        Ok(checkpoint)
    }
}

/// Where streaming resumes when the log's last event is a streamed one: at the start of its
/// transaction, skipping the rows the log holds of it; on MariaDB by GTID state.
async fn resume_from_log(ctx: &SourceContext, checkpoint: &Checkpoint) -> Result<Option<Resume>> {
    let Some(record) = ctx.log.last_record().await? else {
        return Ok(None);
    };
    let event = Event::decode(&record.value, ctx.log.schemas(), &MysqlKind)?;
    // An incremental snapshot's rows sit at their high watermark's transaction, in the
    // stream's order.
    if !matches!(
        event.source.snapshot,
        SnapshotMarker::False | SnapshotMarker::Incremental
    ) {
        return Ok(None);
    }
    let Some(MysqlPosition {
        file,
        pos,
        row,
        gtid,
        ..
    }) = event.source.position.get::<MysqlPosition>().cloned()
    else {
        return Ok(None);
    };
    let ended = record.flags.contains(RecordFlags::TXN_END);
    let gtids = match (gtid.as_deref().and_then(Gtid::parse), &checkpoint.gtids) {
        (Some(last), Some(saved)) => gtids_at(ctx, saved, last, ended)?,
        _ => None,
    };
    // By GTID past a whole transaction, the server does not send it again.
    let held = (gtids.is_none() || !ended).then(|| Held {
        gtid,
        file: file.clone(),
        pos,
        row: u64::from(row),
    });
    Ok(Some(Resume {
        file,
        pos,
        gtids,
        held,
    }))
}

/// The GTID state to connect with: the saved one, brought up to date with the GTIDs of the
/// events the log took after it was saved — up to the last event's transaction, when the log
/// holds only part of it (then the server sends that transaction again). `None` (connect by
/// file and position) where the checkpoint cannot tell.
fn gtids_at(
    ctx: &SourceContext,
    saved: &GtidCheckpoint,
    last: Gtid,
    ended: bool,
) -> Result<Option<GtidState>> {
    let Some(mut state) = GtidState::parse(&saved.state) else {
        return Ok(None);
    };
    if saved.open.is_some() {
        // Saved by siphon 0.1 with a transaction open: its state may count that transaction
        // although the log holds none of it. By file and position instead.
        return Ok(None);
    }
    // The state before the last event's transaction began, once its first event is read.
    let mut before_last = None;
    let mut reader = ctx.log.reader(saved.log_end.max(ctx.log.start_offset()))?;
    loop {
        let records = reader.read_available(1024)?;
        if records.is_empty() {
            break;
        }
        for record in records {
            let event = Event::decode(&record.value, ctx.log.schemas(), &MysqlKind)?;
            if let (
                SnapshotMarker::False | SnapshotMarker::Incremental,
                Some(MysqlPosition { gtid: Some(g), .. }),
            ) = (
                event.source.snapshot,
                event.source.position.get::<MysqlPosition>(),
            ) && let Some(g) = Gtid::parse(g)
            {
                if g == last && before_last.is_none() {
                    before_last = Some(state.clone());
                }
                state.advance(g);
            }
        }
    }
    let state = if ended {
        state.advance(last);
        state
    } else {
        // Its first part came before the checkpoint (written so by an older siphon): the
        // state before it is unknown here.
        let Some(before) = before_last else {
            return Ok(None);
        };
        before
    };
    Ok(Some(state).filter(|s| !s.is_empty()))
}
