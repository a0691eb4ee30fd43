//! siphon-core: the contracts between siphon's parts.
//!
//! - [`event`]: the change event (Debezium envelope semantics, exact values);
//! - [`kind`]: the traits a kind of source, log or sink implements to be built from the
//!   configuration;
//! - [`log`]: the change log trait (its backends are crates of their own);
//! - [`name`]: table names and the patterns that pick tables;
//! - [`schema`]: table schemas and the store of their versions each log keeps;
//! - [`offsets`]: sink cursors and source checkpoints, persisted atomically;
//! - [`position`]: places in a source database's change stream;
//! - [`source`] and [`sink`]: the traits connectors and sinks implement, with their guarantees;
//! - [`testing`] (feature `testing`): the sink and log compliance suites, event builders, a
//!   log and a schema store in memory.
//!
//! No database client, no log implementation and no output format lives here: the file log
//! is `siphon-log-file`, Debezium's JSON `siphon-format`.

pub mod error;
pub mod event;
pub mod fsutil;
pub mod kind;
pub mod log;
pub mod name;
pub mod offsets;
pub mod position;
pub mod schema;
pub mod secret;
pub mod sink;
pub mod source;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(feature = "tls")]
pub mod tls;
pub mod units;

pub use error::{Error, ErrorKind, Result};
pub use event::{Event, KeyChange, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo, Value};
pub use fsutil::write_atomic;
pub use name::{TableName, TablePattern};
pub use position::SourcePosition;
pub use secret::{ConnectionUrl, Secret};
