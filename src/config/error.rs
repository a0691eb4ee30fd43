//! Configuration errors that name the key.

use std::fmt;
use std::path::Path;

/// A bad configuration: which key, and what is wrong with it. The daemon exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key's full path (`pipelines.shop.sinks.cache.batch_size`), empty for the file.
    pub key: String,
    /// What is wrong, with the bad value and what is allowed.
    pub message: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// An error about the file itself.
    pub fn file(path: &Path, message: &str) -> Self {
        ConfigError {
            key: String::new(),
            message: format!("config file {}: {message}", path.display()),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "invalid configuration: {}", self.message)
        } else {
            write!(f, "invalid configuration: {}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Deserializes `value` (found at `key`) into `T`, naming the exact key on error.
pub(super) fn deserialize<T: serde::de::DeserializeOwned>(
    key: &str,
    value: config::Value,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (key.is_empty(), inner.as_str()) {
            (_, ".") => key.to_owned(),
            (true, _) => inner,
            (false, _) => format!("{key}.{inner}"),
        };
        let message = e.into_inner().to_string();
        // A missing key is named by the key itself, not by the table it is missing from.
        match missing_key(&message) {
            // config names nested keys by their full path already.
            Some(field) if path.is_empty() || field.starts_with(&format!("{path}.")) => {
                ConfigError::new(field, "required key is missing")
            }
            Some(field) => ConfigError::new(format!("{path}.{field}"), "required key is missing"),
            None => ConfigError::new(path, explain(&message)),
        }
    })
}

fn missing_key(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix("missing field `")
        .or_else(|| message.strip_prefix("missing configuration field \""))?;
    rest.split(['`', '"']).next()
}

/// Rewords serde's messages for people editing a TOML file.
fn explain(message: &str) -> String {
    // config appends its own key hint (" for key `x`"), which we already give, more exactly.
    let message = message.split(" for key `").next().unwrap_or(message);
    if let Some(rest) = message.strip_prefix("unknown field ") {
        return format!("unknown key {rest}");
    }
    message.to_owned()
}
