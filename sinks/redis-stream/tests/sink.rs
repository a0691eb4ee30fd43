//! The Redis Streams sink passes the sink and message-sink compliance suites against Redis
//! servers of the test's own (what it added read back with XRANGE, each stream in its order),
//! and the errors a user meets against the test Redis.

use siphon_core::sink::Sink;
use siphon_core::testing::{
    Delivered, OnBroker, creates, run_compliance_suite, run_message_compliance_suite,
};
use siphon_sink_redis_stream::{RedisStreamConfig, RedisStreamSink};
use siphon_test_support::{RedisKeyspace, redis};

/// A stream entry as XRANGE gives it: its id and its fields.
type Entry = (String, Vec<(String, Vec<u8>)>);

/// Each entry of `stream`, in the stream's order: its `id` field and its `value`.
async fn entries(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
) -> Vec<(String, serde_json::Value)> {
    let found: Vec<Entry> = ::redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    found
        .into_iter()
        .map(|(_, fields)| {
            let field = |name: &str| &fields.iter().find(|(n, _)| n == name).unwrap().1;
            (
                String::from_utf8(field("id").clone()).unwrap(),
                serde_json::from_slice(field("value")).unwrap(),
            )
        })
        .collect()
}

/// The `value` of each entry of `stream`, in the stream's order.
async fn values(cache: &RedisKeyspace, stream: &str) -> Vec<serde_json::Value> {
    let mut conn = cache.conn().await.unwrap();
    let found = entries(&mut conn, stream).await;
    found.into_iter().map(|(_, value)| value).collect()
}

/// A sink on the test server, its streams and cursor under the keyspace's prefix.
fn sink_on(cache: &RedisKeyspace, destination: &str, max_len: Option<u64>) -> RedisStreamSink {
    let config: RedisStreamConfig = serde_json::from_value(serde_json::json!({
        "url": cache.url,
        "destination": destination,
        "prefix": format!("{}demo", cache.prefix),
        "cursor_key": format!("{}cursor", cache.prefix),
        "max_len": max_len,
    }))
    .unwrap();
    RedisStreamSink::new(&config, "demo", "out").unwrap()
}

#[tokio::test]
async fn streams_are_trimmed_and_a_lost_cursor_or_an_interleaved_single_stream_is_refused() {
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{log_id, tables};
    let cache = redis().await.unwrap();
    let stream = format!("{}demo.public.compliance", cache.prefix);

    // MAXLEN ~ keeps about max_len entries (Redis trims whole nodes of 100 entries).
    let mut sink = sink_on(&cache, "{prefix}.{schema}.{table}", Some(10));
    sink.open(&tables(), &log_id()).await.unwrap();
    for chunk in 0..5 {
        let batch = SinkBatch::whole(creates(
            chunk * 100,
            chunk as i64 * 100..(chunk as i64 + 1) * 100,
        ));
        sink.apply(&batch).await.unwrap();
    }
    let left = values(&cache, &stream).await.len();
    assert!(left < 500, "{left} entries of 500 left with max_len = 10");

    // The data gone (a flush, a restart without persistence) while the cursor was set: the
    // sink says so (transient: reopened, it finds no cursor and the runtime rebuilds).
    let mut conn = cache.conn().await.unwrap();
    let _: () = ::redis::cmd("DEL")
        .arg(format!("{}cursor", cache.prefix))
        .arg(&stream)
        .query_async(&mut conn)
        .await
        .unwrap();
    let lost = sink
        .apply(&SinkBatch::whole(creates(500, 500..501)))
        .await
        .unwrap_err();
    assert!(
        lost.is_transient() && lost.to_string().contains("lost its data"),
        "{lost}"
    );
    assert!(
        values(&cache, &stream).await.is_empty(),
        "an entry added past a lost cursor"
    );

    // One stream for every table, read interleaved (a consumer group's member): refused.
    let mut single = sink_on(&cache, "{prefix}.all", None);
    single.open(&tables(), &log_id()).await.unwrap();
    let interleaved = SinkBatch {
        ordered: false,
        ..SinkBatch::whole(creates(0, 0..1))
    };
    let refused = single.apply(&interleaved).await.unwrap_err();
    assert!(
        !refused.is_transient() && refused.to_string().contains("{table}"),
        "{refused}"
    );
}

/// A stream another writer got to first (another pipeline's entries, past the ids this log's
/// events take): Redis refuses the sink's entries as "equal or smaller", which must not be
/// taken for entries added before. The sink stops, naming the stream, and its cursor stays.
#[tokio::test]
async fn a_stream_another_writer_got_to_first_stops_the_sink() {
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{log_id, tables};
    let cache = redis().await.unwrap();
    let stream = format!("{}demo.public.compliance", cache.prefix);
    let mut conn = cache.conn().await.unwrap();
    let _: String = ::redis::cmd("XADD")
        .arg(&stream)
        .arg("0-1000")
        .arg("id")
        .arg("another-log:999")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut sink = sink_on(&cache, "{prefix}.{schema}.{table}", None);
    sink.open(&tables(), &log_id()).await.unwrap();
    let error = sink
        .apply(&SinkBatch::whole(creates(0, 0..3)))
        .await
        .unwrap_err();
    assert!(
        !error.is_transient() && error.to_string().contains(&stream),
        "{error}"
    );
    let cursor: Option<String> = ::redis::cmd("GET")
        .arg(format!("{}cursor", cache.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(cursor, None, "the cursor moved past entries never added");
}

#[derive(Debug)]
/// The Redis of a compliance check: a server of the test's own (killed -9 and started again
/// to break the sink's connection; its data in an append-only file).
struct Broker {
    server: siphon_test_support::PrivateRedis,
}

#[async_trait::async_trait]
impl siphon_core::testing::Broker for Broker {
    type Sink = RedisStreamSink;

    fn sink(&self) -> RedisStreamSink {
        let config: RedisStreamConfig = serde_json::from_value(serde_json::json!({
            "url": self.server.url(), "prefix": "demo", "schemas": false,
        }))
        .unwrap();
        RedisStreamSink::new(&config, "demo", "out").unwrap()
    }

    async fn messages(&mut self, table: &str) -> Vec<Delivered> {
        let mut conn = siphon_test_support::redis_conn(&self.server.url())
            .await
            .unwrap();
        entries(&mut conn, &format!("demo.public.{table}")).await
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
            server: siphon_test_support::PrivateRedis::start().unwrap(),
        }
    }
}

#[tokio::test]
async fn the_redis_stream_sink_keeps_every_promise() {
    run_compliance_suite(async || OnBroker::new(Broker::start())).await;
}

#[tokio::test]
async fn the_redis_stream_sink_keeps_the_message_sinks_promises() {
    run_message_compliance_suite(async || OnBroker::new(Broker::start())).await;
}

#[tokio::test]
async fn row_state_values_and_dropped_deletes() {
    use siphon_core::event::{Op, Value as V};
    use siphon_core::sink::SinkBatch;
    use siphon_core::testing::{event, log_id, record, row, tables};
    let cache = redis().await.unwrap();
    let config: RedisStreamConfig = serde_json::from_value(serde_json::json!({
        "url": cache.url,
        "schemas": false,
        "prefix": format!("{}demo", cache.prefix),
        "cursor_key": format!("{}cursor", cache.prefix),
        "value": "row",
        "deletes": "drop",
    }))
    .unwrap();
    let mut sink = RedisStreamSink::new(&config, "demo", "out").unwrap();
    sink.open(&tables(), &log_id()).await.unwrap();
    let created = event(
        "compliance",
        Op::Create,
        1,
        None,
        Some(row(1, "one", V::Null)),
    );
    let deleted = event(
        "compliance",
        Op::Delete,
        1,
        Some(row(1, "one", V::Null)),
        None,
    );
    sink.apply(&SinkBatch::whole(vec![
        record(0, created),
        record(1, deleted),
    ]))
    .await
    .unwrap();
    let stream = format!("{}demo.public.compliance", cache.prefix);
    let got = values(&cache, &stream).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["name"], "one");
    assert_eq!(got[0]["__op"], "c");
    assert_eq!(got[0]["__table"], "compliance");
    let reopened = sink.open(&tables(), &log_id()).await.unwrap().unwrap();
    assert_eq!(reopened.next_offset, 2);
}
