//! The PostgreSQL source into the Redis and PostgreSQL sinks (a mirror and a history), end
//! to end, while a writer runs a mixed workload: kill -9 of the daemon, the targets' connections
//! dropped. Then each store is compared with the source table row by row, the history with
//! an audit table a trigger fills in the source database (every change once, in order, values
//! included), and a wiped target is rebuilt with `siphon replay`.
//! The DuckDB sink is part of it, so the file needs the `duckdb` feature (on by default).
#![cfg(feature = "duckdb")]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Setup;
use serde_json::Value as Json;
use siphon_test_support::search::SearchStandIn;
use siphon_test_support::{PgDatabase, RedisKeyspace, postgres, redis};

/// Every type class, a TOASTed column (`big`) and NULLs; a trigger records every change to
/// `shop.items` in `public.items_audit` (the oracle of the history sink), after a copy of its
/// first rows.
const SCHEMA: &str = "
    create schema shop;
    create table shop.items (
        id int primary key, name text, price numeric(12,2), tags text[], doc jsonb, big text,
        at timestamp, flag boolean, n double precision, data bytea, u uuid);
    insert into shop.items
    select g, 'item ' || g, g * 1.5, array['a', 'b' || g], jsonb_build_object('k', g),
           case when g % 3 = 0 then (select string_agg(md5(random()::text || s), '') from generate_series(1, 300) s) end,
           timestamp '2024-01-01 00:00:00' + g * interval '1 second', g % 2 = 0, g / 4.0,
           '\\x00ff'::bytea, gen_random_uuid()
    from generate_series(1, 100) g;
    alter table shop.items alter column big set storage external;
    create table shop.events (id bigint, region text, payload text, primary key (id, region))
        partition by list (region);
    create table shop.events_eu partition of shop.events for values in ('eu');
    create table shop.events_us partition of shop.events for values in ('us');
    insert into shop.events select g, case when g % 2 = 0 then 'eu' else 'us' end, 'p' || g
    from generate_series(1, 20) g;
    create table public.items_initial as select * from shop.items;
    create table public.items_audit (seq bigserial primary key, op text not null, id int,
        old_id int, big_unchanged boolean, row jsonb);
    create function public.audit_items() returns trigger language plpgsql as $$
    begin
        if tg_op = 'INSERT' then
            insert into public.items_audit (op, id, row) values ('c', new.id, to_jsonb(new));
        elsif tg_op = 'UPDATE' then
            insert into public.items_audit (op, id, old_id, big_unchanged, row)
            values ('u', new.id, old.id, old.big is not distinct from new.big, to_jsonb(new));
        elsif tg_op = 'DELETE' then
            insert into public.items_audit (op, id) values ('d', old.id);
        else
            insert into public.items_audit (op) values ('t');
        end if;
        return null;
    end $$;
    create trigger audit after insert or update or delete on shop.items
        for each row execute function public.audit_items();
    create trigger audit_truncate after truncate on shop.items
        for each statement execute function public.audit_items();";

struct Stores {
    source: PgDatabase,
    target: PgDatabase,
    cache: RedisKeyspace,
    search: SearchStandIn,
    /// Holds the DuckDB file.
    lake: tempfile::TempDir,
    setup: Setup,
}

async fn stores() -> Stores {
    let source = postgres().await.unwrap();
    source.execute(SCHEMA).await.unwrap();
    let target = postgres().await.unwrap();
    let cache = redis().await.unwrap();
    let search = SearchStandIn::start().await.unwrap();
    let lake = tempfile::tempdir().unwrap();
    let config = format!(
        r#"kind = "postgres"
url = "{url}"
tables = ["shop.*"]
slot = "{name}_slot"
status_interval = "200ms""#,
        url = source.url,
        name = source.name
    );
    // The event file (`out`) and the history keep every event: after the data directory is
    // lost they are rebuilt from the new log only because they are told to.
    let sinks = format!(
        r#"on_other_log = "rebuild"

[pipelines.demo.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "{prefix}"
exclude_columns = ["shop.items.data"]
batch_size = 40
max_backoff = "500ms"

[pipelines.demo.sinks.search]
kind = "elasticsearch"
url = "{search}"
index = "{{schema}}_{{table}}"
batch_size = 40
max_backoff = "500ms"

[pipelines.demo.sinks.lake]
kind = "duckdb"
path = "{lake}"
batch_size = 40
max_backoff = "500ms"

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "{target}"
batch_size = 40
max_backoff = "500ms"

[pipelines.demo.sinks.audit]
kind = "postgres"
url = "{target}"
mode = "history"
schema = "audit"
on_other_log = "rebuild"
batch_size = 40
max_backoff = "500ms"
"#,
        redis = cache.url,
        prefix = cache.prefix,
        target = target.url,
        search = search.url,
        lake = lake.path().join("lake.duckdb").display(),
    );
    let setup = Setup::with_source(&config, 0, &sinks);
    Stores {
        source,
        target,
        cache,
        search,
        lake,
        setup,
    }
}

/// Transactions of inserts, updates (some leaving `big` unchanged), deletes and NULLs, and
/// one truncate, until stopped (and at least 131, the truncate among them); returns how many
/// ran. Rows with a `big` value stay, so that the log holds many whole rows followed by
/// updates that leave `big` unchanged, which compaction must keep together for a replay from
/// offset 0.
fn writer(db: &PgDatabase, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let url = db.url.clone();
    tokio::spawn(async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut n = 0u64;
        // Past the truncate (the 121st) and some after it, however fast the faults went.
        while n <= 130 || !stop.load(Ordering::Relaxed) {
            let new = 1000 + n;
            let sql = if n == 120 {
                "truncate shop.items".to_owned()
            } else {
                format!(
                    "begin;
                     insert into shop.items values ({new}, 'new {n}', {n}.25, array['x', 'n{n}'], '{{\"n\": {n}, \"s\": \"v\"}}',
                        case when {n} % 4 = 0 then (select string_agg(md5(random()::text || s), '') from generate_series(1, 300) s) end,
                        timestamp '2024-06-01 12:00:00' + {n} * interval '1 minute', {n} % 2 = 0, {n} * 0.5, '\\x0102'::bytea, gen_random_uuid());
                     update shop.items set price = price + 1 where id = {a};
                     update shop.items set name = 'renamed {n}', flag = null, tags = null where id = {b};
                     delete from shop.items where id = {gone} and big is null;
                     update shop.events set region = case region when 'eu' then 'us' else 'eu' end,
                         payload = 'moved {n}' where id = {moved};
                     insert into shop.events values ({new}, 'eu', 'new {n}');
                     commit;",
                    moved = n % 20 + 1,
                    a = (n * 7) % 100 + 1,
                    b = 1000 + n.saturating_sub(2),
                    gone = 1000 + n.saturating_sub(5),
                )
            };
            client.batch_execute(&sql).await.unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        n
    })
}

/// Rows by id as JSON without NULL fields, from `sql` returning (id, jsonb).
/// None while the query's table does not exist (a sink makes its tables as it goes); any
/// other error fails the test.
async fn json_rows(db: &PgDatabase, sql: &str) -> BTreeMap<i64, Json> {
    let client = db.client().await.unwrap();
    match client.query(sql, &[]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, Json>(1)))
            .collect(),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            BTreeMap::new()
        }
        Err(e) => panic!("{sql}: {e}"),
    }
}

async fn source_rows(s: &Stores) -> BTreeMap<i64, Json> {
    json_rows(
        &s.source,
        "select id::bigint, jsonb_strip_nulls(to_jsonb(t)) from shop.items t",
    )
    .await
}

/// The partitioned table's rows, keyed by `id * 10` plus 1 for `eu`, 2 for `us`.
async fn events_rows(db: &PgDatabase, schema: &str) -> BTreeMap<i64, Json> {
    json_rows(
        db,
        &format!(
            "select id * 10 + case region when 'eu' then 1 else 2 end, \
             jsonb_build_object('id', id, 'region', region, 'payload', payload) from {schema}.events"
        ),
    )
    .await
}

async fn mirror_rows(s: &Stores) -> BTreeMap<i64, Json> {
    json_rows(
        &s.target,
        "select id::bigint, jsonb_strip_nulls(to_jsonb(t) - '_siphon_offset') from shop.items t",
    )
    .await
}

/// The Redis hashes, each field compared as the source's JSON: a string as itself, anything
/// else parsed as JSON.
async fn cache_rows(s: &Stores, like: &BTreeMap<i64, Json>) -> BTreeMap<i64, Json> {
    let mut conn = s.cache.conn().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}items:*", s.cache.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut rows = BTreeMap::new();
    for key in keys {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        // The id from the key name: a hash without its id field is a partial row, which the
        // comparison must report rather than trip over.
        let id: i64 = key.rsplit(':').next().unwrap().parse().unwrap();
        let row: serde_json::Map<String, Json> = fields
            .into_iter()
            .map(|(k, v)| {
                let as_source = like.get(&id).and_then(|r| r.get(&k));
                let value = match as_source {
                    Some(Json::String(_)) | None => Json::String(v),
                    // 481 and 481.0 are the same double.
                    Some(n @ Json::Number(_)) if v.parse::<f64>().ok() == n.as_f64() => n.clone(),
                    Some(_) => serde_json::from_str(&v).unwrap_or(Json::String(v)),
                };
                (k, value)
            })
            .collect();
        rows.insert(id, Json::Object(row));
    }
    rows
}

/// The source rows in documents' terms: bytea as base64 (siphon's JSON encoding).
fn search_like(rows: &BTreeMap<i64, Json>) -> BTreeMap<i64, Json> {
    use base64::Engine as _;
    rows.iter()
        .map(|(id, r)| {
            let mut r = r.clone();
            let o = r.as_object_mut().unwrap();
            if let Some(Json::String(hex)) = o.get("data") {
                let bytes: Vec<u8> = (2..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                o.insert("data".into(), Json::String(encoded));
            }
            (*id, canon(&r))
        })
        .collect()
}

/// One form for values that differ only in spelling: numbers (and numeric text, as decimals
/// travel) as doubles, JSON text as JSON, no null fields.
fn canon(v: &Json) -> Json {
    match v {
        Json::Number(n) => serde_json::json!(n.as_f64()),
        Json::String(s) => match s.parse::<f64>() {
            Ok(f) if f.is_finite() => serde_json::json!(f),
            _ if s.starts_with('{') || s.starts_with('[') => {
                serde_json::from_str::<Json>(s).map_or_else(|_| v.clone(), |j| canon(&j))
            }
            _ => v.clone(),
        },
        Json::Array(a) => Json::Array(a.iter().map(canon).collect()),
        Json::Object(o) => Json::Object(
            o.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), canon(x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The source rows without the column the cache leaves out.
fn without_data(rows: &BTreeMap<i64, Json>) -> BTreeMap<i64, Json> {
    rows.iter()
        .map(|(id, r)| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("data");
            (*id, r)
        })
        .collect()
}

fn differences(what: &str, want: &BTreeMap<i64, Json>, got: &BTreeMap<i64, Json>) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, v)| match got.get(k) {
            None => format!("{what} id {k}: missing in the sink"),
            Some(g) => {
                let fields: Vec<String> = v
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(f, x)| g.get(*f) != Some(*x))
                    .map(|(f, x)| {
                        format!(
                            "{f}: source {:.80}, sink {:.80}",
                            x.to_string(),
                            g.get(f).map(Json::to_string).unwrap_or_default()
                        )
                    })
                    .chain(
                        g.as_object()
                            .unwrap()
                            .keys()
                            .filter(|f| v.get(*f).is_none())
                            .map(|f| format!("{f}: only in the sink")),
                    )
                    .collect();
                format!("{what} id {k}: {}", fields.join("; "))
            }
        })
        .chain(
            got.keys()
                .filter(|k| !want.contains_key(*k))
                .map(|k| format!("{what} id {k}: only in the sink")),
        )
        .take(5)
        .collect()
}

/// Waits until the cache and the mirror equal the source table, or panics with the
/// differences.
async fn converge(s: &Stores, d: &siphon_test_support::Daemon) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let want = source_rows(s).await;
        let mut diffs = differences("mirror", &want, &mirror_rows(s).await);
        let documents: BTreeMap<i64, Json> = s
            .search
            .documents("shop_items")
            .into_iter()
            .map(|(id, doc)| (id.parse().unwrap(), canon(&doc)))
            .collect();
        diffs.extend(differences("search", &search_like(&want), &documents));
        diffs.extend(differences(
            "cache",
            &without_data(&want),
            &cache_rows(s, &want).await,
        ));
        // The partitioned table, under its own name only.
        diffs.extend(differences(
            "mirror of the partitioned table",
            &events_rows(&s.source, "shop").await,
            &events_rows(&s.target, "shop").await,
        ));
        let partition_rows = s.target.client().await.unwrap().query_one(
            "select count(*) from pg_tables where schemaname = 'shop' and tablename like 'events\\_%'",
            &[],
        ).await.unwrap().get::<_, i64>(0);
        if partition_rows > 0 {
            diffs.push("the mirror has a table for a partition".into());
        }
        let mut conn = s.cache.conn().await.unwrap();
        let partition_keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}events_*", s.cache.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        if !partition_keys.is_empty() {
            diffs.push(format!(
                "the cache has keys of a partition: {partition_keys:?}"
            ));
        }
        if diffs.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            let kept = std::env::temp_dir().join(format!("siphon-failed-{}", std::process::id()));
            let _ = std::process::Command::new("cp")
                .arg("-r")
                .arg(s.setup.dir.path())
                .arg(&kept)
                .status();
            panic!(
                "the sinks never matched the source (data copied to {}):\n{}\ndaemon log:\n{}",
                kept.display(),
                diffs.join("\n"),
                d.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until `sink` has applied past `than`; returns where it is.
async fn progress(d: &siphon_test_support::Daemon, sink: &str, than: u64) -> u64 {
    let st = common::wait_status(d, Duration::from_secs(60), "progress", |st| {
        st[0]["sinks"][sink]["next_offset"].as_u64() > Some(than)
    })
    .await;
    st[0]["sinks"][sink]["next_offset"].as_u64().unwrap()
}

/// A change to `shop.items` as the source's audit trigger saw it.
struct Audited {
    op: String,
    id: Option<i64>,
    /// The key before an update (another key: the update moved the row).
    old_id: Option<i64>,
    /// An update that left the TOASTed `big` as it was (PostgreSQL does not send it).
    big_unchanged: bool,
    row: Json,
}

/// An event the history should hold: op, key, and the row (`None` for deletes and
/// truncates), which may lack `big` when the source left it unchanged.
type Expected = (String, Option<i64>, Option<Json>, bool);

/// What the history should hold after the audit's changes, in order: a key change is a
/// delete of the old key and a create of the new one.
fn expected_history(changes: &[Audited]) -> Vec<Expected> {
    let mut out = Vec::new();
    for c in changes {
        match c.op.as_str() {
            "u" if c.old_id != c.id => {
                out.push(("d".into(), c.old_id, None, false));
                out.push(("c".into(), c.id, Some(canon(&c.row)), c.big_unchanged));
            }
            "c" | "u" => out.push((c.op.clone(), c.id, Some(canon(&c.row)), c.big_unchanged)),
            _ => out.push((c.op.clone(), c.id, None, false)),
        }
    }
    out
}

fn fold_audited(rows: &mut BTreeMap<i64, Json>, c: &Audited) {
    match c.op.as_str() {
        "t" => rows.clear(),
        "d" => {
            rows.remove(&c.id.unwrap());
        }
        _ => {
            if let Some(old) = c.old_id.filter(|old| Some(*old) != c.id) {
                rows.remove(&old);
            }
            rows.insert(c.id.unwrap(), canon(&c.row));
        }
    }
}

/// Checks the history against the source's audit table, values included: the history's
/// snapshot (its rows up to its last snapshot read, with the truncates a repeated snapshot
/// starts with) must be the source table at some point of the audit, and every change
/// after it must be there once, in order, with the values the source wrote.
async fn check_history(s: &Stores) {
    let source = s.source.client().await.unwrap();
    let mut state: BTreeMap<i64, Json> = source
        .query(
            "select id::bigint, to_jsonb(t) from public.items_initial t",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), canon(&r.get::<_, Json>(1))))
        .collect();
    let audit: Vec<Audited> = source
        .query(
            "select op, id::bigint, old_id::bigint, coalesce(big_unchanged, false), coalesce(row, 'null') \
             from public.items_audit order by seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Audited {
            op: r.get(0),
            id: r.get(1),
            old_id: r.get(2),
            big_unchanged: r.get(3),
            row: r.get(4),
        })
        .collect();
    let history: Vec<(String, Option<i64>, Json)> = s
        .target
        .client()
        .await
        .unwrap()
        .query(
            "select _siphon_op, id::bigint, to_jsonb(h) from audit.items h order by _siphon_offset",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let mut row: Json = r.get(2);
            row.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("_siphon"));
            (r.get(0), r.get(1), canon(&row))
        })
        .collect();
    let reads_end = history
        .iter()
        .rposition(|(op, _, _)| op == "r")
        .map_or(0, |i| i + 1);
    let mut snapshot = BTreeMap::new();
    for (op, id, row) in &history[..reads_end] {
        match op.as_str() {
            "r" => {
                snapshot.insert(id.unwrap(), row.clone());
            }
            "t" => snapshot.clear(),
            other => panic!("a {other:?} event among the history's snapshot reads"),
        }
    }
    let streamed = &history[reads_end..];
    let matches = |want: &Expected, got: &(String, Option<i64>, Json)| {
        let (op, id, row, big_may_lack) = want;
        if (op, id) != (&got.0, &got.1) {
            return false;
        }
        let Some(row) = row else { return true };
        if *row == got.2 {
            return true;
        }
        let mut without_big = row.clone();
        without_big.as_object_mut().unwrap().remove("big");
        *big_may_lack && got.2.get("big").is_none() && without_big == got.2
    };
    // The snapshot's point in the audit, where the rest of the history follows it.
    let mut report = String::from("no point of the source's audit matches the history's snapshot");
    let mut closest = usize::MAX;
    for k in 0..=audit.len() {
        if k > 0 {
            fold_audited(&mut state, &audit[k - 1]);
        }
        if state != snapshot {
            let differing = state
                .iter()
                .filter(|(id, r)| snapshot.get(*id) != Some(*r))
                .count()
                + snapshot
                    .keys()
                    .filter(|id| !state.contains_key(*id))
                    .count();
            if differing < closest {
                closest = differing;
                report = format!(
                    "no point of the source's audit matches the history's snapshot; the closest \
                     (after {k} changes) differs in {differing} rows"
                );
            }
            continue;
        }
        let want = expected_history(&audit[k..]);
        let first =
            (0..want.len().max(streamed.len())).find(|&i| match (want.get(i), streamed.get(i)) {
                (Some(w), Some(g)) => !matches(w, g),
                _ => true,
            });
        let Some(first) = first else { return };
        let (source, sink) = (
            format!("{:?}", want.get(first)),
            format!("{:?}", streamed.get(first)),
        );
        report = format!(
            "after the snapshot (at the audit's change {k}), the history holds {} changes, the \
             source made {}; the first to differ, #{first}: source {source:.300}, history {sink:.300}",
            streamed.len(),
            want.len(),
        );
        closest = 0;
    }
    panic!("{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sinks_follow_the_source_through_kill_9_and_dropped_target_connections() {
    let s = stores().await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(&s.source, stop.clone());
    // Each fault lands once the warehouse has applied more since the last one.
    let mut applied = 0;
    for round in 0..3u64 {
        let mut d = s.setup.start();
        applied = progress(&d, "warehouse", applied + 20 + round * 30).await;
        d.kill_9().unwrap();
    }
    let mut d = s.setup.start();
    let admin = s.target.client().await.unwrap();
    let mut cache = s.cache.conn().await.unwrap();
    for _ in 0..3 {
        applied = progress(&d, "warehouse", applied + 20).await;
        admin
            .execute(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = 'siphon'",
                &[&s.target.name],
            )
            .await
            .unwrap();
        let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query_async(&mut cache)
            .await;
    }
    // The search cluster down (every request 503) until its sink has retried a few times,
    // then back.
    let retries = |st: &Json| st[0]["sinks"]["search"]["retries"].as_u64().unwrap_or(0);
    let before =
        retries(&common::wait_status(&d, Duration::from_secs(10), "status", |_| true).await);
    s.search.set_fault(Some(503));
    common::wait_status(
        &d,
        Duration::from_secs(60),
        "the search sink to retry",
        |st| retries(st) >= before + 3,
    )
    .await;
    s.search.set_fault(None);
    progress(&d, "search", 0).await;
    stop.store(true, Ordering::Relaxed);
    let written = writing.await.unwrap();
    assert!(
        written > 130,
        "the writer wrote only {written} transactions (the truncate is the 121st)"
    );
    // A 100 kB value stored out of line, then the row's key changes: PostgreSQL sends the
    // old key only, never the untouched value, which every store carries over to the new key.
    s.source
        .execute(
            "insert into shop.items (id, name, big) values (800001, 'toasted',
                 (select string_agg(md5(random()::text || g), '') from generate_series(1, 3200) g));
             update shop.items set id = 800002 where id = 800001;
             update shop.items set name = 'toasted, then renamed' where id = 800002;",
        )
        .await
        .unwrap();
    converge(&s, &d).await;
    let log = d.log();
    assert!(
        log.contains("reopening and retrying"),
        "no sink noticed a dropped connection:\n{log}"
    );
    // The history is complete once the file sink has caught up with the same log.
    common::wait_status(&d, Duration::from_secs(60), "all sinks caught up", |st| {
        st[0]["sinks"]
            .as_object()
            .is_some_and(|m| m.values().all(|v| v["lag_records"] == 0))
    })
    .await;
    check_history(&s).await;

    // A replay without --reset runs across the truncate: the search index's _delete_by_query
    // runs again and deletes what came after it too; those documents must come back.
    let out = s.setup.cli(&["replay", "demo", "search", "--from", "0"]);
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    converge(&s, &d).await;

    // The cache loses everything, as a Redis without persistence does when it restarts (its
    // keys and the sink's cursor gone): the sink rebuilds it by itself.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", s.cache.prefix))
        .query_async(&mut cache)
        .await
        .unwrap();
    let _: u64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut cache)
        .await
        .unwrap();
    // The next change reaches the sink, which finds its cursor gone.
    s.source
        .execute("update shop.items set name = 'after the flush' where id = (select max(id) from shop.items)")
        .await
        .unwrap();
    converge(&s, &d).await;
    assert!(
        d.log().contains("rebuilding it from the start of the log"),
        "{}",
        d.log()
    );

    // Wipe the other stores, then rebuild them with `siphon replay --from 0 --reset`.
    admin
        .batch_execute("drop schema shop cascade")
        .await
        .unwrap();
    s.search.wipe();
    for sink in ["warehouse", "search"] {
        let out = s
            .setup
            .cli(&["replay", "demo", sink, "--from", "0", "--reset"]);
        assert!(
            out.status.success(),
            "replay {sink}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    converge(&s, &d).await;

    // The data directory is lost (a container without a volume) while every store keeps its
    // cursor: the source takes a new snapshot into a new log, and each store, whose cursor is
    // a position in the old log, is rebuilt from the new one.
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );
    std::fs::remove_dir_all(s.setup.dir.path().join("data")).unwrap();
    let mut d = s.setup.start();
    s.source
        .execute(
            "insert into shop.items (id, name) values (900001, 'after the wipe');
             update shop.items set name = 'changed after the wipe' where id = (select min(id) from shop.items)",
        )
        .await
        .unwrap();
    converge(&s, &d).await;
    assert!(
        d.log().contains("belongs to another change log"),
        "{}",
        d.log()
    );
    common::wait_status(&d, Duration::from_secs(60), "all sinks caught up", |st| {
        st[0]["sinks"]
            .as_object()
            .is_some_and(|m| m.values().all(|v| v["lag_records"] == 0))
    })
    .await;
    check_history(&s).await;

    // DuckDB allows one process to open its file: compare it once the daemon has stopped.
    d.signal("TERM").unwrap();
    assert!(
        d.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        d.log()
    );
    let want: BTreeMap<i64, Json> = source_rows(&s)
        .await
        .iter()
        .map(|(k, v)| (*k, canon(v)))
        .collect();
    let diffs = differences("duckdb", &want, &lake_rows(&s).await);
    assert!(
        diffs.is_empty(),
        "the DuckDB mirror differs from the source:\n{}",
        diffs.join("\n")
    );
}

/// The DuckDB mirror's rows, each column written as the source's JSON writes it.
async fn lake_rows(s: &Stores) -> BTreeMap<i64, Json> {
    use siphon_core::sink::Sink as _;
    let mut sink = siphon_sink_duckdb::DuckdbSink::new(
        siphon_sink_duckdb::DuckdbSinkConfig::new(s.lake.path().join("lake.duckdb")),
        "inspect",
        "inspect",
    )
    .unwrap();
    sink.check().await.unwrap();
    let conn = sink.dialect().connection().unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT to_json({id: id, name: name, price: price, tags: tags, doc: doc, big: big, \
             \"at\": strftime(\"at\", '%Y-%m-%dT%H:%M:%S'), flag: flag, n: n, \
             data: '\\x' || lower(hex(data)), u: u::VARCHAR})::VARCHAR FROM shop_items",
        )
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|doc| {
            let doc: Json = serde_json::from_str(&doc.unwrap()).unwrap();
            (doc["id"].as_i64().unwrap(), canon(&doc))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_target_refuses_goes_to_the_dead_letter_file_and_the_sink_goes_on() {
    let source = postgres().await.unwrap();
    source
        .execute(
            "create table public.notes (id int primary key, note text);
             insert into notes values (1, 'ok'), (2, 'far too long'), (3, 'fine');",
        )
        .await
        .unwrap();
    let target = postgres().await.unwrap();
    // A table made for siphon, but with a column narrower than the source's.
    target
        .execute("create table public.notes (id bigint primary key, note varchar(5), _siphon_offset bigint not null)")
        .await
        .unwrap();
    let config = format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntables = [\"public.notes\"]\nslot = \"{}_slot\"\nstatus_interval = \"200ms\"",
        source.url, source.name
    );
    let sinks = format!(
        "\n[pipelines.demo.sinks.wh]\nkind = \"postgres\"\nurl = \"{}\"\non_error = \"dead_letter\"\n",
        target.url
    );
    let setup = Setup::with_source(&config, 0, &sinks);
    let d = setup.start();
    let ids = async || -> Vec<i64> {
        let client = target.client().await.unwrap();
        client
            .query("select id::bigint from notes order by id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while ids().await != [1, 3] {
        assert!(
            Instant::now() < deadline,
            "rows 1 and 3 never arrived:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = setup.dead_letters("wh");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["table"], "public.notes");
    assert_eq!(lines[0]["event"]["after"]["id"], 2);
    assert!(
        lines[0]["reason"].as_str().unwrap().contains("too long"),
        "{lines:?}"
    );
    // The sink goes on with what comes next.
    source
        .execute("insert into notes values (4, 'next')")
        .await
        .unwrap();
    while ids().await != [1, 3, 4] {
        assert!(
            Instant::now() < deadline,
            "row 4 never arrived:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = common::wait_status(&d, Duration::from_secs(10), "the sink's status", |s| {
        s[0]["sinks"]["wh"]["dead_lettered"] == 1
    })
    .await;
    assert_eq!(status[0]["sinks"]["wh"]["state"], "running");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_offline_replay_goes_on_through_a_target_outage_to_the_log_end() {
    use siphon_log_file::{FileLog, FileLogConfig};
    use siphon_source_generator::{GeneratorConfig, GeneratorSource};
    const EVENTS: u64 = 40_000;
    let search = SearchStandIn::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let generator = GeneratorSource::new(
        "demo",
        GeneratorConfig {
            tables: vec!["demo.orders".parse().unwrap()],
            keys: 700,
            events: EVENTS,
            transaction_size: 5,
            ..GeneratorConfig::default()
        },
    );
    let events: Vec<_> = (0..EVENTS).map(|i| generator.event(i)).collect();
    let ends: Vec<usize> = (4..EVENTS as usize).step_by(5).collect();
    let log = FileLog::open(
        dir.path().join("pipelines/demo/log"),
        FileLogConfig::default(),
    )
    .unwrap();
    log.append_blocking(&siphon_core::source::encode_events(&events, &ends).unwrap())
        .unwrap();
    drop(log);
    let config = siphon::config::Config::from_toml(&format!(
        "data_dir = \"{}\"\n[admin]\nenabled = false\n[pipelines.demo.source]\nkind = \"generator\"\ntables = [\"demo.orders\"]\n\
         [pipelines.demo.sinks.search]\nkind = \"elasticsearch\"\nurl = \"{}\"\nbatch_size = 100\nmax_backoff = \"200ms\"\n",
        dir.path().display(),
        search.url
    ))
    .unwrap();
    let table = siphon_core::source::TableInfo {
        name: siphon_core::TableName::new("demo", "orders"),
        key_columns: vec!["id".into()],
    };
    let replay = tokio::spawn(async move {
        siphon::runtime::replay_offline(&config, "demo", "search", 0, true, vec![table], |_, _| {})
            .await
    });
    // The cluster goes down a little way into the replay, and comes back.
    let deadline = Instant::now() + Duration::from_secs(30);
    while search.requests() < 30 {
        assert!(
            Instant::now() < deadline,
            "the replay never reached the cluster"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Down until the replay has retried a few times (each retry is a request answered 503).
    search.set_fault(Some(503));
    let faulted = search.requests();
    while search.requests() < faulted + 3 {
        assert!(Instant::now() < deadline, "the replay never retried");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    search.set_fault(None);
    let status = replay.await.unwrap().unwrap();
    assert!(
        status.component.retries > 0,
        "the outage came too late: {status:?}"
    );
    assert_eq!(
        status.next_offset, EVENTS,
        "the replay stopped before the log's end"
    );
    let live = common::fold(
        &events
            .iter()
            .map(common::store_envelope)
            .collect::<Vec<_>>(),
    );
    let documents: BTreeMap<(String, i64), Json> = search
        .documents("orders")
        .into_iter()
        .map(|(id, doc)| (("orders".to_owned(), id.parse().unwrap()), doc))
        .collect();
    assert!(
        documents == live,
        "the documents differ from the log's rows"
    );
}

/// A history table holds every event of the log exactly once, although its connection drops
/// in the middle of source transactions larger than a batch (the store rolls back to its last
/// commit and the sink reads again from there) while compaction runs every few milliseconds
/// over small segments: compaction may only use what the store has committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_history_keeps_every_event_when_its_transaction_rolls_back_under_compaction() {
    const EVENTS: u64 = 12_000;
    let target = postgres().await.unwrap();
    let source = format!(
        "kind = \"generator\"\ntables = [\"demo.orders\", \"demo.customers\"]\nkeys = 10\n\
         events = {EVENTS}\ntransaction_size = 600\ninterval = \"300ms\""
    );
    let sinks = format!(
        "\n[pipelines.demo.sinks.audit]\nkind = \"postgres\"\nurl = \"{}\"\nmode = \"history\"\n\
         batch_size = 10\nlinger = \"0s\"\nmax_backoff = \"100ms\"\n",
        target.url
    );
    let setup = Setup::with_log(
        &source,
        "segment_size = \"4KiB\"\nmaintenance_interval = \"20ms\"",
        EVENTS,
        &sinks,
    );
    let d = setup.start();
    let admin = target.client().await.unwrap();
    let applied = async || -> u64 {
        let st = common::wait_status(&d, Duration::from_secs(10), "status", |_| true).await;
        st[0]["sinks"]["audit"]["next_offset"].as_u64().unwrap_or(0)
    };
    // Drop the sink's connection in the middle of a source transaction, once per transaction.
    let mut dropped_in = None;
    let mut drops = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = applied().await;
        if now >= EVENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink stalled at {now}:\n{}",
            d.log()
        );
        let transaction = now / 600;
        if (150..450).contains(&(now % 600)) && dropped_in != Some(transaction) {
            admin
                .execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = 'siphon'",
                    &[&target.name],
                )
                .await
                .unwrap();
            dropped_in = Some(transaction);
            drops += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        drops >= 3,
        "the connection was dropped mid-transaction only {drops} times"
    );
    let offsets: Vec<i64> = admin
        .query(
            "select _siphon_offset from (select _siphon_offset from demo.orders union all \
             select _siphon_offset from demo.customers) h order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let missing: Vec<i64> = (0..EVENTS as i64)
        .filter(|o| offsets.binary_search(o).is_err())
        .take(10)
        .collect();
    assert!(
        missing.is_empty() && offsets.len() as u64 == EVENTS,
        "the history holds {} of {EVENTS} events; missing (first 10): {missing:?}\n{}",
        offsets.len(),
        d.log()
    );
}

/// A source transaction whose last records all belong to tables a sink leaves out still
/// commits in that sink's store, at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_ending_in_records_routed_away_commits() {
    let target = postgres().await.unwrap();
    // Transactions of 8 events alternating orders and customers: each ends with a customer.
    let source = "kind = \"generator\"\ntables = [\"demo.orders\", \"demo.customers\"]\nkeys = 40\n\
                  events = 16\ntransaction_size = 8\ninterval = \"10ms\"";
    let sinks = format!(
        "\n[pipelines.demo.sinks.orders]\nkind = \"postgres\"\nurl = \"{}\"\ntables = [\"demo.orders\"]\n\
         batch_size = 1\nlinger = \"0s\"\n",
        target.url
    );
    let setup = Setup::with_source(source, 16, &sinks);
    let d = setup.start();
    common::wait_status(
        &d,
        Duration::from_secs(30),
        "the sink to read the log",
        |s| s[0]["sinks"]["orders"]["next_offset"] == 16,
    )
    .await;
    let want = common::expected_rows(&setup, 16)
        .into_iter()
        .filter(|((table, _), _)| table == "orders")
        .count();
    let client = target.client().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got: i64 = client
            .query_one("select count(*) from demo.orders", &[])
            .await
            .map_or(0, |r| r.get(0));
        if got as usize == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the mirror shows {got} of {want} rows: the last transaction never committed\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = common::wait_status(&d, Duration::from_secs(5), "status", |_| true).await;
    assert_eq!(status[0]["sinks"]["orders"]["committed_offset"], 16);
}
