//! `siphon-bench mysql`: the MySQL/MariaDB source against the server's own limits, on the
//! workload of `../shared/reference/mysql_limit.sh`, in one run:
//!
//! 1. one transaction inserting `rows` rows, streamed from the binlog into the log (fsynced),
//!    vs `mariadb-binlog --read-from-remote-server` (`--raw`: the bytes only; and
//!    `--base64-output=decode-rows -v`: the rows decoded, as siphon decodes them);
//! 2. `small` single-row transactions (autocommit inserts), streamed, vs `mariadb-binlog -v`:
//!    the per-transaction cost (each needs its end durable; siphon groups them per fsync);
//! 3. a snapshot of the table vs a full scan (`SELECT *` through the client, `--quick`).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::log::ChangeLog;
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{Source, SourceContext};
use siphon_log_file::FileLog;
use siphon_source_mysql::{MysqlConfig, MysqlSource};
use tokio_util::sync::CancellationToken;

use crate::figure::{Figure, Measure, Rates, Target, thousands};
use crate::pg::{abba, peak_rss_mib, report};
use crate::tools;

const TABLE: &str = "create table orders (id bigint auto_increment primary key, customer_id int not null, \
  city varchar(32) not null, amount decimal(12,2) not null, status varchar(16) not null, note text, \
  created_at timestamp(6) not null default current_timestamp(6))";

/// The `mariadb` client on the server of `url`; with `sql`, runs it and returns its output.
fn client(url: &mysql_async::Opts) -> Command {
    let mut c = Command::new("mariadb");
    c.env("MYSQL_PWD", url.pass().unwrap_or_default())
        .arg(format!("-h{}", url.ip_or_hostname()))
        .arg(format!("-P{}", url.tcp_port()))
        .arg(format!("-u{}", url.user().unwrap_or("root")));
    c
}

fn sql(url: &mysql_async::Opts, sql: &str) -> anyhow::Result<String> {
    let out = client(url).args(["-N", "-e", sql]).output()?;
    anyhow::ensure!(
        out.status.success(),
        "mariadb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `sql` on the server of `url`.
pub(crate) fn sql_at(url: &str, query: &str) -> anyhow::Result<String> {
    sql(&mysql_async::Opts::from_url(url)?, query)
}

/// mariadb-binlog reading `file` from the server to its end.
fn binlog(url: &mysql_async::Opts, file: &str, decode: bool) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let mut c = Command::new("mariadb-binlog");
    c.current_dir(dir.path())
        .env("MYSQL_PWD", url.pass().unwrap_or_default())
        .arg("--read-from-remote-server")
        .arg(format!("-h{}", url.ip_or_hostname()))
        .arg(format!("-P{}", url.tcp_port()))
        .arg(format!("-u{}", url.user().unwrap_or("root")));
    if decode {
        c.args(["--base64-output=decode-rows", "-v"]);
    } else {
        c.arg("--raw");
    }
    let status = c
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "mariadb-binlog failed");
    Ok(started.elapsed())
}

/// The source until the log holds `records` records (durably), streaming from the start of
/// binlog `file` (`Some`) or taking a snapshot first (`None`); returns the time.
async fn siphon(
    url: &str,
    database: &str,
    file: Option<&str>,
    records: u64,
) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir()?;
    let log = FileLog::open(dir.path().join("log"), Default::default())?;
    let offsets = OffsetStore::open(dir.path().join("offsets"))?;
    if let Some(file) = file {
        // As if a snapshot had ended at the start of `file`.
        offsets.save_source_checkpoint(&serde_json::json!({
            "snapshot_done": true, "file": file, "pos": 4, "log_id": log.id(),
        }))?;
    }
    let cancel = CancellationToken::new();
    let ctx = SourceContext {
        pipeline: "bench".into(),
        log: Arc::new(log.clone()),
        offsets,
        cancel: cancel.clone(),
        metrics: Default::default(),
    };
    let config: MysqlConfig = serde_json::from_value(serde_json::json!({
        "url": url, "tables": [format!("{database}.orders")], "snapshot": "initial",
        "heartbeat_interval": "1s",
    }))?;
    let mut source = MysqlSource::new("bench", config);
    let started = Instant::now();
    let run = tokio::spawn(async move { source.run(&ctx).await });
    let mut end = log.subscribe();
    end.wait_for(|e| *e >= records).await?;
    let elapsed = started.elapsed();
    cancel.cancel();
    run.await??;
    Ok(elapsed)
}

/// The tools this bench runs.
pub const TOOLS: &[tools::Tool] = &[tools::MARIADB, tools::MARIADB_BINLOG];

pub fn run(url: &str, rows: u64, small: u64) -> anyhow::Result<()> {
    tools::require(TOOLS)?;
    let (figures, rss) = measure(url, rows, small)?;
    for figure in &figures {
        report(figure);
    }
    println!("\npeak RSS of this process after streaming the {rows}-row transaction: {rss:.0} MiB");
    Ok(())
}

/// The four workloads, each beside its reference; and this process's peak RSS (MiB) after
/// streaming the big transaction.
pub fn measure(url: &str, rows: u64, small: u64) -> anyhow::Result<(Vec<Figure>, f64)> {
    let rt = crate::pg::runtime()?;
    let opts = mysql_async::Opts::from_url(url)?;
    let db = format!("siphon_bench_{}", std::process::id());
    sql(&opts, &format!("drop database if exists {db}"))?;
    sql(&opts, &format!("create database {db}"))?;
    let result = (|| -> anyhow::Result<(Vec<Figure>, f64)> {
        let mut figures = Vec::new();
        let streaming = |workload: String, unit, n, reference: &str, times: Times, target| Figure {
            what: "MariaDB streaming".into(),
            workload,
            measure: Measure::Rates(Rates::timed(unit, reference, n, &times.1, &times.0)),
            target,
        };
        sql(&opts, &format!("use {db}; {TABLE}"))?;
        sql(&opts, "flush binary logs")?;
        let file = current_file(&opts)?;
        sql(
            &opts,
            &format!(
                "use {db}; insert into orders (customer_id, city, amount, status, note) \
                 select floor(rand()*100000), elt(1+floor(rand()*5),'Berlin','Paris','Tokyo','Lima','Oslo'), \
                 round(rand()*1000,2), 'paid', md5(seq) from seq_1_to_{rows}"
            ),
        )?;
        // The insert's binlog file is closed, so that the references read to its end.
        sql(&opts, "flush binary logs")?;
        let times = abba(
            || binlog(&opts, &file, false),
            || binlog(&opts, &file, false),
            || rt.block_on(siphon(url, &db, Some(&file), rows)),
            || rt.block_on(siphon(url, &db, Some(&file), rows)),
        )?;
        let rss = peak_rss_mib();
        let big = format!("1 transaction of {} rows", thousands(rows));
        figures.push(streaming(
            big.clone(),
            "rows",
            rows,
            "mariadb-binlog --raw",
            times,
            None,
        ));
        let times = abba(
            || binlog(&opts, &file, true),
            || binlog(&opts, &file, true),
            || rt.block_on(siphon(url, &db, Some(&file), rows)),
            || rt.block_on(siphon(url, &db, Some(&file), rows)),
        )?;
        figures.push(streaming(
            big,
            "rows",
            rows,
            "mariadb-binlog -v (rows decoded)",
            times,
            Target::new(1.0, 22),
        ));
        let times = small_transactions(&rt, &opts, (url, &db), small)?;
        figures.push(streaming(
            format!("{} single-row transactions", thousands(small)),
            "txns",
            small,
            "mariadb-binlog -v (rows decoded)",
            times,
            None,
        ));
        figures.push(snapshot(&rt, &opts, (url, &db), rows + small)?);
        Ok((figures, rss))
    })();
    let _ = sql(&opts, &format!("drop database if exists {db}"));
    result
}

/// The binlog file the server writes now.
fn current_file(opts: &mysql_async::Opts) -> anyhow::Result<String> {
    Ok(sql(opts, "show master status")?
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// `small` single-row transactions in a binlog file of their own, read by the reference
/// and by siphon.
fn small_transactions(
    rt: &tokio::runtime::Runtime,
    opts: &mysql_async::Opts,
    (url, db): (&str, &str),
    small: u64,
) -> anyhow::Result<Times> {
    let small_file = current_file(opts)?;
    // A compound statement, which the `mariadb` client would split at its semicolons.
    rt.block_on(async {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::new(opts.clone()).await?;
        conn.query_drop(format!(
            "begin not atomic for i in 1..{small} do \
             insert into {db}.orders (customer_id, city, amount, status, note) \
             values (i, 'Oslo', i / 100, 'paid', md5(i)); end for; end"
        ))
        .await?;
        conn.disconnect().await
    })?;
    sql(opts, "flush binary logs")?;
    abba(
        || binlog(opts, &small_file, true),
        || binlog(opts, &small_file, true),
        || rt.block_on(siphon(url, db, Some(&small_file), small)),
        || rt.block_on(siphon(url, db, Some(&small_file), small)),
    )
}

/// The snapshot of the table's `table_rows` rows, beside a full scan.
fn snapshot(
    rt: &tokio::runtime::Runtime,
    opts: &mysql_async::Opts,
    (url, db): (&str, &str),
    table_rows: u64,
) -> anyhow::Result<Figure> {
    let scan = || -> anyhow::Result<Duration> {
        let started = Instant::now();
        let status = client(opts)
            .args(["-N", "--quick", db, "-e", "select * from orders"])
            .stdout(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "the full scan failed");
        Ok(started.elapsed())
    };
    let (reference, ours) = abba(
        scan,
        scan,
        || rt.block_on(siphon(url, db, None, table_rows)),
        || rt.block_on(siphon(url, db, None, table_rows)),
    )?;
    Ok(Figure {
        what: "MariaDB snapshot".into(),
        workload: format!("{} rows", thousands(table_rows)),
        measure: Measure::Rates(Rates::timed(
            "rows",
            "full scan (mariadb --quick, SELECT *)",
            table_rows,
            &ours,
            &reference,
        )),
        target: Target::new(0.8, 22),
    })
}

/// The reference's two times and siphon's, as [`abba`] returns them.
type Times = ([Duration; 2], [Duration; 2]);
