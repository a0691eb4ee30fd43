//! The daemon's configuration: TOML read with the `config` crate, every key overridable from
//! the environment (`SIPHON__PIPELINES__SHOP__SOURCE__URL=…`), checked into typed settings.
//!
//! Errors name the key with its full path (`pipelines.shop.sinks.cache.batch_size`), the bad
//! value, and what is allowed.

pub(crate) mod error;
mod registry;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use siphon_core::Secret;
use siphon_core::kind::LogContext;
use siphon_core::sink::routing::Routing;
use siphon_core::sink::stage::Stages;
use siphon_core::units::HumanDuration;
use siphon_transform::TransformConfig;
use siphon_view::ViewConfig;

use crate::kinds::Kinds;

pub use error::ConfigError;
pub use registry::{LogSpec, SinkSpec, SourceSpec};

/// Prefix of environment overrides: `SIPHON__DATA_DIR`, `SIPHON__PIPELINES__X__…`.
pub const ENV_PREFIX: &str = "SIPHON";

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where logs, cursors and checkpoints live.
    pub data_dir: PathBuf,
    /// Longest a graceful shutdown may take before siphon exits anyway.
    pub shutdown_timeout: Duration,
    /// The admin HTTP API.
    pub admin: AdminConfig,
    /// Pipelines by name.
    pub pipelines: BTreeMap<String, PipelineConfig>,
}

/// The admin HTTP API (`[admin]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Whether to serve the admin API.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Address to listen on; loopback by default, since the API can pause and replay sinks.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Bearer token required on every endpoint but `/health`, `/ready` and the console's
    /// page. Prefer `token_file` or the environment (`SIPHON__ADMIN__TOKEN`).
    #[serde(default)]
    pub token: Option<Secret>,
    /// File holding the bearer token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Host names a request may name in its `Host` header besides IP addresses and
    /// `localhost` (the names the API is reached by, e.g. behind a proxy). Other names are
    /// refused, so that a web page cannot reach the API through DNS rebinding.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Serve the API beyond loopback with no token. Whoever reaches the port could then
    /// pause, replay and reset sinks, so siphon refuses to start that way unless told so here.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Serve `/metrics` without the token, for a scraper that cannot send one.
    #[serde(default)]
    pub metrics_public: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            listen: default_listen(),
            token: None,
            token_file: None,
            allowed_hosts: Vec::new(),
            allow_unauthenticated: false,
            metrics_public: false,
        }
    }
}

impl AdminConfig {
    /// The bearer token, read from `token_file` when set there.
    pub fn resolved_token(&self) -> Result<Option<Secret>, ConfigError> {
        match (&self.token, &self.token_file) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                "admin.token_file",
                "set either admin.token or admin.token_file, not both",
            )),
            (Some(t), None) => Ok(Some(t.clone())),
            (None, Some(path)) => Secret::from_file(path).map(Some).map_err(|e| {
                ConfigError::new(
                    "admin.token_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            }),
            (None, None) => Ok(None),
        }
    }

    /// Whether the API is served open to more than this machine: beyond loopback, no token.
    pub fn open_beyond_loopback(&self, token: Option<&Secret>) -> bool {
        self.enabled && token.is_none() && !self.listen.ip().is_loopback()
    }

    /// The token, after refusing an API open beyond loopback that the user did not ask for
    /// in so many words (as Redis's protected mode refuses it).
    fn checked_token(&self) -> Result<Option<Secret>, ConfigError> {
        let token = self.resolved_token()?;
        if self.open_beyond_loopback(token.as_ref()) && !self.allow_unauthenticated {
            return Err(ConfigError::new(
                "admin.listen",
                format!(
                    "{} is reachable beyond this machine and no token is set: whoever reaches \
                     it could pause, replay and reset sinks. Set admin.token or \
                     admin.token_file (or SIPHON__ADMIN__TOKEN), listen on 127.0.0.1, or set \
                     admin.allow_unauthenticated = true to serve it open",
                    self.listen
                ),
            ));
        }
        Ok(token)
    }
}

fn yes() -> bool {
    true
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8083))
}

/// One pipeline: a source, its change log, and the sinks that follow it.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Where changes come from; `None` for a daemon that runs the pipeline's sinks only,
    /// reading a log another daemon writes (a log several processes read: Kafka).
    pub source: Option<SourceSpec>,
    /// The change log.
    pub log: LogSpec,
    /// Sinks by name.
    pub sinks: BTreeMap<String, SinkConfig>,
    /// Transforms every sink's events pass, before the sink's own (`[[pipelines.NAME.transforms]]`).
    pub transforms: Vec<TransformConfig>,
    /// Joined documents by name (`[pipelines.NAME.views.VIEW]`), which a sink takes with
    /// `view = "VIEW"`.
    pub views: BTreeMap<String, ViewConfig>,
}

impl PipelineConfig {
    /// The source's kind, or `none` for a pipeline whose source runs elsewhere.
    pub fn source_kind(&self) -> &'static str {
        self.source.as_ref().map_or("none", SourceSpec::kind)
    }

    /// What reads the positions of the pipeline's events: its source's kind, or every source
    /// kind of this build where the source runs elsewhere.
    pub fn positions(&self) -> std::sync::Arc<dyn siphon_core::position::PositionDecoder> {
        match &self.source {
            Some(source) => source.positions(),
            None => std::sync::Arc::new(Kinds::builtin()),
        }
    }

    /// The source, or an error saying that this pipeline runs its sinks only.
    pub fn source(&self, pipeline: &str) -> anyhow::Result<&SourceSpec> {
        self.source.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "pipeline {pipeline} has no [source] here: this configuration runs its sinks only"
            )
        })
    }
}

/// A sink: its kind's settings and the settings every sink has.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The kind and its settings.
    pub spec: SinkSpec,
    /// Batching and retry settings.
    pub delivery: DeliveryConfig,
}

impl SinkConfig {
    /// What this sink's events pass: its tables and columns, then the pipeline's transforms
    /// (`pipeline`), then its own.
    pub fn stages(&self, pipeline: &[TransformConfig]) -> Result<Stages, String> {
        let routing = self.delivery.routing()?;
        let built = |t: &[TransformConfig]| {
            siphon_transform::build(t, "transforms").map_err(|e| e.to_string())
        };
        Ok(routing
            .stages()
            .then(built(pipeline)?)
            .then(built(&self.delivery.transforms)?))
    }
}

/// Settings every sink has, next to `kind`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// Most records applied in one batch.
    pub batch_size: usize,
    /// How long to wait for more records before applying a batch that is not full.
    pub linger: HumanDuration,
    /// Longest pause between two retries after a transient error (the backoff doubles from
    /// 100ms up to this).
    pub max_backoff: HumanDuration,
    /// Tables this sink takes: "schema.table", "schema.*" or "*"; empty: every table.
    pub tables: Vec<String>,
    /// Columns this sink leaves out: "column" (in every table) or "schema.table.column".
    pub exclude_columns: Vec<String>,
    /// What the sink's events pass after `tables` and `exclude_columns` (and the pipeline's
    /// transforms): filters, column drops and keeps, renames, masks, truncation, in order.
    pub transforms: Vec<TransformConfig>,
    /// What to do with a record the target rejects for good, or a transform fails on: stop
    /// the sink (`fail`) or write it to
    /// `<data_dir>/pipelines/<pipeline>/dead-letter/<sink>.jsonl` and go on (`dead_letter`).
    pub on_error: OnError,
    /// What to do when the store's cursor belongs to another change log (the data directory
    /// was lost or replaced while the store kept its cursor): clear the store and rebuild it
    /// from this log (`rebuild`), or stop the sink with an error (`fail`). Unset: `rebuild`
    /// for a store of current rows, `fail` for one that keeps every event (a history table,
    /// event files), whose past the new log cannot give back.
    pub on_other_log: Option<OnOtherLog>,
    /// Read the log as a member of the consumer group `siphon.<pipeline>.<sink>`, which
    /// shares its tables with every daemon that runs this sink (a log several processes read:
    /// Kafka), so that a sink scales out. A member applies each of its tables in log order;
    /// a source transaction that spans tables of different members is applied in parts.
    pub consumer_group: bool,
    /// Take the documents of the pipeline's view of this name (`[pipelines.NAME.views.VIEW]`)
    /// instead of its tables' changes: one document per root row, with its joined rows,
    /// written again whenever a change touches it (the view's tables' changes pass
    /// `exclude_columns` and the transforms first).
    pub view: Option<String>,
}

/// What a sink does when its store followed another change log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOtherLog {
    /// Clear what the sink owns in the store and replay this log from its start.
    #[default]
    Rebuild,
    /// Stop the sink with an error saying how to rebuild it.
    Fail,
}

/// What a sink does with a record its target rejects for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop this sink with an error naming the record (the default).
    #[default]
    Fail,
    /// Write the record and the reason to the sink's dead-letter file and go on.
    DeadLetter,
}

impl DeliveryConfig {
    /// The keys of this table, taken out of a sink's table before its kind's settings are read.
    pub const KEYS: &[&str] = &[
        "batch_size",
        "linger",
        "max_backoff",
        "tables",
        "exclude_columns",
        "transforms",
        "on_error",
        "on_other_log",
        "consumer_group",
        "view",
    ];

    /// The tables and columns this sink takes.
    pub fn routing(&self) -> Result<Routing, String> {
        Routing::new(&self.tables, &self.exclude_columns)
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            batch_size: 1000,
            linger: HumanDuration(Duration::from_millis(5)),
            max_backoff: HumanDuration(Duration::from_secs(30)),
            tables: Vec::new(),
            exclude_columns: Vec::new(),
            transforms: Vec::new(),
            on_error: OnError::Fail,
            on_other_log: None,
            consumer_group: false,
            view: None,
        }
    }
}

/// The top level as written, before each component's kind is resolved.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_data_dir")]
    data_dir: PathBuf,
    #[serde(default = "default_shutdown_timeout")]
    shutdown_timeout: HumanDuration,
    #[serde(default)]
    admin: AdminConfig,
    #[serde(default)]
    pipelines: BTreeMap<String, RawPipeline>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("./siphon-data")
}

fn default_shutdown_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    #[serde(default)]
    source: Option<config::Value>,
    #[serde(default)]
    log: Option<config::Value>,
    #[serde(default)]
    sinks: BTreeMap<String, config::Value>,
    #[serde(default)]
    transforms: Option<config::Value>,
    #[serde(default)]
    views: BTreeMap<String, config::Value>,
}

impl Config {
    /// Reads `path`, applies `SIPHON__…` environment overrides, and checks everything against
    /// this build's kinds.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, &Kinds::builtin())
    }

    /// [`Config::load`] with the kinds `kinds` (a test's own, say).
    pub fn load_with(path: &Path, kinds: &Kinds) -> Result<Self, ConfigError> {
        if !path.is_file() {
            return Err(ConfigError::file(path, "no such file"));
        }
        let source = config::Config::builder()
            .add_source(config::File::from(path).format(config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("__")
                    .separator("__"),
            )
            .build()
            .map_err(|e| ConfigError::file(path, &e.to_string()))?;
        Self::from_config(source, kinds)
    }

    /// Parses TOML text (with environment overrides), for tests and `check`.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_toml_with(text, &Kinds::builtin())
    }

    /// [`Config::from_toml`] with the kinds `kinds`.
    pub fn from_toml_with(text: &str, kinds: &Kinds) -> Result<Self, ConfigError> {
        let source = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("__")
                    .separator("__"),
            )
            .build()
            .map_err(|e| ConfigError::new("", e.to_string()))?;
        Self::from_config(source, kinds)
    }

    fn from_config(source: config::Config, kinds: &Kinds) -> Result<Self, ConfigError> {
        let raw: RawConfig = error::deserialize("", source.cache)?;
        if raw.pipelines.is_empty() {
            return Err(ConfigError::new(
                "pipelines",
                "no pipeline is configured; add a [pipelines.NAME.source] table (or, for a daemon that runs a pipeline's sinks only, its [pipelines.NAME.log] and sinks)",
            ));
        }
        raw.admin.checked_token()?;
        let mut pipelines = BTreeMap::new();
        for (name, p) in raw.pipelines {
            check_name(&format!("pipelines.{name}"), &name)?;
            let prefix = format!("pipelines.{name}");
            let source = p
                .source
                .map(|value| SourceSpec::parse(kinds, &format!("{prefix}.source"), value))
                .transpose()?;
            let log = LogSpec::parse(kinds, &format!("{prefix}.log"), p.log)?;
            if source.is_none() && !log.shared() {
                return Err(ConfigError::new(
                    format!("{prefix}.source"),
                    format!(
                        "required key is missing: this pipeline's {} log is written and read by the daemon that runs its source; a daemon runs a pipeline's sinks alone only on a log that several daemons read (kind = \"kafka\")",
                        log.kind()
                    ),
                ));
            }
            if p.sinks.is_empty() {
                return Err(ConfigError::new(
                    format!("{prefix}.sinks"),
                    "a pipeline needs at least one sink; add a [pipelines.NAME.sinks.SINK] table",
                ));
            }
            let transforms: Vec<TransformConfig> = match p.transforms {
                Some(value) => error::deserialize(&format!("{prefix}.transforms"), value)?,
                None => Vec::new(),
            };
            siphon_transform::build(&transforms, &format!("{prefix}.transforms"))
                .map_err(|e| ConfigError::new(e.key, e.message))?;
            let mut views = BTreeMap::new();
            for (view_name, value) in p.views {
                let key = format!("{prefix}.views.{view_name}");
                check_name(&key, &view_name)?;
                let view: ViewConfig = error::deserialize(&key, value)?;
                views.insert(view_name, view);
            }
            let mut sinks = BTreeMap::new();
            for (sink_name, value) in p.sinks {
                let key = format!("{prefix}.sinks.{sink_name}");
                check_name(&key, &sink_name)?;
                let (delivery, rest) = split_delivery(&key, value)?;
                if delivery.consumer_group && !log.shared() {
                    return Err(ConfigError::new(
                        format!("{key}.consumer_group"),
                        format!(
                            "a {} log is read by the one daemon that writes it; consumer groups need a log that several daemons read (kind = \"kafka\")",
                            log.kind()
                        ),
                    ));
                }
                if let Some(view) = &delivery.view {
                    check_view(&key, &delivery, view, &views)?;
                }
                sinks.insert(
                    sink_name,
                    SinkConfig {
                        spec: SinkSpec::parse(kinds, &key, rest)?,
                        delivery,
                    },
                );
            }
            pipelines.insert(
                name,
                PipelineConfig {
                    source,
                    log,
                    sinks,
                    transforms,
                    views,
                },
            );
        }
        Ok(Config {
            data_dir: raw.data_dir,
            shutdown_timeout: raw.shutdown_timeout.0,
            admin: raw.admin,
            pipelines,
        })
    }

    /// The data directory of one pipeline.
    pub fn pipeline_dir(&self, pipeline: &str) -> PathBuf {
        self.data_dir.join("pipelines").join(pipeline)
    }

    /// What pipeline `pipeline`'s log is opened with: its name, its directory, and what
    /// reads its source's positions.
    pub fn log_context(&self, pipeline: &str, p: &PipelineConfig) -> LogContext {
        LogContext {
            pipeline: pipeline.to_owned(),
            dir: self.pipeline_dir(pipeline).join("log"),
            positions: p.positions(),
        }
    }

    /// The pipeline named `name`, or an error listing the names there are.
    pub fn pipeline(&self, name: &str) -> Result<&PipelineConfig, ConfigError> {
        self.pipelines.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.pipelines.keys().map(String::as_str).collect();
            ConfigError::new(
                "pipelines",
                format!(
                    "no pipeline named {name:?}; configured: {}",
                    known.join(", ")
                ),
            )
        })
    }
}

/// A sink's `view`: one of the pipeline's, read in the log's one order.
fn check_view(
    key: &str,
    delivery: &DeliveryConfig,
    view: &str,
    views: &BTreeMap<String, ViewConfig>,
) -> Result<(), ConfigError> {
    if !views.contains_key(view) {
        let known: Vec<&str> = views.keys().map(String::as_str).collect();
        return Err(ConfigError::new(
            format!("{key}.view"),
            if known.is_empty() {
                format!("no view named {view:?}: the pipeline has no [pipelines.NAME.views.VIEW]")
            } else {
                format!("no view named {view:?}; configured: {}", known.join(", "))
            },
        ));
    }
    if !delivery.tables.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.tables"),
            "a sink that takes a view's documents takes the view's tables; remove `tables` (or `view`)",
        ));
    }
    if delivery.consumer_group {
        return Err(ConfigError::new(
            format!("{key}.consumer_group"),
            "a view is kept from every change of its tables in the log's one order; a consumer group shares the tables among members",
        ));
    }
    Ok(())
}

/// Pipeline and sink names become file and metric names, and environment variable parts.
fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!("name {name:?} is not allowed: use lowercase letters, digits and _"),
        ))
    }
}

/// Separates the delivery settings from a sink's table.
fn split_delivery(
    key: &str,
    value: config::Value,
) -> Result<(DeliveryConfig, config::Value), ConfigError> {
    let origin = value.origin().map(str::to_owned);
    let table = value
        .into_table()
        .map_err(|_| ConfigError::new(key, "must be a table"))?;
    let (common, rest): (config::Map<_, _>, config::Map<_, _>) = table
        .into_iter()
        .partition(|(k, _)| DeliveryConfig::KEYS.contains(&k.as_str()));
    let delivery: DeliveryConfig = error::deserialize(
        key,
        config::Value::new(origin.as_ref(), config::ValueKind::Table(common)),
    )?;
    if delivery.batch_size == 0 {
        return Err(ConfigError::new(
            format!("{key}.batch_size"),
            "must be at least 1",
        ));
    }
    if let Err(e) = delivery.routing() {
        let field = e.split(':').next().unwrap_or_default();
        return Err(ConfigError::new(format!("{key}.{field}"), e));
    }
    siphon_transform::build(&delivery.transforms, &format!("{key}.transforms"))
        .map_err(|e| ConfigError::new(e.key, e.message))?;
    Ok((
        delivery,
        config::Value::new(origin.as_ref(), config::ValueKind::Table(rest)),
    ))
}

#[cfg(test)]
mod tests;
