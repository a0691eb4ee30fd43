//! Spatial columns end to end, through the snapshot and the stream, into the Debezium JSON
//! lines (with schemas), Redis (JSON documents and hashes), the Elasticsearch stand-in and
//! the PostgreSQL and DuckDB mirrors, each store compared row by row with the source:
//!
//! - MySQL/MariaDB's geometry types, with SRID 0 and 4326, empty collections and NULLs,
//!   against what the server's own `ST_AsBinary` and `ST_SRID` say of each value;
//! - PostgreSQL's built-in geometric types (`point`, `line`, `lseg`, `box`, `path`,
//!   `polygon`, `circle`), against the text PostgreSQL prints for each (a `point` in the
//!   Debezium records is Debezium's Point struct, its coordinates the point's).
#![cfg(feature = "duckdb")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::Setup;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;
use siphon_core::sink::Sink as _;
use siphon_test_support::search::SearchStandIn;
use siphon_test_support::{postgres, redis};

/// The table's spatial columns and their types.
const COLUMNS: &[(&str, &str)] = &[
    ("g", "geometry"),
    ("p", "point"),
    ("l", "linestring"),
    ("a", "polygon"),
    ("mp", "multipoint"),
    ("ml", "multilinestring"),
    ("ma", "multipolygon"),
    ("gc", "geometrycollection"),
];

/// (id, column) → (SRID, WKB in upper-case hex); a NULL is absent.
type Shapes = BTreeMap<(i64, String), (u32, String)>;

/// A row of every type, its coordinates moved by `at`, in `srid`.
fn row(id: i64, at: i64, srid: u32) -> String {
    let shape = |wkt: String| format!("ST_GeomFromText('{wkt}', {srid})");
    let (x, y) = (at, at + 1);
    let values = [
        shape(format!(
            "POLYGON(({x} {y},{x} {},{} {y},{x} {y}))",
            y + 2,
            x + 2
        )),
        shape(format!("POINT({x} {y})")),
        shape(format!("LINESTRING({x} {y},{} {})", x + 1, y + 1)),
        shape(format!(
            "POLYGON(({x} {y},{x} {},{} {},{x} {y}))",
            y + 1,
            x + 1,
            y + 1
        )),
        shape(format!("MULTIPOINT({x} {y},{} {y})", x + 3)),
        shape(format!(
            "MULTILINESTRING(({x} {y},{} {y}),({x} {},{} {}))",
            x + 1,
            y + 1,
            x + 1,
            y + 1
        )),
        shape(format!(
            "MULTIPOLYGON((({x} {y},{x} {},{} {y},{x} {y})))",
            y + 1,
            x + 1
        )),
        shape(format!(
            "GEOMETRYCOLLECTION(POINT({x} {y}),LINESTRING({x} {y},{} {}))",
            x + 1,
            y + 1
        )),
    ];
    format!("({id}, {})", values.join(", "))
}

/// A row whose collections are empty (the other columns NULL), and a row of NULLs.
fn empty_and_null_rows(empty: i64, null: i64) -> String {
    let empty_collection = "ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')";
    format!(
        "({empty}, {empty_collection}, null, null, null, null, null, null, {empty_collection}), \
         ({null}, null, null, null, null, null, null, null, null)"
    )
}

/// The source's shapes as the server gives them: `ST_SRID` and `ST_AsBinary` of each value.
async fn source_shapes(url: &str) -> Shapes {
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(url).unwrap())
        .await
        .unwrap();
    let mut shapes = Shapes::new();
    for (column, _) in COLUMNS {
        let rows: Vec<(i64, Option<u32>, Option<String>)> = conn
            .query(format!(
                "select id, ST_SRID({column}), hex(ST_AsBinary({column})) from shapes"
            ))
            .await
            .unwrap();
        for (id, srid, wkb) in rows {
            if let (Some(srid), Some(wkb)) = (srid, wkb) {
                shapes.insert((id, (*column).to_owned()), (srid, wkb));
            }
        }
    }
    shapes
}

/// A store's `{"wkb": base64, "srid": n or null}` object (or Debezium's Point, which adds
/// its coordinates) as (SRID, hex).
fn from_object(object: &Json) -> (u32, String) {
    let wkb = BASE64
        .decode(
            object["wkb"]
                .as_str()
                .unwrap_or_else(|| panic!("no wkb in {object}")),
        )
        .unwrap();
    let srid = match &object["srid"] {
        Json::Null => 0,
        n => u32::try_from(n.as_u64().unwrap()).unwrap(),
    };
    (srid, hex(&wkb))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// The shapes of documents by id, each column an object (or, `as_text`, its JSON text).
fn from_documents(documents: impl IntoIterator<Item = (i64, Json)>, as_text: bool) -> Shapes {
    let mut shapes = Shapes::new();
    for (id, document) in documents {
        for (column, _) in COLUMNS {
            let object = match &document[*column] {
                Json::Null => continue,
                Json::String(text) if as_text => serde_json::from_str(text).unwrap(),
                object => object.clone(),
            };
            shapes.insert((id, (*column).to_owned()), from_object(&object));
        }
    }
    shapes
}

/// `shapes` without their SRIDs: what the SQL mirrors keep.
fn wkb_only(shapes: &Shapes) -> BTreeMap<(i64, String), String> {
    shapes
        .iter()
        .map(|(at, (_, wkb))| (at.clone(), wkb.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn spatial_values_reach_every_store_as_st_asbinary_and_st_srid_give_them() {
    let db = siphon_test_support::mysql().await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let search = SearchStandIn::start().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    let mut conn = db.conn().await.unwrap();
    let columns: Vec<String> = COLUMNS.iter().map(|(c, t)| format!("{c} {t}")).collect();
    conn.query_drop(format!(
        "create table shapes (id int primary key, {})",
        columns.join(", ")
    ))
    .await
    .unwrap();
    // The snapshot's rows.
    conn.query_drop(format!(
        "insert into shapes values {}, {}, {}",
        row(1, 10, 0),
        row(2, 20, 4326),
        empty_and_null_rows(3, 4)
    ))
    .await
    .unwrap();

    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.shapes\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let sinks = format!(
        r#"schemas = true

[pipelines.demo.sinks.documents]
kind = "redis"
url = "{redis}"
prefix = "{prefix}doc:"
format = "json"

[pipelines.demo.sinks.hashes]
kind = "redis"
url = "{redis}"
prefix = "{prefix}hash:"

[pipelines.demo.sinks.search]
kind = "elasticsearch"
url = "{search}"
index = "shapes"

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
"#,
        redis = cache.url,
        prefix = cache.prefix,
        search = search.url,
        target = target.url,
        lake = lake.path().join("lake.duckdb").display(),
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let mut d = setup.start();
    let caught_up = |end: u64| {
        move |s: &Json| {
            s[0]["sinks"].as_object().is_some_and(|m| {
                m.values()
                    .all(|v| v["next_offset"].as_u64() >= Some(end) && v["lag_records"] == 0)
            })
        }
    };
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the snapshot applied",
        caught_up(4),
    )
    .await;

    // The stream's: inserts of every kind, an update that changes a row's SRID, a delete.
    conn.query_drop(format!(
        "insert into shapes values {}, {}, {};
         start transaction;
         update shapes set p = ST_GeomFromText('POINT(7 8)', 4326), g = ST_GeomFromText('POINT(7 8)') where id = 1;
         delete from shapes where id = 2;
         commit;",
        row(11, 30, 0),
        row(12, 40, 4326),
        empty_and_null_rows(13, 14)
    ))
    .await
    .unwrap();
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the stream applied",
        caught_up(4 + 4 + 2),
    )
    .await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );

    let want = source_shapes(&db.url).await;
    assert_eq!(
        want.keys()
            .map(|(id, _)| *id)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        5,
        "rows 1, 3, 11, 12 and 13 hold shapes; 4 and 14 none: {want:?}"
    );
    assert!(
        want.values().any(|(srid, _)| *srid == 4326) && want.values().any(|(srid, _)| *srid == 0)
    );

    assert_debezium_lines(&setup, &want);
    assert_redis(&cache, &want).await;
    let documents = search
        .documents("shapes")
        .into_iter()
        .map(|(id, document)| (id.parse().unwrap(), document));
    assert_eq!(
        from_documents(documents, false),
        want,
        "the Elasticsearch documents"
    );
    assert_sql_mirrors(&db.name, &target, lake.path(), &want).await;
}

/// The JSON lines sink's Debezium records: each row's last `after` holds the shapes, a POINT
/// column as Debezium's Point (its coordinates too), the others as its Geometry, and the
/// schema names those structs.
fn assert_debezium_lines(setup: &Setup, want: &Shapes) {
    let mut last = BTreeMap::new();
    let mut schemas = BTreeMap::new();
    for record in setup.output() {
        let payload = &record["payload"];
        let id = payload["after"]["id"]
            .as_i64()
            .or_else(|| payload["before"]["id"].as_i64())
            .unwrap();
        last.insert(id, payload["after"].clone());
        if let Some(fields) = record["schema"]["fields"][1]["fields"].as_array() {
            for field in fields {
                schemas.insert(
                    field["field"].as_str().unwrap().to_owned(),
                    field["name"].clone(),
                );
            }
        }
    }
    let documents: Vec<(i64, Json)> = last
        .into_iter()
        .filter(|(_, after)| !after.is_null())
        .collect();
    let lines = from_documents(documents.clone(), false);
    assert_eq!(&lines, want, "the Debezium JSON lines");
    for (id, after) in documents {
        if let Some(point) = after["p"].as_object() {
            let field = |name: &str| {
                point
                    .get(name)
                    .unwrap_or_else(|| panic!("row {id}'s point has no {name}: {point:?}"))
            };
            let (x, y) = (field("x").as_f64().unwrap(), field("y").as_f64().unwrap());
            let wkb = BASE64.decode(field("wkb").as_str().unwrap()).unwrap();
            let at = |i: usize| f64::from_le_bytes(wkb[i..i + 8].try_into().unwrap());
            assert_eq!((x, y), (at(5), at(13)), "row {id}'s point: {point:?}");
        }
    }
    for (column, _) in COLUMNS {
        let name = if *column == "p" { "Point" } else { "Geometry" };
        assert_eq!(
            schemas[*column],
            format!("io.debezium.data.geometry.{name}"),
            "column {column}'s schema"
        );
    }
}

/// Redis: documents hold each shape as an object, hashes as that object's JSON text.
async fn assert_redis(cache: &siphon_test_support::RedisKeyspace, want: &Shapes) {
    let mut conn = cache.conn().await.unwrap();
    for (sink, as_text) in [("doc", false), ("hash", true)] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}{sink}:*shapes:*", cache.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut documents = Vec::new();
        for key in keys {
            let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
            let document: Json = if as_text {
                let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                serde_json::to_value(fields).unwrap()
            } else {
                let text: String = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                serde_json::from_str(&text).unwrap()
            };
            documents.push((id, document));
        }
        assert_eq!(
            &from_documents(documents, as_text),
            want,
            "the Redis {sink} sink"
        );
    }
}

/// The PostgreSQL mirror's `bytea` and the DuckDB mirror's `BLOB` hold each shape's WKB.
async fn assert_sql_mirrors(
    database: &str,
    target: &siphon_test_support::PgDatabase,
    lake: &std::path::Path,
    want: &Shapes,
) {
    let select = |hex: &str, table: &str| {
        COLUMNS
            .iter()
            .map(|(c, _)| {
                format!(
                    "select id, '{c}', {} from {table} where {c} is not null",
                    hex.replace('?', c)
                )
            })
            .collect::<Vec<_>>()
            .join(" union all ")
    };
    let pg = target.client().await.unwrap();
    let warehouse: BTreeMap<(i64, String), String> = pg
        .query(
            &select("upper(encode(?, 'hex'))", &format!("\"{database}\".shapes")),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| ((i64::from(r.get::<_, i32>(0)), r.get(1)), r.get(2)))
        .collect();
    assert_eq!(warehouse, wkb_only(want), "the PostgreSQL mirror");
    let types: Vec<String> = pg
        .query(
            "select distinct format_type(atttypid, atttypmod) from pg_attribute \
             where attrelid = to_regclass($1) and attnum > 0 and attname <> 'id' and attname not like '\\_siphon\\_%'",
            &[&format!("\"{database}\".shapes")],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(types, ["bytea"], "the mirror's spatial columns");

    let mut inspect = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(lake.join("lake.duckdb")),
        "inspect",
        "inspect",
    )
    .unwrap();
    inspect.check().await.unwrap();
    let duck = inspect.dialect().connection().unwrap();
    let mut statement = duck
        .prepare(&select("hex(?)", &format!("\"{database}_shapes\"")))
        .unwrap();
    let lake_rows: BTreeMap<(i64, String), String> = statement
        .query_map([], |r| Ok(((r.get::<_, i64>(0)?, r.get(1)?), r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(lake_rows, wkb_only(want), "the DuckDB mirror");
}

/// PostgreSQL's geometric types and a value of each for row `k`.
const PG_COLUMNS: &[(&str, &str, &str)] = &[
    ("pt", "point", "point(k, -k / 2.0)"),
    ("ln", "line", "line(point(0, 0), point(k, 1))"),
    ("ls", "lseg", "lseg(point(0, 0), point(k, k))"),
    ("bx", "box", "box(point(0, 0), point(k, k + 0.25))"),
    ("pa", "path", "path(polygon(box(point(0, 0), point(k, 1))))"),
    ("pg", "polygon", "polygon(box(point(k, 0), point(1, 1)))"),
    ("ci", "circle", "circle(point(k, 1), k / 4.0)"),
];

/// (id, column) → the value's text; a NULL is absent.
type Texts = BTreeMap<(i64, String), String>;

/// Rows `ids` of the geometric table, with each column's value for that row.
fn pg_rows(ids: std::ops::Range<i64>) -> String {
    let columns: Vec<&str> = PG_COLUMNS.iter().map(|(c, _, _)| *c).collect();
    let values: Vec<&str> = PG_COLUMNS.iter().map(|(_, _, v)| *v).collect();
    format!(
        "insert into geo (id, {}) select k, {} from generate_series({}, {}) k",
        columns.join(", "),
        values.join(", "),
        ids.start,
        ids.end - 1
    )
}

/// The texts of `select id, <each column as text> from table` through `client`.
async fn pg_texts(client: &tokio_postgres::Client, table: &str) -> Texts {
    let list: Vec<String> = PG_COLUMNS
        .iter()
        .map(|(c, _, _)| format!("{c}::text"))
        .collect();
    let mut texts = Texts::new();
    for row in client
        .query(&format!("select id, {} from {table}", list.join(", ")), &[])
        .await
        .unwrap()
    {
        for (i, (column, _, _)) in PG_COLUMNS.iter().enumerate() {
            if let Some(text) = row.get::<_, Option<String>>(i + 1) {
                texts.insert((row.get(0), (*column).to_owned()), text);
            }
        }
    }
    texts
}

/// The texts of documents by id, each column's value a string.
fn texts_of(documents: impl IntoIterator<Item = (i64, Json)>) -> Texts {
    let mut texts = Texts::new();
    for (id, document) in documents {
        for (column, _, _) in PG_COLUMNS {
            if let Some(text) = document[*column].as_str() {
                texts.insert((id, (*column).to_owned()), text.to_owned());
            }
        }
    }
    texts
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_geometric_types_reach_every_store_as_their_text() {
    let db = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let search = SearchStandIn::start().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    let columns: Vec<String> = PG_COLUMNS
        .iter()
        .map(|(c, t, _)| format!("{c} {t}"))
        .collect();
    db.execute(&format!(
        "create table geo (id int8 primary key, {}); {}; insert into geo (id) values (0);",
        columns.join(", "),
        pg_rows(1..4)
    ))
    .await
    .unwrap();
    let source = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.geo\"]\nslot = \"{}_slot\"\nstatus_interval = \"200ms\"",
        db.url, db.name
    );
    let sinks = format!(
        r#"schemas = true

[pipelines.demo.sinks.hashes]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"

[pipelines.demo.sinks.search]
kind = "elasticsearch"
url = "{search}"
index = "geo"

[pipelines.demo.sinks.mirror]
kind = "postgres"
url = "{url}"
schema = "mirror"

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
"#,
        redis = cache.url,
        prefix = cache.prefix,
        search = search.url,
        url = db.url,
        lake = lake.path().join("lake.duckdb").display(),
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let mut d = setup.start();
    let caught_up = |end: u64| {
        move |s: &Json| {
            s[0]["sinks"].as_object().is_some_and(|m| {
                m.values()
                    .all(|v| v["next_offset"].as_u64() >= Some(end) && v["lag_records"] == 0)
            })
        }
    };
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the snapshot applied",
        caught_up(4),
    )
    .await;
    db.execute(&format!(
        "{}; update geo set pt = point(-1.5, 2.25), ci = null where id = 1; delete from geo where id = 2",
        pg_rows(10..13)
    ))
    .await
    .unwrap();
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the stream applied",
        caught_up(4 + 3 + 2),
    )
    .await;
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );

    let client = db.client().await.unwrap();
    let want = pg_texts(&client, "public.geo").await;
    assert_eq!(want.len(), 5 * PG_COLUMNS.len() - 1, "{want:?}");
    assert_eq!(
        pg_texts(&client, "mirror.geo").await,
        want,
        "the PostgreSQL mirror"
    );

    let mut redis_conn = cache.conn().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*geo:*", cache.prefix))
        .query_async(&mut redis_conn)
        .await
        .unwrap();
    let mut hashes = Vec::new();
    for key in keys {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut redis_conn)
            .await
            .unwrap();
        let id = key.rsplit(':').next().unwrap().parse().unwrap();
        hashes.push((id, serde_json::to_value(fields).unwrap()));
    }
    assert_eq!(texts_of(hashes), want, "the Redis hashes");
    let documents = search
        .documents("geo")
        .into_iter()
        .map(|(id, document)| (id.parse().unwrap(), document));
    assert_eq!(texts_of(documents), want, "the Elasticsearch documents");

    let mut inspect = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(lake.path().join("lake.duckdb")),
        "inspect",
        "inspect",
    )
    .unwrap();
    inspect.check().await.unwrap();
    let duck = inspect.dialect().connection().unwrap();
    let list: Vec<String> = PG_COLUMNS
        .iter()
        .map(|(c, _, _)| format!("\"{c}\""))
        .collect();
    let mut statement = duck
        .prepare(&format!("SELECT id, {} FROM public_geo", list.join(", ")))
        .unwrap();
    let lake_rows: Texts = statement
        .query_map([], |r| {
            Ok(PG_COLUMNS
                .iter()
                .enumerate()
                .filter_map(|(i, (c, _, _))| {
                    let text: Option<String> = r.get(i + 1).unwrap();
                    text.map(|t| ((r.get::<_, i64>(0).unwrap(), (*c).to_owned()), t))
                })
                .collect::<Vec<_>>())
        })
        .unwrap()
        .flat_map(Result::unwrap)
        .collect();
    assert_eq!(lake_rows, want, "the DuckDB mirror");

    // The Debezium records: a point is Debezium's Point, the others their text.
    let mut last = BTreeMap::new();
    for record in setup.output() {
        let payload = &record["payload"];
        if let Some(id) = payload["after"]["id"].as_i64() {
            last.insert(id, payload["after"].clone());
        }
        if let Some(fields) = record["schema"]["fields"][1]["fields"].as_array() {
            let pt = fields.iter().find(|f| f["field"] == "pt").unwrap();
            assert_eq!(pt["name"], "io.debezium.data.geometry.Point", "{pt}");
        }
    }
    for ((id, column), text) in &want {
        let value = &last[id][column];
        if column == "pt" {
            let (x, y) = text[1..text.len() - 1].split_once(',').unwrap();
            assert_eq!(
                (value["x"].as_f64(), value["y"].as_f64(), &value["srid"]),
                (x.parse().ok(), y.parse().ok(), &Json::Null),
                "row {id}'s point {text}: {value}"
            );
        } else {
            assert_eq!(value.as_str(), Some(text.as_str()), "row {id}'s {column}");
        }
    }
}
