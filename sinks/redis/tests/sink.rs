//! The Redis sink against the local redis-server: the compliance suite in both formats, and
//! what only Redis has (invalidation, TTL, truncate by key pattern, a rejected record).

use std::collections::BTreeMap;

use redis::AsyncCommands;
use siphon_core::sink::Sink;
use siphon_core::testing::{
    SinkHarness, StoreState, TABLE, apply, compliance_table, cursor, event, log_id, record, row,
    run_compliance_suite,
};
use siphon_core::{Error, Op, Row, Value};
use siphon_sink_redis::{RedisFormat, RedisMode, RedisSink, RedisSinkConfig};
use siphon_test_support::{RedisKeyspace, redis};

struct Harness {
    keyspace: RedisKeyspace,
    sink: RedisSink,
    format: RedisFormat,
}

fn config(keyspace: &RedisKeyspace, format: RedisFormat) -> RedisSinkConfig {
    RedisSinkConfig {
        prefix: keyspace.prefix.clone(),
        format,
        ..RedisSinkConfig::new(keyspace.url.clone())
    }
}

async fn harness(format: RedisFormat) -> Harness {
    let keyspace = redis().await.expect("redis");
    let sink = RedisSink::new(config(&keyspace, format), "p", "s").unwrap();
    Harness {
        keyspace,
        sink,
        format,
    }
}

/// A stored row as the compliance table's columns: id as an integer, the rest as text.
fn parse(fields: &BTreeMap<String, String>) -> Row {
    let text = |c: &str| {
        fields
            .get(c)
            .map_or(Value::Null, |v| Value::Text(v.clone()))
    };
    Row(vec![
        ("id".into(), Value::Int(fields["id"].parse().unwrap())),
        ("name".into(), text("name")),
        ("note".into(), text("note")),
    ])
}

#[async_trait::async_trait]
impl SinkHarness for Harness {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        let mut conn = self.keyspace.conn().await.unwrap();
        let keys: Vec<String> = conn
            .keys(format!("{}{table}:*", self.keyspace.prefix))
            .await
            .unwrap();
        let mut rows = BTreeMap::new();
        for key in keys {
            let fields: BTreeMap<String, String> = match self.format {
                RedisFormat::Hash => conn.hgetall(&key).await.unwrap(),
                RedisFormat::Json => {
                    let doc: String = conn.get(&key).await.unwrap();
                    let doc: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_str(&doc).unwrap();
                    doc.into_iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| (k, v.as_str().map_or(v.to_string(), str::to_owned)))
                        .collect()
                }
            };
            let row = parse(&fields);
            let Some(Value::Int(id)) = row.get("id").cloned() else {
                unreachable!()
            };
            assert_eq!(key, format!("{}{table}:{id}", self.keyspace.prefix));
            rows.insert(id, row);
        }
        StoreState::Rows(rows)
    }
}

#[tokio::test]
async fn hash_format_passes_the_compliance_suite() {
    run_compliance_suite(async || harness(RedisFormat::Hash).await).await;
}

#[tokio::test]
async fn json_format_passes_the_compliance_suite() {
    run_compliance_suite(async || harness(RedisFormat::Json).await).await;
}

#[tokio::test]
async fn json_format_fills_an_unchanged_column_from_the_stored_document() {
    let mut h = harness(RedisFormat::Json).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let big = "x".repeat(5000);
    let create = event(
        TABLE,
        Op::Create,
        1,
        None,
        Some(row(1, "a", Value::Text(big.clone()))),
    );
    let update = event(
        TABLE,
        Op::Update,
        1,
        None,
        Some(row(1, "b", Value::Unchanged)),
    );
    // Separate batches: the second must read the stored document.
    apply(&mut h.sink, &[record(0, create)]).await.unwrap();
    apply(&mut h.sink, &[record(1, update)]).await.unwrap();
    let StoreState::Rows(rows) = h.state().await else {
        unreachable!()
    };
    assert_eq!(rows[&1].get("note"), Some(&Value::Text(big)));
    assert_eq!(rows[&1].get("name"), Some(&Value::Text("b".into())));
}

#[tokio::test]
async fn the_cursor_is_stored_with_the_data_and_reset_clears_both() {
    let mut h = harness(RedisFormat::Hash).await;
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        None
    );
    apply(
        &mut h.sink,
        &[record(
            41,
            event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
        )],
    )
    .await
    .unwrap();
    let mut reopened = RedisSink::new(config(&h.keyspace, RedisFormat::Hash), "p", "s").unwrap();
    assert_eq!(
        reopened
            .open(&[compliance_table()], &log_id())
            .await
            .unwrap(),
        Some(cursor(42))
    );
    reopened.reset(&[compliance_table()]).await.unwrap();
    assert_eq!(
        reopened
            .open(&[compliance_table()], &log_id())
            .await
            .unwrap(),
        None
    );
    assert_eq!(h.state().await, StoreState::Rows(BTreeMap::new()));
}

#[tokio::test]
async fn truncate_removes_only_its_tables_keys_and_later_writes_stay() {
    let mut h = harness(RedisFormat::Hash).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let other = event(
        "other",
        Op::Create,
        1,
        None,
        Some(row(1, "keep", Value::Null)),
    );
    apply(
        &mut h.sink,
        &[
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
            ),
            record(
                1,
                event(TABLE, Op::Create, 2, None, Some(row(2, "b", Value::Null))),
            ),
            record(2, other),
            record(3, event(TABLE, Op::Truncate, 0, None, None)),
            record(
                4,
                event(TABLE, Op::Create, 3, None, Some(row(3, "c", Value::Null))),
            ),
        ],
    )
    .await
    .unwrap();
    let StoreState::Rows(rows) = h.state().await else {
        unreachable!()
    };
    assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [3]);
    let mut conn = h.keyspace.conn().await.unwrap();
    let kept: Option<String> = conn
        .hget(format!("{}other:1", h.keyspace.prefix), "name")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("keep"));
}

#[tokio::test]
async fn invalidate_mode_deletes_the_key_on_every_change() {
    let keyspace = redis().await.expect("redis");
    let mut conn = keyspace.conn().await.unwrap();
    let key = format!("{}{TABLE}:1", keyspace.prefix);
    let _: () = conn.set(&key, "cached by the application").await.unwrap();
    let mut sink = RedisSink::new(
        RedisSinkConfig {
            mode: RedisMode::Invalidate,
            ..config(&keyspace, RedisFormat::Hash)
        },
        "p",
        "s",
    )
    .unwrap();
    sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(
        &mut sink,
        &[record(
            0,
            event(TABLE, Op::Update, 1, None, Some(row(1, "a", Value::Null))),
        )],
    )
    .await
    .unwrap();
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(!exists, "the changed row's key was not invalidated");
}

#[tokio::test]
async fn ttl_expires_written_keys() {
    let keyspace = redis().await.expect("redis");
    let mut sink = RedisSink::new(
        RedisSinkConfig {
            ttl: Some(siphon_core::units::HumanDuration(
                std::time::Duration::from_secs(60),
            )),
            ..config(&keyspace, RedisFormat::Hash)
        },
        "p",
        "s",
    )
    .unwrap();
    sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(
        &mut sink,
        &[record(
            0,
            event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
        )],
    )
    .await
    .unwrap();
    let mut conn = keyspace.conn().await.unwrap();
    let ttl: i64 = conn
        .pttl(format!("{}{TABLE}:1", keyspace.prefix))
        .await
        .unwrap();
    assert!((50_000..=60_000).contains(&ttl), "pttl {ttl}");
}

#[tokio::test]
async fn a_key_redis_refuses_is_rejected_by_offset_after_the_records_before_it_landed() {
    let mut h = harness(RedisFormat::Hash).await;
    let mut conn = h.keyspace.conn().await.unwrap();
    // A string where the sink updates some fields of a hash: HSET answers WRONGTYPE (a whole
    // row replaces whatever the key held).
    let _: () = conn
        .set(format!("{}{TABLE}:2", h.keyspace.prefix), "not a hash")
        .await
        .unwrap();
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let batch = [
        record(
            0,
            event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
        ),
        record(
            1,
            event(
                TABLE,
                Op::Update,
                2,
                None,
                Some(row(2, "b", Value::Unchanged)),
            ),
        ),
        record(
            2,
            event(TABLE, Op::Create, 3, None, Some(row(3, "c", Value::Null))),
        ),
    ];
    match apply(&mut h.sink, &batch).await {
        Err(Error::Rejected {
            offset,
            table,
            reason,
        }) => {
            assert_eq!(
                (offset, table.to_string().as_str()),
                (1, "public.compliance")
            );
            assert!(reason.contains("WRONGTYPE"), "{reason}");
        }
        other => panic!("expected a rejection of offset 1, got {other:?}"),
    }
    // What the runtime does with on_error = "dead_letter": the batch again, without it.
    apply(&mut h.sink, &[batch[0].clone(), batch[2].clone()])
        .await
        .unwrap();
    let name: Option<String> = conn
        .hget(format!("{}{TABLE}:3", h.keyspace.prefix), "name")
        .await
        .unwrap();
    assert_eq!(name.as_deref(), Some("c"));
    let name: Option<String> = conn
        .hget(format!("{}{TABLE}:1", h.keyspace.prefix), "name")
        .await
        .unwrap();
    assert_eq!(name.as_deref(), Some("a"));
}

#[tokio::test]
async fn tables_of_one_name_in_two_schemas_need_the_schema_in_the_key() {
    let mut h = harness(RedisFormat::Hash).await;
    let table = |name: &str| siphon_core::source::TableInfo {
        name: name.parse().unwrap(),
        key_columns: vec!["id".into()],
    };
    let err = h
        .sink
        .open(&[table("a.orders"), table("b.orders")], &log_id())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("{schema}"), "{err}");
}

/// The connection batches are written on, closed by Redis between two batches (a restart, a
/// `CLIENT KILL`, an idle timeout): the next batch fails as retryable, and applied again after
/// the sink is opened again (what the runtime does) lands whole, next to the first.
#[tokio::test]
async fn a_write_connection_redis_closes_is_made_again_and_the_batch_lands_whole() {
    let mut h = harness(RedisFormat::Hash).await;
    // A pipeline name of its own: the test kills only this sink's write connection.
    let pipeline = h.keyspace.prefix.trim_end_matches(':').to_owned();
    h.sink = RedisSink::new(config(&h.keyspace, RedisFormat::Hash), &pipeline, "s").unwrap();
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let create = |offset: u64, id: i64, name: &str| {
        record(
            offset,
            event(
                TABLE,
                Op::Create,
                id,
                None,
                Some(row(id, name, Value::Null)),
            ),
        )
    };
    apply(&mut h.sink, &[create(0, 1, "a")]).await.unwrap();
    let mut conn = h.keyspace.conn().await.unwrap();
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    let name = format!("name=siphon:{pipeline}:s ");
    let ids: Vec<&str> = clients
        .lines()
        .filter(|line| line.contains(&name))
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next())
        .collect();
    assert_eq!(ids.len(), 1, "the sink's write connection in {clients}");
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(ids[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    let batch = [create(1, 2, "b"), create(2, 3, "c")];
    match apply(&mut h.sink, &batch).await {
        Err(e) => assert!(e.is_transient(), "{e}"),
        Ok(()) => panic!("a batch on a closed connection was taken as written"),
    }
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        Some(cursor(1))
    );
    apply(&mut h.sink, &batch).await.unwrap();
    let state = h.state_of(TABLE).await;
    assert_eq!(state.ids(), Some(vec![1, 2, 3]), "{state:?}");
}
