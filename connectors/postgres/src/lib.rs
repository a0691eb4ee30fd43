//! The PostgreSQL source (`kind = "postgres"`): a consistent snapshot through the slot's
//! exported snapshot, then the slot's pgoutput stream, appended to the change log exactly
//! once.
//!
//! The replication connection is the `pgwire-replication` crate (tokio-postgres has no
//! replication protocol); ordinary queries (catalog, snapshot) go through tokio-postgres.
//! pgoutput messages are decoded here ([`pgoutput`]); values from PostgreSQL's text output
//! ([`values`]) or its binary format ([`binary`]: binary COPY in snapshots, binary tuples in
//! the stream when every column has a decoder).

mod binary;
mod catalog;
mod config;
mod events;
mod incremental;
mod pgoutput;
mod position;
mod snapshot;
mod stream;
mod values;

use std::collections::BTreeMap;

use async_trait::async_trait;
use pgwire_replication::{PgWireError, ReplicationClient, ReplicationConfig, TlsConfig};
use serde::{Deserialize, Serialize};
use siphon_core::event::SnapshotMarker;
use siphon_core::log::LogId;
use siphon_core::position::{SourcePoint, SourcePosition};
use siphon_core::source::{Source, SourceContext, TableInfo};
use siphon_core::{Error, Result, TableName};
use tokio_postgres::config::Host;

pub use config::{PostgresConfig, SnapshotMode, TlsMode};
use events::{EventFactory, Shape};
pub use position::{Lsn, PgPosition};
use siphon_core::kind::{Kind, SourceKind};
use siphon_incremental::Progress;
/// For the fuzz targets only (`fuzz/`): the pgoutput and value decoders, which are private,
/// driven as the stream drives them. Not an API.
#[doc(hidden)]
pub use stream::fuzzing;

/// Session settings that make the server's text output what [`values`] reads.
const SESSION_SETTINGS: &str = "-c DateStyle=ISO -c IntervalStyle=postgres -c TimeZone=UTC -c extra_float_digits=1 -c bytea_output=hex";

/// What the source keeps in the pipeline's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    /// An incremental snapshot in progress: the tables left and where the current one stands.
    #[serde(default, skip_serializing_if = "is_idle")]
    incremental: Progress,
    /// The slot it belongs to.
    slot: String,
    /// Whether the snapshot for that slot finished.
    snapshot_done: bool,
    /// The change log the snapshot went into (absent in checkpoints of older siphons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log_id: Option<LogId>,
}

fn is_idle(progress: &Progress) -> bool {
    *progress == Progress::default()
}

/// The last streamed event the log holds, (commit LSN, index): the stream resumes after it.
/// An incremental snapshot's rows sit at their high watermark, in the stream's order.
async fn resume_after(ctx: &SourceContext) -> Result<Option<(u64, u64)>> {
    Ok(match ctx.last_event(&PostgresKind).await? {
        Some(e)
            if matches!(
                e.source.snapshot,
                SnapshotMarker::False | SnapshotMarker::Incremental
            ) =>
        {
            e.source
                .position
                .get::<PgPosition>()
                .map(|p| (p.commit_lsn, p.index))
        }
        _ => None,
    })
}

/// `kind = "postgres"`.
#[derive(Debug)]
pub struct PostgresKind;

impl Kind for PostgresKind {
    const NAME: &'static str = "postgres";
    type Config = PostgresConfig;

    fn validate(config: &PostgresConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SourceKind for PostgresKind {
    const CONNECTOR: &'static str = "postgresql";

    fn build(config: &PostgresConfig, pipeline: &str) -> Box<dyn Source> {
        Box::new(PostgresSource::new(pipeline, config.clone()))
    }

    fn decode_position(bytes: &[u8]) -> Option<SourcePosition> {
        PgPosition::decode(bytes).map(SourcePosition::new)
    }

    fn parse_point(param: &str, text: &str) -> Option<std::result::Result<SourcePoint, String>> {
        (param == "lsn").then(|| match Lsn::parse(text) {
            Some(lsn) => Ok(std::sync::Arc::new(lsn) as SourcePoint),
            None => Err(format!(
                "lsn={text:?} is not a WAL position such as 16/B374D848"
            )),
        })
    }
}

/// The PostgreSQL source of one pipeline.
#[derive(Debug)]
pub struct PostgresSource {
    pipeline: String,
    config: PostgresConfig,
    slot: String,
    publication: String,
    /// Whether the stream may use pgoutput's binary tuple format; cleared for good when a
    /// column of a type siphon reads only as text appears (then the stream restarts in text).
    binary_allowed: bool,
}

/// How to reach the server for ordinary queries: connection settings and TLS.
#[derive(Clone)]
pub(crate) struct Conn {
    pg: tokio_postgres::Config,
    tls: Option<rustls::ClientConfig>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // tokio_postgres::Config's Debug hides the password; TLS settings say nothing secret.
        f.debug_struct("Conn")
            .field("pg", &self.pg)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Conn {
    /// A query client with siphon's session settings.
    pub(crate) async fn connect(&self) -> Result<tokio_postgres::Client> {
        let mut pg = self.pg.clone();
        pg.options(SESSION_SETTINGS);
        let failed = |e: tokio_postgres::Error| catalog::pg_error("connecting to PostgreSQL", &e);
        let log_end = |r: std::result::Result<(), tokio_postgres::Error>| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        };
        match &self.tls {
            None => {
                let (client, connection) =
                    pg.connect(tokio_postgres::NoTls).await.map_err(failed)?;
                tokio::spawn(async move { log_end(connection.await) });
                Ok(client)
            }
            Some(tls) => {
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls.clone());
                let (client, connection) = pg.connect(tls).await.map_err(failed)?;
                tokio::spawn(async move { log_end(connection.await) });
                Ok(client)
            }
        }
    }
}

/// Maps a replication error: network and server trouble are transient.
pub(crate) fn replication_error(e: &PgWireError) -> Error {
    match e {
        PgWireError::Auth(_) | PgWireError::Tls(_) => {
            Error::permanent(format!("replication connection: {e}"))
        }
        _ => Error::transient(format!("replication connection: {e}")),
    }
}

impl PostgresSource {
    /// The source of pipeline `pipeline`; names default from it.
    pub fn new(pipeline: &str, config: PostgresConfig) -> Self {
        let slot = config
            .slot
            .clone()
            .unwrap_or_else(|| format!("siphon_{pipeline}"));
        let publication = config
            .publication
            .clone()
            .unwrap_or_else(|| format!("siphon_{pipeline}"));
        PostgresSource {
            pipeline: pipeline.to_owned(),
            config,
            slot,
            publication,
            binary_allowed: true,
        }
    }

    fn conn(&self) -> Result<Conn> {
        let tls = siphon_core::tls::client_config(
            self.config.tls_mode(),
            self.config.tls_ca_file.as_deref(),
        )?;
        Ok(Conn {
            pg: self.pg_config()?,
            tls,
        })
    }

    fn pg_config(&self) -> Result<tokio_postgres::Config> {
        let mut pg: tokio_postgres::Config = self
            .config
            .url
            .expose()
            .parse()
            .map_err(|e| Error::permanent(format!("url: {e}")))?;
        if let Some(p) = &self.config.password {
            pg.password(p.expose());
        }
        if let Some(path) = &self.config.password_file {
            let secret = siphon_core::Secret::from_file(path)
                .map_err(|e| Error::permanent(format!("password_file {}: {e}", path.display())))?;
            pg.password(secret.expose());
        }
        Ok(pg)
    }

    fn replication_config(
        &self,
        pg: &tokio_postgres::Config,
        binary: bool,
    ) -> Result<ReplicationConfig> {
        let host = match pg.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let password = pg
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        Ok(ReplicationConfig::new(
            host,
            pg.get_user().unwrap_or("postgres"),
            password,
            pg.get_dbname().unwrap_or("postgres"),
            self.slot.clone(),
            self.publication.clone(),
        )
        .with_port(pg.get_ports().first().copied().unwrap_or(5432))
        .with_options(SESSION_SETTINGS)
        .with_status_interval(self.config.status_interval.0)
        .with_wakeup_interval(self.config.status_interval.0)
        .with_tls(match self.config.tls_mode() {
            TlsMode::Disable => TlsConfig::disabled(),
            TlsMode::Require => TlsConfig::require(),
            TlsMode::VerifyCa => TlsConfig::verify_ca(self.config.tls_ca_file.clone()),
            TlsMode::VerifyFull => TlsConfig::verify_full(self.config.tls_ca_file.clone()),
        })
        .with_binary(binary)
        .with_application_name(format!("siphon {}", self.pipeline)))
    }

    fn factory(&self, pg: &tokio_postgres::Config) -> EventFactory {
        EventFactory {
            name: self.pipeline.as_str().into(),
            db: pg.get_dbname().unwrap_or("postgres").into(),
        }
    }

    /// Creates the slot on a gated replication session; with `export`, returns the
    /// consistent point and the exported snapshot's name, valid until the session's next
    /// command.
    async fn create_slot(
        &self,
        repl: &mut ReplicationClient,
        export: bool,
    ) -> Result<(u64, Option<String>)> {
        let sql = format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput {}",
            catalog::quote_ident(&self.slot),
            if export {
                "EXPORT_SNAPSHOT"
            } else {
                "NOEXPORT_SNAPSHOT"
            }
        );
        let rows = repl
            .simple_query(&sql)
            .await
            .map_err(|e| replication_error(&e))?;
        let row = rows
            .first()
            .ok_or_else(|| Error::permanent("CREATE_REPLICATION_SLOT returned nothing"))?;
        let text = |i: usize| {
            row.get(i)
                .and_then(|v| v.as_ref())
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        let point = text(1).ok_or_else(|| {
            Error::permanent("CREATE_REPLICATION_SLOT returned no consistent point")
        })?;
        let lsn = pgwire_replication::Lsn::parse(&point)
            .map_err(|e| Error::permanent(format!("consistent point {point}: {e}")))?;
        tracing::info!(slot = %self.slot, consistent_point = %point, "created the replication slot");
        Ok((lsn.as_u64(), text(2)))
    }

    async fn drop_slot(&self, client: &tokio_postgres::Client) -> Result<()> {
        // The walsender of the replication session just closed may not have exited yet: the
        // slot stays "active" (object_in_use) for a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match client
                .execute("select pg_drop_replication_slot($1)", &[&self.slot])
                .await
            {
                Ok(_) => break,
                Err(e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => return Err(catalog::pg_error("dropping the replication slot", &e)),
            }
        }
        tracing::info!(slot = %self.slot, "dropped the replication slot");
        Ok(())
    }

    /// The checkpoint, unless it is another slot's or another change log's (the log was lost
    /// or replaced): then it says nothing of this one, and the snapshot is taken again.
    fn checkpoint(&self, ctx: &SourceContext) -> Result<Checkpoint> {
        Ok(ctx
            .offsets
            .source_checkpoint::<Checkpoint>()?
            .filter(|c| c.slot == self.slot)
            .filter(|c| {
                let same_log = c.log_id.as_ref().is_none_or(|id| id == ctx.log.id());
                if !same_log {
                    tracing::warn!(pipeline = %self.pipeline, "the source's checkpoint belongs to another change log: taking the snapshot again");
                }
                same_log
            })
            .unwrap_or_default())
    }

    /// Whether to take a snapshot now, by `snapshot` and what became of the slot; an error
    /// where the slot lost changes and no snapshot may be taken.
    fn needs_snapshot(
        &self,
        checkpoint: &Checkpoint,
        slot: Option<&catalog::SlotInfo>,
    ) -> Result<bool> {
        let lost = slot.is_some_and(|s| s.wal_status.as_deref() == Some("lost"));
        let need_snapshot = match self.config.snapshot {
            SnapshotMode::Never => false,
            SnapshotMode::Initial => !checkpoint.snapshot_done,
            SnapshotMode::WhenNeeded => !checkpoint.snapshot_done || slot.is_none() || lost,
        };
        if !need_snapshot && checkpoint.snapshot_done && (slot.is_none() || lost) {
            return Err(Error::permanent(format!(
                "the replication slot {} is {}: PostgreSQL no longer holds the changes since siphon last \
                 read it. Set snapshot = \"when_needed\" to take a new snapshot, then rebuild the sinks",
                self.slot,
                if lost {
                    "invalidated (wal_status = lost)"
                } else {
                    "missing"
                }
            )));
        }
        Ok(need_snapshot)
    }

    /// The tables the patterns name (warned about where they cannot be captured), in the
    /// publication, with the checkpoint: tables created while siphon was down join the
    /// publication, and the request to snapshot them is in the checkpoint before they do (a
    /// failure after that must not lose it). A snapshot taken now reads them anyway.
    async fn captured_tables(
        &self,
        ctx: &SourceContext,
        client: &tokio_postgres::Client,
    ) -> Result<(Vec<catalog::Table>, Checkpoint)> {
        catalog::preflight(client).await?;
        let tables = catalog::tables(client, &self.config.tables).await?;
        for t in tables.iter().filter(|t| t.replica_identity == 'n') {
            tracing::warn!(
                table = %t.table_name(),
                "REPLICA IDENTITY NOTHING: updates and deletes of this table cannot be captured; run \
                 `ALTER TABLE {} REPLICA IDENTITY DEFAULT`", t.quoted()
            );
        }
        let mut checkpoint = self.checkpoint(ctx)?;
        catalog::ensure_publication(client, &self.publication, &tables, |added| {
            tracing::info!(tables = ?added, "new tables join the publication: snapshotting them incrementally");
            checkpoint.incremental.request(added.iter().cloned());
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                slot: self.slot.clone(),
                log_id: Some(ctx.log.id().clone()),
                ..checkpoint.clone()
            })
        })
        .await?;
        Ok((tables, checkpoint))
    }

    /// Makes the slot with its exported snapshot and reads the tables in it; `false`: stopped
    /// midway.
    async fn snapshot(
        &self,
        ctx: &SourceContext,
        (conn, client): (&Conn, &tokio_postgres::Client),
        repl: &mut ReplicationClient,
        mut shapes: Vec<(catalog::Table, Shape)>,
        factory: EventFactory,
    ) -> Result<bool> {
        let (consistent_point, snapshot_name) = self.create_slot(repl, true).await?;
        let snapshot_name =
            snapshot_name.ok_or_else(|| Error::permanent("the slot exported no snapshot"))?;
        // The partitions as of the slot's consistent point: one attached since the tables
        // were listed is read too.
        for (table, _) in &mut shapes {
            table.leaves = catalog::leaves(client, table.oid, &table.key).await?;
        }
        let done = (snapshot::Snapshot {
            conn: conn.clone(),
            snapshot_name,
            consistent_point,
            tables: shapes,
            parallelism: self.config.snapshot_parallelism,
            factory,
            replaces_earlier: ctx.log.durable_end() > ctx.log.start_offset(),
        })
        .run(ctx)
        .await;
        match done {
            Err(Error::Cancelled) => Ok(false),
            other => other.map(|_| true),
        }
    }

    /// The tables' shapes, their schemas registered in the log.
    async fn shapes(
        context: (&SourceContext, &EventFactory),
        client: &tokio_postgres::Client,
        tables: &[catalog::Table],
    ) -> Result<Vec<(catalog::Table, Shape)>> {
        let mut types = catalog::TypeCache::default();
        let mut out = Vec::with_capacity(tables.len());
        for t in tables {
            let shape = Shape::resolve(
                client,
                &mut types,
                context,
                (t.oid, &t.schema, &t.name),
                &t.columns,
                &t.key,
            )
            .await?;
            out.push((t.clone(), shape));
        }
        Ok(out)
    }
}

#[async_trait]
impl Source for PostgresSource {
    async fn check(&mut self) -> Result<()> {
        let client = self.conn()?.connect().await?;
        catalog::preflight(&client).await?;
        catalog::tables(&client, &self.config.tables)
            .await
            .map(|_| ())
    }

    async fn tables(&mut self) -> Result<Vec<TableInfo>> {
        let client = self.conn()?.connect().await?;
        let tables = catalog::tables(&client, &self.config.tables).await?;
        Ok(tables
            .into_iter()
            .map(|t| TableInfo {
                name: t.table_name(),
                key_columns: t.key,
            })
            .collect())
    }

    async fn columns(&mut self) -> Result<Option<BTreeMap<TableName, Vec<String>>>> {
        let client = self.conn()?.connect().await?;
        let tables = catalog::tables(&client, &self.config.tables).await?;
        Ok(Some(
            tables
                .into_iter()
                .map(|t| {
                    (
                        t.table_name(),
                        t.columns.into_iter().map(|c| c.name).collect(),
                    )
                })
                .collect(),
        ))
    }

    async fn run(&mut self, ctx: &SourceContext) -> Result<()> {
        let conn = self.conn()?;
        let pg = conn.pg.clone();
        let client = conn.connect().await?;
        let (tables, checkpoint) = self.captured_tables(ctx, &client).await?;
        let slot = catalog::slot(&client, &self.slot).await?;
        let need_snapshot = self.needs_snapshot(&checkpoint, slot.as_ref())?;
        let save = |snapshot_done: bool| {
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                slot: self.slot.clone(),
                snapshot_done,
                log_id: Some(ctx.log.id().clone()),
                // A new initial snapshot reads every table anyway.
                incremental: if need_snapshot {
                    Progress::default()
                } else {
                    checkpoint.incremental.clone()
                },
            })
        };
        if need_snapshot {
            // Before the slot is made: a crash after making it must not leave a checkpoint
            // that says the snapshot is done, or the next start would stream from the new slot
            // without one.
            save(false)?;
        }
        if need_snapshot && slot.is_some() {
            // Left from a snapshot that did not finish, or invalidated: start over.
            self.drop_slot(&client).await?;
        }
        // pgoutput's binary tuples (PostgreSQL 14+) when every captured column has a binary
        // decoder; text otherwise.
        let version: i32 = client
            .query_one("select current_setting('server_version_num')::int", &[])
            .await
            .map_err(|e| catalog::pg_error("reading the server version", &e))?
            .get(0);
        let factory = self.factory(&pg);
        let shapes = Self::shapes((ctx, &factory), &client, &tables).await?;
        let binary = self.binary_allowed
            && version >= 140_000
            && shapes.iter().all(|(_, s)| s.binary_decodable());
        ctx.metrics
            .set("binary_tuples", f64::from(u8::from(binary)));
        let mut repl = ReplicationClient::connect_gated(self.replication_config(&pg, binary)?)
            .await
            .map_err(|e| replication_error(&e))?;
        ctx.metrics.connected();
        if need_snapshot {
            let snapshot = self.snapshot(ctx, (&conn, &client), &mut repl, shapes, factory.clone());
            if !snapshot.await? {
                // Stopped mid-snapshot: the next start takes it again from the beginning.
                return Ok(());
            }
        } else if slot.is_none() {
            self.create_slot(&mut repl, false).await?;
        }
        if need_snapshot || !checkpoint.snapshot_done || checkpoint.log_id.is_none() {
            save(true)?;
        }
        let resume_after = resume_after(ctx).await?;
        repl.start().await.map_err(|e| replication_error(&e))?;
        repl.wait_started()
            .await
            .map_err(|e| replication_error(&e))?;
        tracing::info!(pipeline = %self.pipeline, slot = %self.slot, ?resume_after, "streaming changes");
        let checkpoint = ctx
            .offsets
            .source_checkpoint::<Checkpoint>()?
            .unwrap_or_default();
        let result = stream::Stream {
            ctx,
            checkpoint,
            publication: self.publication.clone(),
            patterns: self.config.tables.clone(),
            table_poll_interval: self.config.table_poll_interval.0,
            repl: &mut repl,
            client: &client,
            factory,
            resume_after,
            heartbeat: self.config.heartbeat_interval.map(|h| h.0),
            slot: self.slot.clone(),
            lag_interval: self.config.status_interval.0,
            binary: binary.then_some(&mut self.binary_allowed),
        }
        .run()
        .await;
        let _ = repl.shutdown().await;
        if result.is_ok() && ctx.cancel.is_cancelled() && self.config.drop_slot_on_stop {
            self.drop_slot(&client).await?;
            ctx.offsets.save_source_checkpoint(&Checkpoint::default())?;
        }
        result
    }
}
