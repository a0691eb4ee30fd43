//! JSON-lines sinks: `stdout` and `file` (rotating files), for debugging, demos and piping
//! into other tools. Each line is one Debezium change event (payload only, or with schema).
//!
//! Both skip records at or below the last offset they wrote, so a batch applied twice is
//! written once. The `file` sink keeps its cursor next to its files and, on open, cuts
//! whatever was written after the last saved cursor: no line is lost or written twice, even
//! after kill -9. `stdout` cannot take back what it printed: after a crash it may print the
//! last batch again (at-least-once).

mod config;
mod files;
mod sink;

pub use config::{FileSinkConfig, StdoutSinkConfig};
pub use sink::JsonLinesSink;
