//! The one error type of siphon-core, with a kind that tells whether retrying can help.

use std::path::PathBuf;

/// Whether an operation that failed may succeed if tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retrying may help: a connection was refused or dropped, a timeout, a server busy.
    Transient,
    /// Retrying will not help: bad data, corruption, a misconfiguration, a bug.
    Permanent,
}

/// Errors of siphon's core: the change log, offsets and the contracts between parts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation on a file of the data directory failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("open", "fsync", …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A stored record failed its checksum or could not be decoded.
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        /// The file holding the record.
        path: PathBuf,
        /// Byte position of the record in the file.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// A record of the change log failed its checksum or framing. Neither it nor what follows
    /// it in its segment is read past: a reader stops there, and a log whose last segment is
    /// damaged before intact records does not open (recovery cuts only a torn tail).
    #[error("change log record {offset} is damaged ({path}, byte {position}): {reason}")]
    DamagedRecord {
        /// The offset of the damaged record: the one after the last record read before it
        /// (where compaction removed records, the first offset it can have).
        offset: u64,
        /// The segment file.
        path: PathBuf,
        /// Byte position of the record in the file.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// A reader asked for an offset the log no longer (or not yet) holds.
    #[error(
        "offset {requested} is outside the log (it holds {start}..{end}); records before {start} \
         were removed by retention"
    )]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: u64,
        /// The first offset the log holds.
        start: u64,
        /// The offset the next append will get.
        end: u64,
    },
    /// A record is larger than the log can hold (a reader would take it for damage).
    #[error(
        "a change of {bytes} bytes is too large for the change log (at most {limit} bytes a record)"
    )]
    TooLarge {
        /// The record's size.
        bytes: usize,
        /// The largest record the log holds.
        limit: usize,
    },
    /// An event could not be encoded or decoded.
    #[error("event codec: {0}")]
    Codec(String),
    /// A setting is invalid; the message names it.
    #[error("{0}")]
    Config(String),
    /// A sink or source failed; `kind` says whether to retry.
    #[error("{message}")]
    Connector {
        /// Whether retrying may help.
        kind: ErrorKind,
        /// What failed, for humans (never containing a password).
        message: String,
    },
    /// The target refused one record for good (a mapping error, a constraint): retrying the
    /// same record cannot help. The runtime stops the sink, or with `on_error = "dead_letter"`
    /// writes the record to the dead-letter file and goes on without it.
    #[error("the target rejected the record at offset {offset} (table {table}): {reason}")]
    Rejected {
        /// The record's log offset.
        offset: u64,
        /// The record's table.
        table: crate::name::TableName,
        /// The target's reason.
        reason: String,
    },
    /// The operation was cancelled by shutdown.
    #[error("cancelled by shutdown")]
    Cancelled,
}

impl Error {
    /// Whether a retry may succeed.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => match source.kind() {
                // A full disk: once space is freed, the same write succeeds.
                std::io::ErrorKind::Interrupted
                | std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::StorageFull
                | std::io::ErrorKind::QuotaExceeded => ErrorKind::Transient,
                _ => ErrorKind::Permanent,
            },
            Error::Connector { kind, .. } => *kind,
            _ => ErrorKind::Permanent,
        }
    }

    /// Shorthand for [`ErrorKind::Transient`].
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// A transient connector error: retrying may help.
    pub fn transient(message: impl Into<String>) -> Self {
        Error::Connector {
            kind: ErrorKind::Transient,
            message: message.into(),
        }
    }

    /// A permanent connector error: retrying will not help.
    pub fn permanent(message: impl Into<String>) -> Self {
        Error::Connector {
            kind: ErrorKind::Permanent,
            message: message.into(),
        }
    }

    /// An [`Error::Io`] maker for `map_err`: what was done, to which file.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }
}

/// `e`'s message, then each of its causes after `: `, leaving out a cause whose text is in
/// what comes before: an HTTP client's "error sending request" says why ("connection
/// refused") only in its causes, a database client's message often repeats its cause.
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The result type of siphon-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        cause: Option<Box<Layer>>,
    }

    fn layers(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |cause, &text| {
                Some(Layer {
                    text,
                    cause: cause.map(Box::new),
                })
            })
            .unwrap()
    }

    #[test]
    fn causes_follow_the_message_once_each() {
        let e = layers(&[
            "error sending request",
            "client error (Connect)",
            "connection refused",
        ]);
        assert_eq!(
            with_causes(&e),
            "error sending request: client error (Connect): connection refused"
        );
        // A message that holds its cause's text does not repeat it.
        let e = layers(&["db error: connection refused", "connection refused"]);
        assert_eq!(with_causes(&e), "db error: connection refused");
    }
}
