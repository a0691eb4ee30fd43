//! The records a change log holds.

/// Flags of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordFlags(pub u8);

impl RecordFlags {
    /// The last record of a source transaction: a sink may commit after it.
    pub const TXN_END: RecordFlags = RecordFlags(1);
    /// The key's row is gone (a delete): compaction may drop the key after the grace period.
    pub const TOMBSTONE: RecordFlags = RecordFlags(2);
    /// The row leaves some columns unchanged (PostgreSQL TOAST): their values are in the
    /// key's earlier records, which compaction therefore keeps back to a whole row.
    pub const PARTIAL: RecordFlags = RecordFlags(4);
    /// This record and the next one are the two halves of a key change (the delete of the
    /// old key, the create of the new): a batch never ends between them, and compaction
    /// keeps the old key's records back to a whole row while the new key's row needs them.
    pub const WITH_NEXT: RecordFlags = RecordFlags(8);
    /// Compaction moved this record under the key of the row it serves (an old key's record
    /// that a key change's new row takes columns from): the key is not its event's.
    pub const MOVED: RecordFlags = RecordFlags(16);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: RecordFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags and `other`'s.
    #[must_use]
    pub fn with(self, other: RecordFlags) -> RecordFlags {
        RecordFlags(self.0 | other.0)
    }
}

/// A record to append; the log assigns offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// Compaction key (empty: never compacted).
    pub key: Vec<u8>,
    /// The payload (an encoded event).
    pub value: Vec<u8>,
    /// Flags.
    pub flags: RecordFlags,
}

/// A record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its offset.
    pub offset: u64,
    /// When it was appended, ms since the epoch.
    pub timestamp_ms: i64,
    /// Flags.
    pub flags: RecordFlags,
    /// Compaction key.
    pub key: Vec<u8>,
    /// Payload.
    pub value: Vec<u8>,
}
