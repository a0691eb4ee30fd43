//! Every built-in type, with edge values, decoded exactly — through the snapshot (COPY) and
//! through the stream (pgoutput), which must agree.

use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::event::SnapshotMarker;
use siphon_core::log::{ChangeLog, LogReader};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{Source, SourceContext};
use siphon_core::{Event, Value};
use siphon_log_file::FileLog;
use siphon_source_postgres::{PostgresConfig, PostgresSource, SnapshotMode, TlsMode};
use siphon_test_support::postgres;
use tokio_util::sync::CancellationToken;

const SCHEMA: &str = r#"
create type mood as enum ('sad', 'happy');
create domain posint as int4 check (value > 0);
create type pair as (a int, b text);
create table every_type (
  id bigint primary key,
  i2 int2, i4 int4, i8 int8,
  n_big numeric, n_nan numeric, n_inf numeric, n_scaled numeric(12,4),
  f4 float4, f4_nan float4, f8 float8, f8_inf float8,
  b bool, t text, vc varchar(10), c char(5), by bytea,
  d date, d_inf date, d_bc date, tm time, tm_24 time, ttz timetz,
  ts timestamp, ts_inf timestamp, tstz timestamptz, tstz_ninf timestamptz, iv interval, iv_neg interval,
  u uuid, j json, jb jsonb, ip inet, cidr_ cidr, mac macaddr, m money, bits bit(4), vbits varbit,
  ints int4[], texts text[][], dates date[], empty_arr int8[],
  e mood, dom posint, comp pair, nul text
);
"#;

const VALUES: &str = r#"
  -32768, 2147483647, 9223372036854775807,
  '123456789012345678901234567890.123456789012345678901234567890', 'NaN', '-Infinity', 12.3400,
  0.1, 'NaN', 1e-300, 'Infinity',
  true, E'multi\nline\ttab "quoted" \\ backslash', 'hé', 'ab', '\x00ff10'::bytea,
  '2024-02-29', 'infinity', '0044-03-15 BC', '01:02:03.000004', '24:00:00', '12:00:00+05:30',
  '2000-01-01 00:00:00.000001', 'infinity', '2023-11-14 22:13:20.123456+00', '-infinity',
  '1 year 2 mons 3 days 04:05:06.789', '-1 days -00:00:03',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50]}', '{"b": [1, 2.50], "a": null}',
  '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, B'1010', B'101',
  '{1,NULL,3}', '{{a,"b c"},{"d\"e",NULL}}', '{2024-01-01,infinity}', '{}',
  'happy', 7, '(1,x)', NULL
"#;

fn expected(id: i64) -> Vec<(&'static str, Value)> {
    let text = |s: &str| Value::Text(s.into());
    let other = |t: &str, s: &str| Value::Other {
        type_name: t.into(),
        text: s.into(),
    };
    vec![
        ("id", Value::Int(id)),
        ("i2", Value::Int(-32768)),
        ("i4", Value::Int(2147483647)),
        ("i8", Value::Int(i64::MAX)),
        (
            "n_big",
            Value::Decimal("123456789012345678901234567890.123456789012345678901234567890".into()),
        ),
        ("n_nan", Value::Decimal("NaN".into())),
        ("n_inf", Value::Decimal("-Infinity".into())),
        ("n_scaled", Value::Decimal("12.3400".into())),
        ("f4", Value::Float32(0.1)),
        ("f4_nan", Value::Float32(f32::NAN)),
        ("f8", Value::Float64(1e-300)),
        ("f8_inf", Value::Float64(f64::INFINITY)),
        ("b", Value::Bool(true)),
        ("t", text("multi\nline\ttab \"quoted\" \\ backslash")),
        ("vc", text("hé")),
        ("c", text("ab   ")),
        ("by", Value::Bytes(vec![0, 255, 16])),
        ("d", Value::Date(19782)),
        ("d_inf", Value::Date(i32::MAX)),
        ("d_bc", Value::Date(-735_160)), // ISO year -43
        ("tm", Value::Time(3_723_000_004)),
        ("tm_24", Value::Time(86_400_000_000)),
        (
            "ttz",
            Value::TimeTz {
                micros: 43_200_000_000,
                offset_seconds: 19_800,
            },
        ),
        ("ts", Value::Timestamp(946_684_800_000_001)),
        ("ts_inf", Value::Timestamp(i64::MAX)),
        ("tstz", Value::TimestampTz(1_700_000_000_123_456)),
        ("tstz_ninf", Value::TimestampTz(i64::MIN)),
        (
            "iv",
            Value::Interval {
                months: 14,
                days: 3,
                micros: 14_706_789_000,
            },
        ),
        (
            "iv_neg",
            Value::Interval {
                months: 0,
                days: -1,
                micros: -3_000_000,
            },
        ),
        (
            "u",
            Value::Uuid([
                0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
                0x0a, 0x11,
            ]),
        ),
        ("j", Value::Json(r#"{"a": [1, 2.50]}"#.into())),
        ("jb", Value::Json(r#"{"a": null, "b": [1, 2.50]}"#.into())),
        ("ip", other("inet", "192.168.0.1/24")),
        ("cidr_", other("cidr", "10.0.0.0/8")),
        ("mac", other("macaddr", "08:00:2b:01:02:03")),
        ("m", other("money", "$12.34")),
        ("bits", other("bit", "1010")),
        ("vbits", other("varbit", "101")),
        (
            "ints",
            Value::Array(vec![Value::Int(1), Value::Null, Value::Int(3)]),
        ),
        (
            "texts",
            Value::Array(vec![
                Value::Array(vec![text("a"), text("b c")]),
                Value::Array(vec![text("d\"e"), Value::Null]),
            ]),
        ),
        (
            "dates",
            Value::Array(vec![Value::Date(19723), Value::Date(i32::MAX)]),
        ),
        ("empty_arr", Value::Array(vec![])),
        ("e", Value::Enum("happy".into())),
        ("dom", Value::Int(7)),
        ("comp", other("pair", "(1,x)")),
        ("nul", Value::Null),
    ]
}

/// Equality with NaN equal to NaN.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float32(x), Value::Float32(y)) => x.to_bits() == y.to_bits(),
        (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// The columns of types siphon keeps as server text.
const TEXT_ONLY: &[&str] = &["ip", "cidr_", "mac", "m", "bits", "vbits", "comp"];

#[tokio::test(flavor = "multi_thread")]
async fn every_type_decodes_exactly_in_snapshot_and_text_stream() {
    check_every_type(false).await;
}

/// Without the columns siphon keeps as text, the stream uses pgoutput's binary tuples.
#[tokio::test(flavor = "multi_thread")]
async fn every_type_decodes_exactly_in_snapshot_and_binary_stream() {
    check_every_type(true).await;
}

async fn check_every_type(binary: bool) {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(&format!(
            "{SCHEMA} insert into every_type values (1, {VALUES});"
        ))
        .await
        .unwrap();
    if binary {
        let drops: Vec<String> = TEXT_ONLY
            .iter()
            .map(|c| format!("drop column {c}"))
            .collect();
        client
            .batch_execute(&format!("alter table every_type {}", drops.join(", ")))
            .await
            .unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path().join("log"), Default::default()).unwrap();
    let cancel = CancellationToken::new();
    let ctx = SourceContext {
        pipeline: "types".into(),
        log: Arc::new(log.clone()),
        offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
        cancel: cancel.clone(),
        metrics: Default::default(),
    };
    let config = PostgresConfig {
        url: siphon_core::ConnectionUrl::new(db.url.clone()),
        password: None,
        password_file: None,
        tables: vec!["public.every_type".parse().unwrap()],
        slot: Some(format!("{}_slot", db.name)),
        publication: None,
        snapshot: SnapshotMode::Initial,
        snapshot_parallelism: 1,
        heartbeat_interval: None,
        status_interval: siphon_core::units::HumanDuration(Duration::from_millis(200)),
        table_poll_interval: siphon_core::units::HumanDuration(std::time::Duration::from_secs(10)),
        drop_slot_on_stop: true,
        tls: Some(TlsMode::Require),
        tls_ca_file: None,
    };
    let mut source = PostgresSource::new("types", config);
    let metrics = ctx.metrics.clone();
    let run = tokio::spawn(async move { source.run(&ctx).await });
    let events = |log: &FileLog| -> Vec<Event> {
        let mut reader = log.file_reader(0).unwrap();
        reader
            .read_available(100)
            .unwrap()
            .iter()
            .map(|r| {
                Event::decode(
                    &r.value,
                    log.schemas(),
                    &siphon_source_postgres::PostgresKind,
                )
                .unwrap()
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while events(&log).is_empty() {
        assert!(Instant::now() < deadline, "no snapshot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client
        .batch_execute(
            "create temp table second as select * from every_type; update second set id = 2;
             insert into every_type select * from second;",
        )
        .await
        .unwrap();
    // TLS (`require`) on the replication connection, and the queries beside it.
    let encrypted: i64 = client
        .query_one(
            "select count(*) from pg_stat_ssl s join pg_stat_activity a using (pid) \
             where a.application_name = 'siphon types' and a.datname = current_database() and s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(encrypted, 1, "the replication connection is not encrypted");
    while events(&log).len() < 2 {
        assert!(Instant::now() < deadline, "no streamed row");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();

    assert_eq!(
        metrics.values()["binary_tuples"],
        if binary { 1.0 } else { 0.0 }
    );
    let got = events(&log);
    assert_eq!(got[0].source.snapshot, SnapshotMarker::Last);
    assert_eq!(got[1].source.snapshot, SnapshotMarker::False);
    for (event, id) in got.iter().zip([1i64, 2]) {
        let after = event.after.as_ref().unwrap();
        let want: Vec<_> = expected(id)
            .into_iter()
            .filter(|(c, _)| !binary || !TEXT_ONLY.contains(c))
            .collect();
        assert_eq!(after.len(), want.len());
        for (column, value) in want {
            let have = after
                .get(column)
                .unwrap_or_else(|| panic!("no column {column}"));
            assert!(
                same(have, &value),
                "row {id} ({}), column {column}: got {have:?}, expected {value:?}",
                if id == 1 { "snapshot" } else { "stream" }
            );
        }
    }
    // Every value also survives the JSON encoding's round trip.
    for (c, v) in got[1].after.as_ref().unwrap().iter() {
        let back = siphon_format::json::decode_value(
            &siphon_format::json::value_json(v),
            &siphon_format::json::value_schema(v),
        )
        .unwrap();
        assert!(same(&back, v), "{c}: {v:?} came back as {back:?}");
    }
    // drop_slot_on_stop dropped the slot.
    let slots = client
        .query(
            "select 1 from pg_replication_slots where slot_name = $1",
            &[&format!("{}_slot", db.name)],
        )
        .await
        .unwrap();
    assert!(slots.is_empty());
}
