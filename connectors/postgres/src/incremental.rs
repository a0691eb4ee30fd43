//! Incremental snapshots of PostgreSQL tables (the method: `siphon_incremental`).
//!
//! The watermarks are `pg_logical_emit_message` calls (non-transactional, no table needed);
//! a chunk is the next [`CHUNK_ROWS`] rows by primary key, each value read as text.

use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, Result, SourcePosition, TableName, TablePattern, Value};
use siphon_incremental::{CHUNK_ROWS, Chunk, Mark, chunk_id};
use tokio_postgres::Client;

use crate::catalog::{self, TypeCache, pg_error, quote_ident};
use crate::events::{EventFactory, Place, Shape};
use crate::position::PgPosition;

/// The prefix of siphon's watermark messages in the WAL.
pub const WATERMARK: &str = "siphon_watermark";

/// Places a closed chunk's rows at the high watermark's position, in order.
pub fn place(rows: &mut [Event], lsn: u64) {
    for (i, e) in rows.iter_mut().enumerate() {
        e.source.position = SourcePosition::new(PgPosition {
            commit_lsn: lsn,
            lsn,
            index: i as u64,
        });
    }
}

/// How to read one table in chunks: its shape, and the statement for the chunk after a key.
#[derive(Debug)]
pub struct TableReader {
    /// The table.
    pub name: TableName,
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
        name: &TableName,
    ) -> Result<Option<TableReader>> {
        let found = catalog::tables(client, &[TablePattern::exactly(name)]).await?;
        let published: bool = client
            .query_one(
                "select exists (select 1 from pg_publication_tables where pubname = $1 \
                 and schemaname = $2 and tablename = $3)",
                &[&publication, &name.namespace(), &name.table()],
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
            name: name.clone(),
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

    /// Reads the chunk after key `after` (the first without) between two watermarks; `None`
    /// when it cannot be read yet (try again in a moment).
    ///
    /// A transaction's commit record can be in the WAL — and streamed — before the
    /// transaction is visible to a query (between writing its commit and leaving the proc
    /// array: an fsync, a synchronous standby's answer). Such a transaction committed before
    /// the low watermark is missing from a chunk read at once, and the stream carries it
    /// before the window opens, so the chunk's older row would come after it. So after the
    /// low watermark no chunk is read while a transaction whose commit the stream has passed
    /// (`committed`), or one waiting for a synchronous standby (a commit passed before a
    /// restart of the stream), is not visible yet — the stream goes on meanwhile; and the
    /// chunk drops the keys of each transaction its read could not see wherever the stream
    /// carries them.
    pub async fn read(
        &self,
        client: &Client,
        factory: &EventFactory,
        after: Option<&[String]>,
        (committed, ctx): (&mut RecentCommits, &SourceContext),
    ) -> Result<Option<Chunk>> {
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
        let waiting = not_yet_visible(client, committed).await?;
        ctx.metrics.set(
            "incremental_snapshot_waiting_transactions",
            waiting.len() as f64,
        );
        if !waiting.is_empty() {
            tracing::debug!(transactions = ?waiting, "incremental snapshot: waiting for transactions committed in the WAL to become visible");
            return Ok(None);
        }
        client
            .batch_execute("begin isolation level repeatable read read only")
            .await
            .map_err(|e| pg_error("starting a chunk's read", &e))?;
        let read = async {
            let snapshot = current_snapshot(client).await?;
            let reading = |e| pg_error("reading a chunk of an incremental snapshot", &e);
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
            .map_err(reading)?;
            client.batch_execute("commit").await.map_err(reading)?;
            Ok::<_, Error>((snapshot, rows))
        };
        let (snapshot, rows) = match read.await {
            Ok(read) => read,
            Err(e) => {
                let _ = client.batch_execute("rollback").await;
                return Err(e);
            }
        };
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
                - crate::binary::PG_EPOCH_MICROS,
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
        Ok(Some(
            Chunk::new(
                id,
                TableName::new(shape.schema.clone(), shape.table.clone()),
                events,
                next_after,
            )
            .not_seeing(move |xid| u32::try_from(xid).is_ok_and(|x| snapshot.in_progress(x))),
        ))
    }
}

/// A snapshot as `txid_current_snapshot()::text` writes it (`xmin:xmax:xip,…`; the function
/// of every PostgreSQL version, where `pg_current_snapshot` came with 13), for the
/// transaction ids pgoutput sends (32 bits).
#[derive(Debug, Clone)]
struct Snapshot {
    /// Every id at or past it had not ended (the latest ended one's, plus one).
    xmax: u32,
    /// Ids below `xmax` that had not ended.
    xip: std::collections::HashSet<u32>,
}

impl Snapshot {
    fn parse(text: &str) -> Option<Snapshot> {
        let mut parts = text.split(':');
        let _xmin = parts.next()?;
        let xmax = parts.next()?.parse::<u64>().ok()?;
        let xip = parts
            .next()?
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.trim().parse::<u64>().map(|x| x as u32))
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        Some(Snapshot {
            xmax: xmax as u32,
            xip,
        })
    }

    /// Whether transaction `xid` had not ended for this snapshot: listed, or at or past
    /// `xmax` (ids wrap around at 2^32, as PostgreSQL compares them).
    fn in_progress(&self, xid: u32) -> bool {
        xid.wrapping_sub(self.xmax) < 1 << 31 || self.xip.contains(&xid)
    }
}

async fn current_snapshot(client: &Client) -> std::result::Result<Snapshot, Error> {
    let text: String = client
        .query_one("select txid_current_snapshot()::text", &[])
        .await
        .map_err(|e| pg_error("reading the server's snapshot", &e))?
        .get(0);
    Snapshot::parse(&text)
        .ok_or_else(|| Error::permanent(format!("a snapshot siphon cannot read: {text:?}")))
}

/// The transactions the stream saw commit lately, each with when: one a query cannot see
/// yet has its commit record in the WAL but has not ended. Kept until a snapshot sees them
/// ended, and for a minute at most: one still waiting then (for a synchronous standby) is
/// found among the sessions waiting so.
#[derive(Debug, Default)]
pub struct RecentCommits(std::collections::VecDeque<(u32, std::time::Instant)>);

impl RecentCommits {
    const KEPT: std::time::Duration = std::time::Duration::from_secs(60);

    /// The stream passed `xid`'s commit.
    pub fn committed(&mut self, xid: u32) {
        let now = std::time::Instant::now();
        while self
            .0
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > Self::KEPT)
        {
            self.0.pop_front();
        }
        self.0.push_back((xid, now));
    }

    /// Those of them `snapshot` sees in progress; the others (ended for good) are forgotten.
    fn invisible(&mut self, snapshot: &Snapshot) -> Vec<u32> {
        self.0.retain(|(xid, _)| snapshot.in_progress(*xid));
        self.0.iter().map(|(xid, _)| *xid).collect()
    }
}

/// The transactions with their commit in the WAL that a query cannot see yet: those the
/// stream saw commit, and those waiting for a synchronous standby (whose commits the stream
/// may have passed before it started).
async fn not_yet_visible(client: &Client, committed: &mut RecentCommits) -> Result<Vec<u32>> {
    let snapshot = current_snapshot(client).await?;
    let mut waiting = committed.invisible(&snapshot);
    let replicating: Vec<String> = client
        .query(
            "select backend_xid::text from pg_stat_activity \
             where wait_event = 'SyncRep' and backend_xid is not null",
            &[],
        )
        .await
        .map_err(|e| pg_error("reading the sessions waiting for a standby", &e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    waiting.extend(replicating.iter().filter_map(|x| x.parse::<u32>().ok()));
    waiting.sort_unstable();
    waiting.dedup();
    Ok(waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_say_which_transactions_had_not_ended() {
        // 725 waits for a synchronous standby: the latest id, so past xmax, not listed.
        let s = Snapshot::parse("725:725:").unwrap();
        assert!(s.in_progress(725) && s.in_progress(800) && !s.in_progress(724));
        let s = Snapshot::parse("700:730:701,725").unwrap();
        assert!(s.in_progress(701) && s.in_progress(725) && !s.in_progress(702));
        // An epoch in front, and ids wrapping around.
        let s = Snapshot::parse(&format!("{0}:{0}:", (3u64 << 32) | 5)).unwrap();
        assert!(s.in_progress(5) && !s.in_progress(u32::MAX) && s.in_progress(6));
        let mut commits = RecentCommits::default();
        for x in [700, 725, 729] {
            commits.committed(x);
        }
        assert_eq!(
            commits.invisible(&Snapshot::parse("700:730:701,725").unwrap()),
            [725]
        );
    }
}
