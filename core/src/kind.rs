//! The kinds of parts a pipeline is made of — a source, a change log, sinks — as the daemon
//! knows them: each is a type implementing one of these traits in its own crate, named by
//! one entry in the daemon's list of kinds (`src/kinds.rs`). The daemon reads the kind's
//! settings from its table in the configuration (`kind = "…"` and the rest), checks them,
//! and builds the part; nothing else in the daemon names a kind.

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::Result;
use crate::log::ChangeLog;
use crate::position::{PositionDecoder, SourcePoint, SourcePosition};
use crate::sink::Sink;
use crate::source::Source;

/// What every kind has: its name and its settings.
pub trait Kind: Send + Sync + Debug + 'static {
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

/// A kind of source. Its positions and points are its own ([`crate::position`]): the kind
/// reads them back for everyone else.
pub trait SourceKind: Kind {
    /// The connector's name in its events (`source.connector`: `postgresql`, `mysql`).
    const CONNECTOR: &'static str;

    /// The source of pipeline `pipeline` (its server name in events).
    fn build(config: &Self::Config, pipeline: &str) -> Box<dyn Source>;

    /// Reads back a position its events carry (what [`crate::position::Position::encode`] wrote); `None` for
    /// bytes that do not decode.
    fn decode_position(bytes: &[u8]) -> Option<SourcePosition>;

    /// A point of its database's change stream as the read-your-writes API names it (a query
    /// parameter such as `lsn=16/B374D848`): `None` where `param` is not one of its
    /// parameters, an error saying what is expected where `text` is not a point.
    fn parse_point(param: &str, text: &str) -> Option<std::result::Result<SourcePoint, String>>;
}

/// A source kind reads the positions of its own connector's events.
impl<K: SourceKind> PositionDecoder for K {
    fn decode(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
        decode_position::<K>(connector, bytes)
    }
}

/// The position of an event of `connector` stored as `bytes`, if `K` is that connector's kind.
pub fn decode_position<K: SourceKind>(connector: &str, bytes: &[u8]) -> Option<SourcePosition> {
    (connector == K::CONNECTOR)
        .then(|| K::decode_position(bytes))
        .flatten()
}

/// What a log is opened for: its pipeline, a directory of its own, and what reads its
/// events' positions.
#[derive(Clone)]
pub struct LogContext {
    /// The pipeline's name.
    pub pipeline: String,
    /// A directory the log may keep its files in (the file log's segments).
    pub dir: PathBuf,
    /// Reads the positions of the pipeline's events, for a log that writes its events out in
    /// a format of its own (Kafka's Debezium records).
    pub positions: Arc<dyn PositionDecoder>,
}

impl Debug for LogContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogContext")
            .field("pipeline", &self.pipeline)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A kind of change log.
pub trait LogKind: Kind {
    /// Whether daemons other than its writer read it, each keeping its own place (a broker's
    /// log): a daemon may then run a pipeline's sinks without its source, and sinks may read
    /// it as members of a consumer group.
    const SHARED: bool = false;

    /// The pipeline's log, for its one writer (the daemon running its source).
    fn open(config: &Self::Config, ctx: &LogContext) -> Result<Arc<dyn ChangeLog>>;

    /// The log read-only beside its writer (`siphon log tail`, `status`, a daemon that runs
    /// sinks only); `None` where none was made yet.
    fn open_existing(config: &Self::Config, ctx: &LogContext)
    -> Result<Option<Arc<dyn ChangeLog>>>;

    /// Reaches what the log is kept in, changing nothing (`siphon check --connect`): a broker
    /// log its brokers. A log on local disk has nothing to reach. Blocks.
    fn check(config: &Self::Config) -> Result<()> {
        let _ = config;
        Ok(())
    }

    /// What the log keeps, in words, for status and the console ("7d, compacted").
    fn retention(config: &Self::Config) -> String;
}

/// A kind of sink.
pub trait SinkKind: Kind {
    /// Sink `sink` of pipeline `pipeline`, ready to be opened.
    fn build(config: &Self::Config, pipeline: &str, sink: &str) -> Result<Box<dyn Sink>>;
}
