//! Incremental snapshots of PostgreSQL tables (the method: `siphon_core::incremental`).
//!
//! The watermarks are `pg_logical_emit_message` calls (non-transactional, no table needed);
//! a chunk is the next [`CHUNK_ROWS`] rows by primary key, each value read as text.

use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::incremental::{CHUNK_ROWS, Chunk, Mark, chunk_id};
use siphon_core::source::SourceContext;
use siphon_core::{Event, Result, SourcePosition, Value};
use tokio_postgres::Client;

use crate::catalog::{self, TypeCache, pg_error, quote_ident};
use crate::events::{EventFactory, Place, Shape};

/// The prefix of siphon's watermark messages in the WAL.
pub const WATERMARK: &str = "siphon_watermark";

/// Places a closed chunk's rows at the high watermark's position, in order.
pub fn place(rows: &mut [Event], lsn: u64) {
    for (i, e) in rows.iter_mut().enumerate() {
        e.source.position = SourcePosition::Postgres {
            commit_lsn: lsn,
            lsn,
            index: i as u64,
        };
    }
}

/// How to read one table in chunks: its shape, and the statement for the chunk after a key.
#[derive(Debug)]
pub struct TableReader {
    /// "schema.table".
    pub name: String,
    shape: Shape,
    /// Positions of the key columns among the columns.
    key_at: Vec<usize>,
    /// The first chunk's statement, and the statement of a chunk after a key.
    first: String,
    after: String,
}

impl TableReader {
    /// The reader of `name`; `None` when the table cannot be read incrementally (gone, no
    /// primary key, not in `publication`), with a warning saying why.
    pub async fn prepare(
        client: &Client,
        types: &mut TypeCache,
        (ctx, factory): (&SourceContext, &EventFactory),
        publication: &str,
        name: &str,
    ) -> Result<Option<TableReader>> {
        let found = catalog::tables(client, &[name.to_owned()]).await?;
        let published: bool = client
            .query_one(
                "select exists (select 1 from pg_publication_tables where pubname = $1 \
                 and schemaname || '.' || tablename = $2)",
                &[&publication, &name],
            )
            .await
            .map_err(|e| pg_error("checking the publication", &e))?
            .get(0);
        let table = match found.into_iter().next() {
            Some(t) if !t.key.is_empty() && published => t,
            other => {
                let why = match other {
                    None => "no such table",
                    Some(t) if t.key.is_empty() => "it has no primary key to read it in chunks by",
                    Some(_) => "it is not in the source's publication (not one of its tables)",
                };
                tracing::warn!(table = %name, why, "incremental snapshot: table skipped");
                return Ok(None);
            }
        };
        // For a progress bar: the planner's estimate (-1 before the first ANALYZE).
        let estimate: f64 = client
            .query_one(
                "select greatest(reltuples, 0)::float8 from pg_class where oid = $1",
                &[&table.oid],
            )
            .await
            .map_err(|e| pg_error("reading a table's size estimate", &e))?
            .get(0);
        ctx.metrics
            .set("incremental_snapshot_table_rows_estimate", estimate);
        let shape = Shape::resolve(
            client,
            types,
            (ctx, factory),
            (table.oid, &table.schema, &table.name),
            &table.columns,
            &table.key,
        )
        .await?;
        let key_at: Vec<usize> = table
            .key
            .iter()
            .map(|k| {
                table
                    .columns
                    .iter()
                    .position(|c| &c.name == k)
                    .expect("a column")
            })
            .collect();
        let mut key_types = Vec::with_capacity(key_at.len());
        for &i in &key_at {
            let column = &table.columns[i];
            let type_name: String = client
                .query_one(
                    "select format_type($1, $2)",
                    &[&column.type_oid, &column.type_modifier],
                )
                .await
                .map_err(|e| pg_error("reading a key column's type", &e))?
                .get(0);
            key_types.push(type_name);
        }
        // Qualified: ORDER BY a bare name would take the output column of that name, the
        // key as text, and order "10" before "9".
        let keys: Vec<String> = table
            .key
            .iter()
            .map(|k| format!("t.{}", quote_ident(k)))
            .collect();
        let list: Vec<String> = table
            .columns
            .iter()
            .map(|c| format!("{}::text", quote_ident(&c.name)))
            .collect();
        let select = |filter: &str| {
            format!(
                "select {} from {} t {filter} order by {} limit {CHUNK_ROWS}",
                list.join(", "),
                table.quoted(),
                keys.join(", ")
            )
        };
        let params: Vec<String> = key_types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::text::{t}", i + 1))
            .collect();
        Ok(Some(TableReader {
            name: name.to_owned(),
            first: select(""),
            after: select(&format!(
                "where ({}) > ({})",
                keys.join(", "),
                params.join(", ")
            )),
            shape,
            key_at,
        }))
    }

    /// Reads the chunk after key `after` (the first without) between two watermarks.
    pub async fn read(
        &self,
        client: &Client,
        factory: &EventFactory,
        after: Option<&[String]>,
    ) -> Result<Chunk> {
        let id = chunk_id();
        let emit = async |mark: Mark| {
            client
                .execute(
                    "select pg_logical_emit_message(false, $1, $2)",
                    &[&WATERMARK, &mark.text(&id)],
                )
                .await
                .map_err(|e| pg_error("writing a snapshot watermark", &e))
        };
        emit(Mark::Low).await?;
        let rows = match after {
            Some(after) => {
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = after
                    .iter()
                    .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                    .collect();
                client.query(&self.after, &params).await
            }
            None => client.query(&self.first, &[]).await,
        }
        .map_err(|e| pg_error("reading a chunk of an incremental snapshot", &e))?;
        emit(Mark::High).await?;

        let next_after = (rows.len() == CHUNK_ROWS).then(|| {
            let last = rows.last().expect("a full chunk");
            self.key_at
                .iter()
                .map(|&i| last.get::<_, Option<String>>(i).unwrap_or_default())
                .collect()
        });
        let place = Place {
            commit_lsn: 0,
            lsn: 0,
            index: 0,
            xid: None,
            commit_time_micros: siphon_core::source::now_ms() * 1000
                - crate::events::PG_EPOCH_MICROS,
            snapshot: SnapshotMarker::Incremental,
            table_order: 0,
        };
        let shape = &self.shape;
        let events = rows
            .iter()
            .map(|r| {
                let values = (0..shape.columns.len())
                    .map(|i| match r.get::<_, Option<&str>>(i) {
                        Some(text) => shape.decode(i, text.into()),
                        None => Value::Null,
                    })
                    .collect();
                let row = shape.row(values);
                let key = shape.key_of(&row);
                factory.event(shape, Op::Read, None, Some(row), key, place)
            })
            .collect();
        Ok(Chunk::new(
            id,
            (shape.schema.to_string(), shape.table.to_string()),
            events,
            next_after,
        ))
    }
}
