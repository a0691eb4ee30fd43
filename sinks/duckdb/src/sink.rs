//! The DuckDB sink.

use std::collections::HashMap;

use async_trait::async_trait;
use duckdb::Connection;
use siphon_core::event::{Event, Row};
use siphon_core::log::LogId;
use siphon_core::schema::{SchemaId, TableSchema};
use siphon_core::sink::changes::{
    Change, FromStored, by_table, by_written_columns, from_stored, history_row, net_changes,
};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::table::{self, DroppedColumns, MetaTypes, TableMode, new_columns, quote};
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result, Value};

use crate::config::{DuckdbSinkConfig, NAME_PLACEHOLDERS};
use crate::types::{cast, column_type, duck_type, staged, staging_type, unholdable};

/// DuckDB's names for the types of the columns siphon adds.
const META_TYPES: MetaTypes = MetaTypes {
    bigint: "BIGINT",
    text: "VARCHAR",
    json: "VARCHAR",
    timestamptz: "TIMESTAMPTZ",
};

/// Where the cursors live in the database.
const CURSORS: &str = "siphon_cursors";
/// The staging table a statement reads its rows from.
const STAGE: &str = "_siphon_stage";

/// Keeps mirror or history tables in a DuckDB file; see the crate documentation.
#[derive(Debug)]
pub struct DuckdbSink {
    config: DuckdbSinkConfig,
    pipeline: String,
    sink: String,
    table: NameTemplate,
    conn: Option<Connection>,
    /// Target tables by source `(namespace, table)`: name and column types.
    targets: HashMap<(String, String), Target>,
    /// The committed cursor: the next offset to apply.
    cursor: Option<u64>,
    /// The log the cursor is a position in (given at open).
    log: Option<LogId>,
    /// Batches written in the open transaction (0: none open).
    uncommitted: usize,
    /// (table, column)s whose values a column type could not hold, warned of once.
    unholdable_warned: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
}

#[derive(Debug, Clone)]
struct Target {
    /// Quoted table name.
    name: String,
    /// Column name → type, as the catalog spells it.
    columns: HashMap<String, String>,
    /// The source table's schema version the table was last brought in line with.
    schema: Option<SchemaId>,
}

/// Runs DuckDB's synchronous work without stalling the async workers where the runtime allows.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl DuckdbSink {
    /// A sink for sink `sink` of pipeline `pipeline` (they name its cursor row).
    pub fn new(config: DuckdbSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        Ok(DuckdbSink {
            table: NameTemplate::parse(&config.table, NAME_PLACEHOLDERS).map_err(Error::Config)?,
            config,
            pipeline: pipeline.to_owned(),
            sink: sink.to_owned(),
            conn: None,
            targets: HashMap::new(),
            cursor: None,
            log: None,
            uncommitted: 0,
            unholdable_warned: Default::default(),
        })
    }

    /// Another connection to the same database, for queries in this process (DuckDB lets one
    /// process at a time open a file for writing).
    pub fn connection(&self) -> Option<Connection> {
        self.conn.as_ref().and_then(|c| c.try_clone().ok())
    }

    fn error(&self, e: &duckdb::Error, what: &str) -> Error {
        let message = format!("duckdb {} {what}: {e}", self.config.path.display());
        // Another process holding the file is the one condition that passes by itself.
        if message.contains("lock") {
            Error::transient(message)
        } else {
            Error::permanent(message)
        }
    }

    fn conn(&self) -> Result<&Connection> {
        self.conn
            .as_ref()
            .ok_or_else(|| Error::transient("the duckdb sink is not open"))
    }

    fn batch(&self, sql: &str, what: &str) -> Result<()> {
        self.conn()?
            .execute_batch(sql)
            .map_err(|e| self.error(&e, what))
    }

    /// Opens the file again (dropping the connection rolls back an open transaction).
    fn connect(&mut self) -> Result<()> {
        self.conn = None;
        self.uncommitted = 0;
        self.targets.clear();
        if let Some(dir) = self
            .config
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::permanent(format!("duckdb: cannot create {}: {e}", dir.display()))
            })?;
        }
        let conn = Connection::open(&self.config.path).map_err(|e| self.error(&e, "opening"))?;
        self.conn = Some(conn);
        self.batch(
            &format!(
                "CREATE TABLE IF NOT EXISTS {CURSORS} (pipeline VARCHAR NOT NULL, sink VARCHAR NOT NULL, \
                 next_offset BIGINT NOT NULL, log_id VARCHAR, PRIMARY KEY (pipeline, sink)); \
                 ALTER TABLE {CURSORS} ADD COLUMN IF NOT EXISTS log_id VARCHAR"
            ),
            "preparing the cursor table",
        )
    }

    fn stored_cursor(&self) -> Result<Option<StoreCursor>> {
        let conn = self.conn()?;
        let failed = |e: duckdb::Error| self.error(&e, "reading the cursor");
        let mut stmt = conn
            .prepare(&format!(
                "SELECT next_offset, log_id FROM {CURSORS} WHERE pipeline = ? AND sink = ?"
            ))
            .map_err(failed)?;
        let mut rows = stmt
            .query(duckdb::params![self.pipeline, self.sink])
            .map_err(failed)?;
        match rows.next().map_err(failed)? {
            Some(row) => Ok(Some(StoreCursor {
                next_offset: row.get::<_, i64>(0).map_err(failed)? as u64,
                log: row
                    .get::<_, Option<String>>(1)
                    .map_err(failed)?
                    .as_deref()
                    .map(LogId::from_stored),
            })),
            None => Ok(None),
        }
    }

    fn save_cursor(&self, next: u64) -> Result<()> {
        let log = self.log.as_ref().map(LogId::as_str);
        self.conn()?
            .execute(
                &format!(
                    "INSERT INTO {CURSORS} (pipeline, sink, next_offset, log_id) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (pipeline, sink) DO UPDATE SET next_offset = excluded.next_offset, log_id = excluded.log_id"
                ),
                duckdb::params![self.pipeline, self.sink, next as i64, log],
            )
            .map(drop)
            .map_err(|e| self.error(&e, "saving the cursor"))
    }

    fn target_name(&self, schema: &str, table: &str) -> String {
        quote(&self.table.render(&[("schema", schema), ("table", table)]))
    }

    fn catalog_columns(&self, name: &str) -> Result<HashMap<String, String>> {
        let conn = self.conn()?;
        let unquoted = name.trim_matches('"').replace("\"\"", "\"");
        let mut stmt = conn
            .prepare(
                "SELECT column_name, data_type FROM information_schema.columns \
                 WHERE table_schema = 'main' AND table_name = ?",
            )
            .map_err(|e| self.error(&e, "reading the catalog"))?;
        let rows = stmt
            .query_map([unquoted], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.error(&e, "reading the catalog"))?;
        rows.collect::<Result<_, _>>()
            .map_err(|e| self.error(&e, "reading the catalog"))
    }

    /// The target table of a source table, created or changed so that it can take `rows`:
    /// from the table schemas of `events` (a source table's, in log order) where they have
    /// them (the source's column types, in the source's order), following each version in
    /// turn, else from the values.
    fn target(&mut self, events: &[&Event], rows: &[&Row]) -> Result<Target> {
        let Some(&first) = events.first() else {
            return Err(Error::permanent("no events for a target table"));
        };
        let source = &first.source;
        let id = (source.namespace().to_owned(), source.table.to_string());
        let mut target = match self.targets.get(&id) {
            Some(t) => t.clone(),
            None => self.load_target(first, rows)?,
        };
        let mut schema_less = false;
        for event in events {
            match &event.schema {
                Some(schema) if target.schema != Some(schema.id) => {
                    self.follow_schema(&mut target, schema)?;
                }
                Some(_) => {}
                None => schema_less = true,
            }
        }
        if schema_less {
            self.add_value_columns(&mut target, rows)?;
        }
        self.targets.insert(id, target.clone());
        Ok(target)
    }

    /// Reads a target table from the catalog, creating it if it does not exist.
    fn load_target(&self, event: &Event, rows: &[&Row]) -> Result<Target> {
        let source = &event.source;
        let name = self.target_name(source.namespace(), &source.table);
        let mut target = Target {
            columns: self.catalog_columns(&name)?,
            name,
            schema: None,
        };
        if target.columns.is_empty() {
            let key = event.key.as_ref();
            let (leading, key_names) = self.config.mode.layout(META_TYPES, key);
            let defs = match &event.schema {
                Some(schema) => {
                    let columns: Vec<(&str, String)> = schema
                        .columns
                        .iter()
                        .map(|c| (&*c.name, duck_type(c)))
                        .collect();
                    let key_names: Vec<&str> = match self.config.mode {
                        TableMode::Mirror => schema
                            .key
                            .iter()
                            .map(|&i| &*schema.columns[i].name)
                            .collect(),
                        TableMode::History => key_names,
                    };
                    target.schema = Some(schema.id);
                    table::definition(&leading, &columns, &key_names)
                }
                None => {
                    let columns = new_columns(key, rows, column_type, |_| false);
                    table::definition(&leading, &columns, &key_names)
                }
            };
            self.batch(
                &format!("CREATE TABLE IF NOT EXISTS {} ({defs})", target.name),
                "creating the target table",
            )?;
            tracing::info!(table = %target.name, mode = ?self.config.mode, "created the target table");
            target.columns = self.catalog_columns(&target.name)?;
        } else if !target.columns.contains_key("_siphon_offset") {
            return Err(Error::permanent(format!(
                "the table {} exists but was not made by siphon (it has no _siphon_offset column); drop it, or map the source table to another name with `table`",
                target.name
            )));
        }
        Ok(target)
    }

    /// Adds the columns of `rows` that the table lacks, typed by their values.
    fn add_value_columns(&self, target: &mut Target, rows: &[&Row]) -> Result<()> {
        // DuckDB adds one column per statement.
        for (column, ty) in new_columns(None, rows, column_type, |c| target.columns.contains_key(c))
        {
            self.alter(
                target,
                &format!("ADD COLUMN IF NOT EXISTS {} {ty}", quote(column)),
            )?;
            target.columns.insert(column.to_owned(), ty.to_owned());
        }
        Ok(())
    }

    /// Brings the table in line with a version of its source table: adds the columns it
    /// lacks, changes the type of those whose type differs and drops (or keeps, per
    /// `dropped_columns`) those the source no longer has.
    fn follow_schema(&self, target: &mut Target, schema: &TableSchema) -> Result<()> {
        let mut changed = false;
        for column in &schema.columns {
            let ty = duck_type(column);
            let name = quote(&column.name);
            match target.columns.get(&*column.name) {
                None => {
                    self.alter(target, &format!("ADD COLUMN {name} {ty}"))?;
                    changed = true;
                }
                Some(have) if *have != ty && *have != self.spelling(&ty)? => {
                    self.alter(target, &format!("ALTER COLUMN {name} TYPE {ty}"))?;
                    changed = true;
                }
                Some(_) => {}
            }
        }
        let dropped: Vec<String> = target
            .columns
            .keys()
            .filter(|c| !c.starts_with("_siphon_") && schema.position(c).is_none())
            .cloned()
            .collect();
        if !dropped.is_empty() {
            match self.config.dropped_columns {
                DroppedColumns::Drop => {
                    for c in &dropped {
                        self.alter(target, &format!("DROP COLUMN {}", quote(c)))?;
                    }
                    changed = true;
                }
                DroppedColumns::Keep => {
                    tracing::debug!(table = %target.name, columns = ?dropped, "the source table has no such columns any more: kept (dropped_columns = \"keep\")");
                }
            }
        }
        if changed {
            target.columns = self.catalog_columns(&target.name)?;
        }
        target.schema = Some(schema.id);
        Ok(())
    }

    /// One `ALTER TABLE` (DuckDB takes one change per statement), in a transaction of its
    /// own: DuckDB refuses to commit a transaction that both wrote to a table and altered it.
    /// What the open transaction wrote so far commits first, without the cursor, so a crash
    /// re-applies it (idempotently: every row carries its offset).
    fn alter(&self, target: &Target, change: &str) -> Result<()> {
        self.batch(
            &format!(
                "COMMIT; ALTER TABLE {} {change}; BEGIN TRANSACTION",
                target.name
            ),
            "changing the target table as its source table changed",
        )?;
        tracing::info!(table = %target.name, change, "changed the target table");
        Ok(())
    }

    /// How the catalog spells a type (`TIMESTAMPTZ` is `TIMESTAMP WITH TIME ZONE` there).
    fn spelling(&self, ty: &str) -> Result<String> {
        self.conn()?
            .query_row(&format!("SELECT typeof(CAST(NULL AS {ty}))"), [], |r| {
                r.get(0)
            })
            .map_err(|e| self.error(&e, "reading a type's name"))
    }

    /// Fills the staging table with `rows` (one staging column per name, then the offset).
    fn stage(&self, target: &Target, names: &[&str], rows: &[(&Row, u64)]) -> Result<()> {
        let values = rows
            .iter()
            .map(|(row, offset)| (names.iter().map(|c| row.get(c)).collect(), *offset));
        self.stage_values(target, names, values)
    }

    /// Fills the staging table: a column per name (`c1`, `c2`, …, staged for the target's
    /// column of that name), then the offset `o`; each row gives its values in that order.
    fn stage_values<'v>(
        &self,
        target: &Target,
        names: &[&str],
        rows: impl IntoIterator<Item = (Vec<Option<&'v Value>>, u64)>,
    ) -> Result<()> {
        let types: Vec<&str> = names
            .iter()
            .map(|c| target.columns.get(*c).map_or("VARCHAR", String::as_str))
            .collect();
        let defs: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, ty)| format!("c{} {}", i + 1, staging_type(ty)))
            .chain(std::iter::once("o BIGINT".to_owned()))
            .collect();
        self.batch(
            &format!("CREATE OR REPLACE TEMP TABLE {STAGE} ({})", defs.join(", ")),
            "creating the staging table",
        )?;
        let conn = self.conn()?;
        let mut appender = conn
            .appender(STAGE)
            .map_err(|e| self.error(&e, "staging rows"))?;
        for (row, offset) in rows {
            for ((value, ty), name) in row.iter().zip(&types).zip(names) {
                if unholdable(*value, ty)
                    && self
                        .unholdable_warned
                        .lock()
                        .unwrap()
                        .insert((target.name.clone(), (*name).to_owned()))
                {
                    tracing::warn!(table = %target.name, column = name, column_type = ty, value = ?value,
                        "DuckDB's DECIMAL holds no NaN or infinity: such values of this column are written as NULL (said once per column)");
                }
            }
            let values = row
                .into_iter()
                .zip(&types)
                .map(|(value, ty)| staged(value, ty))
                .chain(std::iter::once(duckdb::types::Value::BigInt(offset as i64)));
            appender
                .append_row(duckdb::appender_params_from_iter(values))
                .map_err(|e| self.error(&e, "staging rows"))?;
        }
        appender.flush().map_err(|e| self.error(&e, "staging rows"))
    }

    fn casts(names: &[&str], target: &Target) -> String {
        names
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let ty = target.columns.get(*c).map_or("VARCHAR", String::as_str);
                cast(&format!("s.c{}", i + 1), ty)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn write(&mut self, records: &[SinkRecord]) -> Result<()> {
        match self.config.mode {
            TableMode::Mirror => self.write_mirror(records),
            TableMode::History => self.write_history(records),
        }
    }

    fn write_mirror(&mut self, records: &[SinkRecord]) -> Result<()> {
        let changes = net_changes(records);
        let mut pending: Vec<&Change<'_>> = Vec::new();
        for change in &changes {
            if let Change::Truncate { event, .. } = change {
                self.flush_mirror(&std::mem::take(&mut pending))?;
                let target = self.target(&[*event], &[])?;
                self.batch(&format!("DELETE FROM {}", target.name), "truncating")?;
            } else {
                pending.push(change);
            }
        }
        self.flush_mirror(&pending)
    }

    fn flush_mirror(&mut self, changes: &[&Change<'_>]) -> Result<()> {
        for list in by_table(changes.iter().copied(), |c| &c.event().source) {
            let event = list[0].event();
            let Some(key) = event.key.as_ref() else {
                return Err(list[0].rejected(
                    "the table has no primary key, so a mirror cannot address its rows",
                ));
            };
            let rows: Vec<&Row> = list
                .iter()
                .filter_map(|c| match c {
                    Change::Upsert { row, .. } => Some(&**row),
                    _ => None,
                })
                .collect();
            let target = self.target(&list.iter().map(|c| c.event()).collect::<Vec<_>>(), &rows)?;
            let key: Vec<&str> = key.iter().map(|(c, _)| c).collect();
            // Rows that leave columns unchanged (TOAST) take them from their stored row first:
            // the old key of a row whose key changed is deleted below.
            for group in from_stored(list.iter().copied(), |c| target.columns.contains_key(c)) {
                self.upsert_from_stored(&target, &key, &group)?;
            }
            let deletes: Vec<(&Row, u64)> = list
                .iter()
                .filter(|c| matches!(c, Change::Delete { .. }))
                .filter_map(|c| Some((c.event().key.as_ref()?, c.offset())))
                .collect();
            if !deletes.is_empty() {
                self.stage(&target, &key, &deletes)?;
                let matches: Vec<String> = key
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let ty = target.columns.get(*c).map_or("VARCHAR", String::as_str);
                        format!("t.{} = {}", quote(c), cast(&format!("s.c{}", i + 1), ty))
                    })
                    .collect();
                self.batch(
                    &format!(
                        "DELETE FROM {} AS t USING {STAGE} AS s WHERE {} AND t._siphon_offset < s.o",
                        target.name,
                        matches.join(" AND ")
                    ),
                    "deleting",
                )?;
            }
            let whole = list.iter().filter_map(|c| match c {
                Change::Upsert { row, offset, .. } if c.unchanged_from().is_none() => {
                    Some((Some(&**row), (&**row, *offset)))
                }
                _ => None,
            });
            let groups = by_written_columns(whole, |c| target.columns.contains_key(c));
            for (names, rows) in groups {
                self.stage(&target, &names, &rows)?;
                let updates: Vec<String> = names
                    .iter()
                    .filter(|c| !key.contains(c))
                    .map(|c| format!("{0} = excluded.{0}", quote(c)))
                    .chain(std::iter::once(
                        "_siphon_offset = excluded._siphon_offset".to_owned(),
                    ))
                    .collect();
                let table = target.name.clone();
                self.batch(
                    &format!(
                        "INSERT INTO {table} ({cols}, _siphon_offset) SELECT {casts}, s.o FROM {STAGE} AS s \
                         ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE {table}._siphon_offset < excluded._siphon_offset",
                        cols = names.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
                        casts = Self::casts(&names, &target),
                        key = key.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
                        updates = updates.join(", "),
                    ),
                    "upserting",
                )?;
            }
        }
        Ok(())
    }

    /// Writes rows whole, taking the columns they leave unchanged from the stored rows their
    /// group names: a row whose stored row is gone is not written (never half of it).
    fn upsert_from_stored(
        &self,
        target: &Target,
        key: &[&str],
        group: &FromStored<'_>,
    ) -> Result<()> {
        let FromStored {
            written,
            taken,
            rows,
        } = group;
        // Staged: the written columns, then the stored row's key.
        let names: Vec<&str> = written.iter().chain(key).copied().collect();
        let values = rows.iter().map(|(row, from, offset)| {
            let values = written
                .iter()
                .map(|c| row.get(c))
                .chain(key.iter().map(|c| from.get(c)))
                .collect();
            (values, *offset)
        });
        self.stage_values(target, &names, values)?;
        let n = written.len();
        let join: Vec<String> = key
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let ty = target.columns.get(*c).map_or("VARCHAR", String::as_str);
                format!(
                    "b.{} = {}",
                    quote(c),
                    cast(&format!("s.c{}", n + i + 1), ty)
                )
            })
            .collect();
        let updates: Vec<String> = written
            .iter()
            .chain(taken.iter())
            .filter(|c| !key.contains(c))
            .map(|c| format!("{0} = excluded.{0}", quote(c)))
            .chain(std::iter::once(
                "_siphon_offset = excluded._siphon_offset".to_owned(),
            ))
            .collect();
        let table = &target.name;
        let taken_values: String = taken.iter().map(|c| format!(", b.{}", quote(c))).collect();
        self.batch(
            &format!(
                "INSERT INTO {table} ({cols}, _siphon_offset) SELECT {casts}{taken_values}, s.o \
                 FROM {STAGE} AS s JOIN {table} AS b ON {join} \
                 ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE {table}._siphon_offset < excluded._siphon_offset",
                cols = written
                    .iter()
                    .chain(taken.iter())
                    .map(|c| quote(c))
                    .collect::<Vec<_>>()
                    .join(", "),
                casts = Self::casts(written, target),
                join = join.join(" AND "),
                key = key.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
                updates = updates.join(", "),
            ),
            "upserting rows with unchanged columns",
        )
    }

    fn write_history(&mut self, records: &[SinkRecord]) -> Result<()> {
        for list in by_table(records, |r| &r.event.source) {
            let rows: Vec<&Row> = list.iter().filter_map(|r| history_row(&r.event)).collect();
            let target = self.target(&list.iter().map(|r| &r.event).collect::<Vec<_>>(), &rows)?;
            let groups =
                by_written_columns(list.iter().map(|r| (history_row(&r.event), *r)), |c| {
                    target.columns.contains_key(c)
                });
            for (names, group) in groups {
                // The staging table carries op, position and commit time as extra leading columns.
                let meta: Vec<Row> = group
                    .iter()
                    .map(|r| {
                        let mut row = vec![
                            (
                                "_siphon_op".into(),
                                siphon_core::Value::Text(r.event.op.code().into()),
                            ),
                            (
                                "_siphon_position".into(),
                                siphon_core::Value::Text(
                                    r.event.source.position.to_json().to_string(),
                                ),
                            ),
                            (
                                "_siphon_commit_ts".into(),
                                siphon_core::Value::TimestampTz(r.event.source.ts_ms * 1000),
                            ),
                        ];
                        if let Some(h) = history_row(&r.event) {
                            row.extend(h.0.iter().cloned());
                        }
                        Row(row)
                    })
                    .collect();
                let all: Vec<&str> = ["_siphon_op", "_siphon_position", "_siphon_commit_ts"]
                    .into_iter()
                    .chain(names.iter().copied())
                    .collect();
                let rows: Vec<(&Row, u64)> = meta
                    .iter()
                    .zip(&group)
                    .map(|(m, r)| (m, r.offset))
                    .collect();
                self.stage(&target, &all, &rows)?;
                self.batch(
                    &format!(
                        "INSERT INTO {} (_siphon_offset, {}) SELECT s.o, {} FROM {STAGE} AS s ON CONFLICT (_siphon_offset) DO NOTHING",
                        target.name,
                        all.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
                        Self::casts(&all, &target),
                    ),
                    "appending history",
                )?;
            }
        }
        Ok(())
    }

    fn apply_sync(&mut self, batch: &SinkBatch) -> Result<()> {
        let committed = self.cursor.unwrap_or(0);
        if batch.end <= committed {
            return Ok(());
        }
        let records = &batch.records[batch.records.partition_point(|r| r.offset < committed)..];
        if !records.is_empty() {
            self.write_in_transaction(records)?;
        }
        // The cursor moves with the commit of a source transaction, or at once past a stretch
        // of records this sink does not take.
        if batch.ends_transaction || self.uncommitted == 0 {
            self.save_cursor(batch.end)?;
            if self.uncommitted > 0 {
                self.uncommitted = 0;
                self.batch("COMMIT", "committing")?;
            }
            self.cursor = Some(batch.end);
        }
        Ok(())
    }

    /// Writes records inside the target transaction (begun if none is open). DuckDB aborts
    /// the whole transaction on an error, so a refused record is located by a rolled-back
    /// search.
    fn write_in_transaction(&mut self, records: &[SinkRecord]) -> Result<()> {
        if self.uncommitted == 0 {
            self.batch("BEGIN TRANSACTION", "beginning a transaction")?;
        }
        if let Err(e) = self.write(records) {
            // DuckDB aborts the whole transaction on an error.
            let earlier = self.uncommitted;
            let _ = self.batch("ROLLBACK", "rolling back");
            self.uncommitted = 0;
            self.targets.clear();
            if e.is_transient() {
                self.conn = None;
                return Err(e);
            }
            if earlier > 0 {
                return Err(Error::permanent(format!(
                    "{e} (inside a source transaction larger than the batch size, so the record cannot be set aside)"
                )));
            }
            return Err(self.locate_rejection(records, e));
        }
        self.uncommitted += 1;
        Ok(())
    }

    /// Applies records one by one in a transaction that is rolled back, to find the one
    /// DuckDB refuses.
    fn locate_rejection(&mut self, records: &[SinkRecord], original: Error) -> Error {
        if self
            .batch("BEGIN TRANSACTION", "locating a rejected record")
            .is_err()
        {
            return original;
        }
        let mut found = None;
        for (i, record) in records.iter().enumerate() {
            if let Err(e) = self.write(&records[i..=i]) {
                found = Some(record.rejected(e.to_string()));
                break;
            }
        }
        let _ = self.batch("ROLLBACK", "rolling back");
        self.targets.clear();
        found.unwrap_or(original)
    }
}

#[async_trait]
impl Sink for DuckdbSink {
    async fn check(&mut self) -> Result<()> {
        blocking(|| self.connect())
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        if self.config.mode == TableMode::Mirror
            && let Some(t) = tables.iter().find(|t| t.key_columns.is_empty())
        {
            return Err(Error::permanent(format!(
                "table {} has no primary key, so a mirror cannot address its rows; give it one, use mode = \"history\", or leave it out with `tables`",
                t.name
            )));
        }
        self.log = Some(log.clone());
        blocking(|| {
            self.connect()?;
            let stored = self.stored_cursor()?;
            self.cursor = stored.as_ref().map(|c| c.next_offset);
            Ok(stored)
        })
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        blocking(|| self.apply_sync(batch))
    }

    fn holds_transaction(&self) -> bool {
        self.uncommitted > 0
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        blocking(|| {
            if self.cursor.is_some_and(|c| c > next) {
                self.save_cursor(next)?;
                self.cursor = Some(next);
            }
            Ok(())
        })
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        blocking(|| {
            self.connect()?;
            for table in tables {
                let (schema, name) = (table.name.namespace(), table.name.table());
                let target = self.target_name(schema, name);
                self.batch(
                    &format!("DROP TABLE IF EXISTS {target}"),
                    "dropping a table",
                )?;
                tracing::info!(table = %target, "reset: dropped the target table");
            }
            self.conn()?
                .execute(
                    &format!("DELETE FROM {CURSORS} WHERE pipeline = ? AND sink = ?"),
                    duckdb::params![self.pipeline, self.sink],
                )
                .map_err(|e| self.error(&e, "deleting the cursor"))?;
            self.cursor = None;
            Ok(())
        })
    }

    fn keeps_history(&self) -> bool {
        self.config.mode == TableMode::History
    }
}
