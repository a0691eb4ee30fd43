//! siphon-core: the contracts between siphon's parts.
//!
//! - [`event`]: the change event (Debezium envelope semantics, exact values), [`json`], its
//!   envelope and the store encoding of values, and [`debezium`], values, keys and topics as
//!   Debezium writes them;
//! - [`log`]: the change log trait (its backends are crates of their own);
//! - [`name`]: table names and the patterns that pick tables;
//! - [`schema`]: table schemas and the store of their versions each log keeps;
//! - [`offsets`]: sink cursors and source checkpoints, persisted atomically;
//! - [`source`] and [`sink`]: the traits connectors and sinks implement, with their guarantees;
//! - [`testing`] (feature `testing`): the sink compliance suite and event builders.
//!
//! No database client lives here.

pub mod debezium;
pub mod error;
pub mod event;
pub mod fsutil;
pub mod incremental;
pub mod json;
pub mod log;
pub mod name;
pub mod offsets;
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
pub use event::{
    Event, KeyChange, Op, Row, SnapshotMarker, SourceInfo, SourcePosition, TransactionInfo, Value,
};
pub use fsutil::write_atomic;
pub use name::{TableName, TablePattern};
pub use secret::{ConnectionUrl, Secret};
