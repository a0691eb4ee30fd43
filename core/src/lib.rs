//! siphon-core: the contracts between siphon's parts.
//!
//! - [`event`]: the change event (Debezium envelope semantics, exact values), [`json`], its
//!   envelope and the store encoding of values, and [`debezium`], values, keys and topics as
//!   Debezium writes them;
//! - [`log`]: the change log trait and the embedded [`log::file`] backend;
//! - [`name`]: table names and the patterns that pick tables;
//! - [`schema`]: table schemas and the log's registry of their versions;
//! - [`offsets`]: sink cursors and source checkpoints, persisted atomically;
//! - [`source`] and [`sink`]: the traits connectors and sinks implement, with their guarantees;
//! - [`spool`]: a CRC-checked file of blobs a source keeps durably beside its checkpoint;
//! - [`testing`] (feature `testing`): the sink compliance suite and event builders.
//!
//! No database client lives here.

pub mod debezium;
pub mod error;
pub mod event;
mod fsutil;
pub mod incremental;
pub mod json;
pub mod log;
pub mod name;
pub mod offsets;
pub mod schema;
pub mod secret;
pub mod sink;
pub mod source;
pub mod spool;
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
