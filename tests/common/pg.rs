//! A PostgreSQL source for the end-to-end tests: its config, its position, and a writer.

use std::collections::BTreeMap;
use std::time::Duration;

use siphon_test_support::PgDatabase;

/// The `[pipelines.demo.source]` body capturing every table of `db`'s `public` schema.
pub fn pg_source(db: &PgDatabase) -> String {
    format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.*\"]\nslot = \"{}\"\npublication = \"{}\"\nstatus_interval = \"200ms\"",
        db.url, db.name, db.name
    )
}

/// `db`'s current WAL position, as the wait endpoint takes it (`lsn=…`).
pub async fn current_lsn(db: &PgDatabase) -> String {
    let lsn: String = db
        .client()
        .await
        .unwrap()
        .query_one("select pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    format!("lsn={lsn}")
}

/// The tables [`spawn_writer`] writes: 30 counters at 0, and an empty ledger.
pub const WRITER_TABLES: &str = "create table counters (id int primary key, n bigint not null);
     insert into counters select g, 0 from generate_series(1, 30) g;
     create table ledger (id bigserial primary key, note text not null);";

/// A writer of small and large transactions (1,500 ledger rows every 32nd one, `big_open`
/// while it runs), each update of a counter adding 1, until stopped; counts the transactions
/// it committed. It writes at a steady pace (some 3,000 rows a second) rather than as fast as
/// the database takes them: the tests drain everything it wrote, and a writer faster than a
/// debug build's sink on a busy machine made each test's drain, and its time, grow with how
/// long the test ran.
pub async fn spawn_writer(
    db: &PgDatabase,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    big_open: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    use std::sync::atomic::Ordering;
    let client = db.client().await.unwrap();
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let counter = n % 30 + 1;
            let sql = if n % 32 == 31 {
                big_open.store(true, Ordering::Relaxed);
                format!(
                    "begin; update counters set n = n + 1 where id = {counter};
                     insert into ledger (note) select 'row ' || g from generate_series(1, 1500) g;
                     update counters set n = n + 1 where id = {};
                     commit;",
                    (counter + 7) % 30 + 1
                )
            } else {
                format!(
                    "begin; update counters set n = n + 1 where id in ({counter}, {});
                     insert into ledger (note) values ('small {n}'); commit;",
                    (counter + 13) % 30 + 1
                )
            };
            client.batch_execute(&sql).await.unwrap();
            big_open.store(false, Ordering::Relaxed);
            n += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        n
    })
}

/// A key's rows in the order a consumer reads them (`None` for a delete), by id.
pub type History = BTreeMap<i64, Vec<Option<serde_json::Value>>>;

/// Asserts that `counters` and `ledger`, the writer's tables as a consumer read them, hold
/// every change committed in `db` once, each key's in commit order: each counter's values 0
/// (the snapshot), 1, … n, each ledger row once.
pub async fn assert_every_change_once(db: &PgDatabase, counters: &History, ledger: &History) {
    let client = db.client().await.unwrap();
    let committed: BTreeMap<i64, i64> = client
        .query("select id::int8, n from counters", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (id, n) in &committed {
        let seen: Vec<i64> = counters[id]
            .iter()
            .map(|row| row.as_ref().unwrap()["n"].as_i64().unwrap())
            .collect();
        assert_eq!(
            seen,
            (0..=*n).collect::<Vec<_>>(),
            "counter {id}: its changes as a consumer reads them"
        );
    }
    let ledger_ids: Vec<i64> = client
        .query("select id from ledger order by id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ledger.keys().copied().collect::<Vec<_>>(), ledger_ids);
    assert!(ledger.values().all(|h| h.len() == 1), "a ledger row twice");
}
