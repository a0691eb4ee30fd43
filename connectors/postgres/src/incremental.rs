//! Incremental snapshots: tables read again while streaming goes on, without locks, by the
//! watermark method (Netflix's DBLog; Debezium's incremental snapshots).
//!
//! A table is read in primary-key chunks. For each chunk the source writes a low watermark
//! into the WAL (`pg_logical_emit_message`, non-transactional), reads the chunk, and writes a
//! high watermark. The stream sees the low watermark, then every transaction that committed
//! around the read, then the high watermark: each key such a transaction changed is dropped
//! from the chunk (the stream carries a newer or equal state of it), and the rest go into the
//! log as `r` events at the high watermark, after everything streamed before it. So an `r`
//! event never goes back in time, and the stream never pauses. The tables left and the last
//! key read are in the source's checkpoint, saved once a chunk's rows are durable: after a
//! crash the snapshot goes on from the last finished chunk.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::source::SourceContext;
use siphon_core::{Event, KeyChange, Result, SourcePosition, Value};
use tokio_postgres::Client;

use crate::catalog::{self, TypeCache, pg_error, quote_ident};
use crate::events::{EventFactory, Place, Shape};

/// The prefix of siphon's watermark messages in the WAL.
pub const WATERMARK: &str = "siphon_watermark";
/// Rows read per chunk.
const CHUNK_ROWS: usize = 4096;

/// What survives a restart, in the source's checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// Tables still to read ("schema.table"), the current one first.
    pub tables: VecDeque<String>,
    /// The current table's last key read, each key column as text; none before its first
    /// chunk.
    pub after: Option<Vec<String>>,
    /// Rows emitted so far.
    pub rows: u64,
}

impl Progress {
    /// Adds tables to read (each once).
    pub fn request(&mut self, tables: impl IntoIterator<Item = String>) {
        for table in tables {
            if !self.tables.contains(&table) {
                self.tables.push_back(table);
            }
        }
    }
}

/// A chunk read between its watermarks, waiting for the stream to pass the high one.
#[derive(Debug)]
pub struct Chunk {
    id: String,
    /// Its rows as `r` events (placed when the high watermark arrives).
    rows: Vec<Event>,
    /// Schema and table.
    table: (String, String),
    /// The stream is past the low watermark.
    open: bool,
    /// Log keys the stream changed since the low watermark.
    changed: HashSet<Vec<u8>>,
    /// The stream truncated the table since the low watermark.
    truncated: bool,
    /// Where the next chunk starts; none when this one ended the table.
    next_after: Option<Vec<String>>,
}

impl Chunk {
    /// Notes a change the stream carries (between the watermarks, its key leaves the chunk).
    pub fn saw(&mut self, event: &Event) {
        if !self.open
            || self.table.0 != event.source.namespace()
            || self.table.1 != *event.source.table
        {
            return;
        }
        if event.op == Op::Truncate {
            self.truncated = true;
            return;
        }
        self.changed.insert(event.log_key());
        if let Some(KeyChange::From(old) | KeyChange::To(old)) = &event.key_change {
            self.changed.insert(event.log_key_of(old));
        }
    }

    /// A watermark message: the low one opens the window; the high one closes it and gives
    /// back the rows to append, placed at `lsn`, with where the table stands after them.
    pub fn watermark(&mut self, content: &[u8], lsn: u64) -> Option<Closed> {
        let text = std::str::from_utf8(content).ok()?;
        let (kind, id) = text.split_once(' ')?;
        if id != self.id {
            return None;
        }
        match kind {
            "low" => {
                self.open = true;
                None
            }
            "high" if self.open => {
                let rows = if self.truncated {
                    Vec::new()
                } else {
                    let changed = std::mem::take(&mut self.changed);
                    let mut rows = std::mem::take(&mut self.rows);
                    rows.retain(|e| !changed.contains(&e.log_key()));
                    for (i, e) in rows.iter_mut().enumerate() {
                        e.source.position = SourcePosition::Postgres {
                            commit_lsn: lsn,
                            lsn,
                            index: i as u64,
                        };
                    }
                    rows
                };
                Some(Closed {
                    rows,
                    next_after: self.next_after.take(),
                })
            }
            _ => None,
        }
    }
}

/// A chunk whose window closed.
#[derive(Debug)]
pub struct Closed {
    /// Its rows to append.
    pub rows: Vec<Event>,
    /// Where the next chunk starts; none: the table is done.
    pub next_after: Option<Vec<String>>,
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
        // Random: a watermark of a chunk read before a restart, which the slot sends again,
        // must not match a chunk read after it.
        let id = uuid::Uuid::new_v4().simple().to_string();
        let emit = async |kind: &str| {
            client
                .execute(
                    "select pg_logical_emit_message(false, $1, $2)",
                    &[&WATERMARK, &format!("{kind} {id}")],
                )
                .await
                .map_err(|e| pg_error("writing a snapshot watermark", &e))
        };
        emit("low").await?;
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
        emit("high").await?;

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
        Ok(Chunk {
            id,
            rows: events,
            table: (shape.schema.to_string(), shape.table.to_string()),
            open: false,
            changed: HashSet::new(),
            truncated: false,
            next_after,
        })
    }
}
