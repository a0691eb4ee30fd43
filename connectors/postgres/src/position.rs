//! PostgreSQL's places: where an event comes from in the WAL ([`PgPosition`]) and the WAL
//! position an application names to wait for its write ([`Lsn`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use siphon_core::position::SourceFields;
use siphon_core::position::{DebeziumSource, Point, Position, point_as};

/// Where a PostgreSQL event comes from: its transaction's commit LSN, its own LSN, and its
/// index within the transaction (snapshot rows carry the slot's consistent point and a
/// running index). Stored as those three numbers in this order, as every build did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PgPosition {
    /// Commit LSN of the transaction.
    pub commit_lsn: u64,
    /// LSN of this change.
    pub lsn: u64,
    /// Index of the event within its transaction.
    pub index: u64,
}

impl PgPosition {
    /// [`Position::encode`] into `out` (cleared first), for a reader encoding many.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        postcard::to_io(self, out).expect("encoding into a Vec cannot fail");
    }

    /// Reads what [`Position::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Option<PgPosition> {
        postcard::from_bytes(bytes).ok()
    }
}

impl Position for PgPosition {
    fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding into a Vec cannot fail")
    }

    fn commit_point(&self) -> String {
        Lsn(self.commit_lsn).to_string()
    }

    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![
                (
                    "sequence",
                    json!(format!("[\"{}\",\"{}\"]", self.commit_lsn, self.lsn)),
                ),
                ("schema", json!(source.schema)),
                ("table", json!(source.table)),
                ("txId", json!(source.tx_id)),
                ("lsn", json!(self.lsn)),
                ("xmin", Json::Null),
                ("origin", Json::Null),
                ("origin_lsn", Json::Null),
            ],
            schema_name: "io.debezium.connector.postgresql.Source",
            schema_fields: vec![
                ("string", false, "schema"),
                ("string", false, "table"),
                ("int64", true, "txId"),
                ("int64", true, "lsn"),
                ("int64", true, "xmin"),
                ("string", true, "origin"),
                ("int64", true, "origin_lsn"),
            ],
        }
    }

    fn to_json(&self) -> Json {
        json!({ "Postgres": self })
    }
}

/// A WAL position, as PostgreSQL spells it (`16/B374D848`): what an application reads with
/// `pg_current_wal_lsn()` after its commit, to wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Reads `16/B374D848`.
    pub fn parse(text: &str) -> Option<Lsn> {
        let (high, low) = text.split_once('/')?;
        Some(Lsn(u64::from(u32::from_str_radix(high, 16).ok()?) << 32
            | u64::from(u32::from_str_radix(low, 16).ok()?)))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl Point for Lsn {
    fn covers(&self, asked: &dyn Point) -> bool {
        point_as::<Lsn>(asked).is_some_and(|asked| self >= asked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot reader's reused buffer holds the bytes every other encoding gives.
    #[test]
    fn encoding_into_a_buffer_gives_the_positions_bytes() {
        let mut buf = vec![9; 40];
        for p in [
            PgPosition {
                commit_lsn: 0x16_B374_D848,
                lsn: 0x16_B374_D848,
                index: 1_000_000,
            },
            PgPosition {
                commit_lsn: 1,
                lsn: 2,
                index: 0,
            },
        ] {
            p.encode_into(&mut buf);
            assert_eq!(buf, p.encode());
            assert_eq!(PgPosition::decode(&buf), Some(p));
        }
    }

    #[test]
    fn lsns_read_back_and_compare() {
        let lsn = Lsn::parse("16/B374D848").unwrap();
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert!(lsn.covers(&Lsn(lsn.0 - 1)) && lsn.covers(&lsn) && !lsn.covers(&Lsn(lsn.0 + 1)));
        assert_eq!(Lsn::parse("16-B374D848"), None);
    }

    /// The bytes every build stored for a PostgreSQL position.
    #[test]
    fn a_position_is_stored_as_its_three_numbers() {
        let p = PgPosition {
            commit_lsn: 300,
            lsn: 2,
            index: 1,
        };
        assert_eq!(
            p.encode(),
            postcard::to_allocvec(&(300u64, 2u64, 1u64)).unwrap()
        );
        assert_eq!(PgPosition::decode(&p.encode()), Some(p));
    }
}
