//! siphon-bench: measures siphon against the physical reference of the same machine, in the
//! same run, and prints ratios (this machine is shared and noisy: absolute numbers drift,
//! ratios much less). Each subcommand is one bench module returning [`figure::Figure`]s;
//! `siphon-bench all` runs them all, repeated, into one table (`all.rs`).

use clap::{Parser, Subcommand};

use crate::log::Fsync;

#[derive(Debug, Parser)]
#[command(about = "siphon's benchmarks against this machine's raw references")]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Every figure of the report in one run, each beside its reference, repeated --runs
    /// times: one table (every run, the spread, the target), written into BENCHMARKS.md's
    /// summary with --write.
    All(all::AllArgs),
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
        /// NATS URL (JetStream).
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// RabbitMQ URL.
        #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
        rabbitmq: String,
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
    /// Events through a chain of three transforms (a row filter, a keyed mask, a column
    /// rename) vs through none: decoding from a warm log and the stages, as a sink's reader.
    Transforms {
        /// Events.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// One kind of the three alone: filter_rows, mask or rename_columns.
        #[arg(long)]
        only: Option<String>,
    },
    /// Joined documents: a view's state built from a snapshot of `orders` orders (peak
    /// RSS), one customer with `fanout` orders renamed, and a steady update load, the last
    /// two next to PostgreSQL's own join for the same documents.
    Views {
        /// Orders in the state (three line items each).
        #[arg(long, default_value_t = 1_000_000)]
        orders: u64,
        /// Orders of the customer renamed.
        #[arg(long, default_value_t = 10_000)]
        fanout: u64,
        /// Updates of the steady load.
        #[arg(long, default_value_t = 20_000)]
        updates: u64,
        /// Server URL (a database is created and dropped in it).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        url: String,
    },
    /// Internal (`all`'s peak RSS): the PostgreSQL source alone in this process on `slot`
    /// until the log holds `records`; prints its peak RSS.
    #[command(hide = true)]
    RssChild {
        #[arg(long)]
        url: String,
        #[arg(long)]
        slot: String,
        #[arg(long)]
        records: u64,
        /// A snapshot (the slot made by the source) rather than the slot's backlog.
        #[arg(long)]
        snapshot: bool,
    },
}

mod all;
mod figure;
mod kafka;
mod log;
mod mysql;
mod pg;
mod rss;
mod sinks;
mod tools;
mod transforms;
mod views;
mod wait;

/// The allocator the `siphon` binary uses, so that the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // What the sources and sinks warn of (a retry, a stall) goes to stderr beside the figures
    // (librdkafka's own log is off: the bench's consumer reports each partition's end as an
    // error); RUST_LOG overrides it.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rdkafka=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Args::parse().bench {
        Bench::All(args) => all::run(&args)?,
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
            nats,
            rabbitmq,
            only,
        } => sinks::run(
            &sinks::Servers {
                postgres: url,
                redis,
                nats,
                rabbitmq,
            },
            rows,
            batch,
            &only,
        )?,
        Bench::Log {
            records,
            sizes,
            batch,
            fsync,
            runs,
            dir,
        } => {
            let tmp = tempfile::tempdir_in(dir.unwrap_or_else(std::env::temp_dir))?;
            log::print(&log::measure(
                tmp.path(),
                records,
                &sizes,
                batch,
                &fsync,
                runs,
            )?);
        }
        Bench::Transforms { rows, only } => {
            for f in transforms::measure(rows, only.as_deref())? {
                println!("{}", f.line());
            }
        }
        Bench::Views {
            orders,
            fanout,
            updates,
            url,
        } => {
            for f in views::measure(&url, orders, fanout, updates)? {
                println!("{}", f.line());
            }
        }
        Bench::RssChild {
            url,
            slot,
            records,
            snapshot,
        } => rss::child_main(&url, &slot, snapshot, records)?,
    }
    Ok(())
}
