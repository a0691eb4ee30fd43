//! `[pipelines.NAME.sinks.SINK]` with `kind = "postgres"`.

use std::path::PathBuf;

use serde::Deserialize;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::tls::TlsMode;
use siphon_core::{ConnectionUrl, Secret};
use siphon_sink_sql::table::NAME_PLACEHOLDERS;
pub use siphon_sink_sql::table::{DroppedColumns, TableMode};

/// Settings of a PostgreSQL sink.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// `postgres://user[:password]@host[:port]/database` of the target. The password is better
    /// given as `password` or `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`.
    pub url: ConnectionUrl,
    /// The password (overrides one in the URL).
    #[serde(default)]
    pub password: Option<Secret>,
    /// `mirror` (current rows) or `history` (every event).
    #[serde(default)]
    pub mode: TableMode,
    /// Target schema of a source table: `{schema}` and `{table}` are the source's.
    #[serde(default = "default_schema")]
    pub schema: String,
    /// Target table name of a source table: `{schema}` and `{table}` are the source's.
    #[serde(default = "default_table")]
    pub table: String,
    /// TLS to the target: "disable", "require" (encrypt, trust any certificate), "verify_ca"
    /// (the certificate chains to `tls_ca_file`) or "verify_full" (and names the host).
    /// Unset: the URL's `sslmode`.
    #[serde(default)]
    pub tls: Option<TlsMode>,
    /// CA certificates (PEM) for `verify_ca` and `verify_full`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// A column the source table dropped: "keep" it in the target (the default; new rows
    /// leave it NULL) or "drop" it there too.
    #[serde(default)]
    pub dropped_columns: DroppedColumns,
}

fn default_schema() -> String {
    "{schema}".into()
}

fn default_table() -> String {
    "{table}".into()
}

impl PostgresSinkConfig {
    /// A mirror of every table into `url`, under the source's names.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresSinkConfig {
            url: ConnectionUrl::new(url),
            password: None,
            mode: TableMode::default(),
            schema: default_schema(),
            table: default_table(),
            tls: None,
            tls_ca_file: None,
            dropped_columns: DroppedColumns::default(),
        }
    }

    /// The TLS mode in force: `tls`, or the URL's `sslmode`.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls
            .unwrap_or_else(|| TlsMode::from_url(self.url.expose()))
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        NameTemplate::parse(&self.schema, NAME_PLACEHOLDERS).map_err(|e| format!("schema: {e}"))?;
        NameTemplate::parse(&self.table, NAME_PLACEHOLDERS).map_err(|e| format!("table: {e}"))?;
        if matches!(self.tls_mode(), TlsMode::VerifyCa | TlsMode::VerifyFull)
            && self.tls_ca_file.is_none()
        {
            return Err("tls_ca_file: required with tls = \"verify_ca\" or \"verify_full\"".into());
        }
        self.url
            .expose()
            .parse::<tokio_postgres::Config>()
            .map(drop)
            .map_err(|e| {
                format!(
                    "url: {:?} is not a PostgreSQL connection URL: {e}",
                    &self.url
                )
            })
    }
}
