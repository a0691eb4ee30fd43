//! Where a stream begins: a binlog place or a GTID state, and what of the first transaction
//! the log already holds.

use crate::events::Place;
use crate::gtid::GtidState;

/// Where the stream begins, and what of the first transaction the log already holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// Binlog file.
    pub file: String,
    /// Position in it: the start of a transaction.
    pub pos: u64,
    /// MariaDB: the GTID state to connect with (`@slave_connect_state`); the server then
    /// sends every transaction after it, wherever it is. `None`: by file and position.
    pub gtids: Option<GtidState>,
    /// The transaction the log holds rows of, up to an index: skipped up to it.
    pub held: Option<Held>,
}

/// A transaction of which the log holds the rows up to an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its GTID, when the server gives one (then it names the transaction).
    pub gtid: Option<String>,
    /// Its binlog file and start (they name it without a GTID).
    pub file: String,
    /// Position of its first event.
    pub pos: u64,
    /// Index of the last row held.
    pub row: u64,
}

impl Held {
    /// Whether `place` is a row of this transaction that the log holds.
    pub fn holds(&self, place: &Place, index: u64) -> bool {
        self.is(place) && index <= self.row
    }

    /// Whether `place` is in this transaction.
    pub fn is(&self, place: &Place) -> bool {
        match (&self.gtid, &place.gtid) {
            (Some(held), Some(gtid)) => held == gtid,
            _ => self.file == place.file && self.pos == place.pos,
        }
    }
}
