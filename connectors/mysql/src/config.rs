//! Settings of the MySQL/MariaDB source.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use siphon_core::source::SnapshotMode;
pub use siphon_core::tls::TlsMode;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret, TableName, TablePattern};

/// `kind = "mysql"` (MySQL 5.7/8.x and MariaDB 10.5+).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// Connection URL: `mysql://user[:password]@host[:port]`. The password is better given as
    /// `password`, `password_file` or `SIPHON__PIPELINES__NAME__SOURCE__PASSWORD`.
    pub url: ConnectionUrl,
    /// The user's password (overrides one in the URL).
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Tables to capture, as "database.table"; `*` matches any run of characters
    /// ("shop.*", "shop.order_*").
    pub tables: Vec<TablePattern>,
    /// The server id siphon registers with as a replica: unique among the server's replicas.
    /// Default: derived from the pipeline's name, in 5,400,000–5,499,999.
    #[serde(default)]
    pub server_id: Option<u32>,
    /// "initial", "never" or "when_needed" (again when the server no longer holds the binlog
    /// at the stored position).
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// How often the server sends a heartbeat when it has nothing else to send.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_interval: HumanDuration,
    /// TLS to the server: "disable" (default), "require" (encrypt, any certificate) or
    /// "verify_full" (the certificate chains to `tls_ca_file` and names the host).
    /// "verify_ca" is refused: the client library cannot check a chain without the name.
    #[serde(default)]
    pub tls: TlsMode,
    /// CA certificates (PEM) for `verify_full`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// The name the server's certificate must carry under `verify_full`, where it is not the
    /// URL's host (a server reached by its IP address, say).
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// The table ("database.table") incremental snapshots write their watermarks into, one
    /// row per pipeline, so that they pass through the binlog. siphon creates it (and its
    /// database) when the first incremental snapshot starts; a user without CREATE creates it
    /// beforehand: `CREATE TABLE siphon.watermarks (pipeline VARCHAR(190) PRIMARY KEY, mark
    /// VARCHAR(80) NOT NULL)` and grants INSERT, UPDATE on it. Never captured.
    #[serde(default = "default_watermark_table")]
    pub watermark_table: TableName,
}

fn default_watermark_table() -> TableName {
    TableName::new("siphon", "watermarks")
}

fn default_heartbeat() -> HumanDuration {
    HumanDuration(Duration::from_secs(5))
}

impl MysqlConfig {
    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.tables.is_empty() {
            return Err(
                "tables must list at least one \"database.table\" (or \"database.*\")".into(),
            );
        }
        if self.password.is_some() && self.password_file.is_some() {
            return Err("set either password or password_file, not both".into());
        }
        if self.server_id == Some(0) {
            return Err("server_id must be at least 1".into());
        }
        if self.heartbeat_interval.0.is_zero() {
            return Err("heartbeat_interval must be longer than 0s".into());
        }
        match self.tls {
            // mysql_async skips the name check by matching rustls' error text, which rustls
            // 0.23 no longer spells that way: the name would be checked all the same.
            TlsMode::VerifyCa => {
                return Err(
                    "tls = \"verify_ca\" is not available for MySQL/MariaDB; allowed: \
                     \"disable\", \"require\", \"verify_full\" (with tls_server_name set to a \
                     name the certificate carries, when the URL's host is not one)"
                        .into(),
                );
            }
            TlsMode::VerifyFull if self.tls_ca_file.is_none() => {
                return Err("tls_ca_file is required with tls = \"verify_full\"".into());
            }
            _ => {}
        }
        if self.tls_server_name.is_some() && self.tls != TlsMode::VerifyFull {
            return Err("tls_server_name is used only with tls = \"verify_full\"".into());
        }
        mysql_async::Opts::from_url(self.url.expose())
            .map_err(|e| format!("url is not a MySQL connection URL ({e})"))?;
        // `tls` decides TLS: the URL's own TLS options would be overridden by it, silently.
        let query = self.url.expose().split_once('?').map_or("", |(_, q)| q);
        if let Some(option) = query.split('&').find_map(|pair| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            [
                "require_ssl",
                "verify_ca",
                "verify_identity",
                "built_in_roots",
            ]
            .contains(&key)
            .then_some(key)
        }) {
            return Err(format!(
                "url: {option} is set by tls (and tls_ca_file, tls_server_name) here; remove it from the URL"
            ));
        }
        Ok(())
    }

    /// The server id: configured, or derived from the pipeline's name.
    pub fn server_id(&self, pipeline: &str) -> u32 {
        self.server_id.unwrap_or_else(|| {
            // FNV-1a: stable across builds, unlike the standard hasher.
            let hash = pipeline.bytes().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            });
            5_400_000 + hash % 100_000
        })
    }

    /// The TLS settings of a connection, from `tls` and `tls_ca_file`.
    pub fn ssl_opts(&self) -> Option<mysql_async::SslOpts> {
        let roots = || {
            self.tls_ca_file
                .iter()
                .map(|path| path.clone().into())
                .collect::<Vec<_>>()
        };
        if self.tls != TlsMode::Disable {
            siphon_core::tls::install_default_provider();
        }
        let opts = mysql_async::SslOpts::default();
        match self.tls {
            // verify_ca is refused by `validate`.
            TlsMode::Disable | TlsMode::VerifyCa => None,
            TlsMode::Require => Some(opts.with_danger_accept_invalid_certs(true)),
            // Only the given CA: mysql_async trusts the public web roots besides it unless
            // told not to.
            TlsMode::VerifyFull => Some(
                opts.with_root_certs(roots())
                    .with_disable_built_in_roots(true)
                    .with_danger_tls_hostname_override(self.tls_server_name.clone()),
            ),
        }
    }

    /// Whether `database.table` is one of the configured tables (never the watermark table).
    pub fn captures(&self, database: &str, table: &str) -> bool {
        !self.is_watermark_table(database, table)
            && self
                .tables
                .iter()
                .any(|pattern| pattern.matches_parts(database, table))
    }

    /// Whether `database.table` is the table incremental snapshots write watermarks into.
    pub fn is_watermark_table(&self, database: &str, table: &str) -> bool {
        self.watermark_table.namespace() == database && self.watermark_table.table() == table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tables: &[&str]) -> MysqlConfig {
        MysqlConfig {
            url: ConnectionUrl::new("mysql://root@127.0.0.1:3306"),
            password: None,
            password_file: None,
            tables: tables.iter().map(|t| t.parse().unwrap()).collect(),
            server_id: None,
            snapshot: SnapshotMode::Initial,
            heartbeat_interval: default_heartbeat(),
            tls: TlsMode::Disable,
            tls_ca_file: None,
            tls_server_name: None,
            watermark_table: default_watermark_table(),
        }
    }

    #[test]
    fn table_patterns_match_database_and_table_apart() {
        let c = config(&["shop.*", "app.order_*", "x.y"]);
        assert!(c.captures("shop", "items"));
        assert!(c.captures("app", "order_lines"));
        assert!(!c.captures("app", "orders"));
        assert!(c.captures("x", "y"));
        assert!(!c.captures("x", "yy"));
        assert!(!c.captures("shopx", "items"));
        let c = config(&["siphon.*"]);
        assert!(
            !c.captures("siphon", "watermarks"),
            "the watermark table is never captured"
        );
    }

    #[test]
    fn bad_settings_name_their_key() {
        assert!(config(&[]).validate().unwrap_err().contains("tables"));
        let mut c = config(&["a.b"]);
        c.server_id = Some(0);
        assert!(c.validate().unwrap_err().contains("server_id"));
        let mut c = config(&["a.b"]);
        c.tls = TlsMode::VerifyFull;
        assert!(c.validate().unwrap_err().contains("tls_ca_file"));
        c.tls = TlsMode::VerifyCa;
        assert!(c.validate().unwrap_err().contains("allowed"));
        let mut c = config(&["a.b"]);
        c.url = ConnectionUrl::new("mysql://root@127.0.0.1:3306/db?require_ssl=true");
        let error = c.validate().unwrap_err();
        assert!(
            error.contains("require_ssl") && error.contains("tls"),
            "{error}"
        );
        assert_eq!(config(&["a.b"]).validate(), Ok(()));
    }

    #[test]
    fn verify_full_trusts_only_the_given_ca() {
        let mut c = config(&["a.b"]);
        c.tls = TlsMode::VerifyFull;
        c.tls_ca_file = Some("/etc/siphon/ca.pem".into());
        let opts = c.ssl_opts().expect("TLS");
        assert!(
            opts.disable_built_in_roots(),
            "the public web roots are trusted too"
        );
        assert_eq!(opts.root_certs().len(), 1);
        c.tls = TlsMode::Disable;
        assert!(c.ssl_opts().is_none());
    }

    #[test]
    fn the_default_server_id_is_stable_and_in_its_range() {
        let c = config(&["a.b"]);
        assert_eq!(c.server_id("demo"), c.server_id("demo"));
        assert_ne!(c.server_id("demo"), c.server_id("other"));
        assert!((5_400_000..5_500_000).contains(&c.server_id("demo")));
    }
}
