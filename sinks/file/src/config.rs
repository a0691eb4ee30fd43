//! Settings of the JSON-lines sinks.

use std::path::PathBuf;

use serde::Deserialize;
use siphon_core::sink::row_state::{DeleteHandling, RowField, RowState};
use siphon_core::units::ByteSize;
use siphon_format::debezium::Modes;
use siphon_format::envelope::JsonFormat;
use siphon_sink_message::ValueForm;

/// `kind = "stdout"`: one JSON document per line on standard output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
    /// Each line: "envelope" (Debezium's change event, the default) or "row" (the row after
    /// the change, with `row_fields`: Debezium's ExtractNewRecordState, as the message sinks
    /// write it).
    #[serde(default)]
    pub value: ValueForm,
    /// With `value = "row"`: the fields added to each row, each as `__<name>`: "op",
    /// "table", "position" and "ts_ms" (all four by default).
    #[serde(default = "RowState::all_fields")]
    pub row_fields: Vec<RowField>,
    /// With `value = "row"`: what becomes of a delete: "rewrite" (the old row with
    /// `__deleted: "true"`; the default), "tombstone" (a `null` line) or "drop".
    #[serde(default)]
    pub deletes: DeleteHandling,
}

/// `kind = "file"`: JSON lines in rotating files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
    /// Each line: "envelope" or "row" (as for `stdout`).
    #[serde(default)]
    pub value: ValueForm,
    /// With `value = "row"`: the fields added to each row (as for `stdout`).
    #[serde(default = "RowState::all_fields")]
    pub row_fields: Vec<RowField>,
    /// With `value = "row"`: what becomes of a delete (as for `stdout`).
    #[serde(default)]
    pub deletes: DeleteHandling,
}

/// How a JSON-lines sink writes each line: the settings both kinds have.
#[derive(Debug, Clone, PartialEq)]
pub struct LineSettings {
    /// The envelope's format.
    pub format: JsonFormat,
    /// The envelope, or the row state.
    pub value: ValueForm,
    /// With [`ValueForm::Row`]: the fields it adds and what becomes of a delete.
    pub row_state: RowState,
}

impl LineSettings {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.value == ValueForm::Outbox {
            return Err(
                "value: a JSON-lines sink writes \"envelope\" or \"row\"; \"outbox\" is for the message sinks and the Kafka sink".into(),
            );
        }
        Ok(())
    }
}

impl StdoutSinkConfig {
    /// How its lines are written.
    pub fn lines(&self) -> LineSettings {
        LineSettings {
            format: JsonFormat {
                schemas: self.schemas,
                transactions: self.transaction_metadata,
                modes: self.debezium,
            },
            value: self.value,
            row_state: RowState {
                fields: self.row_fields.clone(),
                deletes: self.deletes,
            },
        }
    }
}

impl FileSinkConfig {
    /// How its lines are written (the keys it shares with `stdout`).
    pub fn lines(&self) -> LineSettings {
        StdoutSinkConfig {
            schemas: self.schemas,
            transaction_metadata: self.transaction_metadata,
            debezium: self.debezium,
            value: self.value,
            row_fields: self.row_fields.clone(),
            deletes: self.deletes,
        }
        .lines()
    }
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
