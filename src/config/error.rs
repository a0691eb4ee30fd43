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
pub(crate) fn deserialize<T: serde::de::DeserializeOwned>(
    key: &str,
    value: config::Value,
) -> Result<T, ConfigError> {
    let copy = value.clone();
    serde_path_to_error::deserialize(value).map_err(|e| {
        // The config crate names a bad enum value without the allowed ones; serde_json's
        // reading of the same table says which they are.
        if e.inner()
            .to_string()
            .contains("does not have variant constructor")
            && let Err(json) = serde_path_to_error::deserialize::<_, T>(to_json(copy))
            && json.inner().to_string().contains("unknown variant")
        {
            let inner = json.path().to_string();
            let path = if key.is_empty() {
                inner
            } else {
                format!("{key}.{inner}")
            };
            return ConfigError::new(path, json.into_inner().to_string());
        }
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

fn to_json(value: config::Value) -> serde_json::Value {
    use config::ValueKind;
    match value.kind {
        ValueKind::Nil => serde_json::Value::Null,
        ValueKind::Boolean(b) => b.into(),
        ValueKind::I64(i) => i.into(),
        ValueKind::I128(i) => i.to_string().into(),
        ValueKind::U64(u) => u.into(),
        ValueKind::U128(u) => u.to_string().into(),
        ValueKind::Float(f) => f.into(),
        ValueKind::String(s) => s.into(),
        ValueKind::Table(t) => t.into_iter().map(|(k, v)| (k, to_json(v))).collect(),
        ValueKind::Array(a) => a.into_iter().map(to_json).collect(),
    }
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
