//! Transforms end to end, against the real services: a row filter keeps the Redis cache equal
//! to the source's matching rows (a row that stops matching leaves the cache), a keyed mask
//! makes the PostgreSQL mirror's emails their HMAC-SHA-256 (checked with pgcrypto) and a
//! computed column holds its value on every row, through a kill -9 of the daemon under a
//! writer; a broken expression is refused by `siphon check`
//! with its position; an event a transform fails on is dead-lettered and the sink goes on.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Setup;
use common::pg::{current_lsn, pg_source};
use siphon_test_support::{postgres, redis};

const KEY: &str = "transform-test-key";

#[tokio::test(flavor = "multi_thread")]
async fn a_row_filter_and_a_keyed_mask_hold_through_a_kill() {
    let source = postgres().await.unwrap();
    source
        .execute(
            "create table orders (id int primary key, status text not null, total int not null,
                                  email text);
             insert into orders select g, case when g % 3 = 0 then 'paid' else 'open' end, g,
                                       'user' || g || '@example.com'
             from generate_series(1, 200) g;",
        )
        .await
        .unwrap();
    let target = postgres().await.unwrap();
    target
        .execute("create extension if not exists pgcrypto")
        .await
        .unwrap();
    let cache = redis().await.unwrap();
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"
batch_size = 50

[[pipelines.demo.sinks.cache.transforms]]
kind = "filter_rows"
when = "row.status == 'paid' && row.total >= 10"

[pipelines.demo.sinks.mirror]
kind = "postgres"
url = "{mirror}"
batch_size = 50

[[pipelines.demo.sinks.mirror.transforms]]
kind = "mask"
columns = ["public.orders.email"]
with = "hmac_sha256"
key_env = "SIPHON_TEST_MASK_KEY"

[[pipelines.demo.sinks.mirror.transforms]]
kind = "set"
column = "total_cents"
value = "row.total * 100"
type = "bigint"
"#,
        redis = cache.url,
        prefix = cache.prefix,
        mirror = target.url,
    );
    let setup = Setup::with_source(&pg_source(&source), 0, &sinks);
    let env = [("SIPHON_TEST_MASK_KEY", KEY)];
    let mut d = setup.start_with_env(&env);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let client = source.client().await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = (n * 37 % 260) as i64 + 1;
                let sql = match n % 5 {
                    // Rows move in and out of the filter, and their emails change.
                    0 | 1 => format!(
                        "update orders set status = case status when 'paid' then 'open' else 'paid' end,
                                           email = 'changed{n}@example.com' where id = {id}"
                    ),
                    2 => format!("update orders set total = total + 7 where id = {id}"),
                    3 => format!("delete from orders where id = {id}"),
                    _ => format!(
                        "insert into orders values ({id}, 'paid', {n}, null) on conflict (id) do
                         update set status = 'paid', total = excluded.total"
                    ),
                };
                client.batch_execute(&sql).await.unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    d.kill_9().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d = setup.start_with_env(&env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 50, "the writer wrote {written} transactions");
    let lsn = current_lsn(&source).await;
    for sink in ["cache", "mirror"] {
        common::wait_applied(&d, sink, &lsn, Duration::from_secs(60)).await;
    }

    // The cache holds exactly the matching rows, each as the source has it.
    let client = source.client().await.unwrap();
    let matching: BTreeMap<i64, (String, String)> = client
        .query(
            "select id::bigint, status, total::text from orders where status = 'paid' and total >= 10",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let cached: BTreeMap<i64, (String, String)> = common::stores::redis_rows(
        &cache.url,
        &cache.prefix,
        &[("orders", &["status", "total"])],
    )
    .await
    .into_iter()
    .map(|((_, id), fields)| {
        let [status, total] = [&fields[0], &fields[1]].map(|f| f.clone().unwrap_or_default());
        (id, (status, total))
    })
    .collect();
    assert!(matching.len() > 20, "{} matching rows", matching.len());
    assert_eq!(cached, matching, "the cache is not the matching rows");

    // The mirror holds every row, its email the keyed HMAC of the source's: pgcrypto (in the
    // target database) is the oracle.
    let source_emails: Vec<(i64, Option<String>)> = client
        .query("select id::bigint, email from orders", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let oracle = target.client().await.unwrap();
    let mut expected = BTreeMap::new();
    for (id, email) in source_emails {
        let mac: Option<String> = oracle
            .query_one(
                "select encode(hmac($1::text, $2::text, 'sha256'), 'hex')",
                &[&email, &KEY],
            )
            .await
            .unwrap()
            .get(0);
        expected.insert(id, mac);
    }
    let mirrored: BTreeMap<i64, Option<String>> = oracle
        .query("select id::bigint, email from orders", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(expected.len() > 100, "{} rows", expected.len());
    // The computed column, on every row.
    let wrong: i64 = oracle
        .query_one(
            "select count(*) from orders where total_cents is distinct from total * 100",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(wrong, 0, "rows whose total_cents is not total * 100");
    assert_eq!(
        mirrored, expected,
        "the mirror's emails are not the HMACs of the source's"
    );
}

#[test]
fn check_refuses_a_broken_expression_with_its_position() {
    let setup = Setup::new(
        10,
        "10ms",
        "[[pipelines.demo.sinks.out.transforms]]\nkind = \"filter\"\nwhen = \"after.total >\"\n",
    );
    let out = setup.cli(&["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check passed: {stderr}");
    assert!(
        stderr.contains("pipelines.demo.sinks.out.transforms[0].when")
            && stderr.contains("<input>:1:"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_a_transform_fails_on_is_dead_lettered_and_the_sink_goes_on() {
    // `int(after.note)` fails on a note that is no number: that event is dead-lettered.
    let source = postgres().await.unwrap();
    source
        .execute(
            "create table notes (id int primary key, note text);
             insert into notes values (1, '1'), (2, 'two'), (3, '3');",
        )
        .await
        .unwrap();
    let setup = Setup::with_source(
        &pg_source(&source),
        0,
        "on_error = \"dead_letter\"\n\n[[pipelines.demo.sinks.out.transforms]]\nkind = \"filter\"\nwhen = \"op == 't' || int(after.note) >= 0\"\n",
    );
    let d = setup.start();
    let ids = || -> Vec<i64> {
        setup
            .output()
            .iter()
            .filter_map(|e| e["after"]["id"].as_i64())
            .collect()
    };
    // Waits on the sink's progress (through the wait endpoint), not on a fixed total.
    let applied = async || {
        let lsn = current_lsn(&source).await;
        common::wait_applied(&d, "out", &lsn, Duration::from_secs(60)).await;
    };
    applied().await;
    assert_eq!(ids(), [1, 3], "{}", d.log());
    let lines = setup.dead_letters("out");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"]["after"]["id"], 2);
    assert!(
        lines[0]["reason"]
            .as_str()
            .unwrap()
            .contains("transforms[0] (filter)"),
        "{lines:?}"
    );
    source
        .execute("insert into notes values (4, '4')")
        .await
        .unwrap();
    applied().await;
    assert_eq!(ids(), [1, 3, 4], "{}", d.log());
}
