//! MySQL/MariaDB's places: where an event comes from in the binlog ([`MysqlPosition`]), and the
//! GTID state an application names to wait for its write (a [`GtidState`] as a [`Point`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use siphon_core::position::SourceFields;
use siphon_core::position::{DebeziumSource, Point, Position, point_as};

use crate::gtid::GtidState;

/// Where a MySQL/MariaDB event comes from: its transaction's binlog file and position, its
/// row within the transaction, the transaction's GTID where the server gives one, and the
/// server it was written on. Stored as those fields in this order, as every build did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MysqlPosition {
    /// Binlog file of the transaction's first event.
    pub file: String,
    /// Position of that event.
    pub pos: u64,
    /// Index of the row within the transaction.
    pub row: u32,
    /// GTID of the transaction, if any.
    pub gtid: Option<String>,
    /// The server's id.
    pub server_id: u32,
}

impl MysqlPosition {
    /// Reads what [`Position::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Option<MysqlPosition> {
        postcard::from_bytes(bytes).ok()
    }

    /// What names its transaction across restarts: its GTID, else its binlog file and start.
    pub fn transaction_key(&self) -> String {
        self.gtid
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.file, self.pos))
    }
}

/// A [`MysqlPosition`]'s fields, borrowed: it encodes as the position does, for a reader that
/// encodes many positions of one transaction (or snapshot) without building each.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PositionRef<'a> {
    pub file: &'a str,
    pub pos: u64,
    pub row: u32,
    pub gtid: Option<&'a str>,
    pub server_id: u32,
}

impl PositionRef<'_> {
    /// [`Position::encode`] into `out` (cleared first).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        postcard::to_io(self, out).expect("encoding into a Vec cannot fail");
    }
}

impl Position for MysqlPosition {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.file.len());
        PositionRef {
            file: &self.file,
            pos: self.pos,
            row: self.row,
            gtid: self.gtid.as_deref(),
            server_id: self.server_id,
        }
        .encode_into(&mut out);
        out
    }

    fn commit_point(&self) -> String {
        self.transaction_key()
    }

    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![
                ("sequence", Json::Null),
                ("table", json!(source.table)),
                ("server_id", json!(self.server_id)),
                ("gtid", json!(self.gtid)),
                ("file", json!(self.file)),
                ("pos", json!(self.pos)),
                ("row", json!(self.row)),
                // The thread id is in a BEGIN query event, which MariaDB's GTID event
                // replaces; the statement needs binlog_annotate_row_events (Debezium's
                // include.query).
                ("thread", Json::Null),
                ("query", Json::Null),
            ],
            schema_name: "io.debezium.connector.mysql.Source",
            schema_fields: vec![
                ("string", true, "table"),
                ("int64", false, "server_id"),
                ("string", true, "gtid"),
                ("string", false, "file"),
                ("int64", false, "pos"),
                ("int32", false, "row"),
                ("int64", true, "thread"),
                ("string", true, "query"),
            ],
        }
    }

    fn to_json(&self) -> Json {
        json!({ "Mysql": self })
    }
}

/// A MariaDB GTID state (`@@gtid_binlog_pos` after a commit) as a point to wait for.
impl Point for GtidState {
    fn covers(&self, asked: &dyn Point) -> bool {
        point_as::<GtidState>(asked).is_some_and(|asked| GtidState::covers(self, asked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes every build stored for a MySQL position.
    #[test]
    fn a_position_is_stored_as_its_fields_in_order() {
        let p = MysqlPosition {
            file: "mysql-bin.000003".into(),
            pos: 4,
            row: 2,
            gtid: Some("0-1-7".into()),
            server_id: 1,
        };
        let legacy = postcard::to_allocvec(&(
            "mysql-bin.000003".to_owned(),
            4u64,
            2u32,
            Some("0-1-7".to_owned()),
            1u32,
        ))
        .unwrap();
        assert_eq!(p.encode(), legacy);
        assert_eq!(MysqlPosition::decode(&legacy), Some(p));
    }
}
