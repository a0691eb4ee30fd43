//! What a sink takes from the log (tables, columns) and the names it writes them under.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::stage::{Stage, Stages};
use crate::event::Event;
use crate::name::{TableName, TablePattern, parse_column};
use crate::schema::{SchemaId, TableSchema};

/// Which tables a sink takes and which columns it leaves out (`tables` and
/// `exclude_columns`, settings every sink has): the first two [stages](super::stage) of its
/// chain.
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// `tables`.
    pub tables: Arc<TableFilter>,
    /// `exclude_columns`.
    pub columns: Arc<ColumnFilter>,
}

/// The tables a sink takes (`tables`; empty: every table): drops the events of the others.
#[derive(Debug, Default)]
pub struct TableFilter {
    tables: Vec<TablePattern>,
}

/// The columns a sink leaves out (`exclude_columns`): removes them from each event's rows
/// (never from its key) and from its schema, so that a sink creates no column for them.
#[derive(Debug, Default)]
pub struct ColumnFilter {
    exclude: Vec<(Option<TablePattern>, String)>,
    /// The schemas of tables that lose columns, made once per version.
    stripped: Mutex<HashMap<SchemaId, Arc<TableSchema>>>,
}

impl Routing {
    /// From the settings: `tables` (empty: every table) and `exclude_columns` (`column` in
    /// every table, or `schema.table.column`; the table part may use `*`). The error says
    /// which entry is wrong.
    pub fn new(tables: &[String], exclude_columns: &[String]) -> Result<Self, String> {
        let tables = tables
            .iter()
            .map(|t| TablePattern::parse(t).map_err(|e| format!("tables: {e}")))
            .collect::<Result<_, _>>()?;
        let exclude = exclude_columns
            .iter()
            .map(|c| parse_column(c).map_err(|e| format!("exclude_columns: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Routing {
            tables: Arc::new(TableFilter { tables }),
            columns: Arc::new(ColumnFilter {
                exclude,
                stripped: Mutex::default(),
            }),
        })
    }

    /// Whether the sink takes this table.
    pub fn accepts_table(&self, name: &TableName) -> bool {
        self.tables.accepts(name.namespace(), name.table())
    }

    /// The stages a sink's records pass first: its tables, then its columns.
    pub fn stages(&self) -> Stages {
        Stages::new(vec![self.tables.clone(), self.columns.clone()])
    }
}

impl TableFilter {
    fn accepts(&self, schema: &str, table: &str) -> bool {
        self.tables.is_empty() || self.tables.iter().any(|p| p.matches_parts(schema, table))
    }
}

impl Stage for TableFilter {
    fn apply(&self, event: &mut Event) -> bool {
        self.accepts(event.source.namespace(), &event.source.table)
    }
}

impl Stage for ColumnFilter {
    fn apply(&self, event: &mut Event) -> bool {
        if self.exclude.is_empty() {
            return true;
        }
        let (schema, table) = (
            event.source.namespace().to_owned(),
            event.source.table.clone(),
        );
        let excluded = |column: &str| {
            self.exclude.iter().any(|(t, c)| {
                c == column && t.as_ref().is_none_or(|t| t.matches_parts(&schema, &table))
            })
        };
        for row in [&mut event.before, &mut event.after].into_iter().flatten() {
            row.0.retain(|(c, _)| !excluded(c));
        }
        if let Some(schema) = &mut event.schema {
            let mut cache = self.stripped.lock().unwrap();
            *schema = cache
                .entry(schema.id)
                .or_insert_with(|| {
                    let kept: Vec<usize> = (0..schema.columns.len())
                        .filter(|&i| schema.key.contains(&i) || !excluded(&schema.columns[i].name))
                        .collect();
                    Arc::new(TableSchema {
                        columns: kept.iter().map(|&i| schema.columns[i].clone()).collect(),
                        key: schema
                            .key
                            .iter()
                            .filter_map(|k| kept.iter().position(|i| i == k))
                            .collect(),
                        ..(**schema).clone()
                    })
                })
                .clone();
        }
        true
    }
}

/// A name with `{placeholders}` (`{schema}`, `{table}`, and whatever else a sink offers),
/// checked when the configuration is read and split once into its parts, since it is
/// rendered for every row.
#[derive(Debug, Clone, PartialEq)]
pub struct NameTemplate {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Placeholder(String),
}

impl NameTemplate {
    /// Checks that every `{…}` in `text` is one of `allowed` and that braces are balanced.
    pub fn parse(text: &str, allowed: &[&str]) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(format!("{text:?} has a '}}' without its '{{'"));
            }
            let Some(close) = rest[open..].find('}') else {
                return Err(format!("{text:?} has a '{{' without its '}}'"));
            };
            let name = &rest[open + 1..open + close];
            if !allowed.contains(&name) {
                let list: Vec<String> = allowed.iter().map(|a| format!("{{{a}}}")).collect();
                return Err(format!(
                    "{text:?} uses {{{name}}}; allowed placeholders: {}",
                    list.join(", ")
                ));
            }
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            parts.push(Part::Placeholder(name.to_owned()));
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(NameTemplate {
            text: text.to_owned(),
            parts,
        })
    }

    /// The name for these placeholder values (a placeholder without a value renders empty).
    pub fn render(&self, values: &[(&str, &str)]) -> String {
        let mut out = String::with_capacity(self.text.len() + 32);
        self.render_into(&mut out, values);
        out
    }

    /// Appends the name for these placeholder values to `out`.
    pub fn render_into(&self, out: &mut String, values: &[(&str, &str)]) {
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Placeholder(name) => {
                    if let Some((_, value)) = values.iter().find(|(n, _)| n == name) {
                        out.push_str(value);
                    }
                }
            }
        }
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Op, Value};
    use crate::testing::{event, row};

    #[test]
    fn tables_and_columns_are_routed_by_pattern() {
        let r = Routing::new(
            &["public.*".into(), "sales.orders".into()],
            &["note".into(), "public.other.name".into()],
        )
        .unwrap();
        let table = |t: &str| TableName::parse(t).unwrap();
        assert!(r.accepts_table(&table("public.anything")));
        assert!(r.accepts_table(&table("sales.orders")));
        assert!(!r.accepts_table(&table("sales.customers")));
        let mut e = event(
            "compliance",
            Op::Create,
            1,
            None,
            Some(row(1, "a", Value::Null)),
        );
        assert!(r.stages().apply(&mut e));
        let columns: Vec<&str> = e.after.as_ref().unwrap().iter().map(|(c, _)| c).collect();
        assert_eq!(columns, ["id", "name"]);
        assert!(Routing::default().accepts_table(&table("x.y")));
    }

    #[test]
    fn bad_patterns_and_templates_say_what_is_allowed() {
        let e = Routing::new(&["a.b.c".into()], &[]).unwrap_err();
        assert!(e.contains("schema.table"), "{e}");
        let e = NameTemplate::parse("{schema}_{tabel}", &["schema", "table"]).unwrap_err();
        assert!(e.contains("{tabel}") && e.contains("{table}"), "{e}");
        let t = NameTemplate::parse("{schema}_{table}", &["schema", "table"]).unwrap();
        assert_eq!(t.render(&[("schema", "s"), ("table", "t")]), "s_t");
    }
}
