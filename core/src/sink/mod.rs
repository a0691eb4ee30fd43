//! The sink side: what a derived store implements, and the pieces sinks share: [`changes`] (a
//! batch reduced to its net effect per key), [`routing`] (which tables and columns a sink
//! takes, and the names it writes them under) and [`stage`] (what a sink's events pass
//! through on their way).

pub mod changes;
pub mod routing;
pub mod row_state;
pub mod stage;

use async_trait::async_trait;

use crate::Result;
use crate::event::Event;
use crate::log::LogId;
use crate::source::TableInfo;

/// The cursor a store keeps for its sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCursor {
    /// The next offset to apply: everything below it is in the store.
    pub next_offset: u64,
    /// The log it is a position in; `None` for a cursor saved before logs had identities.
    pub log: Option<LogId>,
}

/// One event as a sink receives it, with its log offset (the row's version).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRecord {
    /// Log offset: the version of the row it writes.
    pub offset: u64,
    /// The change.
    pub event: Event,
}

/// A stretch of the log as one sink receives it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SinkBatch {
    /// The records of the stretch this sink takes, in log order; empty when every one was
    /// routed away.
    pub records: Vec<SinkRecord>,
    /// The offset after the stretch: the sink's cursor once the batch is applied.
    pub end: u64,
    /// The stretch ends a source transaction: a store that keeps one open commits here.
    pub ends_transaction: bool,
    /// The stretch continues this sink's reading of the log in the log's one order: the
    /// store's cursor is a position in it, and a record below it is applied already. `false`
    /// for a member of a consumer group sharing a partitioned log: each table's records come
    /// in log order, the tables interleaved (and shared with other members), so the store
    /// applies every record and skips none by its cursor.
    pub ordered: bool,
}

impl SinkBatch {
    /// `records` as a stretch that ends a source transaction after the last of them.
    pub fn whole(records: Vec<SinkRecord>) -> Self {
        SinkBatch {
            end: records.last().map_or(0, |r| r.offset + 1),
            records,
            ends_transaction: true,
            ordered: true,
        }
    }
}

impl SinkRecord {
    /// The store refused this record for good: an error naming its offset and table.
    pub fn rejected(&self, reason: impl Into<String>) -> crate::Error {
        crate::Error::Rejected {
            offset: self.offset,
            table: self.event.source.table_name(),
            reason: reason.into(),
        }
    }
}

/// A derived store that follows the log.
///
/// Guarantees a sink must keep:
/// - [`Sink::apply`] is idempotent: applying a batch again changes nothing;
/// - it is version-guarded by log offset: a record never overwrites what a record with a
///   higher offset wrote, so a replay of any prefix of the log is harmless;
/// - a delete needs only the key (no before-image);
/// - a value [`Value::Unchanged`](crate::Value::Unchanged) leaves the stored column as it is;
/// - where the store allows it, the cursor is written in the same transaction as the data and
///   [`Sink::open`] returns it; otherwise the runtime saves it after `apply` returns;
/// - a cursor kept in the store carries the identity of the log it is a position in (given
///   to [`Sink::open`]), so that a store that followed another log is rebuilt, never read
///   as a position in this one;
/// - errors say whether retrying helps ([`crate::Error::kind`]); a record the store refuses
///   for good is reported as [`crate::Error::Rejected`] with its offset, after the records
///   before it in the batch were applied;
/// - after a transient error from `apply`, the runtime calls [`Sink::open`] again and goes on
///   from the cursor it returns (else from the failed batch): a sink that keeps a store
///   transaction open across batches (to commit whole source transactions) rewinds to its
///   last commit this way;
/// - a batch that `ends_transaction` ends a source transaction: a transactional store commits
///   there, with its cursor at the batch's `end` (even when the batch has no record of its
///   own, every record of the stretch being routed away);
/// - while [`Sink::holds_transaction`] says a store transaction is open, what `apply`
///   returned for is not durable: the log keeps it until a batch commits it;
/// - a batch that is not [`SinkBatch::ordered`] (a consumer group's share of the log) is
///   applied whole: no record of it is skipped because the store's cursor is past it.
#[async_trait]
pub trait Sink: Send {
    /// Reaches the store and checks that this sink can write to it, without changing anything
    /// (`siphon check --connect`).
    async fn check(&mut self) -> Result<()>;

    /// Connects and prepares the store. Refuses (permanent error) a table it cannot take,
    /// such as a table without a primary key for a keyed store. Returns the cursor the store
    /// keeps, if it keeps one; every cursor it saves from now on carries `log`.
    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>>;

    /// Applies a batch, its records in log order. A batch ends on a transaction boundary
    /// whenever the log has one within the batch size.
    async fn apply(&mut self, batch: &SinkBatch) -> Result<()>;

    /// Whether the store holds a transaction open across batches (the source transaction has
    /// not ended): what was applied since its last commit is lost if it fails, and the
    /// runtime keeps those records in the log for the replay after [`Sink::open`].
    fn holds_transaction(&self) -> bool {
        false
    }

    /// Moves the cursor the store keeps back to `next` (a replay without `--reset`): records
    /// from `next` on are applied again over what the store holds. The default, for stores
    /// without a cursor of their own, does nothing.
    async fn rewind(&mut self, next: u64) -> Result<()> {
        let _ = next;
        Ok(())
    }

    /// Removes everything this sink wrote for `tables`, and its stored cursor (for `siphon
    /// replay --reset`). Called before [`Sink::open`].
    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()>;

    /// Whether the store keeps this sink's cursor ([`Sink::open`] returns it once written).
    /// Then a store that has none while the sink had applied records was wiped or replaced,
    /// and the runtime rebuilds it from the start of the log.
    fn keeps_cursor(&self) -> bool {
        false
    }

    /// Whether it keeps every event (an audit or history table): then the log never compacts
    /// what it has not read.
    fn keeps_history(&self) -> bool {
        false
    }
}
