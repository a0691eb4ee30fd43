//! Settings of the MySQL/MariaDB source.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use siphon_core::source::SnapshotMode;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

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
    pub tables: Vec<String>,
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
        if let Some(bad) = self.tables.iter().find(|t| {
            t.split_once('.')
                .is_none_or(|(d, t)| d.is_empty() || t.is_empty() || t.contains('.'))
        }) {
            return Err(format!(
                "tables: {bad:?} is not of the form \"database.table\" or \"database.*\""
            ));
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
        mysql_async::Opts::from_url(self.url.expose())
            .map_err(|e| format!("url is not a MySQL connection URL ({e})"))?;
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

    /// Whether `database.table` is one of the configured tables.
    pub fn captures(&self, database: &str, table: &str) -> bool {
        self.tables.iter().any(|pattern| {
            pattern
                .split_once('.')
                .is_some_and(|(d, t)| glob(d, database) && glob(t, table))
        })
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| glob(tail, &rest[i..]))
        }
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
            tables: tables.iter().map(|t| (*t).to_owned()).collect(),
            server_id: None,
            snapshot: SnapshotMode::Initial,
            heartbeat_interval: default_heartbeat(),
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
    }

    #[test]
    fn bad_settings_name_their_key() {
        assert!(config(&[]).validate().unwrap_err().contains("tables"));
        assert!(config(&["nodot"]).validate().unwrap_err().contains("nodot"));
        let mut c = config(&["a.b"]);
        c.server_id = Some(0);
        assert!(c.validate().unwrap_err().contains("server_id"));
        assert_eq!(config(&["a.b"]).validate(), Ok(()));
    }

    #[test]
    fn the_default_server_id_is_stable_and_in_its_range() {
        let c = config(&["a.b"]);
        assert_eq!(c.server_id("demo"), c.server_id("demo"));
        assert_ne!(c.server_id("demo"), c.server_id("other"));
        assert!((5_400_000..5_500_000).contains(&c.server_id("demo")));
    }
}
