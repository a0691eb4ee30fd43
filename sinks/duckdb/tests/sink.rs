//! The DuckDB sink on a database file in a temporary directory: the compliance suite, the SQL
//! sinks' suite, and every value class.

use serde_json::Value as Json;
use siphon_core::schema::ColumnKind;
use siphon_core::sink::Sink;
use siphon_core::testing::{
    TABLE, apply, compliance_schema, compliance_table, event, log_id, record, row,
    run_compliance_suite,
};
use siphon_core::{Error, Op, Value};
use siphon_sink_duckdb::{Duckdb, DuckdbSink, DuckdbSinkConfig};
use siphon_sink_sql::testing::{HistoryRow, SqlHarness, SqlStore, run_sql_suite};

/// The database file's directory, removed with the harness.
struct Store {
    _dir: tempfile::TempDir,
}

type Harness = SqlHarness<Duckdb, Store>;

fn harness_with(config: impl FnOnce(DuckdbSinkConfig) -> DuckdbSinkConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let sink = DuckdbSink::new(
        config(DuckdbSinkConfig::new(dir.path().join("w.duckdb"))),
        "p",
        "s",
    )
    .unwrap();
    SqlHarness {
        sink,
        store: Store { _dir: dir },
    }
}

/// The rows of a table of the sink's file as JSON; none before the sink made the table.
fn documents(sink: &DuckdbSink, table: &str) -> Vec<Json> {
    let conn = sink.dialect().connection().expect("the sink is open");
    let exists: i64 = conn
        .query_row(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
            [table],
            |r| r.get(0),
        )
        .unwrap();
    if exists == 0 {
        return Vec::new();
    }
    let mut stmt = conn
        .prepare(&format!("SELECT to_json(t)::VARCHAR FROM \"{table}\" t"))
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|doc| serde_json::from_str(&doc.unwrap()).unwrap())
        .collect()
}

#[async_trait::async_trait]
impl SqlStore<Duckdb> for Store {
    async fn documents(&mut self, sink: &DuckdbSink, table: &str) -> Vec<Json> {
        documents(sink, &format!("public_{table}"))
    }

    async fn history(&mut self, sink: &DuckdbSink) -> Vec<HistoryRow> {
        let conn = sink.dialect().connection().unwrap();
        let mut stmt = conn
            .prepare("SELECT _siphon_offset, _siphon_op, id, name, note FROM public_compliance ORDER BY 1")
            .unwrap();
        stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }
}

#[tokio::test]
async fn mirror_passes_the_compliance_suite() {
    run_compliance_suite(async || harness_with(|c| c)).await;
}

#[tokio::test]
async fn passes_the_sql_suite() {
    run_sql_suite(async |mode| harness_with(|c| DuckdbSinkConfig { mode, ..c })).await;
}

#[tokio::test]
async fn every_value_class_lands_in_a_typed_column_and_reset_drops_it() {
    let mut h = harness_with(|c| c);
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let values = vec![
        ("b", Value::Bool(true)),
        ("f", Value::Float64(1.5)),
        ("r", Value::Float32(0.25)),
        ("d", Value::Decimal("12345678901234567890.123456789".into())),
        ("bin", Value::Bytes(vec![0, 255])),
        ("j", Value::Json(r#"{"a": 1}"#.into())),
        ("u", Value::Uuid([0x11; 16])),
        ("day", Value::Date(19_000)),
        ("tm", Value::Time(3_723_000_001)),
        ("ts", Value::Timestamp(1_700_000_000_123_456)),
        ("tz", Value::TimestampTz(1_700_000_000_000_000)),
        (
            "iv",
            Value::Interval {
                months: 14,
                days: 3,
                micros: 4_000_005,
            },
        ),
        ("arr", Value::Array(vec![Value::Int(1), Value::Null])),
        ("e", Value::Enum("red".into())),
    ];
    let mut after = row(1, "all", Value::Null);
    after
        .0
        .extend(values.into_iter().map(|(c, v)| (c.into(), v)));
    apply(
        &mut h.sink,
        &[record(0, event(TABLE, Op::Create, 1, None, Some(after)))],
    )
    .await
    .unwrap();
    let conn = h.sink.dialect().connection().unwrap();
    let got: String = conn
        .query_row(
            "SELECT concat_ws('|', b, f, r, d, hex(bin), j, u, day, tm, ts, tz AT TIME ZONE 'UTC', iv, arr, e) FROM public_compliance",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        got,
        "true|1.5|0.25|12345678901234567890.123456789|00FF|{\"a\": 1}|11111111-1111-1111-1111-111111111111|2022-01-08|01:02:03.000001|2023-11-14 22:13:20.123456|2023-11-14 22:13:20|1 year 2 months 3 days 00:00:04.000005|[1,null]|red"
    );
    h.sink.reset(&[compliance_table()]).await.unwrap();
    assert!(documents(&h.sink, "public_compliance").is_empty());
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        None
    );
}

/// A table change DuckDB refuses (the key column's type) rejects the record that asked for
/// it, by offset, and the sink goes on: the rejection reaches the dead-letter path, not a
/// stop.
#[tokio::test]
async fn a_table_change_duckdb_refuses_rejects_its_record() {
    let mut h = harness_with(|c| c);
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let with_schema = |offset: u64, id: i64, schema| {
        let mut e = event(TABLE, Op::Create, id, None, Some(row(id, "a", Value::Null)));
        e.schema = Some(schema);
        record(offset, e)
    };
    apply(
        &mut h.sink,
        &[with_schema(0, 1, compliance_schema(1, ColumnKind::Int64))],
    )
    .await
    .unwrap();
    let retyped = with_schema(1, 2, compliance_schema(2, ColumnKind::Uuid));
    match apply(&mut h.sink, &[retyped]).await {
        Err(Error::Rejected { offset, .. }) => assert_eq!(offset, 1),
        other => panic!("expected offset 1 to be rejected, got {other:?}"),
    }
    apply(
        &mut h.sink,
        &[with_schema(2, 3, compliance_schema(1, ColumnKind::Int64))],
    )
    .await
    .unwrap();
    let ids: Vec<i64> = documents(&h.sink, "public_compliance")
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 3]);
}
