//! The SQL sinks' suite (feature `testing`): what the engine promises beyond the sink
//! compliance suite, run against each dialect's real database by its crate's tests.

use std::collections::BTreeMap;

use async_trait::async_trait;
use siphon_core::sink::{Sink, SinkRecord};
use siphon_core::testing::{
    SinkHarness, StoreState, TABLE, apply, apply_open, compliance_table, cursor, event, log_id,
    record, row,
};
use siphon_core::{Error, Op, Row, Value};

use crate::dialect::Dialect;
use crate::sink::SqlSink;
use crate::table::TableMode;

/// A history row of the compliance table: offset, op, id, name, note.
pub type HistoryRow = (i64, String, Option<i64>, Option<String>, Option<String>);

/// How a dialect's tests read its database back.
#[async_trait]
pub trait SqlStore<D: Dialect>: Send {
    /// The rows of the mirror of `public.<table>` as JSON documents; none before the sink
    /// made the table.
    async fn documents(&mut self, sink: &SqlSink<D>, table: &str) -> Vec<serde_json::Value>;

    /// The compliance table's history rows, by offset.
    async fn history(&mut self, sink: &SqlSink<D>) -> Vec<HistoryRow>;
}

/// A SQL sink and its database: the harness of the compliance suite and of this one.
#[derive(Debug)]
pub struct SqlHarness<D, S> {
    /// The sink under test.
    pub sink: SqlSink<D>,
    /// Its database, read back.
    pub store: S,
}

#[async_trait]
impl<D: Dialect, S: SqlStore<D>> SinkHarness for SqlHarness<D, S> {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    /// A column appears in the target with its first non-null value, so a missing column
    /// reads as NULL.
    async fn state_of(&mut self, table: &str) -> StoreState {
        let text = |doc: &serde_json::Value, c: &str| {
            doc[c]
                .as_str()
                .map_or(Value::Null, |s| Value::Text(s.into()))
        };
        let documents = self.store.documents(&self.sink, table).await;
        StoreState::Rows(
            documents
                .iter()
                .map(|doc| {
                    let id = doc["id"].as_i64().expect("an id");
                    let row = Row(vec![
                        ("id".into(), Value::Int(id)),
                        ("name".into(), text(doc, "name")),
                        ("note".into(), text(doc, "note")),
                    ]);
                    (id, row)
                })
                .collect::<BTreeMap<_, _>>(),
        )
    }
}

/// Runs every check; `make` gives a sink of the mode asked on an empty store.
pub async fn run_sql_suite<D: Dialect, S: SqlStore<D>>(
    mut make: impl AsyncFnMut(TableMode) -> SqlHarness<D, S>,
) {
    source_transactions_commit_whole_with_the_cursor(make(TableMode::Mirror).await).await;
    history_holds_every_event_once(make(TableMode::History).await).await;
    a_refused_value_is_rejected_by_offset(make(TableMode::Mirror).await).await;
    reset_drops_the_tables_and_the_cursor(make(TableMode::Mirror).await).await;
    a_table_without_a_key_is_refused_by_a_mirror(make(TableMode::Mirror).await).await;
}

fn create(offset: u64, id: i64, name: &str, note: Value) -> SinkRecord {
    record(
        offset,
        event(TABLE, Op::Create, id, None, Some(row(id, name, note))),
    )
}

async fn ids(h: &mut impl SinkHarness) -> Vec<i64> {
    h.state_of(TABLE).await.ids().unwrap_or_default()
}

/// A source transaction over several batches is seen whole or not at all, committed with
/// the cursor; one left open is rolled back when the sink opens again.
async fn source_transactions_commit_whole_with_the_cursor(mut h: impl SinkHarness) {
    let tables = [compliance_table()];
    h.sink().open(&tables, &log_id()).await.unwrap();
    apply_open(h.sink(), &[create(0, 1, "a", Value::Null)])
        .await
        .unwrap();
    assert!(
        ids(&mut h).await.is_empty(),
        "a reader saw part of a source transaction"
    );
    apply(h.sink(), &[create(1, 2, "b", Value::Null)])
        .await
        .unwrap();
    assert_eq!(ids(&mut h).await, [1, 2]);
    // What the runtime does after an error: open again; the cursor is past both.
    assert_eq!(
        h.sink().open(&tables, &log_id()).await.unwrap(),
        Some(cursor(2))
    );
    apply_open(h.sink(), &[create(2, 3, "c", Value::Null)])
        .await
        .unwrap();
    assert_eq!(
        h.sink().open(&tables, &log_id()).await.unwrap(),
        Some(cursor(2)),
        "the unfinished transaction was not rolled back"
    );
    assert_eq!(ids(&mut h).await, [1, 2]);
}

/// A history table holds every event once, replays adding nothing.
async fn history_holds_every_event_once<D: Dialect, S: SqlStore<D>>(mut h: SqlHarness<D, S>) {
    assert!(h.sink().keeps_history());
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .unwrap();
    let update = row(1, "b", Value::Text("n".into()));
    let batch = vec![
        create(0, 1, "a", Value::Null),
        record(1, event(TABLE, Op::Update, 1, None, Some(update))),
        record(
            2,
            event(TABLE, Op::Delete, 1, Some(row(1, "b", Value::Null)), None),
        ),
        record(3, event(TABLE, Op::Truncate, 0, None, None)),
    ];
    apply(h.sink(), &batch).await.unwrap();
    apply(h.sink(), &batch).await.unwrap();
    apply(h.sink(), &batch[1..2]).await.unwrap();
    assert_eq!(
        h.store.history(&h.sink).await,
        [
            (0, "c".into(), Some(1), Some("a".into()), None),
            (1, "u".into(), Some(1), Some("b".into()), Some("n".into())),
            (2, "d".into(), Some(1), Some("b".into()), None),
            (3, "t".into(), None, None, None),
        ]
    );
}

/// A value its column cannot take is rejected by its offset and table; the rest of its
/// batch applies without it.
async fn a_refused_value_is_rejected_by_offset(mut h: impl SinkHarness) {
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .unwrap();
    // The first value makes `note` an integer column; "abc" cannot go there.
    apply(h.sink(), &[create(0, 1, "x", Value::Int(5))])
        .await
        .unwrap();
    let batch = [
        create(1, 2, "x", Value::Int(6)),
        create(2, 3, "x", Value::Text("abc".into())),
        create(3, 4, "x", Value::Int(7)),
    ];
    match apply(h.sink(), &batch).await {
        Err(Error::Rejected { offset, table, .. }) => {
            assert_eq!(
                (offset, table.to_string().as_str()),
                (2, "public.compliance")
            );
        }
        other => panic!("expected offset 2 to be rejected, got {other:?}"),
    }
    apply(h.sink(), &[batch[0].clone(), batch[2].clone()])
        .await
        .unwrap();
    assert_eq!(ids(&mut h).await, [1, 2, 4]);
}

/// A reset drops the target tables and the cursor; writing starts over.
async fn reset_drops_the_tables_and_the_cursor(mut h: impl SinkHarness) {
    let tables = [compliance_table()];
    h.sink().open(&tables, &log_id()).await.unwrap();
    apply(h.sink(), &[create(0, 1, "a", Value::Null)])
        .await
        .unwrap();
    h.sink().reset(&tables).await.unwrap();
    assert_eq!(h.sink().open(&tables, &log_id()).await.unwrap(), None);
    assert!(ids(&mut h).await.is_empty());
    apply(h.sink(), &[create(0, 1, "a", Value::Null)])
        .await
        .unwrap();
    assert_eq!(ids(&mut h).await, [1]);
}

/// A mirror refuses, at open, a table it could not address rows of.
async fn a_table_without_a_key_is_refused_by_a_mirror(mut h: impl SinkHarness) {
    let keyless = siphon_core::source::TableInfo {
        name: siphon_core::TableName::new("public", "log"),
        key_columns: vec![],
    };
    let e = h.sink().open(&[keyless], &log_id()).await.unwrap_err();
    assert!(!e.is_transient());
    assert!(e.to_string().contains("public.log"), "{e}");
}
