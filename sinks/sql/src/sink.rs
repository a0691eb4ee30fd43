//! The engine: a [`Sink`] over a [`Dialect`].

use std::collections::HashMap;
use std::marker::PhantomData;

use async_trait::async_trait;
use siphon_core::event::{Event, Row, Value};
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::log::LogId;
use siphon_core::schema::{SchemaId, TableSchema};
use siphon_core::sink::changes::{
    Change, FromStored, by_table, by_written_columns, from_stored, history_row, net_changes,
};
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};

use crate::dialect::{Catalog, Dialect, SinkId, Staged, TargetName};
use crate::table::{self, DroppedColumns, MetaTypes, TableMode, new_columns, quote};

/// The sink kind of a dialect (`kind = D::KIND`): a SQL warehouse is added by its dialect and
/// one entry in the list of kinds.
pub struct SqlKind<D>(PhantomData<fn() -> D>);

impl<D> std::fmt::Debug for SqlKind<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(std::any::type_name::<Self>())
    }
}

impl<D: Dialect> Kind for SqlKind<D> {
    const NAME: &'static str = D::KIND;
    type Config = D::Config;

    fn validate(config: &D::Config) -> std::result::Result<(), String> {
        D::validate(config)
    }

    fn build_note() -> Option<&'static str> {
        D::build_note()
    }
}

impl<D: Dialect> SinkKind for SqlKind<D> {
    fn build(config: &D::Config, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(SqlSink::<D>::new(config.clone(), pipeline, sink)?))
    }
}

/// The columns a history row carries before the source row's.
const HISTORY_META: [&str; 3] = ["_siphon_op", "_siphon_position", "_siphon_commit_ts"];

/// Keeps mirror or history tables in a SQL database: see the crate documentation.
#[derive(Debug)]
pub struct SqlSink<D> {
    dialect: D,
    id: SinkId,
    /// Target tables by source `(namespace, table)`, as the catalog had them.
    targets: HashMap<(String, String), Target>,
    /// The committed cursor: the next offset to apply.
    cursor: Option<u64>,
    /// The log the cursor is a position in (given at open).
    log: Option<LogId>,
    /// A target transaction is open (the source transaction has not ended yet).
    in_transaction: bool,
}

/// A target table.
#[derive(Debug, Clone)]
struct Target {
    /// Quoted name.
    name: String,
    catalog: Catalog,
    /// The source table's schema version the table was last brought in line with.
    schema: Option<SchemaId>,
}

impl Target {
    fn has(&self, column: &str) -> bool {
        self.catalog.columns.contains_key(column)
    }

    /// The type a staged value of `column` is cast to (`text` where the catalog lacks it).
    fn cast_type<'t>(&'t self, column: &str, text: &'t str) -> &'t str {
        self.catalog
            .columns
            .get(column)
            .map_or(text, String::as_str)
    }
}

impl<D: Dialect> SqlSink<D> {
    /// A sink for sink `sink` of pipeline `pipeline` (they name its cursor row).
    pub fn new(config: D::Config, pipeline: &str, sink: &str) -> Result<Self> {
        D::validate(&config).map_err(Error::Config)?;
        Ok(SqlSink {
            dialect: D::new(config)?,
            id: SinkId {
                pipeline: pipeline.to_owned(),
                sink: sink.to_owned(),
            },
            targets: HashMap::new(),
            cursor: None,
            log: None,
            in_transaction: false,
        })
    }

    /// The database's side (its connection, for tests and tools).
    pub fn dialect(&self) -> &D {
        &self.dialect
    }

    fn mode(&self) -> TableMode {
        self.dialect.settings().mode
    }

    /// The dialect's text type.
    fn text_type(&self) -> &'static str {
        self.value_type(&Value::Text(String::new()))
    }

    /// The dialect's type of a kind of value that has one.
    fn value_type(&self, value: &Value) -> &'static str {
        self.dialect.value_type(value).unwrap_or("text")
    }

    /// The types of the columns siphon adds, as the dialect names their kinds of values.
    fn meta_types(&self) -> MetaTypes {
        MetaTypes {
            bigint: self.value_type(&Value::Int(0)),
            text: self.text_type(),
            json: self.value_type(&Value::Json(String::new())),
            timestamptz: self.value_type(&Value::TimestampTz(0)),
        }
    }

    async fn connect(&mut self) -> Result<()> {
        self.in_transaction = false;
        self.targets.clear();
        self.dialect.connect().await
    }

    fn disconnect(&mut self) {
        self.in_transaction = false;
        self.targets.clear();
        self.dialect.disconnect();
    }

    /// Rows staged for a statement: the values of `names` in each row, and its offset.
    fn staged<'a>(
        &self,
        target: &'a Target,
        names: &[&'a str],
        rows: Vec<(Vec<Option<&'a Value>>, u64)>,
    ) -> Staged<'a> {
        Staged {
            table: &target.name,
            columns: names
                .iter()
                .map(|c| (*c, target.cast_type(c, self.text_type())))
                .collect(),
            rows,
        }
    }

    /// `cast(s.c1), cast(s.c2), …` for the target's types of `names`, from staged column
    /// `from` + 1 on.
    fn casts(&self, target: &Target, names: &[&str], from: usize) -> Vec<String> {
        names
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.dialect.cast(
                    &format!("s.c{}", from + i + 1),
                    target.cast_type(c, self.text_type()),
                )
            })
            .collect()
    }

    /// The target table of a source table, created or changed so that it can take `rows`:
    /// from the table schemas of `events` (a source table's, in log order) where they have
    /// them (the source's column types, in the source's order), following each version in
    /// turn, else from the values.
    async fn target(&mut self, events: &[&Event], rows: &[&Row]) -> Result<Target> {
        let Some(&first) = events.first() else {
            return Err(Error::permanent("no events for a target table"));
        };
        let source = &first.source;
        let id = (source.namespace().to_owned(), source.table.to_string());
        let mut target = match self.targets.get(&id) {
            Some(t) => t.clone(),
            None => self.load_target(first, rows).await?,
        };
        let mut schema_less = false;
        for event in events {
            match &event.schema {
                Some(schema) if target.schema != Some(schema.id) => {
                    self.follow_schema(&mut target, schema).await?;
                }
                Some(_) => {}
                None => schema_less = true,
            }
        }
        if schema_less {
            self.add_value_columns(&mut target, rows).await?;
        }
        self.targets.insert(id, target.clone());
        Ok(target)
    }

    /// Reads a target table from the catalog, creating it if it does not exist.
    async fn load_target(&self, event: &Event, rows: &[&Row]) -> Result<Target> {
        let source = &event.source;
        let name: TargetName = self.dialect.target(source.namespace(), &source.table);
        let mut target = Target {
            catalog: self.dialect.catalog(&name.table).await?,
            name: name.table.clone(),
            schema: None,
        };
        if target.catalog.columns.is_empty() {
            let key = event.key.as_ref();
            let mode = self.mode();
            let (leading, key_names) = mode.layout(self.meta_types(), key);
            let definition = match &event.schema {
                Some(schema) => {
                    let columns: Vec<(&str, String)> = schema
                        .columns
                        .iter()
                        .map(|c| (&*c.name, self.dialect.column_type(c)))
                        .collect();
                    let key_names: Vec<&str> = match mode {
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
                    let columns = new_columns(key, rows, |v| self.dialect.value_type(v), |_| false);
                    table::definition(&leading, &columns, &key_names)
                }
            };
            self.dialect
                .batch(
                    &self.dialect.create_table(&name, &definition),
                    "creating the target table",
                )
                .await?;
            tracing::info!(table = %target.name, ?mode, "created the target table");
            target.catalog = self.dialect.catalog(&target.name).await?;
        } else if !target.has("_siphon_offset") {
            return Err(Error::permanent(format!(
                "the target table {} exists but was not made by siphon (it has no _siphon_offset column); drop it, or map the source table to another name with `table`",
                target.name
            )));
        }
        Ok(target)
    }

    /// Adds the columns of `rows` that the table lacks, typed by their values.
    async fn add_value_columns(&self, target: &mut Target, rows: &[&Row]) -> Result<()> {
        let missing = new_columns(
            None,
            rows,
            |v| self.dialect.value_type(v),
            |c| target.has(c),
        );
        if missing.is_empty() {
            return Ok(());
        }
        let adds: Vec<String> = missing
            .iter()
            .map(|(c, ty)| format!("ADD COLUMN IF NOT EXISTS {} {ty}", quote(c)))
            .collect();
        self.dialect.alter(&target.name, &adds).await?;
        tracing::info!(table = %target.name, columns = ?missing, "added columns to the target table");
        target.catalog = self.dialect.catalog(&target.name).await?;
        Ok(())
    }

    /// Brings the table in line with a version of its source table: adds the columns it
    /// lacks and, in a table siphon made, changes the type of those whose type differs and
    /// drops (or keeps, per `dropped_columns`) those the source no longer has.
    async fn follow_schema(&self, target: &mut Target, schema: &TableSchema) -> Result<()> {
        let owned = target.catalog.owned;
        let mut changes = Vec::new();
        for column in &schema.columns {
            let ty = self.dialect.column_type(column);
            let name = quote(&column.name);
            match target.catalog.declared.get(&*column.name) {
                None => changes.push(format!("ADD COLUMN {name} {ty}")),
                Some(have) if owned && !self.dialect.same_type(have, &ty).await? => {
                    changes.push(self.dialect.change_type(&name, &ty));
                }
                Some(_) => {}
            }
        }
        let dropped: Vec<&String> = target
            .catalog
            .declared
            .keys()
            .filter(|c| !c.starts_with("_siphon_") && schema.position(c).is_none())
            .collect();
        if !dropped.is_empty() && owned {
            match self.dialect.settings().dropped_columns {
                DroppedColumns::Drop => {
                    changes.extend(dropped.iter().map(|c| format!("DROP COLUMN {}", quote(c))));
                }
                DroppedColumns::Keep => {
                    tracing::info!(table = %target.name, columns = ?dropped, "the source table has no such columns any more: kept (dropped_columns = \"keep\")");
                }
            }
        }
        if !changes.is_empty() {
            self.dialect.alter(&target.name, &changes).await?;
            tracing::info!(table = %target.name, ?changes, "changed the target table as its source table changed");
            target.catalog = self.dialect.catalog(&target.name).await?;
        }
        target.schema = Some(schema.id);
        Ok(())
    }

    /// Applies records (inside the open transaction).
    async fn write(&mut self, records: &[SinkRecord]) -> Result<()> {
        match self.mode() {
            TableMode::Mirror => self.write_mirror(records).await,
            TableMode::History => self.write_history(records).await,
        }
    }

    async fn write_mirror(&mut self, records: &[SinkRecord]) -> Result<()> {
        let changes = net_changes(records);
        let mut pending: Vec<&Change<'_>> = Vec::new();
        for change in &changes {
            if let Change::Truncate { event, .. } = change {
                self.flush_mirror(&std::mem::take(&mut pending)).await?;
                let target = self.target(&[*event], &[]).await?;
                self.dialect
                    .batch(&self.dialect.truncate(&target.name), "truncating")
                    .await?;
            } else {
                pending.push(change);
            }
        }
        self.flush_mirror(&pending).await
    }

    /// Upserts and deletes, a few statements per table.
    async fn flush_mirror(&mut self, changes: &[&Change<'_>]) -> Result<()> {
        for list in by_table(changes.iter().copied(), |c| &c.event().source) {
            let Some(key) = list[0].event().key.as_ref() else {
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
            let events: Vec<&Event> = list.iter().map(|c| c.event()).collect();
            let target = self.target(&events, &rows).await?;
            let key: Vec<&str> = key.iter().map(|(c, _)| c).collect();
            // Rows that leave columns unchanged (TOAST) take them from their stored row first:
            // the old key of a row whose key changed is deleted below.
            for group in from_stored(list.iter().copied(), |c| target.has(c)) {
                self.upsert_from_stored(&target, &key, &group).await?;
            }
            let deletes: Vec<(&Row, u64)> = list
                .iter()
                .filter(|c| matches!(c, Change::Delete { .. }))
                .filter_map(|c| Some((c.event().key.as_ref()?, c.offset())))
                .collect();
            if !deletes.is_empty() {
                self.delete(&target, &key, &deletes).await?;
            }
            let whole = list.iter().filter_map(|c| match c {
                Change::Upsert { row, offset, .. } if c.unchanged_from().is_none() => {
                    Some((Some(&**row), (&**row, *offset)))
                }
                _ => None,
            });
            for (names, rows) in by_written_columns(whole, |c| target.has(c)) {
                self.upsert(&target, &key, &names, &rows).await?;
            }
        }
        Ok(())
    }

    /// `INSERT … SELECT {values}, s.o FROM {from} … ON CONFLICT (key) DO UPDATE` of
    /// `columns`, where the stored row is older.
    fn upsert_sql(
        &self,
        target: &Target,
        key: &[&str],
        columns: &[&str],
        values: &str,
        from: &str,
    ) -> String {
        let (into, stored) = self.dialect.insert_into(&target.name);
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{0} = excluded.{0}", quote(c)))
            .chain(std::iter::once(
                "_siphon_offset = excluded._siphon_offset".to_owned(),
            ))
            .collect();
        format!(
            "INSERT INTO {into} ({cols}, _siphon_offset) SELECT {values}, s.o FROM {from} \
             ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE {stored}._siphon_offset < excluded._siphon_offset",
            cols = quoted(columns),
            key = quoted(key),
            updates = updates.join(", "),
        )
    }

    async fn upsert(
        &self,
        target: &Target,
        key: &[&str],
        names: &[&str],
        rows: &[(&Row, u64)],
    ) -> Result<()> {
        let staged = self.staged(
            target,
            names,
            rows.iter()
                .map(|(row, offset)| (names.iter().map(|c| row.get(c)).collect(), *offset))
                .collect(),
        );
        let from = self.dialect.staged_from(names.len());
        let values = self.casts(target, names, 0).join(", ");
        let sql = self.upsert_sql(target, key, names, &values, &from);
        self.dialect
            .execute_staged(&sql, &staged, "upserting")
            .await
    }

    /// Writes rows whole, taking the columns they leave unchanged from the stored rows their
    /// group names: a row whose stored row is gone is not written (never half of it).
    async fn upsert_from_stored(
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
        let staged = self.staged(
            target,
            &names,
            rows.iter()
                .map(|(row, from, offset)| {
                    let values = written
                        .iter()
                        .map(|c| row.get(c))
                        .chain(key.iter().map(|c| from.get(c)))
                        .collect();
                    (values, *offset)
                })
                .collect(),
        );
        let join: Vec<String> = key
            .iter()
            .zip(self.casts(target, key, written.len()))
            .map(|(c, value)| format!("b.{} = {value}", quote(c)))
            .collect();
        let values: Vec<String> = self
            .casts(target, written, 0)
            .into_iter()
            .chain(taken.iter().map(|c| format!("b.{}", quote(c))))
            .collect();
        let columns: Vec<&str> = written.iter().chain(taken.iter()).copied().collect();
        let from = format!(
            "{} JOIN {} AS b ON {}",
            self.dialect.staged_from(names.len()),
            target.name,
            join.join(" AND ")
        );
        let sql = self.upsert_sql(target, key, &columns, &values.join(", "), &from);
        self.dialect
            .execute_staged(&sql, &staged, "upserting rows with unchanged columns")
            .await
    }

    async fn delete(&self, target: &Target, key: &[&str], rows: &[(&Row, u64)]) -> Result<()> {
        let staged = self.staged(
            target,
            key,
            rows.iter()
                .map(|(row, offset)| (key.iter().map(|c| row.get(c)).collect(), *offset))
                .collect(),
        );
        let matches: Vec<String> = key
            .iter()
            .zip(self.casts(target, key, 0))
            .map(|(c, value)| format!("t.{} = {value}", quote(c)))
            .collect();
        let sql = format!(
            "DELETE FROM {} AS t USING {} WHERE {} AND t._siphon_offset < s.o",
            target.name,
            self.dialect.staged_from(key.len()),
            matches.join(" AND ")
        );
        self.dialect.execute_staged(&sql, &staged, "deleting").await
    }

    /// Every event as a row of its table's history.
    async fn write_history(&mut self, records: &[SinkRecord]) -> Result<()> {
        for list in by_table(records, |r| &r.event.source) {
            let rows: Vec<&Row> = list.iter().filter_map(|r| history_row(&r.event)).collect();
            let events: Vec<&Event> = list.iter().map(|r| &r.event).collect();
            let target = self.target(&events, &rows).await?;
            let groups =
                by_written_columns(list.iter().map(|r| (history_row(&r.event), *r)), |c| {
                    target.has(c)
                });
            for (names, group) in groups {
                self.append_history(&target, &names, &group).await?;
            }
        }
        Ok(())
    }

    /// Appends records whose rows write `names`, after the op, position and commit time.
    async fn append_history(
        &self,
        target: &Target,
        names: &[&str],
        records: &[&SinkRecord],
    ) -> Result<()> {
        let meta: Vec<[Value; 3]> = records
            .iter()
            .map(|r| {
                [
                    Value::Text(r.event.op.code().into()),
                    Value::Text(r.event.source.position.to_json().to_string()),
                    Value::TimestampTz(r.event.source.ts_ms.saturating_mul(1000)),
                ]
            })
            .collect();
        let columns: Vec<&str> = HISTORY_META.iter().chain(names).copied().collect();
        let staged = self.staged(
            target,
            &columns,
            records
                .iter()
                .zip(&meta)
                .map(|(r, meta)| {
                    let row = history_row(&r.event);
                    let values = meta
                        .iter()
                        .map(Some)
                        .chain(names.iter().map(|c| row.and_then(|row| row.get(c))))
                        .collect();
                    (values, r.offset)
                })
                .collect(),
        );
        let sql = format!(
            "INSERT INTO {} (_siphon_offset, {}) SELECT s.o, {} FROM {} ON CONFLICT (_siphon_offset) DO NOTHING",
            target.name,
            quoted(&columns),
            self.casts(target, &columns, 0).join(", "),
            self.dialect.staged_from(columns.len()),
        );
        self.dialect
            .execute_staged(&sql, &staged, "appending history")
            .await
    }

    /// Writes records inside the target transaction (begun if none is open). A refused record
    /// is located and returned as the error; the batch is undone: alone under a savepoint
    /// (the source transaction's earlier batches stay), else with the whole transaction.
    async fn write_in_transaction(&mut self, records: &[SinkRecord]) -> Result<()> {
        let earlier = self.in_transaction;
        if !self.in_transaction {
            self.dialect
                .batch("BEGIN TRANSACTION", "beginning a transaction")
                .await?;
            self.in_transaction = true;
        }
        if D::SAVEPOINTS {
            self.dialect
                .batch("SAVEPOINT siphon_batch", "beginning a batch")
                .await?;
        }
        let refused = match self.write(records).await {
            Ok(()) if D::SAVEPOINTS => {
                return self
                    .dialect
                    .batch("RELEASE SAVEPOINT siphon_batch", "ending a batch")
                    .await;
            }
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                self.disconnect();
                return Err(e);
            }
            Err(e) => e,
        };
        self.targets.clear();
        let located = if D::SAVEPOINTS {
            let undo = "ROLLBACK TO SAVEPOINT siphon_batch";
            self.dialect.batch(undo, "undoing a batch").await?;
            let located = self.locate_rejection(records, refused).await;
            self.dialect.batch(undo, "undoing a batch").await?;
            located
        } else {
            // The whole transaction goes. The failed statement may have ended it already
            // (DuckDB's ALTER runs between transactions), so a ROLLBACK that finds none open
            // is no error.
            self.in_transaction = false;
            let _ = self.dialect.batch("ROLLBACK", "rolling back").await;
            if earlier {
                return Err(Error::permanent(format!(
                    "{refused} (inside a source transaction larger than the batch size, so the record cannot be set aside)"
                )));
            }
            if self
                .dialect
                .batch("BEGIN TRANSACTION", "locating a rejected record")
                .await
                .is_err()
            {
                return Err(refused);
            }
            let located = self.locate_rejection(records, refused).await;
            let _ = self.dialect.batch("ROLLBACK", "rolling back").await;
            located
        };
        self.targets.clear();
        Err(located)
    }

    /// Applies records one at a time to find the one the target refuses; returns its
    /// rejection, or `original` if none fails alone. The caller undoes what they wrote.
    async fn locate_rejection(&mut self, records: &[SinkRecord], original: Error) -> Error {
        for (i, record) in records.iter().enumerate() {
            match self.write(&records[i..=i]).await {
                Ok(()) => {}
                Err(e) if e.is_transient() => return e,
                Err(e) => {
                    let reason = match e {
                        Error::Rejected { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    return record.rejected(reason);
                }
            }
        }
        original
    }

    async fn save_cursor(&self, next: u64) -> Result<()> {
        self.dialect
            .save_cursor(&self.id, next, self.log.as_ref())
            .await
    }
}

/// `"a", "b", …`.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|c| quote(c))
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait]
impl<D: Dialect> Sink for SqlSink<D> {
    async fn check(&mut self) -> Result<()> {
        self.connect().await?;
        self.dialect.check().await
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        if self.mode() == TableMode::Mirror
            && let Some(t) = tables.iter().find(|t| t.key_columns.is_empty())
        {
            return Err(Error::permanent(format!(
                "table {} has no primary key, so a mirror cannot address its rows; give it one, use mode = \"history\", or leave it out with `tables`",
                t.name
            )));
        }
        self.connect().await?;
        self.dialect.prepare().await?;
        self.log = Some(log.clone());
        let stored = self.dialect.read_cursor(&self.id).await?;
        self.cursor = stored.as_ref().map(|c| c.next_offset);
        Ok(stored)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        // Below the committed cursor everything is applied already (in the log's one order;
        // a consumer group's stretches skip nothing).
        let committed = if batch.ordered {
            self.cursor.unwrap_or(0)
        } else {
            0
        };
        if batch.end <= committed {
            return Ok(());
        }
        let records = &batch.records[batch.records.partition_point(|r| r.offset < committed)..];
        if !records.is_empty() {
            self.write_in_transaction(records).await?;
        }
        // The cursor moves with the commit of a source transaction, or at once past a stretch
        // of records this sink does not take.
        if batch.ends_transaction || !self.in_transaction {
            self.save_cursor(batch.end).await?;
            if self.in_transaction {
                self.in_transaction = false;
                if let Err(e) = self.dialect.batch("COMMIT", "committing").await {
                    self.disconnect();
                    return Err(e);
                }
            }
            self.cursor = Some(batch.end);
        }
        Ok(())
    }

    fn holds_transaction(&self) -> bool {
        self.in_transaction
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        if self.cursor.is_some_and(|c| c > next) {
            self.save_cursor(next).await?;
            self.cursor = Some(next);
        }
        Ok(())
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        self.connect().await?;
        self.dialect.prepare().await?;
        for table in tables {
            let target = self
                .dialect
                .target(table.name.namespace(), table.name.table());
            self.dialect
                .batch(
                    &format!("DROP TABLE IF EXISTS {}", target.table),
                    "dropping a target table",
                )
                .await?;
            tracing::info!(table = %target.table, "reset: dropped the target table");
        }
        self.dialect.delete_cursor(&self.id).await?;
        self.cursor = None;
        Ok(())
    }

    fn keeps_history(&self) -> bool {
        self.mode() == TableMode::History
    }
}
