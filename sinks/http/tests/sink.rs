//! The webhook sink against a receiver in the test: retried requests carry the same body and
//! `Idempotency-Key`, a 4xx stops the sink with the answer, bodies are signed, and every
//! event carries its own id.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use siphon_core::event::{Op, Value};
use siphon_core::sink::{Sink, SinkBatch, SinkRecord};
use siphon_core::testing::{
    Delivered, OnBroker, event, log_id, record, row, run_message_compliance_suite, tables,
};
use siphon_sink_http::{HttpSink, HttpSinkConfig, SIGNATURE_HEADER};

/// A request as the receiver got it: its Idempotency-Key, signature and body.
type Got = (String, Option<String>, Vec<u8>);

/// What the receiver answers next (200 once they run out), and what it got.
#[derive(Debug, Default)]
struct Receiver {
    answers: Mutex<VecDeque<(u16, &'static str)>>,
    got: Mutex<Vec<Got>>,
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, &'static str) {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    receiver.got.lock().unwrap().push((
        header("Idempotency-Key").unwrap_or_default(),
        header(SIGNATURE_HEADER),
        body.to_vec(),
    ));
    let (status, text) = receiver
        .answers
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or((200, "ok"));
    (StatusCode::from_u16(status).unwrap(), text)
}

/// A receiver answering `answers` first, on a free port; its URL.
async fn receiver(answers: &[(u16, &'static str)]) -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver {
        answers: Mutex::new(answers.iter().copied().collect()),
        got: Mutex::default(),
    });
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .route("/hook/{token}", axum::routing::post(receive))
        // A POST answered 302, whose GET would be answered 200.
        .route(
            "/moved",
            axum::routing::post(|| async {
                (StatusCode::FOUND, [("location", "/elsewhere")], "moved")
            }),
        )
        .route("/elsewhere", axum::routing::get(|| async { "ok" }))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (receiver, url)
}

fn batch(offsets: std::ops::Range<u64>) -> SinkBatch {
    let records: Vec<SinkRecord> = offsets
        .map(|offset| {
            let id = offset as i64;
            record(
                offset,
                event(
                    "compliance",
                    Op::Create,
                    id,
                    None,
                    Some(row(id, "x", Value::Null)),
                ),
            )
        })
        .collect();
    SinkBatch::whole(records)
}

async fn sink(url: &str, key: Option<&str>) -> HttpSink {
    let config: HttpSinkConfig = serde_json::from_value(serde_json::json!({
        "url": url,
        "schemas": false,
        "signing_key": key,
    }))
    .unwrap();
    let mut sink = HttpSink::new(&config, "demo").unwrap();
    sink.open(&tables(), &log_id()).await.unwrap();
    sink
}

#[tokio::test]
async fn a_batch_answered_500_is_sent_again_the_same_and_signed() {
    let (receiver, url) = receiver(&[(500, "busy"), (503, "still busy")]).await;
    let mut sink = sink(&url, Some("s3cret")).await;
    let shown = format!("{sink:?}");
    let as_bytes = format!("{:?}", b"s3cret".to_vec());
    assert!(
        !shown.contains("s3cret") && !shown.contains(&as_bytes[1..as_bytes.len() - 1]),
        "the key in {shown}"
    );
    sink.apply(&batch(10..13)).await.unwrap();
    let got = receiver.got.lock().unwrap().clone();
    assert_eq!(got.len(), 3, "two refusals and the request taken");
    assert!(
        got.iter().all(|g| *g == got[0]),
        "every attempt the same key, signature and body"
    );
    let (key, signature, body) = &got[0];
    assert!(key.starts_with(&format!("{}:10-13:", log_id())), "{key}");
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(signature.as_deref(), Some(format!("sha256={hex}").as_str()));
    let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
    let events = doc["events"].as_array().unwrap();
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        (10..13)
            .map(|o| format!("{}:{o}", log_id()))
            .collect::<Vec<_>>()
    );
    assert_eq!(events[0]["destination"], "demo.public.compliance");
    assert_eq!(events[0]["key"], serde_json::json!({ "id": 10 }));
    assert_eq!(events[0]["value"]["after"]["name"], "x");
    assert_eq!(events[0]["op"], "c");
}

#[tokio::test]
async fn a_4xx_stops_the_sink_with_the_answer_and_no_answer_is_retried_then_transient() {
    let (receiver, url) = receiver(&[(400, "no such table: compliance")]).await;
    let mut refused = sink(&url, None).await;
    let error = refused.apply(&batch(0..2)).await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    assert!(
        error.to_string().contains("400") && error.to_string().contains("no such table"),
        "{error}"
    );
    assert_eq!(
        receiver.got.lock().unwrap().len(),
        1,
        "a 400 is not sent again"
    );
    assert!(
        receiver.got.lock().unwrap()[0].1.is_none(),
        "unsigned without a key"
    );

    // Nobody listening: the attempts run out, and the error is transient (the runtime opens
    // the sink again and goes on from its cursor).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let config: HttpSinkConfig =
        serde_json::from_value(serde_json::json!({ "url": url, "attempts": 2 })).unwrap();
    let mut unanswered = HttpSink::new(&config, "demo").unwrap();
    unanswered.open(&tables(), &log_id()).await.unwrap();
    let error = unanswered.apply(&batch(0..1)).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
}

/// A redirect is not followed (it would turn the POST into a GET without the events, and a
/// 200 to that would move the cursor past them): a 3xx stops the sink. A token in the URL's
/// path is not in the error.
#[tokio::test]
async fn a_redirect_stops_the_sink_and_a_token_in_the_url_stays_out_of_errors() {
    let (moving, url) = receiver(&[]).await;
    let moved = url.replace("/hook", "/moved");
    let mut sink_moved = sink(&moved, None).await;
    let error = sink_moved.apply(&batch(0..2)).await.unwrap_err();
    assert!(
        !error.is_transient() && error.to_string().contains("302"),
        "{error}"
    );

    drop(moving);
    let (_refusing, url) = receiver(&[(400, "bad")]).await;
    let mut tokened = sink(&format!("{url}/T0KEN-abc123"), None).await;
    let error = tokened.apply(&batch(0..1)).await.unwrap_err();
    assert!(error.to_string().contains("400"), "{error}");
    assert!(!error.to_string().contains("T0KEN"), "{error}");
}

/// The test's receiver for a compliance check (it answers every request).
#[derive(Debug)]
struct Broker {
    receiver: Arc<Receiver>,
    url: String,
}

#[async_trait::async_trait]
impl siphon_core::testing::Broker for Broker {
    type Sink = HttpSink;

    fn sink(&self) -> HttpSink {
        let config: HttpSinkConfig =
            serde_json::from_value(serde_json::json!({ "url": self.url, "schemas": false }))
                .unwrap();
        HttpSink::new(&config, "demo").unwrap()
    }

    async fn messages(&mut self, table: &str) -> Vec<Delivered> {
        let got = self.receiver.got.lock().unwrap().clone();
        got.iter()
            .flat_map(|(_, _, body)| {
                let body: serde_json::Value = serde_json::from_slice(body).unwrap();
                body["events"].as_array().unwrap().clone()
            })
            .filter(|e| e["destination"] == format!("demo.public.{table}"))
            .map(|e| (e["id"].as_str().unwrap().to_owned(), e["value"].clone()))
            .collect()
    }

    fn exactly_once(&self) -> bool {
        false
    }

    /// A webhook has no connection to break: each request stands alone.
    async fn break_connection(&mut self) -> bool {
        false
    }
}

#[tokio::test]
async fn the_http_sink_keeps_the_message_sinks_promises() {
    run_message_compliance_suite(async || {
        let (receiver, url) = receiver(&[]).await;
        OnBroker::new(Broker { receiver, url })
    })
    .await;
}
