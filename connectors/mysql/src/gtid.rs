//! MariaDB's GTID position: the last transaction applied in each replication domain, as
//! `@slave_connect_state` takes it and `gtid_binlog_pos` / `BINLOG_GTID_POS()` give it
//! (`domain-server-sequence`, comma-separated, one per domain).
//!
//! A replica that connects with such a state receives every transaction after it, whatever the
//! binlog files are called on the server it connects to: the position survives a failover to
//! another server of the replication topology, where a file name and offset do not.

use std::collections::BTreeMap;
use std::fmt;

/// One transaction's GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gtid {
    /// Replication domain.
    pub domain: u32,
    /// The server the transaction was first written on.
    pub server: u32,
    /// Sequence number, increasing within the domain.
    pub seq: u64,
}

impl Gtid {
    /// Parses `domain-server-sequence`.
    pub fn parse(text: &str) -> Option<Gtid> {
        let mut parts = text.trim().splitn(3, '-');
        Some(Gtid {
            domain: parts.next()?.parse().ok()?,
            server: parts.next()?.parse().ok()?,
            seq: parts.next()?.parse().ok()?,
        })
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

/// The last GTID of each domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState(BTreeMap<u32, Gtid>);

impl GtidState {
    /// Parses a state as the server writes it; `None` if any part is not a GTID.
    pub fn parse(text: &str) -> Option<GtidState> {
        let mut state = GtidState::default();
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            state.advance(Gtid::parse(part)?);
        }
        Some(state)
    }

    /// Whether no domain has a transaction yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records `gtid` as applied: its domain's entry, unless the state is already past it.
    pub fn advance(&mut self, gtid: Gtid) {
        let entry = self.0.entry(gtid.domain).or_insert(gtid);
        if gtid.seq >= entry.seq {
            *entry = gtid;
        }
    }

    /// Whether this state is at or past `other` in every domain of `other`.
    pub fn covers(&self, other: &GtidState) -> bool {
        other
            .0
            .values()
            .all(|g| self.get(g.domain).is_some_and(|mine| mine.seq >= g.seq))
    }

    /// Sets `domain` to `to`, or to no transaction: the state before a transaction, taken
    /// from where that transaction began.
    pub fn rewind(&mut self, domain: u32, to: Option<Gtid>) {
        match to {
            Some(gtid) => self.0.insert(domain, gtid),
            None => self.0.remove(&domain),
        };
    }

    /// The GTID of `domain`, if it has one.
    pub fn get(&self, domain: u32) -> Option<Gtid> {
        self.0.get(&domain).copied()
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, gtid) in self.0.values().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{gtid}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_and_writes_as_the_server_spells_it() {
        let state = GtidState::parse("1-2-30,0-1-658").expect("a state");
        assert_eq!(
            state.to_string(),
            "0-1-658,1-2-30",
            "one per domain, by domain"
        );
        assert_eq!(GtidState::parse("").expect("empty").to_string(), "");
        assert!(GtidState::parse("0-1").is_none());
        assert!(GtidState::parse("0-1-x").is_none());
    }

    #[test]
    fn a_state_advances_per_domain_and_never_back() {
        let mut state = GtidState::parse("0-1-10").expect("a state");
        state.advance(Gtid::parse("1-1-3").expect("gtid"));
        state.advance(Gtid::parse("0-2-12").expect("gtid"));
        state.advance(Gtid::parse("0-1-11").expect("gtid"));
        assert_eq!(state.to_string(), "0-2-12,1-1-3");
        assert!(state.covers(&GtidState::parse("0-1-12,1-1-2").expect("a state")));
        assert!(!state.covers(&GtidState::parse("0-1-13").expect("a state")));
        assert!(!state.covers(&GtidState::parse("2-1-1").expect("a state")));
        state.rewind(0, Gtid::parse("0-1-11"));
        assert_eq!(
            state.to_string(),
            "0-1-11,1-1-3",
            "rewound to where it is told"
        );
        state.rewind(1, None);
        assert_eq!(state.to_string(), "0-1-11");
    }
}
