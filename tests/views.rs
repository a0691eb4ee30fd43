//! Joined documents end to end, against the real services: a view of orders with their
//! customer (nested), their line items (an array ordered by `line`) and each line's product
//! (flattened), kept in Redis (JSON) and in a search index while a writer renames customers
//! and products, moves orders and lines between parents, changes keys, deletes, inserts and
//! truncates, through kill -9s of the daemon (and the loss of one sink's view state); then
//! every document equals PostgreSQL's own `json_build_object`/`json_agg` of the same join,
//! and so it does again after the cache is wiped and rebuilt with
//! `siphon replay --from 0 --reset`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;
use common::db::{Session, SourceDb};
use common::pg::pg_source;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;
use siphon_test_support::search::SearchStandIn;
use siphon_test_support::{postgres, redis};

/// The shop's tables, with 40 customers, 15 products, 150 orders and 450 line items.
fn schema(db: &SourceDb) -> String {
    // A JSON column (MariaDB's is text, which its JSON_OBJECT quotes as siphon does), and a
    // foreign key of another integer type than the key it names.
    let (series, text, div, json, fk, meta) = match db {
        SourceDb::Postgres(_) => (
            "generate_series(1, {n}) g",
            "'{p}' || g",
            "/",
            "jsonb",
            "bigint",
            "('{\"n\": [' || g || ', null]}')::jsonb",
        ),
        SourceDb::Mariadb(_) => (
            "(select seq as g from seq_1_to_{n}) s",
            "concat('{p}', g)",
            "div",
            "json",
            "bigint unsigned",
            "concat('{\"n\": [', g, ', null]}')",
        ),
    };
    let rows = |n: u32| series.replace("{n}", &n.to_string());
    let label = |p: &str| text.replace("{p}", p);
    format!(
        "create table customers (id int primary key, name text not null, email text);
         create table products (id int primary key, name text not null, price numeric(8,2));
         create table orders (id int primary key, customer_id int, status text not null,
                              total int not null, meta {json});
         create table line_items (id int primary key, order_id {fk}, product_id int,
                                  line int not null, qty int not null);
         insert into customers select g, {customer}, 'c@example.com' from {forty};
         insert into products select g, {product}, g * 1.5 from {fifteen};
         insert into orders select g, g % 40 + 1, 'new', g * 10, {meta} from {orders};
         insert into line_items select g, g % 150 + 1, g % 15 + 1, g {div} 150, g % 7 + 1
             from {lines};",
        customer = label("customer "),
        product = label("product "),
        forty = rows(40),
        fifteen = rows(15),
        orders = rows(150),
        lines = rows(450),
    )
}

/// `[pipelines.demo.views.order_docs]`: orders with their customer (nested), their line
/// items by `line`, and each line's product name (flattened); tables in `namespace`.
fn view(namespace: &str) -> String {
    r#"
[pipelines.demo.views.order_docs]
root = "NS.orders"
columns = ["id", "status", "total", "meta"]

[pipelines.demo.views.order_docs.one.customer]
table = "NS.customers"
foreign_key = "customer_id"
columns = ["id", "name"]

[pipelines.demo.views.order_docs.many.lines]
table = "NS.line_items"
foreign_key = "order_id"
order_by = "line"
columns = ["line", "qty"]

[pipelines.demo.views.order_docs.many.lines.one.product]
table = "NS.products"
foreign_key = "product_id"
columns = ["name"]
flatten = "product_"
"#
    .replace("NS", namespace)
}

/// The view's documents as the database joins them, by order id: PostgreSQL's
/// `json_build_object`/`json_agg`, MariaDB's `JSON_OBJECT`/`JSON_ARRAYAGG`.
async fn oracle(db: &SourceDb) -> BTreeMap<i64, Json> {
    let query = |object: &str, array: &str, empty: &str, cast: &str, meta: &str| {
        format!(
            "select o.id, {cast}({object}(
                 'id', o.id, 'status', o.status, 'total', o.total, 'meta', {meta},
                 'customer', (select {object}('id', c.id, 'name', c.name)
                              from customers c where c.id = o.customer_id),
                 'lines', coalesce((select {array}({object}(
                                        'line', l.line, 'qty', l.qty, 'product_name', p.name)
                                        order by l.line, l.id)
                                    from line_items l left join products p on p.id = l.product_id
                                    where l.order_id = o.id), {empty})))
             from orders o"
        )
    };
    let rows: Vec<(i64, String)> = match db {
        SourceDb::Postgres(db) => db
            .client()
            .await
            .unwrap()
            .query(
                &query("json_build_object", "json_agg", "'[]'", "text", "o.meta")
                    .replace("select o.id,", "select o.id::bigint,"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect(),
        SourceDb::Mariadb(db) => db
            .conn()
            .await
            .unwrap()
            .query(query(
                // The binlog has a JSON column as text (a MariaDB JSON is LONGTEXT), and so
                // has siphon; JSON_OBJECT alone would embed it.
                "json_object",
                "json_arrayagg",
                "json_array()",
                "",
                "cast(o.meta as char)",
            ))
            .await
            .unwrap(),
    };
    rows.into_iter()
        .map(|(id, text)| (id, serde_json::from_str(&text).unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_documents_equal_the_sql_join_through_kills_and_a_rebuild() {
    documents_equal_the_sql_join(SourceDb::Postgres(postgres().await.unwrap()), None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_documents_equal_the_sql_join_through_kills_and_a_rebuild() {
    let db = siphon_test_support::mysql().await.unwrap();
    documents_equal_the_sql_join(SourceDb::Mariadb(db), None).await;
}

/// The same on the Kafka log (a noida-db broker), its tables' topics of three partitions.
/// noida-db's read_committed fetches drop a producer's records past one of its aborted
/// transactions (which every kill leaves): its readers start at the beginning.
#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread")]
async fn documents_on_the_kafka_log_equal_the_sql_join_through_kills_and_a_rebuild() {
    let broker = siphon_test_support::KafkaBroker::start().unwrap();
    let log = format!(
        "kind = \"kafka\"\nbrokers = \"{}\"\ntopics = {{ partitions = 3 }}\nseek = \"beginning\"",
        broker.brokers()
    );
    let db = SourceDb::Postgres(postgres().await.unwrap());
    documents_equal_the_sql_join(db, Some(&log)).await;
}

/// The `[pipelines.demo.source]` body capturing `db`'s tables, and their namespace.
fn source_config(db: &SourceDb) -> (String, String) {
    match db {
        SourceDb::Postgres(db) => (pg_source(db), "public".to_owned()),
        SourceDb::Mariadb(db) => (
            format!(
                "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.*\"]\nheartbeat_interval = \"500ms\"",
                db.url, db.server_id, db.name
            ),
            db.name.clone(),
        ),
    }
}

/// The scenario on `source`, its log the file log or the one `log` describes.
async fn documents_equal_the_sql_join(source: SourceDb, log: Option<&str>) {
    source.execute(&schema(&source)).await;
    let (source_config, namespace) = source_config(&source);
    let cache = redis().await.unwrap();
    let search = SearchStandIn::start().await.unwrap();
    let sinks = format!(
        r#"{view}
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"
format = "json"
view = "order_docs"
batch_size = 50

[pipelines.demo.sinks.search]
kind = "elasticsearch"
url = "{search}"
index = "{{schema}}_{{table}}"
view = "order_docs"
batch_size = 50
max_backoff = "500ms"
"#,
        view = view(&namespace),
        redis = cache.url,
        prefix = cache.prefix,
        search = search.url,
    );
    let setup = match log {
        Some(log) => Setup::with_log(&source_config, log, 0, &sinks),
        None => Setup::with_source(&source_config, 0, &sinks),
    };
    let mut d = setup.start();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write(source.session().await, stop.clone()));
    for round in 0..2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        d.kill_9().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        if round == 1 {
            // The search sink's view state lost while its index keeps its cursor: the view
            // is built again from the start of the log.
            let state = setup
                .dir
                .path()
                .join("data/pipelines/demo/views/search.redb");
            std::fs::remove_file(state).unwrap();
        }
        d = setup.start();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 100, "the writer wrote {written} transactions");
    let position = source.position().await;
    for sink in ["cache", "search"] {
        common::wait_applied(&d, sink, &position, Duration::from_secs(60)).await;
    }
    assert!(
        d.log()
            .contains("the view's state ends before the sink's cursor"),
        "the search sink did not rebuild its view:\n{}",
        d.log()
    );
    let want = oracle(&source).await;
    assert!(want.len() > 50, "{} orders", want.len());
    assert_same("cache", &want, &cached(&cache.url, &cache.prefix).await);
    assert_same("search", &want, &indexed(&search, &namespace));

    // A wiped cache, rebuilt from the log (and the view's state from nothing); asked to
    // replay from a later offset, the view still reads from the start, and so does the store.
    for from in ["0", "300"] {
        let mut conn = siphon_test_support::redis_conn(&cache.url).await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", cache.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .unwrap();
        let out = setup.cli(&["replay", "demo", "cache", "--from", from, "--reset"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        common::wait_applied(&d, "cache", &position, Duration::from_secs(60)).await;
        assert_same(
            &format!("cache after a rebuild from {from}"),
            &want,
            &cached(&cache.url, &cache.prefix).await,
        );
    }
}

/// A writer touching every join from both sides, until `stop`; counts its transactions.
async fn write(mut session: Session, stop: Arc<AtomicBool>) -> u64 {
    let pg = matches!(session, Session::Postgres(_));
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (order, customer, line, product) = (
            n * 37 % 170 + 1,
            n * 13 % 45 + 1,
            n * 29 % 520 + 1,
            n * 7 % 16 + 1,
        );
        // Upserts and key changes that may collide, in each dialect.
        let (upsert_line, new_order, ignore_lines, key_change) = if pg {
            (
                "on conflict (id) do update set order_id = excluded.order_id",
                "on conflict (id) do update set status = 'placed', total = excluded.total",
                "on conflict (id) do nothing",
                "update {t} set id = id + {by} where id = {id} and not exists
                     (select 1 from {t} where id = {id} + {by})",
            )
        } else {
            (
                "on duplicate key update order_id = values(order_id)",
                "on duplicate key update status = 'placed', total = values(total)",
                "on duplicate key update id = id",
                "update ignore {t} set id = id + {by} where id = {id}",
            )
        };
        let key_change = |t: &str, id: u64, by: u64| {
            key_change
                .replace("{t}", t)
                .replace("{id}", &id.to_string())
                .replace("{by}", &by.to_string())
        };
        let sql = match n % 12 {
            // A rename reaches every order of the customer (or line of the product).
            0 => format!("update customers set name = 'renamed {n}' where id = {customer}"),
            1 => format!("update products set name = 'product {n}' where id = {product}"),
            // Moves: an order to another customer, a line to another order.
            2 => format!("update orders set customer_id = {customer} where id = {order}"),
            3 => format!("update line_items set order_id = {order} where id = {line}"),
            4 => format!(
                "update line_items set qty = qty + 1, line = {} where id = {line}",
                n % 4
            ),
            5 => format!("delete from line_items where id = {line}"),
            6 => format!(
                "insert into line_items values ({line}, {order}, {product}, {}, 1) {upsert_line}",
                n % 5
            ),
            // An order with its lines, in one transaction, and its removal.
            7 => format!(
                "begin;
                 insert into orders values ({order}, {customer}, 'placed', {n}, '{{\"k\": \"v\"}}')
                     {new_order};
                 insert into line_items values ({l1}, {order}, {product}, 0, 2),
                                               ({l2}, {order}, 1, 1, 3) {ignore_lines};
                 commit;",
                l1 = 1000 + n,
                l2 = 100_000 + n
            ),
            8 => format!(
                "begin; delete from line_items where order_id = {order};
                 delete from orders where id = {order}; commit;"
            ),
            // Key changes: an order's (its lines stay with the old id) and a customer's.
            9 => key_change("orders", order, 170),
            10 => key_change("customers", customer, 45),
            _ if n % 240 == 11 => "truncate line_items".to_owned(),
            _ => format!("update orders set status = 'shipped {n}' where id = {order}"),
        };
        session.execute(&sql).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    n
}

/// The documents the Redis sink keeps under `<prefix>order_docs:<id>`.
async fn cached(url: &str, prefix: &str) -> BTreeMap<i64, Json> {
    let mut conn = siphon_test_support::redis_conn(url).await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}order_docs:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let text: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let id = key.rsplit(':').next().unwrap().parse().unwrap();
        out.insert(id, serde_json::from_str(&text).unwrap());
    }
    out
}

fn indexed(search: &SearchStandIn, namespace: &str) -> BTreeMap<i64, Json> {
    search
        .documents(&format!("{namespace}_order_docs"))
        .into_iter()
        .map(|(id, doc)| (id.parse().unwrap(), doc))
        .collect()
}

fn assert_same(store: &str, want: &BTreeMap<i64, Json>, got: &BTreeMap<i64, Json>) {
    let mut diffs = Vec::new();
    for id in want
        .keys()
        .chain(got.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        if want.get(id) != got.get(id) {
            diffs.push(format!(
                "order {id}:\n  source {}\n  {store} {}",
                want.get(id).map_or("-".into(), Json::to_string),
                got.get(id).map_or("-".into(), Json::to_string)
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{store}: {} of {} documents differ from the join; first:\n{}",
        diffs.len(),
        want.len(),
        diffs.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn check_connect_holds_a_view_to_the_sources_tables() {
    for db in [
        SourceDb::Postgres(postgres().await.unwrap()),
        SourceDb::Mariadb(siphon_test_support::mysql().await.unwrap()),
    ] {
        check_connect_holds_a_view_to(db).await;
    }
}

async fn check_connect_holds_a_view_to(db: SourceDb) {
    db.execute(&format!(
        "{}; create table order_notes (order_id int, n int, note text, primary key (order_id, n));",
        schema(&db).trim_end().trim_end_matches(';')
    ))
    .await;
    let (source, ns) = source_config(&db);
    let view = view(&ns);
    let cache = redis().await.unwrap();
    let config = |view: &str| {
        format!(
            "{view}
[pipelines.demo.sinks.cache]
kind = \"redis\"
url = \"{}\"
view = \"order_docs\"
",
            cache.url
        )
    };
    let setup = Setup::with_source(&source, 0, &config(&view));
    let out = setup.cli(&["check", "--connect"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("ok      demo: view order_docs"), "{stdout}");

    // A table the source does not have, a to-one join to a two-column key, a column, a
    // foreign key and an order the tables do not have.
    for (broken, why) in [
        (
            view.replace(".customers\"", ".clients\""),
            format!("{ns}.clients: no primary key"),
        ),
        (
            format!(
                "{view}\n[pipelines.demo.views.order_docs.one.note]\ntable = \"{ns}.order_notes\"\nforeign_key = \"id\"\n"
            ),
            format!("{ns}.order_notes has a primary key of 2 columns"),
        ),
        (
            view.replace("columns = [\"name\"]", "columns = [\"nme\"]"),
            format!("many.lines.one.product.columns: {ns}.products has no column \"nme\""),
        ),
        (
            view.replace(
                "foreign_key = \"customer_id\"",
                "foreign_key = \"client_id\"",
            ),
            format!("one.customer.foreign_key: {ns}.orders has no column \"client_id\""),
        ),
        (
            view.replace("order_by = \"line\"", "order_by = \"position\""),
            format!("many.lines.order_by: {ns}.line_items has no column \"position\""),
        ),
    ] {
        let setup = Setup::with_source(&source, 0, &config(&broken));
        let out = setup.cli(&["check", "--connect"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("FAILED  demo: view order_docs") && stdout.contains(&why),
            "{why}: {stdout}"
        );
    }
}
