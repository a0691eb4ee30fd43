//! `[pipelines.NAME.sinks.SINK]` with `kind = "elasticsearch"`.

use serde::Deserialize;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::units::{ByteSize, HumanDuration};
use std::path::PathBuf;

use siphon_core::tls::TlsMode;
use siphon_core::{ConnectionUrl, Secret};

/// The placeholders of `index`.
pub(crate) const INDEX_PLACEHOLDERS: &[&str] = &["schema", "table"];

/// Settings of an Elasticsearch/OpenSearch sink.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElasticsearchSinkConfig {
    /// Base URL of the cluster: `http://host:9200` or `https://…`.
    pub url: ConnectionUrl,
    /// User for basic authentication.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for basic authentication (better from the environment:
    /// `SIPHON__PIPELINES__P__SINKS__S__PASSWORD`).
    #[serde(default)]
    pub password: Option<Secret>,
    /// An API key (`Authorization: ApiKey …`), instead of a user and password.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Index of a source table: `{schema}` and `{table}` are the source's. Lowercased.
    #[serde(default = "default_index")]
    pub index: String,
    /// Largest `_bulk` request body; a batch is split into requests of at most this size.
    #[serde(default = "default_bulk_size")]
    pub bulk_max_size: ByteSize,
    /// How long to wait for the cluster before retrying.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// Index of the documents holding each sink's cursor (`<pipeline>.<sink>`: the next
    /// offset and the identity of the change log).
    #[serde(default = "default_cursor_index")]
    pub cursor_index: String,
    /// TLS with an `https://` URL: "require" (encrypt, trust any certificate), "verify_ca"
    /// (the certificate chains to `tls_ca_file`, or to the system's certificates) or
    /// "verify_full" (and names the host; the default).
    #[serde(default)]
    pub tls: Option<TlsMode>,
    /// CA certificates (PEM) to trust instead of the system's (Elasticsearch 8 makes its
    /// own CA: `config/certs/http_ca.crt`).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

fn default_cursor_index() -> String {
    "siphon-cursors".into()
}

fn default_index() -> String {
    "{table}".into()
}

fn default_bulk_size() -> ByteSize {
    ByteSize(5 * 1024 * 1024)
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

impl ElasticsearchSinkConfig {
    /// The TLS mode in force: `tls`, or for an `https://` URL `verify_full`.
    pub fn tls_mode(&self) -> TlsMode {
        TlsMode::for_url(self.tls, self.url.expose())
    }

    /// A sink writing to `url` with the defaults otherwise.
    pub fn new(url: impl Into<String>) -> Self {
        ElasticsearchSinkConfig {
            url: ConnectionUrl::new(url),
            username: None,
            password: None,
            api_key: None,
            index: default_index(),
            bulk_max_size: default_bulk_size(),
            timeout: default_timeout(),
            cursor_index: default_cursor_index(),
            tls: None,
            tls_ca_file: None,
        }
    }

    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        NameTemplate::parse(&self.index, INDEX_PLACEHOLDERS).map_err(|e| format!("index: {e}"))?;
        check_index_name(&self.cursor_index).map_err(|why| {
            format!(
                "cursor_index: {:?} is not an index name ({why})",
                self.cursor_index
            )
        })?;
        let https = self.url.expose().starts_with("https://");
        if !https && self.tls.is_some_and(|t| t != TlsMode::Disable) {
            return Err("tls: TLS needs an https:// url".into());
        }
        if https && self.tls == Some(TlsMode::Disable) {
            return Err("tls: an https:// url needs TLS; use http:// for none".into());
        }
        if !(self.url.expose().starts_with("http://") || https) {
            return Err(format!(
                "url: {:?} must start with http:// or https://",
                &self.url
            ));
        }
        if self.api_key.is_some() && (self.username.is_some() || self.password.is_some()) {
            return Err("api_key: set either api_key or username and password, not both".into());
        }
        if self.password.is_some() && self.username.is_none() {
            return Err("username: a password needs a username".into());
        }
        Ok(())
    }
}

/// Whether Elasticsearch takes `name` as the name of one index.
pub(crate) fn check_index_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err("empty, \".\" or \"..\"".into());
    }
    if name.len() > 255 {
        return Err("longer than 255 bytes".into());
    }
    if let Some(c) = name.chars().find(|c| "\\/*?\"<>| ,#:".contains(*c)) {
        return Err(format!("it holds {c:?}"));
    }
    if name.starts_with(['-', '_', '+']) {
        return Err("it starts with '-', '_' or '+'".into());
    }
    Ok(())
}
