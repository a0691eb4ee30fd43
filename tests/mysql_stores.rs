//! End to end through the daemon: MariaDB tables (snapshot, then inserts, updates and deletes
//! in multi-statement transactions) into the log and into Redis, a PostgreSQL mirror and a
//! DuckDB mirror; every store then holds exactly the tables' rows, value by value, in columns
//! the SQL sinks typed from the MySQL schema records.
#![cfg(feature = "duckdb")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Setup;
use mysql_async::prelude::Queryable;
use siphon_core::sink::Sink as _;
use siphon_test_support::{postgres, redis};

/// (table, id) → column → text (NULL: absent).
type Rows = BTreeMap<(String, i64), BTreeMap<String, String>>;

const COLUMNS: &[(&str, &[&str])] = &[
    (
        "accounts",
        &["owner", "balance", "version", "opened", "note"],
    ),
    ("items", &["sku", "price", "qty", "tags", "at"]),
];

/// One spelling for values the stores print differently (timestamps, doubles).
fn norm(column: &str, v: String) -> String {
    match column {
        "at" => chrono::NaiveDateTime::parse_from_str(&v.replace('T', " "), "%Y-%m-%d %H:%M:%S%.f")
            .map_or(v, |t| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()),
        "price" => v.parse::<f64>().map_or(v, |f| f.to_string()),
        _ => v,
    }
}

fn insert(rows: &mut Rows, table: &str, id: i64, values: Vec<Option<String>>) {
    let columns = COLUMNS.iter().find(|(t, _)| *t == table).unwrap().1;
    let row = columns
        .iter()
        .zip(values)
        .filter_map(|(c, v)| v.map(|v| ((*c).to_owned(), norm(c, v))))
        .collect();
    rows.insert((table.to_owned(), id), row);
}

/// Runs `select id, <columns as text>` for each table through `query`.
async fn collect<F, Fut>(mut query: F, select: impl Fn(&str, &[&str]) -> String) -> Rows
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Vec<(i64, Vec<Option<String>>)>>,
{
    let mut rows = Rows::new();
    for (table, columns) in COLUMNS {
        for (id, values) in query(select(table, columns)).await {
            insert(&mut rows, table, id, values);
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_tables_reach_redis_postgres_and_duckdb_exactly() {
    let db = siphon_test_support::mysql().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table accounts (id bigint primary key, owner varchar(50) not null,
             balance decimal(14,2) not null, version bigint not null, opened date, note text);
         create table items (id int primary key, sku char(8) not null, price double,
             qty int unsigned, tags set('a','b','c'), at datetime(6));",
    )
    .await
    .unwrap();
    let accounts = |from: i64, to: i64| {
        let v: Vec<String> = (from..to)
            .map(|i| {
                format!(
                    "({i}, 'owner {i}', {i}.25, 0, date '2024-02-29' + interval {i} day, {})",
                    if i % 4 == 0 {
                        "null".to_owned()
                    } else {
                        format!("'note {i}'")
                    }
                )
            })
            .collect();
        format!("insert into accounts values {}", v.join(", "))
    };
    let items = |from: i64, to: i64| {
        let v: Vec<String> = (from..to)
            .map(|i| format!("({i}, 'sku{i:05}', {i}.5, {}, '{}', '2024-02-29 10:11:12.5' + interval {i} minute)", 4_000_000_000_i64 + i, ["", "a", "a,c", "b"][(i % 4) as usize]))
            .collect();
        format!("insert into items values {}", v.join(", "))
    };
    conn.query_drop(format!("{}; {}", accounts(1, 301), items(1, 101)))
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
batch_size = 40

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"
batch_size = 40

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
batch_size = 40
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
                    .all(|v| v["next_offset"].as_u64() >= Some(400) && v["lag_records"] == 0)
            })
    })
    .await;

    // Debezium's snapshot markers, tables in name order: accounts (300 rows), items (100).
    let markers: Vec<String> = setup
        .output()
        .iter()
        .filter(|e| e["op"] == "r")
        .map(|e| e["source"]["snapshot"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(markers.len(), 400);
    let marker_at = |i: usize| markers[i].as_str();
    assert_eq!(
        [
            marker_at(0),
            marker_at(1),
            marker_at(299),
            marker_at(300),
            marker_at(301),
            marker_at(399)
        ],
        [
            "first",
            "true",
            "last_in_data_collection",
            "first_in_data_collection",
            "true",
            "last"
        ]
    );

    // Streaming: multi-statement transactions across both tables.
    conn.query_drop(format!(
        "start transaction; {}; {}; update accounts set balance = balance + 1, version = version + 1, note = null where id % 3 = 0; commit;
         start transaction; delete from accounts where id % 7 = 0; update items set price = price * 2, tags = 'c', qty = qty + 1 where id % 2 = 0; delete from items where id % 9 = 0; commit;",
        accounts(301, 401),
        items(101, 151)
    ))
    .await
    .unwrap();
    let end: u64 = {
        // Every change is in the log once the source has caught up: wait for the stores.
        let before = setup.output().len();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let n = setup.output().len();
            if n > before && n == setup.output().len() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if n == setup.output().len() {
                    break n as u64;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no changes reached the log:\n{}",
                d.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    common::wait_status(&d, Duration::from_secs(60), "every sink caught up", |s| {
        s[0]["sinks"].as_object().is_some_and(|m| {
            m.values()
                .all(|v| v["next_offset"].as_u64() >= Some(end) && v["lag_records"] == 0)
        })
    })
    .await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );

    // The tables, as MariaDB prints them.
    let want = collect(
        |sql| {
            let url = db.url.clone();
            async move {
                let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
                    .await
                    .unwrap();
                let rows: Vec<mysql_async::Row> = conn.query(sql).await.unwrap();
                rows.into_iter()
                    .map(|mut r| {
                        let id: i64 = r.take(0).unwrap();
                        let values = (1..r.len())
                            .map(|i| r.take::<Option<String>, _>(i).unwrap())
                            .collect();
                        (id, values)
                    })
                    .collect()
            }
        },
        |table, columns| {
            let list: Vec<String> = columns
                .iter()
                .map(|c| format!("cast({c} as char)"))
                .collect();
            format!("select id, {} from {table}", list.join(", "))
        },
    )
    .await;
    assert_eq!(
        want.len(),
        300 + 100 + 100 + 50 - 400 / 7 - 150 / 9,
        "the workload's rows"
    );

    let pg = target.client().await.unwrap();
    let warehouse = collect(
        |sql| {
            let pg = &pg;
            async move {
                pg.query(&sql, &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| {
                        (
                            r.get::<_, i64>(0),
                            (1..r.len())
                                .map(|i| r.get::<_, Option<String>>(i))
                                .collect(),
                        )
                    })
                    .collect()
            }
        },
        |table, columns| {
            let list: Vec<String> = columns.iter().map(|c| format!("{c}::text")).collect();
            format!(
                "select id::int8, {} from \"{}\".{table}",
                list.join(", "),
                db.name
            )
        },
    )
    .await;
    assert_eq!(warehouse, want, "the PostgreSQL mirror");
    let types: Vec<String> = pg
        .query(
            "select format_type(atttypid, atttypmod) from pg_attribute where attrelid = to_regclass($1) \
             and attnum > 0 and not attisdropped and attname not like '\\_siphon\\_%' order by attnum",
            &[&format!("\"{}\".items", db.name)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        types,
        [
            "integer",
            "text",
            "double precision",
            "bigint",
            "text",
            "timestamp without time zone"
        ],
        "the mirror's columns are typed from the MySQL schema record"
    );

    let mut inspect = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(lake.path().join("lake.duckdb")),
        "inspect",
        "inspect",
    )
    .unwrap();
    inspect.check().await.unwrap();
    let duck = inspect.dialect().connection().unwrap();
    let lake_rows = collect(
        |sql| {
            let mut stmt = duck.prepare(&sql).unwrap();
            let rows: Vec<(i64, Vec<Option<String>>)> = stmt
                .query_map([], |r| {
                    let n = r.as_ref().column_count();
                    Ok((
                        r.get::<_, i64>(0)?,
                        (1..n)
                            .map(|i| r.get::<_, Option<String>>(i).unwrap())
                            .collect(),
                    ))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            async move { rows }
        },
        |table, columns| {
            let list: Vec<String> = columns
                .iter()
                .map(|c| format!("CAST(\"{c}\" AS VARCHAR)"))
                .collect();
            format!(
                "SELECT CAST(id AS BIGINT), {} FROM \"{}_{table}\"",
                list.join(", "),
                db.name
            )
        },
    )
    .await;
    assert_eq!(lake_rows, want, "the DuckDB mirror");
    let types: Vec<String> = duck
        .prepare(&format!(
            "SELECT data_type FROM information_schema.columns WHERE table_name = '{}_accounts' \
             AND column_name NOT LIKE '\\_siphon\\_%' ESCAPE '\\' ORDER BY ordinal_position",
            db.name
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        types,
        [
            "BIGINT",
            "VARCHAR",
            "DECIMAL(14,2)",
            "BIGINT",
            "DATE",
            "VARCHAR"
        ],
        "the lake's columns are typed from the MySQL schema record"
    );

    let mut redis_conn = cache.conn().await.unwrap();
    let mut cached = Rows::new();
    for (table, columns) in COLUMNS {
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
            let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
            let values = columns.iter().map(|c| fields.get(*c).cloned()).collect();
            insert(&mut cached, table, id, values);
        }
    }
    assert_eq!(cached, want, "the Redis cache");
}
