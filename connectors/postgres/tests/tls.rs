//! TLS modes against the machine's PostgreSQL (Debian enables TLS with a self-signed
//! "snakeoil" certificate, whose file is also its CA).

use std::path::PathBuf;
use std::time::Duration;

use siphon_core::source::Source;
use siphon_source_postgres::{PostgresConfig, PostgresSource, SnapshotMode, TlsMode};
use siphon_test_support::postgres;

fn config(url: &str, tls: TlsMode, ca: Option<PathBuf>) -> PostgresConfig {
    PostgresConfig {
        url: siphon_core::ConnectionUrl::new(url),
        password: None,
        password_file: None,
        tables: vec!["public.t".parse().unwrap()],
        slot: None,
        publication: None,
        snapshot: SnapshotMode::Initial,
        snapshot_parallelism: 1,
        heartbeat_interval: None,
        status_interval: siphon_core::units::HumanDuration(Duration::from_secs(1)),
        table_poll_interval: siphon_core::units::HumanDuration(std::time::Duration::from_secs(10)),
        drop_slot_on_stop: false,
        tls: Some(tls),
        tls_ca_file: ca,
    }
}

#[tokio::test]
async fn tls_modes_verify_what_they_promise() {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute("create table t (id int primary key)")
        .await
        .unwrap();
    let ssl: String = client.query_one("show ssl", &[]).await.unwrap().get(0);
    assert_eq!(
        ssl, "on",
        "this test needs PostgreSQL with ssl = on (Debian's default)"
    );
    let cert: String = client
        .query_one("show ssl_cert_file", &[])
        .await
        .unwrap()
        .get(0);

    // require: encrypted, any certificate.
    PostgresSource::new("tls", config(&db.url, TlsMode::Require, None))
        .check()
        .await
        .unwrap();
    // verify_ca: the self-signed certificate is its own CA; the name is not checked.
    PostgresSource::new(
        "tls",
        config(&db.url, TlsMode::VerifyCa, Some(cert.clone().into())),
    )
    .check()
    .await
    .unwrap();
    // verify_full: the certificate does not name 127.0.0.1, so the connection is refused.
    let err = PostgresSource::new(
        "tls",
        config(&db.url, TlsMode::VerifyFull, Some(cert.into())),
    )
    .check()
    .await
    .unwrap_err();
    assert!(err.to_string().contains("connecting"), "{err}");
    // verify_ca with a CA that did not sign the server's certificate is refused.
    let other = siphon_test_support::search::TestCa::new(&["localhost"]).unwrap();
    let err = PostgresSource::new(
        "tls",
        config(&db.url, TlsMode::VerifyCa, Some(other.ca_file.clone())),
    )
    .check()
    .await
    .unwrap_err();
    assert!(err.to_string().contains("connecting"), "{err}");
    // sslmode=require in the URL turns TLS on without `tls`.
    let mut from_url = config(
        &format!("{}?sslmode=require", db.url),
        TlsMode::Disable,
        None,
    );
    from_url.tls = None;
    assert_eq!(from_url.tls_mode(), TlsMode::Require);
}
