//! A client of a Confluent-compatible schema registry, for `format = "avro"`: registers a
//! record's Avro schema under its subject (Confluent's `TopicNameStrategy`: `<topic>-key`,
//! `<topic>-value`) and gets its id, which each record carries (Confluent's wire format: a
//! zero byte, the id in 4 bytes big-endian, then the Avro datum). Registering a schema the
//! subject has already gives its id back, so a restarted writer registers again harmlessly.
//! The call blocks (ureq): it is made once per table version and process, from the encoder,
//! which runs on a blocking thread in the log and inline in the Kafka sink.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value as Json, json};
use siphon_core::secret::redact_url;
use siphon_core::tls::{TlsMode, client_config};
use siphon_core::{Error, Result};

use crate::config::RegistryConfig;

/// The registry's media type, which every request names.
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A schema registry, and the ids it gave this process.
pub struct Registry {
    agent: ureq::Agent,
    /// The base URL, without a trailing `/`.
    url: String,
    /// `Authorization` for basic authentication.
    authorization: Option<String>,
    /// Ids by subject and schema text.
    ids: HashMap<(String, String), u32>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("url", &redact_url(&self.url))
            .field("ids", &self.ids.len())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A client of the registry `config` names, each call bounded by `timeout`.
    pub fn new(config: &RegistryConfig, timeout: Duration) -> Result<Self> {
        let mut agent = ureq::AgentBuilder::new().timeout(timeout);
        if config.url.starts_with("https://")
            && let Some(tls) = client_config(TlsMode::VerifyFull, config.tls_ca_file.as_deref())?
        {
            agent = agent.tls_config(Arc::new(tls));
        }
        let authorization = config.username.as_ref().map(|user| {
            let password = config.password.as_ref().map_or("", |p| p.expose());
            format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
        });
        Ok(Registry {
            agent: agent.build(),
            url: config.url.trim_end_matches('/').to_owned(),
            authorization,
            ids: HashMap::new(),
        })
    }

    /// The id of `schema` (an Avro schema's text) under `subject`, registered if the subject
    /// does not have it yet. Blocks for one HTTP call the first time a schema is met.
    pub fn register(&mut self, subject: &str, schema: &str) -> Result<u32> {
        let key = (subject.to_owned(), schema.to_owned());
        if let Some(&id) = self.ids.get(&key) {
            return Ok(id);
        }
        let path = format!("/subjects/{subject}/versions");
        let reply = self.call("POST", &path, Some(json!({ "schema": schema })))?;
        let id = reply["id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                Error::permanent(format!(
                    "schema registry: registering under {subject} answered {reply} (no id)"
                ))
            })?;
        tracing::debug!(subject, id, "registered an Avro schema");
        self.ids.insert(key, id);
        Ok(id)
    }

    /// Reaches the registry (lists its subjects), as `siphon check --connect` does. Blocks.
    pub fn check(&self) -> Result<()> {
        self.call("GET", "/subjects", None).map(|_| ())
    }

    /// One call; an answer other than 200 is an error that says whether retrying helps.
    fn call(&self, method: &str, path: &str, body: Option<Json>) -> Result<Json> {
        let url = format!("{}{path}", self.url);
        let shown = redact_url(&url);
        let mut request = self
            .agent
            .request(method, &url)
            .set("Content-Type", MEDIA_TYPE)
            .set("Accept", MEDIA_TYPE);
        if let Some(authorization) = &self.authorization {
            request = request.set("Authorization", authorization);
        }
        let sent = match body {
            Some(body) => request.send_string(&body.to_string()),
            None => request.call(),
        };
        let response = match sent {
            Ok(response) => response,
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                let message = serde_json::from_str::<Json>(&text)
                    .ok()
                    .and_then(|j| j["message"].as_str().map(str::to_owned))
                    .unwrap_or(text);
                let what = format!("schema registry {shown} answered {status}: {message}");
                // Overloaded or restarting: retry. Refused (a schema incompatible with the
                // subject's versions, bad credentials, no such path): retrying cannot help.
                return Err(if status >= 500 || status == 429 || status == 408 {
                    Error::transient(what)
                } else {
                    Error::permanent(what)
                });
            }
            Err(e) => {
                let cause = siphon_core::error::with_causes(&e);
                return Err(Error::transient(format!(
                    "schema registry {shown}: {cause}"
                )));
            }
        };
        let text = response
            .into_string()
            .map_err(|e| Error::transient(format!("schema registry {shown}: {e}")))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::permanent(format!(
                "schema registry {shown}: the answer is not JSON ({e})"
            ))
        })
    }
}

/// The subject of a topic's keys or values (`TopicNameStrategy`).
pub fn subject(topic: &str, key: bool) -> String {
    format!("{topic}-{}", if key { "key" } else { "value" })
}

/// The start of a record in Confluent's wire format, room made for a datum of about
/// `datum_len` bytes to follow: the magic byte 0 and the schema id.
pub fn framed(id: u32, datum_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + datum_len);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out
}
