//! MariaDB values the stores used to get wrong, end to end through the daemon: keys in a
//! character set other than UTF-8 (`latin1`'s 'café' and 'cafè' were one key), `BINARY(n)`
//! keys ending in zero bytes (the binlog drops them: updates missed the snapshot's row), text
//! after a geometry column (which shifted every later column's set) or in a collation MariaDB
//! numbers apart (`utf8mb4_uca1400_ai_ci`), TIME
//! below zero and past a day (its hours were lost), and the zero TIMESTAMP (1970 in the stream,
//! NULL in the snapshot). Each table gets rows from the snapshot and from the stream, and
//! Redis, the PostgreSQL mirror and the DuckDB mirror must each hold exactly the table.
#![cfg(feature = "duckdb")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use common::Setup;
use mysql_async::prelude::Queryable;
use siphon_core::sink::Sink as _;
use siphon_test_support::{postgres, redis};

/// Table → its rows, each as the texts of its columns (normalized).
type Tables = BTreeMap<&'static str, BTreeSet<Vec<String>>>;

/// The tables and their columns, in the order every store's query lists them.
const TABLES: &[(&str, &[&str])] = &[
    ("latin", &["k", "v", "u", "n"]),
    ("fixed", &["id", "n"]),
    ("spans", &["id", "t", "ts"]),
];

/// A TIME (or interval) as microseconds, however the store prints it: `-05:01:02.5`,
/// `100:00:00.0`, `-05:01:02.500000`.
fn span(text: &str) -> String {
    let (negative, rest) = text.strip_prefix('-').map_or((false, text), |r| (true, r));
    let (whole, fraction) = rest.split_once('.').unwrap_or((rest, ""));
    let parts: Vec<i64> = whole.split(':').map(|p| p.parse().unwrap()).collect();
    let [h, m, s] = parts[..] else {
        panic!("not a time: {text}")
    };
    let micros: i64 = format!("{fraction:0<6}")[..6].parse().unwrap();
    let total = ((h * 60 + m) * 60 + s) * 1_000_000 + micros;
    (if negative { -total } else { total }).to_string()
}

fn normalized(table: &str, mut row: Vec<String>) -> Vec<String> {
    if table == "spans" {
        row[1] = span(&row[1]);
    }
    if table == "fixed" {
        row[0] = row[0].to_ascii_uppercase();
    }
    row
}

fn add(tables: &mut Tables, table: &'static str, row: Vec<String>) {
    tables
        .entry(table)
        .or_default()
        .insert(normalized(table, row));
}

#[tokio::test(flavor = "multi_thread")]
async fn odd_mariadb_values_reach_every_store_as_the_table_holds_them() {
    let db = siphon_test_support::mysql().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "set session sql_mode = '';
         create table latin (k varchar(10) character set latin1 collate latin1_bin primary key,
             g geometry null, v varchar(20) character set latin1,
             u varchar(20) character set utf8mb4 collate utf8mb4_uca1400_ai_ci, n int)
             default charset = latin1;
         create table fixed (id binary(4) primary key, n int);
         create table spans (id int primary key, t time(1), ts timestamp null);
         insert into latin values ('café', point(1, 2), 'été', 'ü1', 1), ('naïf', null, 'ça', 'ü2', 2);
         insert into fixed values (x'01020000', 1), (x'0a0b0c0d', 1);
         insert into spans values (1, '-05:01:02.5', '2024-01-02 03:04:05'),
             (2, '100:00:00', '0000-00-00 00:00:00'), (3, '838:59:59', null),
             (4, '-838:59:59', '2024-01-02 03:04:05');",
    )
    .await
    .unwrap();

    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.*\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
"#,
        redis = cache.url,
        prefix = cache.prefix,
        target = target.url,
        lake = lake.path().join("lake.duckdb").display(),
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let mut d = setup.start();
    common::wait_status(&d, Duration::from_secs(60), "the snapshot applied", |s| {
        s[0]["source_metrics"]["snapshot_running"] == 0.0
            && s[0]["sinks"].as_object().is_some_and(|m| {
                m.values()
                    .all(|v| v["next_offset"].as_u64() >= Some(8) && v["lag_records"] == 0)
            })
    })
    .await;

    // The stream: a second key 'cafè' beside 'café', the snapshot's rows changed by their
    // keys, new TIMEs and a zero TIMESTAMP.
    conn.query_drop(
        "set session sql_mode = '';
         insert into latin values ('cafè', point(3, 4), 'è', 'ü3', 3);
         update latin set v = 'naïve', u = 'über', n = 10 where k = 'café';
         delete from latin where k = 'naïf';
         update fixed set n = 2 where id = x'01020000';
         insert into fixed values (x'ff000000', 3);
         update spans set t = '-00:00:00.5', ts = '0000-00-00 00:00:00' where id = 1;
         insert into spans values (5, '-100:30:00.1', '0000-00-00 00:00:00'),
             (6, '24:00:00', '2025-05-05 05:05:05');",
    )
    .await
    .unwrap();
    let gtid: String = conn
        .query_first("select @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    for sink in ["cache", "warehouse", "lake"] {
        common::wait_applied(&d, sink, &format!("gtid={gtid}"), Duration::from_secs(60)).await;
    }
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );

    // The tables, as MariaDB reads them.
    let mut want = Tables::new();
    for (table, select) in [
        ("latin", "select k, v, u, cast(n as char) from latin"),
        ("fixed", "select hex(id), cast(n as char) from fixed"),
        (
            "spans",
            // The zero TIMESTAMP, which no calendar holds, is NULL in every store (as in
            // Debezium's output).
            "select cast(id as char), cast(t as char), if(ts is null or ts = 0, 'null', 'set') from spans",
        ),
    ] {
        let rows: Vec<mysql_async::Row> = conn.query(select).await.unwrap();
        for mut r in rows {
            let row = (0..r.len())
                .map(|i| r.take::<String, _>(i).unwrap())
                .collect();
            add(&mut want, table, row);
        }
    }
    assert_eq!(
        want.values().map(BTreeSet::len).collect::<Vec<_>>(),
        [3, 2, 6],
        "the workload's rows"
    );

    let pg = target.client().await.unwrap();
    let mut warehouse = Tables::new();
    for (table, select) in [
        ("latin", "select k, v, u, n::text from \"{db}\".latin"),
        (
            "fixed",
            "select encode(id, 'hex'), n::text from \"{db}\".fixed",
        ),
        (
            "spans",
            "select id::text, t::text, case when ts is null then 'null' else 'set' end from \"{db}\".spans",
        ),
    ] {
        for r in pg
            .query(&select.replace("{db}", &db.name), &[])
            .await
            .unwrap()
        {
            let row = (0..r.len()).map(|i| r.get::<_, String>(i)).collect();
            add(&mut warehouse, table, row);
        }
    }
    assert_eq!(warehouse, want, "the PostgreSQL mirror");
    let time_type: String = pg
        .query_one(
            "select format_type(atttypid, atttypmod) from pg_attribute where attrelid = to_regclass($1) and attname = 't'",
            &[&format!("\"{}\".spans", db.name)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(time_type, "interval", "a TIME column is an interval");

    let mut inspect = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(lake.path().join("lake.duckdb")),
        "inspect",
        "inspect",
    )
    .unwrap();
    inspect.check().await.unwrap();
    let duck = inspect.dialect().connection().unwrap();
    let mut lakehouse = Tables::new();
    for (table, select) in [
        (
            "latin",
            "SELECT k, v, u, CAST(n AS VARCHAR) FROM \"{db}_latin\"",
        ),
        (
            "fixed",
            "SELECT hex(id), CAST(n AS VARCHAR) FROM \"{db}_fixed\"",
        ),
        (
            "spans",
            "SELECT CAST(id AS VARCHAR), CAST(t AS VARCHAR), CASE WHEN ts IS NULL THEN 'null' ELSE 'set' END FROM \"{db}_spans\"",
        ),
    ] {
        let mut stmt = duck.prepare(&select.replace("{db}", &db.name)).unwrap();
        let rows: Vec<Vec<String>> = stmt
            .query_map([], |r| {
                let n = r.as_ref().column_count();
                (0..n).map(|i| r.get::<_, String>(i)).collect()
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for row in rows {
            add(&mut lakehouse, table, row);
        }
    }
    assert_eq!(lakehouse, want, "the DuckDB mirror");

    let mut redis_conn = cache.conn().await.unwrap();
    let mut cached = Tables::new();
    for (table, columns) in TABLES {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}{table}:*", cache.prefix))
            .query_async(&mut redis_conn)
            .await
            .unwrap();
        for key in keys {
            let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut redis_conn)
                .await
                .unwrap();
            let row = columns
                .iter()
                .map(|c| match (*table, *c, fields.get(*c)) {
                    ("fixed", "id", Some(b64)) => base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .unwrap()
                        .iter()
                        .map(|b| format!("{b:02X}"))
                        .collect(),
                    ("spans", "ts", v) => if v.is_some() { "set" } else { "null" }.to_owned(),
                    (_, _, Some(v)) => v.clone(),
                    (_, c, None) => panic!("{key} has no {c}: {fields:?}"),
                })
                .collect();
            add(&mut cached, table, row);
        }
    }
    assert_eq!(cached, want, "the Redis cache");
}
