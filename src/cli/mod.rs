//! The command line: `siphon run | check | status | replay | log | snapshot`.

mod check;
mod client;
mod log;
mod replay;
mod run;
mod snapshot;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::config::{Config, ConfigError};

/// siphon: change data capture from PostgreSQL and MySQL into a durable change log, applied
/// idempotently to caches, search indexes and warehouses.
#[derive(Debug, Parser)]
#[command(name = "siphon", version, about, long_about = None, after_help = "\
Start with `siphon check --config siphon.toml`, then `siphon run --config siphon.toml`.
`siphon status` shows what a running daemon (or its data directory) holds.
Logs go to standard error; RUST_LOG sets the level, SIPHON_LOG_FORMAT=json makes them JSON.")]
pub struct Cli {
    /// The configuration file (TOML). Every key can be overridden with SIPHON__KEY__PATH.
    #[arg(
        long,
        short,
        global = true,
        env = "SIPHON_CONFIG",
        default_value = "siphon.toml"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: every pipeline's source, change log and sinks, until SIGINT/SIGTERM.
    Run,
    /// Check the configuration; with --connect, also reach every source and sink.
    Check {
        /// Also connect to every source and sink.
        #[arg(long)]
        connect: bool,
    },
    /// Show pipelines, log offsets, each sink's cursor, lag and last error.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild a derived store by re-applying the change log from an offset.
    ///
    /// Through the running daemon's admin API when it is up (the sink pauses, replays, and goes
    /// on), otherwise offline from the data directory.
    Replay {
        /// The pipeline.
        pipeline: String,
        /// The sink to rebuild.
        sink: String,
        /// The offset to re-apply from (0: the whole log).
        #[arg(
            long,
            required_unless_present = "from_time",
            conflicts_with = "from_time"
        )]
        from: Option<u64>,
        /// Re-apply from the first record the log took at or after this time: RFC 3339
        /// (`2026-12-03T10:00:00Z`, UTC) or a span back from now (`90m`, `2h`).
        #[arg(long, value_parser = replay::parse_time)]
        from_time: Option<i64>,
        /// Clear what the sink owns in its store first.
        #[arg(long)]
        reset: bool,
    },
    /// Read the change log.
    #[command(subcommand)]
    Log(LogCommand),
    /// Snapshot tables again while streaming goes on (an incremental snapshot), through the
    /// running daemon; `siphon status` shows its progress, `--follow` a progress bar.
    Snapshot {
        /// The pipeline.
        pipeline: String,
        /// The tables, as schema.table (PostgreSQL) or database.table (MySQL/MariaDB).
        #[arg(required_unless_present_any = ["stop", "pause", "resume"])]
        tables: Vec<siphon_core::TableName>,
        /// Show the snapshot's progress until no table is left.
        #[arg(long, conflicts_with_all = ["stop", "pause", "resume"])]
        follow: bool,
        /// Stop the running incremental snapshot: forget the tables left.
        #[arg(long, conflicts_with_all = ["tables", "pause", "resume"])]
        stop: bool,
        /// Pause it: no chunk is read until `--resume` (kept across restarts).
        #[arg(long, conflicts_with_all = ["tables", "stop", "resume"])]
        pause: bool,
        /// Resume a paused snapshot.
        #[arg(long, conflicts_with_all = ["tables", "stop", "pause"])]
        resume: bool,
    },
}

/// How `siphon log tail` prints events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TailFormat {
    /// Indented JSON with the record's offset, flags and key.
    Pretty,
    /// One compact Debezium envelope a line.
    Jsonl,
    /// The records Debezium would emit, one a line: `{"topic", "key", "value"}`, a tombstone
    /// after each delete, truncates skipped (Debezium's defaults).
    Records,
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Print events of a pipeline's log as pretty JSON.
    Tail {
        /// The pipeline.
        pipeline: String,
        /// The first offset to print (default: the last 10 records).
        #[arg(long)]
        from: Option<u64>,
        /// Keep printing new events as they are appended.
        #[arg(long, short)]
        follow: bool,
        /// `pretty`: each record with its offset, flags and key, as indented JSON; `jsonl`:
        /// each event's Debezium envelope on one line, ready for `jq`; `records`: topic, key
        /// and value as Debezium emits them, with tombstones.
        #[arg(long, value_enum, default_value_t = TailFormat::Pretty)]
        format: TailFormat,
        /// A Debezium handling mode for the values, as its connector property
        /// (`decimal.handling.mode=precise`, `time.precision.mode=adaptive`,
        /// `binary.handling.mode=hex`, `interval.handling.mode=numeric`); repeatable.
        #[arg(long, value_name = "PROPERTY=VALUE")]
        debezium: Vec<String>,
        /// Wrap keys and values as `{"schema", "payload"}` (Kafka Connect's JSON converter
        /// with `schemas.enable`), for `jsonl` and `records`.
        #[arg(long)]
        schemas: bool,
    },
    /// Size, offsets and segments of each pipeline's log.
    Stats,
}

/// Exit code for a bad configuration.
const EXIT_CONFIG: u8 = 2;

/// Runs the command line; the process exits with what this returns.
pub fn main() -> ExitCode {
    // `--version` names what this build holds; clap keeps the text for the process's life.
    let version: &'static str = Box::leak(
        format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            crate::kinds::Kinds::builtin().describe()
        )
        .into_boxed_str(),
    );
    let matches = Cli::command().version(version).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    crate::logging::init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Blocking tasks (file I/O) must not keep the process alive after the command is done.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => {
            if let Some(config_error) = e.downcast_ref::<ConfigError>() {
                eprintln!("error: {config_error}");
                return ExitCode::from(EXIT_CONFIG);
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = Config::load(&cli.config)?;
    match cli.command {
        Command::Run => run::run(config).await,
        Command::Check { connect } => check::check(&config, connect).await,
        Command::Status { json } => status::status(&config, json).await,
        Command::Replay {
            pipeline,
            sink,
            from,
            from_time,
            reset,
        } => {
            let start = match (from, from_time) {
                (Some(offset), _) => replay::Start::Offset(offset),
                (None, Some(time_ms)) => replay::Start::Time(time_ms),
                (None, None) => anyhow::bail!("replay: give --from or --from-time"),
            };
            replay::replay(&config, &pipeline, &sink, start, reset).await
        }
        Command::Log(LogCommand::Tail {
            pipeline,
            from,
            follow,
            format,
            debezium,
            schemas,
        }) => {
            log::tail(
                &config,
                &pipeline,
                from,
                follow,
                format,
                (&debezium, schemas),
            )
            .await
        }
        Command::Log(LogCommand::Stats) => log::stats(&config),
        Command::Snapshot {
            pipeline,
            tables,
            follow,
            stop,
            pause,
            resume,
        } => {
            let control = [(stop, "stop"), (pause, "pause"), (resume, "resume")]
                .into_iter()
                .find_map(|(set, action)| set.then_some(action));
            snapshot::run(&config, &pipeline, &tables, control, follow).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
