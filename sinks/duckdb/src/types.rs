//! Values as DuckDB takes them: a column type from the source table's schema (or, for events
//! without one, from the first non-null value), and each value as the appender's value for a
//! staging column.

use duckdb::types::Value as Duck;
use siphon_core::Value;
use siphon_core::schema::{Column, ColumnKind};
use siphon_format::json::value_json;
use siphon_format::json::value_text;

/// DuckDB's DECIMAL holds this many digits at most.
const MAX_DECIMAL_PRECISION: u32 = 38;

/// The column type a new column gets from its first value, for events without a table
/// schema. Decimals stay exact as text; arrays and JSON are JSON text; enums and types siphon
/// keeps as text are text.
pub(crate) fn column_type(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(_) => "BOOLEAN",
        Value::Int(_) => "BIGINT",
        Value::UInt(_) => "UBIGINT",
        Value::Float32(_) => "FLOAT",
        Value::Float64(_) => "DOUBLE",
        Value::Bytes(_) | Value::Geometry { .. } => "BLOB",
        Value::Uuid(_) => "UUID",
        Value::Date(_) => "DATE",
        Value::Time(_) => "TIME",
        Value::TimeTz { .. } => "TIMETZ",
        Value::Timestamp(_) => "TIMESTAMP",
        Value::TimestampTz(_) => "TIMESTAMPTZ",
        Value::Interval { .. } => "INTERVAL",
        Value::Decimal(_)
        | Value::Text(_)
        | Value::Json(_)
        | Value::Array(_)
        | Value::Enum(_)
        | Value::Other { .. } => "VARCHAR",
    })
}

/// The closest exact DuckDB type of a source column (the README's table): DECIMAL(p,s) where
/// the source declares a precision DuckDB holds (unconstrained or wider decimals stay exact as
/// text), LIST for one-dimensional arrays of a scalar DuckDB has, JSON, a geometry's WKB as a
/// BLOB (what the spatial extension's `ST_GeomFromWKB` reads), and VARCHAR for what has no
/// match (enums, inet, money, bit strings).
pub(crate) fn duck_type(column: &Column) -> String {
    match &column.kind {
        ColumnKind::Array(element) => format!("{}[]", element_type(element)),
        ColumnKind::Json { .. } => "JSON".into(),
        ColumnKind::Bytes | ColumnKind::Geometry { .. } => "BLOB".into(),
        ColumnKind::TimeTz => "TIMETZ".into(),
        // MySQL's TIME goes past a day and below zero, which TIME cannot hold.
        ColumnKind::Interval | ColumnKind::Duration => "INTERVAL".into(),
        kind => element_type(kind),
    }
}

/// The type of a scalar, also as a list's element. Elements reach DuckDB in a JSON array
/// (bytes as base64, intervals and times with an offset as ISO text, JSON documents as
/// strings), so those element kinds are kept as the text the JSON holds.
fn element_type(kind: &ColumnKind) -> String {
    match kind {
        ColumnKind::Bool => "BOOLEAN".into(),
        ColumnKind::Int16 => "SMALLINT".into(),
        ColumnKind::Int32 => "INTEGER".into(),
        ColumnKind::Int64 => "BIGINT".into(),
        ColumnKind::Float32 => "FLOAT".into(),
        ColumnKind::Float64 => "DOUBLE".into(),
        ColumnKind::Decimal {
            precision: Some(p),
            scale,
        } if *p <= MAX_DECIMAL_PRECISION => format!("DECIMAL({p},{})", scale.unwrap_or(0)),
        ColumnKind::Uuid => "UUID".into(),
        ColumnKind::Date => "DATE".into(),
        ColumnKind::Time => "TIME".into(),
        ColumnKind::Timestamp => "TIMESTAMP".into(),
        ColumnKind::TimestampTz => "TIMESTAMPTZ".into(),
        _ => "VARCHAR".into(),
    }
}

/// Whether a column of this (catalog-spelled) type is a LIST: its values are staged as JSON.
pub(crate) fn is_list(column_type: &str) -> bool {
    column_type.ends_with(']')
}

/// The expression that turns staging column `staged` into a value of `column_type`.
pub(crate) fn cast(staged: &str, column_type: &str) -> String {
    if is_list(column_type) {
        format!("CAST(CAST({staged} AS JSON) AS {column_type})")
    } else {
        format!("CAST({staged} AS {column_type})")
    }
}

/// The staging column type for a column of `column_type`: blobs as they are, everything else
/// as text cast in the statement that reads the staging table.
pub(crate) fn staging_type(column_type: &str) -> &'static str {
    if column_type.eq_ignore_ascii_case("BLOB") {
        "BLOB"
    } else {
        "VARCHAR"
    }
}

/// Whether a column of `column_type` cannot hold the value: DuckDB's DECIMAL has no NaN or
/// infinity. Such a value is staged as NULL (the sink warns once per column).
pub(crate) fn unholdable(value: Option<&Value>, column_type: &str) -> bool {
    matches!(value, Some(Value::Decimal(d))
        if column_type.starts_with("DECIMAL")
            && matches!(d.as_str(), "NaN" | "Infinity" | "-Infinity"))
}

/// A value for a staging column of a column of `column_type` (NULL for one it cannot hold).
pub(crate) fn staged(value: Option<&Value>, column_type: &str) -> Duck {
    if unholdable(value, column_type) {
        return Duck::Null;
    }
    match value {
        None | Some(Value::Null | Value::Unchanged) => Duck::Null,
        Some(Value::Bytes(b) | Value::Geometry { wkb: b, .. }) => Duck::Blob(b.clone()),
        Some(Value::Interval {
            months,
            days,
            micros,
        }) => Duck::Text(format!("{months} months {days} days {micros} microseconds")),
        Some(Value::Time(micros)) if column_type == "INTERVAL" => {
            Duck::Text(format!("{micros} microseconds"))
        }
        Some(Value::TimeTz { .. }) => match value_json(value.unwrap_or(&Value::Null)) {
            serde_json::Value::String(s) => Duck::Text(
                s.strip_suffix('Z')
                    .map_or_else(|| s.clone(), |t| format!("{t}+00")),
            ),
            other => Duck::Text(other.to_string()),
        },
        Some(Value::Array(_)) => Duck::Text(value_json(value.unwrap_or(&Value::Null)).to_string()),
        Some(v) => Duck::Text(value_text(v).into_owned()),
    }
}
