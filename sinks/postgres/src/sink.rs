//! The PostgreSQL sink.

use std::collections::HashMap;

use async_trait::async_trait;
use siphon_core::event::{Event, Row, Value};
use siphon_core::log::LogId;
use siphon_core::schema::{SchemaId, TableSchema};
use siphon_core::sink::changes::{
    Change, FromStored, by_table, by_written_columns, from_stored, history_row, net_changes,
};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::table::{self, DroppedColumns, MetaTypes, TableMode, new_columns, quote};
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

use crate::config::{NAME_PLACEHOLDERS, PostgresSinkConfig};
use crate::encode::{column_type, pg_array, pg_text, pg_type};

/// PostgreSQL's names for the types of the columns siphon adds.
const META_TYPES: MetaTypes = MetaTypes {
    bigint: "bigint",
    text: "text",
    json: "jsonb",
    timestamptz: "timestamptz",
};

/// Where the cursors live in the target database.
const CURSORS: &str = "siphon.cursors";

/// Keeps mirror or history tables in a PostgreSQL database; see the crate documentation.
#[derive(Debug)]
pub struct PostgresSink {
    config: PostgresSinkConfig,
    pipeline: String,
    sink: String,
    schema: NameTemplate,
    table: NameTemplate,
    client: Option<Client>,
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
    /// `"schema"."table"`.
    name: String,
    /// Column name → type, as `format_type` prints it without its modifier: values are cast
    /// to `character varying`, not `character varying(5)`, since an explicit cast to the
    /// latter would cut a longer value where the insert must refuse it (`bit` and
    /// `character` are cast to `bit varying` and `bpchar`: bare, they are `bit(1)` and
    /// `character(1)`).
    columns: HashMap<String, String>,
    /// Column name → type with its modifier (`character varying(5)`), to compare with the
    /// source's.
    declared: HashMap<String, String>,
    /// The source table's schema version the table was last brought in line with.
    schema: Option<SchemaId>,
    /// siphon made the table (its comment says so), so its column types follow the source
    /// table's; a table made by hand keeps its own and only gets the columns it lacks.
    owned: bool,
}

/// The comment of the tables siphon makes: they follow their source tables' column types.
const OWNED_COMMENT: &str = "made by siphon: its columns follow the source table";

impl PostgresSink {
    /// A sink for sink `sink` of pipeline `pipeline` (they name its cursor row).
    pub fn new(config: PostgresSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        Ok(PostgresSink {
            schema: NameTemplate::parse(&config.schema, NAME_PLACEHOLDERS)
                .map_err(Error::Config)?,
            table: NameTemplate::parse(&config.table, NAME_PLACEHOLDERS).map_err(Error::Config)?,
            config,
            pipeline: pipeline.to_owned(),
            sink: sink.to_owned(),
            client: None,
            targets: HashMap::new(),
            cursor: None,
            log: None,
            in_transaction: false,
        })
    }

    /// A new connection (dropping one with an open transaction rolls it back).
    async fn connect(&mut self) -> Result<()> {
        self.client = None;
        self.in_transaction = false;
        self.targets.clear();
        let mut config: tokio_postgres::Config = self
            .config
            .url
            .expose()
            .parse()
            .map_err(|e| Error::Config(format!("url {}: {e}", &self.config.url)))?;
        if let Some(password) = &self.config.password {
            config.password(password.expose());
        }
        config
            .application_name("siphon")
            // The IF NOT EXISTS of preparing the target would otherwise log notices.
            .options("-c client_min_messages=warning")
            .connect_timeout(std::time::Duration::from_secs(10));
        let tls = siphon_core::tls::client_config(
            self.config.tls_mode(),
            self.config.tls_ca_file.as_deref(),
        )?;
        let client = match tls {
            None => {
                let (client, connection) = config
                    .connect(NoTls)
                    .await
                    .map_err(|e| self.error(&e, "connecting"))?;
                tokio::spawn(log_end(connection));
                client
            }
            Some(tls) => {
                let (client, connection) = config
                    .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
                    .await
                    .map_err(|e| self.error(&e, "connecting"))?;
                tokio::spawn(log_end(connection));
                client
            }
        };
        self.client = Some(client);
        Ok(())
    }

    fn client(&self) -> Result<&Client> {
        self.client
            .as_ref()
            .ok_or_else(|| Error::transient("the postgres sink is not connected"))
    }

    /// Classifies an error: connection trouble, conflicts and a busy server are transient.
    fn error(&self, e: &tokio_postgres::Error, what: &str) -> Error {
        let message = format!("postgres {} {what}: {}", &self.config.url, db_message(e));
        let transient = e.is_closed()
            || e.code().is_none_or(|c| {
                let c = c.code();
                ["08", "40", "53", "57P", "58"]
                    .iter()
                    .any(|p| c.starts_with(p))
                    // Two sinks creating the same schema at once: the loser retries.
                    || c == "23505" && (what.starts_with("preparing") || what.starts_with("creating"))
            });
        if transient {
            Error::transient(message)
        } else {
            Error::permanent(message)
        }
    }

    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)], what: &str) -> Result<u64> {
        self.client()?
            .execute(sql, params)
            .await
            .map_err(|e| self.error(&e, what))
    }

    async fn batch(&self, sql: &str, what: &str) -> Result<()> {
        self.client()?
            .batch_execute(sql)
            .await
            .map_err(|e| self.error(&e, what))
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

    /// Adds the columns of `rows` that the table lacks, typed by their values.
    async fn add_value_columns(&mut self, target: &mut Target, rows: &[&Row]) -> Result<()> {
        let missing = new_columns(None, rows, column_type, |c| target.columns.contains_key(c));
        if missing.is_empty() {
            return Ok(());
        }
        let adds: Vec<String> = missing
            .iter()
            .map(|(c, ty)| format!("ADD COLUMN IF NOT EXISTS {} {ty}", quote(c)))
            .collect();
        self.batch(
            &format!("ALTER TABLE {} {}", target.name, adds.join(", ")),
            "adding columns",
        )
        .await?;
        tracing::info!(table = %target.name, columns = ?missing, "added columns to the target table");
        self.reload(target).await
    }

    /// Brings the table in line with a version of its source table: adds the columns it
    /// lacks and, in a table siphon made, changes the type of those whose type differs and
    /// drops (or keeps, per `dropped_columns`) those the source no longer has.
    async fn follow_schema(&mut self, target: &mut Target, schema: &TableSchema) -> Result<()> {
        let mut changes = Vec::new();
        for column in &schema.columns {
            let ty = pg_type(column);
            let name = quote(&column.name);
            match target.declared.get(&*column.name) {
                None => changes.push(format!("ADD COLUMN {name} {ty}")),
                Some(have) if *have != ty && target.owned => {
                    changes.push(format!(
                        "ALTER COLUMN {name} TYPE {ty} USING {name}::text::{ty}"
                    ));
                }
                Some(_) => {}
            }
        }
        let dropped: Vec<&String> = target
            .declared
            .keys()
            .filter(|c| !c.starts_with("_siphon_") && schema.position(c).is_none())
            .collect();
        if !dropped.is_empty() && target.owned {
            match self.config.dropped_columns {
                DroppedColumns::Drop => {
                    changes.extend(dropped.iter().map(|c| format!("DROP COLUMN {}", quote(c))));
                }
                DroppedColumns::Keep => {
                    tracing::info!(table = %target.name, columns = ?dropped, "the source table has no such columns any more: kept (dropped_columns = \"keep\")");
                }
            }
        }
        if !changes.is_empty() {
            self.batch(
                &format!("ALTER TABLE {} {}", target.name, changes.join(", ")),
                "changing the target table as its source table changed",
            )
            .await?;
            tracing::info!(table = %target.name, changes = ?changes, "changed the target table as its source table changed");
            self.reload(target).await?;
        }
        target.schema = Some(schema.id);
        Ok(())
    }

    /// Reads the table's columns from the catalog again.
    async fn reload(&self, target: &mut Target) -> Result<()> {
        (target.columns, target.declared, target.owned) =
            self.catalog_columns(&target.name).await?;
        Ok(())
    }

    /// Reads a target table from the catalog, creating it if it does not exist.
    async fn load_target(&mut self, event: &Event, rows: &[&Row]) -> Result<Target> {
        let source = &event.source;
        let names = [("schema", source.namespace()), ("table", &*source.table)];
        let (schema, table) = (self.schema.render(&names), self.table.render(&names));
        let name = format!("{}.{}", quote(&schema), quote(&table));
        let (columns, declared, owned) = self.catalog_columns(&name).await?;
        let mut target = Target {
            columns,
            declared,
            name,
            schema: None,
            owned,
        };
        if target.columns.is_empty() {
            let key = event.key.as_ref();
            let (leading, key_names) = self.config.mode.layout(META_TYPES, key);
            let defs = match &event.schema {
                Some(source) => {
                    let columns: Vec<(&str, String)> = source
                        .columns
                        .iter()
                        .map(|c| (&*c.name, pg_type(c)))
                        .collect();
                    let key_names: Vec<&str> = match self.config.mode {
                        TableMode::Mirror => source
                            .key
                            .iter()
                            .map(|&i| &*source.columns[i].name)
                            .collect(),
                        TableMode::History => key_names,
                    };
                    target.schema = Some(source.id);
                    table::definition(&leading, &columns, &key_names)
                }
                None => {
                    let columns = new_columns(key, rows, column_type, |_| false);
                    table::definition(&leading, &columns, &key_names)
                }
            };
            self.batch(
                &format!(
                    "CREATE SCHEMA IF NOT EXISTS {}; CREATE TABLE IF NOT EXISTS {} ({}); COMMENT ON TABLE {} IS '{OWNED_COMMENT}'",
                    quote(&schema),
                    target.name,
                    defs,
                    target.name,
                ),
                "creating the target table",
            )
            .await?;
            tracing::info!(table = %target.name, mode = ?self.config.mode, "created the target table");
            self.reload(&mut target).await?;
        } else if !target.columns.contains_key("_siphon_offset") {
            return Err(Error::permanent(format!(
                "the target table {} exists but was not made by siphon (it has no _siphon_offset column); drop it, or map the source table to another name with `table`",
                target.name
            )));
        }
        Ok(target)
    }

    /// A table's columns: the types values are cast to, and the declared types; and whether
    /// siphon made it.
    async fn catalog_columns(
        &self,
        name: &str,
    ) -> Result<(HashMap<String, String>, HashMap<String, String>, bool)> {
        let rows = self
            .client()?
            .query(
                "SELECT a.attname::text, \
                 CASE a.atttypid WHEN 1560 THEN 'bit varying' WHEN 1561 THEN 'bit varying[]' \
                 WHEN 1042 THEN 'bpchar' WHEN 1014 THEN 'bpchar[]' \
                 ELSE format_type(a.atttypid, NULL) END, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_attribute a \
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
                &[&name],
            )
            .await
            .map_err(|e| self.error(&e, "reading the catalog"))?;
        let comment: Option<String> = self
            .client()?
            .query_one(
                "SELECT obj_description(to_regclass($1), 'pg_class')",
                &[&name],
            )
            .await
            .map_err(|e| self.error(&e, "reading the catalog"))?
            .get(0);
        Ok((
            rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
            rows.iter().map(|r| (r.get(0), r.get(2))).collect(),
            comment.as_deref() == Some(OWNED_COMMENT),
        ))
    }

    /// Applies records (inside the open transaction).
    async fn write(&mut self, records: &[SinkRecord]) -> Result<()> {
        match self.config.mode {
            TableMode::Mirror => self.write_mirror(records).await,
            TableMode::History => self.write_history(records).await,
        }
    }

    async fn write_mirror(&mut self, records: &[SinkRecord]) -> Result<()> {
        let changes = net_changes(records);
        let mut pending: Vec<Change<'_>> = Vec::new();
        for change in changes {
            if let Change::Truncate { event, .. } = &change {
                self.flush_mirror(std::mem::take(&mut pending)).await?;
                let target = self.target(&[*event], &[]).await?;
                self.batch(&format!("TRUNCATE {}", target.name), "truncating")
                    .await?;
            } else {
                pending.push(change);
            }
        }
        self.flush_mirror(pending).await
    }

    /// Upserts and deletes, a few statements per table.
    async fn flush_mirror(&mut self, changes: Vec<Change<'_>>) -> Result<()> {
        for list in by_table(&changes, |c| &c.event().source) {
            let rows: Vec<&Row> = list
                .iter()
                .filter_map(|c| match c {
                    Change::Upsert { row, .. } => Some(&**row),
                    _ => None,
                })
                .collect();
            let event = list[0].event();
            if event.key.is_none() {
                return Err(list[0].rejected(
                    "the table has no primary key, so a mirror cannot address its rows",
                ));
            }
            let target = self
                .target(&list.iter().map(|c| c.event()).collect::<Vec<_>>(), &rows)
                .await?;
            let key: Vec<&str> = event
                .key
                .as_ref()
                .map(|k| k.iter().map(|(c, _)| c).collect())
                .unwrap_or_default();
            // Rows that leave columns unchanged (TOAST) take them from their stored row first:
            // the old key of a row whose key changed is deleted below.
            let has = |c: &str| target.columns.contains_key(c);
            for group in from_stored(list.iter().copied(), has) {
                self.upsert_from_stored(&target, &key, &group).await?;
            }
            let deletes: Vec<&Change<'_>> = list
                .iter()
                .copied()
                .filter(|c| matches!(c, Change::Delete { .. }))
                .collect();
            if !deletes.is_empty() {
                self.delete(&target, &deletes).await?;
            }
            let whole = list.iter().filter_map(|c| match c {
                Change::Upsert { row, offset, .. } if c.unchanged_from().is_none() => {
                    Some((Some(&**row), (&**row, *offset)))
                }
                _ => None,
            });
            for (names, rows) in by_written_columns(whole, has) {
                self.upsert(&target, &key, &names, &rows).await?;
            }
        }
        Ok(())
    }

    async fn upsert(
        &self,
        target: &Target,
        key: &[&str],
        names: &[&str],
        rows: &[(&Row, u64)],
    ) -> Result<()> {
        let columns = column_texts(
            names,
            &rows.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            target,
        );
        let offsets: Vec<i64> = rows.iter().map(|(_, o)| *o as i64).collect();
        let updates: Vec<String> = names
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{0} = EXCLUDED.{0}", quote(c)))
            .chain(std::iter::once(
                "_siphon_offset = EXCLUDED._siphon_offset".to_owned(),
            ))
            .collect();
        let n = names.len();
        let sql = format!(
            "INSERT INTO {table} AS t ({cols}, _siphon_offset) SELECT {casts}, s.o FROM unnest({arrays}, ${last}::bigint[]) AS s({aliases}, o) \
             ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE t._siphon_offset < EXCLUDED._siphon_offset",
            table = target.name,
            cols = names
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", "),
            casts = casts(names, target),
            arrays = text_arrays(1, n),
            last = n + 1,
            aliases = alias_list(n),
            key = key.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
            updates = updates.join(", "),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> =
            columns.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        params.push(&offsets);
        self.execute(&sql, &params, "upserting").await.map(drop)
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
        let mut columns = column_texts(
            written,
            &rows.iter().map(|(r, ..)| *r).collect::<Vec<_>>(),
            target,
        );
        columns.extend(column_texts(
            key,
            &rows.iter().map(|(_, from, _)| *from).collect::<Vec<_>>(),
            target,
        ));
        let offsets: Vec<i64> = rows.iter().map(|(.., o)| *o as i64).collect();
        let (n, k) = (written.len(), key.len());
        let quoted = |names: &[&str]| names.iter().map(|c| quote(c)).collect::<Vec<_>>();
        let updates: Vec<String> = written
            .iter()
            .chain(taken.iter())
            .filter(|c| !key.contains(c))
            .map(|c| format!("{0} = EXCLUDED.{0}", quote(c)))
            .chain(std::iter::once(
                "_siphon_offset = EXCLUDED._siphon_offset".to_owned(),
            ))
            .collect();
        let sql = format!(
            "INSERT INTO {table} AS t ({cols}, _siphon_offset) \
             SELECT {casts}{sep}{taken_values}, s.o \
             FROM unnest({arrays}, ${last}::bigint[]) AS s({aliases}, {base_aliases}, o) \
             JOIN {table} AS b ON {join} \
             ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE t._siphon_offset < EXCLUDED._siphon_offset",
            table = target.name,
            cols = quoted(written)
                .into_iter()
                .chain(quoted(taken))
                .collect::<Vec<_>>()
                .join(", "),
            casts = casts(written, target),
            sep = if taken.is_empty() { "" } else { ", " },
            taken_values = taken
                .iter()
                .map(|c| format!("b.{}", quote(c)))
                .collect::<Vec<_>>()
                .join(", "),
            arrays = text_arrays(1, n + k),
            last = n + k + 1,
            aliases = alias_list(n),
            base_aliases = (1..=k)
                .map(|i| format!("b{i}"))
                .collect::<Vec<_>>()
                .join(", "),
            join = key
                .iter()
                .enumerate()
                .map(|(i, c)| format!(
                    "b.{} = s.b{}::{}",
                    quote(c),
                    i + 1,
                    target.columns.get(*c).map_or("text", String::as_str)
                ))
                .collect::<Vec<_>>()
                .join(" AND "),
            key = quoted(key).join(", "),
            updates = updates.join(", "),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> =
            columns.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        params.push(&offsets);
        self.execute(&sql, &params, "upserting rows with unchanged columns")
            .await
            .map(drop)
    }

    async fn delete(&self, target: &Target, deletes: &[&Change<'_>]) -> Result<()> {
        let key_rows: Vec<(&Row, u64)> = deletes
            .iter()
            .filter_map(|c| c.event().key.as_ref().map(|k| (k, c.offset())))
            .collect();
        let names: Vec<&str> = key_rows[0].0.iter().map(|(c, _)| c).collect();
        let columns = column_texts(
            &names,
            &key_rows.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            target,
        );
        let offsets: Vec<i64> = key_rows.iter().map(|(_, o)| *o as i64).collect();
        let n = names.len();
        let sql = format!(
            "DELETE FROM {table} AS t USING unnest({arrays}, ${last}::bigint[]) AS s({aliases}, o) \
             WHERE {matches} AND t._siphon_offset < s.o",
            table = target.name,
            arrays = text_arrays(1, n),
            last = n + 1,
            aliases = alias_list(n),
            matches = names
                .iter()
                .enumerate()
                .map(|(i, c)| format!(
                    "t.{} = s.c{}::{}",
                    quote(c),
                    i + 1,
                    target.columns.get(*c).map_or("text", String::as_str)
                ))
                .collect::<Vec<_>>()
                .join(" AND "),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> =
            columns.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        params.push(&offsets);
        self.execute(&sql, &params, "deleting").await.map(drop)
    }

    /// Every event as a row of its table's history.
    async fn write_history(&mut self, records: &[SinkRecord]) -> Result<()> {
        for list in by_table(records, |r| &r.event.source) {
            let rows: Vec<&Row> = list.iter().filter_map(|r| history_row(&r.event)).collect();
            let target = self
                .target(&list.iter().map(|r| &r.event).collect::<Vec<_>>(), &rows)
                .await?;
            let groups =
                by_written_columns(list.iter().map(|r| (history_row(&r.event), *r)), |c| {
                    target.columns.contains_key(c)
                });
            for (names, group) in groups {
                self.append_history(&target, &names, &group).await?;
            }
        }
        Ok(())
    }

    async fn append_history(
        &self,
        target: &Target,
        names: &[&str],
        records: &[&SinkRecord],
    ) -> Result<()> {
        let empty = Row(Vec::new());
        let rows: Vec<&Row> = records
            .iter()
            .map(|r| history_row(&r.event).unwrap_or(&empty))
            .collect();
        let columns = column_texts(names, &rows, target);
        let offsets: Vec<i64> = records.iter().map(|r| r.offset as i64).collect();
        let ops: Vec<&str> = records.iter().map(|r| r.event.op.code()).collect();
        let positions: Vec<String> = records
            .iter()
            .map(|r| r.event.source.position.to_json().to_string())
            .collect();
        let commit_ms: Vec<i64> = records.iter().map(|r| r.event.source.ts_ms).collect();
        let n = names.len();
        let sep = if n == 0 { "" } else { ", " };
        let sql = format!(
            "INSERT INTO {table} (_siphon_offset, _siphon_op, _siphon_position, _siphon_commit_ts{sep}{cols}) \
             SELECT s.o, s.op, s.pos::jsonb, to_timestamp(s.ts / 1000.0){sep}{casts} \
             FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]{sep}{arrays}) AS s(o, op, pos, ts{sep}{aliases}) \
             ON CONFLICT (_siphon_offset) DO NOTHING",
            table = target.name,
            cols = names
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", "),
            casts = casts(names, target),
            arrays = text_arrays(5, n),
            aliases = alias_list(n),
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&offsets, &ops, &positions, &commit_ms];
        params.extend(columns.iter().map(|v| v as &(dyn ToSql + Sync)));
        self.execute(&sql, &params, "appending history")
            .await
            .map(drop)
    }

    /// Applies records one at a time, each in its own savepoint, to find the one the target
    /// refuses; returns its rejection, or `original` if none fails alone.
    async fn locate_rejection(&mut self, records: &[SinkRecord], original: Error) -> Error {
        for (i, record) in records.iter().enumerate() {
            if let Err(e) = self
                .batch("SAVEPOINT siphon_record", "locating a rejected record")
                .await
            {
                return e;
            }
            match self.write(&records[i..=i]).await {
                Ok(()) => {}
                Err(e) if e.is_transient() => return e,
                Err(e) => {
                    self.targets.clear();
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

    /// Writes records inside the target transaction (begun if none is open), each batch under
    /// a savepoint: a refused record undoes its batch only, and is located.
    async fn write_in_transaction(&mut self, records: &[SinkRecord]) -> Result<()> {
        if !self.in_transaction {
            self.batch("BEGIN", "beginning a transaction").await?;
            self.in_transaction = true;
        }
        self.batch("SAVEPOINT siphon_batch", "beginning a batch")
            .await?;
        if let Err(e) = self.write(records).await {
            if e.is_transient() {
                self.client = None;
                self.in_transaction = false;
                return Err(e);
            }
            // Undo the batch (earlier batches of the source transaction stay), find the record.
            self.batch("ROLLBACK TO SAVEPOINT siphon_batch", "undoing a batch")
                .await?;
            self.targets.clear();
            let e = self.locate_rejection(records, e).await;
            self.batch("ROLLBACK TO SAVEPOINT siphon_batch", "undoing a batch")
                .await?;
            self.targets.clear();
            return Err(e);
        }
        self.batch("RELEASE SAVEPOINT siphon_batch", "ending a batch")
            .await
    }

    async fn save_cursor(&self, next: u64) -> Result<()> {
        let log = self.log.as_ref().map(LogId::as_str);
        self.execute(
            &format!(
                "INSERT INTO {CURSORS} (pipeline, sink, next_offset, log_id) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (pipeline, sink) DO UPDATE SET next_offset = EXCLUDED.next_offset, \
                 log_id = EXCLUDED.log_id, updated_at = now()"
            ),
            &[&self.pipeline, &self.sink, &(next as i64), &log],
            "saving the cursor",
        )
        .await
        .map(drop)
    }

    async fn prepare_metadata(&self) -> Result<()> {
        self.batch(
            &format!(
                "CREATE SCHEMA IF NOT EXISTS siphon; CREATE TABLE IF NOT EXISTS {CURSORS} (\
                 pipeline text NOT NULL, sink text NOT NULL, next_offset bigint NOT NULL, \
                 log_id text, updated_at timestamptz NOT NULL DEFAULT now(), \
                 PRIMARY KEY (pipeline, sink)); \
                 ALTER TABLE {CURSORS} ADD COLUMN IF NOT EXISTS log_id text"
            ),
            "preparing the target",
        )
        .await
    }
}

/// `$from::text[], …`: `n` text-array parameters from `$from` on.
fn text_arrays(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}::text[]"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `c1, …, cn`: the names `unnest` gives the arrays' columns.
fn alias_list(n: usize) -> String {
    (1..=n)
        .map(|i| format!("c{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Per column of `names`, its text in each row (`NULL` where a row lacks the column): one
/// text array per statement parameter. Arrays go to an array column in PostgreSQL's array
/// syntax, to any other (a `jsonb` column made from values) as JSON.
fn column_texts(names: &[&str], rows: &[&Row], target: &Target) -> Vec<Vec<Option<String>>> {
    names
        .iter()
        .map(|c| {
            let array_column = target.columns.get(*c).is_some_and(|t| t.ends_with("[]"));
            rows.iter()
                .map(|r| match r.get(c) {
                    Some(Value::Array(items)) if array_column => Some(pg_array(items)),
                    value => value.and_then(pg_text).map(|t| t.into_owned()),
                })
                .collect()
        })
        .collect()
}

/// `s.c1::type1, s.c2::type2, …` for the target's column types.
fn casts(names: &[&str], target: &Target) -> String {
    names
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "s.c{}::{}",
                i + 1,
                target.columns.get(*c).map_or("text", String::as_str)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Drives a connection until it ends.
async fn log_end(connection: impl std::future::Future<Output = Result<(), tokio_postgres::Error>>) {
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "postgres sink connection ended");
    }
}

/// The server's message with its detail, or the client's.
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_owned(),
        },
        // The client's error, with its causes (a TLS handshake says why it failed).
        None => {
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                message.push_str(&format!(": {c}"));
                cause = c.source();
            }
            message
        }
    }
}

#[async_trait]
impl Sink for PostgresSink {
    async fn check(&mut self) -> Result<()> {
        self.connect().await?;
        let row = self
            .client()?
            .query_one(
                "SELECT has_database_privilege(current_database(), 'CREATE')",
                &[],
            )
            .await
            .map_err(|e| self.error(&e, "checking privileges"))?;
        if row.get::<_, bool>(0) {
            Ok(())
        } else {
            Err(Error::permanent(format!(
                "postgres {}: the user may not create schemas in this database; grant CREATE on it",
                &self.config.url
            )))
        }
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
        self.connect().await?;
        self.prepare_metadata().await?;
        self.log = Some(log.clone());
        let row = self
            .client()?
            .query_opt(
                &format!(
                    "SELECT next_offset, log_id FROM {CURSORS} WHERE pipeline = $1 AND sink = $2"
                ),
                &[&self.pipeline, &self.sink],
            )
            .await
            .map_err(|e| self.error(&e, "reading the cursor"))?;
        let stored = row.map(|r| StoreCursor {
            next_offset: r.get::<_, i64>(0) as u64,
            log: r.get::<_, Option<&str>>(1).map(LogId::from_stored),
        });
        self.cursor = stored.as_ref().map(|c| c.next_offset);
        Ok(stored)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        // Below the committed cursor everything is applied already.
        let committed = self.cursor.unwrap_or(0);
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
                if let Err(e) = self.batch("COMMIT", "committing").await {
                    self.client = None;
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
        self.prepare_metadata().await?;
        for table in tables {
            let (schema, name) = (table.name.namespace(), table.name.table());
            let names = [("schema", schema), ("table", name)];
            let target = format!(
                "{}.{}",
                quote(&self.schema.render(&names)),
                quote(&self.table.render(&names))
            );
            self.batch(
                &format!("DROP TABLE IF EXISTS {target}"),
                "dropping a target table",
            )
            .await?;
            tracing::info!(table = %target, "reset: dropped the target table");
        }
        self.execute(
            &format!("DELETE FROM {CURSORS} WHERE pipeline = $1 AND sink = $2"),
            &[&self.pipeline, &self.sink],
            "deleting the cursor",
        )
        .await?;
        self.cursor = None;
        Ok(())
    }

    fn keeps_history(&self) -> bool {
        self.config.mode == TableMode::History
    }
}
