//! The source database of a run — a PostgreSQL or a MariaDB server of the harness's own —
//! with its tables, the audit table its triggers fill, and the faults that strike it.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use siphon_test_support::{PrivateMariadb, PrivatePostgres};

use super::streams::Changes;
use super::workload::Dialect;
use crate::common::stores::{Rows, Tables, pg_rows};

/// The tables the workload writes, and their columns compared (besides `id`).
pub const TABLES: Tables<'static> = &[
    ("accounts", &["v", "balance", "note"]),
    ("docs", &["v", "title", "body"]),
    ("events", &["v", "kind"]),
];

/// The tables, their first rows (on PostgreSQL some docs large enough to be TOASTed), and the
/// audit table with the triggers that fill it: one row per row change, two for a key change
/// (the old key's delete, the new key's insert, as the change stream has it), one per truncate.
/// The workload runs on one connection, so the audit's order is the commit order.
const POSTGRES_SCHEMA: &str = "
    create table accounts (id bigint primary key, v bigint not null, balance bigint not null, note text);
    create table docs (id bigint primary key, v bigint not null, title text, body text);
    create table events (id bigint primary key, v bigint not null, kind text not null);
    insert into accounts select g, 0, 1000, 'account ' || g from generate_series(1, 200) g;
    insert into docs select g, 0, 'doc ' || g,
        case when g % 5 = 0 then (select string_agg(md5(g::text || r::text), '') from generate_series(1, 120) r)
             else 'short ' || g end
        from generate_series(1, 50) g;
    create table chaos_audit (seq bigserial primary key, tbl text not null, op text not null, id bigint, v bigint);
    create function chaos_audit_row() returns trigger language plpgsql as $$
    begin
        if tg_op = 'INSERT' then
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'c', new.id, new.v);
        elsif tg_op = 'DELETE' then
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'd', old.id, null);
        elsif old.id <> new.id then
            insert into chaos_audit (tbl, op, id, v)
                values (tg_table_name, 'd', old.id, null), (tg_table_name, 'c', new.id, new.v);
        else
            insert into chaos_audit (tbl, op, id, v) values (tg_table_name, 'u', new.id, new.v);
        end if;
        return null;
    end $$;
    create function chaos_audit_truncate() returns trigger language plpgsql as $$
    begin
        insert into chaos_audit (tbl, op) values (tg_table_name, 't');
        return null;
    end $$;
    create trigger audit after insert or update or delete on accounts for each row execute function chaos_audit_row();
    create trigger audit after insert or update or delete on docs for each row execute function chaos_audit_row();
    create trigger audit after insert or update or delete on events for each row execute function chaos_audit_row();
    create trigger audit_truncate after truncate on events for each statement execute function chaos_audit_truncate();
";

/// The same on MariaDB, whose triggers fire for rows only: the workload audits its truncates
/// itself (`workload::settle_truncate`).
fn mariadb_schema() -> String {
    let mut sql = String::from(
        "
        create table accounts (id bigint primary key, v bigint not null, balance bigint not null, note text);
        create table docs (id bigint primary key, v bigint not null, title text, body mediumtext);
        create table events (id bigint primary key, v bigint not null, kind text not null);
        insert into accounts select seq, 0, 1000, concat('account ', seq) from seq_1_to_200;
        insert into docs select seq, 0, concat('doc ', seq),
            case when seq % 5 = 0 then repeat(md5(seq), 120) else concat('short ', seq) end
            from seq_1_to_50;
        create table chaos_audit (seq bigint auto_increment primary key, tbl varchar(20) not null,
            op char(1) not null, id bigint, v bigint);
        ",
    );
    for table in ["accounts", "docs", "events"] {
        sql.push_str(&format!(
            "
            create trigger audit_{table}_c after insert on {table} for each row
                insert into chaos_audit (tbl, op, id, v) values ('{table}', 'c', new.id, new.v);
            create trigger audit_{table}_d after delete on {table} for each row
                insert into chaos_audit (tbl, op, id, v) values ('{table}', 'd', old.id, null);
            create trigger audit_{table}_u after update on {table} for each row
                if old.id <> new.id then
                    insert into chaos_audit (tbl, op, id, v)
                        values ('{table}', 'd', old.id, null), ('{table}', 'c', new.id, new.v);
                else
                    insert into chaos_audit (tbl, op, id, v) values ('{table}', 'u', new.id, new.v);
                end if;
            "
        ));
    }
    sql
}

/// Rows inserted before the daemon starts: what its snapshot reads.
pub const FIRST_ROWS: u64 = 250;

/// The database the workload writes.
pub enum Db {
    Postgres(Arc<PrivatePostgres>),
    Mariadb(PrivateMariadb),
}

impl Db {
    /// A new server with the tables in its database `shop`.
    pub async fn start(dialect: Dialect) -> Db {
        match dialect {
            Dialect::Postgres => {
                let pg = Arc::new(PrivatePostgres::start(&[]).unwrap());
                let admin = pg.client("postgres").await.unwrap();
                admin.batch_execute("create database shop").await.unwrap();
                let shop = pg.client("shop").await.unwrap();
                shop.batch_execute(POSTGRES_SCHEMA).await.unwrap();
                Db::Postgres(pg)
            }
            Dialect::Mariadb => {
                let db = PrivateMariadb::start().unwrap();
                let mut conn = db.conn(None).await.unwrap();
                conn.query_drop("create database shop").await.unwrap();
                let mut conn = db.conn(Some("shop")).await.unwrap();
                conn.query_drop(mariadb_schema()).await.unwrap();
                Db::Mariadb(db)
            }
        }
    }

    /// The URL of database `shop`.
    pub fn url(&self) -> String {
        match self {
            Db::Postgres(pg) => pg.url("shop"),
            Db::Mariadb(db) => format!("{}/shop", db.url()),
        }
    }

    /// The schema the tables are in, as the stores name it.
    pub fn schema(&self) -> &'static str {
        match self {
            Db::Postgres(_) => "public",
            Db::Mariadb(_) => "shop",
        }
    }

    /// The tables as the source's `tables` names them.
    pub fn table_names(&self) -> Vec<String> {
        TABLES
            .iter()
            .map(|(t, _)| format!("{}.{t}", self.schema()))
            .collect()
    }

    /// The `[pipelines.demo.source]` body.
    pub fn source_config(&self) -> String {
        let tables = self
            .table_names()
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            Db::Postgres(_) => format!(
                "kind = \"postgres\"\nurl = \"{}\"\ntables = [{tables}]\nslot = \"chaos\"\nstatus_interval = \"200ms\"",
                self.url()
            ),
            Db::Mariadb(_) => format!(
                "kind = \"mysql\"\nurl = \"{}\"\ntables = [{tables}]\nheartbeat_interval = \"500ms\"",
                self.url()
            ),
        }
    }

    /// The tables' rows now.
    pub async fn rows(&self) -> Rows {
        match self {
            Db::Postgres(pg) => pg_rows(&pg.client("shop").await.unwrap(), "public", TABLES).await,
            Db::Mariadb(db) => {
                let mut conn = db.conn(Some("shop")).await.unwrap();
                let mut rows = Rows::new();
                for (table, columns) in TABLES {
                    let list: String = columns
                        .iter()
                        .map(|c| format!(", cast({c} as char)"))
                        .collect();
                    let found: Vec<mysql_async::Row> = conn
                        .query(format!("select id{list} from {table}"))
                        .await
                        .unwrap();
                    for mut r in found {
                        let id: i64 = r.take(0).unwrap();
                        let values = (1..=columns.len())
                            .map(|i| r.take::<Option<String>, _>(i).unwrap())
                            .collect();
                        rows.insert(((*table).to_owned(), id), values);
                    }
                }
                rows
            }
        }
    }

    /// Every committed change, from the audit table.
    pub async fn audit(&self) -> Changes {
        const SQL: &str = "select tbl, op, id, v from chaos_audit order by seq";
        let rows: Vec<(String, String, Option<i64>, Option<i64>)> = match self {
            Db::Postgres(pg) => pg
                .client("shop")
                .await
                .unwrap()
                .query(SQL, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect(),
            Db::Mariadb(db) => db
                .conn(Some("shop"))
                .await
                .unwrap()
                .query(SQL)
                .await
                .unwrap(),
        };
        Changes::of_audit(rows)
    }

    /// The read-your-writes parameter naming the server's position now.
    pub async fn position(&self) -> String {
        match self {
            Db::Postgres(pg) => {
                let lsn: String = pg
                    .client("shop")
                    .await
                    .unwrap()
                    .query_one("select pg_current_wal_lsn()::text", &[])
                    .await
                    .unwrap()
                    .get(0);
                format!("lsn={lsn}")
            }
            Db::Mariadb(db) => {
                let gtid: Option<String> = db
                    .conn(None)
                    .await
                    .unwrap()
                    .query_first("select @@gtid_binlog_pos")
                    .await
                    .unwrap();
                format!("gtid={}", gtid.unwrap_or_default())
            }
        }
    }

    /// Ends the server's side of the change stream: the walsender, or the binlog dump thread.
    pub async fn end_stream(&self) {
        match self {
            Db::Postgres(pg) => pg
                .client("postgres")
                .await
                .unwrap()
                .batch_execute("select pg_terminate_backend(pid) from pg_stat_replication")
                .await
                .unwrap(),
            Db::Mariadb(db) => {
                let mut conn = db.conn(None).await.unwrap();
                let dumps: Vec<u64> = conn
                    .query(
                        "select id from information_schema.processlist where command like 'Binlog Dump%'",
                    )
                    .await
                    .unwrap();
                for id in dumps {
                    // It may have ended meanwhile.
                    let _ = conn.query_drop(format!("kill {id}")).await;
                }
            }
        }
    }

    /// Stops the server as a crash would (PostgreSQL `immediate`, mariadbd killed -9), or
    /// cleanly, and starts it again.
    pub async fn restart(&mut self, crash: bool) {
        match self {
            Db::Postgres(pg) => {
                let (pg, mode) = (pg.clone(), if crash { "immediate" } else { "fast" });
                tokio::task::spawn_blocking(move || pg.restart(mode))
                    .await
                    .unwrap()
                    .unwrap();
            }
            Db::Mariadb(db) => tokio::task::block_in_place(|| match crash {
                true => db.crash(),
                false => db.restart(),
            })
            .unwrap(),
        }
    }
}
