//! The seeded workload: one connection running transactions of random statements, the same
//! on PostgreSQL and MariaDB but for their dialects.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;

/// SplitMix64: the run's one source of randomness, so that a seed replays it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number in `range`.
    pub fn within(&mut self, range: std::ops::RangeInclusive<u64>) -> u64 {
        range.start() + self.below(range.end() - range.start() + 1)
    }

    /// A duration in `range` of milliseconds.
    pub fn millis(&mut self, range: std::ops::RangeInclusive<u64>) -> Duration {
        Duration::from_millis(self.within(range))
    }
}

/// Which database the workload runs on: where their SQL differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mariadb,
}

impl Dialect {
    /// Rows `first..=last` of a number series, as a `from` item with the column `n`.
    fn series(self, first: u64, last: u64) -> String {
        match self {
            Dialect::Postgres => format!("generate_series({first}, {last}) n"),
            // MariaDB's Sequence engine.
            Dialect::Mariadb => format!("(select seq as n from seq_{first}_to_{last}) s"),
        }
    }
}

/// One unit of work: a transaction, or (MariaDB) a TRUNCATE, which commits by itself and
/// which no trigger sees: the harness writes its audit row itself.
pub enum Work {
    Transaction(String),
    Truncate,
}

/// The workload's state: the ids it gives out next.
pub struct Workload {
    pub rng: Rng,
    dialect: Dialect,
    next_event: u64,
    next_account: u64,
    next_doc: u64,
    columns_added: u32,
}

impl Workload {
    pub fn new(seed: u64, dialect: Dialect) -> Workload {
        Workload {
            rng: Rng(seed ^ 0x0005_eed0_fc4a),
            dialect,
            next_event: 1,
            next_account: 100_001,
            next_doc: 51,
            columns_added: 0,
        }
    }

    /// A transaction of one to five statements; on MariaDB a TRUNCATE or a DDL statement is
    /// one of its own (they commit what is open).
    pub fn next(&mut self) -> Work {
        let mut statements = Vec::new();
        for _ in 0..self.rng.within(1..=5) {
            let statement = self.statement();
            let commits = statement.starts_with("truncate") || statement.starts_with("alter");
            if self.dialect == Dialect::Mariadb && commits {
                if statement.starts_with("truncate") {
                    return Work::Truncate;
                }
                return Work::Transaction(statement);
            }
            statements.push(statement);
        }
        let begin = match self.dialect {
            Dialect::Postgres => "begin",
            Dialect::Mariadb => "start transaction",
        };
        Work::Transaction(format!("{begin}; {}; commit", statements.join("; ")))
    }

    /// A text of `len` hex digits nothing compresses.
    fn noise(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            out.push_str(&format!("{:016x}", self.rng.next()));
        }
        out.truncate(len);
        out
    }

    fn statement(&mut self) -> String {
        let event = |w: &mut Workload| {
            let span = w.next_event.min(5000);
            w.next_event - 1 - w.rng.below(span)
        };
        match self.rng.below(1000) {
            0..=249 => {
                let id = self.next_event;
                self.next_event += 1;
                format!(
                    "insert into events (id, v, kind) values ({id}, 0, 'kind {}')",
                    id % 7
                )
            }
            250..=449 => format!(
                "update accounts set v = v + 1, balance = balance + {} where id = {}",
                self.rng.below(100),
                self.rng.within(1..=200)
            ),
            // A docs update that leaves the (on PostgreSQL maybe TOASTed) body alone.
            450..=549 => format!(
                "update docs set v = v + 1, title = 'title {}' where id = {}",
                self.rng.below(1000),
                self.rng.within(1..=self.next_doc - 1)
            ),
            550..=589 => {
                let len = self.rng.within(3000..=7000) as usize;
                let body = self.noise(len);
                format!(
                    "update docs set v = v + 1, body = '{body}' where id = {}",
                    self.rng.within(1..=self.next_doc - 1)
                )
            }
            590..=699 => format!("delete from events where id = {}", event(self)),
            700..=739 => format!("update events set v = v + 1 where id = {}", event(self)),
            // A large transaction.
            740..=743 => {
                let n = self.rng.within(200..=2500);
                let first = self.next_event;
                self.next_event += n;
                format!(
                    "insert into events (id, v, kind) select n, 0, 'bulk' from {}",
                    self.dialect.series(first, first + n - 1)
                )
            }
            // A key change.
            760..=784 => {
                let to = self.next_account;
                self.next_account += 1;
                format!(
                    "update accounts set id = {to}, v = v + 1 where id = {}",
                    self.rng.within(1..=200)
                )
            }
            785..=809 => {
                let id = self.next_doc;
                self.next_doc += 1;
                let len = self.rng.within(10..=6000) as usize;
                let body = self.noise(len);
                format!(
                    "insert into docs (id, v, title, body) values ({id}, 0, 'new {id}', '{body}')"
                )
            }
            810..=819 => format!(
                "delete from accounts where id = {}",
                self.rng.within(1..=200)
            ),
            820..=821 => "truncate events".into(),
            822 if self.columns_added < 3 => {
                self.columns_added += 1;
                format!(
                    "alter table events add column extra_{} int",
                    self.columns_added
                )
            }
            _ => format!(
                "update events set v = v + 1, kind = 'changed' where id = {}",
                event(self)
            ),
        }
    }
}

/// What a workload did: units of work committed, and refused by the server (an error other
/// than a broken connection: a workload whose statements stop fitting the schema shows here).
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub committed: u64,
    pub refused: u64,
}

/// Runs the workload on `url` until `stop`, reconnecting through the server's restarts;
/// counts the units of work committed (those whose commit answered) and refused.
pub async fn run_workload(
    url: String,
    dialect: Dialect,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Tally {
    let mut workload = Workload::new(seed, dialect);
    match dialect {
        Dialect::Postgres => run_on_postgres(&url, &mut workload, &stop).await,
        Dialect::Mariadb => run_on_mariadb(&url, &mut workload, &stop).await,
    }
}

async fn run_on_postgres(url: &str, workload: &mut Workload, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(conn);
        while !stop.load(Ordering::Relaxed) {
            let Work::Transaction(sql) = workload.next() else {
                unreachable!("PostgreSQL truncates in transactions, its trigger audits them")
            };
            // A transaction cut off by a fault is not tried again: whether it committed is the
            // audit table's to say, and the harness compares with it, not with this count.
            if client.batch_execute(&sql).await.is_ok() {
                tally.committed += 1;
            } else if client.is_closed() {
                break;
            } else {
                tally.refused += 1;
                let _ = client.batch_execute("rollback").await;
            }
            tokio::time::sleep(Duration::from_millis(workload.rng.within(2..=10))).await;
        }
    }
    tally
}

async fn run_on_mariadb(url: &str, workload: &mut Workload, stop: &AtomicBool) -> Tally {
    let opts = mysql_async::Opts::from_url(url).unwrap();
    let mut tally = Tally::default();
    // A truncate that a fault cut off, before or after its audit row: settled on the next
    // connection.
    let mut truncate_unsettled = false;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut conn) = mysql_async::Conn::new(opts.clone()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            if truncate_unsettled {
                if settle_truncate(&mut conn).await.is_err() {
                    break;
                }
                truncate_unsettled = false;
            }
            let done = match workload.next() {
                Work::Transaction(sql) => conn.query_drop(sql).await,
                Work::Truncate => {
                    // A row first, so that the table is not empty and its emptiness says the
                    // truncate happened.
                    let id = workload.next_event;
                    workload.next_event += 1;
                    match conn
                        .query_drop(format!(
                            "insert into events (id, v, kind) values ({id}, 0, 'pre')"
                        ))
                        .await
                    {
                        Ok(()) => {
                            truncate_unsettled = true;
                            let truncated = conn.query_drop("truncate events").await;
                            match truncated {
                                Ok(()) => settle_truncate(&mut conn).await.inspect(|()| {
                                    truncate_unsettled = false;
                                }),
                                Err(e) => Err(e),
                            }
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            match done {
                Ok(()) => tally.committed += 1,
                Err(mysql_async::Error::Server(_)) => {
                    tally.refused += 1;
                    let _ = conn.query_drop("rollback").await;
                }
                // The connection is gone: whether it committed is the audit table's to say.
                Err(_) => break,
            }
            tokio::time::sleep(Duration::from_millis(workload.rng.within(2..=10))).await;
        }
    }
    tally
}

/// Writes the audit row of a truncate of `events` (MariaDB's triggers do not see one) if it
/// happened and has none yet: it happened if the table is empty (a row went in just before,
/// and nothing else writes), and it has its row if the last audit row is a truncate's (the
/// row before it is that insert's).
async fn settle_truncate(conn: &mut mysql_async::Conn) -> mysql_async::Result<()> {
    let rows: Option<u64> = conn.query_first("select count(*) from events").await?;
    let last: Option<String> = conn
        .query_first("select op from chaos_audit order by seq desc limit 1")
        .await?;
    if rows == Some(0) && last.as_deref() != Some("t") {
        conn.query_drop("insert into chaos_audit (tbl, op) values ('events', 't')")
            .await?;
    }
    Ok(())
}
