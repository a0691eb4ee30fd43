//! The NATS JetStream sink passes the sink and message-sink compliance suites against NATS
//! servers of the test's own (what it published read back from the stream, each subject in
//! its order), and the errors a user meets against the test server.

use siphon_core::sink::{Sink, SinkBatch};
use siphon_core::testing::{
    Delivered, OnBroker, creates, log_id, run_compliance_suite, run_message_compliance_suite,
    tables,
};
use siphon_sink_nats::{NatsSink, NatsSinkConfig};
use siphon_test_support::{NatsNamespace, nats, nats_messages};

/// A sink of pipeline `demo` on the test server, its stream and subjects named by the
/// namespace's prefix.
fn sink_on(ns: &NatsNamespace, extra: serde_json::Value) -> NatsSink {
    let mut config = serde_json::json!({
        "url": ns.url,
        "schemas": false,
        "prefix": ns.prefix,
        "storage": "memory",
    });
    if let serde_json::Value::Object(extra) = extra {
        config.as_object_mut().unwrap().extend(extra);
    }
    let config: NatsSinkConfig = serde_json::from_value(config).unwrap();
    NatsSink::new(&config, "demo", "out").unwrap()
}

/// A message published carries the event's id as Nats-Msg-Id and siphon's headers; a sink
/// opened again starts after the stream's last message it published, and not after another
/// sink's.
#[tokio::test]
async fn a_reopened_sink_starts_after_its_last_message_in_the_stream() {
    let ns = nats().await.unwrap();
    let client = ns.client().await.unwrap();
    let mut sink = sink_on(&ns, serde_json::json!({}));
    assert_eq!(sink.open(&tables(), &log_id()).await.unwrap(), None);
    sink.apply(&SinkBatch::whole(creates(0, 0..5)))
        .await
        .unwrap();
    let messages = nats_messages(&client, &ns.prefix, None).await.unwrap();
    assert_eq!(messages.len(), 5);
    let last = messages[4].headers.as_ref().unwrap();
    assert_eq!(
        last.get("Nats-Msg-Id").unwrap().as_str(),
        format!("{}:4", log_id())
    );
    assert_eq!(last.get("siphon.offset").unwrap().as_str(), "4");
    assert_eq!(last.get("siphon.op").unwrap().as_str(), "c");
    assert_eq!(last.get("siphon.sink").unwrap().as_str(), "demo.out");
    assert_eq!(last.get("debezium.key").unwrap().as_str(), r#"{"id":4}"#);

    let mut again = sink_on(&ns, serde_json::json!({}));
    let cursor = again.open(&tables(), &log_id()).await.unwrap().unwrap();
    assert_eq!(cursor.next_offset, 5);
    assert_eq!(cursor.log.as_ref(), Some(&log_id()));

    // Another sink's message last in the stream says nothing about this one.
    let config: NatsSinkConfig = serde_json::from_value(serde_json::json!({
        "url": ns.url, "prefix": ns.prefix, "storage": "memory",
    }))
    .unwrap();
    let mut other = NatsSink::new(&config, "demo", "other").unwrap();
    other.open(&tables(), &log_id()).await.unwrap();
    other
        .apply(&SinkBatch::whole(creates(100, 100..101)))
        .await
        .unwrap();
    let mut third = sink_on(&ns, serde_json::json!({}));
    assert_eq!(third.open(&tables(), &log_id()).await.unwrap(), None);
}

/// A stream that does not take a table's subjects stops the sink when it opens (its events
/// would go nowhere); a missing stream the sink may not create, too.
#[tokio::test]
async fn subjects_no_stream_takes_are_refused_at_open() {
    let ns = nats().await.unwrap();
    let mut narrow = sink_on(
        &ns,
        serde_json::json!({ "subjects": [format!("{}.public.compliance", ns.prefix)] }),
    );
    let error = narrow.open(&tables(), &log_id()).await.unwrap_err();
    assert!(
        !error.is_transient() && error.to_string().contains("compliance_other"),
        "{error}"
    );
    let other = nats().await.unwrap();
    let mut missing = sink_on(&other, serde_json::json!({ "create_stream": false }));
    let error = missing.open(&tables(), &log_id()).await.unwrap_err();
    assert!(
        !error.is_transient() && error.to_string().contains("does not exist"),
        "{error}"
    );
}

#[derive(Debug)]
/// The NATS server of a compliance check: one of the test's own (restarted to break the
/// sink's connection; its stream on disk).
struct Broker {
    server: siphon_test_support::PrivateNats,
}

#[async_trait::async_trait]
impl siphon_core::testing::Broker for Broker {
    type Sink = NatsSink;

    fn sink(&self) -> NatsSink {
        let config: NatsSinkConfig = serde_json::from_value(serde_json::json!({
            "url": self.server.url(), "prefix": "demo", "schemas": false, "timeout": "2s",
        }))
        .unwrap();
        NatsSink::new(&config, "demo", "out").unwrap()
    }

    async fn messages(&mut self, table: &str) -> Vec<Delivered> {
        let client = async_nats::connect(self.server.url()).await.unwrap();
        nats_messages(&client, "demo", Some(&format!("demo.public.{table}")))
            .await
            .unwrap()
            .into_iter()
            .map(|m| {
                let id = m.headers.as_ref().unwrap().get("siphon.id").unwrap();
                (id.to_string(), serde_json::from_slice(&m.payload).unwrap())
            })
            .collect()
    }

    fn exactly_once(&self) -> bool {
        true
    }

    async fn break_connection(&mut self) -> bool {
        self.server.restart().unwrap();
        true
    }
}

impl Broker {
    fn start() -> Broker {
        Broker {
            server: siphon_test_support::PrivateNats::start().unwrap(),
        }
    }
}

#[tokio::test]
async fn the_nats_sink_keeps_every_promise() {
    run_compliance_suite(async || OnBroker::new(Broker::start())).await;
}

#[tokio::test]
async fn the_nats_sink_keeps_the_message_sinks_promises() {
    run_message_compliance_suite(async || OnBroker::new(Broker::start())).await;
}
