//! A source database of either kind, for tests that run the same scenario on PostgreSQL and
//! MariaDB.

use std::collections::BTreeMap;

use mysql_async::prelude::Queryable;
use siphon_test_support::{MysqlDatabase, PgDatabase};

/// A test database on the PostgreSQL or the MariaDB server.
pub enum SourceDb {
    Postgres(PgDatabase),
    Mariadb(MysqlDatabase),
}

/// A connection to a [`SourceDb`].
pub enum Session {
    Postgres(tokio_postgres::Client),
    Mariadb(mysql_async::Conn),
}

impl Session {
    /// Runs statements (each its own transaction unless they say otherwise).
    pub async fn execute(&mut self, sql: &str) {
        match self {
            Session::Postgres(c) => c.batch_execute(sql).await.unwrap(),
            Session::Mariadb(c) => c.query_drop(sql).await.unwrap(),
        }
    }
}

impl SourceDb {
    /// A new connection.
    pub async fn session(&self) -> Session {
        match self {
            SourceDb::Postgres(db) => Session::Postgres(db.client().await.unwrap()),
            SourceDb::Mariadb(db) => Session::Mariadb(db.conn().await.unwrap()),
        }
    }

    /// Runs statements on a new connection.
    pub async fn execute(&self, sql: &str) {
        self.session().await.execute(sql).await;
    }

    /// `table`'s rows: id → v as text.
    pub async fn rows(&self, table: &str) -> BTreeMap<i64, String> {
        match self {
            SourceDb::Postgres(db) => db
                .client()
                .await
                .unwrap()
                .query(&format!("select id, v::text from {table}"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
            SourceDb::Mariadb(db) => db
                .conn()
                .await
                .unwrap()
                .query(format!("select id, cast(v as char) from {table}"))
                .await
                .unwrap()
                .into_iter()
                .collect(),
        }
    }

    /// The read-your-writes parameter naming the server's position now: `lsn=…` or `gtid=…`.
    pub async fn position(&self) -> String {
        match self {
            SourceDb::Postgres(db) => super::pg::current_lsn(db).await,
            SourceDb::Mariadb(db) => {
                let gtid: Option<String> = db
                    .conn()
                    .await
                    .unwrap()
                    .query_first("select @@gtid_binlog_pos")
                    .await
                    .unwrap();
                format!("gtid={}", gtid.unwrap_or_default())
            }
        }
    }
}
