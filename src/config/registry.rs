//! The registry of component kinds: from `kind = "…"` and the rest of the table to typed
//! settings, and from settings to running components.

use std::path::Path;
use std::sync::Arc;

use siphon_core::log::ChangeLog;
use siphon_core::sink::Sink;
use siphon_core::source::Source;
use siphon_log_file::FileLogConfig;
#[cfg(feature = "duckdb")]
use siphon_sink_duckdb::{DuckdbSink, DuckdbSinkConfig};
use siphon_sink_elasticsearch::{ElasticsearchSink, ElasticsearchSinkConfig};
use siphon_sink_file::{FileSinkConfig, JsonLinesSink, StdoutSinkConfig};
use siphon_sink_postgres::{PostgresSink, PostgresSinkConfig};
use siphon_sink_redis::{RedisSink, RedisSinkConfig};
use siphon_source_generator::{GeneratorConfig, GeneratorSource};
use siphon_source_mysql::{MysqlConfig, MysqlSource};
use siphon_source_postgres::{PostgresConfig, PostgresSource};

use super::ConfigError;
use super::error::deserialize;

/// Takes `kind` out of a component's table; the rest is the kind's settings.
fn split_kind(
    key: &str,
    value: config::Value,
    default: Option<&str>,
    allowed: &[&str],
) -> Result<(String, config::Value), ConfigError> {
    let origin = value.origin().map(str::to_owned);
    let mut table = value
        .into_table()
        .map_err(|_| ConfigError::new(key, "must be a table"))?;
    let kind = match table.remove("kind") {
        Some(k) => k.into_string().map_err(|_| {
            ConfigError::new(
                format!("{key}.kind"),
                format!("must be a string, one of: {}", allowed.join(", ")),
            )
        })?,
        None => match default {
            Some(d) => d.to_owned(),
            None => {
                return Err(ConfigError::new(
                    format!("{key}.kind"),
                    format!(
                        "required key `kind` is missing; one of: {}",
                        allowed.join(", ")
                    ),
                ));
            }
        },
    };
    if !allowed.contains(&kind.as_str()) {
        return Err(ConfigError::new(
            format!("{key}.kind"),
            format!("unknown kind {kind:?}; allowed: {}", allowed.join(", ")),
        ));
    }
    Ok((
        kind,
        config::Value::new(origin.as_ref(), config::ValueKind::Table(table)),
    ))
}

/// What this build holds, for `siphon --version`: its source and sink kinds, and how the
/// DuckDB sink is linked.
pub fn build_features() -> String {
    let duckdb = if cfg!(feature = "duckdb-bundled") {
        Some("duckdb (bundled)")
    } else if cfg!(feature = "duckdb") {
        Some("duckdb (prebuilt libduckdb.so)")
    } else {
        None
    };
    let sinks: Vec<&str> = SinkSpec::KINDS
        .iter()
        .filter_map(|&kind| if kind == "duckdb" { duckdb } else { Some(kind) })
        .collect();
    format!(
        "sources: {}; sinks: {}; TLS: rustls",
        SourceSpec::KINDS.join(", "),
        sinks.join(", ")
    )
}

/// A configured source.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// `kind = "generator"`.
    Generator(GeneratorConfig),
    /// `kind = "postgres"`.
    Postgres(PostgresConfig),
    /// `kind = "mysql"` (MySQL and MariaDB).
    Mysql(MysqlConfig),
}

impl SourceSpec {
    const KINDS: &[&str] = &["postgres", "mysql", "generator"];

    pub(super) fn parse(key: &str, value: config::Value) -> Result<Self, ConfigError> {
        let (kind, rest) = split_kind(key, value, None, Self::KINDS)?;
        match kind.as_str() {
            "generator" => {
                let c: GeneratorConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SourceSpec::Generator(c))
            }
            "postgres" => {
                let c: PostgresConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SourceSpec::Postgres(c))
            }
            "mysql" => {
                let c: MysqlConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SourceSpec::Mysql(c))
            }
            _ => unreachable!("split_kind checked the kind"),
        }
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Generator(_) => "generator",
            SourceSpec::Postgres(_) => "postgres",
            SourceSpec::Mysql(_) => "mysql",
        }
    }

    /// A source for pipeline `pipeline`.
    pub fn build(&self, pipeline: &str) -> Box<dyn Source> {
        match self {
            SourceSpec::Generator(c) => Box::new(GeneratorSource::new(pipeline, c.clone())),
            SourceSpec::Postgres(c) => Box::new(PostgresSource::new(pipeline, c.clone())),
            SourceSpec::Mysql(c) => Box::new(MysqlSource::new(pipeline, c.clone())),
        }
    }
}

/// A configured change log.
#[derive(Debug, Clone, PartialEq)]
pub enum LogSpec {
    /// `kind = "file"` (the default).
    File(FileLogConfig),
}

impl LogSpec {
    const KINDS: &[&str] = &["file"];

    pub(super) fn parse(key: &str, value: Option<config::Value>) -> Result<Self, ConfigError> {
        let Some(value) = value else {
            return Ok(LogSpec::File(FileLogConfig::default()));
        };
        let (kind, rest) = split_kind(key, value, Some("file"), Self::KINDS)?;
        match kind.as_str() {
            "file" => {
                let c: FileLogConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(LogSpec::File(c))
            }
            _ => unreachable!("split_kind checked the kind"),
        }
    }

    /// Opens the pipeline's log in `dir` for its one writer (the daemon).
    pub fn open(&self, dir: &Path) -> siphon_core::Result<Arc<dyn ChangeLog>> {
        match self {
            LogSpec::File(c) => siphon_log_file::open_log(dir, c),
        }
    }

    /// Opens the log in `dir` read-only, beside its writer; `None` where none was made yet.
    pub fn open_existing(&self, dir: &Path) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>> {
        match self {
            LogSpec::File(c) => siphon_log_file::open_existing_log(dir, c),
        }
    }
}

/// A configured sink.
#[derive(Debug, Clone, PartialEq)]
pub enum SinkSpec {
    /// `kind = "stdout"`.
    Stdout(StdoutSinkConfig),
    /// `kind = "file"`.
    File(FileSinkConfig),
    /// `kind = "redis"`.
    Redis(RedisSinkConfig),
    /// `kind = "postgres"`.
    Postgres(PostgresSinkConfig),
    /// `kind = "elasticsearch"` (also OpenSearch).
    Elasticsearch(ElasticsearchSinkConfig),
    /// `kind = "duckdb"` (Cargo feature `duckdb`, on by default).
    #[cfg(feature = "duckdb")]
    Duckdb(DuckdbSinkConfig),
}

impl SinkSpec {
    const KINDS: &[&str] = &[
        "redis",
        "elasticsearch",
        "postgres",
        "duckdb",
        "stdout",
        "file",
    ];

    pub(super) fn parse(key: &str, value: config::Value) -> Result<Self, ConfigError> {
        let (kind, rest) = split_kind(key, value, None, Self::KINDS)?;
        match kind.as_str() {
            "stdout" => Ok(SinkSpec::Stdout(deserialize(key, rest)?)),
            "file" => Ok(SinkSpec::File(deserialize(key, rest)?)),
            "redis" => {
                let c: RedisSinkConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SinkSpec::Redis(c))
            }
            "postgres" => {
                let c: PostgresSinkConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SinkSpec::Postgres(c))
            }
            "elasticsearch" => {
                let c: ElasticsearchSinkConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SinkSpec::Elasticsearch(c))
            }
            #[cfg(feature = "duckdb")]
            "duckdb" => {
                let c: DuckdbSinkConfig = deserialize(key, rest)?;
                c.validate().map_err(|m| ConfigError::new(key, m))?;
                Ok(SinkSpec::Duckdb(c))
            }
            #[cfg(not(feature = "duckdb"))]
            "duckdb" => Err(ConfigError::new(
                format!("{key}.kind"),
                "this siphon was built without DuckDB (Cargo feature `duckdb`); rebuild with it",
            )),
            _ => unreachable!("split_kind checked the kind"),
        }
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkSpec::Stdout(_) => "stdout",
            SinkSpec::File(_) => "file",
            SinkSpec::Redis(_) => "redis",
            SinkSpec::Postgres(_) => "postgres",
            SinkSpec::Elasticsearch(_) => "elasticsearch",
            #[cfg(feature = "duckdb")]
            SinkSpec::Duckdb(_) => "duckdb",
        }
    }

    /// Sink `sink` of pipeline `pipeline`, ready to be opened.
    pub fn build(&self, pipeline: &str, sink: &str) -> siphon_core::Result<Box<dyn Sink>> {
        Ok(match self {
            SinkSpec::Stdout(c) => Box::new(JsonLinesSink::stdout(c)),
            SinkSpec::File(c) => Box::new(JsonLinesSink::files(c.clone())?),
            SinkSpec::Redis(c) => Box::new(RedisSink::new(c.clone(), pipeline, sink)?),
            SinkSpec::Postgres(c) => Box::new(PostgresSink::new(c.clone(), pipeline, sink)?),
            SinkSpec::Elasticsearch(c) => {
                Box::new(ElasticsearchSink::new(c.clone(), pipeline, sink)?)
            }
            #[cfg(feature = "duckdb")]
            SinkSpec::Duckdb(c) => Box::new(DuckdbSink::new(c.clone(), pipeline, sink)?),
        })
    }
}
