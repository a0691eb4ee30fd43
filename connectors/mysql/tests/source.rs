//! The MySQL/MariaDB source against the real server: a snapshot, then the binlog through
//! inserts, updates (a primary-key change among them), deletes, a transaction larger than an
//! append part, an ALTER TABLE mid-stream, a stop and restart with changes in between, and the
//! binlog connection killed by the server. Afterwards the log, folded, equals what a fresh
//! snapshot of the same table reads (the binary protocol decoded independently of the binlog),
//! row by row, and no change is in the log twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use siphon_core::event::{Op, SnapshotMarker};
use siphon_core::log::file::FileLog;
use siphon_core::log::{ChangeLog, LogReader};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{SnapshotMode, Source, SourceContext};
use siphon_core::units::HumanDuration;
use siphon_core::{Event, Row, SourcePosition, Value};
use siphon_source_mysql::{MysqlConfig, MysqlSource};
use siphon_test_support::{MysqlDatabase, mysql};
use tokio_util::sync::CancellationToken;

const TABLE: &str = "create table items (
    id bigint primary key,
    name varchar(50),
    amount decimal(12,2),
    n int unsigned,
    big bigint unsigned,
    small tinyint,
    f double,
    r float,
    d date,
    dt datetime(6),
    ts timestamp(6) null,
    e enum('a','b','c'),
    s set('x','y','z'),
    flag bit(1),
    bits bit(12),
    bin varbinary(16),
    j json,
    t text,
    y year,
    tm time(3)
)";

/// Inserts rows `from..to` in one transaction.
fn insert(from: i64, to: i64) -> String {
    let values: Vec<String> = (from..to)
        .map(|k| {
            format!(
                "({k}, 'name {k}', {k}.25, {n}, 18446744073709551615 - {k}, {small}, {k} / 7, {k} / 3, \
                 date '2024-02-29' + interval {k} day, timestamp '2024-02-29 10:11:12.123456' + interval {k} hour, \
                 timestamp '2024-03-01 00:00:00.5' + interval {k} minute, '{e}', '{s}', {flag}, {k} % 4096, \
                 unhex(lpad(hex({k}), 8, '0')), json_object('k', {k}, 'a', json_array(1, 'x')), repeat('t', {k} % 50), \
                 2000 + {k} % 100, '-{h}:01:02.5')",
                n = 4_000_000_000_i64 + k,
                small = k % 128 - 64,
                e = ["a", "b", "c"][(k % 3) as usize],
                s = ["", "x", "x,z", "y,z"][(k % 4) as usize],
                flag = k % 2,
                h = k % 800,
            )
        })
        .collect();
    format!(
        "insert into items (id, name, amount, n, big, small, f, r, d, dt, ts, e, s, flag, bits, bin, j, t, y, tm) values {}",
        values.join(", ")
    )
}

struct Harness {
    _dir: tempfile::TempDir,
    log: FileLog,
    ctx: SourceContext,
    config: MysqlConfig,
}

impl Harness {
    fn new(db: &MysqlDatabase, pipeline: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path().join("log"), Default::default()).unwrap();
        let ctx = SourceContext {
            pipeline: pipeline.into(),
            log: Arc::new(log.clone()),
            offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
            cancel: CancellationToken::new(),
            metrics: Default::default(),
        };
        let config = MysqlConfig {
            url: siphon_core::ConnectionUrl::new(db.url.clone()),
            password: None,
            password_file: None,
            tables: vec![format!("{}.items", db.name)],
            server_id: None,
            snapshot: SnapshotMode::Initial,
            heartbeat_interval: HumanDuration(Duration::from_millis(500)),
        };
        Harness {
            _dir: dir,
            log,
            ctx,
            config,
        }
    }

    /// Runs the source until cancelled, retrying transient errors as the runtime does.
    fn start(
        &self,
    ) -> (
        tokio::task::JoinHandle<siphon_core::Result<()>>,
        CancellationToken,
    ) {
        let cancel = CancellationToken::new();
        let ctx = SourceContext {
            cancel: cancel.clone(),
            ..self.ctx.clone()
        };
        let mut source = MysqlSource::new(&ctx.pipeline, self.config.clone());
        let run = tokio::spawn(async move {
            loop {
                match source.run(&ctx).await {
                    Err(e) if e.is_transient() && !ctx.cancel.is_cancelled() => {
                        tracing::info!(error = %e, "retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    done => return done,
                }
            }
        });
        (run, cancel)
    }

    fn events(&self) -> Vec<Event> {
        let mut reader = self.log.file_reader(0).unwrap();
        let mut out = Vec::new();
        loop {
            let batch = reader.read_available(100_000).unwrap();
            if batch.is_empty() {
                return out;
            }
            out.extend(
                batch
                    .into_iter()
                    .map(|r| Event::decode(&r.value, self.log.schemas()).unwrap()),
            );
        }
    }

    /// Waits until the folded log holds exactly these ids.
    async fn wait_for_ids(&self, what: &str, ids: &BTreeSet<i64>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let folded = fold(&self.events());
            if folded.keys().copied().collect::<BTreeSet<_>>() == *ids {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the log holds {} rows, the table {}",
                folded.len(),
                ids.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Folds events into id → row.
fn fold(events: &[Event]) -> BTreeMap<i64, Row> {
    let mut rows = BTreeMap::new();
    let id = |r: &Row| match r.get("id") {
        Some(Value::Int(i)) => *i,
        other => panic!("no id: {other:?}"),
    };
    for e in events {
        match e.op {
            Op::Create | Op::Read | Op::Update => {
                let after = e.after.clone().unwrap();
                rows.insert(id(&after), after);
            }
            Op::Delete => {
                rows.remove(&id(e.before.as_ref().unwrap()));
            }
            Op::Truncate => rows.clear(),
        }
    }
    rows
}

async fn ids(conn: &mut mysql_async::Conn) -> BTreeSet<i64> {
    conn.query::<i64, _>("select id from items")
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binlog_folds_into_what_a_fresh_snapshot_reads() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop(TABLE).await.unwrap();
    conn.query_drop(insert(1, 101)).await.unwrap();

    let a = Harness::new(&db, "a");
    let (run, cancel) = a.start();
    a.wait_for_ids("after the snapshot", &ids(&mut conn).await)
        .await;
    let snapshot = a.events();
    assert_eq!(snapshot.len(), 100);
    assert!(snapshot.iter().all(|e| e.op == Op::Read));
    assert_eq!(snapshot[0].source.snapshot, SnapshotMarker::First);
    assert_eq!(snapshot[99].source.snapshot, SnapshotMarker::Last);

    // Streaming: single rows, a large transaction, updates, a key change, deletes.
    conn.query_drop(insert(101, 151)).await.unwrap();
    conn.query_drop(format!("start transaction; {}; commit", insert(1000, 6000)))
        .await
        .unwrap();
    conn.query_drop(
        "update items set name = concat(name, ' updated'), amount = -amount, e = 'c', ts = null where id % 5 = 0;
         update items set id = 100000 where id = 7;
         delete from items where id % 11 = 0;",
    )
    .await
    .unwrap();
    a.wait_for_ids("after streaming", &ids(&mut conn).await)
        .await;

    // The server kills the binlog connection: the source reconnects and goes on.
    let dumps: Vec<u64> = conn
        .query("select id from information_schema.processlist where command like 'Binlog Dump%'")
        .await
        .unwrap();
    assert!(!dumps.is_empty(), "no binlog dump thread to kill");
    for id in dumps {
        let _ = conn.query_drop(format!("kill {id}")).await;
    }
    conn.query_drop(insert(151, 171)).await.unwrap();
    a.wait_for_ids(
        "after the binlog connection was killed",
        &ids(&mut conn).await,
    )
    .await;

    // Stopped; changes meanwhile, and the table's shape changes.
    cancel.cancel();
    run.await.unwrap().unwrap();
    conn.query_drop(
        "insert into items (id, name) values (200000, 'while stopped');
         alter table items add column extra varchar(10) default 'x';
         update items set extra = concat('e', id % 100);
         delete from items where id between 1000 and 1100;",
    )
    .await
    .unwrap();
    let (run, cancel) = a.start();
    conn.query_drop(insert(171, 181)).await.unwrap();
    a.wait_for_ids("after the restart", &ids(&mut conn).await)
        .await;
    cancel.cancel();
    run.await.unwrap().unwrap();

    // Nothing twice: each streamed change has a place of its own.
    let events = a.events();
    let mut places = BTreeSet::new();
    for e in events
        .iter()
        .filter(|e| e.source.snapshot == SnapshotMarker::False)
    {
        let SourcePosition::Mysql { file, pos, row, .. } = &e.source.position else {
            panic!("not a binlog position: {:?}", e.source.position);
        };
        assert!(
            places.insert((file.clone(), *pos, *row)),
            "a change is in the log twice: {:?}",
            e.source.position
        );
    }

    // A fresh snapshot reads what the binlog said, value by value.
    let b = Harness::new(&db, "b");
    let (run, cancel) = b.start();
    b.wait_for_ids("the fresh snapshot", &ids(&mut conn).await)
        .await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let (streamed, read) = (fold(&events), fold(&b.events()));
    let differences: Vec<String> = read
        .iter()
        .filter(|(id, row)| streamed.get(id) != Some(row))
        .take(5)
        .map(|(id, row)| format!("{id}: snapshot {row:?}\n  binlog {:?}", streamed.get(id)))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));

    // Some values exactly.
    let row = &read[&5];
    let get = |c: &str| row.get(c).cloned().unwrap();
    assert_eq!(get("amount"), Value::Decimal("-5.25".into()));
    assert_eq!(get("n"), Value::Int(4_000_000_005));
    assert_eq!(get("big"), Value::Decimal("18446744073709551610".into()));
    assert_eq!(get("e"), Value::Enum("c".into()));
    assert_eq!(get("s"), Value::Text("x".into()));
    assert_eq!(get("flag"), Value::Bool(true));
    assert_eq!(get("bits"), Value::Bytes(vec![0, 5]));
    assert_eq!(get("ts"), Value::Null);
    assert_eq!(
        get("tm"),
        Value::Time(-(5 * 3600 + 62) * 1_000_000 - 500_000)
    );
    assert_eq!(get("extra"), Value::Text("e5".into()));
    assert_eq!(get("y"), Value::Int(2005));
    // MariaDB's JSON is text (a LONGTEXT with a check); MySQL's is binary JSON.
    assert!(matches!(get("j"), Value::Text(j) | Value::Json(j) if j.contains("\"k\"")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_binlog_privileges_is_told_what_to_grant() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    conn.query_drop("create table items (id int primary key)")
        .await
        .unwrap();
    let user = format!("{}_u", db.name);
    conn.query_drop(format!(
        "create user '{user}'@'%' identified by 'pw-{user}'; grant select on {}.* to '{user}'@'%'",
        db.name
    ))
    .await
    .unwrap();
    let mut h = Harness::new(&db, "p");
    h.config.url = siphon_core::ConnectionUrl::new(format!("mysql://{user}@127.0.0.1:3306"));
    h.config.password = Some(siphon_core::Secret::new(format!("pw-{user}")));
    let mut source = MysqlSource::new("p", h.config.clone());
    let result = source.check().await;
    conn.query_drop(format!("drop user '{user}'@'%'"))
        .await
        .unwrap();
    let e = result.unwrap_err().to_string();
    assert!(
        e.contains("REPLICATION SLAVE") && e.contains("GRANT"),
        "{e}"
    );
    assert!(
        !e.contains(&format!("pw-{user}")),
        "the password is not in the error: {e}"
    );
}
