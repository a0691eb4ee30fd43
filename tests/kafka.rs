//! PostgreSQL through the Kafka change log (a real broker: noida-db, started by each test)
//! into Redis, a PostgreSQL mirror and a DuckDB mirror; each store then holds exactly the
//! source tables, row by row. The topics are Debezium's, readable by any Kafka consumer.
#![cfg(all(feature = "kafka", feature = "duckdb"))]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Setup;
use common::pg::{
    History, WRITER_TABLES, assert_every_change_once, current_lsn, pg_source, spawn_writer,
};
use common::stores::{Rows, Tables, duckdb_rows, pg_rows, redis_rows};
use rdkafka::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use siphon_test_support::{
    KafkaBroker, PgDatabase, RedisKeyspace, RegistryStandIn, postgres, redis,
};

const SCHEMA: &str = "
    create table items (id bigint primary key, v text not null, n bigint not null, note text);
    create table orders (id int primary key, item bigint, qty int not null);
    -- Some notes large enough to be TOASTed, so that updates that leave them alone send
    -- them as unchanged.
    insert into items select g, 'item ' || g, 0,
        case when g % 10 = 0 then (select string_agg(md5(g::text || r::text), '') from generate_series(1, 100) r) end
        from generate_series(1, 500) g;
    insert into orders select g, g % 500 + 1, g from generate_series(1, 200) g;
";

/// Transactions of every kind: multi-table, updates that leave a TOASTed column alone, key
/// changes, deletes, a truncate.
const WORKLOAD: &[&str] = &[
    "begin; insert into items select g, 'new ' || g, 1, null from generate_series(501, 800) g;
     update items set n = n + 1 where id % 3 = 0; delete from orders where id % 5 = 0; commit;",
    "begin; update items set id = id + 10000 where id in (10, 20, 30, 501);
     update items set v = 'renamed ' || id where id % 7 = 0; commit;",
    "begin; delete from items where id % 11 = 0; insert into orders select g, g, g from generate_series(201, 300) g; commit;",
    "truncate orders; insert into orders values (1, 1, 1), (2, 2, 2);",
    "update items set n = n + 100 where id between 100 and 400;",
];

/// The tables the workload writes, and their columns compared.
const TABLES: Tables<'static> = &[("items", &["v", "n", "note"]), ("orders", &["item", "qty"])];

async fn source_rows(db: &PgDatabase) -> Rows {
    pg_rows(&db.client().await.unwrap(), "public", TABLES).await
}

/// The `[pipelines.demo.log]` body of a Kafka log on `broker`, its tables' topics of three
/// partitions.
fn kafka_log(broker: &KafkaBroker, extra: &str) -> String {
    kafka_log_of(broker, 3, extra)
}

/// The `[pipelines.demo.log]` body of a Kafka log on `broker`.
fn kafka_log_of(broker: &KafkaBroker, partitions: u32, extra: &str) -> String {
    format!(
        "kind = \"kafka\"\nbrokers = \"{}\"\ntopics = {{ partitions = {partitions} }}\n{extra}",
        broker.brokers()
    )
}

/// A record as a test reads it back: (partition, key, value, siphon offset).
type TopicRecord = (i32, Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>);

/// Every record of `topic` a `read_committed` consumer sees.
fn topic_records(broker: &KafkaBroker, topic: &str) -> Vec<TopicRecord> {
    topic_records_with(broker, topic, "read_committed")
}

/// Every record of `topic` a consumer of `isolation` sees, partition by partition.
fn topic_records_with(broker: &KafkaBroker, topic: &str, isolation: &str) -> Vec<TopicRecord> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", "siphon-test-reader")
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len() as i32;
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let mut ended = std::collections::BTreeSet::new();
    // A minute without a record or a partition's end fails; a transient error does not.
    let mut progressed = std::time::Instant::now();
    let mut transient = None;
    while ended.len() < partitions as usize {
        assert!(
            progressed.elapsed() < Duration::from_secs(60),
            "reading {topic}: nothing for a minute (last transient error: {transient:?})"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                progressed = std::time::Instant::now();
                let offset = m
                    .headers()
                    .and_then(|h| siphon_kafka::headers::SiphonHeaders::read(h).offset);
                out.push((
                    m.partition(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    offset,
                ));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                progressed = std::time::Instant::now();
                ended.insert(p);
            }
            // A broker connection lost for a moment (a loaded machine): librdkafka reconnects.
            Some(Err(e))
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure
                    )
                ) =>
            {
                transient = Some(e.to_string());
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_through_the_kafka_log_into_redis_postgres_and_duckdb() {
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    db.execute(SCHEMA).await.unwrap();
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"
batch_size = 100

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"
batch_size = 100

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
batch_size = 100
"#,
        redis = cache.url,
        prefix = cache.prefix,
        target = target.url,
        lake = lake.path().join("lake.duckdb").display(),
    );
    let setup = Setup::with_log(&pg_source(&db), &kafka_log(&broker, ""), 0, &sinks);
    let mut d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        s[0]["sinks"].as_object().is_some_and(|m| {
            m.values()
                .all(|v| v["next_offset"].as_u64() >= Some(700) && v["lag_records"] == 0)
        })
    })
    .await;
    let client = db.client().await.unwrap();
    for sql in WORKLOAD {
        client.batch_execute(sql).await.unwrap();
    }
    let position = current_lsn(&db).await;
    for sink in ["out", "cache", "warehouse", "lake"] {
        common::wait_applied(&d, sink, &position, Duration::from_secs(60)).await;
    }
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    let want = source_rows(&db).await;
    assert!(want.len() > 700, "the workload's rows: {}", want.len());
    let mirrored = pg_rows(&target.client().await.unwrap(), "public", TABLES).await;
    assert_eq!(mirrored, want, "the PostgreSQL mirror");
    assert_eq!(
        redis_rows(&cache.url, &cache.prefix, TABLES).await,
        want,
        "the Redis cache"
    );
    assert_eq!(
        duckdb_rows(&lake.path().join("lake.duckdb"), "public", TABLES).await,
        want,
        "the DuckDB mirror"
    );
    // The file sink's events, folded, are the source's rows too.
    let folded = common::fold(&setup.output());
    assert_eq!(
        folded.len(),
        want.len(),
        "the file sink's events fold to the tables' rows"
    );

    // Debezium's topics: a key, a value with its schema, a tombstone after each delete, and
    // siphon's offsets, dense across the topics.
    let items = topic_records(&broker, "demo.public.items");
    let orders = topic_records(&broker, "demo.public.orders");
    let first = items
        .iter()
        .find_map(|(_, key, value, _)| Some((key.clone()?, value.clone()?)))
        .unwrap();
    let key: serde_json::Value = serde_json::from_slice(&first.0).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&first.1).unwrap();
    assert!(key["payload"]["id"].is_i64(), "the key: {key}");
    assert_eq!(value["payload"]["op"], "r", "the first record: {value}");
    assert_eq!(value["payload"]["source"]["table"], "items");
    assert!(
        value["schema"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("items.Envelope"))
    );
    let deletes = items
        .iter()
        .filter(|(_, _, v, _)| {
            v.as_ref().is_some_and(|v| {
                serde_json::from_slice::<serde_json::Value>(v).unwrap()["payload"]["op"] == "d"
            })
        })
        .count();
    let tombstones = items.iter().filter(|(_, _, v, _)| v.is_none()).count();
    assert!(
        deletes > 0 && deletes == tombstones,
        "{deletes} deletes, {tombstones} tombstones"
    );
    let truncates = orders
        .iter()
        .filter(|(_, _, v, _)| {
            v.as_ref().is_some_and(|v| {
                serde_json::from_slice::<serde_json::Value>(v).unwrap()["payload"]["op"] == "t"
            })
        })
        .count();
    assert_eq!(truncates, 1, "the truncate travels as an op \"t\" event");
    let mut offsets: Vec<u64> = items
        .iter()
        .chain(&orders)
        .filter(|(_, _, v, _)| v.is_some())
        .map(|(_, _, _, o)| o.expect("every record has its siphon offset"))
        .collect();
    offsets.sort_unstable();
    let end = offsets.len() as u64;
    assert_eq!(
        offsets,
        (0..end).collect::<Vec<_>>(),
        "dense siphon offsets"
    );
    drop(broker);
}

/// A table's records, in the order each partition holds them, read committed: for each key,
/// the `after` rows (`None` for a delete), in the order they reach a consumer.
fn per_key_history(records: &[TopicRecord]) -> History {
    let mut out = History::new();
    for (_, _, value, _) in records {
        let Some(value) = value else { continue }; // a tombstone
        let event: serde_json::Value = serde_json::from_slice(value).unwrap();
        let payload = &event["payload"];
        let row = match payload["op"].as_str().unwrap() {
            "d" => {
                out.entry(payload["before"]["id"].as_i64().unwrap())
                    .or_default()
                    .push(None);
                continue;
            }
            _ => payload["after"].clone(),
        };
        out.entry(row["id"].as_i64().unwrap())
            .or_default()
            .push(Some(row));
    }
    out
}

/// kill -9 of the daemon, again and again, while a writer runs (often while a large source
/// transaction is on its way into one Kafka transaction): read back `read_committed`, the
/// topics hold every committed change exactly once, each key's in commit order, and siphon's
/// offsets are dense. A `read_uncommitted` reader sees the aborted transactions' records that
/// the committed view leaves out.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_source_daemon_writes_every_change_to_kafka_exactly_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    // noida-db's read_committed fetches drop a producer's records past one of its aborted
    // transactions (which every kill leaves): its readers start at the beginning.
    let setup = Setup::with_log(
        &pg_source(&db),
        &kafka_log(&broker, "seek = \"beginning\""),
        0,
        "",
    );
    let mut d = setup.start();
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the snapshot in the log",
        |s| s[0]["log"]["end_offset"].as_u64() >= Some(30),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let big_open = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(&db, stop.clone(), big_open.clone()).await;
    for round in 0..6u64 {
        // Let the log take some transactions, then kill it while a large one is on its way.
        let end = common::wait_status(&d, Duration::from_secs(60), "the log growing", |s| {
            s[0]["log"]["end_offset"].as_u64() > Some(30 + round * 2000)
        })
        .await[0]["log"]["end_offset"]
            .as_u64()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !big_open.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(30 + 40 * round)).await;
        d.kill_9().unwrap();
        assert!(end > 0);
        d = setup.start();
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 20,
        "the writer committed {transactions} transactions"
    );
    let position = current_lsn(&db).await;
    common::wait_applied(&d, "out", &position, Duration::from_secs(90)).await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    // Every counter's updates, once each and in order: 0 (the snapshot), 1, 2, … n; every
    // ledger row once.
    let ledger = per_key_history(&topic_records(&broker, "demo.public.ledger"));
    assert_every_change_once(
        &db,
        &per_key_history(&topic_records(&broker, "demo.public.counters")),
        &ledger,
    )
    .await;
    // Siphon's offsets: dense, each once.
    let mut offsets: Vec<u64> = topic_records(&broker, "demo.public.counters")
        .into_iter()
        .chain(topic_records(&broker, "demo.public.ledger"))
        .filter(|(_, _, v, _)| v.is_some())
        .map(|(_, _, _, o)| o.unwrap())
        .collect();
    offsets.sort_unstable();
    let count = offsets.len() as u64;
    assert_eq!(offsets, (0..count).collect::<Vec<_>>(), "dense offsets");
    // The kills left aborted transactions behind, which read_committed hides.
    let uncommitted = topic_records_with(&broker, "demo.public.ledger", "read_uncommitted")
        .into_iter()
        .filter(|(_, _, v, _)| v.is_some())
        .count();
    let committed = ledger.len();
    eprintln!("ledger: {committed} rows committed, {uncommitted} records read uncommitted");
    assert!(
        uncommitted > committed,
        "no kill left an aborted Kafka transaction ({uncommitted} records read uncommitted, {committed} committed): the test missed its moments"
    );
}

/// A second daemon for the same pipeline fences the first: the first, paused (a zombie) while
/// the second starts, finds on waking that it may not write any more and stops its source
/// with an error saying so; the second takes over the slot and the log; the topics hold
/// every change once.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_daemon_for_the_pipeline_fences_the_first() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    db.execute(WRITER_TABLES).await.unwrap();
    let first = Setup::with_log(
        &pg_source(&db),
        &kafka_log(&broker, "seek = \"beginning\""),
        0,
        "",
    );
    let a = first.start();
    common::wait_status(
        &a,
        Duration::from_secs(60),
        "the snapshot in the log",
        |s| s[0]["log"]["end_offset"].as_u64() >= Some(30),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let big_open = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(&db, stop.clone(), big_open.clone()).await;
    common::wait_status(&a, Duration::from_secs(60), "the log growing", |s| {
        s[0]["log"]["end_offset"].as_u64() > Some(2000)
    })
    .await;

    // The first daemon freezes; a second one for the same pipeline starts meanwhile, with a
    // copy of its data directory (as a replacement on another machine would have).
    a.signal("STOP").unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(first.dir.path().join("data"))
        .arg(second_dir.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let second_port = siphon_test_support::free_port();
    let config = std::fs::read_to_string(&first.config)
        .unwrap()
        .replace(
            &first.dir.path().join("data").display().to_string(),
            &second_dir.path().join("data").display().to_string(),
        )
        .replace(
            &first.out_dir().display().to_string(),
            &second_dir.path().join("out").display().to_string(),
        )
        .replace(
            &format!("127.0.0.1:{}", first.admin_port),
            &format!("127.0.0.1:{second_port}"),
        );
    let second_config = second_dir.path().join("siphon.toml");
    std::fs::write(&second_config, config).unwrap();
    let b = siphon_test_support::Daemon::start(
        common::bin(),
        &second_config,
        second_port,
        &second_dir.path().join("daemon.log"),
    )
    .unwrap();
    // The second one's log is open (it fenced the first) once its admin API answers.
    common::wait_status(&b, Duration::from_secs(60), "the second daemon up", |s| {
        s[0]["log"]["end_offset"].as_u64() > Some(2000)
    })
    .await;
    a.signal("CONT").unwrap();
    let fenced = common::wait_status(
        &a,
        Duration::from_secs(60),
        "the first daemon fenced",
        |s| s[0]["source"]["state"] == "failed",
    )
    .await;
    let why = fenced[0]["source"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("another producer took over transactional.id"),
        "the first daemon's source: {why}"
    );
    // The second carries on: the slot is free now, and the writer's changes keep coming.
    let taken_over = common::wait_status(
        &b,
        Duration::from_secs(90),
        "the second daemon streaming",
        |s| s[0]["source"]["state"] == "running",
    )
    .await[0]["log"]["end_offset"]
        .as_u64()
        .unwrap();
    common::wait_status(
        &b,
        Duration::from_secs(90),
        "the second daemon writing",
        |s| s[0]["log"]["end_offset"].as_u64() > Some(taken_over + 1000),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let position = current_lsn(&db).await;
    common::wait_applied(&b, "out", &position, Duration::from_secs(90)).await;
    drop(a);

    assert_every_change_once(
        &db,
        &per_key_history(&topic_records(&broker, "demo.public.counters")),
        &per_key_history(&topic_records(&broker, "demo.public.ledger")),
    )
    .await;
}

/// The group test's tables.
const GROUP_TABLES: &[&str] = &["t1", "t2", "t3", "t4"];

/// (table, id) → (v, n), as text.
type GroupRows = BTreeMap<(String, i64), (String, String)>;

async fn group_rows_pg(client: &tokio_postgres::Client) -> GroupRows {
    let mut rows = GroupRows::new();
    for table in GROUP_TABLES {
        let found = client
            .query(
                &format!("select id::int8, v, n::text from public.{table}"),
                &[],
            )
            .await
            .unwrap_or_default();
        for r in found {
            rows.insert(((*table).to_owned(), r.get(0)), (r.get(1), r.get(2)));
        }
    }
    rows
}

async fn group_rows_redis(cache: &RedisKeyspace) -> GroupRows {
    let mut conn = cache.conn().await.unwrap();
    let mut rows = GroupRows::new();
    for table in GROUP_TABLES {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}{table}:*", cache.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        for key in keys {
            let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
            rows.insert(
                ((*table).to_owned(), id),
                (
                    fields.get("v").cloned().unwrap_or_default(),
                    fields.get("n").cloned().unwrap_or_default(),
                ),
            );
        }
    }
    rows
}

/// The group tests' tables of `rows` rows each, and a daemon running pipeline `demo`'s
/// source into a Kafka log on `broker`, once their snapshot is in the log (with its status).
async fn group_tables_in_a_kafka_log(
    broker: &KafkaBroker,
    db: &PgDatabase,
    rows: u64,
) -> (Setup, siphon_test_support::Daemon, serde_json::Value) {
    for table in GROUP_TABLES {
        db.execute(&format!(
            "create table {table} (id int primary key, v text not null, n bigint not null);
             insert into {table} select g, 'row ' || g, 0 from generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
    }
    let source = Setup::with_log(&pg_source(db), &kafka_log_of(broker, 1, ""), 0, "");
    let s = source.start();
    let status = common::wait_status(
        &s,
        Duration::from_secs(60),
        "the snapshot in the log",
        |st| st[0]["log"]["end_offset"].as_u64() >= Some(rows * GROUP_TABLES.len() as u64),
    )
    .await;
    (source, s, status)
}

/// A daemon that runs pipeline `demo`'s sinks only, as a member of their consumer groups.
struct Member {
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    port: u16,
}

impl Member {
    fn new(broker: &KafkaBroker, cache: &RedisKeyspace, target: &PgDatabase) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = siphon_test_support::free_port();
        let config = dir.path().join("siphon.toml");
        std::fs::write(
            &config,
            format!(
                r#"
data_dir = "{data}"
shutdown_timeout = "10s"

[admin]
listen = "127.0.0.1:{port}"

[pipelines.demo.log]
{log}

[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"
batch_size = 50
consumer_group = true

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"
batch_size = 50
consumer_group = true
"#,
                data = dir.path().join("data").display(),
                log = kafka_log_of(broker, 1, ""),
                redis = cache.url,
                prefix = cache.prefix,
                target = target.url,
            ),
        )
        .unwrap();
        Member { dir, config, port }
    }

    fn start(&self) -> siphon_test_support::Daemon {
        siphon_test_support::Daemon::start(
            common::bin(),
            &self.config,
            self.port,
            &self.dir.path().join("daemon.log"),
        )
        .unwrap()
    }

    /// The tables this member was last given, from its log.
    fn tables(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default();
        log.lines()
            .rfind(|l| l.contains("this member reads these tables"))
            .unwrap_or_default()
            .to_owned()
    }
}

/// Two daemons that run the sinks only, in one consumer group, split the tables of a
/// PostgreSQL pipeline whose source another daemon runs; one of them is killed -9 midway and
/// started again, and takes its tables back. The Redis cache and the PostgreSQL mirror end
/// equal to the source tables, row by row.
#[tokio::test(flavor = "multi_thread")]
async fn two_sink_only_daemons_in_a_consumer_group_split_the_tables() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let (_source, s, _) = group_tables_in_a_kafka_log(&broker, &db, 200).await;

    let (one, two) = (
        Member::new(&broker, &cache, &target),
        Member::new(&broker, &cache, &target),
    );
    let mut first = one.start();
    let second = two.start();
    // A writer of transactions across the tables: updates, inserts, deletes.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (url, stop) = (db.url.clone(), stop.clone());
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (a, b) = (
                    GROUP_TABLES[i as usize % 4],
                    GROUP_TABLES[(i as usize + 1) % 4],
                );
                let id = 201 + i as i64;
                client
                    .batch_execute(&format!(
                        "begin;
                         update {a} set n = n + 1, v = 'seen {i}' where id % 7 = {m};
                         insert into {b} values ({id}, 'new {i}', {i});
                         delete from {a} where id = {gone};
                         commit;",
                        m = i % 7,
                        gone = 1 + (i * 13) % 200,
                    ))
                    .await
                    .unwrap();
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            i
        })
    };
    // Both members take tables; then the first is killed and the second takes them over.
    let both = std::time::Instant::now();
    while !(one.tables().contains("demo.public.") && two.tables().contains("demo.public.")) {
        assert!(
            both.elapsed() < Duration::from_secs(120),
            "the members did not split the tables: {:?} / {:?}\n{}\n{}",
            one.tables(),
            two.tables(),
            first.log(),
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = one.tables();
    first.kill_9().unwrap();
    // Restarted (as an orchestrator would), the member takes its tables back: the group
    // knows it by the member id in its data directory. (noida-db never expires a member whose
    // session ended, so the other one could not take them over meanwhile.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    first = one.start();
    let back = std::time::Instant::now();
    while one.tables() == held || !one.tables().contains("demo.public.") {
        assert!(
            back.elapsed() < Duration::from_secs(120),
            "the restarted member did not take its tables back: {:?}\n{}",
            one.tables(),
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(transactions > 20, "the writer committed {transactions}");

    // The stores follow to the source's rows (no wait endpoint for a consumer group's
    // member: polled, with a deadline that follows their progress).
    let want = group_rows_pg(&db.client().await.unwrap()).await;
    let mirror = target.client().await.unwrap();
    let mut last = (
        GroupRows::new(),
        GroupRows::new(),
        std::time::Instant::now(),
    );
    loop {
        let (mirrored, cached) = (group_rows_pg(&mirror).await, group_rows_redis(&cache).await);
        if mirrored == want && cached == want {
            break;
        }
        if (mirrored.clone(), cached.clone()) != (last.0.clone(), last.1.clone()) {
            last = (mirrored, cached, std::time::Instant::now());
        }
        // The rows a store has other than the source's: (key, source's, store's).
        let differing = |store: &GroupRows| -> Vec<String> {
            want.keys()
                .chain(store.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| want.get(*k) != store.get(*k))
                .take(5)
                .map(|k| format!("{k:?}: source {:?}, store {:?}", want.get(k), store.get(k)))
                .collect()
        };
        assert!(
            last.2.elapsed() < Duration::from_secs(60),
            "the stores stopped short of the source: mirror {} rows, cache {} rows, source {} rows\nmirror: {:?}\ncache: {:?}\n{}\n{}",
            last.0.len(),
            last.1.len(),
            want.len(),
            differing(&last.0),
            differing(&last.1),
            first.log(),
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(first);
    drop(s);
}

/// A member's store whose cursor lies past the log's end as the member first hears of it is
/// not taken for the store of another log: the member waits for the end to reach it. (Another
/// member applied a transaction whose commit reached the records' partitions before the
/// offsets topic; a restarted member stopped its sinks on that in a full run.)
#[tokio::test(flavor = "multi_thread")]
async fn a_store_cursor_past_the_end_heard_of_is_waited_for() {
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let (_source, s, status) = group_tables_in_a_kafka_log(&broker, &db, 50).await;
    let end = status[0]["log"]["end_offset"].as_u64().unwrap();
    let made = s.log();
    let id = made
        .lines()
        .find(|l| l.contains("made a new Kafka change log"))
        .and_then(|l| l.split("log=").nth(1))
        .unwrap_or_else(|| panic!("no new log in the source's log:\n{made}"))
        .trim()
        .to_owned();
    // The cache's cursor as another member left it, five records past the end.
    let mut conn = cache.conn().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{}siphon:cursor:demo:cache", cache.prefix))
        .arg(format!("{} {id}", end + 5))
        .query_async(&mut conn)
        .await
        .unwrap();
    let member = Member::new(&broker, &cache, &target);
    let m = member.start();
    let heard = std::time::Instant::now();
    while !m.log().contains("waiting for the end to reach it") {
        assert!(
            !m.log().contains("belongs to another change log"),
            "the member took its store for one of another log:\n{}",
            m.log()
        );
        assert!(
            heard.elapsed() < Duration::from_secs(120),
            "the member did not wait for the log's end to reach its store's cursor:\n{}",
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The end passes the cursor: the member's cache follows the log.
    let client = db.client().await.unwrap();
    for i in 0..10 {
        client
            .batch_execute(&format!("insert into t1 values ({}, 'new', {i})", 100 + i))
            .await
            .unwrap();
    }
    let want = group_rows_pg(&client).await;
    let mut last = (GroupRows::new(), std::time::Instant::now());
    loop {
        let cached = group_rows_redis(&cache).await;
        if cached == want {
            break;
        }
        if cached != last.0 {
            last = (cached, std::time::Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(60),
            "the cache stopped at {} rows of {}:\n{}",
            last.0.len(),
            want.len(),
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        !m.log().contains("belongs to another change log"),
        "{}",
        m.log()
    );
    drop(m);
    drop(s);
}

/// The Kafka sink, on the embedded log, killed -9 again and again while it publishes: read
/// back `read_committed`, its topics hold every event of the log once (each log offset once,
/// the events the generator made): each restart goes on from the cursor its last committed
/// transaction holds.
#[tokio::test(flavor = "multi_thread")]
async fn the_kafka_sink_publishes_every_event_once_through_kill_9() {
    let broker = KafkaBroker::start().unwrap();
    let events = 6000;
    let sink = format!(
        r#"
[pipelines.demo.sinks.kafka]
kind = "kafka"
brokers = "{}"
seek = "beginning"
batch_size = 200
"#,
        broker.brokers()
    );
    let setup = Setup::new(events, "1ms", &sink);
    let mut d = setup.start();
    for round in 1..=5u64 {
        common::wait_status(&d, Duration::from_secs(90), "the sink publishing", |s| {
            s[0]["sinks"]["kafka"]["next_offset"].as_u64() >= Some(round * events / 7)
        })
        .await;
        d.kill_9().unwrap();
        d = setup.start();
    }
    common::wait_status(&d, Duration::from_secs(90), "every event published", |s| {
        s[0]["sinks"]["kafka"]["next_offset"].as_u64() == Some(events)
    })
    .await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );

    let generator = setup.generator();
    let mut published: BTreeMap<u64, serde_json::Value> = BTreeMap::new();
    for topic in ["demo.demo.orders", "demo.demo.customers"] {
        for (_, _, value, offset) in topic_records(&broker, topic) {
            let Some(value) = value else { continue }; // a tombstone
            let offset = offset.expect("a log offset on every record");
            let previous = published.insert(offset, serde_json::from_slice(&value).unwrap());
            assert!(previous.is_none(), "log offset {offset} published twice");
        }
    }
    assert_eq!(
        published.keys().copied().collect::<Vec<_>>(),
        (0..events).collect::<Vec<_>>(),
        "every log offset once"
    );
    for (offset, value) in &published {
        let want = siphon_format::envelope::JsonFormat {
            schemas: true,
            transactions: false,
            modes: Default::default(),
        }
        .encode(&generator.event(*offset));
        assert_eq!(
            value["payload"]["after"], want["payload"]["after"],
            "offset {offset}"
        );
        assert_eq!(
            value["payload"]["op"], want["payload"]["op"],
            "offset {offset}"
        );
    }
    let uncommitted: usize = ["demo.demo.orders", "demo.demo.customers"]
        .iter()
        .map(|t| {
            topic_records_with(&broker, t, "read_uncommitted")
                .iter()
                .filter(|r| r.2.is_some())
                .count()
        })
        .sum();
    eprintln!("kafka sink: {events} events published once, {uncommitted} records read uncommitted");
}

/// `format = "avro"`: each table version's key and value schemas registered once with the
/// registry (basic authentication), every record in Confluent's wire format naming its
/// version; a column added mid-stream is a second version of the value subject, and records
/// of either version decode with either schema (the added column is optional, its default
/// null). Every record reads back as the JSON siphon writes of it; `siphon check --connect`
/// reaches the brokers and the registry, and a wrong password fails it without showing it.
#[tokio::test(flavor = "multi_thread")]
async fn avro_records_take_a_schema_version_per_table_version() {
    let broker = KafkaBroker::start().unwrap();
    let password = "s3cret-registry-pw";
    let registry = RegistryStandIn::start_with_user("siphon", password).unwrap();
    let db = postgres().await.unwrap();
    db.execute(
        "create table prices (id int primary key, name text not null, amount numeric(10,2), at timestamptz, tags text[]);
         insert into prices values (1, 'one', 1.50, '2024-02-29 10:11:12.5+00', '{a,b}'),
                                   (2, 'two', null, null, null), (3, 'three', -0.01, now(), '{}');",
    )
    .await
    .unwrap();
    let registry_config = |password: &str| {
        format!(
            "format = \"avro\"\nregistry = {{ url = \"{}\", username = \"siphon\", password = \"{password}\" }}",
            registry.url
        )
    };
    let setup = Setup::with_log(
        &pg_source(&db),
        &kafka_log_of(&broker, 1, &registry_config(password)),
        0,
        "",
    );
    let check = setup.cli(&["check", "--connect"]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && stdout.contains("ok      demo: log kafka"),
        "{stdout}{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let mut d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        common::sink(s)["next_offset"].as_u64() >= Some(3)
    })
    .await;
    let client = db.client().await.unwrap();
    client
        .batch_execute(
            "alter table prices add column note text;
             insert into prices values (4, 'four', 4.00, now(), '{c}', 'added');
             update prices set note = 'later', amount = 9.99 where id = 1;
             delete from prices where id = 2;",
        )
        .await
        .unwrap();
    common::wait_applied(&d, "out", &current_lsn(&db).await, Duration::from_secs(60)).await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(30)).unwrap().success(),
        "{}",
        d.log()
    );
    assert!(
        !d.log().contains(password),
        "the daemon's log shows the registry password"
    );

    let subjects = registry.subjects();
    assert_eq!(
        subjects.keys().collect::<Vec<_>>(),
        ["demo.public.prices-key", "demo.public.prices-value"],
        "{subjects:#?}"
    );
    assert_eq!(
        subjects["demo.public.prices-key"].len(),
        1,
        "the key did not change"
    );
    let [v1, v2] = subjects["demo.public.prices-value"].as_slice() else {
        panic!("two value versions: {subjects:#?}");
    };
    assert!(
        !v1.contains("\"note\"") && v2.contains("\"note\""),
        "{v1}\n{v2}"
    );

    // The records, in log order, read back with their own version and with the other.
    let mut records = topic_records(&broker, "demo.public.prices");
    records.sort_by_key(|(_, _, _, offset)| *offset);
    let tail = setup.cli(&["log", "tail", "demo", "--from", "0", "--format", "records"]);
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let json: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        records.len(),
        json.len(),
        "records in the topic and in the log"
    );
    let mut versions = std::collections::BTreeSet::new();
    for ((_, key, value, _), expected) in records.iter().zip(&json) {
        let (_, key) = registry.decode(key.as_ref().unwrap(), None).unwrap();
        assert_eq!(key, expected["key"]);
        let Some(value) = value else {
            assert!(
                expected["value"].is_null(),
                "a tombstone where the log has {expected}"
            );
            continue;
        };
        let (id, read) = registry.decode(value, None).unwrap();
        let mut expected = expected["value"].clone();
        common::zeros_of_a_delete(&read, &mut expected, &["name"]);
        assert_eq!(
            read, expected,
            "the record read back is siphon's JSON of it"
        );
        versions.insert(id);
        let has_note = read["after"].get("note").is_some() || read["before"].get("note").is_some();
        // With the other version: the column appears as null, or is left out.
        let other = if has_note { v1 } else { v2 };
        let (_, resolved) = registry.decode(value, Some(other)).unwrap();
        let row = if read["after"].is_null() {
            "before"
        } else {
            "after"
        };
        for (column, v) in read[row].as_object().unwrap() {
            if column != "note" {
                assert_eq!(
                    &resolved[row][column], v,
                    "{column} read with the other version"
                );
            }
        }
        assert_eq!(
            resolved[row].get("note").is_some(),
            !has_note,
            "the other version's columns: {resolved}"
        );
    }
    assert_eq!(versions.len(), 2, "records of both value versions");

    // A wrong password fails the check, naming the registry's answer, not the password.
    let text = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace(password, "wrong-pw-123");
    std::fs::write(&setup.config, text).unwrap();
    let check = setup.cli(&["check", "--connect"]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(check.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAILED  demo: log kafka") && out.contains("401"),
        "{out}"
    );
    assert!(
        !out.contains("wrong-pw-123"),
        "the check shows the password: {out}"
    );
}

/// Every event a file sink wrote into `dir`, in order.
fn file_events(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            // Whole lines only: the sink may be writing the last one.
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let whole = text.rfind('\n').map_or("", |end| &text[..end]);
            whole
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `siphon replay --from-time` finds the log's first record at or after the time (by Kafka's
/// time index) and a consumer group's member replays from there: its file sink, which keeps
/// every event, then holds the events from that offset on a second time, and no other.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_member_replays_from_a_time() {
    let broker = KafkaBroker::start().unwrap();
    let db = postgres().await.unwrap();
    db.execute(
        "create table t (id int primary key, v text not null);
         insert into t select g, 'one' from generate_series(1, 50) g;",
    )
    .await
    .unwrap();
    let source = Setup::with_log(&pg_source(&db), &kafka_log_of(&broker, 1, ""), 0, "");
    let s = source.start();
    common::wait_status(
        &s,
        Duration::from_secs(60),
        "the snapshot in the log",
        |st| st[0]["log"]["end_offset"].as_u64() >= Some(50),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cut = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_millis(100)).await;
    db.execute("update t set v = 'two'").await.unwrap();
    common::wait_status(
        &s,
        Duration::from_secs(60),
        "the updates in the log",
        |st| st[0]["log"]["end_offset"].as_u64() >= Some(100),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let port = siphon_test_support::free_port();
    let config = dir.path().join("siphon.toml");
    let events = dir.path().join("events");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{data}\"\n[admin]\nlisten = \"127.0.0.1:{port}\"\n[pipelines.demo.log]\n{log}\n[pipelines.demo.sinks.events]\nkind = \"file\"\npath = \"{events}\"\nconsumer_group = true\n",
            data = dir.path().join("data").display(),
            log = kafka_log_of(&broker, 1, ""),
            events = events.display(),
        ),
    )
    .unwrap();
    let member = siphon_test_support::Daemon::start(
        common::bin(),
        &config,
        port,
        &dir.path().join("daemon.log"),
    )
    .unwrap();
    let wait_for = |n: usize, what: &str| {
        let (events, what) = (events.clone(), what.to_owned());
        async move {
            let mut last = (0, std::time::Instant::now());
            loop {
                let count = file_events(&events).len();
                if count >= n {
                    return;
                }
                if count != last.0 {
                    last = (count, std::time::Instant::now());
                }
                assert!(
                    last.1.elapsed() < Duration::from_secs(60),
                    "{what}: {count} events of {n}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    wait_for(100, "the member's first reading").await;

    let at = humantime::format_rfc3339_millis(cut).to_string();
    let replay = std::process::Command::new(common::bin())
        .args(["replay", "demo", "events", "--from-time", &at, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stderr).into_owned();
    assert!(replay.status.success(), "{said}\n{}", member.log());
    assert!(said.contains("is at offset 50"), "{said}");
    wait_for(150, "the replay").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = file_events(&events);
    assert_eq!(
        written.len(),
        150,
        "the events, then those from offset 50 again\n{}",
        member.log()
    );
    assert_eq!(
        written[100..],
        written[50..100],
        "the replay from offset 50"
    );
    drop(member);
    drop(s);
}
