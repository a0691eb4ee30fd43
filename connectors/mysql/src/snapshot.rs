//! A consistent snapshot and the binlog position it is consistent with.
//!
//! MariaDB: `START TRANSACTION WITH CONSISTENT SNAPSHOT` and the session's
//! `binlog_snapshot_file`/`binlog_snapshot_position`, read inside that transaction — no lock.
//! MySQL: a `FLUSH TABLES WITH READ LOCK` held only while the transaction starts and the
//! position is read, released before any row is read. Rows stream through one cursor per
//! table (the binary protocol, a row at a time: bounded memory); streaming then starts at the
//! snapshot's position, so nothing is missed and nothing read twice.

use mysql_async::prelude::Queryable;
use siphon_core::event::{Op, ReadEncoder, ReadMeta, Row, SnapshotMarker};
use siphon_core::log::{NewRecord, RecordFlags};
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, Result, TableName, Value};

use crate::catalog::quote;
use crate::columns::Shape;
use crate::errors::my_error;
use crate::events::{EventFactory, Place};
use crate::values::value;

/// Rows appended at once.
const BATCH: usize = 2048;

/// Where a snapshot is consistent: the binlog position, and the GTID position there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPoint {
    /// Binlog file.
    pub file: String,
    /// Position in it.
    pub pos: u64,
    /// The GTID position (MariaDB `BINLOG_GTID_POS`, MySQL `Executed_Gtid_Set`), if any.
    pub gtid: Option<String>,
}

/// Starts the snapshot's transaction on `conn` and reads its binlog position.
pub async fn begin(conn: &mut mysql_async::Conn, mariadb: bool) -> Result<SnapshotPoint> {
    let run = async |conn: &mut mysql_async::Conn, sql: &str| {
        conn.query_drop(sql)
            .await
            .map_err(|e| my_error(&format!("starting the snapshot ({sql})"), &e))
    };
    run(conn, "SET SESSION time_zone = '+00:00'").await?;
    run(
        conn,
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await?;
    if mariadb {
        run(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT").await?;
        let status: Vec<(String, String)> = conn
            .query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
            .await
            .map_err(|e| my_error("reading the snapshot's binlog position", &e))?;
        let get = |name: &str| {
            status
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let (Some(file), Some(pos)) =
            (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
        else {
            return Err(Error::permanent(
                "the server gave no binlog_snapshot_file: is log_bin on?",
            ));
        };
        let pos: u64 = pos
            .parse()
            .map_err(|_| Error::permanent(format!("binlog_snapshot_position {pos:?}")))?;
        let gtid: Option<String> = conn
            .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (&file, pos))
            .await
            .map_err(|e| my_error("reading the snapshot's GTID position", &e))?;
        Ok(SnapshotPoint {
            file,
            pos,
            gtid: gtid.filter(|g| !g.is_empty()),
        })
    } else {
        run(conn, "FLUSH TABLES WITH READ LOCK").await?;
        let started = async {
            run(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT").await?;
            let (file, pos, gtid) = crate::catalog::binlog_position(conn).await?;
            Ok::<_, Error>(SnapshotPoint { file, pos, gtid })
        }
        .await;
        run(conn, "UNLOCK TABLES").await?;
        started
    }
}

/// A result row of `shape`'s columns, selected in their order.
pub fn row_of(shape: &Shape, found: &mut mysql_async::Row) -> Row {
    Row(shape
        .columns
        .iter()
        .map(|c| c.name.clone())
        .zip(values_of(shape, found))
        .collect())
}

/// A result row's values, `shape`'s columns selected in their order.
fn values_of(shape: &Shape, found: &mut mysql_async::Row) -> Vec<Value> {
    shape
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let v = found
                .take::<mysql_async::Value, _>(i)
                .unwrap_or(mysql_async::Value::NULL);
            value(c, v)
        })
        .collect()
}

/// A row read, waiting to be encoded until the next one says whether it was its table's last.
struct PendingRow {
    /// Its table's index in the snapshot.
    table: usize,
    values: Vec<Value>,
    /// Its index among the snapshot's rows.
    index: u64,
    snapshot: SnapshotMarker,
}

/// ER_TABLE_DEF_CHANGED: the table was rebuilt (`ALTER … ALGORITHM=COPY`) after the
/// snapshot's transaction began, which can read it no more.
const TABLE_DEF_CHANGED: u16 = 1412;

/// What a snapshot read: its rows, and the tables rebuilt since it began, which it could not
/// read whole (they are to be snapshotted again, incrementally).
#[derive(Debug)]
pub struct Read {
    pub rows: u64,
    pub rebuilt: Vec<TableName>,
}

/// Reads every table in the snapshot's transaction and appends its rows as `r` events; with
/// `replaces_earlier`, a truncate of each table first (the log holds an earlier snapshot).
pub async fn read(
    ctx: &SourceContext,
    conn: &mut mysql_async::Conn,
    factory: &EventFactory,
    shapes: &[Shape],
    (point, server_id): (&SnapshotPoint, u32),
    replaces_earlier: bool,
) -> Result<Read> {
    let place = Place {
        file: point.file.clone(),
        pos: point.pos,
        row: 0,
        gtid: point.gtid.clone(),
        server_id,
        ts_ms: siphon_core::source::now_ms(),
        snapshot: SnapshotMarker::True,
    };
    if replaces_earlier {
        let truncates: Vec<Event> = shapes
            .iter()
            .map(|s| factory.event(s, Op::Truncate, None, None, &place))
            .collect();
        ctx.append(&truncates, true).await?;
    }
    ctx.metrics.set("snapshot_running", 1.0);
    ctx.metrics.set("snapshot_rows", 0.0);
    let mut writer = Writer {
        ctx,
        place,
        encoders: shapes
            .iter()
            .map(|s| ReadEncoder::new(s.schema.clone()))
            .collect::<Result<_>>()?,
        position: Vec::with_capacity(64),
        batch: Vec::with_capacity(BATCH),
        pending: None,
        rows: 0,
    };
    let mut rebuilt = Vec::new();
    for (table, shape) in shapes.iter().enumerate() {
        let table_start = writer.rows;
        if !read_table(conn, shape, table, &mut writer).await? {
            rebuilt.push(shape.name());
        }
        writer.end_table(table_start);
    }
    let rows = writer.finish().await?;
    ctx.metrics.set("snapshot_running", 0.0);
    conn.query_drop("COMMIT")
        .await
        .map_err(|e| my_error("ending the snapshot", &e))?;
    Ok(Read { rows, rebuilt })
}

/// Reads table `table` (of `shape`) into `writer`; `false` where it was rebuilt since the
/// snapshot began (`ALTER … ALGORITHM=COPY`), which the snapshot's transaction cannot read.
async fn read_table(
    conn: &mut mysql_async::Conn,
    shape: &Shape,
    table: usize,
    writer: &mut Writer<'_>,
) -> Result<bool> {
    let list: Vec<String> = shape.columns.iter().map(|c| quote(&c.name)).collect();
    let sql = format!(
        "SELECT {} FROM {}.{}",
        list.join(", "),
        quote(&shape.database),
        quote(&shape.table)
    );
    let name = shape.name();
    tracing::info!(table = %name, "snapshot: reading");
    let rebuilt_since = |e: &mysql_async::Error| {
        let rebuilt = matches!(e, mysql_async::Error::Server(s) if s.code == TABLE_DEF_CHANGED);
        if rebuilt {
            tracing::warn!(table = %name, "snapshot: the table was rebuilt since the snapshot began (ALTER … ALGORITHM=COPY): it is snapshotted again, incrementally, once this snapshot is done");
        }
        rebuilt
    };
    let table_start = writer.rows;
    let mut result = match conn.exec_iter(sql.as_str(), ()).await {
        Err(e) if rebuilt_since(&e) => return Ok(false),
        other => other.map_err(|e| my_error("reading a table in the snapshot", &e))?,
    };
    // (The server may say so at the first row instead.)
    loop {
        let mut found = match result.next().await {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(true),
            Err(e) if rebuilt_since(&e) => return Ok(false),
            Err(e) => return Err(my_error("reading a table in the snapshot", &e)),
        };
        if writer.ctx.cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        writer
            .push(table, values_of(shape, &mut found), table_start)
            .await?;
    }
}

/// The snapshot's rows on their way to the log: each encoded straight into its record from
/// its values (no event a row), appended a batch at a time, the row read last held back so
/// that the snapshot's last row is marked.
struct Writer<'a> {
    ctx: &'a SourceContext,
    place: Place,
    /// Each table's.
    encoders: Vec<ReadEncoder>,
    /// A row's position, encoded (one buffer for all).
    position: Vec<u8>,
    batch: Vec<NewRecord>,
    pending: Option<PendingRow>,
    /// Rows read so far.
    rows: u64,
}

impl Writer<'_> {
    /// A row of table `table`, whose rows began at `table_start`.
    async fn push(&mut self, table: usize, values: Vec<Value>, table_start: u64) -> Result<()> {
        // Debezium's markers: the snapshot's first row, each other table's first and last
        // rows, the snapshot's last row (set when the next row or the end comes).
        let snapshot = if self.rows == 0 {
            SnapshotMarker::First
        } else if self.rows == table_start {
            SnapshotMarker::FirstInTable
        } else {
            SnapshotMarker::True
        };
        let row = PendingRow {
            table,
            values,
            index: self.rows,
            snapshot,
        };
        if let Some(previous) = self.pending.replace(row) {
            let record = self.record(&previous)?;
            self.batch.push(record);
        }
        self.rows += 1;
        if self.batch.len() >= BATCH {
            self.ctx
                .append_records_unsynced(std::mem::take(&mut self.batch))
                .await?;
            self.ctx.metrics.set("snapshot_rows", self.rows as f64);
        }
        Ok(())
    }

    /// The table whose rows began at `table_start` is read: its last row is marked so.
    fn end_table(&mut self, table_start: u64) {
        if let Some(last) = self.pending.as_mut().filter(|_| self.rows > table_start) {
            last.snapshot = SnapshotMarker::LastInTable;
        }
    }

    /// Appends what is left in one durable append that ends the snapshot (its rows are one
    /// unit in the log); the number of rows.
    async fn finish(mut self) -> Result<u64> {
        if let Some(mut last) = self.pending.take() {
            last.snapshot = SnapshotMarker::Last;
            let record = self.record(&last)?;
            self.batch.push(record);
        }
        if let Some(last) = self.batch.last_mut() {
            last.flags = last.flags.with(RecordFlags::TXN_END);
        }
        self.ctx.append_records(self.batch).await?;
        self.ctx.metrics.set("snapshot_rows", self.rows as f64);
        Ok(self.rows)
    }

    fn record(&mut self, row: &PendingRow) -> Result<NewRecord> {
        self.place
            .position_ref(row.index)
            .encode_into(&mut self.position);
        self.encoders[row.table].record(
            &row.values,
            &ReadMeta {
                position: &self.position,
                tx_id: None,
                source_ts_ms: self.place.ts_ms,
                snapshot: row.snapshot,
                ts_ms: siphon_core::source::now_ms(),
            },
        )
    }
}
