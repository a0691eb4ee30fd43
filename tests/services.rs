//! The machine's servers are there and prepared for change data capture by
//! `scripts/services`; each test gets a database of its own.

use siphon_test_support::{mysql, postgres, redis};

#[tokio::test]
async fn postgres_is_ready_for_logical_replication() {
    let db = postgres().await.unwrap();
    let client = db.client().await.unwrap();
    let wal_level: String = client
        .query_one("show wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        wal_level, "logical",
        "run scripts/services to set wal_level = logical"
    );
    // A logical slot can be created (and goes with the database).
    client
        .query_one(
            "select pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&db.name],
        )
        .await
        .unwrap();
    let current: String = client
        .query_one("select current_database()::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(current, db.name);
}

#[tokio::test]
async fn mariadb_writes_a_full_row_binlog() {
    use mysql_async::prelude::Queryable;
    let db = mysql().await.unwrap();
    let mut conn = db.conn().await.unwrap();
    let row: (i64, String, String, String) = conn
        .query_first("select @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row,
        (1, "ROW".into(), "FULL".into(), "FULL".into()),
        "run scripts/services to enable the binlog"
    );
    let current: String = conn
        .query_first("select database()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(current, db.name);
}

#[tokio::test]
async fn redis_keyspaces_are_separate() {
    let a = redis().await.unwrap();
    let b = redis().await.unwrap();
    assert_ne!(a.prefix, b.prefix);
    let mut conn = a.conn().await.unwrap();
    let key = format!("{}k", a.prefix);
    let () = redis::cmd("SET")
        .arg(&key)
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let got: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(got, "v");
}
