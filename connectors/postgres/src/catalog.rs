//! What the source asks the catalog: tables, keys, column types, settings, the slot.

use std::collections::HashMap;

use siphon_core::{Error, Result};
use tokio_postgres::Client;

use crate::values::PgType;

/// A captured table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The table's OID.
    pub oid: u32,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// Primary-key columns, in key order; empty without a primary key.
    pub key: Vec<String>,
    /// Columns and their type OIDs, in order.
    pub columns: Vec<(String, u32)>,
    /// REPLICA IDENTITY: `d` default, `n` nothing, `f` full, `i` index.
    pub replica_identity: char,
    /// The planner's row estimate, for snapshot progress.
    pub estimated_rows: i64,
    /// Pages of the table's heap, to split a big table's snapshot between readers.
    pub pages: i64,
}

impl Table {
    /// `schema.table`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// `"schema"."table"`, quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

/// Quotes an identifier for SQL.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Quotes a string literal for SQL.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Maps a driver error: connection trouble is transient, the rest permanent.
pub fn pg_error(context: &str, e: &tokio_postgres::Error) -> Error {
    let transient = match e.code() {
        None => true,
        Some(code) => {
            let c = code.code();
            c.starts_with("08")
                || c.starts_with("57P")
                || c.starts_with("53")
                || c == "40001"
                || c == "40P01"
        }
    };
    let message = match e.as_db_error() {
        Some(db) => format!("{context}: {} ({})", db.message(), db.code().code()),
        None => format!("{context}: {e}"),
    };
    if transient {
        Error::transient(message)
    } else {
        Error::permanent(message)
    }
}

/// Checks that the server and the user can do logical replication; the error spells out the fix.
pub async fn preflight(client: &Client) -> Result<()> {
    let row = client
        .query_one(
            "select current_setting('wal_level'), r.rolreplication or r.rolsuper, current_user::text \
             from pg_roles r where r.rolname = current_user",
            &[],
        )
        .await
        .map_err(|e| pg_error("checking the server's settings", &e))?;
    let wal_level: String = row.get(0);
    let can_replicate: bool = row.get(1);
    let user: String = row.get(2);
    if wal_level != "logical" {
        return Err(Error::permanent(format!(
            "PostgreSQL has wal_level = {wal_level}; change data capture needs logical. Run \
             `ALTER SYSTEM SET wal_level = logical;` and restart PostgreSQL (scripts/services does both)"
        )));
    }
    if !can_replicate {
        return Err(Error::permanent(format!(
            "the user {user} may not use replication; run `ALTER ROLE {} REPLICATION;`",
            quote_ident(&user)
        )));
    }
    Ok(())
}

/// Resolves the configured patterns ("schema.table", "schema.*") into tables.
pub async fn tables(client: &Client, patterns: &[String]) -> Result<Vec<Table>> {
    let mut out: Vec<Table> = Vec::new();
    for pattern in patterns {
        let (schema, name) = pattern.split_once('.').expect("validated");
        let like = if name == "*" {
            "%".to_owned()
        } else {
            name.replace('%', "\\%").replace('_', "\\_")
        };
        let rows = client
            .query(
                "select c.oid, n.nspname::text, c.relname::text, c.relreplident::text, c.reltuples::int8, \
                 (pg_relation_size(c.oid) / current_setting('block_size')::int)::int8 \
                 from pg_class c join pg_namespace n on n.oid = c.relnamespace \
                 where n.nspname = $1 and c.relname like $2 and c.relkind in ('r', 'p') order by c.relname",
                &[&schema, &like],
            )
            .await
            .map_err(|e| pg_error("listing tables", &e))?;
        if rows.is_empty() {
            return Err(Error::permanent(format!(
                "tables: {pattern:?} matches no table in the database"
            )));
        }
        for row in rows {
            let oid: u32 = row.get(0);
            if out.iter().any(|t| t.oid == oid) {
                continue;
            }
            let key = primary_key(client, oid).await?;
            let columns = client
                .query(
                    "select attname::text, atttypid from pg_attribute \
                     where attrelid = $1 and attnum > 0 and not attisdropped order by attnum",
                    &[&oid],
                )
                .await
                .map_err(|e| pg_error("reading columns", &e))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let identity: String = row.get(3);
            out.push(Table {
                oid,
                schema: row.get(1),
                name: row.get(2),
                key,
                columns,
                replica_identity: identity.chars().next().unwrap_or('d'),
                estimated_rows: row.get::<_, i64>(4).max(0),
                pages: row.get(5),
            });
        }
    }
    Ok(out)
}

/// The primary-key columns of table `oid`, in key order; empty without a primary key.
pub async fn primary_key(client: &Client, oid: u32) -> Result<Vec<String>> {
    Ok(client
        .query(
            "select a.attname::text from pg_index i join pg_attribute a \
             on a.attrelid = i.indrelid and a.attnum = any(i.indkey) \
             where i.indrelid = $1 and i.indisprimary order by array_position(i.indkey, a.attnum)",
            &[&oid],
        )
        .await
        .map_err(|e| pg_error("reading a primary key", &e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Makes sure the publication exists and covers every table.
pub async fn ensure_publication(
    client: &Client,
    publication: &str,
    tables: &[Table],
) -> Result<()> {
    let exists = client
        .query_opt(
            "select 1 from pg_publication where pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| pg_error("reading publications", &e))?
        .is_some();
    let list = |ts: &[&Table]| ts.iter().map(|t| t.quoted()).collect::<Vec<_>>().join(", ");
    if !exists {
        let all: Vec<&Table> = tables.iter().collect();
        let sql = format!(
            "create publication {} for table {}",
            quote_ident(publication),
            list(&all)
        );
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| pg_error("creating the publication", &e))?;
        tracing::info!(publication, tables = all.len(), "created the publication");
        return Ok(());
    }
    let covered: Vec<(String, String)> = client
        .query("select schemaname::text, tablename::text from pg_publication_tables where pubname = $1", &[&publication])
        .await
        .map_err(|e| pg_error("reading the publication", &e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let missing: Vec<&Table> = tables
        .iter()
        .filter(|t| !covered.iter().any(|(s, n)| *s == t.schema && *n == t.name))
        .collect();
    if !missing.is_empty() {
        let sql = format!(
            "alter publication {} add table {}",
            quote_ident(publication),
            list(&missing)
        );
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| pg_error("adding tables to the publication", &e))?;
        tracing::info!(
            publication,
            added = missing.len(),
            "added tables to the publication"
        );
    }
    Ok(())
}

/// The state of a replication slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// `wal_status`: reserved, extended, unreserved or lost.
    pub wal_status: Option<String>,
    /// Where the next start of replication begins.
    pub confirmed_flush: Option<u64>,
}

/// The slot named `slot`, if it exists.
pub async fn slot(client: &Client, slot: &str) -> Result<Option<SlotInfo>> {
    let row = client
        .query_opt(
            "select wal_status::text, (confirmed_flush_lsn - '0/0')::int8, plugin::text, database::text \
             from pg_replication_slots where slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| pg_error("reading replication slots", &e))?;
    let Some(row) = row else { return Ok(None) };
    let plugin: Option<String> = row.get(2);
    if plugin.as_deref() != Some("pgoutput") {
        return Err(Error::permanent(format!(
            "the replication slot {slot} exists but is not a logical slot with pgoutput ({plugin:?}); pick another slot name"
        )));
    }
    Ok(Some(SlotInfo {
        wal_status: row.get(0),
        confirmed_flush: row.get::<_, Option<i64>>(1).map(|v| v as u64),
    }))
}

/// Resolves column types, asking the catalog for the ones that are not built in.
#[derive(Debug, Default)]
pub struct TypeCache {
    known: HashMap<u32, PgType>,
}

impl TypeCache {
    /// How to decode type `oid`.
    pub async fn resolve(&mut self, client: &Client, oid: u32) -> Result<PgType> {
        if let Some(t) = PgType::builtin(oid).or_else(|| self.known.get(&oid).cloned()) {
            return Ok(t);
        }
        let row = client
            .query_opt("select typtype::text, typname::text, typelem, typbasetype, typcategory::text from pg_type where oid = $1", &[&oid])
            .await
            .map_err(|e| pg_error("reading a type", &e))?;
        let resolved = match row {
            None => PgType::Other(format!("oid {oid}")),
            Some(row) => {
                let (kind, name, elem, base, category): (String, String, u32, u32, String) =
                    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                match kind.as_str() {
                    "e" => PgType::Enum,
                    "d" => Box::pin(self.resolve(client, base)).await?,
                    _ if category == "A" && elem != 0 => {
                        PgType::Array(Box::new(Box::pin(self.resolve(client, elem)).await?))
                    }
                    _ => {
                        tracing::warn!(type_name = %name, oid, "values of this type travel as the server's text");
                        PgType::Other(name)
                    }
                }
            }
        };
        self.known.insert(oid, resolved.clone());
        Ok(resolved)
    }
}
