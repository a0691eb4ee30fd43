//! The chaos harness (issue 22): a seeded random workload on a PostgreSQL of the test's own —
//! inserts, updates, deletes, truncates, large transactions, TOASTed values left alone by
//! updates, key changes, DDL now and then, incremental snapshots started at random — through
//! the file log into every kind of sink at once (a Redis cache, a PostgreSQL and a DuckDB
//! mirror, Redis Streams, NATS JetStream, RabbitMQ, a webhook and the file sink), while faults
//! strike at random moments: kill -9 of the daemon, SIGTERM, SIGSTOP/SIGCONT, the walsender
//! terminated, PostgreSQL crashed and restarted, Redis, NATS and RabbitMQ killed -9 and started
//! again (servers of the harness's own, never the shared ones), the webhook receiver away, the
//! log's disk full (a tmpfs of its own).
//!
//! At the end it waits for every sink, then compares each store with the source tables row by
//! row, and each change stream — the log as the file sink wrote it, and each message sink's —
//! with an audit table the source's triggers fill in the same transactions: every committed
//! change exactly once (at least once for RabbitMQ and webhooks, every copy of an id alike),
//! each key's in commit order. It prints the faults by kind, the events and the mismatches,
//! with the seed that replays the run's workload and faults.
//!
//! Short mode (`cargo test --test chaos`, in CI): 20 faults. Long mode: `scripts/chaos`
//! (`SIPHON_CHAOS_FAULTS`, default 200 there). `SIPHON_CHAOS_SEED=N` replays seed N.
//! `the_harness_sees_a_planted_loss` proves it can see a loss: the daemon's debug build drops
//! one record in 2,000 with `SIPHON_TEST_LOSE_ONE_IN` set, and the harness reports it.
#![cfg(feature = "duckdb")]

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Setup;
use common::stores::{Rows, Tables, duckdb_rows, pg_rows, redis_rows};
use serde_json::Value as Json;
use siphon_test_support::{
    Daemon, PrivateNats, PrivatePostgres, PrivateRabbitmq, PrivateRedis, RabbitExchange, SmallDisk,
    nats_messages, rabbitmq_at, redis_conn,
};

/// The tables the workload writes, and their columns compared (besides `id`).
const TABLES: Tables<'static> = &[
    ("accounts", &["v", "balance", "note"]),
    ("docs", &["v", "title", "body"]),
    ("events", &["v", "kind"]),
];

/// The tables, their first rows (some docs large enough to be TOASTed), and the audit table
/// with the triggers that fill it: one row per row change, two for a key change (the old
/// key's delete, the new key's insert, as the change stream has it), one per truncate. The
/// workload runs on one connection, so the audit's order is the commit order.
const SCHEMA: &str = "
    create table accounts (id bigint primary key, v bigint not null, balance bigint not null, note text);
    create table docs (id bigint primary key, v bigint not null, title text, body text);
    create table events (id bigint primary key, v bigint not null, kind text not null);
    insert into accounts select g, 0, 1000, 'account ' || g from generate_series(1, 200) g;
    insert into docs select g, 0, 'doc ' || g,
        case when g % 5 = 0 then (select string_agg(md5(g::text || r::text), '') from generate_series(1, 120) r)
             else 'short ' || g end
        from generate_series(1, 50) g;
    create table chaos_audit (seq bigserial primary key, tbl text not null, op text not null, id bigint, v bigint);
    create function chaos_audit_row() returns trigger language plpgsql as $$
    begin
        if tg_op = 'INSERT' then
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'c', new.id, new.v);
        elsif tg_op = 'DELETE' then
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'd', old.id, null);
        elsif old.id <> new.id then
            insert into chaos_audit (tbl, op, id, v)
                values (tg_table_name, 'd', old.id, null), (tg_table_name, 'c', new.id, new.v);
        else
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'u', new.id, new.v);
        end if;
        return null;
    end $$;
    create function chaos_audit_truncate() returns trigger language plpgsql as $$
    begin
        insert into chaos_audit (tbl, op) values (tg_table_name, 't');
        return null;
    end $$;
    create trigger audit after insert or update or delete on accounts for each row execute function chaos_audit_row();
    create trigger audit after insert or update or delete on docs for each row execute function chaos_audit_row();
    create trigger audit after insert or update or delete on events for each row execute function chaos_audit_row();
    create trigger audit_truncate after truncate on events for each statement execute function chaos_audit_truncate();
";

/// SplitMix64: the run's one source of randomness, so that a seed replays it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number in `range`.
    fn within(&mut self, range: std::ops::RangeInclusive<u64>) -> u64 {
        range.start() + self.below(range.end() - range.start() + 1)
    }

    /// A duration in `range` of milliseconds.
    fn millis(&mut self, range: std::ops::RangeInclusive<u64>) -> Duration {
        Duration::from_millis(self.within(range))
    }
}

/// What a run does.
#[derive(Debug, Clone)]
struct Plan {
    seed: u64,
    faults: usize,
    /// Every sink kind (else the file sink, the Redis cache and Redis Streams only).
    every_sink: bool,
    /// RabbitMQ restarted among the faults (its node takes seconds to boot).
    rabbit_restarts: bool,
    /// The daemon drops one record in this many (a debug build's test hook).
    lose_one_in: Option<u64>,
}

impl Plan {
    /// The short mode, or what `SIPHON_CHAOS_FAULTS` and `SIPHON_CHAOS_SEED` say.
    fn from_env() -> Plan {
        let faults = std::env::var("SIPHON_CHAOS_FAULTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        Plan {
            seed: std::env::var("SIPHON_CHAOS_SEED")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_nanos() as u64
                }),
            faults,
            every_sink: true,
            rabbit_restarts: faults >= 100,
            lose_one_in: None,
        }
    }
}

/// The faults the harness strikes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillDaemon,
    StopDaemon,
    PauseDaemon,
    KillWalsender,
    CrashPostgres,
    RestartPostgres,
    RestartRedis,
    RestartNats,
    RestartRabbitmq,
    WebhookAway,
    DiskFull,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillDaemon => "kill -9 of the daemon",
            Fault::StopDaemon => "SIGTERM of the daemon",
            Fault::PauseDaemon => "SIGSTOP/SIGCONT of the daemon",
            Fault::KillWalsender => "pg_terminate_backend of the walsender",
            Fault::CrashPostgres => "PostgreSQL crashed (immediate) and restarted",
            Fault::RestartPostgres => "PostgreSQL restarted (fast)",
            Fault::RestartRedis => "Redis killed -9 and restarted",
            Fault::RestartNats => "NATS killed -9 and restarted",
            Fault::RestartRabbitmq => "RabbitMQ killed -9 and restarted",
            Fault::WebhookAway => "the webhook receiver away (503)",
            Fault::DiskFull => "the log's disk full",
        }
    }

    /// One at random, by weight, among those `plan` allows.
    fn pick(rng: &mut Rng, plan: &Plan) -> Fault {
        let mut weighted = vec![
            (Fault::KillDaemon, 25),
            (Fault::StopDaemon, 8),
            (Fault::PauseDaemon, 8),
            (Fault::KillWalsender, 10),
            (Fault::CrashPostgres, 7),
            (Fault::RestartPostgres, 4),
            (Fault::RestartRedis, 10),
            (Fault::DiskFull, 6),
        ];
        if plan.every_sink {
            weighted.extend([(Fault::RestartNats, 8), (Fault::WebhookAway, 8)]);
        }
        if plan.every_sink && plan.rabbit_restarts {
            weighted.push((Fault::RestartRabbitmq, 4));
        }
        let total: u64 = weighted.iter().map(|(_, w)| w).sum();
        let mut at = rng.below(total);
        for (fault, weight) in weighted {
            if at < weight {
                return fault;
            }
            at -= weight;
        }
        unreachable!("the weights add up")
    }
}

/// The workload's state: the ids it gives out next.
struct Workload {
    rng: Rng,
    next_event: u64,
    next_account: u64,
    next_doc: u64,
    columns_added: u32,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        Workload {
            rng: Rng(seed ^ 0x0005_eed0_fc4a),
            next_event: 1,
            next_account: 100_001,
            next_doc: 51,
            columns_added: 0,
        }
    }

    /// A transaction of one to five statements.
    fn transaction(&mut self) -> String {
        let mut sql = String::from("begin;");
        for _ in 0..self.rng.within(1..=5) {
            sql.push_str(&self.statement());
            sql.push(';');
        }
        sql.push_str("commit;");
        sql
    }

    /// A text of `len` hex digits nothing compresses.
    fn noise(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            out.push_str(&format!("{:016x}", self.rng.next()));
        }
        out.truncate(len);
        out
    }

    fn statement(&mut self) -> String {
        let event = |w: &mut Workload| {
            let span = w.next_event.min(5000);
            w.next_event - 1 - w.rng.below(span)
        };
        match self.rng.below(1000) {
            0..=249 => {
                let id = self.next_event;
                self.next_event += 1;
                format!("insert into events values ({id}, 0, 'kind {}')", id % 7)
            }
            250..=449 => format!(
                "update accounts set v = v + 1, balance = balance + {} where id = {}",
                self.rng.below(100),
                self.rng.within(1..=200)
            ),
            // A docs update that leaves the (maybe TOASTed) body alone.
            450..=549 => format!(
                "update docs set v = v + 1, title = 'title {}' where id = {}",
                self.rng.below(1000),
                self.rng.within(1..=self.next_doc - 1)
            ),
            550..=589 => {
                let len = self.rng.within(3000..=7000) as usize;
                let body = self.noise(len);
                format!(
                    "update docs set v = v + 1, body = '{body}' where id = {}",
                    self.rng.within(1..=self.next_doc - 1)
                )
            }
            590..=699 => format!("delete from events where id = {}", event(self)),
            700..=739 => format!("update events set v = v + 1 where id = {}", event(self)),
            // A large transaction.
            740..=743 => {
                let n = self.rng.within(200..=2500);
                let first = self.next_event;
                self.next_event += n;
                format!(
                    "insert into events select g, 0, 'bulk' from generate_series({first}, {}) g",
                    first + n - 1
                )
            }
            // A key change.
            760..=784 => {
                let to = self.next_account;
                self.next_account += 1;
                format!(
                    "update accounts set id = {to}, v = v + 1 where id = {}",
                    self.rng.within(1..=200)
                )
            }
            785..=809 => {
                let id = self.next_doc;
                self.next_doc += 1;
                let len = self.rng.within(10..=6000) as usize;
                let body = self.noise(len);
                format!("insert into docs values ({id}, 0, 'new {id}', '{body}')")
            }
            810..=819 => format!(
                "delete from accounts where id = {}",
                self.rng.within(1..=200)
            ),
            820..=821 => "truncate events".into(),
            822 if self.columns_added < 3 => {
                self.columns_added += 1;
                format!(
                    "alter table events add column extra_{} int",
                    self.columns_added
                )
            }
            _ => format!(
                "update events set v = v + 1, kind = 'changed' where id = {}",
                event(self)
            ),
        }
    }
}

/// Runs the workload on `url` until `stop`, reconnecting through the server's restarts;
/// counts the transactions committed (those whose commit answered).
async fn run_workload(url: String, seed: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut workload = Workload::new(seed);
    let mut committed = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(conn);
        while !stop.load(Ordering::Relaxed) {
            // A transaction cut off by a fault is not tried again: whether it committed is the
            // audit table's to say, and the harness compares with it, not with this count.
            if client.batch_execute(&workload.transaction()).await.is_ok() {
                committed += 1;
            } else if client.is_closed() {
                break;
            } else {
                let _ = client.batch_execute("rollback").await;
            }
            tokio::time::sleep(Duration::from_millis(workload.rng.within(2..=10))).await;
        }
    }
    committed
}

/// A webhook receiver: every event it took (its id and what it says), in arrival order;
/// while away it answers 503.
#[derive(Default)]
struct Webhook {
    events: std::sync::Mutex<Vec<(String, Said)>>,
    away_until: std::sync::Mutex<Option<Instant>>,
}

async fn receive(
    axum::extract::State(hook): axum::extract::State<Arc<Webhook>>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    if hook
        .away_until
        .lock()
        .unwrap()
        .is_some_and(|t| Instant::now() < t)
    {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    let doc: Json = serde_json::from_slice(&body).unwrap();
    let events = doc["events"].as_array().unwrap().iter().map(|e| {
        (
            e["id"].as_str().unwrap_or_default().to_owned(),
            Said::of(&e["value"]),
        )
    });
    hook.events.lock().unwrap().extend(events);
    axum::http::StatusCode::OK
}

/// One committed change as a change stream carries it: its op and the row's `v` (none for a
/// delete, whose old row holds the key only).
type Change = (String, Option<i64>);

/// What one event of a change stream says, kept small (a long run's streams hold hundreds of
/// thousands).
#[derive(Debug, Clone, PartialEq)]
enum Said {
    /// A change of row `id` of `table`.
    Row(String, i64, Change),
    /// A truncate of `table`.
    Truncate(String),
    /// A snapshot read: no change.
    Read,
}

impl Said {
    /// What a Debezium envelope says.
    fn of(e: &Json) -> Said {
        let table = e["source"]["table"].as_str().unwrap_or_default().to_owned();
        match e["op"].as_str().unwrap_or_default() {
            "r" => Said::Read,
            "t" => Said::Truncate(table),
            "d" => Said::Row(
                table,
                e["before"]["id"].as_i64().unwrap_or(-1),
                ("d".into(), None),
            ),
            op => Said::Row(
                table,
                e["after"]["id"].as_i64().unwrap_or(-1),
                (op.into(), e["after"]["v"].as_i64()),
            ),
        }
    }
}

/// Every committed change, as the audit table says: each key's in commit order, and each
/// table's truncates.
#[derive(Debug, Default, PartialEq)]
struct Changes {
    per_key: BTreeMap<(String, i64), Vec<Change>>,
    truncates: BTreeMap<String, usize>,
}

impl Changes {
    /// What a change stream's events say, in order.
    fn of(events: impl IntoIterator<Item = Said>) -> Changes {
        let mut out = Changes::default();
        for said in events {
            match said {
                Said::Read => {}
                Said::Truncate(table) => *out.truncates.entry(table).or_default() += 1,
                Said::Row(table, id, change) => {
                    out.per_key.entry((table, id)).or_default().push(change);
                }
            }
        }
        out
    }

    /// What Debezium envelopes say, in order.
    fn of_envelopes<'a>(events: impl IntoIterator<Item = &'a Json>) -> Changes {
        Changes::of(events.into_iter().map(Said::of))
    }

    /// How `got` differs from these, a line per key (at most `limit` lines, then a count).
    fn differences(&self, got: &Changes, what: &str, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        let keys: std::collections::BTreeSet<_> =
            self.per_key.keys().chain(got.per_key.keys()).collect();
        for key in keys {
            let (want, have) = (
                self.per_key.get(key).map_or(&[][..], Vec::as_slice),
                got.per_key.get(key).map_or(&[][..], Vec::as_slice),
            );
            if want != have {
                out.push(format!(
                    "{what}: {}:{} committed {want:?}, got {have:?}",
                    key.0, key.1
                ));
            }
        }
        if self.truncates != got.truncates {
            out.push(format!(
                "{what}: truncates committed {:?}, got {:?}",
                self.truncates, got.truncates
            ));
        }
        limited(out, what, limit)
    }
}

/// Events under ids, as an at-least-once sink delivers them: the first copy of each id, in
/// order, and a mismatch for each copy unlike its first.
fn first_copies(
    what: &str,
    events: impl IntoIterator<Item = (String, Said)>,
    mismatches: &mut Vec<String>,
) -> Vec<Said> {
    let mut seen: std::collections::HashMap<String, Said> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (id, said) in events {
        match seen.get(&id) {
            Some(first) if *first != said => {
                mismatches.push(format!("{what}: two events under id {id}"));
            }
            Some(_) => {}
            None => {
                seen.insert(id, said.clone());
                out.push(said);
            }
        }
    }
    out
}

/// What a run found.
#[derive(Debug)]
struct Report {
    seed: u64,
    faults: BTreeMap<Fault, usize>,
    snapshots: usize,
    transactions: u64,
    events: u64,
    elapsed: Duration,
    mismatches: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chaos: seed {} ({:.0?})", self.seed, self.elapsed)?;
        let total: usize = self.faults.values().sum();
        writeln!(f, "  faults: {total}")?;
        for (fault, n) in &self.faults {
            writeln!(f, "    {n:>4}  {}", fault.name())?;
        }
        writeln!(f, "  incremental snapshots started: {}", self.snapshots)?;
        writeln!(f, "  transactions committed: {}", self.transactions)?;
        writeln!(f, "  events in the log: {}", self.events)?;
        writeln!(f, "  mismatches: {}", self.mismatches.len())?;
        for m in &self.mismatches {
            writeln!(f, "    {m}")?;
        }
        if !self.mismatches.is_empty() {
            writeln!(f, "  replay with SIPHON_CHAOS_SEED={}", self.seed)?;
        }
        Ok(())
    }
}

/// The daemon, the servers of the run, and where its stores are (the daemon first: it goes
/// before what it uses).
struct World {
    daemon: Daemon,
    plan: Plan,
    pg: Arc<PrivatePostgres>,
    redis: PrivateRedis,
    nats: Option<PrivateNats>,
    rabbit: Option<(PrivateRabbitmq, RabbitExchange)>,
    hook: Arc<Webhook>,
    disk: SmallDisk,
    lake: tempfile::TempDir,
    setup: Setup,
}

impl World {
    async fn start(plan: Plan) -> World {
        let pg = Arc::new(PrivatePostgres::start(&[]).unwrap());
        let admin = pg.client("postgres").await.unwrap();
        for db in ["shop", "mirror"] {
            admin
                .batch_execute(&format!("create database {db}"))
                .await
                .unwrap();
        }
        pg.client("shop")
            .await
            .unwrap()
            .batch_execute(SCHEMA)
            .await
            .unwrap();
        let redis = PrivateRedis::start().unwrap();
        let nats = plan.every_sink.then(|| PrivateNats::start().unwrap());
        let rabbit = match plan.every_sink {
            true => {
                let node = PrivateRabbitmq::start().unwrap();
                let ex = rabbitmq_at(&node.url()).await.unwrap();
                Some((node, ex))
            }
            false => None,
        };
        let hook = Arc::new(Webhook::default());
        let hook_url = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/hook", listener.local_addr().unwrap());
            let app = axum::Router::new()
                .route("/hook", axum::routing::post(receive))
                .with_state(hook.clone());
            tokio::spawn(async move { axum::serve(listener, app).await });
            url
        };
        let lake = tempfile::tempdir().unwrap();
        let mut sinks = format!(
            r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "cache:"
batch_size = 200

[pipelines.demo.sinks.stream]
kind = "redis_stream"
url = "{redis}"
prefix = "chaos"
schemas = false
batch_size = 200
"#,
            redis = redis.url()
        );
        if let (Some(nats), Some((_, ex))) = (&nats, &rabbit) {
            sinks.push_str(&format!(
                r#"
[pipelines.demo.sinks.mirror]
kind = "postgres"
url = "{mirror}"
batch_size = 200

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
batch_size = 200

[pipelines.demo.sinks.nats]
kind = "nats"
url = "{nats}"
prefix = "chaos"
schemas = false
timeout = "2s"
batch_size = 200

[pipelines.demo.sinks.rabbit]
kind = "rabbitmq"
url = "{rabbit}"
exchange = "{exchange}"
schemas = false
batch_size = 200

[pipelines.demo.sinks.hook]
kind = "http"
url = "{hook_url}"
schemas = false
batch_size = 200
"#,
                mirror = pg.url("mirror"),
                lake = lake.path().join("lake.duckdb").display(),
                nats = nats.url(),
                rabbit = ex.url,
                exchange = ex.exchange,
            ));
        }
        let source = format!(
            "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.accounts\", \"public.docs\", \"public.events\"]\nslot = \"chaos\"\nstatus_interval = \"200ms\"",
            pg.url("shop")
        );
        let setup = Setup::with_source(&source, 0, &sinks);
        // The log's directory on a filesystem of its own, to fill up (in memory: what a
        // long run's log needs).
        let disk = SmallDisk::new(if plan.faults > 50 { 4 << 30 } else { 512 << 20 }).unwrap();
        std::os::unix::fs::symlink(disk.path(), setup.dir.path().join("data")).unwrap();
        let daemon = start_daemon(&setup, &plan);
        World {
            daemon,
            plan,
            pg,
            redis,
            nats,
            rabbit,
            hook,
            disk,
            lake,
            setup,
        }
    }

    /// Every sink's name.
    fn sink_names(&self) -> Vec<&'static str> {
        let mut names = vec!["out", "cache", "stream"];
        if self.plan.every_sink {
            names.extend(["mirror", "lake", "nats", "rabbit", "hook"]);
        }
        names
    }

    /// The status, once the admin API answers.
    async fn status(&self) -> Json {
        common::wait_status(&self.daemon, Duration::from_secs(120), "the status", |_| {
            true
        })
        .await
    }

    /// Strikes with `fault`.
    async fn strike(&mut self, fault: Fault, rng: &mut Rng) {
        match fault {
            Fault::KillDaemon => {
                self.daemon.kill_9().unwrap();
                self.daemon = start_daemon(&self.setup, &self.plan);
            }
            Fault::StopDaemon => {
                self.daemon.signal("TERM").unwrap();
                let status = self.daemon.wait(Duration::from_secs(60)).unwrap();
                assert!(
                    status.success(),
                    "seed {}: a graceful stop failed ({status}):\n{}",
                    self.plan.seed,
                    tail(&self.daemon.log())
                );
                self.daemon = start_daemon(&self.setup, &self.plan);
            }
            Fault::PauseDaemon => {
                self.daemon.signal("STOP").unwrap();
                tokio::time::sleep(rng.millis(500..=3000)).await;
                self.daemon.signal("CONT").unwrap();
            }
            Fault::KillWalsender => {
                let client = self.pg.client("postgres").await.unwrap();
                client
                    .batch_execute("select pg_terminate_backend(pid) from pg_stat_replication")
                    .await
                    .unwrap();
            }
            Fault::CrashPostgres | Fault::RestartPostgres => {
                let mode = if fault == Fault::CrashPostgres {
                    "immediate"
                } else {
                    "fast"
                };
                let pg = self.pg.clone();
                tokio::task::spawn_blocking(move || pg.restart(mode))
                    .await
                    .unwrap()
                    .unwrap();
            }
            Fault::RestartRedis => tokio::task::block_in_place(|| self.redis.restart()).unwrap(),
            Fault::RestartNats => {
                if let Some(nats) = &mut self.nats {
                    tokio::task::block_in_place(|| nats.restart()).unwrap();
                }
            }
            Fault::RestartRabbitmq => {
                if let Some((node, _)) = &mut self.rabbit {
                    tokio::task::block_in_place(|| node.restart()).unwrap();
                }
            }
            Fault::WebhookAway => {
                *self.hook.away_until.lock().unwrap() =
                    Some(Instant::now() + rng.millis(1000..=5000));
            }
            Fault::DiskFull => {
                self.disk.fill().unwrap();
                tokio::time::sleep(rng.millis(1000..=4000)).await;
                self.disk.free_up().unwrap();
            }
        }
    }

    /// Starts an incremental snapshot of a table at random (the daemon must be up).
    fn snapshot(&self, rng: &mut Rng) {
        let table = ["public.accounts", "public.docs", "public.events"][rng.below(3) as usize];
        let out = self.setup.cli(&["snapshot", "demo", table]);
        assert!(
            out.status.success(),
            "siphon snapshot demo {table}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until the file sink applied past where it was (`from`): the pipeline moves again.
    /// A sink or the source stopped for good by a fault is a finding of its own.
    async fn moving_past(&self, from: u64) {
        let status = common::wait_status(
            &self.daemon,
            Duration::from_secs(180),
            "the pipeline moving after a fault",
            |s| s[0]["sinks"]["out"]["next_offset"].as_u64() > Some(from) || failed(s).is_some(),
        )
        .await;
        if let Some(what) = failed(&status) {
            panic!(
                "seed {}: {what}\n{}",
                self.plan.seed,
                tail(&self.daemon.log())
            );
        }
    }

    /// Compares every store and change stream with the source; the mismatches.
    async fn compare(&self) -> Vec<String> {
        let mut mismatches = Vec::new();
        let source = self.pg.client("shop").await.unwrap();
        let want = pg_rows(&source, "public", TABLES).await;
        let mut stores: Vec<(&str, Rows)> = vec![(
            "cache",
            redis_rows(&self.redis.url(), "cache:", TABLES).await,
        )];
        if self.plan.every_sink {
            let mirror = self.pg.client("mirror").await.unwrap();
            stores.push(("mirror", pg_rows(&mirror, "public", TABLES).await));
            stores.push((
                "lake",
                duckdb_rows(&self.lake.path().join("lake.duckdb"), TABLES).await,
            ));
        }
        for (name, got) in &stores {
            let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
            let wrong: Vec<String> = keys
                .into_iter()
                .filter(|k| want.get(*k) != got.get(*k))
                .map(|k| {
                    format!(
                        "{name}: {}:{} is {:?} in the source, {:?} in the store",
                        k.0,
                        k.1,
                        want.get(k).map(|r| shorten(r)),
                        got.get(k).map(|r| shorten(r))
                    )
                })
                .collect();
            mismatches.extend(limited(wrong, name, 10));
        }

        let committed = audit(&source).await;
        let out = self.setup.output();
        mismatches.extend(committed.differences(
            &Changes::of_envelopes(&out),
            "the log (file sink)",
            10,
        ));
        let streamed = redis_stream_events(&self.redis.url()).await;
        mismatches.extend(committed.differences(
            &Changes::of_envelopes(&streamed),
            "redis_stream",
            10,
        ));
        if let Some(nats) = &self.nats {
            let client = async_nats::connect(nats.url()).await.unwrap();
            let published: Vec<Json> = nats_messages(&client, "chaos", None)
                .await
                .unwrap()
                .iter()
                .map(|m| serde_json::from_slice(&m.payload).unwrap())
                .collect();
            mismatches.extend(committed.differences(
                &Changes::of_envelopes(&published),
                "nats",
                10,
            ));
        }
        if let Some((_, ex)) = &self.rabbit {
            let queued = ex.drain_events().await.unwrap();
            let firsts = first_copies(
                "rabbitmq",
                queued.into_iter().map(|e| (e.id, Said::of(&e.value))),
                &mut mismatches,
            );
            mismatches.extend(committed.differences(&Changes::of(firsts), "rabbitmq", 10));
        }
        if self.plan.every_sink {
            let received = std::mem::take(&mut *self.hook.events.lock().unwrap());
            let firsts = first_copies("webhook", received, &mut mismatches);
            mismatches.extend(committed.differences(&Changes::of(firsts), "webhook", 10));
        }
        mismatches
    }
}

/// The source or a sink that stopped for good, and why.
fn failed(status: &Json) -> Option<String> {
    let pipeline = &status[0];
    if pipeline["source"]["state"] == "failed" {
        return Some(format!(
            "the source failed: {}",
            pipeline["source"]["last_error"]
        ));
    }
    pipeline["sinks"]
        .as_object()?
        .iter()
        .find_map(|(name, sink)| {
            (sink["state"] == "failed")
                .then(|| format!("sink {name} failed: {}", sink["last_error"]))
        })
}

fn start_daemon(setup: &Setup, plan: &Plan) -> Daemon {
    match plan.lose_one_in {
        Some(n) => setup.start_with_env(&[("SIPHON_TEST_LOSE_ONE_IN", &n.to_string())]),
        None => setup.start(),
    }
}

/// Every committed change, from the audit table.
async fn audit(client: &tokio_postgres::Client) -> Changes {
    let mut out = Changes::default();
    for r in client
        .query("select tbl, op, id, v from chaos_audit order by seq", &[])
        .await
        .unwrap()
    {
        let (table, op): (String, String) = (r.get(0), r.get(1));
        if op == "t" {
            *out.truncates.entry(table).or_default() += 1;
        } else {
            out.per_key
                .entry((table, r.get::<_, i64>(2)))
                .or_default()
                .push((op, r.get(3)));
        }
    }
    out
}

/// Every envelope in the Redis Streams sink's streams (`chaos.public.<table>`), stream by
/// stream in order.
async fn redis_stream_events(url: &str) -> Vec<Json> {
    let mut conn = redis_conn(url).await.unwrap();
    let mut out = Vec::new();
    for (table, _) in TABLES {
        let entries: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
            .arg(format!("chaos.public.{table}"))
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        out.extend(
            entries
                .iter()
                .map(|(_, fields)| serde_json::from_str::<Json>(&fields["value"]).unwrap()),
        );
    }
    out
}

/// A row's values, long ones cut short, for a readable mismatch.
fn shorten(row: &[Option<String>]) -> Vec<Option<String>> {
    row.iter()
        .map(|v| {
            v.as_ref().map(|s| match s.char_indices().nth(40) {
                Some((i, _)) => format!("{}… ({} chars)", &s[..i], s.len()),
                None => s.clone(),
            })
        })
        .collect()
}

fn limited(mut lines: Vec<String>, what: &str, limit: usize) -> Vec<String> {
    if lines.len() > limit {
        let more = lines.len() - limit;
        lines.truncate(limit);
        lines.push(format!("{what}: … and {more} more"));
    }
    lines
}

/// The last lines of a log.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// One run: the world, the workload and the faults, then the comparison.
async fn run(plan: Plan) -> Report {
    let started = Instant::now();
    eprintln!("chaos: seed {}, {} faults", plan.seed, plan.faults);
    let mut rng = Rng(plan.seed);
    let mut world = World::start(plan.clone()).await;
    // The snapshot (250 rows) applied before the workload starts.
    common::wait_status(
        &world.daemon,
        Duration::from_secs(180),
        "the snapshot applied",
        |s| s[0]["sinks"]["out"]["next_offset"].as_u64() >= Some(250),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(run_workload(world.pg.url("shop"), plan.seed, stop.clone()));
    let mut faults: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut snapshots = 0;
    let mut struck = 0;
    // One incremental snapshot at least, at a random moment; more by chance.
    let snapshot_at = rng.below(plan.faults as u64) as usize;
    while struck < plan.faults {
        tokio::time::sleep(rng.millis(200..=1500)).await;
        let status = world.status().await;
        let at = status[0]["sinks"]["out"]["next_offset"]
            .as_u64()
            .unwrap_or(0);
        if (struck == snapshot_at && snapshots == 0) || rng.below(12) == 0 {
            world.snapshot(&mut rng);
            snapshots += 1;
            continue;
        }
        let fault = Fault::pick(&mut rng, &plan);
        eprintln!("chaos: {}", fault.name());
        world.strike(fault, &mut rng).await;
        *faults.entry(fault).or_default() += 1;
        struck += 1;
        world.moving_past(at).await;
    }
    stop.store(true, Ordering::Relaxed);
    let transactions = workload.await.unwrap();

    // Every sink applied everything committed, then a clean stop.
    let lsn: String = world
        .pg
        .client("shop")
        .await
        .unwrap()
        .query_one("select pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    for sink in world.sink_names() {
        common::wait_applied(
            &world.daemon,
            sink,
            &format!("lsn={lsn}"),
            Duration::from_secs(180),
        )
        .await;
    }
    let events = world.status().await[0]["log"]["end_offset"]
        .as_u64()
        .unwrap_or(0);
    world.daemon.signal("TERM").unwrap();
    let stopped = world.daemon.wait(Duration::from_secs(60)).unwrap();
    let mut mismatches = world.compare().await;
    if !stopped.success() {
        mismatches.push(format!("the last graceful stop failed ({stopped})"));
    }
    Report {
        seed: plan.seed,
        faults,
        snapshots,
        transactions,
        events,
        elapsed: started.elapsed(),
        mismatches,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_loses_and_repeats_nothing() {
    let plan = Plan::from_env();
    let report = run(plan.clone()).await;
    eprintln!("{report}");
    if let Ok(path) = std::env::var("SIPHON_CHAOS_REPORT") {
        std::fs::write(path, report.to_string()).unwrap();
    }
    let total: usize = report.faults.values().sum();
    assert!(total >= plan.faults, "{report}");
    assert!(report.mismatches.is_empty(), "{report}");
}

/// The harness sees a loss: the daemon (a debug build, whose test hook
/// `SIPHON_TEST_LOSE_ONE_IN` drops one record in that many before the log) loses changes, and
/// the comparison reports them, with the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_harness_sees_a_planted_loss() {
    let plan = Plan {
        seed: 22,
        faults: 3,
        every_sink: false,
        rabbit_restarts: false,
        lose_one_in: Some(2000),
    };
    let report = run(plan).await;
    eprintln!("{report}");
    assert!(
        report.mismatches.iter().any(|m| m.starts_with("the log")),
        "no loss seen in the log:\n{report}"
    );
    assert!(
        report
            .mismatches
            .iter()
            .any(|m| m.starts_with("redis_stream")),
        "no loss seen in the stream:\n{report}"
    );
    assert!(
        report.to_string().contains("SIPHON_CHAOS_SEED=22"),
        "{report}"
    );
}
