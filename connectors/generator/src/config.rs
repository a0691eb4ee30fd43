//! Settings of the generator source.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use siphon_core::TableName;
use siphon_core::units::HumanDuration;

/// `kind = "generator"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneratorConfig {
    /// Tables to write, each as "schema.table".
    pub tables: Vec<TableName>,
    /// Distinct primary keys per table.
    pub keys: u64,
    /// Events to generate before going idle; 0 means without end.
    pub events: u64,
    /// Events per source transaction.
    pub transaction_size: u64,
    /// Pause between two transactions ("0s": as fast as the log takes them).
    pub interval: HumanDuration,
    /// Whether the tables have a primary key (`false` makes keyed sinks refuse them).
    pub primary_key: bool,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            tables: vec![TableName::new("demo", "orders")],
            keys: 100,
            events: 0,
            transaction_size: 5,
            interval: HumanDuration(Duration::from_millis(100)),
            primary_key: true,
        }
    }
}

impl GeneratorConfig {
    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.tables.is_empty() {
            return Err("tables must list at least one \"schema.table\"".into());
        }
        if self.keys == 0 {
            return Err("keys must be at least 1".into());
        }
        if self.transaction_size == 0 {
            return Err("transaction_size must be at least 1".into());
        }
        Ok(())
    }
}
