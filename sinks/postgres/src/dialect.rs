//! PostgreSQL as a dialect of the SQL mirror engine.

use async_trait::async_trait;
use siphon_core::Value;
use siphon_core::log::LogId;
use siphon_core::schema::Column;
use siphon_core::sink::StoreCursor;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::{Error, Result};
use siphon_sink_sql::table::{NAME_PLACEHOLDERS, quote};
use siphon_sink_sql::{Catalog, Dialect, SinkId, Staged, TableSettings, TargetName};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

use crate::config::PostgresSinkConfig;
use crate::encode::{column_type, pg_array, pg_text, pg_type};

/// Where the cursors live in the target database.
const CURSORS: &str = "siphon.cursors";

/// The comment of the tables siphon makes: they follow their source tables' column types.
const OWNED_COMMENT: &str = "made by siphon: its columns follow the source table";

/// PostgreSQL's side of a [`crate::PostgresSink`]: its connection, types and statements.
#[derive(Debug)]
pub struct Postgres {
    config: PostgresSinkConfig,
    schema: NameTemplate,
    table: NameTemplate,
    client: Option<Client>,
}

impl Postgres {
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
}

#[async_trait]
impl Dialect for Postgres {
    const KIND: &'static str = "postgres";
    type Config = PostgresSinkConfig;
    const SAVEPOINTS: bool = true;

    fn validate(config: &PostgresSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }

    fn new(config: PostgresSinkConfig) -> Result<Self> {
        Ok(Postgres {
            schema: NameTemplate::parse(&config.schema, NAME_PLACEHOLDERS)
                .map_err(Error::Config)?,
            table: NameTemplate::parse(&config.table, NAME_PLACEHOLDERS).map_err(Error::Config)?,
            config,
            client: None,
        })
    }

    fn settings(&self) -> TableSettings {
        TableSettings {
            mode: self.config.mode,
            dropped_columns: self.config.dropped_columns,
        }
    }

    async fn connect(&mut self) -> Result<()> {
        self.client = None;
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

    fn disconnect(&mut self) {
        self.client = None;
    }

    async fn check(&self) -> Result<()> {
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

    async fn prepare(&self) -> Result<()> {
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

    async fn batch(&self, sql: &str, what: &str) -> Result<()> {
        self.client()?
            .batch_execute(sql)
            .await
            .map_err(|e| self.error(&e, what))
    }

    async fn read_cursor(&self, id: &SinkId) -> Result<Option<StoreCursor>> {
        let row = self
            .client()?
            .query_opt(
                &format!(
                    "SELECT next_offset, log_id FROM {CURSORS} WHERE pipeline = $1 AND sink = $2"
                ),
                &[&id.pipeline, &id.sink],
            )
            .await
            .map_err(|e| self.error(&e, "reading the cursor"))?;
        Ok(row.map(|r| StoreCursor {
            next_offset: r.get::<_, i64>(0) as u64,
            log: r.get::<_, Option<&str>>(1).map(LogId::from_stored),
        }))
    }

    async fn save_cursor(&self, id: &SinkId, next: u64, log: Option<&LogId>) -> Result<()> {
        let log = log.map(LogId::as_str);
        self.execute(
            &format!(
                "INSERT INTO {CURSORS} (pipeline, sink, next_offset, log_id) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (pipeline, sink) DO UPDATE SET next_offset = EXCLUDED.next_offset, \
                 log_id = EXCLUDED.log_id, updated_at = now()"
            ),
            &[&id.pipeline, &id.sink, &(next as i64), &log],
            "saving the cursor",
        )
        .await
        .map(drop)
    }

    async fn delete_cursor(&self, id: &SinkId) -> Result<()> {
        self.execute(
            &format!("DELETE FROM {CURSORS} WHERE pipeline = $1 AND sink = $2"),
            &[&id.pipeline, &id.sink],
            "deleting the cursor",
        )
        .await
        .map(drop)
    }

    fn target(&self, namespace: &str, table: &str) -> TargetName {
        let names = [("schema", namespace), ("table", table)];
        let schema = quote(&self.schema.render(&names));
        TargetName {
            table: format!("{schema}.{}", quote(&self.table.render(&names))),
            schema: Some(schema),
        }
    }

    fn create_table(&self, target: &TargetName, definition: &str) -> String {
        let table = &target.table;
        let schema = target
            .schema
            .as_ref()
            .map(|s| format!("CREATE SCHEMA IF NOT EXISTS {s}; "))
            .unwrap_or_default();
        format!(
            "{schema}CREATE TABLE IF NOT EXISTS {table} ({definition}); COMMENT ON TABLE {table} IS '{OWNED_COMMENT}'"
        )
    }

    /// Values are cast to the type `format_type` prints without its modifier: to `character
    /// varying`, not `character varying(5)`, since an explicit cast to the latter would cut a
    /// longer value where the insert must refuse it (`bit` and `character` are cast to `bit
    /// varying` and `bpchar`: bare, they are `bit(1)` and `character(1)`). The declared type
    /// keeps its modifier, to compare with the source's.
    async fn catalog(&self, table: &str) -> Result<Catalog> {
        let rows = self
            .client()?
            .query(
                "SELECT a.attname::text, \
                 CASE a.atttypid WHEN 1560 THEN 'bit varying' WHEN 1561 THEN 'bit varying[]' \
                 WHEN 1042 THEN 'bpchar' WHEN 1014 THEN 'bpchar[]' \
                 ELSE format_type(a.atttypid, NULL) END, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_attribute a \
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
                &[&table],
            )
            .await
            .map_err(|e| self.error(&e, "reading the catalog"))?;
        let comment: Option<String> = self
            .client()?
            .query_one(
                "SELECT obj_description(to_regclass($1), 'pg_class')",
                &[&table],
            )
            .await
            .map_err(|e| self.error(&e, "reading the catalog"))?
            .get(0);
        Ok(Catalog {
            columns: rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
            declared: rows.iter().map(|r| (r.get(0), r.get(2))).collect(),
            owned: comment.as_deref() == Some(OWNED_COMMENT),
        })
    }

    fn column_type(&self, column: &Column) -> String {
        pg_type(column)
    }

    fn value_type(&self, value: &Value) -> Option<&'static str> {
        column_type(value)
    }

    async fn same_type(&self, declared: &str, wanted: &str) -> Result<bool> {
        Ok(declared == wanted)
    }

    fn change_type(&self, column: &str, ty: &str) -> String {
        format!("ALTER COLUMN {column} TYPE {ty} USING {column}::text::{ty}")
    }

    async fn alter(&self, table: &str, changes: &[String]) -> Result<()> {
        self.batch(
            &format!("ALTER TABLE {table} {}", changes.join(", ")),
            "changing the target table",
        )
        .await
    }

    fn truncate(&self, table: &str) -> String {
        format!("TRUNCATE {table}")
    }

    fn insert_into(&self, table: &str) -> (String, String) {
        (format!("{table} AS t"), "t".into())
    }

    fn cast(&self, staged: &str, ty: &str) -> String {
        format!("{staged}::{ty}")
    }

    /// A text array parameter per column, then the offsets as `bigint[]`.
    fn staged_from(&self, columns: usize) -> String {
        let arrays: String = (1..=columns).map(|i| format!("${i}::text[], ")).collect();
        let aliases: String = (1..=columns).map(|i| format!("c{i}, ")).collect();
        format!(
            "unnest({arrays}${}::bigint[]) AS s({aliases}o)",
            columns + 1
        )
    }

    async fn execute_staged(&self, sql: &str, staged: &Staged<'_>, what: &str) -> Result<()> {
        let columns = column_texts(staged);
        let offsets: Vec<i64> = staged.rows.iter().map(|(_, o)| *o as i64).collect();
        let mut params: Vec<&(dyn ToSql + Sync)> =
            columns.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        params.push(&offsets);
        self.execute(sql, &params, what).await.map(drop)
    }
}

/// Per staged column, its text in each row (`NULL` where a row has none): one text array
/// per statement parameter. Arrays go to an array column in PostgreSQL's array syntax, to
/// any other (a `jsonb` column made from values) as JSON.
fn column_texts(staged: &Staged<'_>) -> Vec<Vec<Option<String>>> {
    staged
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| {
            let array_column = ty.ends_with("[]");
            staged
                .rows
                .iter()
                .map(|(values, _)| match values[i] {
                    Some(Value::Array(items)) if array_column => Some(pg_array(items)),
                    value => value.and_then(pg_text).map(|t| t.into_owned()),
                })
                .collect()
        })
        .collect()
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
        None => siphon_core::error::with_causes(e),
    }
}
