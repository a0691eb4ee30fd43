//! The view's maintenance under transactions, restarts, reshaping and truncates.

use serde_json::json;
use siphon_core::testing::event;

use super::*;

/// orders with their customer (nested) and line items (ordered by `line`), each line
/// with its product's name flattened in.
fn shop() -> ViewConfig {
    serde_json::from_value(json!({
        "root": "public.orders",
        "columns": ["id", "status"],
        "one": {"customer": {"table": "public.customers", "foreign_key": "customer_id",
                             "columns": ["name"]}},
        "many": {"lines": {"table": "public.line_items", "foreign_key": "order_id",
                           "order_by": "line", "columns": ["line", "qty"],
                           "one": {"product": {"table": "public.products",
                                               "foreign_key": "product_id",
                                               "columns": ["name"], "flatten": "product_"}}}}
    }))
    .unwrap()
}

fn open(dir: &Path) -> View {
    View::open(&dir.join("view.redb"), &shop(), |_| Some(vec!["id".into()])).unwrap()
}

fn row(columns: &[(&str, Value)]) -> Row {
    columns.iter().map(|(c, v)| (*c, v.clone())).collect()
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

fn text(t: &str) -> Value {
    Value::Text(t.into())
}

fn insert(table: &str, id: i64, columns: &[(&str, Value)]) -> Event {
    let mut all = vec![("id", int(id))];
    all.extend_from_slice(columns);
    event(table, Op::Create, id, None, Some(row(&all)))
}

fn update(table: &str, id: i64, columns: &[(&str, Value)]) -> Event {
    let mut all = vec![("id", int(id))];
    all.extend_from_slice(columns);
    event(table, Op::Update, id, None, Some(row(&all)))
}

fn bodies(documents: Vec<Document>) -> BTreeMap<i64, Option<Json>> {
    documents
        .into_iter()
        .map(|d| {
            let Some(Value::Int(id)) = d.key.get("id") else {
                panic!("{d:?}")
            };
            (*id, d.body)
        })
        .collect()
}

fn line(id: i64, order: i64, line: i64, product: i64) -> Event {
    insert(
        "line_items",
        id,
        &[
            ("order_id", int(order)),
            ("line", int(line)),
            ("qty", int(1)),
            ("product_id", int(product)),
        ],
    )
}

#[test]
fn a_transaction_gives_each_touched_document_once_as_the_join_is_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let view = open(dir.path());
    let first = view
        .apply(
            &[
                // Children before their parents: the order's document comes out whole.
                line(100, 10, 2, 7),
                line(101, 10, 1, 8),
                insert("products", 7, &[("name", text("tea"))]),
                insert(
                    "orders",
                    10,
                    &[("customer_id", int(1)), ("status", text("new"))],
                ),
                insert("customers", 1, &[("name", text("Ann"))]),
                insert(
                    "orders",
                    11,
                    &[("customer_id", int(1)), ("status", text("new"))],
                ),
                insert(
                    "orders",
                    12,
                    &[("customer_id", int(2)), ("status", text("new"))],
                ),
            ],
            7,
            true,
            0,
        )
        .unwrap();
    let docs = bodies(first);
    assert_eq!(docs.len(), 3, "{docs:#?}");
    assert_eq!(
        docs[&10],
        Some(
            json!({"id": 10, "status": "new", "customer": {"name": "Ann"}, "lines": [
                {"line": 1, "qty": 1, "product_name": null},
                {"line": 2, "qty": 1, "product_name": "tea"},
            ]})
        )
    );
    assert_eq!(docs[&12].as_ref().unwrap()["customer"], Json::Null);
    assert_eq!(view.next_offset().unwrap(), 7);

    // A rename touches every order of the customer, and only those.
    let renamed = bodies(
        view.apply(
            &[update("customers", 1, &[("name", text("Bo"))])],
            8,
            true,
            0,
        )
        .unwrap(),
    );
    assert_eq!(renamed.keys().copied().collect::<Vec<_>>(), [10, 11]);
    assert_eq!(
        renamed[&11].as_ref().unwrap()["customer"],
        json!({"name": "Bo"})
    );

    // A product touches the orders of its lines; a line moved touches both orders.
    let product = bodies(
        view.apply(
            &[insert("products", 8, &[("name", text("cup"))])],
            9,
            true,
            0,
        )
        .unwrap(),
    );
    assert_eq!(product.keys().copied().collect::<Vec<_>>(), [10]);
    let moved = event(
        "line_items",
        Op::Update,
        101,
        None,
        Some(row(&[
            ("id", int(101)),
            ("order_id", int(11)),
            ("line", int(1)),
            ("qty", int(3)),
            ("product_id", int(8)),
        ])),
    );
    let moved = bodies(view.apply(&[moved], 10, true, 0).unwrap());
    assert_eq!(moved.keys().copied().collect::<Vec<_>>(), [10, 11]);
    assert_eq!(
        moved[&10].as_ref().unwrap()["lines"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        moved[&11].as_ref().unwrap()["lines"],
        json!([{"line": 1, "qty": 3, "product_name": "cup"}])
    );

    // A deleted root is a document to delete; a truncate touches every root it reached.
    let deleted = bodies(
        view.apply(&[event("orders", Op::Delete, 10, None, None)], 11, true, 0)
            .unwrap(),
    );
    assert_eq!(deleted, BTreeMap::from([(10, None)]));
    let truncated = bodies(
        view.apply(
            &[event("line_items", Op::Truncate, 0, None, None)],
            12,
            true,
            0,
        )
        .unwrap(),
    );
    assert_eq!(truncated.keys().copied().collect::<Vec<_>>(), [10, 11]);
    assert_eq!(truncated[&11].as_ref().unwrap()["lines"], json!([]));
}

/// The state commits before the sink applies the documents: after a crash between the
/// two, a change read again that no longer changes the state (a row deleted twice) must
/// still give the document the sink missed.
#[test]
fn documents_the_sink_did_not_apply_are_given_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let removal = [event("line_items", Op::Delete, 100, None, None)];
    {
        let view = open(dir.path());
        let built = vec![
            insert("orders", 10, &[("status", text("new"))]),
            line(100, 10, 1, 7),
        ];
        assert_eq!(bodies(view.apply(&built, 2, true, 0).unwrap()).len(), 1);
        // Its document given at the batch ending at 5, the sink stops before applying it.
        let lines = bodies(view.apply(&removal, 5, true, 2).unwrap());
        assert_eq!(lines[&10].as_ref().unwrap()["lines"], json!([]));
    }
    let view = open(dir.path());
    view.resume(2).unwrap();
    // Read again in smaller batches: not before offset 5, where it was given (a store
    // would refuse a lower version), then once.
    let unrelated = |id| [insert("products", id, &[("name", text("cup"))])];
    assert_eq!(view.apply(&removal, 3, true, 2).unwrap(), Vec::new());
    let again = bodies(view.apply(&unrelated(8), 5, true, 2).unwrap());
    assert_eq!(again.keys().copied().collect::<Vec<_>>(), [10]);
    assert_eq!(again[&10].as_ref().unwrap()["lines"], json!([]));
    assert_eq!(view.apply(&unrelated(9), 6, true, 2).unwrap(), Vec::new());

    // Applied, a document is not given again after a restart.
    let view = {
        drop(view);
        open(dir.path())
    };
    view.resume(6).unwrap();
    assert_eq!(view.apply(&unrelated(10), 7, true, 6).unwrap(), Vec::new());
}

/// A join added before another shifts the tags of the state's entries: the state is
/// started anew rather than read as something else; a column more is the same state.
#[test]
fn a_view_of_another_shape_starts_its_state_anew() {
    let dir = tempfile::tempdir().unwrap();
    let keys = |_: &TableName| Some(vec!["id".to_owned()]);
    let path = dir.path().join("view.redb");
    let view = open(dir.path());
    let events = [insert("orders", 10, &[("status", text("new"))])];
    assert_eq!(view.apply(&events, 1, true, 0).unwrap().len(), 1);
    drop(view);
    let mut wider = shop();
    wider.columns.push("total".into());
    let view = View::open(&path, &wider, keys).unwrap();
    assert!(!view.reshaped());
    assert_eq!(view.next_offset().unwrap(), 1);
    drop(view);
    let mut other = shop();
    other.one.insert(
        "account".into(),
        serde_json::from_value(json!({"table": "public.accounts", "foreign_key": "account_id"}))
            .unwrap(),
    );
    let view = View::open(&path, &other, keys).unwrap();
    assert!(view.reshaped());
    assert_eq!(view.next_offset().unwrap(), 0);
}

#[test]
fn a_truncate_of_more_rows_than_a_chunk_empties_every_document() {
    let dir = tempfile::tempdir().unwrap();
    let view = open(dir.path());
    let mut events: Vec<Event> = (1..=3)
        .map(|id| insert("orders", id, &[("status", text("new"))]))
        .collect();
    events.extend((1..=2500).map(|id| line(id, id % 3 + 1, id, 7)));
    let built = bodies(view.apply(&events, 2503, true, 0).unwrap());
    assert_eq!(
        built[&1].as_ref().unwrap()["lines"]
            .as_array()
            .unwrap()
            .len(),
        833
    );
    let truncated = bodies(
        view.apply(
            &[event("line_items", Op::Truncate, 0, None, None)],
            2504,
            true,
            0,
        )
        .unwrap(),
    );
    assert_eq!(truncated.len(), 3);
    assert!(
        truncated
            .values()
            .all(|d| d.as_ref().unwrap()["lines"] == json!([]))
    );
}

#[test]
fn equal_order_columns_fall_back_to_the_primary_key_as_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let view = open(dir.path());
    // Each line's qty is its id; 128 encodes to bytes that sort before 65's.
    let line = |id: i64, line: i64| {
        insert(
            "line_items",
            id,
            &[("order_id", int(1)), ("line", int(line)), ("qty", int(id))],
        )
    };
    let events = [
        insert("orders", 1, &[("status", text("new"))]),
        line(128, 1),
        line(65, 1),
        line(3, 2),
    ];
    let documents = bodies(view.apply(&events, 4, true, 0).unwrap());
    let ids: Vec<i64> = documents[&1].as_ref().unwrap()["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["qty"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![65, 128, 3]);
}

/// A source transaction split across batches, and across a restart between them: its
/// documents come once, at its end, with every root it touched.
#[test]
fn the_state_and_an_open_transaction_outlive_the_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let view = open(dir.path());
        let first = vec![
            insert("customers", 1, &[("name", text("Ann"))]),
            insert(
                "orders",
                10,
                &[("customer_id", int(1)), ("status", text("new"))],
            ),
        ];
        assert_eq!(view.apply(&first, 3, false, 0).unwrap(), Vec::new());
    }
    let view = open(dir.path());
    assert_eq!(view.next_offset().unwrap(), 3);
    let rest = vec![insert(
        "orders",
        11,
        &[("customer_id", int(1)), ("status", text("new"))],
    )];
    let docs = bodies(view.apply(&rest, 4, true, 0).unwrap());
    assert_eq!(docs.keys().copied().collect::<Vec<_>>(), [10, 11]);
    assert_eq!(
        docs[&10].as_ref().unwrap()["customer"],
        json!({"name": "Ann"})
    );
    // Once given, a transaction's documents are not given again.
    let later = vec![insert("products", 7, &[("name", text("tea"))])];
    assert_eq!(view.apply(&later, 5, true, 0).unwrap(), Vec::new());
}

#[test]
fn joins_need_one_column_keys_and_two_levels_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let composite = |name: &TableName| {
        Some(if name.table() == "customers" {
            vec!["a".into(), "b".into()]
        } else {
            vec!["id".into()]
        })
    };
    let error = View::open(&dir.path().join("a.redb"), &shop(), composite).unwrap_err();
    assert!(error.to_string().contains("one.customer"), "{error}");
    let deep: ViewConfig = serde_json::from_value(json!({
        "root": "public.a",
        "one": {"b": {"table": "public.b", "foreign_key": "b_id",
            "one": {"c": {"table": "public.c", "foreign_key": "c_id",
                "one": {"d": {"table": "public.d", "foreign_key": "d_id"}}}}}}
    }))
    .unwrap();
    let error = View::open(&dir.path().join("b.redb"), &deep, |_| {
        Some(vec!["id".into()])
    })
    .unwrap_err();
    assert!(error.to_string().contains("2 levels"), "{error}");
    let error = View::open(&dir.path().join("c.redb"), &shop(), |_| None).unwrap_err();
    assert!(error.to_string().contains("no primary key"), "{error}");
}
