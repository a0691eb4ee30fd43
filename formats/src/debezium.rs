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

/// PostgreSQL's type OIDs that Debezium encodes apart from their text.
const MONEY: u32 = 790;
const OID: u32 = 26;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;
const POINT: u32 = 600;

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

/// Kafka Connect's schema of an event as Debezium declares it (`converter.schemas.enable`):
/// the envelope with the table's row struct (from its schema record), Debezium's source
/// struct and the transaction block.
pub fn envelope_schema(event: &Event, schema: &TableSchema, modes: &Modes) -> Json {
    let prefix = topic(event);
    let row = |field: &str| {
        json!({
            "type": "struct",
            "fields": schema.columns.iter().map(|c| field_schema(c, modes)).collect::<Vec<_>>(),
            "optional": true,
            "name": format!("{prefix}.Value"),
            "field": field,
        })
    };
    let field = |ty: &str, optional: bool, name: &str| json!({"type": ty, "optional": optional, "field": name});
    let snapshot = json!({
        "type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
        "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
        "default": "false", "field": "snapshot",
    });
    json!({
        "type": "struct",
        "fields": [
            row("before"),
            row("after"),
            source_schema(event, snapshot),
            {
                "type": "struct",
                "fields": [
                    field("string", false, "id"),
                    field("int64", false, "total_order"),
                    field("int64", false, "data_collection_order"),
                ],
                "optional": true,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
            field("string", false, "op"),
            field("int64", true, "ts_ms"),
            field("int64", true, "ts_us"),
            field("int64", true, "ts_ns"),
        ],
        "optional": false,
        "name": format!("{prefix}.Envelope"),
        "version": 2,
    })
}

/// Debezium's `source` struct of the event's connector.
fn source_schema(event: &Event, snapshot: Json) -> Json {
    let field = |ty: &str, optional: bool, name: &str| json!({"type": ty, "optional": optional, "field": name});
    let mut fields = vec![
        field("string", false, "version"),
        field("string", false, "connector"),
        field("string", false, "name"),
        field("int64", false, "ts_ms"),
        snapshot,
        field("string", false, "db"),
        field("string", true, "sequence"),
        field("int64", true, "ts_us"),
        field("int64", true, "ts_ns"),
    ];
    let connector = event.source.position.debezium_source(event.source.fields());
    fields.extend(
        connector
            .schema_fields
            .iter()
            .map(|(ty, optional, name)| field(ty, *optional, name)),
    );
    let name = connector.schema_name;
    json!({
        "type": "struct",
        "fields": fields,
        "optional": false,
        "name": name,
        "version": 1,
        "field": "source",
    })
}

/// Kafka Connect's schema of the record key: the key columns, `<topic>.Key`.
pub fn key_schema(event: &Event, schema: &TableSchema, modes: &Modes) -> Json {
    json!({
        "type": "struct",
        "fields": schema.key.iter().map(|&i| field_schema(&schema.columns[i], modes)).collect::<Vec<_>>(),
        "optional": false,
        "name": format!("{}.Key", topic(event)),
    })
}

/// A column's schema with its name, `optional` from its nullability.
fn field_schema(column: &Column, modes: &Modes) -> Json {
    let mut schema = column_schema(column, modes);
    schema["field"] = json!(&*column.name);
    schema
}

/// A column's schema, `optional` from its nullability: the schema of a record key or value
/// that is one column's value (the outbox EventRouter's).
pub fn column_schema(column: &Column, modes: &Modes) -> Json {
    let mut schema = kind_schema(&column.kind, column, modes);
    schema["optional"] = json!(column.nullable);
    schema
}

/// The schema of values of a kind (an array's elements are always optional).
fn kind_schema(kind: &ColumnKind, column: &Column, modes: &Modes) -> Json {
    let plain = |ty: &str| json!({"type": ty, "optional": true});
    let named =
        |ty: &str, name: &str| json!({"type": ty, "optional": true, "name": name, "version": 1});
    let precision = if (0..6).contains(&column.type_modifier) {
        column.type_modifier
    } else {
        6
    };
    match kind {
        ColumnKind::Bool => plain("boolean"),
        ColumnKind::Int16 => plain("int16"),
        ColumnKind::Int32 if mysql_type(Some(column)) == Some(MysqlType::Year) => {
            named("int32", "io.debezium.time.Year")
        }
        ColumnKind::Int32 => plain("int32"),
        ColumnKind::Int64 => plain("int64"),
        ColumnKind::Float32 => plain("float"),
        ColumnKind::Float64 => plain("double"),
        ColumnKind::Decimal { precision, scale } => {
            decimal_schema(*precision, *scale, modes.decimal)
        }
        ColumnKind::Text { .. } => plain("string"),
        ColumnKind::Bytes => match mysql_type(Some(column)) {
            Some(MysqlType::Bits(n)) => {
                let mut s = named("bytes", "io.debezium.data.Bits");
                s["parameters"] = json!({"length": n.to_string()});
                s
            }
            // Debezium turns bytes into text in its string modes; `bytes` stays bytes.
            _ => plain(if modes.binary == BinaryMode::Bytes {
                "bytes"
            } else {
                "string"
            }),
        },
        ColumnKind::Geometry { point } => spatial::schema(*point),
        ColumnKind::Json { .. } => named("string", "io.debezium.data.Json"),
        ColumnKind::Uuid => named("string", "io.debezium.data.Uuid"),
        ColumnKind::Enum { labels } => {
            let mut s = named("string", "io.debezium.data.Enum");
            s["parameters"] = json!({"allowed": labels.join(",")});
            s
        }
        ColumnKind::Date => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoDate"),
            TimeMode::Connect => named("int32", "org.apache.kafka.connect.data.Date"),
            _ => named("int32", "io.debezium.time.Date"),
        },
        ColumnKind::Time | ColumnKind::Duration => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoTime"),
            TimeMode::Connect => named("int32", "org.apache.kafka.connect.data.Time"),
            TimeMode::Adaptive if precision <= 3 => named("int32", "io.debezium.time.Time"),
            _ => named("int64", "io.debezium.time.MicroTime"),
        },
        ColumnKind::TimeTz => named("string", "io.debezium.time.ZonedTime"),
        ColumnKind::Timestamp => match modes.time {
            TimeMode::Isostring => named("string", "io.debezium.time.IsoTimestamp"),
            TimeMode::Connect => named("int64", "org.apache.kafka.connect.data.Timestamp"),
            _ if precision <= 3 => named("int64", "io.debezium.time.Timestamp"),
            _ => named("int64", "io.debezium.time.MicroTimestamp"),
        },
        ColumnKind::TimestampTz => named("string", "io.debezium.time.ZonedTimestamp"),
        ColumnKind::Interval => match modes.interval {
            IntervalMode::String => named("string", "io.debezium.time.Interval"),
            IntervalMode::Numeric => named("int64", "io.debezium.time.MicroDuration"),
        },
        ColumnKind::Array(element) => json!({
            "type": "array",
            "items": kind_schema(element, column, modes),
            "optional": true,
        }),
        ColumnKind::Other => match column.type_id {
            MONEY => decimal_schema(None, Some(2), modes.decimal),
            POINT => spatial::schema(true),
            OID => plain("int64"),
            BIT if column.type_modifier == 1 => plain("boolean"),
            BIT | VARBIT => {
                let mut s = named("bytes", "io.debezium.data.Bits");
                let length = if column.type_modifier > 0 {
                    column.type_modifier
                } else {
                    i32::MAX
                };
                s["parameters"] = json!({"length": length.to_string()});
                s
            }
            _ => plain("string"),
        },
    }
}

/// The schema of a decimal in `mode`: a string, a double, Kafka Connect's Decimal (a
/// declared scale) or Debezium's VariableScaleDecimal.
fn decimal_schema(precision: Option<u32>, scale: Option<u32>, mode: DecimalMode) -> Json {
    match (mode, scale) {
        (DecimalMode::String, _) => json!({"type": "string", "optional": true}),
        (DecimalMode::Double, _) => json!({"type": "double", "optional": true}),
        (DecimalMode::Precise, Some(scale)) => {
            let mut parameters = json!({"scale": scale.to_string()});
            if let Some(p) = precision {
                parameters["connect.decimal.precision"] = json!(p.to_string());
            }
            json!({"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
                   "version": 1, "parameters": parameters})
        }
        (DecimalMode::Precise, None) => json!({
            "type": "struct",
            "fields": [
                {"type": "int32", "optional": false, "field": "scale"},
                {"type": "bytes", "optional": false, "field": "value"},
            ],
            "optional": true,
            "name": "io.debezium.data.VariableScaleDecimal",
            "version": 1,
            "doc": "Variable scaled decimal",
        }),
    }
}

/// Debezium's placeholder for a value PostgreSQL did not send, in the column's own type.
fn unavailable(kind: Option<&ColumnKind>, modes: &Modes) -> Json {
    match kind {
        Some(ColumnKind::Bytes) => bytes(UNAVAILABLE.as_bytes(), modes.binary),
        Some(ColumnKind::Array(element)) => Json::Array(vec![unavailable(Some(element), modes)]),
        _ => json!(UNAVAILABLE),
    }
}

/// Bytes as `binary.handling.mode` writes them.
fn bytes(b: &[u8], mode: BinaryMode) -> Json {
    match mode {
        BinaryMode::Base64 | BinaryMode::Bytes => json!(BASE64.encode(b)),
        BinaryMode::Base64UrlSafe => json!(URL_SAFE.encode(b)),
        BinaryMode::Hex => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

/// A decimal as `decimal.handling.mode` writes it: `string` (NaN in capitals, as Debezium
/// spells the special value Java's BigDecimal cannot hold), `double`, or `precise`: Kafka
/// Connect's Decimal (the unscaled value's two's-complement bytes, base64) for a column with
/// a declared scale, Debezium's VariableScaleDecimal (`{"scale", "value"}`) for one without.
fn decimal(s: &str, kind: Option<&ColumnKind>, mode: DecimalMode) -> Json {
    match mode {
        DecimalMode::String => json!(match s {
            "NaN" => "NAN",
            other => other,
        }),
        DecimalMode::Double => float_json(s.parse().unwrap_or(f64::NAN)),
        DecimalMode::Precise => {
            let Some((negative, digits, scale)) = unscaled(s) else {
                return Json::Null;
            };
            match kind {
                Some(ColumnKind::Decimal {
                    scale: Some(declared),
                    ..
                }) => {
                    let (digits, _) = rescale(&digits, scale, *declared);
                    json!(BASE64.encode(twos_complement(negative, &digits)))
                }
                _ => {
                    // Without a declared scale, Debezium drops the fraction's trailing zeros.
                    let zeros = digits.len() - digits.trim_end_matches('0').len();
                    let cut = zeros.min(scale as usize);
                    let digits = &digits[..digits.len() - cut];
                    json!({
                        "scale": scale - cut as u32,
                        "value": BASE64.encode(twos_complement(negative, digits)),
                    })
                }
            }
        }
    }
}

/// `-12.3400` as (negative, "123400", 4); `None` for NaN and the infinities.
fn unscaled(s: &str) -> Option<(bool, String, u32)> {
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some((
        negative,
        format!("{whole}{fraction}"),
        fraction.len() as u32,
    ))
}

/// The digits of an unscaled value at `scale` brought to scale `to` (zeros added; cut when
/// smaller, which a value of a column with that scale never needs).
fn rescale(digits: &str, scale: u32, to: u32) -> (String, u32) {
    if to >= scale {
        (format!("{digits}{}", "0".repeat((to - scale) as usize)), to)
    } else {
        let keep = digits.len().saturating_sub((scale - to) as usize);
        (digits[..keep].to_owned(), to)
    }
}

/// A decimal digit string as the big-endian two's-complement bytes Java's
/// `BigInteger.toByteArray` gives (the shortest that holds the sign).
fn twos_complement(negative: bool, digits: &str) -> Vec<u8> {
    // Base-256 digits, least significant first, by repeated division of the decimal string.
    let mut decimal: Vec<u32> = digits.bytes().map(|b| u32::from(b - b'0')).collect();
    let mut magnitude = Vec::new();
    while decimal.iter().any(|&d| d != 0) {
        let mut rest = 0u32;
        for d in &mut decimal {
            let current = rest * 10 + *d;
            *d = current / 256;
            rest = current % 256;
        }
        magnitude.push(rest as u8);
    }
    let mut bytes: Vec<u8> = magnitude.into_iter().rev().collect();
    if bytes.is_empty() {
        bytes.push(0);
    }
    if bytes[0] & 0x80 != 0 {
        bytes.insert(0, 0);
    }
    if negative && bytes.iter().any(|&b| b != 0) {
        // Two's complement: invert and add one.
        for b in &mut bytes {
            *b = !*b;
        }
        for b in bytes.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
        // Drop a redundant leading 0xff whose next byte already carries the sign.
        while bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0x80 != 0 {
            bytes.remove(0);
        }
    }
    bytes
}

/// A value of a type siphon keeps as text, as Debezium encodes it: money as a plain
/// decimal, oid as a number, bit(1) as a boolean, other bit strings as bytes (the bits as an
/// unsigned number, least significant byte first, without leading zero bytes); the rest as
/// the text.
fn other(type_name: &str, text: &str, column: Option<&Column>, modes: &Modes) -> Json {
    let type_id = column.map_or(0, |c| c.type_id);
    let is = |id: u32, name: &str| type_id == id || (type_id == 0 && type_name == name);
    if is(MONEY, "money") {
        // Debezium reads money as a decimal of scale 2 (money.fraction.digits).
        let money_kind = ColumnKind::Decimal {
            precision: None,
            scale: Some(2),
        };
        return decimal(&money(text), Some(&money_kind), modes.decimal);
    }
    if is(OID, "oid") {
        return text
            .parse::<u64>()
            .map_or_else(|_| json!(text), |n| json!(n));
    }
    if is(BIT, "bit") || is(VARBIT, "varbit") {
        let single = column.map_or(text.len() == 1 && type_name == "bit", |c| {
            c.type_id == BIT && c.type_modifier == 1
        });
        if single {
            return json!(text == "1");
        }
        // Bit strings stay bytes whatever binary.handling.mode says (it is bytea's), so
        // JSON shows them in base64.
        return json!(BASE64.encode(bits_le(text)));
    }
    if is(POINT, "point")
        && let Some(point) = spatial::pg_point_json(text)
    {
        return point;
    }
    json!(text)
}

/// MySQL types whose Debezium form is not what their kind gives. A MySQL column has no type
/// id (PostgreSQL's always has its OID); its type name is MySQL's own spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MysqlType {
    /// `bit(n)`, n > 1: Debezium's Bits, little-endian.
    Bits(i32),
    /// `year`: Debezium's Year.
    Year,
}

fn mysql_type(column: Option<&Column>) -> Option<MysqlType> {
    let column = column.filter(|c| c.type_id == 0)?;
    match column.type_name.as_str() {
        "year" => Some(MysqlType::Year),
        name if name.starts_with("bit(") && column.type_modifier > 1 => {
            Some(MysqlType::Bits(column.type_modifier))
        }
        _ => None,
    }
}

/// A MySQL bit value (its bytes most significant first, as the server sends them) as Debezium
/// writes it: little-endian, one byte per 8 bits of the column, rounded up.
fn mysql_bits_le(big_endian: &[u8], bits: i32) -> Vec<u8> {
    let size = usize::try_from(bits).unwrap_or(0).div_ceil(8);
    let mut out: Vec<u8> = big_endian.iter().rev().copied().take(size).collect();
    out.resize(size, 0);
    out
}

/// `$1,234.56` / `-$0.50` / `1.234,56 €` as a plain decimal: the digits, the sign and the
/// last `.` or `,` when two digits or fewer follow it (the locale's decimal mark).
fn money(text: &str) -> String {
    let negative = text.contains('-') || text.contains('(');
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    let (whole, fraction) = match kept.rfind(['.', ',']) {
        Some(at) if kept.len() - at - 1 <= 2 => (&kept[..at], &kept[at + 1..]),
        _ => (kept.as_str(), ""),
    };
    let digits: String = whole.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if fraction.is_empty() {
        format!("{sign}{digits}")
    } else {
        format!("{sign}{digits}.{fraction}")
    }
}

/// A bit string (`101000000001`) as Debezium's bytes: the unsigned number, least significant
/// byte first, no zero bytes at the top (all zero bits: no bytes).
fn bits_le(text: &str) -> Vec<u8> {
    let bits: Vec<bool> = text.chars().map(|c| c == '1').collect();
    let mut bytes: Vec<u8> = bits
        .rchunks(8)
        .map(|chunk| chunk.iter().fold(0u8, |b, &bit| (b << 1) | u8::from(bit)))
        .collect();
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// `2024-02-29Z`; infinities as `infinity`, `-infinity`.
fn date(days: i32) -> String {
    match days {
        i32::MAX | i32::MIN => format_date(days),
        d => format!("{}Z", format_date(d)),
    }
}

fn time(micros: i64) -> String {
    format_time(micros, Fraction::Trimmed)
}

fn timestamp(micros: i64) -> String {
    format_timestamp(micros, "Z", Fraction::Trimmed)
}

fn interval(months: i32, days: i32, micros: i64) -> String {
    format_interval(months, days, micros, Fraction::Trimmed)
}

/// An interval in microseconds as Debezium's numeric mode counts it: a month is an average
/// one (365.25 / 12 days).
fn interval_micros(months: i32, days: i32, micros: i64) -> i64 {
    const MONTH_MICROS: f64 = 365.25 / 12.0 * 86_400_000_000.0;
    (f64::from(months) * MONTH_MICROS) as i64 + i64::from(days) * DAY_MICROS + micros
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(type_id: u32, type_modifier: i32, kind: ColumnKind) -> Column {
        Column {
            name: "c".into(),
            type_name: String::new(),
            type_id,
            type_modifier,
            kind,
            nullable: true,
            generated: false,
        }
    }

    /// The shapes the real Debezium 3.6.3 printed for these values on this machine
    /// (`tests/debezium.rs` compares whole streams; these pin the encoders one by one).
    #[test]
    fn numbers_and_times_come_out_as_debezium_prints_them() {
        let cases: Vec<(Value, Option<Column>, Json)> = vec![
            (
                Value::Int(9_007_199_254_740_993),
                None,
                json!(9_007_199_254_740_993_i64),
            ),
            (Value::Float32(f32::NAN), None, json!("NaN")),
            (Value::Float64(f64::NEG_INFINITY), None, json!("-Infinity")),
            (Value::Decimal("NaN".into()), None, json!("NAN")),
            (Value::Bytes(vec![0, 255, 16]), None, json!("AP8Q")),
            (Value::Date(19_782), None, json!("2024-02-29Z")),
            (Value::Time(36_672_123_456), None, json!("10:11:12.123456Z")),
            (Value::Time(36_672_123_000), None, json!("10:11:12.123Z")),
            // A zoned timestamp: the column's digits, zeros kept.
            (
                Value::TimestampTz(1_709_201_502_511_560),
                Some(column(1184, -1, ColumnKind::TimestampTz)),
                json!("2024-02-29T10:11:42.511560Z"),
            ),
            (
                Value::TimestampTz(1_709_201_502_000_000),
                Some(column(1184, -1, ColumnKind::TimestampTz)),
                json!("2024-02-29T10:11:42.000000Z"),
            ),
            (
                Value::TimestampTz(1_709_201_502_510_000),
                Some(column(1184, 3, ColumnKind::TimestampTz)),
                json!("2024-02-29T10:11:42.510Z"),
            ),
            (Value::Time(0), None, json!("00:00:00Z")),
            (
                Value::TimeTz {
                    micros: 36_672_500_000,
                    offset_seconds: 19_800,
                },
                None,
                json!("04:41:12.5Z"),
            ),
            (
                Value::TimeTz {
                    micros: 0,
                    offset_seconds: -43_200,
                },
                None,
                json!("12:00:00Z"),
            ),
            (
                Value::Timestamp(1_709_201_472_500_000),
                None,
                json!("2024-02-29T10:11:12.5Z"),
            ),
            (
                Value::Timestamp(-2_208_988_800_000_000),
                None,
                json!("1900-01-01T00:00:00Z"),
            ),
            (Value::TimestampTz(i64::MIN), None, json!("-infinity")),
            (
                Value::Interval {
                    months: 14,
                    days: 3,
                    micros: 14_706_789_000,
                },
                None,
                json!("P1Y2M3DT4H5M6.789S"),
            ),
            (
                Value::Interval {
                    months: -12,
                    days: -2,
                    micros: -1,
                },
                None,
                json!("P-1Y0M-2DT0H0M-0.000001S"),
            ),
        ];
        assert_values(cases);
    }

    /// The types siphon keeps as text (money, oid, bit strings) and unchanged (TOAST) values,
    /// as the real Debezium printed them.
    #[test]
    fn text_kept_types_and_unchanged_values_come_out_as_debezium_prints_them() {
        let cases: Vec<(Value, Option<Column>, Json)> = vec![
            (
                Value::Other {
                    type_name: "money".into(),
                    text: "$1,234.56".into(),
                },
                None,
                json!("1234.56"),
            ),
            (
                Value::Other {
                    type_name: "money".into(),
                    text: "-$0.50".into(),
                },
                None,
                json!("-0.50"),
            ),
            (
                Value::Other {
                    type_name: "oid".into(),
                    text: "4000000000".into(),
                },
                None,
                json!(4_000_000_000_u64),
            ),
            (
                Value::Other {
                    type_name: "bit".into(),
                    text: "1".into(),
                },
                Some(column(BIT, 1, ColumnKind::Other)),
                json!(true),
            ),
            (
                Value::Other {
                    type_name: "bit".into(),
                    text: "101000000001".into(),
                },
                Some(column(BIT, 12, ColumnKind::Other)),
                json!("AQo="),
            ),
            (
                Value::Other {
                    type_name: "varbit".into(),
                    text: "10101".into(),
                },
                Some(column(VARBIT, -1, ColumnKind::Other)),
                json!("FQ=="),
            ),
            (
                Value::Other {
                    type_name: "bit".into(),
                    text: "000000000000".into(),
                },
                Some(column(BIT, 12, ColumnKind::Other)),
                json!(""),
            ),
            (
                Value::Unchanged,
                Some(column(17, -1, ColumnKind::Bytes)),
                json!(BASE64.encode(UNAVAILABLE)),
            ),
            (
                Value::Unchanged,
                Some(column(
                    1009,
                    -1,
                    ColumnKind::Array(Box::new(ColumnKind::Text { length: None })),
                )),
                json!([UNAVAILABLE]),
            ),
        ];
        assert_values(cases);
    }

    /// Each value in the default modes is what Debezium printed.
    fn assert_values(cases: Vec<(Value, Option<Column>, Json)>) {
        for (v, c, want) in cases {
            assert_eq!(value(&v, c.as_ref(), &Modes::default()), want, "{v:?}");
        }
    }

    /// Debezium's other modes, as the real one printed these values.
    #[test]
    fn the_other_modes_come_out_as_debezium_prints_them() {
        let mut debezium_defaults = Modes::default();
        for p in [
            "decimal.handling.mode=precise",
            "time.precision.mode=adaptive",
            "interval.handling.mode=numeric",
            "binary.handling.mode=bytes",
        ] {
            debezium_defaults.set(p).unwrap();
        }
        let numeric = |scale| {
            column(
                1700,
                -1,
                ColumnKind::Decimal {
                    precision: None,
                    scale,
                },
            )
        };
        let cases: Vec<(Value, Column, Json)> = vec![
            (
                Value::Decimal("12.3400".into()),
                numeric(None),
                json!({"scale": 2, "value": "BNI="}),
            ),
            (
                Value::Decimal("0.00001".into()),
                numeric(None),
                json!({"scale": 5, "value": "AQ=="}),
            ),
            (
                Value::Decimal("12.34".into()),
                numeric(Some(2)),
                json!("BNI="),
            ),
            (
                Value::Decimal("-0.01".into()),
                numeric(Some(2)),
                json!("/w=="),
            ),
            (Value::Decimal("NaN".into()), numeric(None), Json::Null),
            (
                Value::Other {
                    type_name: "money".into(),
                    text: "-$0.50".into(),
                },
                column(MONEY, -1, ColumnKind::Other),
                json!("zg=="),
            ),
            (
                Value::Date(10_956),
                column(1082, -1, ColumnKind::Date),
                json!(10_956),
            ),
            (
                Value::Time(36_672_123_456),
                column(1083, -1, ColumnKind::Time),
                json!(36_672_123_456_i64),
            ),
            (
                Value::Time(36_672_123_000),
                column(1083, 3, ColumnKind::Time),
                json!(36_672_123),
            ),
            (
                Value::Timestamp(1_709_201_472_123_000),
                column(1114, 3, ColumnKind::Timestamp),
                json!(1_709_201_472_123_i64),
            ),
            (
                Value::Interval {
                    months: 14,
                    days: 3,
                    micros: 14_706_789_000,
                },
                column(1186, -1, ColumnKind::Interval),
                json!(37_091_106_789_000_i64),
            ),
        ];
        for (v, c, want) in cases {
            assert_eq!(value(&v, Some(&c), &debezium_defaults), want, "{v:?}");
        }
        let mut hex = Modes::default();
        hex.set("binary.handling.mode=hex").unwrap();
        assert_eq!(
            value(&Value::Bytes(vec![0, 255, 16]), None, &hex),
            json!("00ff10")
        );
        let err = Modes::default()
            .set("time.precision.mode=nanos")
            .unwrap_err();
        assert!(err.contains("adaptive_time_microseconds"), "{err}");
        let err = Modes::default().set("snapshot.mode=never").unwrap_err();
        assert!(err.contains("allowed: decimal.handling.mode"), "{err}");
    }

    /// MySQL's types as Debezium's MySQL connector documents them (its MariaDB connector
    /// shares the converters; neither runs against MariaDB 10.11 here): `bit(n)` as
    /// io.debezium.data.Bits, little-endian and ceil(n/8) bytes long; geometry as
    /// io.debezium.data.geometry.Geometry {wkb, srid} (srid null for 0), a point column's as
    /// io.debezium.data.geometry.Point {x, y, wkb, srid}; `year` as
    /// io.debezium.time.Year; `time` as MicroTime and `datetime(p)` as Timestamp (p ≤ 3) or
    /// MicroTimestamp in adaptive_time_microseconds, the connector's default.
    #[test]
    fn mysql_types_come_out_as_debezium_documents_them() {
        let mysql = |type_name: &str, type_modifier: i32, kind: ColumnKind| Column {
            type_name: type_name.into(),
            ..column(0, type_modifier, kind)
        };
        let mut modes = Modes::default();
        modes
            .set("time.precision.mode=adaptive_time_microseconds")
            .unwrap();
        let bits = mysql("bit(12)", 12, ColumnKind::Bytes);
        // b'1010 0000 0011' as the server sends it: 0x0a 0x03.
        assert_eq!(
            value(&Value::Bytes(vec![0x0a, 0x03]), Some(&bits), &modes),
            json!(BASE64.encode([0x03, 0x0a]))
        );
        assert_eq!(
            value(&Value::Bytes(vec![0x01]), Some(&bits), &modes),
            json!(BASE64.encode([0x01, 0x00])),
            "padded to the column's bytes"
        );
        let bits_schema = kind_schema(&bits.kind, &bits, &modes);
        assert_eq!(bits_schema["name"], "io.debezium.data.Bits");
        assert_eq!(bits_schema["parameters"]["length"], "12");

        // POINT(1 2) with SRID 4326, in a GEOMETRY column and in a POINT column.
        let wkb: Vec<u8> = [1u8, 1, 0, 0, 0]
            .into_iter()
            .chain(1f64.to_le_bytes())
            .chain(2f64.to_le_bytes())
            .collect();
        let point = |srid| Value::Geometry {
            wkb: wkb.clone(),
            srid,
        };
        let geometry = mysql("geometry", -1, ColumnKind::Geometry { point: false });
        assert_eq!(
            value(&point(4326), Some(&geometry), &modes),
            json!({"wkb": BASE64.encode(&wkb), "srid": 4326})
        );
        assert_eq!(
            value(&point(0), Some(&geometry), &modes),
            json!({"wkb": BASE64.encode(&wkb), "srid": null})
        );
        let schema = kind_schema(&geometry.kind, &geometry, &modes);
        assert_eq!(schema["name"], "io.debezium.data.geometry.Geometry");
        let points = mysql("point", -1, ColumnKind::Geometry { point: true });
        assert_eq!(
            value(&point(4326), Some(&points), &modes).to_string(),
            json!({"x": 1.0, "y": 2.0, "wkb": BASE64.encode(&wkb), "srid": 4326}).to_string(),
            "Debezium's Point: the coordinates first"
        );
        let schema = kind_schema(&points.kind, &points, &modes);
        assert_eq!(schema["name"], "io.debezium.data.geometry.Point");
        // The WKB is a struct's bytes: base64 in every binary mode.
        modes.set("binary.handling.mode=hex").unwrap();
        assert_eq!(
            value(&point(0), Some(&geometry), &modes)["wkb"],
            json!(BASE64.encode(&wkb))
        );

        let year = mysql("year", -1, ColumnKind::Int32);
        assert_eq!(value(&Value::Int(2024), Some(&year), &modes), json!(2024));
        assert_eq!(
            kind_schema(&year.kind, &year, &modes)["name"],
            "io.debezium.time.Year"
        );

        let time = mysql("time(3)", 3, ColumnKind::Duration);
        assert_eq!(
            value(&Value::Time(-93_784_500_000), Some(&time), &modes),
            json!(-93_784_500_000_i64),
            "a negative time past a day, in microseconds"
        );
        assert_eq!(
            value(
                &Value::Time(-93_784_500_000),
                Some(&time),
                &Modes::default()
            ),
            json!("-26:03:04.5Z"),
            "and as an ISO time, every hour kept"
        );
        assert_eq!(
            kind_schema(&time.kind, &time, &modes)["name"],
            "io.debezium.time.MicroTime"
        );
        let datetime3 = mysql("datetime(3)", 3, ColumnKind::Timestamp);
        assert_eq!(
            value(
                &Value::Timestamp(1_709_201_472_123_000),
                Some(&datetime3),
                &modes
            ),
            json!(1_709_201_472_123_i64)
        );
        let datetime6 = mysql("datetime(6)", 6, ColumnKind::Timestamp);
        assert_eq!(
            value(
                &Value::Timestamp(1_709_201_472_123_456),
                Some(&datetime6),
                &modes
            ),
            json!(1_709_201_472_123_456_i64)
        );
        assert_eq!(
            kind_schema(&datetime6.kind, &datetime6, &modes)["name"],
            "io.debezium.time.MicroTimestamp"
        );
    }
}
