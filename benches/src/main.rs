//! siphon-bench: measures siphon against the physical reference of the same machine, in the
//! same run, and prints ratios (this machine is shared and noisy: absolute numbers drift,
//! ratios much less).
//!
//! `siphon-bench log`: appends to the file change log vs a raw sequential buffered write with
//! the same fsync cadence; replay of the log vs reading the same bytes raw.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use siphon_core::log::{LogReader, NewRecord};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLog, FileLogConfig, FsyncPolicy};

#[derive(Debug, Parser)]
#[command(about = "siphon's benchmarks against this machine's raw references")]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// The change log: append and replay vs raw file I/O.
    Log {
        /// Records per measurement.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Record sizes in bytes (value; the key is 16 bytes more).
        #[arg(long, value_delimiter = ',', default_values_t = [200usize, 2048])]
        sizes: Vec<usize>,
        /// Records per append batch (and per fsync with --fsync batch).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// fsync cadences to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [Fsync::Batch, Fsync::Never])]
        fsync: Vec<Fsync>,
        /// Repetitions; the median is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write (default: a temporary directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// The PostgreSQL source vs pg_recvlogical (streaming) and COPY (snapshot), on the
    /// workloads of ../shared/reference/pg_limit.sh.
    Pg {
        /// Rows of the single-transaction insert and of the snapshot table.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// One-row transactions.
        #[arg(long, default_value_t = 100_000)]
        txns: u64,
        /// Server URL (a database is created and dropped in it).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        url: String,
    },
    /// The PostgreSQL source into the Kafka log (a noida-db broker started here), with and
    /// without transactions, vs the file log and rdkafka's own produce loop of the same
    /// records.
    Kafka {
        /// Rows of the single-transaction insert.
        #[arg(long, default_value_t = 200_000)]
        rows: u64,
        /// Rounds, each running every side once (the order alternating); each needs three
        /// replication slots of the server's max_replication_slots.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Server URL (a database is created and dropped in it).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        url: String,
    },
    /// The MySQL/MariaDB source vs mariadb-binlog (streaming) and a full scan (snapshot), on
    /// the workload of ../shared/reference/mysql_limit.sh.
    Mysql {
        /// Rows of the single-transaction insert and of the snapshot table.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Single-row transactions of the small-transaction stream.
        #[arg(long, default_value_t = 20_000)]
        small: u64,
        /// Server URL (a database is created and dropped in it).
        #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
        url: String,
    },
    /// The Redis, Redis Streams, PostgreSQL and DuckDB sinks applying upserts from a warm
    /// log vs redis-benchmark (pipelined HSET, XADD) and COPY of the same rows.
    Sinks {
        /// Upserts (distinct keys).
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Records per sink batch.
        #[arg(long, default_value_t = 5000)]
        batch: usize,
        /// PostgreSQL server URL (a database is created and dropped in it).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        url: String,
        /// Redis URL (keys under `siphon-bench:`, removed afterwards).
        #[arg(long, default_value = "redis://127.0.0.1:6379")]
        redis: String,
        /// Which sinks to measure: redis, redis_stream, nats, rabbitmq (the machine's servers on
        /// their default ports), postgres, duckdb.
        #[arg(long, value_delimiter = ',', default_values_t = [String::from("redis"), String::from("redis_stream"), String::from("postgres"), String::from("duckdb")])]
        only: Vec<String>,
    },
    /// Read-your-writes latency: commit → the admin API's wait answering for the Redis sink,
    /// while pgbench -R loads the table (the daemon is the release `siphon` beside this
    /// binary).
    Wait {
        /// Background rates (pgbench -R, transactions per second) to measure at.
        #[arg(long, value_delimiter = ',', default_values_t = [1000u32, 2500, 5000])]
        rates: Vec<u32>,
        /// Seconds of load per rate.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// PostgreSQL server URL (a database is created and dropped in it).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        url: String,
        /// Redis URL (keys under `siphon-bench-wait:`, removed afterwards).
        #[arg(long, default_value = "redis://127.0.0.1:6379")]
        redis: String,
        /// The Redis sink's `linger` (default: the daemon's).
        #[arg(long)]
        linger: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Fsync {
    /// fsync after every batch.
    Batch,
    /// never fsync.
    Never,
}

impl std::fmt::Display for Fsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fsync::Batch => "batch",
            Fsync::Never => "never",
        })
    }
}

mod kafka;
mod mysql;
mod pg;
mod sinks;
mod wait;

/// The allocator the `siphon` binary uses, so that the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    match Args::parse().bench {
        Bench::Pg { rows, txns, url } => pg::run(&url, rows, txns)?,
        Bench::Kafka { rows, rounds, url } => kafka::run(&url, rows, rounds)?,
        Bench::Mysql { rows, small, url } => mysql::run(&url, rows, small)?,
        Bench::Wait {
            rates,
            seconds,
            url,
            redis,
            linger,
        } => wait::run(&url, &redis, &rates, seconds, linger.as_deref())?,
        Bench::Sinks {
            rows,
            batch,
            url,
            redis,
            only,
        } => sinks::run(&url, &redis, rows, batch, &only)?,
        Bench::Log {
            records,
            sizes,
            batch,
            fsync,
            runs,
            dir,
        } => {
            let tmp = tempfile::tempdir_in(dir.unwrap_or_else(std::env::temp_dir))?;
            println!(
                "| record | fsync | raw write rec/s | raw MB/s | log append rec/s | log MB/s | append ratio |"
            );
            println!("|---|---|---|---|---|---|---|");
            let mut replays = Vec::new();
            for &size in &sizes {
                for &policy in &fsync {
                    let raw = median(runs, || raw_write(tmp.path(), records, size, batch, policy))?;
                    let log = median(runs, || {
                        log_append(tmp.path(), records, size, batch, policy)
                    })?;
                    let bytes = (size + 16 + 29) as f64 * records as f64;
                    println!(
                        "| {size} B | {policy} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2}x |",
                        rate(records, raw),
                        bytes / raw.as_secs_f64() / 1e6,
                        rate(records, log),
                        bytes / log.as_secs_f64() / 1e6,
                        raw.as_secs_f64() / log.as_secs_f64(),
                    );
                }
                replays.push((
                    size,
                    median(runs, || raw_read(tmp.path()))?,
                    median(runs, || log_replay(tmp.path(), records))?,
                ));
            }
            println!(
                "\n| record | raw read rec/s | log replay rec/s | replay MB/s | replay ratio |"
            );
            println!("|---|---|---|---|---|");
            for (size, raw, replay) in replays {
                let bytes = (size + 16 + 29) as f64 * records as f64;
                println!(
                    "| {size} B | {:.0} | {:.0} | {:.1} | {:.2}x |",
                    rate(records, raw),
                    rate(records, replay),
                    bytes / replay.as_secs_f64() / 1e6,
                    raw.as_secs_f64() / replay.as_secs_f64(),
                );
            }
        }
    }
    Ok(())
}

fn rate(records: u64, d: Duration) -> f64 {
    records as f64 / d.as_secs_f64()
}

fn median(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let mut times = (0..runs.max(1))
        .map(|_| f())
        .collect::<anyhow::Result<Vec<_>>>()?;
    times.sort();
    Ok(times[times.len() / 2])
}

fn value(size: usize, i: u64) -> Vec<u8> {
    let mut v = vec![b'x'; size];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// The reference: the same bytes (framed records are `size + key + 29` bytes) written
/// sequentially through a buffer, fsynced with the same cadence.
fn raw_write(
    dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    policy: Fsync,
) -> anyhow::Result<Duration> {
    let path = dir.join("raw.bin");
    let _ = std::fs::remove_file(&path);
    let mut file = File::create(&path)?;
    let frame = size + 16 + 29;
    let mut buf = Vec::with_capacity(frame * batch);
    let started = Instant::now();
    let mut i = 0;
    while i < records {
        buf.clear();
        let n = (batch as u64).min(records - i);
        for j in 0..n {
            buf.extend_from_slice(&(i + j).to_le_bytes());
            buf.resize(buf.len() + frame - 8, b'x');
        }
        file.write_all(&buf)?;
        if let Fsync::Batch = policy {
            file.sync_data()?;
        }
        i += n;
    }
    Ok(started.elapsed())
}

fn raw_read(dir: &Path) -> anyhow::Result<Duration> {
    let mut file = File::open(dir.join("raw.bin"))?;
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut sum = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sum = sum.wrapping_add(u64::from(buf[n - 1]));
    }
    std::hint::black_box(sum);
    Ok(started.elapsed())
}

fn log_append(
    dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    policy: Fsync,
) -> anyhow::Result<Duration> {
    let path = dir.join("log");
    let _ = std::fs::remove_dir_all(&path);
    let config = FileLogConfig {
        fsync: match policy {
            Fsync::Batch => FsyncPolicy::Batch,
            Fsync::Never => FsyncPolicy::Never,
        },
        segment_size: ByteSize(256 << 20),
        ..FileLogConfig::default()
    };
    let log = FileLog::open(&path, config)?;
    let mut batch_records = Vec::with_capacity(batch);
    // Only the appends are timed: building the records is the caller's work.
    let mut elapsed = Duration::ZERO;
    let mut i = 0;
    while i < records {
        batch_records.clear();
        let n = (batch as u64).min(records - i);
        for j in 0..n {
            batch_records.push(NewRecord {
                key: (i + j).to_le_bytes().repeat(2),
                value: value(size, i + j),
                ..Default::default()
            });
        }
        let started = Instant::now();
        log.append_blocking(&batch_records)?;
        elapsed += started.elapsed();
        i += n;
    }
    Ok(elapsed)
}

fn log_replay(dir: &Path, records: u64) -> anyhow::Result<Duration> {
    let log = FileLog::open_read_only(dir.join("log"), FileLogConfig::default())?;
    let mut reader = log.file_reader(0)?;
    let started = Instant::now();
    let mut seen = 0u64;
    loop {
        let batch = reader.read_available(10_000)?;
        if batch.is_empty() {
            break;
        }
        seen += batch.len() as u64;
    }
    anyhow::ensure!(seen == records, "replayed {seen} of {records} records");
    Ok(started.elapsed())
}
