//! What a sink takes from the log (tables, columns) and the names it writes them under.

use std::sync::Arc;

use super::stage::{SchemaRewrites, Stage, Stages};
use crate::event::Event;
use crate::name::{TablePattern, parse_column};
use crate::schema::TableSchema;
use crate::source::TableInfo;

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

/// The columns a sink leaves out (`exclude_columns`, the `drop_columns` and `keep_columns`
/// transforms): removes them from each event's rows (never from its key) and from its
/// schema, so that a sink creates no column for them.
#[derive(Debug, Default)]
pub struct ColumnFilter {
    selection: Selection,
    /// The schemas of tables that lose columns.
    stripped: SchemaRewrites,
}

/// Which columns a [`ColumnFilter`] removes.
#[derive(Debug)]
enum Selection {
    /// These: a column in every table, or in the tables a pattern matches.
    Exclude(Vec<(Option<TablePattern>, String)>),
    /// All but these and the key's, in the tables the patterns match (every table: none).
    Keep {
        tables: Vec<TablePattern>,
        columns: Vec<String>,
    },
}

impl Default for Selection {
    fn default() -> Self {
        Selection::Exclude(Vec::new())
    }
}

impl ColumnFilter {
    /// Removes `columns`: "column" (in every table) or "schema.table.column" (the table part
    /// may use `*`).
    pub fn excluding(columns: &[String]) -> Result<ColumnFilter, String> {
        let exclude = columns
            .iter()
            .map(|c| parse_column(c))
            .collect::<Result<_, _>>()?;
        Ok(ColumnFilter {
            selection: Selection::Exclude(exclude),
            stripped: SchemaRewrites::default(),
        })
    }

    /// Keeps only `columns` and the key's in `tables` ("schema.table", `*` allowed; none:
    /// every table).
    pub fn keeping(tables: &[String], columns: &[String]) -> Result<ColumnFilter, String> {
        let tables = tables
            .iter()
            .map(|t| TablePattern::parse(t))
            .collect::<Result<_, _>>()?;
        Ok(ColumnFilter {
            selection: Selection::Keep {
                tables,
                columns: columns.to_vec(),
            },
            stripped: SchemaRewrites::default(),
        })
    }

    /// Whether it removes `column` of `schema.table` (`is_key`: a key column).
    fn removes(&self, schema: &str, table: &str, column: &str, is_key: bool) -> bool {
        match &self.selection {
            Selection::Exclude(exclude) => exclude.iter().any(|(t, c)| {
                c == column && t.as_ref().is_none_or(|t| t.matches_parts(schema, table))
            }),
            Selection::Keep { tables, columns } => {
                !is_key
                    && (tables.is_empty() || tables.iter().any(|t| t.matches_parts(schema, table)))
                    && !columns.iter().any(|c| c == column)
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(&self.selection, Selection::Exclude(e) if e.is_empty())
    }
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
        let columns = ColumnFilter::excluding(exclude_columns)
            .map_err(|e| format!("exclude_columns: {e}"))?;
        Ok(Routing {
            tables: Arc::new(TableFilter { tables }),
            columns: Arc::new(columns),
        })
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
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        Ok(self.accepts(event.source.namespace(), &event.source.table))
    }

    fn table(&self, table: TableInfo) -> Option<TableInfo> {
        self.accepts(table.name.namespace(), table.name.table())
            .then_some(table)
    }
}

impl Stage for ColumnFilter {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        if self.is_empty() {
            return Ok(true);
        }
        let (schema, table) = (
            event.source.namespace().to_owned(),
            event.source.table.clone(),
        );
        let key = event.key.as_ref();
        let is_key = |column: &str| key.is_some_and(|k| k.get(column).is_some());
        for row in [&mut event.before, &mut event.after].into_iter().flatten() {
            row.0
                .retain(|(c, _)| !self.removes(&schema, &table, c, is_key(c)));
        }
        if let Some(schema) = &mut event.schema {
            *schema = self.stripped.get(schema, |s| {
                let name = s.name();
                let kept: Vec<usize> = (0..s.columns.len())
                    .filter(|&i| {
                        s.key.contains(&i)
                            || !self.removes(
                                name.namespace(),
                                name.table(),
                                &s.columns[i].name,
                                false,
                            )
                    })
                    .collect();
                TableSchema {
                    columns: kept.iter().map(|&i| s.columns[i].clone()).collect(),
                    key: s
                        .key
                        .iter()
                        .filter_map(|k| kept.iter().position(|i| i == k))
                        .collect(),
                    ..s.clone()
                }
            });
        }
        Ok(true)
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
    use crate::name::TableName;
    use crate::testing::{event, row};

    #[test]
    fn tables_and_columns_are_routed_by_pattern() {
        let r = Routing::new(
            &["public.*".into(), "sales.orders".into()],
            &["note".into(), "public.other.name".into()],
        )
        .unwrap();
        let taken = |r: &Routing, names: &[&str]| -> Vec<String> {
            let tables = names
                .iter()
                .map(|t| TableInfo {
                    name: TableName::parse(t).unwrap(),
                    key_columns: vec!["id".into()],
                })
                .collect();
            r.stages()
                .tables(tables)
                .iter()
                .map(|t| t.name.to_string())
                .collect()
        };
        assert_eq!(
            taken(&r, &["public.anything", "sales.orders", "sales.customers"]),
            ["public.anything", "sales.orders"]
        );
        let mut e = event(
            "compliance",
            Op::Create,
            1,
            None,
            Some(row(1, "a", Value::Null)),
        );
        assert_eq!(r.stages().apply(&mut e), Ok(true));
        let columns: Vec<&str> = e.after.as_ref().unwrap().iter().map(|(c, _)| c).collect();
        assert_eq!(columns, ["id", "name"]);
        assert_eq!(taken(&Routing::default(), &["x.y"]), ["x.y"]);
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
