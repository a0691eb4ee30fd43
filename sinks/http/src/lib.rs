//! siphon's webhook sink (`kind = "http"`): each batch POSTed to a URL as one JSON document,
//! `{"events": [...]}`, every event with its own `id` (the log's identity and the event's
//! offset), its `destination`, `offset`, `op`, `position`, `txid`, and Debezium's `key` and
//! `value`; the request carries an `Idempotency-Key` (the log's identity and the batch's
//! offsets) and, with a signing key, an HMAC-SHA-256 signature of its body.
//!
//! A 2xx moves the cursor (siphon's own, in the data directory). A 408, a 429, a 5xx or no
//! answer is retried with backoff, the same body and key each time; any other status stops
//! the sink with the status and the body of the answer. A crash between the receiver's 2xx
//! and the cursor sends the batch again: at least once, and a receiver drops what it saw by
//! each event's `id` (after a restart a batch may be cut differently, so the
//! `Idempotency-Key` dedupes retries of one request only).

mod config;
mod sink;

pub use config::HttpSinkConfig;
pub use sink::{HttpSink, SIGNATURE_HEADER};

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "http"`.
#[derive(Debug)]
pub struct HttpSinkKind;

impl Kind for HttpSinkKind {
    const NAME: &'static str = "http";
    type Config = HttpSinkConfig;

    fn validate(config: &HttpSinkConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SinkKind for HttpSinkKind {
    fn build(config: &HttpSinkConfig, pipeline: &str, _sink: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(HttpSink::new(config, pipeline)?))
    }
}
