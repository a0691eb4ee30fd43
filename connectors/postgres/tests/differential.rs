//! The three ways a value reaches the log — the snapshot (binary COPY), pgoutput's text
//! tuples and its binary tuples — give the same value, for many random and edge values of
//! every supported type; and a value of a type siphon keeps as text is exactly what the
//! type's output function prints (what a text-format query returns), in the snapshot and in
//! the stream. So the paths cannot drift apart unseen.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::log::{ChangeLog, LogReader};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{Source, SourceContext};
use siphon_core::{ConnectionUrl, Event, Op, Row, SnapshotMarker, Value};
use siphon_log_file::FileLog;
use siphon_source_postgres::{PostgresConfig, PostgresSource, SnapshotMode};
use siphon_test_support::{PgDatabase, postgres};
use tokio_util::sync::CancellationToken;

/// Rows of generated values; the stream gets a copy of each.
const ROWS: i64 = 200;
/// Added to an id for the streamed copy of its row.
const STREAMED: i64 = 100_000;

const TYPES: &str = "
    create type mood as enum ('sad', 'happy', 'in between');
    create domain posint as int4 check (value > 0);
    create type pair as (a int, b text);";

/// Columns of types siphon decodes (binary and text): name, type, value of row `g`.
const DECODED: &[(&str, &str, &str)] = &[
    (
        "b",
        "bool",
        "case g % 3 when 0 then null else g % 2 = 0 end",
    ),
    (
        "i2",
        "int2",
        "case g % 5 when 0 then -32768 when 1 then 32767 when 2 then 0 else (random() * 65534 - 32767)::int2 end",
    ),
    (
        "i4",
        "int4",
        "case g % 5 when 0 then -2147483648 when 1 then 2147483647 when 2 then 0 else (random() * 4294967294 - 2147483647)::int4 end",
    ),
    (
        "i8",
        "int8",
        "case g % 5 when 0 then -9223372036854775808 when 1 then 9223372036854775807 when 2 then 0 else ((random() - 0.5) * 1.8e19)::int8 end",
    ),
    (
        "f4",
        "float4",
        "case g % 8 when 0 then 'NaN'::float4 when 1 then 'Infinity' when 2 then '-Infinity' when 3 then '-0' when 4 then 1.4e-45 when 5 then 3.4028235e38 else ((random() - 0.5) * 10 ^ ((random() * 70 - 35)::int))::float4 end",
    ),
    (
        "f8",
        "float8",
        "case g % 8 when 0 then 'NaN'::float8 when 1 then 'Infinity' when 2 then '-Infinity' when 3 then '-0' when 4 then 5e-324 when 5 then 1.7976931348623157e308 else (random() - 0.5) * 10 ^ ((random() * 600 - 300)::int) end",
    ),
    (
        "n",
        "numeric",
        "case g % 9 when 0 then 'NaN'::numeric when 1 then 'Infinity' when 2 then '-Infinity' when 3 then 0 when 4 then -0.000000000000000000001 when 5 then ('9' || repeat('8', g % 100) || '.' || repeat('7', g % 50))::numeric else round(((random() - 0.5) * 10 ^ (g % 40 - 10))::numeric, g % 25) end",
    ),
    (
        "n_scaled",
        "numeric(12,4)",
        "case g % 3 when 0 then 0 else round((random() - 0.5)::numeric * 1e8, 4) end",
    ),
    (
        "t",
        "text",
        "case g % 6 when 0 then '' when 1 then E'a\\\\b\"c''d\\n\\te\\r' when 2 then 'héllo wörld 😀 ✓' when 3 then repeat('x', 3000 + g) else md5(random()::text) || chr((random() * 1000 + 32)::int) end",
    ),
    ("vc", "varchar(20)", "left(md5(random()::text), g % 21)"),
    (
        "bp",
        "char(6)",
        "case g % 3 when 0 then '' else left(md5(g::text), g % 7) end",
    ),
    ("nm", "name", "('n' || g)::name"),
    (
        "by",
        "bytea",
        "case g % 4 when 0 then ''::bytea when 1 then '\\x00'::bytea else decode(md5(random()::text) || md5(g::text), 'hex') end",
    ),
    (
        "d",
        "date",
        "case g % 6 when 0 then 'infinity'::date when 1 then '-infinity' when 2 then '0044-03-15 BC' when 3 then '4713-01-01 BC' else date '2000-01-01' + ((random() - 0.5) * 1400000)::int end",
    ),
    (
        "tm",
        "time",
        "case g % 5 when 0 then '24:00:00'::time when 1 then '00:00:00' else time '00:00' + make_interval(secs => random() * 86399.999999) end",
    ),
    (
        "ttz",
        "timetz",
        "((case g % 4 when 0 then '24:00:00' else (time '00:00' + make_interval(secs => random() * 86399))::text end) || case g % 5 when 0 then '+00' when 1 then '-12:00' when 2 then '+14:00' when 3 then '+05:45' else '-03:30' end)::timetz",
    ),
    (
        "ts",
        "timestamp",
        "case g % 6 when 0 then 'infinity'::timestamp when 1 then '-infinity' when 2 then '0044-03-15 12:00:00.000001 BC' else timestamp '2000-01-01' + make_interval(secs => (random() - 0.5) * 1e11) end",
    ),
    (
        "tstz",
        "timestamptz",
        "case g % 6 when 0 then 'infinity'::timestamptz when 1 then '-infinity' when 2 then '0044-03-15 12:00:00.000001+03 BC' else timestamptz '2000-01-01 00:00+00' + make_interval(secs => (random() - 0.5) * 1e11) end",
    ),
    (
        "iv",
        "interval",
        "case g % 9 when 0 then '-1 days -00:00:03'::interval when 1 then '1 year 2 mons 3 days 04:05:06.789' when 2 then '-178000000 years' else make_interval(years => g % 7 - 3, months => g % 13 - 6, days => (random() * 200 - 100)::int, secs => (random() - 0.5) * 1e6) end",
    ),
    (
        "u",
        "uuid",
        "case g % 5 when 0 then '00000000-0000-0000-0000-000000000000'::uuid else gen_random_uuid() end",
    ),
    (
        "j",
        "json",
        "case g % 5 when 0 then '{\"b\": 1,  \"a\" : [ ] }'::json else json_build_object('n', g, 's', md5(random()::text), 'f', random(), 'a', json_build_array(1, 'x', null)) end",
    ),
    (
        "jb",
        "jsonb",
        "case g % 5 when 0 then '{\"b\": 1,  \"a\" : [ ] }'::jsonb else jsonb_build_object('n', g, 's', E'q\"\\\\' || md5(random()::text), 'f', random()) end",
    ),
    (
        "e",
        "mood",
        "(array['sad', 'happy', 'in between'])[1 + g % 3]::mood",
    ),
    ("dom", "posint", "1 + g"),
    (
        "ai",
        "int4[]",
        "case g % 4 when 0 then '{}'::int4[] when 1 then '{1,NULL,3}' else array[(random() * 1000)::int4, -g] end",
    ),
    (
        "at",
        "text[]",
        "case g % 3 when 0 then '{}'::text[] else array['a', E'b\"c\\\\d', 'e f', null, '', md5(g::text), 'NULL'] end",
    ),
    (
        "af",
        "float8[]",
        "array['NaN'::float8, 'Infinity', '-0', random()]",
    ),
    (
        "an",
        "numeric[]",
        "array[round(random()::numeric, 4), 'NaN', null, '-Infinity']",
    ),
    (
        "ad",
        "date[]",
        "array['infinity'::date, date '2000-01-01' + g, '0001-01-01 BC']",
    ),
    (
        "atz",
        "timestamptz[]",
        "array[timestamptz '2020-02-29 23:59:59.999999+00' - make_interval(secs => g * 3600.5)]",
    ),
    ("abo", "bool[]", "array[true, null, false]"),
    (
        "aby",
        "bytea[]",
        "array['\\x00ff'::bytea, decode(md5(g::text), 'hex'), '']",
    ),
    ("au", "uuid[]", "array[gen_random_uuid(), null]"),
    (
        "aj",
        "jsonb[]",
        "array[jsonb_build_object('x', g), '[]'::jsonb]",
    ),
    (
        "aiv",
        "interval[]",
        "array[make_interval(days => g), '-1 mons']",
    ),
    ("a2", "int4[][]", "array[[g, 2], [3, null]]"),
];

/// Columns of types siphon keeps as their text.
const AS_TEXT: &[(&str, &str, &str)] = &[
    (
        "o",
        "oid",
        "case g % 4 when 0 then 4294967295 else g * 7919 end::oid",
    ),
    (
        "ip",
        "inet",
        "case g % 6 when 0 then ('192.168.' || g % 256 || '.' || (g * 7) % 256)::inet when 1 then ('10.0.' || g % 256 || '.0/24')::inet when 2 then '::1'::inet when 3 then ('2001:db8::' || to_hex(g))::inet when 4 then ('2001:db8::' || to_hex(g) || '/64')::inet else '0.0.0.0/0' end",
    ),
    (
        "cd",
        "cidr",
        "case g % 3 when 0 then ('10.' || g % 256 || '.0.0/16')::cidr when 1 then '2001:db8::/32' else ('192.168.' || g % 256 || '.0/24')::cidr end",
    ),
    (
        "mac",
        "macaddr",
        "(lpad(to_hex(g % 256), 2, '0') || ':00:2b:01:02:' || lpad(to_hex((g * 3) % 256), 2, '0'))::macaddr",
    ),
    (
        "mac8",
        "macaddr8",
        "('08:00:2b:01:02:03:04:' || lpad(to_hex(g % 256), 2, '0'))::macaddr8",
    ),
    (
        "m",
        "money",
        "((random() - 0.5) * 1e6)::numeric(12,2)::money",
    ),
    ("bt", "bit(8)", "(g % 256)::bit(8)"),
    (
        "vb",
        "varbit",
        "substring((g * 12345)::bit(32)::varbit from 1 for g % 33)",
    ),
    (
        "aip",
        "inet[]",
        "array[('192.168.0.' || g % 256)::inet, '::1', null]",
    ),
    (
        "cp",
        "pair",
        "case g % 4 when 0 then row(null, E'a\"b,c')::pair else row(g, md5(g::text))::pair end",
    ),
    ("pt", "point", "point(random(), g)"),
];

/// One source reading one table into its own log.
struct Capture {
    log: FileLog,
    cancel: CancellationToken,
    run: tokio::task::JoinHandle<siphon_core::Result<()>>,
    ctx: SourceContext,
    _dir: tempfile::TempDir,
}

impl Capture {
    fn start(db: &PgDatabase, table: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path().join("log"), Default::default()).unwrap();
        let cancel = CancellationToken::new();
        let ctx = SourceContext {
            pipeline: table.into(),
            log: Arc::new(log.clone()),
            offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
            cancel: cancel.clone(),
            metrics: Default::default(),
        };
        let config = PostgresConfig {
            url: ConnectionUrl::new(db.url.clone()),
            password: None,
            password_file: None,
            tables: vec![format!("public.{table}").parse().unwrap()],
            slot: Some(format!("{}_{table}", db.name)),
            publication: Some(format!("{}_{table}", db.name)),
            snapshot: SnapshotMode::Initial,
            snapshot_parallelism: 2,
            heartbeat_interval: None,
            status_interval: siphon_core::units::HumanDuration(Duration::from_millis(200)),
            table_poll_interval: siphon_core::units::HumanDuration(std::time::Duration::from_secs(
                10,
            )),
            drop_slot_on_stop: true,
            tls: None,
            tls_ca_file: None,
        };
        let mut source = PostgresSource::new(table, config);
        let run_ctx = ctx.clone();
        let run = tokio::spawn(async move { source.run(&run_ctx).await });
        Capture {
            log,
            cancel,
            run,
            ctx,
            _dir: dir,
        }
    }

    fn events(&self) -> Vec<Event> {
        let mut reader = self.log.file_reader(0).unwrap();
        let mut out = Vec::new();
        loop {
            let batch = reader.read_available(10_000).unwrap();
            if batch.is_empty() {
                return out;
            }
            out.extend(batch.iter().map(|r| {
                Event::decode(
                    &r.value,
                    self.log.schemas(),
                    &siphon_source_postgres::PostgresKind,
                )
                .unwrap()
            }));
        }
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[Event]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut rx = self.log.subscribe();
        while !done(&self.events()) {
            assert!(!self.run.is_finished(), "the source stopped before {what}");
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
        }
    }

    /// Stops the source; its rows by id, and whether it streamed binary tuples.
    async fn finish(self) -> (BTreeMap<i64, Row>, bool) {
        self.cancel.cancel();
        let binary = self.ctx.metrics.values()["binary_tuples"] == 1.0;
        let events = self.events();
        self.run.await.unwrap().unwrap();
        let rows = events
            .into_iter()
            .filter(|e| matches!(e.op, Op::Read | Op::Create))
            .map(|e| {
                let row = e.after.unwrap();
                let Some(Value::Int(id)) = row.get("id") else {
                    panic!("no id in {row:?}")
                };
                (*id, row)
            })
            .collect();
        (rows, binary)
    }
}

/// Equality that takes NaN for NaN, in arrays too.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float32(x), Value::Float32(y)) => x.to_bits() == y.to_bits(),
        (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        _ => a == b,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_text_stream_and_binary_stream_agree_with_the_output_function() {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    let defs = |columns: &[(&str, &str, &str)]| -> String {
        columns
            .iter()
            .map(|(c, ty, _)| format!(", {c} {ty}"))
            .collect()
    };
    let names = |columns: &[(&str, &str, &str)]| -> String {
        columns.iter().map(|(c, ..)| format!(", {c}")).collect()
    };
    let all: Vec<(&str, &str, &str)> = DECODED.iter().chain(AS_TEXT).copied().collect();
    let values: String = all.iter().map(|(_, _, v)| format!(", {v}")).collect();
    // `with_text` has columns siphon keeps as text, so its stream uses text tuples; `decoded`
    // has the same values of the other columns only, so its stream uses binary tuples.
    client
        .batch_execute(&format!(
            "{TYPES}
             create table with_text (id bigint primary key{all_defs});
             create table decoded (id bigint primary key{decoded_defs});
             select setseed(0.42);
             insert into with_text select g{values} from generate_series(1, {ROWS}) g;
             insert into decoded select id{decoded_names} from with_text;",
            all_defs = defs(&all),
            decoded_defs = defs(DECODED),
            decoded_names = names(DECODED),
        ))
        .await
        .unwrap();
    let text = Capture::start(&db, "with_text");
    let binary = Capture::start(&db, "decoded");
    let snapshot_done = |e: &[Event]| e.iter().any(|e| e.source.snapshot == SnapshotMarker::Last);
    text.wait_for("the snapshot of with_text", snapshot_done)
        .await;
    binary
        .wait_for("the snapshot of decoded", snapshot_done)
        .await;
    // The same values again, through the stream.
    client
        .batch_execute(&format!(
            "insert into with_text select id + {STREAMED}{all_names} from with_text;
             insert into decoded select id + {STREAMED}{decoded_names} from decoded;",
            all_names = names(&all),
            decoded_names = names(DECODED),
        ))
        .await
        .unwrap();
    let streamed = |e: &[Event]| e.len() as i64 >= 2 * ROWS;
    text.wait_for("the stream of with_text", streamed).await;
    binary.wait_for("the stream of decoded", streamed).await;
    let (text_rows, text_binary) = text.finish().await;
    let (binary_rows, binary_binary) = binary.finish().await;
    assert!(!text_binary, "with_text should stream text tuples");
    assert!(binary_binary, "decoded should stream binary tuples");

    // What the output functions print, for the columns kept as text.
    let printed: BTreeMap<i64, Vec<Option<String>>> = client
        .simple_query(&format!("select id{} from with_text", names(AS_TEXT)))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .map(|r| {
            let id: i64 = r.get(0).unwrap().parse().unwrap();
            let texts = (1..=AS_TEXT.len())
                .map(|i| r.get(i).map(str::to_owned))
                .collect();
            (id, texts)
        })
        .collect();

    let mut differences = Vec::new();
    let mut differ = |what: String| {
        if differences.len() < 30 {
            differences.push(what);
        }
    };
    for id in 1..=ROWS {
        let snapshot = &text_rows[&id];
        let paths = [
            ("the text stream", &text_rows[&(id + STREAMED)]),
            ("the binary snapshot of `decoded`", &binary_rows[&id]),
            ("the binary stream", &binary_rows[&(id + STREAMED)]),
        ];
        for (column, ..) in &all {
            let want = snapshot.get(column).unwrap();
            for (path, row) in &paths {
                match row.get(column) {
                    Some(got) if !same(got, want) => differ(format!(
                        "row {id}, {column}: the snapshot has {want:?}, {path} {got:?}"
                    )),
                    None if row.len() == text_rows[&id].len() => {
                        differ(format!("row {id}: {path} lacks {column}"))
                    }
                    _ => {}
                }
            }
        }
        for (i, (column, ty, _)) in AS_TEXT.iter().enumerate() {
            if ty.ends_with("[]") {
                continue; // an array of such values is a JSON array of their texts
            }
            let want = match &printed[&id][i] {
                None => Value::Null,
                Some(text) => Value::Other {
                    type_name: String::new(),
                    text: text.clone(),
                },
            };
            for (path, row) in [("the snapshot", snapshot), ("the text stream", paths[0].1)] {
                let got = row.get(column).unwrap();
                let matches = match (got, &want) {
                    (Value::Other { text, .. }, Value::Other { text: want, .. }) => text == want,
                    (got, want) => got == want,
                };
                if !matches {
                    differ(format!(
                        "row {id}, {column}: the output function prints {want:?}, {path} has {got:?}"
                    ));
                }
            }
        }
    }
    assert!(
        differences.is_empty(),
        "the paths disagree:\n{}",
        differences.join("\n")
    );
}
