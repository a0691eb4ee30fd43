//! MariaDB XA transactions through the daemon: a prepared transaction's rows reach the stores
//! at its `XA COMMIT` and never at an `XA ROLLBACK`, across a kill -9 of the daemon between
//! the prepare and the commit (the commit also arriving while the daemon is down), with a
//! prepared transaction larger than an append part, and `XA COMMIT … ONE PHASE`. Before,
//! every XA transaction's rows were lost.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::Setup;
use mysql_async::prelude::Queryable;
use siphon_test_support::redis;

async fn redis_ids(cache: &siphon_test_support::RedisKeyspace) -> BTreeSet<i64> {
    let mut conn = cache.conn().await.unwrap();
    let mut ids = BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}items:*", cache.prefix))
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        ids.extend(
            keys.iter()
                .map(|k| k.rsplit(':').next().unwrap().parse::<i64>().unwrap()),
        );
        if next == 0 {
            return ids;
        }
        cursor = next;
    }
}

/// Waits until Redis holds exactly `want`, failing when it stops changing for 30 s.
async fn wait_for(
    cache: &siphon_test_support::RedisKeyspace,
    want: &BTreeSet<i64>,
    d: &siphon_test_support::Daemon,
) {
    let mut last = (BTreeSet::new(), Instant::now());
    loop {
        let have = redis_ids(cache).await;
        if have == *want {
            return;
        }
        if have != last.0 {
            last = (have, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(30),
            "Redis holds {} ids, the table {}; missing {:?}, extra {:?}\n{}",
            last.0.len(),
            want.len(),
            want.difference(&last.0).take(10).collect::<Vec<_>>(),
            last.0.difference(want).take(10).collect::<Vec<_>>(),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn table_ids(conn: &mut mysql_async::Conn) -> BTreeSet<i64> {
    conn.query::<i64, _>("select id from items")
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn xa_transactions_reach_the_stores_at_their_commit_only() {
    let db = siphon_test_support::mysql().await.unwrap();
    let cache = redis().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(
        "create table items (id int primary key, note varchar(100));
         insert into items values (0, 'snapshot');",
    )
    .await
    .unwrap();
    let source = format!(
        "kind = \"mysql\"\nurl = \"{}\"\nserver_id = {}\ntables = [\"{}.items\"]\nheartbeat_interval = \"500ms\"",
        db.url, db.server_id, db.name
    );
    let sinks = format!(
        "[pipelines.demo.sinks.cache]\nkind = \"redis\"\nurl = \"{}\"\nprefix = \"{}\"\n",
        cache.url, cache.prefix
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let mut d = setup.start();
    wait_for(&cache, &[0].into(), &d).await;

    // Committed, rolled back, and committed in one phase.
    conn.query_drop(
        "xa start 'a'; insert into items values (1, 'a'); xa end 'a'; xa prepare 'a'; xa commit 'a';
         xa start 'b'; insert into items values (2, 'b'); xa end 'b'; xa prepare 'b'; xa rollback 'b';
         xa start 'd'; insert into items values (4, 'd'); xa end 'd'; xa commit 'd' one phase;",
    )
    .await
    .unwrap();
    wait_for(&cache, &table_ids(&mut conn).await, &d).await;
    assert_eq!(table_ids(&mut conn).await, [0, 1, 4].into());

    // Prepared (10,000 rows: more than an append part) on a session that then goes away;
    // an ordinary transaction after it shows the daemon has read past the prepare.
    let mut preparer = db.conn().await.unwrap();
    preparer
        .query_drop(
            "xa start 'c'; insert into items select seq, repeat('c', 100) from seq_1000_to_10999;
             xa end 'c'; xa prepare 'c';",
        )
        .await
        .unwrap();
    drop(preparer);
    conn.query_drop("insert into items values (100, 'after c')")
        .await
        .unwrap();
    wait_for(&cache, &[0, 1, 4, 100].into(), &d).await;
    // The same for 'e', which commits while the daemon is down.
    let mut preparer = db.conn().await.unwrap();
    preparer
        .query_drop("xa start 'e'; insert into items values (5, 'e'); xa end 'e'; xa prepare 'e';")
        .await
        .unwrap();
    drop(preparer);
    conn.query_drop("insert into items values (101, 'after e')")
        .await
        .unwrap();
    wait_for(&cache, &[0, 1, 4, 100, 101].into(), &d).await;

    d.kill_9().unwrap();
    conn.query_drop("xa commit 'e'").await.unwrap();
    d = setup.start();
    wait_for(&cache, &table_ids(&mut conn).await, &d).await;
    conn.query_drop("xa commit 'c'").await.unwrap();
    let want = table_ids(&mut conn).await;
    assert_eq!(want.len(), 10_006, "the workload's rows");
    wait_for(&cache, &want, &d).await;

    // Each row's insert once in the log.
    let inserts: Vec<i64> = setup
        .output()
        .iter()
        .filter(|e| e["op"] == "c")
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    let unique: BTreeSet<i64> = inserts.iter().copied().collect();
    assert_eq!(inserts.len(), unique.len(), "an insert is in the log twice");
    drop(d);
}
