//! The MySQL/MariaDB source (`kind = "mysql"`): a consistent snapshot, then the binlog read as
//! a replica, appended to the change log exactly once.
//!
//! The connection, the binlog protocol and the row-image decoding are `mysql_async`'s (with
//! `mysql_common`); MariaDB's own events (GTID, annotate rows) are read here from their bytes.
//! Each table map, with the server's full row metadata (`binlog_row_metadata = FULL`), is
//! authoritative for the rows that follow it: names, signedness, enum labels and the primary
//! key come from it, so a table altered mid-stream decodes right, and each shape is a schema
//! version in the log.

mod catalog;
mod columns;
mod config;
mod events;
mod rows;
mod snapshot;
mod stream;
mod values;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use siphon_core::event::{SnapshotMarker, SourcePosition};
use siphon_core::log::LogId;
use siphon_core::source::{SnapshotMode, Source, SourceContext, TableInfo};
use siphon_core::{Error, Result};

pub use config::MysqlConfig;
use events::EventFactory;
use stream::Resume;

/// What the source keeps in the pipeline's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    /// Whether the snapshot finished.
    snapshot_done: bool,
    /// The binlog position the snapshot is consistent with: where streaming starts.
    file: String,
    /// Position in `file`.
    pos: u64,
    /// The change log the snapshot went into.
    log_id: Option<LogId>,
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
        Ok(builder.into())
    }

    async fn connect(&self) -> Result<mysql_async::Conn> {
        mysql_async::Conn::new(self.opts()?)
            .await
            .map_err(|e| catalog::my_error("connecting to MySQL", &e))
    }

    /// The captured tables' shapes, from the catalog, their schemas registered.
    async fn shapes(
        &self,
        ctx: &SourceContext,
        conn: &mut mysql_async::Conn,
    ) -> Result<Vec<columns::Shape>> {
        let mut out = Vec::new();
        for (database, table) in catalog::tables(conn, &self.config).await? {
            let (columns, key) = catalog::columns(conn, &database, &table).await?;
            out.push(columns::Shape::new(
                (&database, &table),
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
        for (database, table) in catalog::tables(&mut conn, &self.config).await? {
            let (columns, key) = catalog::columns(&mut conn, &database, &table).await?;
            out.push(TableInfo {
                name: format!("{database}.{table}"),
                key_columns: key.iter().map(|&i| columns[i].name.to_string()).collect(),
            });
        }
        Ok(out)
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
        // Where the log says streaming stands: after its last streamed event.
        let streamed = match ctx.last_event().await? {
            Some(e) if e.source.snapshot == SnapshotMarker::False => match e.source.position {
                SourcePosition::Mysql { file, pos, row, .. } => Some(Resume {
                    file,
                    pos,
                    held: Some(u64::from(row)),
                }),
                _ => None,
            },
            _ => None,
        };
        let resume = streamed.or_else(|| {
            checkpoint.snapshot_done.then(|| Resume {
                file: checkpoint.file.clone(),
                pos: checkpoint.pos,
                held: None,
            })
        });
        let files = catalog::binlog_files(&mut conn).await?;
        let gone = resume.as_ref().is_some_and(|r| !files.contains(&r.file));
        let need_snapshot = match self.config.snapshot {
            SnapshotMode::Never => false,
            SnapshotMode::Initial => !checkpoint.snapshot_done,
            SnapshotMode::WhenNeeded => !checkpoint.snapshot_done || gone,
        };
        if gone && !need_snapshot {
            let r = resume.as_ref().expect("gone implies a position");
            return Err(Error::permanent(format!(
                "the server no longer holds binlog file {} (purged?), where siphon stopped reading at \
                 position {}: the changes since are lost to it. Set snapshot = \"when_needed\" to take \
                 a new snapshot, then rebuild the sinks",
                r.file, r.pos
            )));
        }
        let resume = if need_snapshot {
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                log_id: Some(ctx.log.id().clone()),
                ..Checkpoint::default()
            })?;
            let point = snapshot::begin(&mut conn, mariadb).await?;
            ctx.metrics.connected();
            tracing::info!(pipeline = %self.pipeline, file = %point.file, pos = point.pos, gtid = ?point.gtid, "snapshot: consistent at this binlog position");
            let shapes = self.shapes(ctx, &mut conn).await?;
            let replaces_earlier = ctx.log.durable_end() > ctx.log.start_offset();
            let rows = match snapshot::read(
                ctx,
                &mut conn,
                &factory,
                &shapes,
                (&point, server_id),
                replaces_earlier,
            )
            .await
            {
                // Stopped mid-snapshot: the next start takes it again.
                Err(Error::Cancelled) => return Ok(()),
                other => other?,
            };
            tracing::info!(pipeline = %self.pipeline, rows, "snapshot: done");
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                snapshot_done: true,
                file: point.file.clone(),
                pos: point.pos,
                log_id: Some(ctx.log.id().clone()),
            })?;
            Resume {
                file: point.file,
                pos: point.pos,
                held: None,
            }
        } else if let Some(resume) = resume {
            resume
        } else {
            // snapshot = "never", first start: from the server's current position.
            let status: Option<mysql_async::Row> =
                mysql_async::prelude::Queryable::query_first(&mut conn, "SHOW MASTER STATUS")
                    .await
                    .map_err(|e| catalog::my_error("reading the binlog position", &e))?;
            let mut status = status
                .ok_or_else(|| Error::permanent("SHOW MASTER STATUS is empty: is log_bin on?"))?;
            let file: String = status.take(0).unwrap_or_default();
            let pos: u64 = status.take(1).unwrap_or_default();
            ctx.offsets.save_source_checkpoint(&Checkpoint {
                snapshot_done: true,
                file: file.clone(),
                pos,
                log_id: Some(ctx.log.id().clone()),
            })?;
            Resume {
                file,
                pos,
                held: None,
            }
        };
        drop(conn);
        stream::Stream {
            ctx,
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
