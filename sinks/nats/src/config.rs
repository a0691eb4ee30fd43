//! `[pipelines.NAME.sinks.SINK]` with `kind = "nats"`: the keys every message sink has
//! (`siphon_sink_message::message_config!`), and the server, credentials, TLS and stream.

use std::path::PathBuf;

use serde::Deserialize;
use siphon_core::tls::TlsMode;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

siphon_sink_message::message_config! {
    /// Settings of a NATS JetStream sink.
    pub struct NatsSinkConfig {
        /// The servers: `nats://host:port` (`tls://` for TLS), several separated by commas.
        #[serde(default = "default_url")]
        pub url: ConnectionUrl,
        /// A user name, with `password`.
        #[serde(default)]
        pub user: Option<String>,
        /// The user's password (better given as `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`).
        #[serde(default)]
        pub password: Option<Secret>,
        /// A token, instead of a user and password.
        #[serde(default)]
        pub token: Option<Secret>,
        /// A `.creds` file (a user JWT and its NKey seed), instead of a user or token.
        #[serde(default)]
        pub credentials_file: Option<PathBuf>,
        /// TLS: "disable", "require" (encrypt, trust any certificate), "verify_ca" (the
        /// certificate chains to `tls_ca_file`, or to the system's certificates) or
        /// "verify_full" (and names the host). Unset: "verify_full" for a `tls://` URL, else
        /// whatever the server asks for.
        #[serde(default)]
        pub tls: Option<TlsMode>,
        /// CA certificates (PEM) to trust instead of the system's.
        #[serde(default)]
        pub tls_ca_file: Option<PathBuf>,
        /// The JetStream stream that takes the subjects. Unset: the prefix, with the
        /// characters a stream name cannot hold (`.`, `*`, `>`, spaces, slashes) as `_`.
        #[serde(default)]
        pub stream: Option<String>,
        /// Create the stream when it is missing, with the settings below (an existing stream
        /// is used as it is; its subjects must take every destination).
        #[serde(default = "siphon_sink_message::yes")]
        pub create_stream: bool,
        /// The subjects of a stream the sink creates. Unset: `destination` with `*` for each
        /// placeholder but `{prefix}` (`<prefix>.*.*` by default).
        #[serde(default)]
        pub subjects: Option<Vec<String>>,
        /// The retention of a stream the sink creates: "limits", "interest" or "workqueue".
        #[serde(default)]
        pub retention: Retention,
        /// Where a stream the sink creates keeps its messages: "file" or "memory".
        #[serde(default)]
        pub storage: Storage,
        /// The duplicate window of a stream the sink creates: a message sent again within it
        /// (same `Nats-Msg-Id`) is dropped by the server.
        #[serde(default = "default_duplicate_window")]
        pub duplicate_window: HumanDuration,
        /// How long a stream the sink creates keeps a message. Unset: for ever.
        #[serde(default)]
        pub max_age: Option<HumanDuration>,
        /// The replicas of a stream the sink creates (a JetStream cluster).
        #[serde(default = "default_replicas")]
        pub replicas: usize,
        /// How long to wait for the server (a publish's ack, a request).
        #[serde(default = "default_timeout")]
        pub timeout: HumanDuration,
    }
}

/// A stream's retention (JetStream's `RetentionPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Kept until the stream's limits (age, count, size) remove it.
    #[default]
    Limits,
    /// Kept while a consumer has not acknowledged it.
    Interest,
    /// Kept until one consumer acknowledges it.
    Workqueue,
}

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    /// On disk.
    #[default]
    File,
    /// In memory: lost when the server stops.
    Memory,
}

fn default_url() -> ConnectionUrl {
    ConnectionUrl::new("nats://127.0.0.1:4222")
}

fn default_duplicate_window() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(120))
}

fn default_replicas() -> usize {
    1
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

/// `name` with what a stream name cannot hold as `_`.
pub(crate) fn stream_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '.' | '*' | '>' | '/' | '\\' => '_',
            c if c.is_whitespace() => '_',
            c => c,
        })
        .collect()
}

impl NatsSinkConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.message().validate()?;
        for server in self.url.expose().split(',') {
            let server = server.trim();
            if !(server.starts_with("nats://") || server.starts_with("tls://")) {
                return Err(format!(
                    "url: {:?}: each server must start with nats:// or tls://",
                    &self.url
                ));
            }
        }
        let ways = [
            self.user.is_some(),
            self.token.is_some(),
            self.credentials_file.is_some(),
        ];
        if ways.iter().filter(|&&given| given).count() > 1 {
            return Err(
                "user: give one way to sign in: user and password, token, or credentials_file"
                    .into(),
            );
        }
        if self.password.is_some() && self.user.is_none() {
            return Err("password: give the user it belongs to as user".into());
        }
        if let Some(stream) = &self.stream
            && (stream.is_empty() || stream_name(stream) != *stream)
        {
            return Err(format!(
                "stream: {stream:?} is not a stream name (no '.', '*', '>', '/', '\\\\' or spaces)"
            ));
        }
        if self.subjects.as_ref().is_some_and(Vec::is_empty) {
            return Err("subjects: at least one subject, or leave it unset".into());
        }
        if self.subjects.is_none() && self.create_stream {
            stream_subject(&self.destination)?;
        }
        if self.replicas == 0 {
            return Err("replicas: at least 1".into());
        }
        if self.timeout.0.is_zero() {
            return Err("timeout: more than 0 (\"10s\", say)".into());
        }
        Ok(())
    }

    /// The TLS mode in force, if TLS is asked for.
    pub fn tls_mode(&self) -> TlsMode {
        TlsMode::for_url(self.tls, self.url.expose())
    }
}

/// The subject filter that takes every destination of `template`: `{prefix}` stays, each
/// other placeholder becomes `*`, which must stand for a whole token.
pub(crate) fn stream_subject(template: &str) -> Result<String, String> {
    let mut subject = template.to_owned();
    for placeholder in ["{schema}", "{table}", "{op}"] {
        subject = subject.replace(placeholder, "*");
    }
    if subject
        .split('.')
        .any(|token| token.contains('*') && token != "*")
    {
        return Err(format!(
            "subjects: destination {template:?} has a placeholder within a token (NATS wildcards stand for whole tokens between dots): give the stream's subjects as subjects"
        ));
    }
    Ok(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_subjects_are_the_destination_with_wildcards() {
        assert_eq!(
            stream_subject("{prefix}.{schema}.{table}").unwrap(),
            "{prefix}.*.*"
        );
        assert_eq!(stream_subject("cdc.{table}.{op}").unwrap(), "cdc.*.*");
        let error = stream_subject("cdc.t_{table}").unwrap_err();
        assert!(error.starts_with("subjects:"), "{error}");
        assert_eq!(stream_name("shop.prod orders"), "shop_prod_orders");
    }
}
