//! XA transactions. A two-phase XA transaction reaches the binlog in two groups, each with a
//! GTID of its own and possibly days apart: at `XA PREPARE` its rows, ended by an XA_prepare
//! event (MariaDB flags the GTID event as a prepared XA; MySQL starts the group with `XA
//! START`); at `XA COMMIT` or `XA ROLLBACK` a group holding only that statement. Checked in a
//! MariaDB 10.11 binlog: `XA COMMIT … ONE PHASE` is an ordinary transaction there; MySQL ends
//! such a group with an XA_prepare event marked one-phase.
//!
//! So the stream keeps a prepared transaction's rows in a spool beside the checkpoint
//! (durable before the checkpoint names it, so the GTID state may pass the prepare group),
//! appends them at the COMMIT group's place when it arrives, and drops them at a ROLLBACK.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use siphon_core::source::SourceContext;
use siphon_core::{Event, Result};

use crate::ddl::Xid;
use crate::events::Place;
use crate::gtid::Gtid;
use crate::position::MysqlPosition;
use crate::resume::Resume;

/// A prepared XA transaction whose outcome is not in the log yet, in the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prepared {
    /// Its id.
    pub xid: Xid,
    /// The prepare group's place ([`place_key`]): a restart that reads it again skips it.
    pub at: String,
    /// The prepare group's binlog file and start, and its GTID.
    pub file: String,
    /// See `file`.
    pub pos: u64,
    /// See `file`.
    pub gtid: Option<String>,
    /// Rows in its spool.
    pub rows: u64,
    /// The COMMIT group's place, once its rows are being appended: a restart that finds the
    /// log ending with that group knows it committed.
    #[serde(default)]
    pub committing: Option<String>,
}

impl Prepared {
    /// Whether a stream resumed at `resume` reads this transaction's prepare group again:
    /// by GTID, where the state to connect with does not cover it; else by binlog position.
    pub fn read_again_from(&self, resume: &Resume) -> bool {
        let gtid = self.gtid.as_deref().and_then(Gtid::parse);
        match (&resume.gtids, gtid) {
            (Some(state), Some(g)) => state.get(g.domain).is_none_or(|s| s.seq < g.seq),
            _ => (self.file.as_str(), self.pos) >= (resume.file.as_str(), resume.pos),
        }
    }
}

/// What names a transaction's place across restarts: its GTID, else its binlog file and
/// start.
pub fn place_key(place: &Place) -> String {
    place.position(0).transaction_key()
}

/// The place key of an event's transaction.
fn event_key(event: &Event) -> Option<String> {
    event
        .source
        .position
        .get::<MysqlPosition>()
        .map(MysqlPosition::transaction_key)
}

/// Where the rows of the transaction prepared at `at` are spooled.
pub fn spool_path(ctx: &SourceContext, at: &str) -> PathBuf {
    let name: String = at
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    ctx.offsets.source_file(&format!("xa-{name}.spool"))
}

/// An XA_prepare event's body: one-phase flag (1 byte), format id (4, little-endian),
/// gtrid and bqual lengths (4 each), then their bytes. Whether it commits in one phase, and
/// the id.
pub fn prepare_event(body: &[u8]) -> Option<(bool, Xid)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    let one_phase = *body.first()? != 0;
    let format = u32_at(1)?;
    let gtrid_len = usize::try_from(u32_at(5)?).ok()?;
    let bqual_len = usize::try_from(u32_at(9)?).ok()?;
    let data = body.get(13..13 + gtrid_len + bqual_len)?;
    Some((
        one_phase,
        Xid {
            format,
            gtrid: data[..gtrid_len].to_vec(),
            bqual: data[gtrid_len..].to_vec(),
        },
    ))
}

/// On start: a transaction whose COMMIT group the log ends with committed before a crash that
/// left it in the checkpoint — it is forgotten; and spools no prepared transaction names are
/// removed (written before a crash, before their prepare was recorded).
pub async fn settle(ctx: &SourceContext, prepared: &mut Vec<Prepared>) -> Result<()> {
    if prepared.iter().any(|p| p.committing.is_some())
        && let Some(record) = ctx.log.last_record().await?
        && record
            .flags
            .contains(siphon_core::log::RecordFlags::TXN_END)
    {
        let last = Event::decode(&record.value, ctx.log.schemas(), &crate::MysqlKind)?;
        let key = event_key(&last);
        for p in prepared
            .iter()
            .filter(|p| p.committing.is_some() && p.committing == key)
        {
            crate::spool::remove(&spool_path(ctx, &p.at))?;
        }
        prepared.retain(|p| p.committing.is_none() || p.committing != key);
    }
    let named: Vec<PathBuf> = prepared.iter().map(|p| spool_path(ctx, &p.at)).collect();
    for path in ctx.offsets.source_files("xa-")? {
        if !named.contains(&path) {
            crate::spool::remove(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_reads_a_prepare_group_again_only_from_before_it() {
        use crate::gtid::GtidState;
        let prepared = |file: &str, pos, gtid: Option<&str>| Prepared {
            xid: Xid {
                format: 1,
                gtrid: b"a".to_vec(),
                bqual: Vec::new(),
            },
            at: String::new(),
            file: file.into(),
            pos,
            gtid: gtid.map(Into::into),
            rows: 1,
            committing: None,
        };
        let resume = |file: &str, pos, gtids: Option<&str>| Resume {
            file: file.into(),
            pos,
            gtids: gtids.and_then(GtidState::parse),
            held: None,
        };
        let p = prepared("bin.000002", 500, Some("0-1-20"));
        assert!(p.read_again_from(&resume("bin.000002", 100, Some("0-1-19,1-1-50"))));
        assert!(!p.read_again_from(&resume("bin.000002", 100, Some("0-1-20"))));
        assert!(
            p.read_again_from(&resume("bin.000001", 9, Some("1-1-50"))),
            "another domain"
        );
        let p = prepared("bin.000002", 500, None);
        assert!(p.read_again_from(&resume("bin.000002", 500, None)));
        assert!(p.read_again_from(&resume("bin.000001", 900, None)));
        assert!(!p.read_again_from(&resume("bin.000002", 501, None)));
        assert!(!p.read_again_from(&resume("bin.000003", 4, None)));
    }

    #[test]
    fn xa_prepare_events_decode_from_their_bytes() {
        // Recorded from MariaDB 10.11 (mariadb-binlog --hexdump) for XA PREPARE 'a'.
        let body = [0x00, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b'a'];
        assert_eq!(
            prepare_event(&body),
            Some((
                false,
                Xid {
                    format: 1,
                    gtrid: b"a".to_vec(),
                    bqual: Vec::new()
                }
            ))
        );
        // MySQL's one-phase commit, 'gt','bq',7.
        let body = [
            0x01, 7, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, b'g', b't', b'b', b'q',
        ];
        let (one_phase, xid) = prepare_event(&body).unwrap();
        assert!(one_phase);
        assert_eq!(xid.to_string(), "X'6774',X'6271',7");
        assert_eq!(prepare_event(&body[..15]), None, "cut short");
    }
}
