//! The Elasticsearch sink against the in-process stand-in (no Elasticsearch or OpenSearch
//! server can run on this machine; see `siphon_test_support::search`).

use std::collections::BTreeMap;

use siphon_core::sink::Sink;
use siphon_core::testing::{
    SinkHarness, StoreState, TABLE, apply, compliance_table, event, log_id, record, row,
    run_compliance_suite,
};
use siphon_core::{Error, Op, Row, Value};
use siphon_sink_elasticsearch::{ElasticsearchSink, ElasticsearchSinkConfig};
use siphon_test_support::search::SearchStandIn;

struct Harness {
    cluster: SearchStandIn,
    sink: ElasticsearchSink,
}

async fn harness() -> Harness {
    let cluster = SearchStandIn::start().await.unwrap();
    let sink = ElasticsearchSink::new(ElasticsearchSinkConfig::new(cluster.url.clone()), "p", "s")
        .unwrap();
    Harness { cluster, sink }
}

#[async_trait::async_trait]
impl SinkHarness for Harness {
    fn sink(&mut self) -> &mut dyn Sink {
        &mut self.sink
    }

    async fn state_of(&mut self, table: &str) -> StoreState {
        let rows: BTreeMap<i64, Row> = self
            .cluster
            .documents(table)
            .into_iter()
            .map(|(id, doc)| {
                let text = |c: &str| {
                    doc[c]
                        .as_str()
                        .map_or(Value::Null, |s| Value::Text(s.into()))
                };
                let id: i64 = id.parse().unwrap();
                assert_eq!(doc["id"], id, "the _id is the key");
                (
                    id,
                    Row(vec![
                        ("id".into(), Value::Int(id)),
                        ("name".into(), text("name")),
                        ("note".into(), text("note")),
                    ]),
                )
            })
            .collect();
        StoreState::Rows(rows)
    }
}

#[tokio::test]
async fn passes_the_compliance_suite() {
    run_compliance_suite(async || harness().await).await;
}

#[tokio::test]
async fn an_unchanged_column_is_filled_from_the_stored_document() {
    let mut h = harness().await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let big = "y".repeat(3000);
    apply(
        &mut h.sink,
        &[record(
            0,
            event(
                TABLE,
                Op::Create,
                1,
                None,
                Some(row(1, "a", Value::Text(big.clone()))),
            ),
        )],
    )
    .await
    .unwrap();
    apply(
        &mut h.sink,
        &[record(
            1,
            event(
                TABLE,
                Op::Update,
                1,
                None,
                Some(row(1, "b", Value::Unchanged)),
            ),
        )],
    )
    .await
    .unwrap();
    let doc = &h.cluster.documents(TABLE)["1"];
    assert_eq!(doc["note"], big.as_str());
    assert_eq!(doc["name"], "b");
}

#[tokio::test]
async fn an_overloaded_or_stopped_cluster_is_transient_and_a_refused_document_is_rejected() {
    let mut h = harness().await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    let create = |offset: u64, id: i64| {
        record(
            offset,
            event(TABLE, Op::Create, id, None, Some(row(id, "x", Value::Null))),
        )
    };
    for status in [429, 503] {
        h.cluster.set_fault(Some(status));
        let e = apply(&mut h.sink, &[create(0, 1)]).await.unwrap_err();
        assert!(e.is_transient(), "HTTP {status} should be retried: {e}");
    }
    h.cluster.set_fault(None);
    h.cluster.reject_id(Some("2"));
    match apply(&mut h.sink, &[create(0, 1), create(1, 2), create(2, 3)]).await {
        Err(Error::Rejected { offset, reason, .. }) => {
            assert_eq!(offset, 1);
            assert!(reason.contains("mapper_parsing_exception"), "{reason}");
        }
        other => panic!("expected offset 1 to be rejected, got {other:?}"),
    }
    let ids: Vec<String> = h.cluster.documents(TABLE).into_keys().collect();
    assert_eq!(
        ids,
        ["1", "3"],
        "the other documents of the batch were written"
    );
}

#[tokio::test]
async fn truncate_empties_the_index_and_reset_deletes_it() {
    let mut h = harness().await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    apply(
        &mut h.sink,
        &[
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
            ),
            record(1, event(TABLE, Op::Truncate, 0, None, None)),
            record(
                2,
                event(TABLE, Op::Create, 2, None, Some(row(2, "b", Value::Null))),
            ),
        ],
    )
    .await
    .unwrap();
    let ids: Vec<String> = h.cluster.documents(TABLE).into_keys().collect();
    assert_eq!(ids, ["2"]);
    h.sink.reset(&[compliance_table()]).await.unwrap();
    assert!(h.cluster.documents(TABLE).is_empty());
}

fn created(offset: u64, id: i64) -> siphon_core::sink::SinkRecord {
    record(
        offset,
        event(TABLE, Op::Create, id, None, Some(row(id, "x", Value::Null))),
    )
}

/// A replay across a truncate: `_delete_by_query` runs again and deletes what came after the
/// truncate too, leaving tombstones at those documents' versions; re-applying them must put
/// them back, not be taken for "already applied".
#[tokio::test]
async fn a_replay_across_a_truncate_keeps_what_came_after_it() {
    let mut h = harness().await;
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    // Row 2 then leaves a column unchanged: its replay needs the stored document.
    let log = [
        created(0, 1),
        record(1, event(TABLE, Op::Truncate, 0, None, None)),
        created(2, 2),
        record(
            3,
            event(
                TABLE,
                Op::Update,
                2,
                None,
                Some(row(2, "renamed", Value::Unchanged)),
            ),
        ),
    ];
    for r in &log {
        apply(&mut h.sink, std::slice::from_ref(r)).await.unwrap();
    }
    assert_eq!(
        h.cluster.documents(TABLE).into_keys().collect::<Vec<_>>(),
        ["2"]
    );
    // The replay, as one batch and record by record.
    apply(&mut h.sink, &log).await.unwrap();
    for r in &log {
        apply(&mut h.sink, std::slice::from_ref(r)).await.unwrap();
    }
    let documents = h.cluster.documents(TABLE);
    assert_eq!(
        documents.keys().collect::<Vec<_>>(),
        ["2"],
        "a document written after the truncate vanished in the replay"
    );
    assert_eq!(documents["2"]["name"], "renamed");
}

/// With automatic index creation off, a write to a missing index is a rejected record, not a
/// success.
#[tokio::test]
async fn a_write_to_a_missing_index_is_rejected() {
    let mut h = harness().await;
    h.cluster.set_auto_create(false);
    h.sink.open(&[compliance_table()], &log_id()).await.unwrap();
    match apply(&mut h.sink, &[created(0, 1)]).await {
        Err(Error::Rejected {
            offset: 0, reason, ..
        }) => {
            assert!(reason.contains("index_not_found"), "{reason}")
        }
        other => panic!("expected the record to be rejected, got {other:?}"),
    }
}

/// An index name Elasticsearch would read as several indices (a table named `a,b` or `*`)
/// is refused: reset must never delete other indices.
#[tokio::test]
async fn index_names_elasticsearch_reads_as_several_indices_are_refused() {
    let mut h = harness().await;
    for index in ["a", "b", "keep"] {
        h.cluster.create_index(index);
    }
    for name in ["a,b", "*"] {
        let table = siphon_core::source::TableInfo {
            name: siphon_core::TableName::new("public", name),
            key_columns: vec!["id".into()],
        };
        let err = h
            .sink
            .reset(std::slice::from_ref(&table))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("index"), "{err}");
        let err = h.sink.open(&[table], &log_id()).await.unwrap_err();
        assert!(err.to_string().contains("index"), "{err}");
    }
    assert_eq!(h.cluster.indices(), ["a", "b", "keep"]);
}

/// An `https://` cluster in the SQL sinks' TLS modes: `verify_full` (the default) with the
/// cluster's CA, `require` with none, `verify_ca` without the name; a wrong CA, a wrong name
/// or plain HTTP is refused, saying why.
#[tokio::test]
async fn https_clusters_are_reached_in_the_tls_modes_and_a_wrong_certificate_is_refused() {
    use siphon_core::tls::TlsMode;
    use siphon_test_support::search::TestCa;
    let ca = TestCa::new(&["localhost", "127.0.0.1"]).unwrap();
    let cluster = SearchStandIn::start_tls(&ca).await.unwrap();
    let sink = |url: &str, tls: Option<TlsMode>, ca_file: Option<&std::path::Path>| {
        let config = ElasticsearchSinkConfig {
            tls,
            tls_ca_file: ca_file.map(Into::into),
            ..ElasticsearchSinkConfig::new(url)
        };
        ElasticsearchSink::new(config, "p", "s").unwrap()
    };
    let mut verified = sink(&cluster.url, None, Some(&ca.ca_file));
    verified
        .open(&[compliance_table()], &log_id())
        .await
        .unwrap();
    apply(&mut verified, &[created(0, 1)]).await.unwrap();
    assert_eq!(
        cluster.documents(TABLE).into_keys().collect::<Vec<_>>(),
        ["1"]
    );
    sink(&cluster.url, Some(TlsMode::Require), None)
        .check()
        .await
        .unwrap();
    // Another CA's certificate.
    let other = TestCa::new(&["localhost"]).unwrap();
    let err = sink(&cluster.url, None, Some(&other.ca_file))
        .check()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // The right CA, a certificate for another name: verify_ca takes it, verify_full not.
    let elsewhere = TestCa::new(&["elsewhere.example"]).unwrap();
    let misnamed = SearchStandIn::start_tls(&elsewhere).await.unwrap();
    sink(
        &misnamed.url,
        Some(TlsMode::VerifyCa),
        Some(&elsewhere.ca_file),
    )
    .check()
    .await
    .unwrap();
    let err = sink(
        &misnamed.url,
        Some(TlsMode::VerifyFull),
        Some(&elsewhere.ca_file),
    )
    .check()
    .await
    .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // Plain HTTP to a TLS port.
    let plain = cluster.url.replace("https://", "http://");
    assert!(sink(&plain, None, None).check().await.is_err());
}
