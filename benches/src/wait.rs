//! `siphon-bench wait`: read-your-writes latency under load. The daemon (the release `siphon`
//! binary beside this one) streams a PostgreSQL table into Redis while `pgbench -R RATE`
//! updates it; a probe commits an update of its own row, reads `pg_current_wal_lsn()` and
//! calls the admin API's wait for the Redis sink until it answers 200. Reported per rate: the
//! rate pgbench sustained, and p50/p90/p99/max of the probe's commit → applied time (from the
//! commit's return to the wait's answer).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::figure::{Figure, Latency, Measure, Target, thousands};
use crate::pg::{psql, with_db};
use crate::tools;

const DB: &str = "siphon_bench_wait";
const ROWS: u32 = 10_000;

/// A daemon run for one measurement; killed when dropped.
struct Daemon {
    child: Child,
    admin: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// The tools this bench runs.
pub const TOOLS: &[tools::Tool] = &[tools::PSQL, tools::PGBENCH, tools::REDIS_CLI];

/// The release `siphon` binary beside this one; fails naming the build that makes it.
pub fn daemon_binary() -> anyhow::Result<PathBuf> {
    let siphon = std::env::current_exe()?.with_file_name("siphon");
    anyhow::ensure!(
        siphon.exists(),
        "{} is missing: cargo build --release --bin siphon (with the same CARGO_TARGET_DIR)",
        siphon.display()
    );
    Ok(siphon)
}

pub fn run(
    url: &str,
    redis: &str,
    rates: &[u32],
    seconds: u64,
    linger: Option<&str>,
) -> anyhow::Result<()> {
    tools::require(TOOLS)?;
    let siphon = daemon_binary()?;
    println!(
        "| pgbench -R (tx/s asked) | sustained tx/s | probes | p50 ms | p90 ms | p99 ms | max ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &rate in rates {
        let figure = measure(url, redis, &siphon, rate, seconds, linger)?;
        if let Measure::Latency(l) = &figure.measure {
            println!(
                "| {rate} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n\n  {}\n",
                l.sustained.map_or("?".into(), |s| format!("{s:.0}")),
                l.probes,
                l.p50_ms,
                l.p90_ms,
                l.p99_ms,
                l.max_ms,
                l.split
            );
        }
    }
    Ok(())
}

/// The target the issue set for a rate: p99 ≤ 10 ms at 5,000 tx/s, ≤ 5 ms at 1,000.
fn target(rate: u32) -> Option<Target> {
    match rate {
        1000 => Target::new(5.0, 22),
        5000 => Target::new(10.0, 22),
        _ => None,
    }
}

/// The latency at `rate` tx/s of background load, `seconds` long, with the daemon `siphon`.
pub fn measure(
    url: &str,
    redis: &str,
    siphon: &Path,
    rate: u32,
    seconds: u64,
    linger: Option<&str>,
) -> anyhow::Result<Figure> {
    psql(url, &format!("drop database if exists {DB} with (force)"))?;
    let _ = psql(
        url,
        &format!(
            "select pg_drop_replication_slot('{DB}') from pg_replication_slots where slot_name = '{DB}'"
        ),
    );
    psql(url, &format!("create database {DB}"))?;
    let db_url = with_db(url, DB);
    psql(
        &db_url,
        &format!(
            "create table accounts (id int primary key, v bigint not null);
             insert into accounts select g, 0 from generate_series(0, {ROWS}) g"
        ),
    )?;
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = dir.path().join("siphon.toml");
    std::fs::write(
        &config,
        format!(
            r#"data_dir = "{data}"
[admin]
listen = "127.0.0.1:{port}"
[pipelines.bench.source]
kind = "postgres"
url = "{db_url}"
tables = ["public.accounts"]
slot = "{DB}"
[pipelines.bench.sinks.cache]
kind = "redis"
url = "{redis}"
prefix = "siphon-bench-wait:"
{linger}
"#,
            data = dir.path().join("data").display(),
            linger = linger.map_or(String::new(), |l| format!("linger = \"{l}\""))
        ),
    )?;
    let log = std::fs::File::create(dir.path().join("daemon.log"))?;
    let daemon = Daemon {
        child: Command::new(siphon)
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
        admin: format!("127.0.0.1:{port}"),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(probe(&daemon, &db_url, rate, seconds));
    drop(daemon);
    let _ = psql(url, &format!("select pg_drop_replication_slot('{DB}')"));
    psql(url, &format!("drop database if exists {DB} with (force)"))?;
    let _ = Command::new("redis-cli")
        .args(["-u", redis, "eval", "for _, k in ipairs(redis.call('keys', 'siphon-bench-wait:*')) do redis.call('del', k) end", "0"])
        .output();
    result
}

async fn probe(daemon: &Daemon, db_url: &str, rate: u32, seconds: u64) -> anyhow::Result<Figure> {
    let http = reqwest::Client::new();
    snapshot_applied(&http, daemon).await?;
    let load = load(db_url, rate, seconds)?;
    let (client, connection) = tokio_postgres::connect(db_url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let until = Instant::now() + Duration::from_secs(seconds.saturating_sub(3));
    let mut parts: Vec<Parts> = Vec::new();
    let mut n = 0i64;
    while Instant::now() < until {
        n += 1;
        parts.push(one_probe(&client, &http, daemon, n).await?);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let out = load.wait_with_output().await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let sustained = text
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse::<f64>().ok());
    figure(parts, rate, sustained)
}

/// Waits until the daemon's cache sink has applied the snapshot.
async fn snapshot_applied(http: &reqwest::Client, daemon: &Daemon) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status: serde_json::Value = match http
            .get(format!("http://{}/api/pipelines", daemon.admin))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        if status[0]["sinks"]["cache"]["committed_offset"].as_u64() > Some(u64::from(ROWS)) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the daemon never applied its snapshot"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// pgbench updating random rows at `rate` transactions a second for `seconds`.
fn load(db_url: &str, rate: u32, seconds: u64) -> anyhow::Result<tokio::process::Child> {
    let mut script = tempfile::NamedTempFile::new()?;
    writeln!(
        script,
        "\\set id random(1, {ROWS})\nupdate accounts set v = v + 1 where id = :id;"
    )?;
    Ok(tokio::process::Command::new("pgbench")
        .args([
            "-n",
            "-c",
            "8",
            "-j",
            "2",
            "-R",
            &rate.to_string(),
            "-T",
            &seconds.to_string(),
        ])
        .arg("-f")
        .arg(script.path())
        .arg(db_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

/// Probe `n`: a commit, its LSN, and the wait for the cache sink to hold it.
async fn one_probe(
    client: &tokio_postgres::Client,
    http: &reqwest::Client,
    daemon: &Daemon,
    n: i64,
) -> anyhow::Result<Parts> {
    client
        .execute("update accounts set v = $1 where id = 0", &[&n])
        .await?;
    let committed = Instant::now();
    let lsn: String = client
        .query_one("select pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let lsn_read = committed.elapsed();
    let resp = http
        .get(format!(
            "http://{}/api/pipelines/bench/sinks/cache/wait?lsn={lsn}&timeout=10s",
            daemon.admin
        ))
        .send()
        .await?;
    anyhow::ensure!(
        resp.status().as_u16() == 200,
        "a wait answered {}",
        resp.status()
    );
    let total = committed.elapsed();
    let body: serde_json::Value = resp.json().await?;
    let us = |key: &str| Duration::from_micros(body[key].as_u64().unwrap_or_default());
    let (source, sink) = (us("source_us"), us("sink_us"));
    Ok(Parts {
        total,
        lsn: lsn_read,
        source,
        sink,
        http: total.saturating_sub(lsn_read + source + sink),
    })
}

/// The probes' latency figure at `rate`, with where the median and the slowest 1% spent it.
fn figure(mut parts: Vec<Parts>, rate: u32, sustained: Option<f64>) -> anyhow::Result<Figure> {
    anyhow::ensure!(!parts.is_empty(), "no probe ran");
    let mut times: Vec<Duration> = parts.iter().map(|p| p.total).collect();
    times.sort();
    let ms = |q: f64| {
        let i = ((times.len() as f64 - 1.0) * q).round() as usize;
        times[i].as_secs_f64() * 1000.0
    };
    // Where the slowest 1% of the probes spent their time, against the median probe's.
    parts.sort_by_key(|p| p.total);
    let tail = &parts[(parts.len() * 99 / 100).min(parts.len() - 1)..];
    let mean = |pick: fn(&Parts) -> Duration, of: &[Parts]| {
        of.iter().map(pick).sum::<Duration>().as_secs_f64() * 1000.0 / of.len() as f64
    };
    let median = std::slice::from_ref(&parts[parts.len() / 2]);
    let split = |of: &[Parts]| {
        format!(
            "lsn read {:.2}, source {:.2}, sink {:.2}, HTTP and the rest {:.2}",
            mean(|p| p.lsn, of),
            mean(|p| p.source, of),
            mean(|p| p.sink, of),
            mean(|p| p.http, of)
        )
    };
    Ok(Figure {
        what: "commit → Redis, the wait answering".into(),
        workload: format!("at {} tx/s of pgbench -R", thousands(u64::from(rate))),
        measure: Measure::Latency(Latency {
            rate,
            sustained,
            probes: times.len(),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            max_ms: ms(1.0),
            split: format!(
                "ms, median probe: {}; slowest 1% ({} probes), mean: {}",
                split(median),
                tail.len(),
                split(tail)
            ),
        }),
        target: target(rate),
    })
}

/// Where one probe's time went: reading the LSN after the commit, the source reading past
/// it into the log (durably), the sink committing it to Redis, and the HTTP call around it.
struct Parts {
    total: Duration,
    lsn: Duration,
    source: Duration,
    sink: Duration,
    http: Duration,
}
