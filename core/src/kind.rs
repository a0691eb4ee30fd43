//! The kinds of parts a pipeline is made of — a source, a change log, sinks — as the daemon
//! knows them: each is a type implementing one of these traits in its own crate, named by
//! one entry in the daemon's list of kinds (`src/kinds.rs`). The daemon reads the kind's
//! settings from its table in the configuration (`kind = "…"` and the rest), checks them,
//! and builds the part; nothing else in the daemon names a kind.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::Result;
use crate::log::ChangeLog;
use crate::sink::Sink;
use crate::source::Source;

/// What every kind has: its name and its settings.
pub trait Kind: Send + Sync + 'static {
    /// Its name in the configuration: `kind = "…"`.
    const NAME: &'static str;

    /// Its settings: `#[serde(deny_unknown_fields)]`, with a doc comment a field, so that a
    /// misspelt key is an error naming it.
    type Config: DeserializeOwned + Debug + Clone + Send + Sync + 'static;

    /// Checks what deserializing cannot (ranges, combinations of keys); the message names
    /// the key and says what is allowed.
    fn validate(config: &Self::Config) -> std::result::Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// How this build holds the kind, for `siphon --version` (say, how a library is linked);
    /// `None` when there is nothing to say.
    fn build_note() -> Option<&'static str> {
        None
    }
}

/// A kind of source.
pub trait SourceKind: Kind {
    /// The source of pipeline `pipeline` (its server name in events).
    fn build(config: &Self::Config, pipeline: &str) -> Box<dyn Source>;
}

/// A kind of change log.
pub trait LogKind: Kind {
    /// The pipeline's log in `dir`, for its one writer (the daemon).
    fn open(config: &Self::Config, dir: &Path) -> Result<Arc<dyn ChangeLog>>;

    /// The log in `dir` read-only beside its writer (`siphon log tail`, `status`); `None`
    /// where none was made yet.
    fn open_existing(config: &Self::Config, dir: &Path) -> Result<Option<Arc<dyn ChangeLog>>>;
}

/// A kind of sink.
pub trait SinkKind: Kind {
    /// Sink `sink` of pipeline `pipeline`, ready to be opened.
    fn build(config: &Self::Config, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>>;
}
