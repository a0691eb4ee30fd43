//! Test utilities for sinks and sources: event builders and the sink compliance suite that
//! every sink runs.

use std::collections::BTreeMap;

use crate::event::{Event, KeyChange, Op, Row, SnapshotMarker, SourceInfo, SourcePosition, Value};
use crate::log::LogId;
use crate::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use crate::source::TableInfo;

/// The table the compliance suite writes: `public.compliance (id bigint primary key, name
/// text, note text)`.
pub const TABLE: &str = "compliance";

/// Its description, as a source would give it.
pub fn compliance_table() -> TableInfo {
    TableInfo {
        name: format!("public.{TABLE}"),
        key_columns: vec!["id".into()],
    }
}

/// The log identity the compliance suite opens sinks with.
pub fn log_id() -> LogId {
    LogId::parse("5f0c7c3e-8d1a-4c55-9b7e-2a4d1e6f0b01").expect("a valid identity")
}

/// A cursor at `next` in the compliance suite's log, as a store returns it.
pub fn cursor(next: u64) -> StoreCursor {
    StoreCursor {
        next_offset: next,
        log: Some(log_id()),
    }
}

/// A row of the compliance table.
pub fn row(id: i64, name: &str, note: Value) -> Row {
    Row(vec![
        ("id".into(), Value::Int(id)),
        ("name".into(), Value::Text(name.into())),
        ("note".into(), note),
    ])
}

/// An event on `public.<table>` keyed by `id`.
pub fn event(table: &str, op: Op, id: i64, before: Option<Row>, after: Option<Row>) -> Event {
    Event {
        op,
        before,
        after,
        key: (op != Op::Truncate).then(|| Row(vec![("id".into(), Value::Int(id))])),
        source: SourceInfo {
            connector: "test".into(),
            name: "test".into(),
            db: "test".into(),
            schema: Some("public".into()),
            table: table.into(),
            position: SourcePosition::Sequence(id as u64),
            tx_id: Some(1),
            ts_ms: 1_700_000_000_000,
            snapshot: SnapshotMarker::False,
        },
        ts_ms: 1_700_000_000_001,
        transaction: None,
        key_change: None,
    }
}

/// A record at `offset`.
pub fn record(offset: u64, event: Event) -> SinkRecord {
    SinkRecord { offset, event }
}

/// Applies `records` as one batch that ends a source transaction.
pub async fn apply(sink: &mut (impl Sink + ?Sized), records: &[SinkRecord]) -> crate::Result<()> {
    sink.apply(&SinkBatch::whole(records.to_vec())).await
}

/// Applies `records` as one batch in the middle of a source transaction.
pub async fn apply_open(
    sink: &mut (impl Sink + ?Sized),
    records: &[SinkRecord],
) -> crate::Result<()> {
    let batch = SinkBatch {
        ends_transaction: false,
        ..SinkBatch::whole(records.to_vec())
    };
    sink.apply(&batch).await
}

/// What a sink's store holds, as the compliance suite compares it.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreState {
    /// A keyed store: the row stored under each id of the compliance table.
    Rows(BTreeMap<i64, Row>),
    /// An append-only store (stdout, files): every JSON document written, in order.
    Lines(Vec<serde_json::Value>),
}

/// A sink under test and a way to read what its store holds.
#[async_trait::async_trait]
pub trait SinkHarness: Send {
    /// The sink under test, opened on a clean store.
    fn sink(&mut self) -> &mut dyn Sink;

    /// What the store holds now for the compliance table.
    async fn state(&mut self) -> StoreState;
}

/// Runs every compliance check against a fresh harness from `make`; panics on the first
/// failure with what was expected.
pub async fn run_compliance_suite<H: SinkHarness>(mut make: impl AsyncFnMut() -> H) {
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    applying_twice_changes_nothing(&mut h).await;
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    older_offset_never_overwrites_newer(&mut h).await;
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    delete_without_before_image(&mut h).await;
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    unchanged_column_keeps_stored_value(&mut h).await;
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    a_row_whose_key_changed_keeps_its_unchanged_columns(&mut h).await;
    let mut h = make().await;
    h.sink()
        .open(&[compliance_table()], &log_id())
        .await
        .expect("open");
    a_partial_row_never_reaches_a_store_without_the_rest(&mut h).await;
}

/// The two events an update that changes the key from `from` to `to` becomes, leaving the
/// `note` column unchanged.
pub fn key_change(from: i64, to: i64, name: &str) -> (Event, Event) {
    let mut delete = event(
        TABLE,
        Op::Delete,
        from,
        Some(Row(vec![("id".into(), Value::Int(from))])),
        None,
    );
    delete.key_change = Some(KeyChange::To(Row(vec![("id".into(), Value::Int(to))])));
    let mut create = event(
        TABLE,
        Op::Create,
        to,
        None,
        Some(row(to, name, Value::Unchanged)),
    );
    create.key_change = Some(KeyChange::From(Row(vec![("id".into(), Value::Int(from))])));
    (delete, create)
}

async fn a_row_whose_key_changed_keeps_its_unchanged_columns(h: &mut impl SinkHarness) {
    let big = "toasted ".repeat(2000);
    // The old row in an earlier batch: the sink takes the column from the store.
    apply(
        h.sink(),
        &[record(
            0,
            event(
                TABLE,
                Op::Create,
                5,
                None,
                Some(row(5, "old", Value::Text(big.clone()))),
            ),
        )],
    )
    .await
    .expect("apply the old row");
    if let StoreState::Rows(rows) = h.state().await {
        assert!(rows.contains_key(&5), "row 5 was not stored: {rows:?}");
    }
    let (delete, create) = key_change(5, 6, "moved");
    apply(h.sink(), &[record(1, delete), record(2, create)])
        .await
        .expect("apply the key change");
    // The old row in the same batch.
    let (delete, create) = key_change(7, 8, "moved too");
    apply(
        h.sink(),
        &[
            record(
                3,
                event(
                    TABLE,
                    Op::Create,
                    7,
                    None,
                    Some(row(7, "old", Value::Text(big.clone()))),
                ),
            ),
            record(4, delete),
            record(5, create),
        ],
    )
    .await
    .expect("apply the row and its key change");
    if let StoreState::Rows(rows) = h.state().await {
        assert_eq!(
            rows.keys().copied().collect::<Vec<_>>(),
            [6, 8],
            "the old keys must be gone, the new ones there"
        );
        for (id, name) in [(6, "moved"), (8, "moved too")] {
            assert_eq!(rows[&id].get("name"), Some(&Value::Text(name.into())));
            assert_eq!(
                rows[&id].get("note"),
                Some(&Value::Text(big.clone())),
                "row {id} lost the column its key change left unchanged"
            );
        }
    }
}

async fn a_partial_row_never_reaches_a_store_without_the_rest(h: &mut impl SinkHarness) {
    // An update that leaves a column unchanged, of a row the store does not hold (expired
    // from a cache, say), and a key change whose old row the store does not hold.
    let (delete, create) = key_change(10, 11, "moved");
    apply(
        h.sink(),
        &[
            record(
                0,
                event(
                    TABLE,
                    Op::Update,
                    9,
                    None,
                    Some(row(9, "partial", Value::Unchanged)),
                ),
            ),
            record(1, delete),
            record(2, create),
        ],
    )
    .await
    .expect("apply");
    if let StoreState::Rows(rows) = h.state().await {
        assert!(
            rows.is_empty(),
            "a store holds part of a row as if it were the whole: {rows:?}"
        );
    }
}

async fn applying_twice_changes_nothing(h: &mut impl SinkHarness) {
    let batch = vec![
        record(
            0,
            event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
        ),
        record(
            1,
            event(
                TABLE,
                Op::Create,
                2,
                None,
                Some(row(2, "b", Value::Text("x".into()))),
            ),
        ),
        record(
            2,
            event(TABLE, Op::Update, 1, None, Some(row(1, "a2", Value::Null))),
        ),
        record(
            3,
            event(TABLE, Op::Delete, 2, Some(row(2, "b", Value::Null)), None),
        ),
    ];
    apply(h.sink(), &batch).await.expect("first apply");
    let first = h.state().await;
    if let StoreState::Rows(rows) = &first {
        assert_eq!(
            rows.len(),
            1,
            "after c1 c2 u1 d2 only id 1 remains: {rows:?}"
        );
        assert_eq!(rows[&1].get("name"), Some(&Value::Text("a2".into())));
    }
    apply(h.sink(), &batch).await.expect("second apply");
    assert_eq!(
        h.state().await,
        first,
        "applying the same batch again changed the store"
    );
    apply(h.sink(), &batch[1..3])
        .await
        .expect("apply of a replayed part");
    assert_eq!(
        h.state().await,
        first,
        "replaying part of the log changed the store"
    );
}

async fn older_offset_never_overwrites_newer(h: &mut impl SinkHarness) {
    apply(
        h.sink(),
        &[record(
            10,
            event(TABLE, Op::Create, 7, None, Some(row(7, "new", Value::Null))),
        )],
    )
    .await
    .expect("apply newer");
    let after_newer = h.state().await;
    apply(
        h.sink(),
        &[record(
            5,
            event(TABLE, Op::Update, 7, None, Some(row(7, "old", Value::Null))),
        )],
    )
    .await
    .expect("apply older");
    assert_eq!(
        h.state().await,
        after_newer,
        "offset 5 overwrote what offset 10 wrote"
    );
    apply(
        h.sink(),
        &[record(6, event(TABLE, Op::Delete, 7, None, None))],
    )
    .await
    .expect("apply older delete");
    assert_eq!(
        h.state().await,
        after_newer,
        "a delete at offset 6 removed what offset 10 wrote"
    );
}

async fn delete_without_before_image(h: &mut impl SinkHarness) {
    apply(
        h.sink(),
        &[
            record(
                0,
                event(
                    TABLE,
                    Op::Create,
                    3,
                    None,
                    Some(row(3, "gone soon", Value::Null)),
                ),
            ),
            record(1, event(TABLE, Op::Delete, 3, None, None)),
        ],
    )
    .await
    .expect("apply");
    match h.state().await {
        StoreState::Rows(rows) => assert!(
            !rows.contains_key(&3),
            "row 3 survived its delete: {rows:?}"
        ),
        StoreState::Lines(lines) => {
            let last = lines.last().expect("the delete was written");
            let payload = last.get("payload").unwrap_or(last);
            assert_eq!(payload["op"], "d", "{last}");
            assert!(payload["before"].is_null(), "{last}");
        }
    }
}

async fn unchanged_column_keeps_stored_value(h: &mut impl SinkHarness) {
    let big = "toasted ".repeat(2000);
    apply(
        h.sink(),
        &[
            record(
                0,
                event(
                    TABLE,
                    Op::Create,
                    4,
                    None,
                    Some(row(4, "before", Value::Text(big.clone()))),
                ),
            ),
            record(
                1,
                event(
                    TABLE,
                    Op::Update,
                    4,
                    None,
                    Some(row(4, "after", Value::Unchanged)),
                ),
            ),
        ],
    )
    .await
    .expect("apply");
    match h.state().await {
        StoreState::Rows(rows) => {
            let stored = &rows[&4];
            assert_eq!(stored.get("name"), Some(&Value::Text("after".into())));
            assert_eq!(
                stored.get("note"),
                Some(&Value::Text(big)),
                "the unchanged column lost its value"
            );
        }
        StoreState::Lines(lines) => {
            let last = lines.last().expect("the update was written");
            let payload = last.get("payload").unwrap_or(last);
            assert_eq!(payload["after"]["note"], crate::json::UNAVAILABLE, "{last}");
        }
    }
}
