//! MariaDB statements that remove rows without a row event — `TRUNCATE`, `DROP TABLE`,
//! `DROP DATABASE`, `CREATE OR REPLACE TABLE`, `RENAME TABLE` over a captured name (MariaDB's
//! `IF EXISTS` form too), `ALTER TABLE … TRUNCATE PARTITION` — reach the stores, and a
//! temporary table's `DROP` does not touch the captured table it shadows:
//! each table in Redis and in the PostgreSQL mirror ends up with exactly the rows the table
//! holds (before, truncated rows stayed in every store for good).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::Setup;
use mysql_async::prelude::Queryable;
use siphon_test_support::{postgres, redis};

/// Table → ids.
type Ids = BTreeMap<String, BTreeSet<i64>>;

const TABLES: &[&str] = &[
    "t1", "t2", "t3", "t4", "t4_new", "t4_old", "t5", "t6", "t7", "t7_new", "t7_old", "gone.x",
];

/// "gone.x" stands for the table `x` of the second database, which the test drops.
async fn source_ids(conn: &mut mysql_async::Conn, database: &str) -> Ids {
    let mut out = Ids::new();
    for t in TABLES {
        let ids: Vec<i64> = match *t {
            "gone.x" => Vec::new(),
            t => conn
                .query(format!("select id from {database}.{t}"))
                .await
                .unwrap_or_default(),
        };
        out.insert((*t).to_owned(), ids.into_iter().collect());
    }
    out
}

async fn redis_ids(cache: &siphon_test_support::RedisKeyspace) -> Ids {
    let mut conn = cache.conn().await.unwrap();
    let mut out = Ids::new();
    for t in TABLES {
        let table = t.strip_prefix("gone.").unwrap_or(t);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}{table}:*", cache.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        out.insert(
            (*t).to_owned(),
            keys.iter()
                .map(|k| k.rsplit(':').next().unwrap().parse().unwrap())
                .collect(),
        );
    }
    out
}

async fn mirror_ids(pg: &tokio_postgres::Client, schema: &str, gone: &str) -> Ids {
    let mut out = Ids::new();
    for t in TABLES {
        let (schema, table) = match t.strip_prefix("gone.") {
            Some(table) => (gone, table),
            None => (schema, *t),
        };
        let ids = pg
            .query(&format!("select id::int8 from \"{schema}\".{table}"), &[])
            .await
            .map(|rows| rows.iter().map(|r| r.get::<_, i64>(0)).collect())
            .unwrap_or_default();
        out.insert((*t).to_owned(), ids);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn statements_that_remove_rows_remove_them_from_every_store() {
    let db = siphon_test_support::mysql().await.unwrap();
    let other = siphon_test_support::mysql().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table t1 (id int primary key, v int);
         create table t2 (id int primary key, v int);
         create table t3 (id int primary key, v int);
         create table t4 (id int primary key, v int);
         insert into t1 select seq, seq from seq_1_to_50;
         insert into t2 select seq, seq from seq_1_to_20;
         insert into t3 select seq, seq from seq_1_to_30;
         insert into t4 select seq, seq from seq_1_to_40;
         create table t5 (id int primary key, v int) partition by range (id)
             (partition p0 values less than (10), partition p1 values less than (100));
         insert into t5 select seq, seq from seq_1_to_50;
         create table t6 (id int primary key, v int);
         insert into t6 select seq, seq from seq_1_to_5;
         create table t7 (id int primary key, v int);
         insert into t7 select seq, seq from seq_1_to_15;",
    )
    .await
    .unwrap();
    conn.query_drop(format!(
        "create table {0}.x (id int primary key, v int); insert into {0}.x select seq, seq from seq_1_to_12;",
        other.name
    ))
    .await
    .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.*\", \"{}.*\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name, other.name
    );
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{}"
prefix = "{}"

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{}"
"#,
        cache.url, cache.prefix, target.url
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        s[0]["source_metrics"]["snapshot_running"] == 0.0
            && s[0]["sinks"].as_object().is_some_and(|m| {
                m.values()
                    .all(|v| v["next_offset"].as_u64() >= Some(222) && v["lag_records"] == 0)
            })
    })
    .await;

    // No NOWAIT below (the parser's unit test has it): the daemon reads a new table's shape
    // after its CREATE, and a rename that may not wait for that metadata lock fails (1205).
    conn.query_drop(
        "truncate t1;
         insert into t1 values (1, 100);
         drop table t2;
         create or replace table t3 (id int primary key, v int) select 7 as id, 70 as v;
         create table t4_new (id int primary key, v int);
         insert into t4_new select seq + 1000, seq from seq_1_to_25;
         rename table t4 to t4_old, t4_new to t4;
         alter table t5 truncate partition p0;
         set session binlog_format = 'STATEMENT';
         create temporary table t6 (id int primary key);
         drop temporary table t6;
         set session binlog_format = 'ROW';
         create table t7_new (id int primary key, v int);
         insert into t7_new select seq + 500, seq from seq_1_to_3;
         rename table if exists t7 wait 30 to t7_old, t7_new wait 30 to t7;",
    )
    .await
    .unwrap();
    conn.query_drop(format!("drop database {}", other.name))
        .await
        .unwrap();
    let want = source_ids(&mut conn, &db.name).await;
    assert_eq!(
        want.values().map(BTreeSet::len).collect::<Vec<_>>(),
        [0, 1, 0, 1, 25, 0, 40, 41, 5, 3, 0, 15],
        "the workload's rows (gone.x, then t1..t7_old)"
    );
    let pg = target.client().await.unwrap();
    // The renamed tables are read again incrementally: wait on what the stores hold,
    // failing only when nothing moves for a while.
    let mut last = (None, Instant::now());
    loop {
        let now = (
            redis_ids(&cache).await,
            mirror_ids(&pg, &db.name, &other.name).await,
        );
        if now.0 == want && now.1 == want {
            break;
        }
        if last.0.as_ref() != Some(&now) {
            last = (Some(now), Instant::now());
        }
        let (cached, mirrored) = last.0.as_ref().unwrap();
        assert!(
            last.1.elapsed() < Duration::from_secs(30),
            "nothing moved for 30 s:\ntable  {want:?}\nredis  {cached:?}\nmirror {mirrored:?}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(d);
}
