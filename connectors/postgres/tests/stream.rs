//! The PostgreSQL source against the real server: snapshot, then streaming; the log, folded,
//! equals the tables.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::log::{ChangeLog, LogReader, RecordFlags};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{Source, SourceContext};
use siphon_core::{Event, Value};
use siphon_log_file::FileLog;
use siphon_source_postgres::{PostgresConfig, PostgresSource, SnapshotMode};
use siphon_test_support::{PgDatabase, postgres};
use tokio_util::sync::CancellationToken;

struct Harness {
    _dir: tempfile::TempDir,
    log: FileLog,
    ctx: SourceContext,
    db: PgDatabase,
    config: PostgresConfig,
}

impl Harness {
    async fn new(db: PgDatabase, tables: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path().join("log"), Default::default()).unwrap();
        let ctx = SourceContext {
            pipeline: "test".into(),
            log: Arc::new(log.clone()),
            offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
            cancel: CancellationToken::new(),
            metrics: Default::default(),
        };
        let config = PostgresConfig {
            url: siphon_core::ConnectionUrl::new(db.url.clone()),
            password: None,
            password_file: None,
            tables: tables.iter().map(|t| t.parse().unwrap()).collect(),
            slot: Some(format!("{}_slot", db.name)),
            publication: None,
            snapshot: SnapshotMode::Initial,
            snapshot_parallelism: 2,
            heartbeat_interval: None,
            status_interval: siphon_core::units::HumanDuration(Duration::from_millis(200)),
            table_poll_interval: siphon_core::units::HumanDuration(std::time::Duration::from_secs(
                10,
            )),
            drop_slot_on_stop: false,
            tls: None,
            tls_ca_file: None,
        };
        Harness {
            _dir: dir,
            log,
            ctx,
            db,
            config,
        }
    }

    /// Runs the source until `stop` is cancelled; returns its result. Transient errors are
    /// retried as the runtime does (right after a stop, the server may still hold the slot
    /// for the previous session's walsender for a moment).
    fn start(
        &self,
    ) -> (
        tokio::task::JoinHandle<siphon_core::Result<()>>,
        CancellationToken,
    ) {
        self.spawn(true)
    }

    /// Runs the source once: its first error ends the run.
    fn start_once(
        &self,
    ) -> (
        tokio::task::JoinHandle<siphon_core::Result<()>>,
        CancellationToken,
    ) {
        self.spawn(false)
    }

    fn spawn(
        &self,
        retry: bool,
    ) -> (
        tokio::task::JoinHandle<siphon_core::Result<()>>,
        CancellationToken,
    ) {
        let cancel = CancellationToken::new();
        let ctx = SourceContext {
            cancel: cancel.clone(),
            ..self.ctx.clone()
        };
        let mut source = PostgresSource::new("test", self.config.clone());
        let run = tokio::spawn(async move {
            loop {
                match source.run(&ctx).await {
                    Err(e) if retry && e.is_transient() && !ctx.cancel.is_cancelled() => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    done => return done,
                }
            }
        });
        (run, cancel)
    }

    fn events(&self) -> Vec<(u64, RecordFlags, Event)> {
        let mut reader = self.log.file_reader(0).unwrap();
        let mut out = Vec::new();
        loop {
            let batch = reader.read_available(10_000).unwrap();
            if batch.is_empty() {
                return out;
            }
            out.extend(batch.into_iter().map(|r| {
                (
                    r.offset,
                    r.flags,
                    Event::decode(
                        &r.value,
                        self.log.schemas(),
                        &siphon_source_postgres::PostgresKind,
                    )
                    .unwrap(),
                )
            }));
        }
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[(u64, RecordFlags, Event)]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut rx = self.log.subscribe();
        loop {
            if done(&self.events()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; log holds {} events",
                self.events().len()
            );
            let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
        }
    }
}

/// Folds events into table → id → row.
fn fold(events: &[(u64, RecordFlags, Event)]) -> BTreeMap<String, BTreeMap<i64, siphon_core::Row>> {
    let mut tables: BTreeMap<String, BTreeMap<i64, siphon_core::Row>> = BTreeMap::new();
    for (_, _, e) in events {
        let t = tables.entry(e.source.table.to_string()).or_default();
        let id = |r: &siphon_core::Row| match r.get("id") {
            Some(Value::Int(i)) => *i,
            other => panic!("no id: {other:?}"),
        };
        match e.op {
            Op::Create | Op::Read | Op::Update => {
                let after = e.after.clone().unwrap();
                let id = id(&after);
                // An unchanged column keeps the stored value.
                let merged = match t.get(&id) {
                    Some(old) => siphon_core::Row(
                        after
                            .0
                            .iter()
                            .map(|(c, v)| {
                                (
                                    c.clone(),
                                    if *v == Value::Unchanged {
                                        old.get(c).cloned().unwrap()
                                    } else {
                                        v.clone()
                                    },
                                )
                            })
                            .collect(),
                    ),
                    None => after,
                };
                t.insert(id, merged);
            }
            Op::Delete => {
                t.remove(&id(e.before.as_ref().unwrap()));
            }
            Op::Truncate => t.clear(),
        }
    }
    tables
}

/// The table as the server has it: id → row of text values.
async fn table(db: &PgDatabase, name: &str) -> BTreeMap<i64, siphon_core::Row> {
    let client = db.client().await.unwrap();
    let rows = client
        .query(
            &format!("select id, name, amount::text, note from {name} order by id"),
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let name: Option<String> = r.get(1);
            let amount: Option<String> = r.get(2);
            let note: Option<String> = r.get(3);
            (
                id,
                siphon_core::Row(vec![
                    ("id".into(), Value::Int(id)),
                    ("name".into(), name.map_or(Value::Null, Value::Text)),
                    ("amount".into(), amount.map_or(Value::Null, Value::Decimal)),
                    ("note".into(), note.map_or(Value::Null, Value::Text)),
                ]),
            )
        })
        .collect()
}

const SCHEMA: &str = "
    create table orders (id bigint primary key, name text, amount numeric(12,2), note text);
    create table customers (id bigint primary key, name text, amount numeric(12,2), note text);
    insert into orders select g, 'order ' || g, g * 1.5, null from generate_series(1, 500) g;
    insert into customers select g, 'customer ' || g, g, repeat('x', g) from generate_series(1, 50) g;
";

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_then_stream_reproduces_the_tables() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let h = Harness::new(db, &["public.orders", "public.customers"]).await;
    let (run, stop) = h.start();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    let snapshot = h.events();
    assert_eq!(snapshot.len(), 550);
    assert!(snapshot.iter().all(|(_, _, e)| e.op == Op::Read));
    // The gauges say the snapshot is done just after its last rows are in the log.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while h.ctx.metrics.values()["snapshot_running"] != 0.0 && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let metrics = h.ctx.metrics.values();
    assert_eq!(
        (metrics["snapshot_rows"], metrics["snapshot_running"]),
        (550.0, 0.0),
        "{metrics:?}"
    );

    let client = h.db.client().await.unwrap();
    client
        .batch_execute(
            "insert into orders values (1001, 'new', 9.99, 'n');
             update orders set name = 'changed', amount = 0.01 where id <= 10;
             delete from orders where id between 11 and 20;
             begin; update orders set id = 2000 where id = 21; insert into customers values (51, 'c', 1, null); commit;
             truncate customers;
             insert into customers values (52, 'after truncate', 2, 'z');",
        )
        .await
        .unwrap();
    h.wait_for("the changes", |e| {
        e.iter().any(|(_, _, e)| {
            &*e.source.table == "customers"
                && e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(52))
        })
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();

    let events = h.events();
    let folded = fold(&events);
    assert_eq!(
        folded["orders"],
        table(&h.db, "orders").await,
        "orders differ"
    );
    assert_eq!(
        folded["customers"],
        table(&h.db, "customers").await,
        "customers differ"
    );
    // The key change became a delete and an insert; each transaction ends with a marked event.
    let streamed: Vec<_> = events
        .iter()
        .filter(|(_, _, e)| e.source.snapshot == SnapshotMarker::False)
        .collect();
    assert!(streamed.iter().any(|(_, _, e)| e.op == Op::Delete
        && e.key.as_ref().and_then(|k| k.get("id")) == Some(&Value::Int(21))));
    assert!(
        streamed
            .iter()
            .any(|(_, _, e)| e.op == Op::Truncate && &*e.source.table == "customers")
    );
    assert!(streamed.last().unwrap().1.contains(RecordFlags::TXN_END));
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_resumes_without_loss_or_duplicates() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let h = Harness::new(db, &["public.orders"]).await;
    let client = h.db.client().await.unwrap();
    // The snapshot first (a stop during a snapshot takes it again from the start).
    let (run, stop) = h.start();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let mut next_id = 10_000;
    for round in 0..4 {
        let (run, stop) = h.start();
        let before = h.events().len();
        // Changes while it runs, then stop it mid-stream.
        for _ in 0..20 {
            client.batch_execute(&format!("insert into orders values ({next_id}, 'r{round}', 1, null); update orders set amount = amount + 1 where id = {}", next_id % 500 + 1)).await.unwrap();
            next_id += 1;
        }
        // Stopped after a different share of them reached the log each round.
        h.wait_for("some of the round's changes", |e| {
            e.len() >= before + round as usize * 5
        })
        .await;
        stop.cancel();
        run.await.unwrap().unwrap();
        // Changes while it is down.
        client
            .batch_execute(&format!(
                "insert into orders values ({next_id}, 'down', 2, null)"
            ))
            .await
            .unwrap();
        next_id += 1;
    }
    let (run, stop) = h.start();
    let last = next_id - 1;
    h.wait_for("every change", |e| {
        e.iter()
            .any(|(_, _, e)| e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(last)))
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();

    let events = h.events();
    // Each streamed change once: positions strictly increase.
    let positions: Vec<(u64, u64)> = events
        .iter()
        .filter(|(_, _, e)| e.source.snapshot == SnapshotMarker::False)
        .map(|(_, _, e)| {
            let p = e
                .source
                .position
                .get::<siphon_source_postgres::PgPosition>();
            let p = p.expect("a PostgreSQL position");
            (p.commit_lsn, p.index)
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "a change was appended twice or out of order"
    );
    assert_eq!(
        positions.len(),
        4 * (20 * 2 + 1),
        "every change exactly once"
    );
    assert_eq!(fold(&events)["orders"], table(&h.db, "orders").await);
}

#[tokio::test(flavor = "multi_thread")]
async fn toast_ddl_and_replica_identity() {
    let db = postgres().await.unwrap();
    db.client()
        .await
        .unwrap()
        .batch_execute(
            "create table docs (id bigint primary key, title text, body text);
             alter table docs alter column body set storage external;
             create table audit (id bigint primary key, who text, what text);
             alter table audit replica identity full;
             insert into docs values (1, 'first', repeat('lorem ipsum ', 2000));
             insert into audit values (1, 'ann', 'created');",
        )
        .await
        .unwrap();
    let h = Harness::new(db, &["public.docs", "public.audit"]).await;
    let (run, stop) = h.start();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    let client = h.db.client().await.unwrap();
    client
        .batch_execute(
            "update docs set title = 'renamed' where id = 1;
             update audit set what = 'changed' where id = 1;
             delete from docs where id = 1;
             alter table docs add column tags text[];
             insert into docs values (2, 'second', 'short', '{a,b}');
             alter table docs rename column title to headline;
             insert into docs values (3, 'third', 'x', null);
             alter table docs drop column body;
             alter table docs alter column headline type varchar(20);
             insert into docs values (4, 'fourth', '{c}');",
        )
        .await
        .unwrap();
    h.wait_for("the changes", |e| {
        e.iter()
            .any(|(_, _, e)| e.key.as_ref().and_then(|k| k.get("id")) == Some(&Value::Int(4)))
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let streamed: Vec<Event> = h
        .events()
        .into_iter()
        .filter(|(_, _, e)| e.source.snapshot == SnapshotMarker::False)
        .map(|(_, _, e)| e)
        .collect();

    // TOAST: the untouched 24 KB body is marked unchanged, never null or a placeholder.
    let update = &streamed[0];
    assert_eq!((update.op, &*update.source.table), (Op::Update, "docs"));
    let body = update.after.as_ref().unwrap().get("body");
    assert!(
        body == Some(&Value::Unchanged),
        "the TOASTed body is not marked unchanged: {:.80?}",
        body
    );
    assert_eq!(
        update.after.as_ref().unwrap().get("title"),
        Some(&Value::Text("renamed".into()))
    );
    // REPLICA IDENTITY DEFAULT: no before-image of an update; FULL: the whole old row.
    assert_eq!(update.before, None);
    let full = &streamed[1];
    assert_eq!(&*full.source.table, "audit");
    assert_eq!(
        full.before.as_ref().unwrap().get("what"),
        Some(&Value::Text("created".into()))
    );
    assert_eq!(
        full.before.as_ref().unwrap().get("who"),
        Some(&Value::Text("ann".into()))
    );
    // A delete under DEFAULT carries the key; other columns are null.
    let delete = &streamed[2];
    assert_eq!(delete.op, Op::Delete);
    assert_eq!(
        delete.before.as_ref().unwrap().get("id"),
        Some(&Value::Int(1))
    );
    assert_eq!(
        delete.before.as_ref().unwrap().get("title"),
        Some(&Value::Null)
    );
    assert_eq!(delete.key.as_ref().unwrap().get("id"), Some(&Value::Int(1)));
    // DDL while streaming: each insert has the columns of its moment.
    let columns = |e: &Event| {
        e.after
            .as_ref()
            .unwrap()
            .iter()
            .map(|(c, _)| c.to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(columns(&streamed[3]), ["id", "title", "body", "tags"]);
    assert_eq!(
        streamed[3].after.as_ref().unwrap().get("tags"),
        Some(&Value::Array(vec![
            Value::Text("a".into()),
            Value::Text("b".into())
        ]))
    );
    assert_eq!(columns(&streamed[4]), ["id", "headline", "body", "tags"]);
    assert_eq!(columns(&streamed[5]), ["id", "headline", "tags"]);
    assert_eq!(
        streamed[5].after.as_ref().unwrap().get("headline"),
        Some(&Value::Text("fourth".into()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_captured_tables_still_advance_the_slot() {
    let db = postgres().await.unwrap();
    db.execute("create table watched (id bigint primary key); create table busy (id bigint);")
        .await
        .unwrap();
    let h = Harness::new(db, &["public.watched"]).await;
    let (run, stop) = h.start();
    let client = h.db.client().await.unwrap();
    let slot = format!("{}_slot", h.db.name);
    let confirmed = || async {
        let row = client.query_opt("select (confirmed_flush_lsn - '0/0')::int8 from pg_replication_slots where slot_name = $1", &[&slot]).await.unwrap();
        row.and_then(|r| r.get::<_, Option<i64>>(0)).unwrap_or(0)
    };
    // Wait until streaming runs (the slot exists and has a position).
    let deadline = Instant::now() + Duration::from_secs(30);
    while confirmed().await == 0 {
        assert!(Instant::now() < deadline, "no slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = confirmed().await;
    // Write only to an uncaptured table: the captured one stays idle.
    client
        .batch_execute("insert into busy select generate_series(1, 1000)")
        .await
        .unwrap();
    let after_writes: i64 = client
        .query_one("select (pg_current_wal_lsn() - '0/0')::int8", &[])
        .await
        .unwrap()
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = confirmed().await;
        if now >= after_writes {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "confirmed_flush_lsn stuck at {now} (was {before}), WAL at {after_writes}"
        );
        // Keepalives come with more WAL; keep the server talking.
        client
            .batch_execute("insert into busy values (0)")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        h.events().is_empty(),
        "nothing of the uncaptured table reached the log"
    );
    let metrics = h.ctx.metrics.values();
    assert!(
        metrics.contains_key("slot_lag_bytes"),
        "the slot's lag is reported: {metrics:?}"
    );
    stop.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_stream_falls_back_to_text_when_a_text_only_column_appears() {
    let db = postgres().await.unwrap();
    db.execute("create table hosts (id bigint primary key, name text)")
        .await
        .unwrap();
    let h = Harness::new(db, &["public.hosts"]).await;
    let (run, _stop) = h.start_once();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Streaming has begun once the slot's lag is reported.
    while !h.ctx.metrics.values().contains_key("slot_lag_bytes") {
        assert!(Instant::now() < deadline, "never streamed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        h.ctx.metrics.values()["binary_tuples"],
        1.0,
        "not streaming in binary"
    );
    h.db.execute("insert into hosts values (1, 'a'); alter table hosts add column addr inet; insert into hosts values (2, 'b', '10.0.0.1')")
        .await
        .unwrap();
    let Ok(finished) = tokio::time::timeout(Duration::from_secs(30), run).await else {
        panic!(
            "the source did not stop; the log holds {:?}",
            h.events()
                .iter()
                .map(|(_, _, e)| e.after.clone())
                .collect::<Vec<_>>()
        );
    };
    let err = finished.unwrap().unwrap_err();
    assert!(
        err.is_transient() && err.to_string().contains("text mode"),
        "{err}"
    );
    // Started again, it streams in text and the row with the inet column arrives.
    let (run, stop) = h.start();
    h.wait_for("the row with an inet", |e| {
        e.iter().any(|(_, _, e)| {
            e.after
                .as_ref()
                .and_then(|a| a.get("addr"))
                .is_some_and(|v| *v != Value::Null)
        })
    })
    .await;
    assert_eq!(h.ctx.metrics.values()["binary_tuples"], 0.0);
    stop.cancel();
    run.await.unwrap().unwrap();
    let rows = fold(&h.events());
    assert_eq!(rows["hosts"].len(), 2);
    assert_eq!(
        rows["hosts"][&2].get("addr"),
        Some(&Value::Other {
            type_name: "inet".into(),
            text: "10.0.0.1".into()
        })
    );
}

/// `snapshot = "when_needed"` after the slot was lost: the intent to snapshot is saved before
/// the new slot is made, so a failure (or crash) right after making it cannot leave a
/// checkpoint that says the snapshot is done while the new slot has none. The failure here is
/// the checkpoint's temporary file being a directory, which makes every save fail.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_is_not_skipped_when_saving_the_checkpoint_fails_after_a_lost_slot() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let mut h = Harness::new(db, &["public.orders"]).await;
    h.config.snapshot = SnapshotMode::WhenNeeded;
    let (run, stop) = h.start();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    // The slot is lost, and a row is written while there is none.
    let client = h.db.client().await.unwrap();
    let slot = h.config.slot.clone().unwrap();
    // The stopped session's walsender may hold the slot for a moment after the stop.
    h.db.drop_slot(&slot).await.unwrap();
    client
        .batch_execute("insert into orders values (777777, 'while no slot', 1, null)")
        .await
        .unwrap();
    let blocker = h._dir.path().join("offsets/source.json.tmp");
    std::fs::create_dir_all(blocker.join("x")).unwrap();
    let (run, stop) = h.start_once();
    let failed = tokio::time::timeout(Duration::from_secs(30), run).await;
    stop.cancel();
    assert!(
        failed.is_ok_and(|r| r.unwrap().is_err()),
        "saving the checkpoint should have failed"
    );
    std::fs::remove_dir_all(&blocker).unwrap();
    let (run, stop) = h.start();
    h.wait_for("the row written while the slot was lost", |e| {
        e.iter().any(|(_, _, e)| {
            e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(777777))
        })
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
}

/// A checkpoint that does not parse is an error naming the file, not a silent fresh start.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_checkpoint_stops_the_source_with_its_path() {
    let db = postgres().await.unwrap();
    db.execute(SCHEMA).await.unwrap();
    let h = Harness::new(db, &["public.orders"]).await;
    let path = h._dir.path().join("offsets/source.json");
    let slot = h.config.slot.clone().unwrap();
    std::fs::write(
        &path,
        format!("{{\"slot\": \"{slot}\", \"snapshot_done\": \"yes\"}}"),
    )
    .unwrap();
    let (run, stop) = h.start_once();
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    stop.cancel();
    let err = ended
        .expect("the source went on with a checkpoint it could not read")
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("source.json"), "{err}");
    assert!(
        h.events().is_empty(),
        "the source went on with a checkpoint it could not read"
    );
}

/// List and range partitioned tables are captured under their own names, snapshot and
/// stream alike: rows moving between partitions, a partition attached while streaming, and
/// a restart (the publication already holds the tables).
#[tokio::test(flavor = "multi_thread")]
async fn partitioned_tables_are_captured_under_their_own_names() {
    let db = postgres().await.unwrap();
    db.execute(
        "create table plist (id bigint, name text, amount numeric(12,2), note text, primary key (id, name))
             partition by list (name);
         create table plist_eu partition of plist for values in ('eu');
         create table plist_us partition of plist for values in ('us');
         create table prange (id bigint primary key, name text, amount numeric(12,2), note text)
             partition by range (id);
         create table prange_low partition of prange for values from (0) to (1000);
         create table prange_high partition of prange for values from (1000) to (100000);
         insert into plist select g, case when g % 2 = 0 then 'eu' else 'us' end, g, null
             from generate_series(1, 40) g;
         insert into prange select g * 50, 'r', g, null from generate_series(1, 30) g;",
    )
    .await
    .unwrap();
    let h = Harness::new(db, &["public.*"]).await;
    let client = h.db.client().await.unwrap();
    let (run, stop) = h.start();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    client
        .batch_execute(
            "insert into plist values (7001, 'eu', 1, null);
             update plist set amount = amount + 1 where id = 2;
             update plist set name = 'us' where id = 4;
             update prange set id = id + 5000 where id = 100;
             delete from prange where id = 1500;
             create table plist_ap (like plist including defaults);
             alter table plist attach partition plist_ap for values in ('ap');
             insert into plist values (7002, 'ap', 1, null);",
        )
        .await
        .unwrap();
    let has_id = |id: i64| {
        move |e: &[(u64, RecordFlags, Event)]| {
            e.iter().any(|(_, _, e)| {
                e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(id))
            })
        }
    };
    h.wait_for("the row of the attached partition", has_id(7002))
        .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    // Started again: the publication holds the tables already.
    let (run, stop) = h.start_once();
    client
        .batch_execute("insert into plist values (7003, 'us', 1, null)")
        .await
        .unwrap();
    h.wait_for("a change after the restart", has_id(7003)).await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let events = h.events();
    let names: std::collections::BTreeSet<String> = events
        .iter()
        .map(|(_, _, e)| e.source.table.to_string())
        .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["plist", "prange"],
        "events came under a partition's name"
    );
    let folded = fold(&events);
    assert_eq!(folded["plist"], table(&h.db, "plist").await);
    assert_eq!(folded["prange"], table(&h.db, "prange").await);
}

/// A replica identity that is an index other than the primary key is refused at start and
/// when it appears while streaming: deletes would arrive without the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_identity_index_other_than_the_primary_key_is_refused() {
    let db = postgres().await.unwrap();
    db.execute(
        "create table people (id bigint primary key, email text not null unique, note text);
         insert into people values (1, 'a@x', null), (2, 'b@x', null);",
    )
    .await
    .unwrap();
    let h = Harness::new(db, &["public.people"]).await;
    let client = h.db.client().await.unwrap();
    // Changed while streaming: the next change to the table stops the source.
    let (run, stop) = h.start_once();
    h.wait_for("the snapshot", |e| {
        e.iter()
            .any(|(_, _, e)| e.source.snapshot == SnapshotMarker::Last)
    })
    .await;
    client
        .batch_execute(
            "alter table people replica identity using index people_email_key;
             delete from people where id = 1;",
        )
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    stop.cancel();
    let err = ended
        .expect("the source went on with deletes it cannot key")
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string().contains("REPLICA IDENTITY DEFAULT"),
        "{err}"
    );
    // At start.
    let (run, stop) = h.start_once();
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    stop.cancel();
    let err = ended.expect("the source started").unwrap().unwrap_err();
    assert!(
        err.to_string().contains("people_email_key") || err.to_string().contains("(email)"),
        "{err}"
    );
}

/// A partition's replica identity is what its changes carry, even published under the
/// partitioned table: an identity index other than the key on a partition is refused too.
#[tokio::test(flavor = "multi_thread")]
async fn a_partitions_replica_identity_index_is_checked_too() {
    let db = postgres().await.unwrap();
    db.execute(
        "create table pr (id bigint, region text, email text not null, primary key (id, region))
             partition by list (region);
         create table pr_eu partition of pr for values in ('eu');
         create unique index pr_eu_email on pr_eu (email, region);
         alter table pr_eu replica identity using index pr_eu_email;",
    )
    .await
    .unwrap();
    let h = Harness::new(db, &["public.pr"]).await;
    let (run, stop) = h.start_once();
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    stop.cancel();
    let err = ended.expect("the source started").unwrap().unwrap_err();
    assert!(err.to_string().contains("pr_eu"), "{err}");
}

/// A table big enough to be split into page ranges is read by two readers, each range once:
/// with dead tuples, updated rows and rows added while the snapshot runs, every row arrives
/// once (as a snapshot read or as a streamed insert, never both) and the log folds to the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_split_into_page_ranges_is_read_whole_and_once() {
    let db = postgres().await.unwrap();
    // fillfactor 10 and 700-byte rows: one row per page, 3,000 pages (two ranges of 1,500).
    db.execute(
        "create table orders (id bigint primary key, name text, amount numeric(12,2), note text)
             with (fillfactor = 10);
         insert into orders select g, 'order ' || g, g, repeat('n', 700) from generate_series(1, 3000) g;
         delete from orders where id % 7 = 0;
         update orders set name = 'updated' where id % 5 = 0;",
    )
    .await
    .unwrap();
    let client = db.client().await.unwrap();
    let pages: i64 = client
        .query_one(
            "select pg_relation_size('orders') / current_setting('block_size')::int8",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        pages >= 2000,
        "the table must span two ranges: {pages} pages"
    );
    let h = Harness::new(db, &["public.orders"]).await;
    let (run, stop) = h.start();
    // Rows keep arriving while the snapshot reads.
    for id in 5001..5200i64 {
        client
            .execute(
                "insert into orders values ($1, 'late', 1, repeat('l', 700))",
                &[&id],
            )
            .await
            .unwrap();
    }
    h.wait_for("the last late row", |e| {
        e.iter().any(|(_, _, e)| {
            e.op == Op::Create
                && e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(5199))
        }) || e.iter().any(|(_, _, e)| {
            e.op == Op::Read
                && e.after.as_ref().and_then(|a| a.get("id")) == Some(&Value::Int(5199))
        })
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();

    let events = h.events();
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, _, e) in &events {
        if matches!(e.op, Op::Read | Op::Create)
            && let Some(Value::Int(id)) = e.after.as_ref().and_then(|a| a.get("id"))
        {
            *seen.entry(*id).or_default() += 1;
        }
    }
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "rows read more than once: {repeated:?}"
    );
    assert_eq!(
        fold(&events)["orders"],
        table(&h.db, "orders").await,
        "the log differs from the table"
    );
}
