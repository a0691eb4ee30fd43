//! The PostgreSQL sink against the local server: the compliance suite, history mode, whole
//! source transactions, a rejected record, reset.

use std::collections::BTreeMap;

use siphon_core::sink::{Sink, SinkRecord};
use siphon_core::testing::{
    SinkHarness, StoreState, TABLE, apply, apply_open, compliance_table, cursor, event, log_id,
    record, row, run_compliance_suite,
};
use siphon_core::{Error, Op, Row, Value};
use siphon_sink_postgres::{PostgresSink, PostgresSinkConfig, TableMode};
use siphon_test_support::{PgDatabase, postgres};

struct Harness {
    db: PgDatabase,
    sink: PostgresSink,
}

async fn harness(mode: TableMode) -> Harness {
    let db = postgres().await.expect("postgres");
    let sink = PostgresSink::new(
        PostgresSinkConfig {
            mode,
            ..PostgresSinkConfig::new(db.url.clone())
        },
        "p",
        "s",
    )
    .unwrap();
    Harness { db, sink }
}

/// The rows of the mirror table (none if it does not exist yet). A column appears in the
/// target with its first non-null value, so a missing column reads as NULL.
async fn mirror_rows(db: &PgDatabase) -> BTreeMap<i64, Row> {
    table_rows(db, TABLE).await
}

/// The rows of the mirror of `public.<table>`; none before the sink made the table.
async fn table_rows(db: &PgDatabase, table: &str) -> BTreeMap<i64, Row> {
    let client = db.client().await.unwrap();
    let name = format!("public.{table}");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .unwrap()
        .get(0);
    if !exists {
        return BTreeMap::new();
    }
    let rows = client
        .query(&format!("SELECT to_jsonb(t) FROM {name} t"), &[])
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let doc: serde_json::Value = r.get(0);
            let text = |c: &str| {
                doc[c]
                    .as_str()
                    .map_or(Value::Null, |s| Value::Text(s.into()))
            };
            let id = doc["id"].as_i64().unwrap();
            (
                id,
                Row(vec![
                    ("id".into(), Value::Int(id)),
                    ("name".into(), text("name")),
                    ("note".into(), text("note")),
                ]),
            )
        })
        .collect()
}

#[async_trait::async_trait]
impl SinkHarness for Harness {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        StoreState::Rows(table_rows(&self.db, table).await)
    }
}

#[tokio::test]
async fn mirror_passes_the_compliance_suite() {
    run_compliance_suite(async || harness(TableMode::Mirror).await).await;
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
    let mut h = harness(TableMode::Mirror).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let first = create(0, 1, "a");
    apply_open(&mut h.sink, &[first]).await.unwrap();
    assert!(
        mirror_rows(&h.db).await.is_empty(),
        "a reader saw part of a source transaction"
    );
    apply(&mut h.sink, &[create(1, 2, "b")]).await.unwrap();
    assert_eq!(mirror_rows(&h.db).await.len(), 2);
    let mut reopened =
        PostgresSink::new(PostgresSinkConfig::new(h.db.url.clone()), "p", "s").unwrap();
    assert_eq!(
        reopened
            .open(&[compliance_table()], &log_id())
            .await
            .unwrap(),
        Some(cursor(2))
    );
}

#[tokio::test]
async fn an_unfinished_transaction_is_rolled_back_and_the_cursor_rewinds_on_reopen() {
    let mut h = harness(TableMode::Mirror).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(&mut h.sink, &[create(0, 1, "a")]).await.unwrap();
    let open = create(1, 2, "b");
    apply_open(&mut h.sink, &[open]).await.unwrap();
    // What the runtime does after a transient error: open again.
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        Some(cursor(1))
    );
    assert_eq!(
        mirror_rows(&h.db).await.keys().copied().collect::<Vec<_>>(),
        [1]
    );
}

/// Offset, op, id, name, note.
type HistoryRow = (i64, String, Option<i64>, Option<String>, Option<String>);

#[tokio::test]
async fn history_holds_every_event_once_and_replays_add_nothing() {
    let mut h = harness(TableMode::History).await;
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
    apply(&mut h.sink, &batch[1..2]).await.unwrap();
    let client = h.db.client().await.unwrap();
    let rows = client
        .query(
            "SELECT _siphon_offset, _siphon_op, id, name, note FROM public.compliance ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<HistoryRow> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        got,
        [
            (0, "c".into(), Some(1), Some("a".into()), None),
            (1, "u".into(), Some(1), Some("b".into()), Some("n".into())),
            (2, "d".into(), Some(1), Some("b".into()), None),
            (3, "t".into(), None, None, None),
        ]
    );
}

#[tokio::test]
async fn a_value_the_column_cannot_take_is_rejected_by_offset_and_the_rest_applies() {
    let mut h = harness(TableMode::Mirror).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let numbered = |offset: u64, id: i64, note: Value| {
        record(
            offset,
            event(TABLE, Op::Create, id, None, Some(row(id, "x", note))),
        )
    };
    // The first value makes `note` a bigint column; "abc" cannot go there.
    apply(&mut h.sink, &[numbered(0, 1, Value::Int(5))])
        .await
        .unwrap();
    let batch = [
        numbered(1, 2, Value::Int(6)),
        numbered(2, 3, Value::Text("abc".into())),
        numbered(3, 4, Value::Int(7)),
    ];
    match apply(&mut h.sink, &batch).await {
        Err(Error::Rejected {
            offset,
            table,
            reason,
        }) => {
            assert_eq!(
                (offset, table.to_string().as_str()),
                (2, "public.compliance")
            );
            assert!(reason.contains("bigint"), "{reason}");
        }
        other => panic!("expected offset 2 to be rejected, got {other:?}"),
    }
    apply(&mut h.sink, &[batch[0].clone(), batch[2].clone()])
        .await
        .unwrap();
    let client = h.db.client().await.unwrap();
    let ids: Vec<i64> = client
        .query("SELECT id FROM public.compliance ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 2, 4]);
}

#[tokio::test]
async fn reset_drops_the_tables_and_the_cursor() {
    let mut h = harness(TableMode::Mirror).await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(&mut h.sink, &[create(0, 1, "a")]).await.unwrap();
    h.sink.reset(&[compliance_table()]).await.unwrap();
    assert_eq!(
        h.sink.open(&[compliance_table()], &log_id()).await.unwrap(),
        None
    );
    assert!(mirror_rows(&h.db).await.is_empty());
    apply(&mut h.sink, &[create(0, 1, "a")]).await.unwrap();
    assert_eq!(mirror_rows(&h.db).await.len(), 1);
}

#[tokio::test]
async fn a_table_without_a_key_is_refused_by_a_mirror() {
    let mut h = harness(TableMode::Mirror).await;
    let keyless = siphon_core::source::TableInfo {
        name: siphon_core::TableName::new("public", "log"),
        key_columns: vec![],
    };
    let e = h.sink.open(&[keyless], &log_id()).await.unwrap_err();
    assert!(!e.is_transient());
    assert!(e.to_string().contains("public.log"), "{e}");
}

#[tokio::test]
async fn tls_require_encrypts_the_connection_and_verify_full_checks_the_host() {
    let db = postgres().await.expect("postgres");
    let client = db.client().await.unwrap();
    let ssl: String = client.query_one("show ssl", &[]).await.unwrap().get(0);
    assert_eq!(
        ssl, "on",
        "this test needs PostgreSQL with ssl = on (Debian's default)"
    );
    let mut sink = PostgresSink::new(
        PostgresSinkConfig {
            tls: Some(siphon_core::tls::TlsMode::Require),
            ..PostgresSinkConfig::new(db.url.clone())
        },
        "p",
        "s",
    )
    .unwrap();
    sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(&mut sink, &[create(0, 1, "over tls")]).await.unwrap();
    let encrypted: bool = client
        .query_one(
            "select bool_and(s.ssl) from pg_stat_ssl s join pg_stat_activity a using (pid) \
             where a.datname = current_database() and a.application_name = 'siphon'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted, "the sink's connection is not encrypted");
    assert_eq!(mirror_rows(&db).await.len(), 1);
    // The snakeoil certificate names the machine, not 127.0.0.1.
    let snakeoil = std::path::PathBuf::from("/etc/ssl/certs/ssl-cert-snakeoil.pem");
    let mut strict = PostgresSink::new(
        PostgresSinkConfig {
            tls: Some(siphon_core::tls::TlsMode::VerifyFull),
            tls_ca_file: Some(snakeoil),
            ..PostgresSinkConfig::new(db.url.clone())
        },
        "p",
        "s2",
    )
    .unwrap();
    let e = strict
        .open(&[compliance_table()], &log_id())
        .await
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}
