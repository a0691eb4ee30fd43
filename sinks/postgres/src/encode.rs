//! Values as PostgreSQL input text, and the column type a value asks for.

use std::borrow::Cow;

use siphon_core::Value;
use siphon_core::schema::{Column, ColumnKind};
use siphon_format::json::value_json;
use siphon_format::json::value_text;

/// The column type a new column gets from its first non-null value. Arrays become `jsonb`
/// (their elements' types vary); enums and types siphon keeps as text become `text`.
pub(crate) fn column_type(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(_) => "boolean",
        Value::Int(_) => "bigint",
        Value::UInt(_) => "numeric(20)",
        Value::Float32(_) => "real",
        Value::Float64(_) => "double precision",
        Value::Decimal(_) => "numeric",
        Value::Bytes(_) | Value::Geometry { .. } => "bytea",
        Value::Json(_) | Value::Array(_) => "jsonb",
        Value::Uuid(_) => "uuid",
        Value::Date(_) => "date",
        Value::Time(_) => "time",
        Value::TimeTz { .. } => "timetz",
        Value::Timestamp(_) => "timestamp",
        Value::TimestampTz(_) => "timestamptz",
        Value::Interval { .. } => "interval",
        Value::Text(_) | Value::Enum(_) | Value::Other { .. } => "text",
    })
}

/// The type a column of a source table gets in the target: the source's own where it is
/// built into PostgreSQL (`numeric(10,2)`, `character varying(20)`, `text[]`, `inet`, …, as
/// `format_type` spelled it), else the closest built-in type: enums, domains and extension
/// types (whose definitions the target lacks) as their kind says, `text` for the rest.
pub(crate) fn pg_type(column: &Column) -> String {
    // OIDs below FirstNormalObjectId are the server's own types.
    if column.type_id != 0 && column.type_id < 16384 {
        return column.type_name.clone();
    }
    kind_type(&column.kind)
}

fn kind_type(kind: &ColumnKind) -> String {
    match kind {
        ColumnKind::Bool => "boolean".into(),
        ColumnKind::Int16 => "smallint".into(),
        ColumnKind::Int32 => "integer".into(),
        ColumnKind::Int64 => "bigint".into(),
        ColumnKind::Float32 => "real".into(),
        ColumnKind::Float64 => "double precision".into(),
        ColumnKind::Decimal {
            precision: Some(p),
            scale: Some(s),
        } => format!("numeric({p},{s})"),
        ColumnKind::Decimal { .. } => "numeric".into(),
        ColumnKind::Text { .. } | ColumnKind::Enum { .. } | ColumnKind::Other => "text".into(),
        // A geometry's WKB: PostGIS reads it with `ST_GeomFromWKB`.
        ColumnKind::Bytes | ColumnKind::Geometry { .. } => "bytea".into(),
        ColumnKind::Json { binary: true } => "jsonb".into(),
        ColumnKind::Json { binary: false } => "json".into(),
        ColumnKind::Uuid => "uuid".into(),
        ColumnKind::Date => "date".into(),
        ColumnKind::Time => "time without time zone".into(),
        ColumnKind::TimeTz => "time with time zone".into(),
        ColumnKind::Timestamp => "timestamp without time zone".into(),
        ColumnKind::TimestampTz => "timestamp with time zone".into(),
        // MySQL's TIME goes past a day and below zero, which `time` cannot hold.
        ColumnKind::Interval | ColumnKind::Duration => "interval".into(),
        ColumnKind::Array(element) => format!("{}[]", kind_type(element)),
    }
}

/// An array in PostgreSQL's array input syntax (`{1,NULL,"a b"}`), nested arrays nested.
pub(crate) fn pg_array(items: &[Value]) -> String {
    let mut out = String::from("{");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match item {
            Value::Array(inner) => out.push_str(&pg_array(inner)),
            other => match pg_text(other) {
                None => out.push_str("NULL"),
                Some(text) => {
                    out.push('"');
                    for ch in text.chars() {
                        if ch == '"' || ch == '\\' {
                            out.push('\\');
                        }
                        out.push(ch);
                    }
                    out.push('"');
                }
            },
        }
    }
    out.push('}');
    out
}

/// The value as PostgreSQL reads it back with a cast from text; `None` for NULL.
pub(crate) fn pg_text(value: &Value) -> Option<Cow<'_, str>> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(b) => Cow::Borrowed(if *b { "t" } else { "f" }),
        Value::Float32(f) => Cow::Owned(float_text(f64::from(*f), f.to_string())),
        Value::Float64(f) => Cow::Owned(float_text(*f, f.to_string())),
        Value::Bytes(b) | Value::Geometry { wkb: b, .. } => {
            let mut hex = String::with_capacity(2 + 2 * b.len());
            hex.push_str("\\x");
            for byte in b {
                hex.push_str(&format!("{byte:02x}"));
            }
            Cow::Owned(hex)
        }
        // siphon's JSON text writes UTC as "Z", which a time with zone does not read.
        Value::TimeTz { .. } => match value_json(value) {
            serde_json::Value::String(s) => Cow::Owned(
                s.strip_suffix('Z')
                    .map_or_else(|| s.clone(), |t| format!("{t}+00")),
            ),
            other => Cow::Owned(other.to_string()),
        },
        Value::Array(_) => Cow::Owned(value_json(value).to_string()),
        other => value_text(other),
    })
}

/// Infinities as PostgreSQL spells them; Rust writes "inf".
fn float_text(f: f64, shortest: String) -> String {
    if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        shortest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_postgres_reads_them() {
        assert_eq!(pg_text(&Value::Bytes(vec![0, 255])).unwrap(), "\\x00ff");
        assert_eq!(
            pg_text(&Value::Float64(f64::NEG_INFINITY)).unwrap(),
            "-Infinity"
        );
        assert_eq!(pg_text(&Value::Float32(0.1)).unwrap(), "0.1");
        assert_eq!(
            pg_text(&Value::TimeTz {
                micros: 3_600_000_000,
                offset_seconds: 0
            })
            .unwrap(),
            "01:00:00+00"
        );
        assert_eq!(pg_text(&Value::Null), None);
        let nested = Value::Array(vec![
            Value::Array(vec![Value::Text("a\"b\\c".into()), Value::Null]),
            Value::Array(vec![
                Value::Text("{x,y}".into()),
                Value::Text(String::new()),
            ]),
        ]);
        let Value::Array(items) = &nested else {
            unreachable!()
        };
        assert_eq!(pg_array(items), r#"{{"a\"b\\c",NULL},{"{x,y}",""}}"#);
    }
}
