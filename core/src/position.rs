//! Places in a source database's change stream. What a place is belongs to the connector
//! that reads the stream — PostgreSQL's LSNs, MySQL's binlog files and GTIDs — behind two
//! traits: [`Position`], where an event comes from (stored with it in the log), and [`Point`],
//! a place an application names to wait until a sink has applied what was committed up to it.
//! The runtime, the wait endpoint, status and the Debezium `source` block work through them.

use std::any::Any;
use std::fmt::{self, Debug, Display};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value as Json;

/// Where an event comes from in its source's change stream. Ordered within one source; the
/// connector compares its own positions when it resumes.
pub trait Position: Send + Sync + Debug + Any {
    /// Its bytes in the log, which the connector's [`PositionDecoder`] reads back.
    fn encode(&self) -> Vec<u8>;

    /// Where the event's transaction committed, as the database names places: PostgreSQL's
    /// commit LSN (`16/B374D848`), a MySQL GTID (or `file:pos` without GTIDs).
    fn commit_point(&self) -> String;

    /// The connector's part of Debezium's `source` block (after the fields every connector
    /// has), for an event with this `source`.
    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource;

    /// The position as JSON: what a history table's `_siphon_position` column keeps.
    fn to_json(&self) -> Json;
}

/// What of its event a connector's part of Debezium's `source` block quotes besides the
/// position (from the event's `SourceInfo`).
#[derive(Debug, Clone, Copy)]
pub struct SourceFields<'a> {
    /// The schema (PostgreSQL), if any.
    pub schema: Option<&'a str>,
    /// The table.
    pub table: &'a str,
    /// The source transaction id.
    pub tx_id: Option<u64>,
}

/// A connector's part of Debezium's `source` block.
#[derive(Debug, Clone, PartialEq)]
pub struct DebeziumSource {
    /// The block's fields after the common ones (`version` … `ts_ns`), in Debezium's order.
    pub fields: Vec<(&'static str, Json)>,
    /// The Kafka Connect schema's name of the block (`io.debezium.connector.mysql.Source`).
    pub schema_name: &'static str,
    /// The schema's fields after the common ones: type, optional, name.
    pub schema_fields: Vec<(&'static str, bool, &'static str)>,
}

/// An event's position: the connector's, or, where no decoder of its connector is at hand
/// (a log read by a build without that connector), its bytes.
#[derive(Clone)]
pub struct SourcePosition(Arc<dyn Position>);

impl SourcePosition {
    /// A connector's position.
    pub fn new(position: impl Position) -> Self {
        SourcePosition(Arc::new(position))
    }

    /// The connector's position, if this is one of type `P`.
    pub fn get<P: Position>(&self) -> Option<&P> {
        let any: &dyn Any = &*self.0;
        any.downcast_ref()
    }

    /// Where the event's transaction committed (see [`Position::commit_point`]).
    pub fn commit_point(&self) -> String {
        self.0.commit_point()
    }

    /// The connector's part of Debezium's `source` block.
    pub fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        self.0.debezium_source(source)
    }

    /// The position as JSON.
    pub fn to_json(&self) -> Json {
        self.0.to_json()
    }

    /// Its bytes in the log.
    pub fn encode(&self) -> Vec<u8> {
        self.0.encode()
    }

    /// Decodes the bytes of a position not decoded yet ([`Undecoded`]) with `decoder`, for
    /// an event of `connector`; a position decoded already, or one the decoder does not know,
    /// stays as it is.
    pub fn decode_with(&mut self, connector: &str, decoder: &dyn PositionDecoder) {
        if let Some(undecoded) = self.get::<Undecoded>()
            && let Some(decoded) = decoder.decode(connector, &undecoded.0)
        {
            *self = decoded;
        }
    }
}

impl Debug for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for SourcePosition {
    /// Equal where they are stored the same.
    fn eq(&self, other: &Self) -> bool {
        self.encode() == other.encode()
    }
}

impl Serialize for SourcePosition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.encode())
    }
}

impl<'de> Deserialize<'de> for SourcePosition {
    /// Its bytes, [`Undecoded`] until [`SourcePosition::decode_with`] is given a decoder.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = serde_bytes_buf(deserializer)?;
        Ok(SourcePosition::new(Undecoded(bytes)))
    }
}

/// Reads a byte string (postcard writes `serialize_bytes` as a length and the bytes).
fn serde_bytes_buf<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a position's bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_byte_buf(Bytes)
}

/// Reads the positions of events of the connectors it knows.
pub trait PositionDecoder: Send + Sync + Debug {
    /// The position of an event of `connector` (its `source.connector`) stored as `bytes`;
    /// `None` for a connector it does not know or bytes that do not decode.
    fn decode(&self, connector: &str, bytes: &[u8]) -> Option<SourcePosition>;
}

/// A decoder that knows no connector: positions stay [`Undecoded`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDecoder;

impl PositionDecoder for NoDecoder {
    fn decode(&self, _: &str, _: &[u8]) -> Option<SourcePosition> {
        None
    }
}

/// A position whose connector's decoder was not at hand: its bytes, shown as hex, so that a
/// log stays readable by a build without the connector that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecoded(pub Vec<u8>);

impl Undecoded {
    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Position for Undecoded {
    fn encode(&self) -> Vec<u8> {
        self.0.clone()
    }

    fn commit_point(&self) -> String {
        self.hex()
    }

    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![
                ("table", Json::from(source.table)),
                ("position", Json::from(self.hex())),
            ],
            schema_name: "siphon.Source",
            schema_fields: vec![("string", true, "table"), ("string", true, "position")],
        }
    }

    fn to_json(&self) -> Json {
        serde_json::json!({ "undecoded": self.hex() })
    }
}

/// A place in a source database's change stream that an application names after its commit
/// (a PostgreSQL LSN, a MariaDB GTID state), to wait until a sink has applied everything
/// committed up to it (read-your-writes). The connector that reads it compares it.
pub trait Point: Send + Sync + Debug + Display + Any {
    /// Whether a source that has read up to `self` has read everything committed up to
    /// `asked` (false for a point of another connector).
    fn covers(&self, asked: &dyn Point) -> bool;
}

/// A point, shared.
pub type SourcePoint = Arc<dyn Point>;

/// The point `point` as type `P`, if it is one.
pub fn point_as<P: Point>(point: &dyn Point) -> Option<&P> {
    let any: &dyn Any = point;
    any.downcast_ref()
}

/// How far a source has read: every change the database committed at or before `point` is
/// in the log below `log_end`.
#[derive(Debug, Clone, Default)]
pub struct Reached {
    /// Where in the database's change stream; `None` before the source says.
    pub point: Option<SourcePoint>,
    /// The log's end when it said so.
    pub log_end: u64,
}
