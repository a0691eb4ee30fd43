//! A secret (password, token) that never prints.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// A password or token. `Debug` and `Display` print `***`; only [`Secret::expose`] reveals it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Reads a secret from a file (trailing newline removed), as mounted by Docker or
    /// Kubernetes secrets.
    pub fn from_file(path: &std::path::Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        Ok(Secret(text.trim_end_matches(['\n', '\r']).to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// A connection URL, or a libpq `key=value` connection string, that may hold a password.
/// `Debug` and `Display` show it redacted ([`redact_url`]); only [`ConnectionUrl::expose`]
/// gives it whole, to the one place that connects.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ConnectionUrl(String);

impl ConnectionUrl {
    /// Wraps a connection URL.
    pub fn new(url: impl Into<String>) -> Self {
        ConnectionUrl(url.into())
    }

    /// The URL itself, password included.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ConnectionUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

impl fmt::Display for ConnectionUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl<'de> Deserialize<'de> for ConnectionUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ConnectionUrl)
    }
}

/// Names of connection parameters that hold secrets (case-insensitive).
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "sslpassword",
    "token",
    "secret",
    "api_key",
    "apikey",
    "access_token",
];

/// Removes the secrets from a connection string so that it can be logged: the password of a
/// URL's user info (`postgres://user:pw@host/db` → `postgres://user:***@host/db`), and the
/// value of every parameter named like a secret, whether a URL's query parameter
/// (`?password=pw`) or a libpq `key=value` pair (`host=h password='p w'`).
pub fn redact_url(url: &str) -> String {
    redact_parameters(&redact_user_info(url))
}

/// A password may hold `/`, `?`, `#` and `@` unencoded (drivers accept it): the user info
/// runs to the last `@`, unless a `/` or an `@` comes before its first `:` (then there is no
/// password, and that `@` belongs to the path or query).
fn redact_user_info(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let info = &rest[..at];
    let Some(colon) = info.find(':') else {
        return url.to_owned();
    };
    if info[..colon].contains(['/', '@']) {
        return url.to_owned();
    }
    format!(
        "{}{}:***{}",
        &url[..scheme_end + 3],
        &info[..colon],
        &rest[at..]
    )
}

fn redact_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        // The parameter's name: back from `=` (and the blanks before it) to a separator.
        let before = rest[..eq].trim_end();
        let name_start = before
            .rfind(['?', '&', ';', ' ', '\t', '\n'])
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        out.push_str(&rest[..=eq]);
        rest = &rest[eq + 1..];
        if !SECRET_KEYS.iter().any(|k| name.eq_ignore_ascii_case(k)) {
            continue;
        }
        // libpq allows blanks around `=`.
        let blanks = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..blanks]);
        rest = &rest[blanks..];
        let end = if let Some(quoted) = rest.strip_prefix('\'') {
            // A libpq quoted value: to the closing quote, `\'` escaping one.
            let mut escaped = false;
            quoted
                .char_indices()
                .find(|&(_, c)| {
                    let close = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                })
                .map_or(rest.len(), |(i, _)| i + 2)
        } else {
            rest.find(['&', ';', ' ', '\t', '\n', '#'])
                .unwrap_or(rest.len())
        };
        out.push_str("***");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn redacts_urls() {
        assert_eq!(
            redact_url("postgres://u:pw@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn redacts_query_parameters_and_key_value_strings() {
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=require&password=hunter2&x=1"),
            "postgres://u@h/db?sslmode=require&password=***&x=1"
        );
        assert_eq!(
            redact_url("host=h port=5432 user=u password=hunter2 dbname=d"),
            "host=h port=5432 user=u password=*** dbname=d"
        );
        assert_eq!(
            redact_url("host=h PASSWORD='hun ter\\'2' dbname=d"),
            "host=h PASSWORD=*** dbname=d"
        );
        assert_eq!(
            redact_url("http://u:pw@es:9200/?api_key=k3y"),
            "http://u:***@es:9200/?api_key=***"
        );
        assert_eq!(
            redact_url("host=h password = hunter2 dbname=d"),
            "host=h password = *** dbname=d"
        );
        // Unencoded characters in a password, which drivers accept.
        assert_eq!(
            redact_url("postgres://u:hun/ter?2@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(
            redact_url("postgres://u:p@ss@h/db"),
            "postgres://u:***@h/db"
        );
        // An `@` in the query, without a password.
        assert_eq!(
            redact_url("postgres://u@h:5432/db?x=a@b"),
            "postgres://u@h:5432/db?x=a@b"
        );
        let url = ConnectionUrl::new("postgres://u:hunter2@h/db");
        assert_eq!(
            format!("{url} {url:?}"),
            "postgres://u:***@h/db \"postgres://u:***@h/db\""
        );
    }
}
