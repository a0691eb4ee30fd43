//! From `kind = "…"` and the rest of a component's table to a configured part, through the
//! list of kinds ([`Kinds`]).

use std::sync::Arc;

use siphon_core::kind::LogContext;
use siphon_core::log::ChangeLog;
use siphon_core::position::{PositionDecoder, SourcePoint};
use siphon_core::sink::Sink;
use siphon_core::source::Source;

use super::ConfigError;
use crate::kinds::{ConfiguredLog, ConfiguredSink, ConfiguredSource, Entry, Kinds};

/// Takes `kind` out of a component's table; the rest is the kind's settings.
fn split_kind<'k, C: ?Sized>(
    key: &str,
    value: config::Value,
    default: Option<&str>,
    entries: &'k [Box<dyn Entry<C>>],
    missing: &[(&str, &str)],
) -> Result<(&'k dyn Entry<C>, config::Value), ConfigError> {
    let allowed: Vec<&str> = entries.iter().map(|e| e.name()).collect();
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
    let Some(entry) = entries.iter().find(|e| e.name() == kind) else {
        if let Some((_, feature)) = missing.iter().find(|(name, _)| *name == kind) {
            return Err(ConfigError::new(
                format!("{key}.kind"),
                format!(
                    "this siphon was built without {kind} (Cargo feature `{feature}`); rebuild \
                     with it"
                ),
            ));
        }
        return Err(ConfigError::new(
            format!("{key}.kind"),
            format!("unknown kind {kind:?}; allowed: {}", allowed.join(", ")),
        ));
    };
    Ok((
        &**entry,
        config::Value::new(origin.as_ref(), config::ValueKind::Table(table)),
    ))
}

/// A configured source.
#[derive(Debug, Clone)]
pub struct SourceSpec(Arc<dyn ConfiguredSource>);

impl SourceSpec {
    pub(super) fn parse(
        kinds: &Kinds,
        key: &str,
        value: config::Value,
    ) -> Result<Self, ConfigError> {
        let (entry, rest) = split_kind(key, value, None, &kinds.sources, &kinds.missing)?;
        Ok(SourceSpec(entry.parse(key, rest)?.into()))
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// A source for pipeline `pipeline`.
    pub fn build(&self, pipeline: &str) -> Box<dyn Source> {
        self.0.build(pipeline)
    }

    /// What reads the positions its events carry.
    pub fn positions(&self) -> Arc<dyn PositionDecoder> {
        self.0.clone()
    }

    /// A point of its database's change stream named by the read-your-writes API's `param`
    /// (`lsn`, `gtid`): `None` where the kind has no such parameter.
    pub fn parse_point(&self, param: &str, text: &str) -> Option<Result<SourcePoint, String>> {
        self.0.parse_point(param, text)
    }
}

/// A configured change log.
#[derive(Debug, Clone)]
pub struct LogSpec(Arc<dyn ConfiguredLog>);

impl LogSpec {
    /// The `[log]` table, or the default log where there is none.
    pub(super) fn parse(
        kinds: &Kinds,
        key: &str,
        value: Option<config::Value>,
    ) -> Result<Self, ConfigError> {
        let default = kinds
            .logs
            .first()
            .ok_or_else(|| ConfigError::new(key, "this siphon has no log kind"))?;
        let value = value.unwrap_or_else(|| {
            config::Value::new(None, config::ValueKind::Table(config::Map::new()))
        });
        let (entry, rest) = split_kind(
            key,
            value,
            Some(default.name()),
            &kinds.logs,
            &kinds.missing,
        )?;
        Ok(LogSpec(entry.parse(key, rest)?.into()))
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// Whether daemons other than its writer read it (see `LogKind::SHARED`).
    pub fn shared(&self) -> bool {
        self.0.shared()
    }

    /// Opens the pipeline's log for its one writer (the daemon running its source).
    pub fn open(&self, ctx: &LogContext) -> siphon_core::Result<Arc<dyn ChangeLog>> {
        self.0.open(ctx)
    }

    /// Reaches what the log is kept in, changing nothing (`siphon check --connect`). Blocks.
    pub fn check(&self) -> siphon_core::Result<()> {
        self.0.check()
    }

    /// What the log keeps, in words.
    pub fn retention(&self) -> String {
        self.0.retention()
    }

    /// Opens the log read-only, beside its writer; `None` where none was made yet.
    pub fn open_existing(
        &self,
        ctx: &LogContext,
    ) -> siphon_core::Result<Option<Arc<dyn ChangeLog>>> {
        self.0.open_existing(ctx)
    }
}

/// A configured sink.
#[derive(Debug, Clone)]
pub struct SinkSpec(Arc<dyn ConfiguredSink>);

impl SinkSpec {
    pub(super) fn parse(
        kinds: &Kinds,
        key: &str,
        value: config::Value,
    ) -> Result<Self, ConfigError> {
        let (entry, rest) = split_kind(key, value, None, &kinds.sinks, &kinds.missing)?;
        Ok(SinkSpec(entry.parse(key, rest)?.into()))
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// Sink `sink` of pipeline `pipeline`, ready to be opened.
    pub fn build(&self, pipeline: &str, sink: &str) -> siphon_core::Result<Box<dyn Sink>> {
        self.0.build(pipeline, sink)
    }
}
