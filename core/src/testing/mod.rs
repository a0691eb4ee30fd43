//! Test utilities for sinks, sources and logs: event builders, the sink compliance suite that
//! every sink runs, the log compliance suite ([`log`]) that every log runs, and a schema
//! store and a change log in memory.

pub mod log;
mod memory_log;
mod message;
pub mod values;

pub use memory_log::MemoryLog;
pub use message::{
    Broker, Delivered, MessageHarness, OnBroker, creates, run_message_compliance_suite,
};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::event::{Event, KeyChange, Op, Row, SnapshotMarker, SourceInfo, Value};
use crate::log::LogId;
use crate::position::{DebeziumSource, Position, SourceFields, SourcePosition};
use crate::schema::{SchemaId, SchemaLookup, SchemaStore, TableSchema};
use crate::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use crate::source::TableInfo;
use std::future::Future;

/// A schema store in memory, for tests of what registers and decodes schemas.
#[derive(Debug, Default)]
pub struct MemorySchemas {
    versions: Mutex<Vec<Arc<TableSchema>>>,
}

impl SchemaLookup for MemorySchemas {
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        let index = (id.0 as usize).checked_sub(1)?;
        self.versions.lock().unwrap().get(index).cloned()
    }
}

impl SchemaStore for MemorySchemas {
    fn register(&self, schema: &TableSchema) -> crate::Result<Arc<TableSchema>> {
        if let Some(reason) = schema.invalid() {
            return Err(crate::Error::Codec(reason));
        }
        let mut versions = self.versions.lock().unwrap();
        if let Some(found) = versions.iter().find(|v| v.same_shape(schema)) {
            return Ok(found.clone());
        }
        let registered = Arc::new(TableSchema {
            id: SchemaId(versions.len() as u32 + 1),
            ..schema.clone()
        });
        versions.push(registered.clone());
        Ok(registered)
    }

    fn all(&self) -> Vec<Arc<TableSchema>> {
        self.versions.lock().unwrap().clone()
    }
}

/// The position of a test event: a number (connector `test`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestPosition(pub u64);

impl Position for TestPosition {
    fn encode(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }

    fn commit_point(&self) -> String {
        self.0.to_string()
    }

    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![
                ("table", serde_json::json!(source.table)),
                ("seq", serde_json::json!(self.0)),
            ],
            schema_name: "siphon.test.Source",
            schema_fields: vec![("string", true, "table"), ("int64", true, "seq")],
        }
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "seq": self.0 })
    }
}

/// The table the compliance suite writes: `public.compliance (id bigint primary key, name
/// text, note text)`.
pub const TABLE: &str = "compliance";

/// Its description, as a source would give it.
pub fn compliance_table() -> TableInfo {
    TableInfo {
        name: crate::TableName::new("public", TABLE),
        key_columns: vec!["id".into()],
    }
}

/// The compliance table's schema (version `id`), its key `id` of `key` kind, `name` and
/// `note` text.
pub fn compliance_schema(id: u32, key: crate::schema::ColumnKind) -> Arc<TableSchema> {
    let column = |name: &str, kind| crate::schema::Column {
        name: name.into(),
        type_name: String::new(),
        type_id: 0,
        type_modifier: -1,
        kind,
        nullable: true,
        generated: false,
    };
    Arc::new(TableSchema {
        id: SchemaId(id),
        connector: "postgresql".into(),
        server: "test".into(),
        database: "db".into(),
        schema: Some("public".into()),
        table: TABLE.into(),
        columns: vec![
            column("id", key),
            column("name", crate::schema::ColumnKind::Text { length: None }),
            column("note", crate::schema::ColumnKind::Text { length: None }),
        ],
        key: vec![0],
    })
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
            position: SourcePosition::new(TestPosition(id as u64)),
            tx_id: Some(1),
            ts_ms: 1_700_000_000_000,
            snapshot: SnapshotMarker::False,
        },
        ts_ms: 1_700_000_000_001,
        transaction: None,
        key_change: None,
        schema: None,
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
    /// A keyed store: the row stored under each id of the table.
    Rows(BTreeMap<i64, Row>),
    /// An append-only store (stdout, files): every JSON document written, in order.
    Lines(Vec<serde_json::Value>),
}

impl StoreState {
    /// The ids a keyed store holds (`None` for an append-only store).
    pub fn ids(&self) -> Option<Vec<i64>> {
        match self {
            StoreState::Rows(rows) => Some(rows.keys().copied().collect()),
            StoreState::Lines(_) => None,
        }
    }
}

/// The second table the suite writes, `public.compliance_other`, shaped like the first.
pub const OTHER_TABLE: &str = "compliance_other";

/// A sink under test and a way to read what its store holds.
#[async_trait::async_trait]
pub trait SinkHarness: Send {
    /// The sink under test, opened on a clean store.
    fn sink(&mut self) -> &mut dyn Sink;

    /// What the store holds now for `public.<table>`.
    async fn state_of(&mut self, table: &str) -> StoreState;

    /// What the store holds now for the compliance table.
    async fn state(&mut self) -> StoreState {
        self.state_of(TABLE).await
    }
}

type Check<H> = for<'h> fn(&'h mut H) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'h>>;

/// Runs every compliance check, each against a fresh harness from `make` whose sink is
/// opened on the suite's two tables; panics on the first failure with what was expected.
pub async fn run_compliance_suite<H: SinkHarness>(mut make: impl AsyncFnMut() -> H) {
    let checks: Vec<(&str, Check<H>)> = vec![
        ("applying twice changes nothing", |h| {
            Box::pin(applying_twice_changes_nothing(h))
        }),
        ("a value set to null", |h| {
            Box::pin(a_value_set_to_null_is_null(h))
        }),
        ("older never overwrites newer", |h| {
            Box::pin(older_offset_never_overwrites_newer(h))
        }),
        ("delete without before-image", |h| {
            Box::pin(delete_without_before_image(h))
        }),
        ("unchanged column keeps stored value", |h| {
            Box::pin(unchanged_column_keeps_stored_value(h))
        }),
        ("key change keeps unchanged columns", |h| {
            Box::pin(a_row_whose_key_changed_keeps_its_unchanged_columns(h))
        }),
        ("no partial row", |h| {
            Box::pin(a_partial_row_never_reaches_a_store_without_the_rest(h))
        }),
        ("truncate, then an older record again", |h| {
            Box::pin(a_truncate_holds_against_an_older_record_replayed(h))
        }),
        ("tables apart", |h| Box::pin(tables_are_kept_apart(h))),
        ("reset and the cursor", |h| {
            Box::pin(reset_clears_the_store_and_the_cursor(h))
        }),
        ("rewind and reopen", |h| {
            Box::pin(rewind_and_reopen_return_the_cursor(h))
        }),
        ("open transaction rolls back", |h| {
            Box::pin(an_open_transaction_rolls_back_on_reopen(h))
        }),
        ("a consumer group's stretches skip nothing", |h| {
            Box::pin(a_group_stretch_below_the_cursor_is_applied(h))
        }),
    ];
    for (name, check) in checks {
        let mut h = make().await;
        let opened = h.sink().open(&tables(), &log_id()).await;
        assert!(opened.is_ok(), "{name}: open: {opened:?}");
        check(&mut h).await;
    }
}

/// The tables the suite's sinks are opened on.
pub fn tables() -> Vec<TableInfo> {
    vec![
        compliance_table(),
        TableInfo {
            name: crate::TableName::new("public", OTHER_TABLE),
            key_columns: vec!["id".into()],
        },
    ]
}

fn create(offset: u64, table: &str, id: i64, name: &str) -> SinkRecord {
    record(
        offset,
        event(
            table,
            Op::Create,
            id,
            None,
            Some(row(id, name, Value::Null)),
        ),
    )
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

/// A column that held a value and is then set to null holds null (a store that updates rows
/// in place must clear it, not keep the old value).
async fn a_value_set_to_null_is_null(h: &mut impl SinkHarness) {
    let set = event(
        TABLE,
        Op::Create,
        1,
        None,
        Some(row(1, "a", Value::Text("x".into()))),
    );
    apply(h.sink(), &[record(0, set)])
        .await
        .expect("apply the value");
    let cleared = event(TABLE, Op::Update, 1, None, Some(row(1, "a", Value::Null)));
    apply(h.sink(), &[record(1, cleared)])
        .await
        .expect("apply the null");
    if let StoreState::Rows(rows) = h.state().await {
        assert_eq!(
            rows[&1].get("note").unwrap_or(&Value::Null),
            &Value::Null,
            "the note set to null kept its value: {rows:?}"
        );
    }
}

async fn older_offset_never_overwrites_newer(h: &mut impl SinkHarness) {
    apply(h.sink(), &[create(10, TABLE, 7, "new")])
        .await
        .expect("apply newer");
    let after_newer = h.state().await;
    if let StoreState::Rows(rows) = &after_newer {
        assert_eq!(
            rows.get(&7).and_then(|r| r.get("name")),
            Some(&Value::Text("new".into())),
            "offset 10 did not land"
        );
    }
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
    apply(h.sink(), &[create(0, TABLE, 3, "gone soon")])
        .await
        .expect("apply the row");
    if let Some(ids) = h.state().await.ids() {
        assert_eq!(ids, [3], "row 3 did not land");
    }
    apply(
        h.sink(),
        &[record(1, event(TABLE, Op::Delete, 3, None, None))],
    )
    .await
    .expect("apply the delete");
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
    // In two batches, so that the value comes from the store, not from the batch.
    apply(
        h.sink(),
        &[record(
            0,
            event(
                TABLE,
                Op::Create,
                4,
                None,
                Some(row(4, "before", Value::Text(big.clone()))),
            ),
        )],
    )
    .await
    .expect("apply the whole row");
    apply(
        h.sink(),
        &[record(
            1,
            event(
                TABLE,
                Op::Update,
                4,
                None,
                Some(row(4, "after", Value::Unchanged)),
            ),
        )],
    )
    .await
    .expect("apply the update");
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
            // An event stream marks the column as Debezium does (siphon-format's UNAVAILABLE).
            assert_eq!(
                payload["after"]["note"], "__debezium_unavailable_value",
                "{last}"
            );
        }
    }
}

async fn a_truncate_holds_against_an_older_record_replayed(h: &mut impl SinkHarness) {
    apply(h.sink(), &[create(0, TABLE, 1, "before the truncate")])
        .await
        .expect("apply the row");
    if let Some(ids) = h.state().await.ids() {
        assert_eq!(ids, [1], "row 1 did not land");
    }
    let truncate = record(1, event(TABLE, Op::Truncate, 0, None, None));
    apply(h.sink(), &[truncate.clone(), create(2, TABLE, 2, "after")])
        .await
        .expect("apply the truncate");
    // A replay from the start: the row before the truncate must not come back, nor the
    // row after it go.
    apply(h.sink(), &[create(0, TABLE, 1, "before the truncate")])
        .await
        .expect("replay the older row");
    apply(h.sink(), &[truncate, create(2, TABLE, 2, "after")])
        .await
        .expect("replay the truncate");
    if let Some(ids) = h.state().await.ids() {
        assert_eq!(ids, [2], "a replay across the truncate went wrong");
    }
}

async fn tables_are_kept_apart(h: &mut impl SinkHarness) {
    apply(
        h.sink(),
        &[
            create(0, TABLE, 1, "here"),
            create(1, OTHER_TABLE, 1, "there"),
            create(2, OTHER_TABLE, 2, "there too"),
        ],
    )
    .await
    .expect("apply");
    if let Some(ids) = h.state_of(OTHER_TABLE).await.ids() {
        assert_eq!(ids, [1, 2]);
        assert_eq!(h.state().await.ids().unwrap(), [1]);
    }
    apply(
        h.sink(),
        &[record(3, event(TABLE, Op::Truncate, 0, None, None))],
    )
    .await
    .expect("truncate one table");
    if let Some(ids) = h.state_of(OTHER_TABLE).await.ids() {
        assert_eq!(ids, [1, 2], "a truncate of one table touched another");
        assert_eq!(h.state().await.ids().unwrap(), Vec::<i64>::new());
    }
}

/// A member of a consumer group gets stretches out of the log's one order: another table's
/// records below what the store applied last (its cursor) are applied all the same.
async fn a_group_stretch_below_the_cursor_is_applied(h: &mut impl SinkHarness) {
    let unordered = |records: Vec<SinkRecord>| SinkBatch {
        ordered: false,
        ..SinkBatch::whole(records)
    };
    h.sink()
        .apply(&unordered(vec![create(20, TABLE, 1, "late")]))
        .await
        .expect("apply a stretch of one table");
    h.sink()
        .apply(&unordered(vec![
            create(5, OTHER_TABLE, 1, "early"),
            create(6, OTHER_TABLE, 2, "early too"),
        ]))
        .await
        .expect("apply another table's earlier stretch");
    if let Some(ids) = h.state_of(OTHER_TABLE).await.ids() {
        assert_eq!(
            ids,
            [1, 2],
            "records below the store's cursor, in a stretch out of the log's order, were skipped"
        );
        assert_eq!(h.state().await.ids().unwrap(), [1]);
    }
}

async fn reset_clears_the_store_and_the_cursor(h: &mut impl SinkHarness) {
    apply(
        h.sink(),
        &[create(0, TABLE, 1, "a"), create(1, OTHER_TABLE, 1, "b")],
    )
    .await
    .expect("apply");
    let keeps_cursor = h.sink().keeps_cursor();
    h.sink().reset(&tables()).await.expect("reset");
    let cursor = h.sink().open(&tables(), &log_id()).await.expect("open");
    if keeps_cursor {
        assert_eq!(cursor, None, "reset left the cursor");
    }
    for table in [TABLE, OTHER_TABLE] {
        match h.state_of(table).await {
            StoreState::Rows(rows) => assert!(rows.is_empty(), "reset left {rows:?}"),
            StoreState::Lines(lines) => assert!(
                lines.is_empty() || !keeps_cursor,
                "reset left {} lines",
                lines.len()
            ),
        }
    }
}

async fn rewind_and_reopen_return_the_cursor(h: &mut impl SinkHarness) {
    let records: Vec<SinkRecord> = (0..4).map(|i| create(i, TABLE, i as i64, "x")).collect();
    apply(h.sink(), &records).await.expect("apply");
    if !h.sink().keeps_cursor() {
        return;
    }
    let reopened = h.sink().open(&tables(), &log_id()).await.expect("reopen");
    assert_eq!(
        reopened,
        Some(cursor(4)),
        "reopen returns the store's cursor"
    );
    if h.state().await.ids().is_none() {
        return; // append-only: what was written stays written; a replay needs a reset
    }
    h.sink().rewind(1).await.expect("rewind");
    let rewound = h.sink().open(&tables(), &log_id()).await.expect("reopen");
    assert_eq!(
        rewound,
        Some(cursor(1)),
        "rewind moves the store's cursor back"
    );
    // The log applied again from there, over what the store holds.
    apply(h.sink(), &records[1..]).await.expect("apply again");
    if let Some(ids) = h.state().await.ids() {
        assert_eq!(ids, [0, 1, 2, 3]);
    }
    let again = h.sink().open(&tables(), &log_id()).await.expect("reopen");
    assert_eq!(again, Some(cursor(4)));
}

async fn an_open_transaction_rolls_back_on_reopen(h: &mut impl SinkHarness) {
    apply(h.sink(), &[create(0, TABLE, 1, "committed")])
        .await
        .expect("apply a whole transaction");
    apply_open(h.sink(), &[create(1, TABLE, 2, "not yet")])
        .await
        .expect("apply the start of one");
    if !h.sink().holds_transaction() {
        return;
    }
    // What the runtime does after a transient error: open again.
    let reopened = h.sink().open(&tables(), &log_id()).await.expect("reopen");
    assert_eq!(reopened, Some(cursor(1)), "the cursor is the last commit");
    assert!(!h.sink().holds_transaction());
    assert_eq!(
        h.state().await.ids(),
        Some(vec![1]),
        "the open transaction was not rolled back"
    );
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

/// Record `offset`: row `id` created with name "old" and `note`.
fn created(offset: u64, id: i64, note: &str) -> SinkRecord {
    record(
        offset,
        event(
            TABLE,
            Op::Create,
            id,
            None,
            Some(row(id, "old", Value::Text(note.into()))),
        ),
    )
}

async fn a_row_whose_key_changed_keeps_its_unchanged_columns(h: &mut impl SinkHarness) {
    let big = "toasted ".repeat(2000);
    // The old row in an earlier batch: the sink takes the column from the store.
    apply(h.sink(), &[created(0, 5, &big)])
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
        &[created(3, 7, &big), record(4, delete), record(5, create)],
    )
    .await
    .expect("apply the row and its key change");
    // Moved and updated again in one batch, and moved twice in one batch, from stored rows.
    apply(h.sink(), &[created(6, 20, &big), created(7, 30, &big)])
        .await
        .expect("apply two rows");
    let (delete, create) = key_change(20, 21, "moved");
    let (first_delete, first_create) = key_change(30, 31, "moved");
    let (second_delete, second_create) = key_change(31, 32, "moved twice");
    apply(
        h.sink(),
        &[
            record(8, delete),
            record(9, create),
            record(
                10,
                event(
                    TABLE,
                    Op::Update,
                    21,
                    None,
                    Some(row(21, "then renamed", Value::Unchanged)),
                ),
            ),
            record(11, first_delete),
            record(12, first_create),
            record(13, second_delete),
            record(14, second_create),
        ],
    )
    .await
    .expect("apply the key changes");
    if let StoreState::Rows(rows) = h.state().await {
        assert_eq!(
            rows.keys().copied().collect::<Vec<_>>(),
            [6, 8, 21, 32],
            "the old keys must be gone, the new ones there"
        );
        for (id, name) in [
            (6, "moved"),
            (8, "moved too"),
            (21, "then renamed"),
            (32, "moved twice"),
        ] {
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
