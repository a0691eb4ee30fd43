//! The DuckDB sink on a database file in a temporary directory: the compliance suite, history,
//! whole source transactions, a rejected record, reset, and every value class.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use siphon_core::sink::{Sink, SinkRecord};
use siphon_core::testing::{
    SinkHarness, StoreState, TABLE, apply, apply_open, compliance_table, cursor, event, log_id,
    record, row, run_compliance_suite,
};
use siphon_core::{Error, Op, Row, Value};
use siphon_sink_duckdb::{DuckdbSink, DuckdbSinkConfig};

struct Harness {
    _dir: tempfile::TempDir,
    sink: DuckdbSink,
}

fn harness_with(config: impl FnOnce(DuckdbSinkConfig) -> DuckdbSinkConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let sink = DuckdbSink::new(
        config(DuckdbSinkConfig::new(dir.path().join("w.duckdb"))),
        "p",
        "s",
    )
    .unwrap();
    Harness { _dir: dir, sink }
}

/// The rows of a table as JSON objects, by `id`, through a connection to the same database.
/// The rows of a table of the sink's file; none before the sink made the table.
fn rows(sink: &DuckdbSink, table: &str) -> BTreeMap<i64, Json> {
    let conn = sink.connection().expect("the sink is open");
    let exists: i64 = conn
        .query_row(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
            [table],
            |r| r.get(0),
        )
        .unwrap();
    if exists == 0 {
        return BTreeMap::new();
    }
    let mut stmt = conn
        .prepare(&format!("SELECT to_json(t)::VARCHAR FROM \"{table}\" t"))
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|doc| {
            let doc: Json = serde_json::from_str(&doc.unwrap()).unwrap();
            (doc["id"].as_i64().unwrap(), doc)
        })
        .collect()
}

#[async_trait::async_trait]
impl SinkHarness for Harness {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        let text = |doc: &Json, c: &str| {
            doc[c]
                .as_str()
                .map_or(Value::Null, |s| Value::Text(s.into()))
        };
        StoreState::Rows(
            rows(&self.sink, &format!("public_{table}"))
                .into_iter()
                .map(|(id, doc)| {
                    let row = Row(vec![
                        ("id".into(), Value::Int(id)),
                        ("name".into(), text(&doc, "name")),
                        ("note".into(), text(&doc, "note")),
                    ]);
                    (id, row)
                })
                .collect(),
        )
    }
}

#[tokio::test]
async fn mirror_passes_the_compliance_suite() {
    run_compliance_suite(async || harness_with(|c| c)).await;
}

fn create(offset: u64, id: i64, name: &str) -> SinkRecord {
    record(
        offset,
        event(
            TABLE,
            Op::Create,
            id,
            None,
            Some(row(id, name, Value::Null)),
        ),
    )
}

#[tokio::test]
async fn a_source_transaction_over_several_batches_commits_once_with_the_cursor() {
    let mut h = harness_with(|c| c);
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let first = create(0, 1, "a");
    apply_open(&mut h.sink, &[first]).await.unwrap();
    assert!(
        rows(&h.sink, "public_compliance").is_empty(),
        "a reader saw part of a source transaction"
    );
    apply(&mut h.sink, &[create(1, 2, "b")]).await.unwrap();
    assert_eq!(rows(&h.sink, "public_compliance").len(), 2);
    // Reopening (what the runtime does after an error) finds the cursor past both.
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        Some(cursor(2))
    );
    let open = create(2, 3, "c");
    apply_open(&mut h.sink, &[open]).await.unwrap();
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        Some(cursor(2)),
        "the unfinished transaction was rolled back"
    );
    assert_eq!(rows(&h.sink, "public_compliance").len(), 2);
}

#[tokio::test]
async fn history_holds_every_event_once() {
    let mut h = harness_with(|c| DuckdbSinkConfig {
        mode: siphon_sink_duckdb::TableMode::History,
        ..c
    });
    assert!(h.sink.keeps_history());
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let batch = vec![
        create(0, 1, "a"),
        record(
            1,
            event(
                TABLE,
                Op::Update,
                1,
                None,
                Some(row(1, "b", Value::Text("n".into()))),
            ),
        ),
        record(
            2,
            event(TABLE, Op::Delete, 1, Some(row(1, "b", Value::Null)), None),
        ),
        record(3, event(TABLE, Op::Truncate, 0, None, None)),
    ];
    apply(&mut h.sink, &batch).await.unwrap();
    apply(&mut h.sink, &batch).await.unwrap();
    let conn = h.sink.connection().unwrap();
    let mut stmt = conn
        .prepare("SELECT _siphon_offset, _siphon_op, id, name FROM public_compliance ORDER BY 1")
        .unwrap();
    let got: Vec<(i64, String, Option<i64>, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        got,
        [
            (0, "c".into(), Some(1), Some("a".into())),
            (1, "u".into(), Some(1), Some("b".into())),
            (2, "d".into(), Some(1), Some("b".into())),
            (3, "t".into(), None, None),
        ]
    );
}

#[tokio::test]
async fn a_value_the_column_cannot_take_is_rejected_by_offset() {
    let mut h = harness_with(|c| c);
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let numbered = |offset: u64, id: i64, note: Value| {
        record(
            offset,
            event(TABLE, Op::Create, id, None, Some(row(id, "x", note))),
        )
    };
    apply(&mut h.sink, &[numbered(0, 1, Value::Int(5))])
        .await
        .unwrap();
    let batch = [
        numbered(1, 2, Value::Int(6)),
        numbered(2, 3, Value::Text("abc".into())),
        numbered(3, 4, Value::Int(7)),
    ];
    match apply(&mut h.sink, &batch).await {
        Err(Error::Rejected { offset, .. }) => assert_eq!(offset, 2),
        other => panic!("expected offset 2 to be rejected, got {other:?}"),
    }
    apply(&mut h.sink, &[batch[0].clone(), batch[2].clone()])
        .await
        .unwrap();
    let ids: Vec<i64> = rows(&h.sink, "public_compliance").into_keys().collect();
    assert_eq!(ids, [1, 2, 4]);
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
    let conn = h.sink.connection().unwrap();
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
    assert!(rows(&h.sink, "public_compliance").is_empty());
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        None
    );
}
