//! Debezium's JSON for change events: each value as Debezium 3.x's PostgreSQL connector
//! writes it with `decimal.handling.mode=string`, `time.precision.mode=isostring`,
//! `interval.handling.mode=string`, `binary.handling.mode=base64` and
//! `hstore.handling.mode=json` (checked against the real Debezium: `tests/debezium.rs`),
//! keys, topics and tombstones.
//!
//! Where Debezium loses a value siphon keeps it (README, "siphon vs Debezium encodings"):
//! infinite dates and timestamps stay `infinity`/`-infinity` (Debezium prints a date 292
//! million years away), `24:00:00` stays (Debezium: `00:00:00Z`), and a numeric array
//! holding NaN keeps its elements (Debezium: null).
//!
//! The store encoding of values ([`crate::json::value_json`]) is a different one: sinks keep
//! exact values in their own form; this module is what consumers of the event stream read.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE};
use serde_json::{Map, Value as Json, json};

use crate::json::{
    Fraction, UNAVAILABLE, float_json, format_date, format_interval, format_time, format_timestamp,
};
use crate::spatial;

mod scalars;
mod schema;
#[cfg(test)]
mod tests;

use scalars::*;
use schema::field_schema;
pub use schema::{column_schema, envelope_schema, key_schema};
use siphon_core::event::{Event, Row, Value};
use siphon_core::schema::{Column, ColumnKind, TableSchema};

/// Debezium's handling modes, as its connector properties of the same names set them. The
/// default is siphon's (and Debezium's string/isostring settings); a team running Debezium
/// with its own defaults sets `decimal = "precise"`, `time = "adaptive"`,
/// `interval = "numeric"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Modes {
    /// `decimal.handling.mode`: "string" (default), "precise" or "double".
    #[serde(default)]
    pub decimal: DecimalMode,
    /// `time.precision.mode`: "isostring" (default), "adaptive",
    /// "adaptive_time_microseconds" or "connect".
    #[serde(default)]
    pub time: TimeMode,
    /// `binary.handling.mode`: "base64" (default), "bytes", "base64-url-safe" or "hex".
    #[serde(default)]
    pub binary: BinaryMode,
    /// `interval.handling.mode`: "string" (default) or "numeric".
    #[serde(default)]
    pub interval: IntervalMode,
}

/// `decimal.handling.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecimalMode {
    /// Exact decimal text.
    #[default]
    String,
    /// Kafka Connect's Decimal (bytes), or Debezium's VariableScaleDecimal.
    Precise,
    /// A JSON number (may lose digits).
    Double,
}

/// `time.precision.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    /// ISO 8601 strings.
    #[default]
    Isostring,
    /// Numbers in the column's precision: days, milli- or microseconds.
    Adaptive,
    /// As adaptive, but times always in microseconds.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's logical types: days and milliseconds.
    Connect,
}

/// `binary.handling.mode` (as JSON shows bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BinaryMode {
    /// Standard base64, declared as a string.
    #[default]
    #[serde(rename = "base64")]
    Base64,
    /// Bytes, declared as bytes (JSON shows them in standard base64 too).
    #[serde(rename = "bytes")]
    Bytes,
    /// URL-safe base64.
    #[serde(rename = "base64-url-safe")]
    Base64UrlSafe,
    /// Lower-case hexadecimal.
    #[serde(rename = "hex")]
    Hex,
}

/// `interval.handling.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMode {
    /// ISO 8601 durations.
    #[default]
    String,
    /// Microseconds, a month counted as 365.25 / 12 days.
    Numeric,
}

impl Modes {
    /// Sets one mode from a Debezium connector property (`time.precision.mode=adaptive`), as
    /// `siphon log tail --debezium` takes them; the error names the allowed properties or
    /// values.
    pub fn set(&mut self, property: &str) -> Result<(), String> {
        let (key, value) = property
            .split_once('=')
            .ok_or_else(|| format!("{property:?}: write property=value"))?;
        let parse = |field: &str| {
            serde_json::from_value::<Modes>(json!({ field: value }))
                .map_err(|e| format!("{key}: {e}"))
        };
        match key {
            "decimal.handling.mode" => self.decimal = parse("decimal")?.decimal,
            "time.precision.mode" => self.time = parse("time")?.time,
            "binary.handling.mode" => self.binary = parse("binary")?.binary,
            "interval.handling.mode" => self.interval = parse("interval")?.interval,
            other => {
                return Err(format!(
                    "{other:?} is not a mode siphon follows; allowed: decimal.handling.mode, \
                     time.precision.mode, binary.handling.mode, interval.handling.mode"
                ));
            }
        }
        Ok(())
    }
}

/// A row as Debezium's JSON object, each value typed by its column where the schema has it.
/// With a schema every column is there, in the table's order, as in Debezium: one the row
/// lacks (the non-key columns of a delete's old row) is `null`.
pub fn row(row: &Row, schema: Option<&TableSchema>, modes: &Modes) -> Json {
    row_with(row, schema, modes, |_, _| Json::Null)
}

/// [`row`], a NOT NULL column the row lacks — or holds as null: only a row the source did
/// not send whole can — given the value Debezium invents for it (the type's zero, the
/// epoch: see [`invented`]), for a format whose schema cannot hold a null there (Avro).
pub fn row_whole(row: &Row, schema: Option<&TableSchema>, modes: &Modes) -> Json {
    row_with(row, schema, modes, |column, modes| {
        if column.nullable {
            Json::Null
        } else {
            invented(column, modes)
        }
    })
}

/// The value Debezium 3.6 writes for a NOT NULL column a row lacks (a delete's old row under
/// PostgreSQL's default replica identity), as the real Debezium wrote it for each type class
/// and mode (`tests/debezium.rs`).
fn invented(column: &Column, modes: &Modes) -> Json {
    let decimal_zero = |scale: Option<u32>| {
        let zero = match scale {
            Some(scale) if scale > 0 => format!("0.{}", "0".repeat(scale as usize)),
            _ => "0".to_owned(),
        };
        let kind = ColumnKind::Decimal {
            precision: None,
            scale,
        };
        decimal(&zero, Some(&kind), modes.decimal)
    };
    match &column.kind {
        ColumnKind::Bool => json!(false),
        ColumnKind::Int16 | ColumnKind::Int32 | ColumnKind::Int64 => json!(0),
        ColumnKind::Float32 | ColumnKind::Float64 => json!(0.0),
        ColumnKind::Decimal { scale, .. } => decimal_zero(*scale),
        ColumnKind::Date => value(&Value::Date(0), Some(column), modes),
        ColumnKind::Time | ColumnKind::Duration => value(&Value::Time(0), Some(column), modes),
        ColumnKind::Timestamp => value(&Value::Timestamp(0), Some(column), modes),
        ColumnKind::TimeTz => json!("00:00:00Z"),
        ColumnKind::TimestampTz => json!("1970-01-01T00:00:00Z"),
        ColumnKind::Interval => match modes.interval {
            IntervalMode::String => json!("P0Y0M0DT0H0M0S"),
            IntervalMode::Numeric => json!(0),
        },
        ColumnKind::Array(_) => json!([]),
        // MySQL, whose deletes carry the whole row, never lacks one.
        ColumnKind::Geometry { .. } => Json::Null,
        ColumnKind::Other => match column.type_id {
            MONEY => decimal_zero(Some(2)),
            OID => json!(0),
            // Debezium's Point.createValue(schema, 0, 0).
            POINT => spatial::pg_point_json("(0,0)").unwrap_or_default(),
            BIT if column.type_modifier == 1 => json!(false),
            _ => json!(""),
        },
        ColumnKind::Text { .. }
        | ColumnKind::Bytes
        | ColumnKind::Json { .. }
        | ColumnKind::Uuid
        | ColumnKind::Enum { .. } => json!(""),
    }
}

/// A row, a column it lacks or holds as null given `missing`'s value.
fn row_with(
    row: &Row,
    schema: Option<&TableSchema>,
    modes: &Modes,
    missing: impl Fn(&Column, &Modes) -> Json,
) -> Json {
    let Some(schema) = schema else {
        return Json::Object(
            row.iter()
                .map(|(c, v)| (c.to_owned(), value(v, None, modes)))
                .collect::<Map<_, _>>(),
        );
    };
    let mut out = schema
        .columns
        .iter()
        .map(|column| {
            let v = match row.get(&column.name) {
                Some(Value::Null) | None => missing(column, modes),
                Some(v) => value(v, Some(column), modes),
            };
            (column.name.to_string(), v)
        })
        .collect::<Map<_, _>>();
    // Columns a stage added (the row state's `__op`, …) follow the table's.
    for (column, v) in row.iter() {
        if !out.contains_key(column) {
            out.insert(column.to_owned(), value(v, None, modes));
        }
    }
    Json::Object(out)
}

/// The Kafka Connect schema of a row of `schema`'s table: its columns, then those of `row`
/// a stage added (typed by their values).
pub fn row_state_schema(
    row: Option<&Row>,
    schema: &TableSchema,
    name: &str,
    modes: &Modes,
) -> Json {
    let mut fields: Vec<Json> = schema
        .columns
        .iter()
        .map(|c| field_schema(c, modes))
        .collect();
    for (column, v) in row.into_iter().flat_map(Row::iter) {
        if !schema.columns.iter().any(|c| &*c.name == column) {
            let mut field = crate::json::value_schema(v);
            field["field"] = json!(column);
            fields.push(field);
        }
    }
    json!({"type": "struct", "fields": fields, "optional": true, "name": name})
}

/// Debezium's topic of an event: `<server name>.<schema>.<table>` (`<db>.<table>` where the
/// source has no schemas).
pub fn topic(event: &Event) -> String {
    format!(
        "{}.{}.{}",
        event.source.name,
        event.source.namespace(),
        event.source.table
    )
}

/// Debezium's record key: the primary-key columns, or `null` for a table without one.
pub fn key(event: &Event, modes: &Modes) -> Json {
    let Some(key) = &event.key else {
        return Json::Null;
    };
    let schema = event.schema.as_deref();
    Json::Object(
        key.iter()
            .map(|(c, v)| {
                let column = schema.and_then(|s| s.column(c));
                (c.to_owned(), value(v, column, modes))
            })
            .collect::<Map<_, _>>(),
    )
}

/// One value, in `modes`.
pub fn value(value: &Value, column: Option<&Column>, modes: &Modes) -> Json {
    let kind = column.map(|c| &c.kind);
    // Digits of fractional seconds the column keeps (time(3), timestamp(3)); 6 unless said.
    let precision = column
        .map(|c| c.type_modifier)
        .filter(|&m| (0..6).contains(&m))
        .unwrap_or(6);
    match value {
        Value::Null => Json::Null,
        Value::Unchanged => unavailable(kind, modes),
        Value::Array(items) => {
            let element = match kind {
                Some(ColumnKind::Array(element)) => Some(element),
                _ => None,
            };
            // The element's column: the array's, with the element's kind.
            let element_column = column.zip(element).map(|(c, e)| Column {
                kind: (**e).clone(),
                ..c.clone()
            });
            Json::Array(
                items
                    .iter()
                    .map(|v| self::value(v, element_column.as_ref(), modes))
                    .collect(),
            )
        }
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::UInt(u) => json!(u),
        // Through its shortest text so that 0.1f32 prints "0.1", not 0.10000000149011612.
        Value::Float32(f) => float_json(f.to_string().parse().unwrap_or(f64::from(*f))),
        Value::Float64(f) => float_json(*f),
        Value::Decimal(s) => decimal(s, kind, modes.decimal),
        Value::Text(s) | Value::Json(s) | Value::Enum(s) => json!(s),
        Value::Bytes(b) => match mysql_type(column) {
            Some(MysqlType::Bits(n)) => json!(BASE64.encode(mysql_bits_le(b, n))),
            _ => bytes(b, modes.binary),
        },
        Value::Geometry { wkb, srid } => match kind {
            Some(ColumnKind::Geometry { point: true }) => spatial::point_json(wkb, *srid),
            _ => spatial::geometry_json(wkb, *srid),
        },
        // The hyphenated text, as in the store encoding.
        Value::Uuid(_) => crate::json::value_json(value),
        Value::Date(days) => match modes.time {
            TimeMode::Isostring => json!(date(*days)),
            _ => json!(days),
        },
        Value::Time(micros) => match modes.time {
            TimeMode::Isostring => json!(format!("{}Z", time(*micros))),
            TimeMode::Connect => json!(micros / 1000),
            TimeMode::Adaptive if precision <= 3 => json!(micros / 1000),
            TimeMode::Adaptive | TimeMode::AdaptiveTimeMicroseconds => json!(micros),
        },
        Value::TimeTz {
            micros,
            offset_seconds,
        } => {
            let utc = (micros - i64::from(*offset_seconds) * 1_000_000).rem_euclid(DAY_MICROS);
            json!(format!("{}Z", time(utc)))
        }
        Value::Timestamp(us) => match modes.time {
            TimeMode::Isostring => json!(timestamp(*us)),
            TimeMode::Connect => json!(us.div_euclid(1000)),
            _ if precision <= 3 => json!(us.div_euclid(1000)),
            _ => json!(us),
        },
        // A zoned timestamp has as many digits as the column's precision, zeros included
        // (the real Debezium 3.6.3: "…42.511560Z", "…42.000000Z" for timestamptz).
        Value::TimestampTz(us) => json!(format_timestamp(
            *us,
            "Z",
            Fraction::Digits(precision as usize)
        )),
        Value::Interval {
            months,
            days,
            micros,
        } => match modes.interval {
            IntervalMode::String => json!(interval(*months, *days, *micros)),
            IntervalMode::Numeric => json!(interval_micros(*months, *days, *micros)),
        },
        Value::Other { type_name, text } => other(type_name, text, column, modes),
    }
}

const DAY_MICROS: i64 = 86_400_000_000;
