//! Incremental snapshots of MySQL/MariaDB tables (the method: `siphon_incremental`).
//!
//! The binlog has no message a client can write into it, so the watermarks are rows: one row
//! per pipeline in the watermark table (`watermark_table`), updated in its own autocommit
//! transaction, which the stream recognises by its table map and never captures. A chunk is
//! the next [`CHUNK_ROWS`] rows by primary key, read on a connection of its own; the last key
//! is kept in the checkpoint as tagged text that reads back into the value the server sent.

use mysql_async::Value as MyValue;
use mysql_async::prelude::Queryable;
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::source::SourceContext;
use siphon_core::{Error, Event, Result, SourcePosition, TableName};
use siphon_incremental::{CHUNK_ROWS, Chunk, Mark, chunk_id};

use crate::MysqlConfig;
use crate::catalog::{self, quote};
use crate::columns::{DataType, Shape};
use crate::errors::my_error;
use crate::events::{EventFactory, Place};
use crate::snapshot::row_of;

/// The watermark table of a source: created when first needed.
#[derive(Debug)]
pub struct Watermarks {
    /// Quoted `database`.`table`.
    table: String,
    database: String,
    name: String,
    pipeline: String,
    ready: bool,
}

impl Watermarks {
    pub fn new(config: &MysqlConfig, pipeline: &str) -> Self {
        let (database, table) = (
            config.watermark_table.namespace(),
            config.watermark_table.table(),
        );
        Watermarks {
            table: format!("{}.{}", quote(database), quote(table)),
            database: database.to_owned(),
            name: table.to_owned(),
            pipeline: pipeline.to_owned(),
            ready: false,
        }
    }

    /// Writes a watermark (its own transaction), creating the table first if it is missing
    /// (only then: a user without CREATE may write into one made for it).
    pub async fn write(&mut self, conn: &mut mysql_async::Conn, mark: &str) -> Result<()> {
        if !self.ready {
            let exists: Option<u8> = conn
                .exec_first(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                    (&self.database, &self.name),
                )
                .await
                .map_err(|e| my_error("looking for the watermark table", &e))?;
            let create = [
                format!("CREATE DATABASE IF NOT EXISTS {}", quote(&self.database)),
                format!(
                    "CREATE TABLE IF NOT EXISTS {} (pipeline VARCHAR(190) PRIMARY KEY, \
                     mark VARCHAR(80) NOT NULL) ENGINE=InnoDB",
                    self.table
                ),
            ];
            for sql in create.iter().filter(|_| exists.is_none()) {
                conn.query_drop(sql).await.map_err(|e| {
                    my_error(
                        &format!(
                            "creating the watermark table (watermark_table; or create it \
                             yourself and grant INSERT, UPDATE on it): {sql}"
                        ),
                        &e,
                    )
                })?;
            }
            self.ready = true;
        }
        conn.exec_drop(
            format!(
                "INSERT INTO {} (pipeline, mark) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE mark = VALUES(mark)",
                self.table
            ),
            (&self.pipeline, mark),
        )
        .await
        .map_err(|e| my_error("writing a snapshot watermark (watermark_table)", &e))
    }
}

/// The watermark a binlog row of the watermark table carries for `pipeline`, if it is one.
pub fn watermark_in(row: &mysql_async::binlog::row::BinlogRow, pipeline: &str) -> Option<String> {
    let at = |name: &str, default: usize| {
        row.columns_ref()
            .iter()
            .position(|c| c.name_str() == name)
            .unwrap_or(default)
    };
    let text = |i: usize| match row.as_ref(i)? {
        mysql_async::binlog::value::BinlogValue::Value(MyValue::Bytes(b)) => {
            std::str::from_utf8(b).ok().map(str::to_owned)
        }
        _ => None,
    };
    (text(at("pipeline", 0))? == pipeline)
        .then(|| text(at("mark", 1)))
        .flatten()
}

/// Places a closed chunk's rows at the high watermark's transaction, in order.
pub fn place(rows: &mut [Event], at: &Place) {
    for (i, e) in rows.iter_mut().enumerate() {
        e.source.position = SourcePosition::new(at.position(i as u64));
    }
}

/// How to read one table in chunks: its shape, and the statements of the first chunk and of
/// a chunk after a key.
#[derive(Debug)]
pub struct TableReader {
    /// The table.
    pub name: TableName,
    shape: Shape,
    first: String,
    after: String,
}

impl TableReader {
    /// The reader of `name`; `None` when the table cannot be read incrementally (gone, no
    /// primary key, not captured), with a warning saying why.
    pub async fn prepare(
        conn: &mut mysql_async::Conn,
        (ctx, factory): (&SourceContext, &EventFactory),
        config: &MysqlConfig,
        name: &TableName,
    ) -> Result<Option<TableReader>> {
        let (database, table) = (name.namespace(), name.table());
        let estimate: Option<Option<u64>> = conn
            .exec_first(
                "SELECT TABLE_ROWS FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND TABLE_TYPE = 'BASE TABLE'",
                (database, table),
            )
            .await
            .map_err(|e| my_error("looking up a table to snapshot", &e))?;
        let why = match estimate {
            _ if !config.captures(database, table) => Some("it is not one of the source's tables"),
            None => Some("no such table"),
            Some(_) => None,
        };
        let (columns, key) = match why {
            Some(_) => (Vec::new(), Vec::new()),
            None => catalog::columns(conn, database, table).await?,
        };
        let why = why
            .or(key
                .is_empty()
                .then_some("it has no primary key to read it in chunks by"))
            .or(key
                .iter()
                .any(|&i| matches!(columns[i].data_type, DataType::Enum(_) | DataType::Set(_)))
                .then_some(
                    "an ENUM or SET key column sorts by its index but compares by its label",
                ));
        if let Some(why) = why {
            tracing::warn!(table = %name, why, "incremental snapshot: table skipped");
            return Ok(None);
        }
        // For a progress bar: the server's estimate.
        ctx.metrics.set(
            "incremental_snapshot_table_rows_estimate",
            estimate.flatten().unwrap_or_default() as f64,
        );
        let shape = Shape::new((database, table), columns, key, &factory.name, |s| {
            ctx.register_schema(s)
        })?;
        let keys: Vec<String> = shape
            .key
            .iter()
            .map(|&i| quote(&shape.columns[i].name))
            .collect();
        // The key's values come back as the server sent them; a DECIMAL's text would compare
        // as a double: cast back to the column's type (`decimal(p,s)`).
        let params: Vec<String> = shape
            .key
            .iter()
            .map(|&i| match &shape.columns[i].data_type {
                DataType::Decimal => format!("CAST(? AS {})", shape.columns[i].column.type_name),
                _ => "?".to_owned(),
            })
            .collect();
        let list: Vec<String> = shape.columns.iter().map(|c| quote(&c.name)).collect();
        let select = |filter: &str| {
            format!(
                "SELECT {} FROM {}.{} {filter} ORDER BY {} LIMIT {CHUNK_ROWS}",
                list.join(", "),
                quote(database),
                quote(table),
                keys.join(", ")
            )
        };
        Ok(Some(TableReader {
            name: name.clone(),
            first: select(""),
            after: select(&format!("WHERE {}", after_key(&keys, &params))),
            shape,
        }))
    }

    /// Reads the chunk after key `after` (the first without) between two watermarks.
    pub async fn read(
        &self,
        conn: &mut mysql_async::Conn,
        watermarks: &mut Watermarks,
        factory: &EventFactory,
        after: Option<&[String]>,
    ) -> Result<Chunk> {
        let id = chunk_id();
        watermarks.write(conn, &Mark::Low.text(&id)).await?;
        let mut rows: Vec<mysql_async::Row> = match after {
            Some(after) => {
                let key = after
                    .iter()
                    .map(|k| key_value(k))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        Error::permanent(format!(
                            "the incremental snapshot's last key {after:?} in the checkpoint does not read back"
                        ))
                    })?;
                conn.exec(&self.after, after_params(&key)).await
            }
            None => conn.exec(&self.first, ()).await,
        }
        .map_err(|e| my_error("reading a chunk of an incremental snapshot", &e))?;
        watermarks.write(conn, &Mark::High.text(&id)).await?;

        let next_after = (rows.len() == CHUNK_ROWS).then(|| {
            let last = rows.last().expect("a full chunk");
            self.shape
                .key
                .iter()
                .map(|&i| key_text(last.as_ref(i).unwrap_or(&MyValue::NULL)))
                .collect()
        });
        let place = Place {
            file: String::new(),
            pos: 0,
            row: 0,
            gtid: None,
            server_id: 0,
            ts_ms: siphon_core::source::now_ms(),
            snapshot: SnapshotMarker::Incremental,
        };
        let events = rows
            .iter_mut()
            .map(|found| {
                let row = row_of(&self.shape, found);
                factory.event(&self.shape, Op::Read, None, Some(row), &place)
            })
            .collect();
        Ok(Chunk::new(id, self.shape.name(), events, next_after))
    }
}

/// Rows after a key, as a filter an index on the key serves: `(a > ?) OR (a = ? AND b > ?)`
/// (a row comparison `(a, b) > (?, ?)` is not used for ranges by every server version).
fn after_key(keys: &[String], params: &[String]) -> String {
    (0..keys.len())
        .map(|i| {
            let mut terms: Vec<String> = keys[..i]
                .iter()
                .zip(params)
                .map(|(k, p)| format!("{k} = {p}"))
                .collect();
            terms.push(format!("{} > {}", keys[i], params[i]));
            format!("({})", terms.join(" AND "))
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The parameters of [`after_key`]'s filter for a key's values.
fn after_params(key: &[MyValue]) -> Vec<MyValue> {
    (0..key.len())
        .flat_map(|i| key[..=i].iter().cloned())
        .collect()
}

/// A key value as tagged text that [`key_value`] reads back to the same value.
fn key_text(v: &MyValue) -> String {
    match v {
        MyValue::NULL => "n".into(),
        MyValue::Int(i) => format!("i:{i}"),
        MyValue::UInt(u) => format!("u:{u}"),
        MyValue::Float(f) => format!("f:{}", f.to_bits()),
        MyValue::Double(d) => format!("d:{}", d.to_bits()),
        MyValue::Bytes(b) => {
            let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("b:{hex}")
        }
        MyValue::Date(y, mo, d, h, mi, s, us) => format!("t:{y},{mo},{d},{h},{mi},{s},{us}"),
        MyValue::Time(neg, d, h, mi, s, us) => format!("T:{neg},{d},{h},{mi},{s},{us}"),
    }
}

/// Reads [`key_text`]'s form back.
fn key_value(text: &str) -> Option<MyValue> {
    if text == "n" {
        return Some(MyValue::NULL);
    }
    let (tag, body) = text.split_once(':')?;
    let parts = |n: usize| -> Option<Vec<&str>> {
        let parts: Vec<&str> = body.split(',').collect();
        (parts.len() == n).then_some(parts)
    };
    Some(match tag {
        "i" => MyValue::Int(body.parse().ok()?),
        "u" => MyValue::UInt(body.parse().ok()?),
        "f" => MyValue::Float(f32::from_bits(body.parse().ok()?)),
        "d" => MyValue::Double(f64::from_bits(body.parse().ok()?)),
        "b" => MyValue::Bytes(
            (0..body.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(body.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()?,
        ),
        "t" => {
            let p = parts(7)?;
            MyValue::Date(
                p[0].parse().ok()?,
                p[1].parse().ok()?,
                p[2].parse().ok()?,
                p[3].parse().ok()?,
                p[4].parse().ok()?,
                p[5].parse().ok()?,
                p[6].parse().ok()?,
            )
        }
        "T" => {
            let p = parts(6)?;
            MyValue::Time(
                p[0].parse().ok()?,
                p[1].parse().ok()?,
                p[2].parse().ok()?,
                p[3].parse().ok()?,
                p[4].parse().ok()?,
                p[5].parse().ok()?,
            )
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_as_the_values_the_server_sent() {
        for v in [
            MyValue::Int(-7),
            MyValue::UInt(u64::MAX),
            MyValue::Float(1.5),
            MyValue::Double(-0.1),
            MyValue::Bytes(b"caf\xc3\xa9\x00\xff".to_vec()),
            MyValue::Bytes(Vec::new()),
            MyValue::Date(2024, 2, 29, 23, 59, 58, 123_456),
            MyValue::Time(true, 3, 4, 5, 6, 7),
        ] {
            assert_eq!(key_value(&key_text(&v)), Some(v.clone()), "{v:?}");
        }
        assert_eq!(key_value("x:1"), None);
        assert_eq!(key_value("b:abc"), None, "an odd hex length");
    }

    #[test]
    fn a_composite_key_filters_by_its_columns_in_order() {
        let keys = ["`a`".to_owned(), "`b`".to_owned()];
        let params = ["?".to_owned(), "CAST(? AS decimal(10,2))".to_owned()];
        assert_eq!(
            after_key(&keys, &params),
            "(`a` > ?) OR (`a` = ? AND `b` > CAST(? AS decimal(10,2)))"
        );
        assert_eq!(
            after_params(&[MyValue::Int(1), MyValue::Int(2)]),
            [MyValue::Int(1), MyValue::Int(1), MyValue::Int(2)]
        );
        assert_eq!(after_key(&keys[..1], &params[..1]), "(`a` > ?)");
    }
}
