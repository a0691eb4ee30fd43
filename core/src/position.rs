//! Places in a source database's change stream.

/// A place in a database's change stream that an application names after its commit, to
/// wait until a sink has applied everything committed up to it (read-your-writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourcePoint {
    /// PostgreSQL: a WAL position (`pg_current_wal_lsn()` after the commit).
    Lsn(u64),
    /// MariaDB: a GTID state, one GTID per replication domain (`@@gtid_binlog_pos` after the
    /// commit).
    Gtids(String),
}

impl SourcePoint {
    /// PostgreSQL's spelling of a WAL position: `16/B374D848`.
    pub fn parse_lsn(text: &str) -> Option<u64> {
        let (high, low) = text.split_once('/')?;
        Some(
            u64::from(u32::from_str_radix(high, 16).ok()?) << 32
                | u64::from(u32::from_str_radix(low, 16).ok()?),
        )
    }
}

impl std::fmt::Display for SourcePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourcePoint::Lsn(lsn) => write!(f, "{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF),
            SourcePoint::Gtids(state) => f.write_str(state),
        }
    }
}

/// How far a source has read: every change the database committed at or before `point` is
/// in the log below `log_end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reached {
    /// Where in the database's change stream; `None` before the source says.
    pub point: Option<SourcePoint>,
    /// The log's end when it said so.
    pub log_end: u64,
}
