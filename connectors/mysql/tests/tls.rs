//! TLS modes against the machine's MariaDB (scripts/services gives it Debian's self-signed
//! "snakeoil" certificate, whose file is also its CA and which names `localhost`), with a user
//! the server lets in only over TLS: the snapshot and the binlog stream both go through it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use mysql_async::prelude::Queryable;
use siphon_core::source::Source;
use siphon_source_mysql::{MysqlSource, TlsMode};
use siphon_test_support::mysql;

use crate::harness;
use harness::Harness;

#[tokio::test(flavor = "multi_thread")]
async fn tls_modes_verify_what_they_promise() {
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    let have_ssl: String = conn
        .query_first("select @@have_ssl")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        have_ssl, "YES",
        "this test needs MariaDB with TLS on: run scripts/services"
    );
    let cert: String = conn
        .query_first("select @@ssl_cert")
        .await
        .unwrap()
        .unwrap();
    conn.query_drop("create table items (id int primary key)")
        .await
        .unwrap();
    conn.query_drop("insert into items select seq from seq_1_to_10")
        .await
        .unwrap();
    let user = format!("{}_tls", db.name);
    conn.query_drop(format!(
        "create user '{user}'@'%' identified by 'pw' require ssl;
         grant select on {}.* to '{user}'@'%';
         grant replication slave, binlog monitor on *.* to '{user}'@'%'",
        db.name
    ))
    .await
    .unwrap();
    let mut h = Harness::new(&db, "tls");
    h.config.url = siphon_core::ConnectionUrl::new(format!("mysql://{user}:pw@127.0.0.1:3306"));
    let check = |tls: TlsMode, ca: Option<PathBuf>, name: Option<&str>| {
        let mut config = h.config.clone();
        config.tls = tls;
        config.tls_ca_file = ca;
        config.tls_server_name = name.map(str::to_owned);
        async move {
            config.validate().map_err(siphon_core::Error::permanent)?;
            MysqlSource::new("tls", config).check().await
        }
    };

    // Without TLS the server turns the user away: the modes below are encrypted.
    let err = check(TlsMode::Disable, None, None).await.unwrap_err();
    assert!(err.to_string().contains("1045"), "{err}");
    check(TlsMode::Require, None, None).await.unwrap();
    // verify_full: the certificate does not name 127.0.0.1, so the connection is refused...
    let err = check(TlsMode::VerifyFull, Some(cert.clone().into()), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not valid for name"), "{err}");
    // ...unless told the name it carries.
    check(
        TlsMode::VerifyFull,
        Some(cert.clone().into()),
        Some("localhost"),
    )
    .await
    .unwrap();
    // A CA that did not sign the server's certificate is refused.
    let other = siphon_test_support::search::TestCa::new(&["localhost"]).unwrap();
    let err = check(
        TlsMode::VerifyFull,
        Some(other.ca_file.clone()),
        Some("localhost"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // verify_ca is refused with the modes that work named.
    let err = check(TlsMode::VerifyCa, Some(cert.clone().into()), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("verify_full"), "{err}");

    // The snapshot and the binlog over TLS.
    h.config.tls = TlsMode::VerifyFull;
    h.config.tls_ca_file = Some(cert.into());
    h.config.tls_server_name = Some("localhost".into());
    let (run, cancel) = h.start();
    h.wait_for_streaming().await;
    conn.query_drop("insert into items select seq from seq_11_to_20")
        .await
        .unwrap();
    h.wait_for_ids("over TLS", &(1..=20).collect::<BTreeSet<_>>())
        .await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    conn.query_drop(format!("drop user '{user}'@'%'"))
        .await
        .unwrap();
}
