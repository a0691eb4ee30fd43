//! The RabbitMQ sink against the test RabbitMQ server: the message-sink compliance suite
//! (a queue bound to the sink's exchange is the consumer), and the errors a user meets.

use siphon_core::sink::{Sink, SinkBatch};
use siphon_core::testing::{
    Delivered, OnBroker, TABLE, event, log_id, record, row, run_message_compliance_suite, tables,
};
use siphon_sink_rabbitmq::{RabbitmqSink, RabbitmqSinkConfig};
use siphon_test_support::{RabbitExchange, rabbitmq, rabbitmq_close_connections};

/// A sink of pipeline `demo` publishing to the test's exchange, with `extra` settings.
fn sink_on(ex: &RabbitExchange, sink: &str, extra: serde_json::Value) -> RabbitmqSink {
    let mut config = serde_json::json!({
        "url": ex.url,
        "exchange": ex.exchange,
        "schemas": false,
    });
    if let serde_json::Value::Object(extra) = extra {
        config.as_object_mut().unwrap().extend(extra);
    }
    let config: RabbitmqSinkConfig = serde_json::from_value(config).unwrap();
    RabbitmqSink::new(&config, "demo", sink).unwrap()
}

/// The test broker's exchange for a compliance check, and the sink's name there (its
/// connection's, which the check closes by it).
#[derive(Debug)]
struct Broker {
    ex: RabbitExchange,
    name: String,
    got: Vec<Delivered>,
}

#[async_trait::async_trait]
impl siphon_core::testing::Broker for Broker {
    type Sink = RabbitmqSink;

    fn sink(&self) -> RabbitmqSink {
        sink_on(&self.ex, &self.name, serde_json::json!({}))
    }

    /// What the queue bound to the exchange got (the compliance table's only).
    async fn messages(&mut self, _table: &str) -> Vec<Delivered> {
        for event in self.ex.drain_events().await.unwrap() {
            self.got.push((event.id, event.value));
        }
        self.got.clone()
    }

    fn exactly_once(&self) -> bool {
        false
    }

    async fn break_connection(&mut self) -> bool {
        let closed = rabbitmq_close_connections(&format!("demo.{}", self.name)).unwrap();
        assert_eq!(closed, 1, "the sink's connection");
        true
    }
}

#[tokio::test]
async fn the_rabbitmq_sink_keeps_the_message_sinks_promises() {
    let n = std::sync::atomic::AtomicUsize::new(0);
    run_message_compliance_suite(async || {
        OnBroker::new(Broker {
            ex: rabbitmq().await.unwrap(),
            name: format!(
                "compliance{}_{}",
                std::process::id(),
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            got: Vec::new(),
        })
    })
    .await;
}

/// Each message is persistent, with the event's id as `message_id`, siphon's headers and
/// Debezium's key.
#[tokio::test]
async fn a_message_carries_its_id_and_headers() {
    let ex = rabbitmq().await.unwrap();
    let mut sink = sink_on(&ex, "out", serde_json::json!({}));
    sink.open(&tables(), &log_id()).await.unwrap();
    let created = event(
        TABLE,
        siphon_core::event::Op::Create,
        7,
        None,
        Some(row(7, "seven", siphon_core::event::Value::Null)),
    );
    sink.apply(&SinkBatch::whole(vec![record(41, created)]))
        .await
        .unwrap();
    let got = ex.drain().await.unwrap();
    assert_eq!(got.len(), 1);
    let message = &got[0];
    assert_eq!(message.routing_key.as_str(), "demo.public.compliance");
    let properties = &message.properties;
    assert_eq!(
        properties.message_id().as_ref().unwrap().as_str(),
        format!("{}:41", log_id())
    );
    assert_eq!(*properties.delivery_mode(), Some(2));
    let headers = properties.headers().as_ref().unwrap();
    let text = |name: &str| match headers.inner().get(name) {
        Some(lapin::types::AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("header {name}: {other:?}"),
    };
    assert_eq!(text("siphon.offset"), "41");
    assert_eq!(text("siphon.op"), "c");
    assert_eq!(text("debezium.key"), r#"{"id":7}"#);
    let value: serde_json::Value = serde_json::from_slice(&message.data).unwrap();
    assert_eq!(value["after"]["name"], "seven");
}

/// A message no queue takes comes back (it is published mandatory): the record is
/// rejected, naming the routing key, not dropped; a missing exchange the sink may not
/// declare stops it when it opens.
#[tokio::test]
async fn a_message_routed_nowhere_is_an_error() {
    let ex = rabbitmq().await.unwrap();
    // An exchange of the sink's own, which no queue is bound to.
    let unbound = format!("{}_unbound", ex.exchange);
    let mut sink = sink_on(&ex, "out", serde_json::json!({ "exchange": unbound }));
    sink.open(&tables(), &log_id()).await.unwrap();
    let created = event(
        TABLE,
        siphon_core::event::Op::Create,
        1,
        None,
        Some(row(1, "x", siphon_core::event::Value::Null)),
    );
    let error = sink
        .apply(&SinkBatch::whole(vec![record(0, created)]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, siphon_core::Error::Rejected { offset: 0, .. })
            && error.to_string().contains("demo.public.compliance"),
        "{error}"
    );
    ex.channel()
        .await
        .unwrap()
        .exchange_delete(unbound.as_str().into(), Default::default())
        .await
        .unwrap();
    let mut missing = sink_on(
        &ex,
        "out",
        serde_json::json!({ "exchange": format!("{}_missing", ex.exchange), "declare_exchange": false }),
    );
    let error = missing.open(&tables(), &log_id()).await.unwrap_err();
    assert!(
        !error.is_transient() && error.to_string().contains("_missing"),
        "{error}"
    );
}
