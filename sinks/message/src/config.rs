//! The settings every message sink has, declared once.

use serde::Deserialize;
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::row_state::RowState;
use siphon_format::debezium::Modes;

use crate::outbox::{OutboxConfig, OutboxRouter};

/// The placeholders of `destination`.
pub const DESTINATION_PLACEHOLDERS: &[&str] = &["prefix", "schema", "table", "op"];

/// The default `destination`: Debezium's topic name.
pub fn default_destination() -> String {
    "{prefix}.{schema}.{table}".into()
}

/// What a message's value is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueForm {
    /// Debezium's change event: `before`, `after`, `source`, `op`, ….
    #[default]
    Envelope,
    /// The row state (Debezium's ExtractNewRecordState): the row after the change, with
    /// the fields of `row_fields`.
    Row,
    /// An outbox table's rows routed as events (Debezium's outbox EventRouter): see
    /// [`crate::OutboxConfig`].
    Outbox,
}

/// `true`, for serde's defaults.
pub fn yes() -> bool {
    true
}

/// The settings every message sink has, as [`message_config!`] hands them out.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageSettings {
    /// Where each event goes (`{prefix}`, `{schema}`, `{table}`, `{op}`).
    pub destination: String,
    /// What `{prefix}` stands for; `None`: the pipeline's name.
    pub prefix: Option<String>,
    /// Wrap keys and values as `{"schema":…,"payload":…}`.
    pub schemas: bool,
    /// Fill each event's `transaction` block.
    pub transaction_metadata: bool,
    /// Debezium's handling modes for values.
    pub debezium: Modes,
    /// The envelope, or the row state.
    pub value: ValueForm,
    /// With [`ValueForm::Row`]: the fields it adds and what becomes of a delete.
    pub row_state: RowState,
    /// With [`ValueForm::Outbox`]: the outbox table's columns and the destination.
    pub outbox: OutboxConfig,
}

impl MessageSettings {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        NameTemplate::parse(&self.destination, DESTINATION_PLACEHOLDERS)
            .map_err(|e| format!("destination: {e}"))?;
        if self.value == ValueForm::Outbox {
            OutboxRouter::new(&self.outbox, self.schemas, self.debezium)?;
        }
        Ok(())
    }

    /// Whether every table's events have destinations of their own (tables of two schemas
    /// may share a name).
    pub fn per_table(&self) -> bool {
        self.destination.contains("{table}") && self.destination.contains("{schema}")
    }
}

/// Adds the keys that shape every message sink's messages — `destination`, `value`,
/// `row_fields` and `deletes`, documented here once — to a settings struct that the macro
/// `$base` declares with the fields given (`siphon_kafka::kafka_config` for the Kafka sink,
/// whose keys of the cluster and of how values are written are its own), and gives it
/// `fn message_with()`, making [`MessageSettings`] of them and of the base's keys.
#[macro_export]
macro_rules! message_fields {
    (
        [$($base:tt)+]
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $($base)+ ! {
            $(#[$meta])*
            pub struct $name {
                /// Where each event goes: a template of `{prefix}`, `{schema}`, `{table}` and
                /// `{op}` (c, u, d, r, t). Default: Debezium's `{prefix}.{schema}.{table}`.
                #[serde(default = "siphon_sink_message::default_destination")]
                pub destination: String,
                /// Each message's value: "envelope" (Debezium's change event, the default),
                /// "row" (the row after the change, with `row_fields`: Debezium's
                /// ExtractNewRecordState) or "outbox" (each row inserted into an outbox
                /// table as an event of its own, as `outbox` says: Debezium's outbox
                /// EventRouter).
                #[serde(default)]
                pub value: siphon_sink_message::ValueForm,
                /// With `value = "outbox"`: the outbox table's columns and where its events
                /// go (every key has Debezium's default).
                #[serde(default)]
                pub outbox: siphon_sink_message::OutboxConfig,
                /// With `value = "row"`: the fields added to each row, each as `__<name>`:
                /// "op", "table", "position" (`__lsn` or `__gtid`) and "ts_ms" (all four by
                /// default).
                #[serde(default = "siphon_core::sink::row_state::RowState::all_fields")]
                pub row_fields: Vec<siphon_core::sink::row_state::RowField>,
                /// With `value = "row"`: what becomes of a delete: "rewrite" (the old row with
                /// `__deleted: "true"`, and every other row `"false"`; the default),
                /// "tombstone" (a `null` value) or "drop".
                #[serde(default)]
                pub deletes: siphon_core::sink::row_state::DeleteHandling,
                $( $(#[$field_meta])* pub $field : $ty, )*
            }
        }

        impl $name {
            /// The settings every message sink has: these keys, and how values are written
            /// (the keys of that are the base's).
            pub fn message_with(
                &self,
                prefix: Option<String>,
                schemas: bool,
                transaction_metadata: bool,
                debezium: siphon_format::debezium::Modes,
            ) -> siphon_sink_message::MessageSettings {
                siphon_sink_message::MessageSettings {
                    destination: self.destination.clone(),
                    prefix,
                    schemas,
                    transaction_metadata,
                    debezium,
                    value: self.value,
                    row_state: siphon_core::sink::row_state::RowState {
                        fields: self.row_fields.clone(),
                        deletes: self.deletes,
                    },
                    outbox: self.outbox.clone(),
                }
            }
        }
    };
}

/// Declares a message sink's settings (`#[serde(deny_unknown_fields)]`, so that a misspelt
/// key is an error naming it): the keys every message sink has, documented here once, then
/// the sink's own, and `fn message()` handing the shared ones out as [`MessageSettings`].
#[macro_export]
macro_rules! message_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $crate::message_fields! {
            [$crate::settings_struct]
            $(#[$meta])*
            pub struct $name {
                /// What `{prefix}` stands for (Debezium's `topic.prefix`). Unset: the
                /// pipeline's name.
                #[serde(default)]
                pub prefix: Option<String>,
                /// Wrap keys and values as `{"schema":…,"payload":…}` (Kafka Connect's
                /// JsonConverter with `schemas.enable = true`, Debezium Server's default);
                /// `false`: the payload alone.
                #[serde(default = "siphon_sink_message::yes")]
                pub schemas: bool,
                /// Fill each event's `transaction` block (Debezium's
                /// `provide.transaction.metadata`).
                #[serde(default)]
                pub transaction_metadata: bool,
                /// Debezium's handling modes for values (as for the file sink).
                #[serde(default)]
                pub debezium: siphon_format::debezium::Modes,
                $( $(#[$field_meta])* pub $field : $ty, )*
            }
        }

        impl $name {
            /// The settings every message sink has.
            pub fn message(&self) -> $crate::MessageSettings {
                self.message_with(
                    self.prefix.clone(),
                    self.schemas,
                    self.transaction_metadata,
                    self.debezium,
                )
            }
        }
    };
}

/// A settings struct as declared, `#[serde(deny_unknown_fields)]`: the base of
/// [`message_config!`].
#[doc(hidden)]
#[macro_export]
macro_rules! settings_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field : $ty, )*
        }
    };
}
