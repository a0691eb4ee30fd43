//! The webhook sink.

use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{ConnectionUrl, Error, Result, Secret};
use siphon_sink_message::{Message, MessageEncoder};

use crate::config::HttpSinkConfig;

/// The header holding a signed body's `sha256=<hex>` signature.
pub const SIGNATURE_HEADER: &str = "X-Siphon-Signature";

/// The longest pause between two attempts of a request.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// How long a batch is tried again within one apply, at most (plus the request under way).
const RETRY_TIME: Duration = Duration::from_secs(10);

/// The most of an answer's body an error shows.
const BODY_SHOWN: usize = 1024;

/// POSTs batches of events; see the crate documentation.
#[derive(Debug)]
pub struct HttpSink {
    url: ConnectionUrl,
    /// Where the receiver is, as errors and logs show it: scheme, host and port only (a
    /// webhook's path and query often hold its token).
    shown: String,
    http: reqwest::Client,
    encoder: MessageEncoder,
    /// A secret: its `Debug` shows nothing of it.
    signing_key: Option<Secret>,
    attempts: u32,
    log: Option<LogId>,
}

impl HttpSink {
    /// A sink for pipeline `pipeline`.
    pub fn new(config: &HttpSinkConfig, pipeline: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        // A redirect would turn the POST into a GET without its body (301, 302, 303) or send it
        // where the URL does not say: a 3xx stops the sink instead.
        let mut http = reqwest::Client::builder()
            .timeout(config.timeout.0)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(tls) =
            siphon_core::tls::client_config(config.tls_mode(), config.tls_ca_file.as_deref())?
        {
            http = http.use_preconfigured_tls(tls);
        }
        let signing_key = match (&config.signing_key, &config.signing_key_file) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Config(format!("signing_key_file: {}: {e}", path.display()))
                })?;
                Some(Secret::new(text.trim_end_matches(['\r', '\n'])))
            }
            (None, None) => None,
        };
        Ok(HttpSink {
            shown: endpoint(config.url.expose()),
            url: config.url.clone(),
            http: http
                .build()
                .map_err(|e| Error::Config(format!("http client: {e}")))?,
            encoder: MessageEncoder::new(&config.message(), pipeline).map_err(Error::Config)?,
            signing_key,
            attempts: config.attempts,
            log: None,
        })
    }

    /// POSTs `body` until the receiver takes it (2xx), refuses it for good (an error naming
    /// the status and the answer), or `attempts` ran out (a transient error).
    async fn post(&self, body: Vec<u8>, idempotency_key: &str) -> Result<()> {
        let signature = self
            .signing_key
            .as_ref()
            .map(|key| sign(key.expose().as_bytes(), &body));
        let mut pause = Duration::from_millis(100);
        let mut attempt = 1;
        let started = std::time::Instant::now();
        loop {
            let mut request = self
                .http
                .post(self.url.expose())
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", idempotency_key)
                .body(body.clone());
            if let Some(signature) = &signature {
                request = request.header(SIGNATURE_HEADER, signature);
            }
            let failed = match request.send().await {
                Ok(answer) if answer.status().is_success() => return Ok(()),
                Ok(answer) => {
                    let status = answer.status();
                    let text = answer.text().await.unwrap_or_default();
                    let shown: String = text.chars().take(BODY_SHOWN).collect();
                    let message = format!(
                        "http {}: the receiver answered {status}: {shown}",
                        self.shown
                    );
                    let retried = status.is_server_error()
                        || status == reqwest::StatusCode::REQUEST_TIMEOUT
                        || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                    if !retried {
                        return Err(Error::permanent(message));
                    }
                    message
                }
                Err(e) => self.unsent(e),
            };
            // Past RETRY_TIME the runtime takes over: its backoff gives way to a shutdown.
            if attempt >= self.attempts || started.elapsed() >= RETRY_TIME {
                return Err(Error::transient(failed));
            }
            tracing::warn!(url = %self.shown, attempt, error = %failed, "webhook not taken; trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
            attempt += 1;
        }
    }
}

impl HttpSink {
    /// Why a request went unanswered, with its causes (connection refused, a TLS handshake's
    /// reason) and the endpoint, not the URL, which may hold a password.
    fn unsent(&self, e: reqwest::Error) -> String {
        let cause = siphon_core::error::with_causes(&e.without_url());
        format!("http {}: {cause}", self.shown)
    }
}

/// `scheme://host:port` of `url`.
fn endpoint(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "(an unreadable URL)".into(),
    }
}

/// A hex digest of `body`, short: it tells two bodies under one batch's offsets apart.
fn digest(body: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(body)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `sha256=<hex>` of `body` under `key`.
fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 2 * digest.len());
    out.push_str("sha256=");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// `{"events":[…]}`: each message's facts, and its key and value as the JSON they are.
fn body(messages: &[Message]) -> Vec<u8> {
    let size: usize = messages.iter().map(|m| m.value.len() + 256).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(b"{\"events\":[");
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut facts = serde_json::json!({
            "id": message.id,
            "destination": message.destination,
            "offset": message.offset,
            "op": message.op,
            "position": message.position,
            "txid": message.txid,
        });
        if !message.row_headers.is_empty() {
            // An outbox row's headers (`id`, and those its settings name).
            facts["headers"] = message
                .row_headers
                .iter()
                .map(|(name, value)| (name.clone(), serde_json::Value::from(value.as_str())))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let facts = serde_json::to_vec(&facts).expect("JSON values serialize");
        // The facts' closing brace gives way to the key and the value.
        out.extend_from_slice(&facts[..facts.len() - 1]);
        out.extend_from_slice(b",\"key\":");
        out.extend_from_slice(message.key.as_deref().unwrap_or(b"null"));
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&message.value);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

#[async_trait]
impl Sink for HttpSink {
    /// Reaches the receiver: any answer to an OPTIONS request will do.
    async fn check(&mut self) -> Result<()> {
        self.http
            .request(reqwest::Method::OPTIONS, self.url.expose())
            .send()
            .await
            .map(drop)
            .map_err(|e| Error::transient(self.unsent(e)))
    }

    /// The receiver keeps no cursor: siphon's own says where to go on.
    async fn open(&mut self, _tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        Ok(None)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        let log = self
            .log
            .clone()
            .ok_or_else(|| Error::permanent("http: a batch before open"))?;
        let Some(first) = batch.records.first() else {
            return Ok(());
        };
        let mut messages: Vec<Message> = Vec::with_capacity(batch.records.len());
        for record in &batch.records {
            messages.extend(self.encoder.encode(record, &log)?);
        }
        // The same offsets with another body (a replay after routing or encoding changed)
        // must not look like a retry to a receiver honouring the key.
        let body = body(&messages);
        let key = format!("{log}:{}-{}:{}", first.offset, batch.end, digest(&body));
        self.post(body, &key).await
    }

    /// Nothing to remove: what was sent is the receiver's.
    async fn reset(&mut self, _tables: &[TableInfo]) -> Result<()> {
        Ok(())
    }

    /// Every event goes out: the log never compacts what the sink has not sent.
    fn keeps_history(&self) -> bool {
        true
    }
}
