//! What MariaDB's own binlog events say: a GTID event's group, a rotation's file name.

use super::*;

/// What a MariaDB GTID event says of the group it starts.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MariadbGtid {
    pub(super) gtid: Gtid,
    /// It stands alone (a DDL: no BEGIN/COMMIT around it).
    pub(super) standalone: bool,
    /// It is a prepared XA transaction's: this one's.
    pub(super) prepared_xa: Option<Xid>,
}

/// A MariaDB GTID event. Body: sequence (8 bytes), domain (4), flags (1); with
/// FL_GROUP_COMMIT_ID (2) a commit id (8); with FL_PREPARED_XA (64) or FL_COMPLETED_XA (128)
/// the XID: format id (4), gtrid and bqual lengths (1 each), their bytes.
pub(super) fn mariadb_gtid(body: &[u8], server: u32) -> Option<MariadbGtid> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    let flags = *body.get(12)?;
    let mut at = 13 + if flags & 2 != 0 { 8 } else { 0 };
    let prepared_xa = if flags & 64 != 0 {
        let format = u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?);
        let (gtrid, bqual) = (
            usize::from(*body.get(at + 4)?),
            usize::from(*body.get(at + 5)?),
        );
        at += 6;
        let data = body.get(at..at + gtrid + bqual)?;
        Some(Xid {
            format,
            gtrid: data[..gtrid].to_vec(),
            bqual: data[gtrid..].to_vec(),
        })
    } else {
        None
    };
    Some(MariadbGtid {
        gtid: Gtid {
            domain,
            server,
            seq,
        },
        standalone: flags & 1 != 0,
        prepared_xa,
    })
}

/// The file a Rotate event moves to. The stream's first Rotate, which the server makes up and
/// sends before the format description, carries the checksum's 4 bytes after the name, which
/// `mysql_common` cannot strip before it knows the format (mysql_async#189).
pub(super) fn rotated_to(name: &[u8], checksummed: bool) -> String {
    let name = match name.len().checked_sub(4) {
        Some(end) if checksummed => &name[..end],
        _ => name,
    };
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_gtid_events_decode_from_their_bytes() {
        // Recorded from MariaDB 10.11 (mariadb-binlog --hexdump): "GTID 0-1-658 trans" and
        // "GTID 0-1-659 ddl", each with its CRC32 after the body.
        let trans = [
            0x92, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0, 0, 0, 0, 0, 0, 0xe1, 0xb1, 0x62,
            0xae,
        ];
        let ddl = [
            0x93, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0, 0, 0xd2, 0x14, 0x8e,
            0x9e,
        ];
        let text = |g: Option<MariadbGtid>| g.map(|g| (g.gtid.to_string(), g.standalone));
        assert_eq!(
            text(mariadb_gtid(&trans, 1)),
            Some(("0-1-658".into(), false))
        );
        assert_eq!(text(mariadb_gtid(&ddl, 1)), Some(("0-1-659".into(), true)));
        assert_eq!(
            mariadb_gtid(&trans[..12], 1),
            None,
            "a cut event is no GTID"
        );
        // "GTID 0-1-4" of XA PREPARE 'a' (flags: prepared XA, transactional, parallel), then
        // the multi-engine extra flags; and a group-commit one of 'gc1236' (commit id 907).
        let prepared = [
            4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 1, 0, 0, 0, 1, 0, b'a', 1, 0xff,
        ];
        let g = mariadb_gtid(&prepared, 1).unwrap();
        assert_eq!(
            (
                g.gtid.to_string(),
                g.standalone,
                g.prepared_xa.map(|x| x.to_string())
            ),
            ("0-1-4".into(), false, Some("X'61',X'',1".into()))
        );
        let mut grouped = vec![4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4e];
        grouped.extend(907u64.to_le_bytes());
        grouped.extend([1, 0, 0, 0, 6, 0]);
        grouped.extend(b"gc1236");
        assert_eq!(
            mariadb_gtid(&grouped, 1)
                .and_then(|g| g.prepared_xa)
                .map(|x| x.gtrid),
            Some(b"gc1236".to_vec())
        );
    }

    #[test]
    fn the_first_rotate_loses_its_checksum_bytes() {
        assert_eq!(
            rotated_to(b"mysql-bin.000007\xe1\xb1\x62\xae", true),
            "mysql-bin.000007"
        );
        assert_eq!(rotated_to(b"mysql-bin.000008", false), "mysql-bin.000008");
    }
}
