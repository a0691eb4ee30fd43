//! Spatial values ([`Value::Geometry`]) as Debezium's MySQL connector writes them (3.6.3's
//! `BinlogValueConverters` and `io.debezium.data.geometry`): the struct
//! `io.debezium.data.geometry.Geometry` with the standard WKB and the SRID, null for 0
//! (`BinlogGeometry.fromBytes`); a `POINT` column's values as `…geometry.Point`, the same
//! with the coordinates first. The WKB is a bytes field of the struct, which Kafka Connect's
//! JSON writes as base64 whatever `binary.handling.mode` says (that mode turns binary
//! columns, not struct fields, into text).
//!
//! PostgreSQL's built-in `point` is Debezium's Point there too (its other geometric types,
//! which Debezium leaves out, stay the text PostgreSQL prints).
//!
//! The stores keep the Geometry struct's two fields for every spatial column (a document's
//! `{"wkb": …, "srid": …}`), so that a reader finds the same object whatever the column's
//! declared type.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value as Json, json};
use siphon_core::Value;

/// Kafka Connect's name of a geometry struct.
pub const GEOMETRY: &str = "io.debezium.data.geometry.Geometry";
/// Kafka Connect's name of a point struct.
pub const POINT: &str = "io.debezium.data.geometry.Point";

/// A geometry as the Geometry struct: `{"wkb": base64, "srid": n or null}`.
pub fn geometry_json(wkb: &[u8], srid: u32) -> Json {
    json!({"wkb": BASE64.encode(wkb), "srid": srid_json(srid)})
}

/// A `POINT` column's value as Debezium's Point struct, `{"x", "y", "wkb", "srid"}`; the
/// Geometry struct where the WKB is not a 2D point (Debezium refuses such a value).
pub fn point_json(wkb: &[u8], srid: u32) -> Json {
    match point_xy(wkb) {
        Some((x, y)) => json!({
            "x": x,
            "y": y,
            "wkb": BASE64.encode(wkb),
            "srid": srid_json(srid),
        }),
        None => geometry_json(wkb, srid),
    }
}

/// PostgreSQL's `point` (its text, `(x,y)`) as Debezium's PostgreSQL connector writes it:
/// the Point struct with the WKB it builds from the coordinates and no SRID; `None` for text
/// that is not a point.
pub fn pg_point_json(text: &str) -> Option<Json> {
    let (x, y) = text.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
    let (x, y): (f64, f64) = (x.trim().parse().ok()?, y.trim().parse().ok()?);
    let wkb: Vec<u8> = [1u8, 1, 0, 0, 0]
        .into_iter()
        .chain(x.to_le_bytes())
        .chain(y.to_le_bytes())
        .collect();
    Some(json!({"x": x, "y": y, "wkb": BASE64.encode(wkb), "srid": null}))
}

fn srid_json(srid: u32) -> Json {
    if srid == 0 { Json::Null } else { json!(srid) }
}

/// The coordinates of a 2D point's WKB: a byte-order mark, type 1, two doubles.
fn point_xy(wkb: &[u8]) -> Option<(f64, f64)> {
    let (&order, rest) = wkb.split_first()?;
    if rest.len() != 20 {
        return None;
    }
    let word = |at: usize| -> [u8; 4] { rest[at..at + 4].try_into().expect("four bytes") };
    let double = |at: usize| -> [u8; 8] { rest[at..at + 8].try_into().expect("eight bytes") };
    let little = order == 1;
    let (kind, x, y) = if little {
        (
            u32::from_le_bytes(word(0)),
            f64::from_le_bytes(double(4)),
            f64::from_le_bytes(double(12)),
        )
    } else {
        (
            u32::from_be_bytes(word(0)),
            f64::from_be_bytes(double(4)),
            f64::from_be_bytes(double(12)),
        )
    };
    (kind == 1).then_some((x, y))
}

/// The Kafka Connect schema of a spatial column's values (`point`: Debezium's Point).
pub fn schema(point: bool) -> Json {
    if point {
        json!({
            "type": "struct",
            "fields": [
                {"type": "double", "optional": false, "field": "x"},
                {"type": "double", "optional": false, "field": "y"},
                {"type": "bytes", "optional": true, "field": "wkb"},
                {"type": "int32", "optional": true, "field": "srid"},
            ],
            "optional": true,
            "name": POINT,
            "version": 1,
            "doc": "Geometry (POINT)",
        })
    } else {
        json!({
            "type": "struct",
            "fields": [
                {"type": "bytes", "optional": false, "field": "wkb"},
                {"type": "int32", "optional": true, "field": "srid"},
            ],
            "optional": true,
            "name": GEOMETRY,
            "version": 1,
            "doc": "Geometry",
        })
    }
}

/// Reads back a geometry [`geometry_json`] or [`point_json`] wrote.
pub fn decode(json: &Json) -> Result<Value, String> {
    let wkb = json["wkb"]
        .as_str()
        .and_then(|text| BASE64.decode(text).ok())
        .ok_or_else(|| format!("bad geometry (no base64 wkb): {json}"))?;
    let srid = match &json["srid"] {
        Json::Null => 0,
        srid => srid
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("bad geometry srid: {json}"))?,
    };
    Ok(Value::Geometry { wkb, srid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point_wkb(x: f64, y: f64) -> Vec<u8> {
        [1u8, 1, 0, 0, 0]
            .into_iter()
            .chain(x.to_le_bytes())
            .chain(y.to_le_bytes())
            .collect()
    }

    #[test]
    fn a_point_has_its_coordinates_and_srid_0_is_null() {
        let wkb = point_wkb(1.5, -2.0);
        assert_eq!(
            point_json(&wkb, 4326),
            json!({"x": 1.5, "y": -2.0, "wkb": BASE64.encode(&wkb), "srid": 4326})
        );
        assert_eq!(
            geometry_json(&wkb, 0),
            json!({"wkb": BASE64.encode(&wkb), "srid": null})
        );
        // Big-endian WKB reads the same.
        let mut big = vec![0u8, 0, 0, 0, 1];
        big.extend(1.5f64.to_be_bytes());
        big.extend((-2.0f64).to_be_bytes());
        assert_eq!(point_json(&big, 0)["x"], 1.5);
        // Not a point: the Geometry struct.
        let empty_collection = [1u8, 7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(point_json(&empty_collection, 0).get("x"), None);
    }

    #[test]
    fn a_postgres_point_is_debeziums_point() {
        let wkb = point_wkb(1.5, -2.0);
        assert_eq!(
            pg_point_json("(1.5,-2)").unwrap().to_string(),
            json!({"x": 1.5, "y": -2.0, "wkb": BASE64.encode(&wkb), "srid": null}).to_string()
        );
        assert_eq!(pg_point_json("<(1,2),3>"), None);
    }

    #[test]
    fn a_geometry_reads_back() {
        for srid in [0, 4326] {
            let wkb = point_wkb(3.0, 4.0);
            for written in [geometry_json(&wkb, srid), point_json(&wkb, srid)] {
                assert_eq!(
                    decode(&written).unwrap(),
                    Value::Geometry {
                        wkb: wkb.clone(),
                        srid
                    }
                );
            }
        }
        assert!(decode(&json!({"srid": 1})).is_err());
    }
}
