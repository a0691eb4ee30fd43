//! The PostgreSQL sink against the local server: the compliance suite, the SQL sinks' suite,
//! TLS.

use siphon_core::sink::Sink;
use siphon_core::testing::{
    TABLE, apply, compliance_table, event, log_id, record, row, run_compliance_suite,
};
use siphon_core::{Op, Value};
use siphon_sink_postgres::{Postgres, PostgresSink, PostgresSinkConfig, TableMode};
use siphon_sink_sql::testing::{HistoryRow, SqlHarness, SqlStore, run_sql_suite};
use siphon_test_support::{PgDatabase, postgres};

/// The test database the sink writes to.
struct Store(PgDatabase);

type Harness = SqlHarness<Postgres, Store>;

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
    SqlHarness {
        sink,
        store: Store(db),
    }
}

/// The rows of `public.<table>` as JSON; none before the sink made the table.
async fn documents(db: &PgDatabase, table: &str) -> Vec<serde_json::Value> {
    let client = db.client().await.unwrap();
    let name = format!("public.{table}");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .unwrap()
        .get(0);
    if !exists {
        return Vec::new();
    }
    let rows = client
        .query(&format!("SELECT to_jsonb(t) FROM {name} t"), &[])
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[async_trait::async_trait]
impl SqlStore<Postgres> for Store {
    async fn documents(&mut self, _: &PostgresSink, table: &str) -> Vec<serde_json::Value> {
        documents(&self.0, table).await
    }

    async fn history(&mut self, _: &PostgresSink) -> Vec<HistoryRow> {
        let client = self.0.client().await.unwrap();
        let rows = client
            .query(
                "SELECT _siphon_offset, _siphon_op, id, name, note FROM public.compliance ORDER BY 1",
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect()
    }
}

#[tokio::test]
async fn mirror_passes_the_compliance_suite() {
    run_compliance_suite(async || harness(TableMode::Mirror).await).await;
}

#[tokio::test]
async fn passes_the_sql_suite() {
    run_sql_suite(async |mode| harness(mode).await).await;
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
    let over_tls = event(TABLE, Op::Create, 1, None, Some(row(1, "tls", Value::Null)));
    apply(&mut sink, &[record(0, over_tls)]).await.unwrap();
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
    assert_eq!(documents(&db, TABLE).await.len(), 1);
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
