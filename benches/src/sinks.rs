//! `siphon-bench sinks`: upserts from a warm log (events encoded as the log stores them,
//! decoded per batch as the sink task does) applied by each sink, directly and through the
//! daemon's own path (`replay_offline` from a file log), next to the same run's reference:
//! `redis-benchmark` pipelined HSET (the same six fields, and one field) and XADD of the same
//! fields for Redis and Redis Streams; the same guarded upsert as one server-side statement, and
//! COPY, for PostgreSQL; DuckDB's appender; a publish loop with the same client for NATS
//! (async-nats) and RabbitMQ (lapin).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::SinkExt;
use siphon_core::SourcePosition;
use siphon_core::event::{Event, Op, Row, SnapshotMarker, SourceInfo, Value};
use siphon_core::log::ChangeLog;
use siphon_core::log::{NewRecord, RecordFlags};
use siphon_core::schema::{Column, ColumnKind, SchemaId, SchemaStore, TableSchema};
use siphon_core::sink::{Sink, SinkBatch, SinkRecord};
use siphon_core::source::TableInfo;
use siphon_log_file::{FileLog, FileLogConfig, SchemaRegistry};
use siphon_sink_postgres::{PostgresSink, PostgresSinkConfig};
use siphon_sink_redis::{RedisSink, RedisSinkConfig};
use siphon_source_postgres::{PgPosition, PostgresKind};

use crate::figure::{Figure, Measure, Rates, Target, thousands};
use crate::tools;

const CITIES: [&str; 5] = ["Berlin", "Paris", "Tokyo", "Lima", "Oslo"];

fn row(i: u64) -> Row {
    Row(vec![
        ("id".into(), Value::Int(i as i64)),
        (
            "customer_id".into(),
            Value::Int((i * 7919 % 100_000) as i64),
        ),
        ("city".into(), Value::Text(CITIES[(i % 5) as usize].into())),
        (
            "amount".into(),
            Value::Decimal(format!("{}.{:02}", i % 1000, i % 100)),
        ),
        ("status".into(), Value::Text("paid".into())),
        (
            "note".into(),
            Value::Text(format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        ),
    ])
}

/// The warm log: encoded events, with the registry of the table schema they refer to.
pub(crate) struct WarmLog {
    records: Vec<Vec<u8>>,
    pub(crate) schemas: SchemaRegistry,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for WarmLog {
    type Target = [Vec<u8>];

    fn deref(&self) -> &[Vec<u8>] {
        &self.records
    }
}

/// `public.orders` as the PostgreSQL source would register it (the reference tables' types).
fn orders_schema() -> TableSchema {
    let column = |name: &str, type_name: &str, type_id: u32, kind: ColumnKind| Column {
        name: name.into(),
        type_name: type_name.into(),
        type_id,
        type_modifier: -1,
        kind,
        nullable: name != "id",
        generated: false,
    };
    let text = || ColumnKind::Text { length: None };
    TableSchema {
        id: SchemaId::UNREGISTERED,
        connector: "postgresql".into(),
        server: "bench".into(),
        database: "bench".into(),
        schema: Some("public".into()),
        table: "orders".into(),
        columns: vec![
            column("id", "bigint", 20, ColumnKind::Int64),
            column("customer_id", "bigint", 20, ColumnKind::Int64),
            column("city", "text", 25, text()),
            column(
                "amount",
                "numeric",
                1700,
                ColumnKind::Decimal {
                    precision: None,
                    scale: None,
                },
            ),
            column("status", "text", 25, text()),
            column("note", "text", 25, text()),
        ],
        key: vec![0],
    }
}

/// The warm log: `rows` upserts of `public.orders`, encoded as the log stores them (values
/// and the schema's id).
pub(crate) fn events(rows: u64) -> anyhow::Result<WarmLog> {
    let dir = tempfile::tempdir()?;
    let schemas = SchemaRegistry::open(dir.path())?;
    let schema = schemas.register(&orders_schema())?;
    let records = (1..=rows)
        .map(|i| {
            let after = row(i);
            let event = Event {
                op: Op::Create,
                key: Some(Row(vec![after.0[0].clone()])),
                before: None,
                after: Some(after),
                source: SourceInfo {
                    connector: "postgresql".into(),
                    name: "bench".into(),
                    db: "bench".into(),
                    schema: Some("public".into()),
                    table: "orders".into(),
                    position: SourcePosition::new(PgPosition {
                        commit_lsn: i,
                        lsn: i,
                        index: 0,
                    }),
                    tx_id: Some(i),
                    ts_ms: 1_700_000_000_000,
                    snapshot: SnapshotMarker::False,
                },
                ts_ms: 1_700_000_000_000,
                transaction: None,
                key_change: None,
                schema: Some(schema.clone()),
            };
            Ok(event.encode()?)
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(WarmLog {
        records,
        schemas,
        _dir: dir,
    })
}

/// Applies the first `rows` events of the log in batches of `batch`; returns the events
/// applied per second.
async fn apply(sink: &mut dyn Sink, log: &WarmLog, rows: u64, batch: usize) -> anyhow::Result<f64> {
    let table = TableInfo {
        name: siphon_core::TableName::new("public", "orders"),
        key_columns: vec!["id".into()],
    };
    sink.reset(std::slice::from_ref(&table)).await?;
    sink.open(&[table], &siphon_core::log::LogId::random())
        .await?;
    let started = Instant::now();
    let mut in_sink = Duration::ZERO;
    for (n, chunk) in log[..rows as usize].chunks(batch).enumerate() {
        let records = chunk
            .iter()
            .enumerate()
            .map(|(i, bytes)| {
                Ok(SinkRecord {
                    offset: (n * batch + i) as u64,
                    event: Event::decode(bytes, &log.schemas, &PostgresKind)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let t = Instant::now();
        sink.apply(&SinkBatch::whole(records)).await?;
        in_sink += t.elapsed();
    }
    let total = started.elapsed();
    eprintln!(
        "decoding {:.2}s, in the sink {:.2}s",
        (total - in_sink).as_secs_f64(),
        in_sink.as_secs_f64()
    );
    Ok(rows as f64 / total.as_secs_f64())
}

/// `redis-benchmark` pipelined (100 deep) over `rows` random keys: `-t hset` (one field), or
/// with `command` (its `__rand_int__` replaced by the key number).
fn redis_benchmark(rows: u64, command: &[&str]) -> anyhow::Result<f64> {
    let (n, r) = (rows.to_string(), rows.to_string());
    let mut args = vec!["-q", "-P", "100", "-n", &n, "-r", &r];
    if command.is_empty() {
        args.extend(["-t", "hset"]);
    } else {
        args.extend(command);
    }
    let out = Command::new("redis-benchmark").args(&args).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // The last progress line ends "...: 457456.53 requests per second, p50=…".
    text.rsplit('\r')
        .next()
        .and_then(|last| last.split(" requests per second").next())
        .and_then(|head| head.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("cannot read redis-benchmark's output: {text}"))
}

/// COPY of the rows into a keyed table, and a server-side upsert of them; both times.
async fn copy_load(url: &str, rows: u64) -> anyhow::Result<(Duration, Duration)> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(
            "drop table if exists copy_orders; create table copy_orders (id bigint primary key, customer_id bigint, city text, amount numeric, status text, note text)",
        )
        .await?;
    let mut text = String::with_capacity(rows as usize * 80);
    for i in 1..=rows {
        let r = row(i);
        let cells: Vec<String> = r
            .iter()
            .map(|(_, v)| match v {
                Value::Int(n) => n.to_string(),
                Value::Text(s) | Value::Decimal(s) => s.clone(),
                _ => unreachable!(),
            })
            .collect();
        text.push_str(&cells.join("\t"));
        text.push('\n');
    }
    let started = Instant::now();
    let sink = client.copy_in("copy copy_orders from stdin").await?;
    futures_util::pin_mut!(sink);
    sink.send(bytes::Bytes::from(text)).await?;
    sink.finish().await?;
    let copied = started.elapsed();
    // The same rows upserted with the sink's version guard by one server-side statement:
    // what an upsert costs this server without any client.
    client
        .batch_execute(
            "drop table if exists upsert_orders; create table upsert_orders (like copy_orders including all, _siphon_offset bigint not null)",
        )
        .await?;
    let started = Instant::now();
    client
        .batch_execute(
            "insert into upsert_orders as t select *, id from copy_orders on conflict (id) do update set \
             customer_id = excluded.customer_id, city = excluded.city, amount = excluded.amount, status = excluded.status, \
             note = excluded.note, _siphon_offset = excluded._siphon_offset where t._siphon_offset < excluded._siphon_offset",
        )
        .await?;
    Ok((copied, started.elapsed()))
}

/// Deletes the keys matching `pattern` (with the test support's patient connection: redis'
/// 500 ms default fails a SCAN of a million keys on a busy machine).
async fn remove_keys(url: &str, pattern: &str) -> anyhow::Result<()> {
    let mut conn = siphon_test_support::redis_conn(url).await?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            let _: u64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut conn)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The same upserts applied by the daemon's own path: written to a file change log, then
/// `replay_offline` of sink `name` (configured by `sink_toml`) from offset 0 with a reset —
/// the log read, the next batch decoded while the current one is applied, cursors saved;
/// returns the events applied per second.
async fn through_runtime(
    name: &str,
    sink_toml: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let records: Vec<NewRecord> = log[..rows as usize]
        .iter()
        .map(|bytes| {
            Ok(NewRecord {
                key: Event::decode(bytes, &log.schemas, &PostgresKind)?.log_key(),
                value: bytes.clone(),
                flags: RecordFlags::TXN_END,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let file_log = FileLog::open(
        dir.path().join("pipelines/bench/log"),
        FileLogConfig::default(),
    )?;
    // The same schema, under the same id (the first), in this log's registry.
    file_log.schemas().register(&orders_schema())?;
    for chunk in records.chunks(50_000) {
        file_log.append_blocking(chunk)?;
    }
    drop(file_log);
    let config = siphon::config::Config::from_toml(&format!(
        r#"data_dir = "{data}"
[admin]
enabled = false
[pipelines.bench.source]
kind = "generator"
tables = ["public.orders"]
[pipelines.bench.log]
compaction = false
[pipelines.bench.sinks.{name}]
{sink_toml}
batch_size = {batch}
"#,
        data = dir.path().display()
    ))?;
    let table = TableInfo {
        name: siphon_core::TableName::new("public", "orders"),
        key_columns: vec!["id".into()],
    };
    let started = Instant::now();
    let status =
        siphon::runtime::replay_offline(&config, "bench", name, 0, true, vec![table], |_, _| {})
            .await?;
    anyhow::ensure!(
        status.next_offset == rows,
        "the replay stopped at {}",
        status.next_offset
    );
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// The servers the sinks write to.
#[derive(Debug, Clone)]
pub struct Servers {
    /// PostgreSQL server URL (a database is created and dropped in it).
    pub postgres: String,
    /// Redis URL (keys under `siphon-bench…`, removed afterwards).
    pub redis: String,
    pub nats: String,
    pub rabbitmq: String,
}

/// The sinks this bench knows, in the order it measures them.
pub const SINKS: &[&str] = &[
    "redis",
    "redis_stream",
    "nats",
    "rabbitmq",
    "postgres",
    "duckdb",
];

/// The tools and servers the sinks of `plan` need; fails naming what is missing.
pub fn preflight(servers: &Servers, plan: &[(String, u64)]) -> anyhow::Result<()> {
    let has = |name: &str| plan.iter().any(|(s, _)| s == name);
    for (name, _) in plan {
        anyhow::ensure!(
            SINKS.contains(&name.as_str()),
            "unknown sink {name}; the bench knows {}",
            SINKS.join(", ")
        );
    }
    if has("redis") || has("redis_stream") {
        tools::require(&[tools::REDIS_BENCHMARK])?;
        tools::reachable_url("Redis", &servers.redis, 6379)?;
    }
    if has("postgres") {
        tools::require(&[tools::PSQL])?;
        tools::reachable_url("PostgreSQL", &servers.postgres, 5432)?;
    }
    if has("nats") {
        tools::reachable_url("NATS", &servers.nats, 4222)?;
    }
    if has("rabbitmq") {
        tools::reachable_url("RabbitMQ", &servers.rabbitmq, 5672)?;
    }
    Ok(())
}

/// One figure: the sink's rate beside a reference's in the same run.
fn figure(
    what: &str,
    rows: u64,
    batch: usize,
    rate: f64,
    reference: &str,
    reference_rate: f64,
    target: Option<Target>,
) -> Figure {
    Figure {
        what: what.into(),
        workload: format!(
            "{} upserts, batches of {}",
            thousands(rows),
            thousands(batch as u64)
        ),
        measure: Measure::Rates(Rates::one("rows", reference, rate, reference_rate)),
        target,
    }
}

/// Measures the sinks and their references; prints a table.
pub fn run(servers: &Servers, rows: u64, batch: usize, only: &[String]) -> anyhow::Result<()> {
    let plan: Vec<(String, u64)> = only.iter().map(|s| (s.clone(), rows)).collect();
    preflight(servers, &plan)?;
    let figures = measure(servers, batch, &plan)?;
    println!("| sink | rows | batch | sink rows/s | reference | reference rows/s | ratio |");
    println!("|---|---|---|---|---|---|---|");
    for f in &figures {
        let Measure::Rates(r) = &f.measure else {
            continue;
        };
        println!(
            "| {} | {rows} | {batch} | {:.0} | {} | {:.0} | {:.2}x |",
            f.what,
            r.siphon_rate(),
            r.reference,
            r.reference_rate(),
            r.ratio()
        );
    }
    Ok(())
}

/// The sinks of `plan` (name, upserts), in [`SINKS`]' order, each beside its reference.
pub fn measure(
    servers: &Servers,
    batch: usize,
    plan: &[(String, u64)],
) -> anyhow::Result<Vec<Figure>> {
    let rt = crate::pg::runtime()?;
    rt.block_on(async {
        let most = plan.iter().map(|(_, rows)| *rows).max().unwrap_or(0);
        let log = events(most)?;
        let mut figures = Vec::new();
        for &name in SINKS {
            let Some(&(_, rows)) = plan.iter().find(|(s, _)| s == name) else {
                continue;
            };
            figures.extend(match name {
                "redis" => redis(&servers.redis, &log, rows, batch).await?,
                "redis_stream" => redis_stream(&servers.redis, &log, rows, batch).await?,
                "nats" => nats(&servers.nats, &log, rows, batch).await?,
                "rabbitmq" => rabbitmq(&servers.rabbitmq, &log, rows, batch).await?,
                "postgres" => postgres(&servers.postgres, &log, rows, batch).await?,
                _ => duckdb(&log, rows, batch).await?,
            });
        }
        Ok(figures)
    })
}

/// The Redis sink vs redis-benchmark, pipelined, with one field and with the row's six.
async fn redis(
    redis_url: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<Vec<Figure>> {
    // What an interrupted run left.
    for pattern in ["siphon-bench:*", "siphon-bench-ref:*", "siphon-bench-rt:*"] {
        remove_keys(redis_url, pattern).await?;
    }
    let one_field = redis_benchmark(rows, &[])?;
    // The same six fields a sink row has, under keys of their own (removed below).
    let same_rows = redis_benchmark(
        rows,
        &[
            "HSET",
            "siphon-bench-ref:__rand_int__",
            "id",
            "__rand_int__",
            "customer_id",
            "4711",
            "city",
            "Berlin",
            "amount",
            "123.45",
            "status",
            "paid",
            "note",
            "0123456789abcdef0123456789abcdef",
        ],
    )?;
    remove_keys(redis_url, "siphon-bench-ref:*").await?;
    let mut redis = RedisSink::new(
        RedisSinkConfig {
            prefix: "siphon-bench:".into(),
            ..RedisSinkConfig::new(redis_url)
        },
        "bench",
        "redis",
    )?;
    let rate = apply(&mut redis, log, rows, batch).await?;
    let daemon = through_runtime(
        "redis",
        &format!("kind = \"redis\"\nurl = \"{redis_url}\"\nprefix = \"siphon-bench-rt:\""),
        log,
        rows,
        batch,
    )
    .await?;
    remove_keys(redis_url, "siphon-bench-rt:*").await?;
    redis
        .reset(&[TableInfo {
            name: siphon_core::TableName::new("public", "orders"),
            key_columns: vec!["id".into()],
        }])
        .await?;
    let mut figures = Vec::new();
    for (what, rate) in [
        ("Redis sink (hash)", rate),
        ("Redis sink (hash), daemon path", daemon),
    ] {
        figures.push(figure(
            what,
            rows,
            batch,
            rate,
            "redis-benchmark -P 100 HSET of the same 6 fields",
            same_rows,
            Target::new(0.7, 22),
        ));
        figures.push(figure(
            what,
            rows,
            batch,
            rate,
            "redis-benchmark -P 100 -t hset (1 field)",
            one_field,
            None,
        ));
    }
    Ok(figures)
}

/// The first event of `log` as the message sinks make it (without schemas): what the
/// references send again and again.
fn first_message(log: &WarmLog) -> anyhow::Result<siphon_sink_message::Message> {
    let first = SinkRecord {
        offset: 0,
        event: Event::decode(&log[0], &log.schemas, &PostgresKind)?,
    };
    let settings = siphon_sink_message::MessageSettings {
        destination: siphon_sink_message::default_destination(),
        prefix: None,
        schemas: false,
        transaction_metadata: false,
        debezium: Default::default(),
        value: siphon_sink_message::ValueForm::Envelope,
        row_state: siphon_core::sink::row_state::RowState {
            fields: Vec::new(),
            deletes: Default::default(),
        },
        outbox: Default::default(),
    };
    siphon_sink_message::MessageEncoder::new(&settings, "bench")
        .map_err(anyhow::Error::msg)?
        .encode(&first, &siphon_core::log::LogId::random())?
        .context("the first event makes no message")
}

/// The NATS JetStream sink vs a publish loop with the same client (async-nats) into a
/// stream of the same settings: the first event's payload and headers with a `Nats-Msg-Id`
/// of its own each time, published `batch` at a time without waiting, then their acks
/// awaited, as the sink does.
async fn nats(
    nats_url: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<Vec<Figure>> {
    use async_nats::jetstream;
    let message = first_message(log)?;
    let context = jetstream::new(async_nats::connect(nats_url).await?);
    let reference_stream = "siphon-bench-ref";
    let _ = context.delete_stream(reference_stream).await;
    context
        .create_stream(jetstream::stream::Config {
            name: reference_stream.into(),
            subjects: vec!["siphon-bench-ref.>".into()],
            ..Default::default()
        })
        .await?;
    let started = Instant::now();
    let mut sent = 0;
    while sent < rows {
        let mut acks = Vec::with_capacity(batch);
        for n in sent..(sent + batch as u64).min(rows) {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("ref:{n}").as_str());
            for (name, value) in message.headers() {
                headers.insert(name, value.as_str());
            }
            let ack = context
                .publish_with_headers(
                    "siphon-bench-ref.public.orders",
                    headers,
                    message.value.clone().into(),
                )
                .await?;
            acks.push(ack);
        }
        sent += acks.len() as u64;
        for ack in acks {
            ack.await?;
        }
    }
    let reference = rows as f64 / started.elapsed().as_secs_f64();
    context.delete_stream(reference_stream).await?;
    let config: siphon_sink_nats::NatsSinkConfig = serde_json::from_value(serde_json::json!({
        "url": nats_url,
        "schemas": false,
        "prefix": "siphon-bench-nats",
    }))?;
    let mut sink = siphon_sink_nats::NatsSink::new(&config, "bench", "nats")?;
    let rate = apply(&mut sink, log, rows, batch).await?;
    context.delete_stream("siphon-bench-nats").await?;
    Ok(vec![figure(
        "NATS JetStream sink",
        rows,
        batch,
        rate,
        "async-nats publish loop, acks per batch",
        reference,
        None,
    )])
}

/// The RabbitMQ sink vs a publish loop with the same client (lapin) on a channel in confirm
/// mode: the first event's body, persistent and mandatory, with a `message_id` and headers,
/// `batch` at a time, then their confirms awaited, as the sink does; both into a durable
/// queue bound to the exchange.
async fn rabbitmq(
    rabbitmq_url: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<Vec<Figure>> {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    let message = first_message(log)?;
    // Exchanges of their own (the test support's), each with a queue bound with `#`:
    // removed when dropped.
    let (reference, target) = (
        siphon_test_support::rabbitmq_at(rabbitmq_url).await?,
        siphon_test_support::rabbitmq_at(rabbitmq_url).await?,
    );
    let channel = reference.channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let started = Instant::now();
    let mut sent = 0;
    while sent < rows {
        let mut confirms = Vec::with_capacity(batch);
        for n in sent..(sent + batch as u64).min(rows) {
            let mut headers = FieldTable::default();
            for (name, value) in message.headers() {
                headers.insert(
                    ShortString::from(name),
                    AMQPValue::LongString(LongString::from(value)),
                );
            }
            let properties = lapin::BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                .with_message_id(format!("ref:{n}").into())
                .with_headers(headers);
            let confirm = channel
                .basic_publish(
                    reference.exchange.as_str().into(),
                    "siphon-bench-ref.public.orders".into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &message.value,
                    properties,
                )
                .await?;
            confirms.push(confirm);
        }
        sent += confirms.len() as u64;
        for confirm in confirms {
            anyhow::ensure!(confirm.await?.is_ack(), "a reference message not confirmed");
        }
    }
    let reference = rows as f64 / started.elapsed().as_secs_f64();
    let config: siphon_sink_rabbitmq::RabbitmqSinkConfig =
        serde_json::from_value(serde_json::json!({
            "url": target.url,
            "schemas": false,
            "exchange": target.exchange,
        }))?;
    let mut sink = siphon_sink_rabbitmq::RabbitmqSink::new(&config, "bench", "rabbit")?;
    let rate = apply(&mut sink, log, rows, batch).await?;
    Ok(vec![figure(
        "RabbitMQ sink",
        rows,
        batch,
        rate,
        "lapin publish loop, confirms per batch",
        reference,
        None,
    )])
}

/// The Redis Streams sink vs redis-benchmark's pipelined XADD of entries of the same fields
/// and sizes (the first event's, as the sink makes them), into a stream of its own.
async fn redis_stream(
    redis_url: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<Vec<Figure>> {
    for pattern in [
        "siphon-bench-ref-stream",
        "siphon-bench-stream*",
        "siphon-bench-rt-stream*",
    ] {
        remove_keys(redis_url, pattern).await?;
    }
    let message = first_message(log)?;
    let (key, value) = (
        String::from_utf8(message.key.clone().unwrap_or_default())?,
        String::from_utf8(message.value.clone())?,
    );
    let offset = message.offset.to_string();
    let txid = message.txid.clone().unwrap_or_default();
    let reference = redis_benchmark(
        rows,
        &[
            "XADD",
            "siphon-bench-ref-stream",
            "*",
            "key",
            &key,
            "value",
            &value,
            "id",
            &message.id,
            "op",
            message.op,
            "offset",
            &offset,
            "position",
            &message.position,
            "txid",
            &txid,
        ],
    )?;
    remove_keys(redis_url, "siphon-bench-ref-stream").await?;
    let config: siphon_sink_redis_stream::RedisStreamConfig =
        serde_json::from_value(serde_json::json!({
            "url": redis_url,
            "schemas": false,
            "prefix": "siphon-bench-stream",
            "cursor_key": "siphon-bench-stream:cursor",
        }))?;
    let mut stream = siphon_sink_redis_stream::RedisStreamSink::new(&config, "bench", "stream")?;
    let rate = apply(&mut stream, log, rows, batch).await?;
    remove_keys(redis_url, "siphon-bench-stream*").await?;
    let daemon = through_runtime(
        "stream",
        &format!(
            "kind = \"redis_stream\"\nurl = \"{redis_url}\"\nschemas = false\nprefix = \"siphon-bench-rt-stream\"\ncursor_key = \"siphon-bench-rt-stream:cursor\""
        ),
        log,
        rows,
        batch,
    )
    .await?;
    remove_keys(redis_url, "siphon-bench-rt-stream*").await?;
    Ok([
        ("Redis Streams sink", rate),
        ("Redis Streams sink, daemon path", daemon),
    ]
    .into_iter()
    .map(|(what, rate)| {
        figure(
            what,
            rows,
            batch,
            rate,
            "redis-benchmark -P 100 XADD of the same fields",
            reference,
            None,
        )
    })
    .collect())
}

/// The PostgreSQL sink (a mirror) vs the same guarded upsert as one server-side statement,
/// and vs COPY of the same rows.
async fn postgres(
    pg_url: &str,
    log: &WarmLog,
    rows: u64,
    batch: usize,
) -> anyhow::Result<Vec<Figure>> {
    let db = "siphon_bench_sinks";
    let admin = crate::pg::with_db(pg_url, "postgres");
    crate::pg::psql(
        &admin,
        &format!("drop database if exists {db} with (force)"),
    )?;
    crate::pg::psql(&admin, &format!("create database {db}"))?;
    let target = crate::pg::with_db(pg_url, db);
    let result = async {
        let (copy, upsert) = copy_load(&target, rows).await?;
        let reference = rows as f64 / copy.as_secs_f64();
        let bound = rows as f64 / upsert.as_secs_f64();
        let mut pg = PostgresSink::new(PostgresSinkConfig::new(&target), "bench", "pg")?;
        let rate = apply(&mut pg, log, rows, batch).await?;
        drop(pg);
        let daemon = through_runtime(
            "pg",
            &format!("kind = \"postgres\"\nurl = \"{target}\""),
            log,
            rows,
            batch,
        )
        .await?;
        let mut figures = Vec::new();
        for (what, rate) in [
            ("PostgreSQL sink (mirror)", rate),
            ("PostgreSQL sink (mirror), daemon path", daemon),
        ] {
            figures.push(figure(
                what,
                rows,
                batch,
                rate,
                "the same guarded upsert as one server-side INSERT … SELECT",
                bound,
                Target::new(0.8, 22),
            ));
            figures.push(figure(
                what,
                rows,
                batch,
                rate,
                "COPY into a keyed table",
                reference,
                None,
            ));
        }
        anyhow::Ok(figures)
    }
    .await;
    crate::pg::psql(
        &admin,
        &format!("drop database if exists {db} with (force)"),
    )?;
    result
}

/// The DuckDB sink into a fresh file vs DuckDB's appender loading the same rows into a keyed
/// table of the same column types in another file.
async fn duckdb(log: &WarmLog, rows: u64, batch: usize) -> anyhow::Result<Vec<Figure>> {
    let dir = tempfile::tempdir()?;
    let conn = duckdb::Connection::open(dir.path().join("reference.duckdb"))?;
    conn.execute_batch(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT, city VARCHAR, amount VARCHAR, status VARCHAR, note VARCHAR)",
    )?;
    let started = Instant::now();
    {
        let mut appender = conn.appender("orders")?;
        for i in 1..=rows {
            let r = row(i);
            let values = r.iter().map(|(_, v)| match v {
                Value::Int(n) => duckdb::types::Value::BigInt(*n),
                Value::Text(s) | Value::Decimal(s) => duckdb::types::Value::Text(s.clone()),
                _ => duckdb::types::Value::Null,
            });
            appender.append_row(duckdb::appender_params_from_iter(values))?;
        }
        appender.flush()?;
    }
    let reference = rows as f64 / started.elapsed().as_secs_f64();
    drop(conn);
    let mut sink = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(dir.path().join("sink.duckdb")),
        "bench",
        "duckdb",
    )?;
    let rate = apply(&mut sink, log, rows, batch).await?;
    let daemon = through_runtime(
        "lake",
        &format!(
            "kind = \"duckdb\"\npath = \"{}\"",
            dir.path().join("runtime.duckdb").display()
        ),
        log,
        rows,
        batch,
    )
    .await?;
    Ok([
        ("DuckDB sink (mirror)", rate),
        ("DuckDB sink (mirror), daemon path", daemon),
    ]
    .into_iter()
    .map(|(what, rate)| {
        figure(
            what,
            rows,
            batch,
            rate,
            "DuckDB appender into a keyed table",
            reference,
            Target::new(0.6, 22),
        )
    })
    .collect())
}
