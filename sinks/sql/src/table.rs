//! Tables that SQL sinks create and evolve from events: which columns a batch needs, and
//! how a table is defined. Each dialect brings its own type names; identifiers are quoted the
//! SQL way in all.

use serde::Deserialize;

use siphon_core::event::{Row, Value};

/// The placeholders of a target's `schema` and `table` templates: the source table's.
pub const NAME_PLACEHOLDERS: &[&str] = &["schema", "table"];

/// What a SQL store's tables hold (`mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableMode {
    /// The current rows, by primary key.
    #[default]
    Mirror,
    /// Every event, appended.
    History,
}

/// What a SQL store does with a column its source table dropped (`dropped_columns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DroppedColumns {
    /// Keep it, with its values (new rows leave it NULL).
    #[default]
    Keep,
    /// Drop it too.
    Drop,
}

/// A store's SQL names for the types of the columns siphon adds.
#[derive(Debug, Clone, Copy)]
pub struct MetaTypes {
    /// A 64-bit integer (`_siphon_offset`).
    pub bigint: &'static str,
    /// Text (`_siphon_op`).
    pub text: &'static str,
    /// The source position as JSON (`_siphon_position`).
    pub json: &'static str,
    /// An instant (`_siphon_commit_ts`).
    pub timestamptz: &'static str,
}

impl TableMode {
    /// The columns siphon adds to a new table, with their definitions, and its primary key:
    /// a mirror has `_siphon_offset` (the row's version) and the source's key; a history has
    /// `_siphon_offset` as its key, `_siphon_op`, `_siphon_position` and `_siphon_commit_ts`.
    pub fn layout(
        self,
        types: MetaTypes,
        key: Option<&Row>,
    ) -> (Vec<(&'static str, String)>, Vec<&str>) {
        match self {
            TableMode::Mirror => (
                vec![("_siphon_offset", format!("{} NOT NULL", types.bigint))],
                key.into_iter()
                    .flat_map(Row::iter)
                    .map(|(c, _)| c)
                    .collect(),
            ),
            TableMode::History => (
                vec![
                    ("_siphon_offset", format!("{} PRIMARY KEY", types.bigint)),
                    ("_siphon_op", format!("{} NOT NULL", types.text)),
                    ("_siphon_position", types.json.to_owned()),
                    ("_siphon_commit_ts", types.timestamptz.to_owned()),
                ],
                Vec::new(),
            ),
        }
    }
}

/// An identifier, quoted: `"name"`, with `"` doubled.
pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Columns of `key` and `rows` that `known` does not have yet, with the type `column_type`
/// gives their first non-null value, in order of first appearance (the key first). A column
/// with only NULLs (or unchanged values) has no type yet: it is left for a later batch.
pub fn new_columns<'r>(
    key: Option<&'r Row>,
    rows: &[&'r Row],
    column_type: impl Fn(&Value) -> Option<&'static str>,
    known: impl Fn(&str) -> bool,
) -> Vec<(&'r str, &'static str)> {
    let mut columns: Vec<(&str, &'static str)> = Vec::new();
    for (column, value) in key
        .into_iter()
        .flat_map(Row::iter)
        .chain(rows.iter().flat_map(|r| r.iter()))
    {
        if !known(column)
            && !columns.iter().any(|(c, _)| *c == column)
            && let Some(ty) = column_type(value)
        {
            columns.push((column, ty));
        }
    }
    columns
}

/// The inside of `CREATE TABLE t (…)`: `leading` columns (name and full definition), then
/// `columns`, then `PRIMARY KEY (key…)` when there is a key.
pub fn definition(
    leading: &[(&str, String)],
    columns: &[(&str, impl AsRef<str>)],
    key: &[&str],
) -> String {
    let mut defs: Vec<String> = leading
        .iter()
        .map(|(c, ty)| format!("{} {ty}", quote(c)))
        .chain(
            columns
                .iter()
                .map(|(c, ty)| format!("{} {}", quote(c), ty.as_ref())),
        )
        .collect();
    if !key.is_empty() {
        let key: Vec<String> = key.iter().map(|c| quote(c)).collect();
        defs.push(format!("PRIMARY KEY ({})", key.join(", ")));
    }
    defs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_columns_are_typed_by_their_first_value_and_nulls_wait() {
        let key = Row(vec![("id".into(), Value::Int(1))]);
        let a = Row(vec![
            ("id".into(), Value::Int(1)),
            ("n".into(), Value::Null),
            ("s".into(), Value::Text("x".into())),
        ]);
        let b = Row(vec![("n".into(), Value::Int(2))]);
        let ty = |v: &Value| match v {
            Value::Int(_) => Some("bigint"),
            Value::Text(_) => Some("text"),
            _ => None,
        };
        let cols = new_columns(Some(&key), &[&a, &b], ty, |c| c == "s");
        assert_eq!(cols, [("id", "bigint"), ("n", "bigint")]);
        assert_eq!(
            definition(&[("_v", "bigint NOT NULL".into())], &cols, &["id"]),
            "\"_v\" bigint NOT NULL, \"id\" bigint, \"n\" bigint, PRIMARY KEY (\"id\")"
        );
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
