//! Values as DuckDB takes them: a column type from the first non-null value, and each value
//! as the appender's value for a staging column.

use duckdb::types::Value as Duck;
use siphon_core::Value;
use siphon_core::json::value_json;
use siphon_core::sink::changes::value_text;

/// The column type a new column gets. Decimals stay exact as text (DuckDB's DECIMAL holds 38
/// digits at most); arrays and JSON are JSON text; enums and types siphon keeps as text are
/// text.
pub(crate) fn column_type(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(_) => "BOOLEAN",
        Value::Int(_) => "BIGINT",
        Value::UInt(_) => "UBIGINT",
        Value::Float32(_) => "FLOAT",
        Value::Float64(_) => "DOUBLE",
        Value::Bytes(_) => "BLOB",
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

/// The staging column type for a column of `column_type`: blobs as they are, everything else
/// as text cast in the statement that reads the staging table.
pub(crate) fn staging_type(column_type: &str) -> &'static str {
    if column_type.eq_ignore_ascii_case("BLOB") {
        "BLOB"
    } else {
        "VARCHAR"
    }
}

/// A value for a staging column.
pub(crate) fn staged(value: Option<&Value>) -> Duck {
    match value {
        None | Some(Value::Null | Value::Unchanged) => Duck::Null,
        Some(Value::Bytes(b)) => Duck::Blob(b.clone()),
        Some(Value::Interval {
            months,
            days,
            micros,
        }) => Duck::Text(format!("{months} months {days} days {micros} microseconds")),
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
