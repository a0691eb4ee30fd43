//! `[pipelines.NAME.sinks.SINK]` with `kind = "http"`: the keys every message sink has
//! (`siphon_sink_message::message_config!`), and the receiver, signing and retries.

use std::path::PathBuf;

use siphon_core::tls::TlsMode;
use siphon_core::units::HumanDuration;
use siphon_core::{ConnectionUrl, Secret};

siphon_sink_message::message_config! {
    /// Settings of a webhook sink.
    pub struct HttpSinkConfig {
        /// Where each batch is POSTed: an `http://` or `https://` URL.
        pub url: ConnectionUrl,
        /// The key of the HMAC-SHA-256 signature of each body, sent in `X-Siphon-Signature`
        /// as `sha256=<hex>` (better given as `SIPHON__PIPELINES__P__SINKS__S__SIGNING_KEY`
        /// or `signing_key_file`). Unset: requests are not signed.
        #[serde(default)]
        pub signing_key: Option<Secret>,
        /// A file holding the signing key (its trailing newline dropped).
        #[serde(default)]
        pub signing_key_file: Option<PathBuf>,
        /// Attempts of a request the receiver answers 408, 429 or 5xx (or does not answer),
        /// within about 10 s, before the sink reopens and tries the batch again from its
        /// cursor (with the runtime's backoff, which a shutdown interrupts).
        #[serde(default = "default_attempts")]
        pub attempts: u32,
        /// How long to wait for an answer.
        #[serde(default = "default_timeout")]
        pub timeout: HumanDuration,
        /// TLS with an `https://` URL: "require" (encrypt, trust any certificate),
        /// "verify_ca" (the certificate chains to `tls_ca_file`, or to the system's
        /// certificates) or "verify_full" (and names the host; the default).
        #[serde(default)]
        pub tls: Option<TlsMode>,
        /// CA certificates (PEM) to trust instead of the system's.
        #[serde(default)]
        pub tls_ca_file: Option<PathBuf>,
    }
}

fn default_attempts() -> u32 {
    5
}

fn default_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

impl HttpSinkConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.message().validate()?;
        let url = self.url.expose();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "url: {:?} must start with http:// or https://",
                &self.url
            ));
        }
        if reqwest::Url::parse(url).is_err() {
            return Err(format!("url: {:?} is not a URL", &self.url));
        }
        if self
            .signing_key
            .as_ref()
            .is_some_and(|k| k.expose().is_empty())
        {
            return Err(
                "signing_key: empty; give a key, or leave it unset for no signature".into(),
            );
        }
        if self.signing_key.is_some() && self.signing_key_file.is_some() {
            return Err(
                "signing_key_file: give the signing key once, as signing_key or signing_key_file"
                    .into(),
            );
        }
        if self.attempts == 0 {
            return Err("attempts: at least 1".into());
        }
        if self.timeout.0.is_zero() {
            return Err("timeout: more than 0 (\"30s\", say)".into());
        }
        Ok(())
    }

    /// The TLS mode in force: `tls`, or for an `https://` URL `verify_full`.
    pub fn tls_mode(&self) -> TlsMode {
        TlsMode::for_url(self.tls, self.url.expose())
    }
}
