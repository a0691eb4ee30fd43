//! Settings of the PostgreSQL source.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret, TablePattern};

pub use siphon_core::source::SnapshotMode;
pub use siphon_core::tls::TlsMode;

/// `kind = "postgres"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connection URL: `postgres://user[:password]@host[:port]/database`. The password is
    /// better given as `password`, `password_file` or `SIPHON__PIPELINES__NAME__SOURCE__PASSWORD`.
    pub url: ConnectionUrl,
    /// The user's password (overrides one in the URL).
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Tables to capture, as "schema.table"; `*` in either part matches any run of
    /// characters ("schema.*" takes every table of a schema).
    pub tables: Vec<TablePattern>,
    /// How often to look for tables that match `tables` but are not captured yet (created
    /// since): each is added to the publication and snapshotted incrementally.
    #[serde(default = "default_table_poll_interval")]
    pub table_poll_interval: HumanDuration,
    /// Replication slot name (default: "siphon_<pipeline>").
    #[serde(default)]
    pub slot: Option<String>,
    /// Publication name (default: "siphon_<pipeline>"); created for `tables` if missing.
    #[serde(default)]
    pub publication: Option<String>,
    /// "initial", "never" or "when_needed".
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// Tables read at once during a snapshot.
    #[serde(default = "default_parallelism")]
    pub snapshot_parallelism: usize,
    /// How often to write a heartbeat (`pg_logical_emit_message`) so that the slot advances
    /// even when the whole database is idle. Unset: no heartbeat.
    #[serde(default)]
    pub heartbeat_interval: Option<HumanDuration>,
    /// How often to send the server standby status updates.
    #[serde(default = "default_status_interval")]
    pub status_interval: HumanDuration,
    /// Drop the replication slot when siphon stops (the server then keeps no WAL for it; the
    /// next start needs a new snapshot).
    #[serde(default)]
    pub drop_slot_on_stop: bool,
    /// TLS to the server: "disable", "require", "verify_ca" or "verify_full". Unset: the
    /// URL's `sslmode` (`require` turns TLS on; otherwise it is off).
    #[serde(default)]
    pub tls: Option<TlsMode>,
    /// CA certificates (PEM) for `verify_ca` and `verify_full`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

fn default_parallelism() -> usize {
    2
}

fn default_table_poll_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}

fn default_status_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}

impl PostgresConfig {
    /// The TLS mode in force: `tls`, or the URL's `sslmode`.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls
            .unwrap_or_else(|| TlsMode::from_url(self.url.expose()))
    }

    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.tables.is_empty() {
            return Err("tables must list at least one \"schema.table\" (or \"schema.*\")".into());
        }
        if self.snapshot_parallelism == 0 {
            return Err("snapshot_parallelism must be at least 1".into());
        }
        if self.password.is_some() && self.password_file.is_some() {
            return Err("set either password or password_file, not both".into());
        }
        if matches!(self.tls, Some(TlsMode::VerifyCa | TlsMode::VerifyFull))
            && self.tls_ca_file.is_none()
        {
            return Err(
                "tls_ca_file is required with tls = \"verify_ca\" or \"verify_full\"".into(),
            );
        }
        self.url
            .expose()
            .parse::<tokio_postgres::Config>()
            .map_err(|e| format!("url is not a PostgreSQL connection URL ({e})"))?;
        Ok(())
    }
}
