//! Settings of the JSON-lines sinks.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use siphon_core::units::ByteSize;
use siphon_format::debezium::Modes;

/// `kind = "stdout"`: one JSON document per line on standard output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutSinkConfig {
    /// Wrap each event as `{"schema":…,"payload":…}` (Kafka Connect's JSON converter with
    /// schemas enabled) instead of the payload alone.
    #[serde(default)]
    pub schemas: bool,
    /// Fill each event's `transaction` block (id, total and per-table order), as Debezium
    /// does with `provide.transaction.metadata = true`; off, it is `null`, as by default.
    #[serde(default)]
    pub transaction_metadata: bool,
    /// Debezium's handling modes for the values: `decimal` ("string", "precise", "double"),
    /// `time` ("isostring", "adaptive", "adaptive_time_microseconds", "connect"), `binary`
    /// ("base64", "bytes", "base64-url-safe", "hex"), `interval` ("string", "numeric").
    #[serde(default)]
    pub debezium: Modes,
}

/// `kind = "file"`: JSON lines in rotating files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// Directory of the output files; it is created if missing. Files are named
    /// `events-000001.jsonl`, `events-000002.jsonl`, … (the highest is being written).
    pub path: PathBuf,
    /// File name prefix.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Size at which a new file is started.
    #[serde(default = "default_max_file_size")]
    pub max_file_size: ByteSize,
    /// Files kept; the oldest is deleted when a new one would exceed this. 0 keeps all.
    #[serde(default = "default_max_files")]
    pub max_files: u32,
    /// Wrap each event as `{"schema":…,"payload":…}`.
    #[serde(default)]
    pub schemas: bool,
    /// Fill each event's `transaction` block, as Debezium's
    /// `provide.transaction.metadata = true` (off: `null`).
    #[serde(default)]
    pub transaction_metadata: bool,
    /// Debezium's handling modes for the values (as for `stdout`).
    #[serde(default)]
    pub debezium: Modes,
}

fn default_prefix() -> String {
    "events".into()
}

fn default_max_file_size() -> ByteSize {
    ByteSize(64 << 20)
}

fn default_max_files() -> u32 {
    10
}
