//! The one list of kinds: every source, change log and sink this build can run. Adding a
//! kind is a crate that implements [`SourceKind`], [`LogKind`] or [`SinkKind`] and one line
//! in [`Kinds::builtin`]; the configuration, `siphon check` and `siphon --version` read the
//! list, and nothing else in the daemon names a kind.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use siphon_core::kind::{Kind, LogContext, LogKind, SinkKind, SourceKind, decode_position};
use siphon_core::log::ChangeLog;
use siphon_core::position::{PositionDecoder, SourcePoint, SourcePosition};
use siphon_core::sink::Sink;
use siphon_core::source::Source;

use crate::config::error::ConfigError;
use crate::config::error::deserialize;

/// The kinds a configuration may name, by part.
#[derive(Debug)]
pub struct Kinds {
    /// Source kinds.
    pub sources: Vec<Box<dyn Entry<dyn ConfiguredSource>>>,
    /// Log kinds; the first is the default (`[log]` without `kind`, or no `[log]`).
    pub logs: Vec<Box<dyn Entry<dyn ConfiguredLog>>>,
    /// Sink kinds.
    pub sinks: Vec<Box<dyn Entry<dyn ConfiguredSink>>>,
    /// Kinds this build was made without, and the Cargo feature that brings each back.
    pub missing: Vec<(&'static str, &'static str)>,
}

impl Kinds {
    /// Every kind of this build.
    pub fn builtin() -> Kinds {
        let mut sinks: Vec<Box<dyn Entry<dyn ConfiguredSink>>> = vec![
            sink::<siphon_sink_redis::RedisKind>(),
            sink::<siphon_sink_redis_stream::RedisStreamKind>(),
            sink::<siphon_sink_nats::NatsSinkKind>(),
            sink::<siphon_sink_rabbitmq::RabbitmqSinkKind>(),
            sink::<siphon_sink_http::HttpSinkKind>(),
            sink::<siphon_sink_elasticsearch::ElasticsearchKind>(),
            sink::<siphon_sink_postgres::PostgresSinkKind>(),
        ];
        #[cfg(feature = "duckdb")]
        sinks.push(sink::<siphon_sink_duckdb::DuckdbKind>());
        #[cfg(feature = "kafka")]
        sinks.push(sink::<siphon_sink_kafka::KafkaSinkKind>());
        sinks.extend([
            sink::<siphon_sink_file::StdoutKind>(),
            sink::<siphon_sink_file::FileKind>(),
        ]);
        // Without the kafka feature nothing is pushed (the fuzz crate builds siphon so).
        #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
        let mut logs: Vec<Box<dyn Entry<dyn ConfiguredLog>>> =
            vec![log::<siphon_log_file::FileLogKind>()];
        #[cfg(feature = "kafka")]
        logs.push(log::<siphon_log_kafka::KafkaLogKind>());
        let mut missing = Vec::new();
        if !cfg!(feature = "duckdb") {
            missing.push(("duckdb", "duckdb"));
        }
        if !cfg!(feature = "kafka") {
            missing.push(("kafka", "kafka"));
        }
        Kinds {
            sources: vec![
                source::<siphon_source_postgres::PostgresKind>(),
                source::<siphon_source_mysql::MysqlKind>(),
                source::<siphon_source_generator::GeneratorKind>(),
            ],
            logs,
            sinks,
            missing,
        }
    }

    /// What this build holds, for `siphon --version`: its kinds, each with its build note.
    pub fn describe(&self) -> String {
        fn names<C: ?Sized>(entries: &[Box<dyn Entry<C>>]) -> String {
            entries
                .iter()
                .map(|e| match e.build_note() {
                    Some(note) => format!("{} ({note})", e.name()),
                    None => e.name().to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
        format!(
            "sources: {}; logs: {}; sinks: {}; TLS: rustls",
            names(&self.sources),
            names(&self.logs),
            names(&self.sinks)
        )
    }
}

/// One kind in the list: its name, and how its table in the configuration becomes a
/// configured part `C` (the kind's settings, checked, ready to build).
pub trait Entry<C: ?Sized>: Named + Send + Sync + Debug {
    /// Reads and checks the kind's settings (the table without `kind`); errors name `key`.
    fn parse(&self, key: &str, settings: config::Value) -> Result<Box<C>, ConfigError>;

    /// For a source kind: the position of an event of `connector`, if it is the kind's.
    fn decode_position(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        let _ = (connector, bytes);
        None
    }
}

/// What the list says of every entry, whatever its part.
pub trait Named {
    /// `kind = "…"`.
    fn name(&self) -> &'static str;

    /// How this build holds it, for `--version`.
    fn build_note(&self) -> Option<&'static str>;
}

/// A configured source: its kind's settings, checked. It reads its connector's positions.
pub trait ConfiguredSource: PositionDecoder + Debug {
    /// The kind's name.
    fn kind(&self) -> &'static str;

    /// The source of pipeline `pipeline`.
    fn build(&self, pipeline: &str) -> Box<dyn Source>;

    /// A point of its database's change stream named by the read-your-writes API's `param`
    /// (see [`SourceKind::parse_point`]).
    fn parse_point(&self, param: &str, text: &str) -> Option<Result<SourcePoint, String>>;
}

/// A configured change log.
pub trait ConfiguredLog: Send + Sync + Debug {
    /// The kind's name.
    fn kind(&self) -> &'static str;

    /// The pipeline's log, for its writer.
    fn open(&self, ctx: &LogContext) -> siphon_core::Result<Arc<dyn ChangeLog>>;

    /// The log read-only beside its writer; `None` where none was made yet.
    fn open_existing(&self, ctx: &LogContext) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>>;

    /// Whether daemons other than its writer read it (see [`LogKind::SHARED`]).
    fn shared(&self) -> bool;

    /// Reaches what the log is kept in (see [`LogKind::check`]). Blocks.
    fn check(&self) -> siphon_core::Result<()>;

    /// What the log keeps, in words (see [`LogKind::retention`]).
    fn retention(&self) -> String;
}

/// A configured sink.
pub trait ConfiguredSink: Send + Sync + Debug {
    /// The kind's name.
    fn kind(&self) -> &'static str;

    /// Sink `sink` of pipeline `pipeline`, ready to be opened.
    fn build(&self, pipeline: &str, sink: &str) -> siphon_core::Result<Box<dyn Sink>>;
}

/// The list entry of a source kind.
pub fn source<K: SourceKind>() -> Box<dyn Entry<dyn ConfiguredSource>> {
    Box::new(Registered::<K>(PhantomData))
}

/// The list entry of a log kind.
pub fn log<K: LogKind>() -> Box<dyn Entry<dyn ConfiguredLog>> {
    Box::new(Registered::<K>(PhantomData))
}

/// The list entry of a sink kind.
pub fn sink<K: SinkKind>() -> Box<dyn Entry<dyn ConfiguredSink>> {
    Box::new(Registered::<K>(PhantomData))
}

/// A kind in the list.
struct Registered<K>(PhantomData<K>);

impl<K: Kind> Debug for Registered<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kind {}", K::NAME)
    }
}

/// A kind's checked settings.
struct Configured<K: Kind>(K::Config);

impl<K: Kind> Debug for Configured<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple(K::NAME).field(&self.0).finish()
    }
}

impl<K: Kind> Registered<K> {
    fn configured(&self, key: &str, settings: config::Value) -> Result<Configured<K>, ConfigError> {
        let config: K::Config = deserialize(key, settings)?;
        K::validate(&config).map_err(|m| ConfigError::new(key, m))?;
        Ok(Configured(config))
    }
}

impl<K: Kind> Named for Registered<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn build_note(&self) -> Option<&'static str> {
        K::build_note()
    }
}

impl<K: SourceKind> Entry<dyn ConfiguredSource> for Registered<K> {
    fn parse(
        &self,
        key: &str,
        settings: config::Value,
    ) -> Result<Box<dyn ConfiguredSource>, ConfigError> {
        Ok(Box::new(self.configured(key, settings)?))
    }

    fn decode_position(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        decode_position::<K>(connector, bytes)
    }
}

impl<K: LogKind> Entry<dyn ConfiguredLog> for Registered<K> {
    fn parse(
        &self,
        key: &str,
        settings: config::Value,
    ) -> Result<Box<dyn ConfiguredLog>, ConfigError> {
        Ok(Box::new(self.configured(key, settings)?))
    }
}

impl<K: SinkKind> Entry<dyn ConfiguredSink> for Registered<K> {
    fn parse(
        &self,
        key: &str,
        settings: config::Value,
    ) -> Result<Box<dyn ConfiguredSink>, ConfigError> {
        Ok(Box::new(self.configured(key, settings)?))
    }
}

impl<K: SourceKind> ConfiguredSource for Configured<K> {
    fn kind(&self) -> &'static str {
        K::NAME
    }

    fn build(&self, pipeline: &str) -> Box<dyn Source> {
        K::build(&self.0, pipeline)
    }

    fn parse_point(&self, param: &str, text: &str) -> Option<Result<SourcePoint, String>> {
        K::parse_point(param, text)
    }
}

impl<K: SourceKind> PositionDecoder for Configured<K> {
    fn decode(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        decode_position::<K>(connector, bytes)
    }
}

/// Every source kind of the list reads its own connector's positions.
impl PositionDecoder for Kinds {
    fn decode(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        self.sources
            .iter()
            .find_map(|entry| entry.decode_position(connector, bytes))
    }
}

impl<K: LogKind> ConfiguredLog for Configured<K> {
    fn kind(&self) -> &'static str {
        K::NAME
    }

    fn open(&self, ctx: &LogContext) -> siphon_core::Result<Arc<dyn ChangeLog>> {
        K::open(&self.0, ctx)
    }

    fn open_existing(&self, ctx: &LogContext) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>> {
        K::open_existing(&self.0, ctx)
    }

    fn shared(&self) -> bool {
        K::SHARED
    }

    fn check(&self) -> siphon_core::Result<()> {
        K::check(&self.0)
    }

    fn retention(&self) -> String {
        K::retention(&self.0)
    }
}

impl<K: SinkKind> ConfiguredSink for Configured<K> {
    fn kind(&self) -> &'static str {
        K::NAME
    }

    fn build(&self, pipeline: &str, sink: &str) -> siphon_core::Result<Box<dyn Sink>> {
        K::build(&self.0, pipeline, sink)
    }
}
