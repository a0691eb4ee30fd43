//! siphon's JSON next to Debezium's documented output for the same changes (the PostgreSQL
//! connector's create and delete examples, customers table): every field a Debezium consumer
//! reads is there with the same JSON type, and the row data is equal. siphon's own output for
//! those events is pinned in `golden/siphon_*.json` (rewrite them with `SIPHON_BLESS=1`).

use serde_json::Value as Json;
use siphon_core::{Event, Op, Row, SnapshotMarker, SourceInfo, SourcePosition, Value};
use siphon_format::envelope::JsonFormat;
use siphon_source_postgres::PgPosition;

fn customers_event(op: Op, tx_id: u64, lsn: u64, before: Option<Row>, after: Option<Row>) -> Event {
    Event {
        op,
        before,
        after,
        key: Some(Row(vec![("id".into(), Value::Int(1))])),
        source: SourceInfo {
            connector: "postgresql".into(),
            name: "PostgreSQL_server".into(),
            db: "postgres".into(),
            schema: Some("public".into()),
            table: "customers".into(),
            position: SourcePosition::new(PgPosition {
                commit_lsn: 24023119,
                lsn,
                index: 0,
            }),
            tx_id: Some(tx_id),
            ts_ms: 1559033904863,
            snapshot: SnapshotMarker::False,
        },
        ts_ms: 1559033904863,
        transaction: None,
        key_change: None,
        schema: None,
    }
}

fn anne() -> Row {
    Row(vec![
        ("id".into(), Value::Int(1)),
        ("first_name".into(), Value::Text("Anne".into())),
        ("last_name".into(), Value::Text("Kretchmar".into())),
        ("email".into(), Value::Text("annek@noanswer.org".into())),
    ])
}

fn key_only() -> Row {
    Row(vec![
        ("id".into(), Value::Int(1)),
        ("first_name".into(), Value::Null),
        ("last_name".into(), Value::Null),
        ("email".into(), Value::Null),
    ])
}

fn load(name: &str) -> Json {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every field of Debezium's document exists in ours with the same JSON type; `equal` paths
/// must also hold the same value.
fn assert_compatible(debezium: &Json, ours: &Json, path: &str, differ: &[&str]) {
    match (debezium, ours) {
        (Json::Object(d), Json::Object(o)) => {
            for (k, dv) in d {
                let p = format!("{path}.{k}");
                let ov = o
                    .get(k)
                    .unwrap_or_else(|| panic!("{p} is missing in siphon's output: {ours}"));
                assert_compatible(dv, ov, &p, differ);
            }
        }
        (Json::Null, _) if path.ends_with("xmin") || path.ends_with("transaction") => {}
        _ => {
            let same_type = std::mem::discriminant(debezium) == std::mem::discriminant(ours);
            assert!(same_type, "{path}: Debezium has {debezium}, siphon {ours}");
            if !differ.iter().any(|d| path.ends_with(d)) {
                assert_eq!(debezium, ours, "{path}");
            }
        }
    }
}

fn check(event: &Event, debezium_file: &str, siphon_file: &str) {
    let ours = JsonFormat::default().encode(event);
    // Fields that legitimately differ between two runs or two products.
    assert_compatible(
        &load(debezium_file),
        &ours,
        "payload",
        &["version", "sequence"],
    );
    if std::env::var_os("SIPHON_BLESS").is_some() {
        let path = format!("{}/tests/golden/{siphon_file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::write(path, serde_json::to_string_pretty(&ours).unwrap() + "\n").unwrap();
    }
    let pinned = load(siphon_file);
    assert_eq!(
        ours, pinned,
        "siphon's output changed; if on purpose, update {siphon_file}"
    );
    // With schemas, the payload is the same and the schema names the fields.
    let with_schema = JsonFormat {
        schemas: true,
        transactions: false,
        modes: Default::default(),
    }
    .encode(event);
    assert_eq!(with_schema["payload"], ours);
    let fields: Vec<&str> = with_schema["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    // Debezium's order, and every field of the payload named.
    assert_eq!(
        fields,
        [
            "before",
            "after",
            "source",
            "transaction",
            "op",
            "ts_ms",
            "ts_us",
            "ts_ns"
        ]
    );
    let mut payload_fields: Vec<&str> = ours
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut named = fields.clone();
    payload_fields.sort_unstable();
    named.sort_unstable();
    assert_eq!(payload_fields, named);
}

#[test]
fn create_event_matches_debezium() {
    let event = customers_event(Op::Create, 555, 24023128, None, Some(anne()));
    check(
        &event,
        "debezium_postgres_create.json",
        "siphon_postgres_create.json",
    );
}

#[test]
fn delete_event_matches_debezium() {
    let event = customers_event(Op::Delete, 556, 46523128, Some(key_only()), None);
    check(
        &event,
        "debezium_postgres_delete.json",
        "siphon_postgres_delete.json",
    );
}
