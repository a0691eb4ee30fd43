//! Read-your-writes through the daemon: an application commits, asks the admin API to wait for
//! its position (`pg_current_wal_lsn()`, MariaDB's `@@gtid_binlog_pos`), then reads its write
//! from Redis and from the PostgreSQL mirror — 1,000 times under a background writer, never
//! stale. With no other writes a wait ends within a second, also for a sink whose tables
//! exclude the write; a wait for a position the database has not reached times out with 408.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Setup;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;
use siphon_test_support::{mysql, postgres, redis};

/// GETs the wait endpoint; (status, body).
async fn wait(client: &reqwest::Client, admin: &str, sink: &str, query: &str) -> (u16, Json) {
    let resp = client
        .get(format!(
            "{admin}/api/pipelines/demo/sinks/{sink}/wait?{query}"
        ))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Json::String(text)),
    )
}

/// A wait of the `cache` sink for a position the database has not reached: 408 after its
/// timeout, with where the sink stands.
async fn times_out(client: &reqwest::Client, admin: &str, point: &str) {
    let started = Instant::now();
    let (status, body) = wait(client, admin, "cache", &format!("{point}&timeout=300ms")).await;
    assert_eq!(status, 408, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(body["committed_offset"].as_u64() > Some(0), "{body}");
}

async fn redis_field(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    field: &str,
) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_is_read_back_after_its_wait_every_time() {
    let db = postgres().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(
            "create table accounts (id bigint primary key, v bigint not null);
             insert into accounts select g, 0 from generate_series(1, 100) g;
             create table other (id bigint primary key);",
        )
        .await
        .unwrap();
    let slot = format!("{}_slot", db.name);
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.*\"]\nslot = \"{slot}\"\nstatus_interval = \"1s\"",
        db.url
    );
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"

[pipelines.demo.sinks.mirror]
kind = "postgres"
url = "{target}"

[pipelines.demo.sinks.elsewhere]
kind = "redis"
url = "{redis}"
prefix = "{prefix}elsewhere:"
tables = ["public.other"]
"#,
        redis = cache.url,
        prefix = cache.prefix,
        target = target.url,
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        s[0]["source_metrics"]["snapshot_running"] == 0.0
            && s[0]["sinks"]["mirror"]["committed_offset"].as_u64() >= Some(100)
            && s[0]["sinks"]["cache"]["committed_offset"].as_u64() >= Some(100)
    })
    .await;
    let http = reqwest::Client::new();
    let mut redis_conn = cache.conn().await.unwrap();
    let mirror = target.client().await.unwrap();

    // A writer in the background: rows 51..=100, small transactions.
    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let stop = stop.clone();
        let c = db.client().await.unwrap();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                c.execute(
                    "update accounts set v = v + 1 where id = $1",
                    &[&(51 + (n % 50) as i64)],
                )
                .await
                .unwrap();
                n += 1;
            }
            n
        })
    };

    // Write, wait, read: rows 1..=50, each value new.
    let mut slowest = Duration::ZERO;
    for i in 1..=1000_i64 {
        let id = 1 + i % 50;
        client
            .execute("update accounts set v = $1 where id = $2", &[&i, &id])
            .await
            .unwrap();
        let lsn: String = client
            .query_one("select pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        let started = Instant::now();
        for sink in ["cache", "mirror"] {
            let (status, body) =
                wait(&http, &d.admin, sink, &format!("lsn={lsn}&timeout=10s")).await;
            assert_eq!(status, 200, "write {i} to {sink}: {body}");
        }
        slowest = slowest.max(started.elapsed());
        let cached = redis_field(
            &mut redis_conn,
            &format!("{}accounts:{id}", cache.prefix),
            "v",
        )
        .await;
        assert_eq!(cached, Some(i.to_string()), "write {i}: Redis is stale");
        let mirrored: i64 = mirror
            .query_one("select v from public.accounts where id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(mirrored, i, "write {i}: the mirror is stale");
    }
    stop.store(true, Ordering::Relaxed);
    let background_writes = background.await.unwrap();
    assert!(
        background_writes > 1000,
        "the background writer wrote only {background_writes} transactions"
    );
    eprintln!("slowest wait for both sinks: {slowest:?}; background writes: {background_writes}");

    // No other writes: a single commit's wait ends within a second, also for a sink that
    // does not take the table.
    tokio::time::sleep(Duration::from_secs(1)).await;
    client
        .execute("update accounts set v = -1 where id = 1", &[])
        .await
        .unwrap();
    let lsn: String = client
        .query_one("select pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    for sink in ["elsewhere", "cache", "mirror"] {
        let started = Instant::now();
        let (status, body) = wait(&http, &d.admin, sink, &format!("lsn={lsn}&timeout=5s")).await;
        assert_eq!(status, 200, "{sink}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{sink}: the wait took {:?}",
            started.elapsed()
        );
        assert!(body["applied_position"].is_string(), "{sink}: {body}");
    }

    // A position the database has not reached: 408, with where the sink stands.
    let (high, low) = lsn.split_once('/').unwrap();
    let future = format!("{:X}/{low}", u32::from_str_radix(high, 16).unwrap() + 1);
    times_out(&http, &d.admin, &format!("lsn={future}")).await;
    // Bad requests name what is wrong.
    let (status, body) = wait(&http, &d.admin, "cache", "lsn=nonsense").await;
    assert_eq!(status, 400);
    assert!(body.to_string().contains("WAL position"), "{body}");
    let (status, _) = wait(&http, &d.admin, "nosuch", &format!("lsn={lsn}")).await;
    assert_eq!(status, 404);
    // The watermark metric.
    let metrics = http
        .get(format!("{}/metrics", d.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("siphon_sink_applied_commit_seconds{pipeline=\"demo\",sink=\"cache\"}"),
        "{metrics}"
    );
    drop(d);
    db.drop_slot(&slot).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mariadb_write_is_read_back_after_waiting_for_its_gtid() {
    let db = mysql().await.unwrap();
    let cache = redis().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table accounts (id bigint primary key, v bigint not null)")
        .await
        .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.accounts\"]\nheartbeat_interval = \"1s\"",
        db.url, db.server_id, db.name
    );
    let sinks = format!(
        "[pipelines.demo.sinks.cache]\nkind = \"redis\"\nurl = \"{}\"\nprefix = \"{}\"",
        cache.url, cache.prefix
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "streaming", |s| {
        s[0]["source_metrics"]["snapshot_running"] == 0.0
    })
    .await;
    let http = reqwest::Client::new();
    let mut redis_conn = cache.conn().await.unwrap();
    for i in 1..=100_i64 {
        conn.query_drop(format!(
            "insert into accounts values ({id}, {i}) on duplicate key update v = {i}",
            id = i % 10
        ))
        .await
        .unwrap();
        let gtid: String = conn
            .query_first("select @@gtid_binlog_pos")
            .await
            .unwrap()
            .unwrap();
        let (status, body) =
            wait(&http, &d.admin, "cache", &format!("gtid={gtid}&timeout=5s")).await;
        assert_eq!(status, 200, "write {i}: {body}");
        let cached = redis_field(
            &mut redis_conn,
            &format!("{}accounts:{}", cache.prefix, i % 10),
            "v",
        )
        .await;
        assert_eq!(cached, Some(i.to_string()), "write {i}: Redis is stale");
    }
    let gtid: String = conn
        .query_first("select @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    let (domain_server, seq) = gtid.rsplit_once('-').unwrap();
    let future = format!("{domain_server}-{}", seq.parse::<u64>().unwrap() + 1000);
    times_out(&http, &d.admin, &format!("gtid={future}")).await;

    // Restarted with nothing new to read, the source still says how far it has read (at the
    // server's heartbeat): a wait for the last write answers.
    let mut d = d;
    d.signal("TERM").unwrap();
    assert!(d.wait(Duration::from_secs(30)).unwrap().success());
    let d = setup.start();
    let (status, body) = wait(
        &http,
        &d.admin,
        "cache",
        &format!("gtid={gtid}&timeout=10s"),
    )
    .await;
    assert_eq!(status, 200, "after a restart: {body}");
    drop(d);
}
