//! `[pipelines.NAME.sinks.SINK]` with `kind = "redis_stream"`: the keys every message sink
//! has (`siphon_sink_message::message_config!`), and the server, trimming and cursor.

use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

siphon_sink_message::message_config! {
    /// Settings of a Redis Streams sink.
    pub struct RedisStreamConfig {
        /// `redis://[user[:password]@]host[:port][/db]` (or `rediss://` for TLS). The
        /// password is better given as `password` or
        /// `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`.
        #[serde(default = "default_url")]
        pub url: ConnectionUrl,
        /// The password (overrides one in the URL).
        #[serde(default)]
        pub password: Option<Secret>,
        /// Trim each stream to about this many entries (`XADD … MAXLEN ~ N`). Unset: never
        /// trimmed.
        #[serde(default)]
        pub max_len: Option<u64>,
        /// The key of the sink's cursor. Unset: `siphon:cursor:<pipeline>:<sink>`.
        #[serde(default)]
        pub cursor_key: Option<String>,
        /// How long to wait for Redis to answer before retrying.
        #[serde(default = "default_timeout")]
        pub timeout: HumanDuration,
    }
}

fn default_url() -> ConnectionUrl {
    ConnectionUrl::new("redis://127.0.0.1:6379")
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

impl RedisStreamConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.message().validate()?;
        if !(self.url.expose().starts_with("redis://")
            || self.url.expose().starts_with("rediss://"))
        {
            return Err(format!(
                "url: {:?} must start with redis:// or rediss://",
                &self.url
            ));
        }
        if self.max_len == Some(0) {
            return Err("max_len: 0 would empty every stream; leave it unset to keep every entry, or give the number of entries to keep".into());
        }
        Ok(())
    }
}
