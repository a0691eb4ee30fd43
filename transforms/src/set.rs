//! `set`: a column computed from the row by a CEL expression, in the rows and the schema.

use siphon_core::event::{Event, Row, Value};
use siphon_core::name::{Name, TablePattern};
use siphon_core::schema::{Column, ColumnKind, TableSchema};
use siphon_core::sink::stage::{SchemaRewrites, Stage};

use crate::config::SetType;
use crate::expression::{self, Expression};

/// Sets `column` of each row of the chosen tables to the expression's value.
#[derive(Debug)]
pub struct SetColumn {
    label: String,
    tables: Vec<TablePattern>,
    column: Name,
    value: Expression,
    column_type: SetType,
    schemas: SchemaRewrites,
}

impl SetColumn {
    /// The names a `set` expression may read.
    pub const VARIABLES: &[&str] = &["row", "table", "source"];

    pub(crate) fn new(
        label: String,
        tables: Vec<TablePattern>,
        column: &str,
        value: Expression,
        column_type: SetType,
    ) -> SetColumn {
        SetColumn {
            label,
            tables,
            column: column.into(),
            value,
            column_type,
            schemas: SchemaRewrites::default(),
        }
    }

    /// The column's value for `row`, of its type.
    fn compute(&self, event: &Event, row: &Row) -> Result<Value, String> {
        let value = self
            .value
            .value(|v| match v {
                "row" => expression::row(row, self.value.columns("row")),
                other => expression::source_variable(event, other),
            })
            .map_err(|e| format!("{}: {e}", self.label))?;
        let typed = match (self.column_type, value) {
            (_, cel::Value::Null) => Some(Value::Null),
            (SetType::Bigint, cel::Value::Int(i)) => Some(Value::Int(i)),
            (SetType::Bigint, cel::Value::UInt(u)) => i64::try_from(u).ok().map(Value::Int),
            (SetType::Double, cel::Value::Float(f)) => Some(Value::Float64(f)),
            (SetType::Double, cel::Value::Int(i)) => Some(Value::Float64(i as f64)),
            (SetType::Double, cel::Value::UInt(u)) => Some(Value::Float64(u as f64)),
            (SetType::Text, cel::Value::String(s)) => Some(Value::Text((*s).clone())),
            (SetType::Boolean, cel::Value::Bool(b)) => Some(Value::Bool(b)),
            (_, other) => {
                return Err(format!(
                    "{}: gave {other:?}, not a {:?}",
                    self.label, self.column_type
                ));
            }
        };
        typed.ok_or_else(|| format!("{}: the value is past a bigint", self.label))
    }

    fn kind(&self) -> (ColumnKind, &'static str) {
        match self.column_type {
            SetType::Bigint => (ColumnKind::Int64, "bigint"),
            SetType::Double => (ColumnKind::Float64, "double precision"),
            SetType::Text => (ColumnKind::Text { length: None }, "text"),
            SetType::Boolean => (ColumnKind::Bool, "boolean"),
        }
    }
}

fn put(row: &mut Row, column: &Name, value: Value) {
    match row.0.iter_mut().find(|(c, _)| c == column) {
        Some((_, v)) => *v = value,
        None => row.0.push((column.clone(), value)),
    }
}

impl Stage for SetColumn {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        if !crate::applies_to(&self.tables, event) {
            return Ok(true);
        }
        // The old row may hold only the key, the rest unsent (PostgreSQL's default replica
        // identity): where the expression cannot be read on it, it gets no value.
        let before = event
            .before
            .as_ref()
            .and_then(|row| self.compute(event, row).ok());
        let after = match (&event.after, &event.before) {
            (Some(row), Some(old)) if row.iter().any(|(_, v)| matches!(v, Value::Unchanged)) => {
                Some(self.compute(event, &row.fill_unchanged(old))?)
            }
            (Some(row), _) => Some(self.compute(event, row)?),
            (None, _) => None,
        };
        if let (Some(row), Some(value)) = (&mut event.before, before) {
            put(row, &self.column, value);
        }
        if let (Some(row), Some(value)) = (&mut event.after, after) {
            put(row, &self.column, value);
        }
        if let Some(schema) = &mut event.schema {
            *schema = self.schemas.get(schema, |s| {
                let (kind, type_name) = self.kind();
                let column = Column {
                    name: self.column.clone(),
                    type_name: type_name.into(),
                    type_id: 0,
                    type_modifier: -1,
                    kind,
                    nullable: true,
                    generated: true,
                };
                let mut columns = s.columns.clone();
                match columns.iter_mut().find(|c| c.name == self.column) {
                    Some(existing) => *existing = column,
                    None => columns.push(column),
                }
                TableSchema {
                    columns,
                    ..s.clone()
                }
            });
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::event::Op;
    use siphon_core::testing::{event, row};

    use super::*;

    fn set(value: &str, column_type: SetType) -> SetColumn {
        let value = Expression::compile(value, SetColumn::VARIABLES).unwrap();
        SetColumn::new(
            "transforms[0] (set)".into(),
            Vec::new(),
            "computed",
            value,
            column_type,
        )
    }

    #[test]
    fn a_computed_column_is_added_to_both_rows_with_its_type() {
        let s = set("row.id * 100 + size(row.name)", SetType::Bigint);
        let mut e = event(
            "t",
            Op::Update,
            7,
            Some(row(7, "ab", Value::Null)),
            Some(row(7, "abc", Value::Null)),
        );
        assert_eq!(s.apply(&mut e), Ok(true));
        assert_eq!(e.before.unwrap().get("computed"), Some(&Value::Int(702)));
        assert_eq!(e.after.unwrap().get("computed"), Some(&Value::Int(703)));
        let upper = set("row.name + '!'", SetType::Text);
        let mut e = event("t", Op::Create, 1, None, Some(row(1, "a", Value::Null)));
        upper.apply(&mut e).unwrap();
        assert_eq!(
            e.after.unwrap().get("computed"),
            Some(&Value::Text("a!".into()))
        );
    }

    #[test]
    fn an_old_row_it_cannot_be_read_on_gets_no_value() {
        let s = set("row.id * 100 + size(row.name)", SetType::Bigint);
        let key_only = Row(vec![("id".into(), Value::Int(7))]);
        let mut e = event("t", Op::Delete, 7, Some(key_only.clone()), None);
        assert_eq!(s.apply(&mut e), Ok(true));
        assert_eq!(e.before, Some(key_only));
    }

    #[test]
    fn a_value_of_another_type_is_an_error_naming_the_transform() {
        let s = set("row.name", SetType::Bigint);
        let mut e = event("t", Op::Create, 1, None, Some(row(1, "a", Value::Null)));
        let error = s.apply(&mut e).unwrap_err();
        assert!(error.starts_with("transforms[0] (set): gave"), "{error}");
    }
}
