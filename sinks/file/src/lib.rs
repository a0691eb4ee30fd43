//! JSON-lines sinks: `stdout` and `file` (rotating files), for debugging, demos and piping
//! into other tools. Each line is one Debezium change event (payload only, or with schema), or
//! with `value = "row"` its row state, made by the message sinks' one value encoder.
//!
//! Both skip records at or below the last offset they wrote, so a batch applied twice is
//! written once. The `file` sink keeps its cursor next to its files and, on open, cuts
//! whatever was written after the last saved cursor: no line is lost or written twice, even
//! after kill -9. `stdout` cannot take back what it printed: after a crash it may print the
//! last batch again (at-least-once).

mod config;
mod files;
mod sink;

pub use config::{FileSinkConfig, LineSettings, StdoutSinkConfig};
pub use sink::JsonLinesSink;

use siphon_core::Result;
use siphon_core::kind::{Kind, SinkKind};
use siphon_core::sink::Sink;

/// `kind = "file"`.
#[derive(Debug)]
pub struct FileKind;

impl Kind for FileKind {
    const NAME: &'static str = "file";
    type Config = FileSinkConfig;

    fn validate(config: &FileSinkConfig) -> std::result::Result<(), String> {
        config.lines().validate()
    }
}

impl SinkKind for FileKind {
    fn build(config: &FileSinkConfig, _: &str, _: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(JsonLinesSink::files(config.clone())?))
    }
}

/// `kind = "stdout"`.
#[derive(Debug)]
pub struct StdoutKind;

impl Kind for StdoutKind {
    const NAME: &'static str = "stdout";
    type Config = StdoutSinkConfig;

    fn validate(config: &StdoutSinkConfig) -> std::result::Result<(), String> {
        config.lines().validate()
    }
}

impl SinkKind for StdoutKind {
    fn build(config: &StdoutSinkConfig, _: &str, _: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(JsonLinesSink::stdout(config)?))
    }
}
