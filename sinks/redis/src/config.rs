//! `[pipelines.NAME.sinks.SINK]` with `kind = "redis"`.

use serde::Deserialize;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

/// The placeholders of `key`.
pub(crate) const KEY_PLACEHOLDERS: &[&str] = &["schema", "table", "key"];

/// Settings of a Redis sink.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    /// `redis://[user[:password]@]host[:port][/db]` (or `rediss://` for TLS). The password is
    /// better given as `password` or `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`.
    #[serde(default = "default_url")]
    pub url: ConnectionUrl,
    /// The password (overrides one in the URL).
    #[serde(default)]
    pub password: Option<Secret>,
    /// `upsert` (keep the row under its key) or `invalidate` (delete the key on any change).
    #[serde(default)]
    pub mode: RedisMode,
    /// How a row is stored in `upsert` mode: `hash` (a field per non-null column) or `json`
    /// (a string holding the row as a JSON object).
    #[serde(default)]
    pub format: RedisFormat,
    /// Put before every key this sink writes (and the cursor key).
    #[serde(default)]
    pub prefix: String,
    /// Key of a row, after `prefix`: `{schema}`, `{table}` and `{key}` (the primary key's
    /// values, `:`-joined when composite).
    #[serde(default = "default_key")]
    pub key: String,
    /// Expire each written key this long after its last write. Unset: never.
    #[serde(default)]
    pub ttl: Option<HumanDuration>,
    /// How long to wait for Redis to answer before retrying.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
}

/// What the sink does with a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisMode {
    /// Store the row under its key; a delete removes the key.
    #[default]
    Upsert,
    /// Delete the key on every change.
    Invalidate,
}

/// How a row is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisFormat {
    /// A hash: one field per non-null column, values as text.
    #[default]
    Hash,
    /// A string: the row as a JSON object (siphon's JSON encoding of each value).
    Json,
}

fn default_url() -> ConnectionUrl {
    ConnectionUrl::new("redis://127.0.0.1:6379")
}

fn default_key() -> String {
    "{table}:{key}".into()
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

impl RedisSinkConfig {
    /// A sink writing to `url` with the defaults otherwise.
    pub fn new(url: impl Into<String>) -> Self {
        RedisSinkConfig {
            url: ConnectionUrl::new(url),
            password: None,
            mode: RedisMode::default(),
            format: RedisFormat::default(),
            prefix: String::new(),
            key: default_key(),
            ttl: None,
            timeout: default_timeout(),
        }
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        NameTemplate::parse(&self.key, KEY_PLACEHOLDERS).map_err(|e| format!("key: {e}"))?;
        if !self.key.contains("{key}") {
            return Err(format!(
                "key: {:?} must contain {{key}}, or every row of a table would share one key",
                self.key
            ));
        }
        if !self.key.contains("{table}") {
            return Err(format!(
                "key: {:?} must contain {{table}}, or the rows of different tables would share \
                 keys and a truncate of one table would delete every table's keys",
                self.key
            ));
        }
        if !(self.url.expose().starts_with("redis://")
            || self.url.expose().starts_with("rediss://"))
        {
            return Err(format!(
                "url: {:?} must start with redis:// or rediss://",
                &self.url
            ));
        }
        Ok(())
    }
}
