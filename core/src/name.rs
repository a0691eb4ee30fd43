//! Table names and the patterns that pick tables, parsed once at the edge: nothing else
//! splits `"schema.table"` by hand.
//!
//! A name is a namespace (PostgreSQL's schema, MySQL's database) and a table. Its text form
//! is `namespace.table`; a part holding a dot, a double quote or a `*` is written in double
//! quotes, a quote inside doubled (`"my.schema"."a ""b"""`), so that every name has one
//! spelling that reads back to it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A shared name (column, table, database): cloned per event without allocating.
pub type Name = std::sync::Arc<str>;

/// A table: its namespace (schema or database) and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TableName {
    namespace: Name,
    table: Name,
}

impl TableName {
    /// A name from its parts, taken as they are (no quoting).
    pub fn new(namespace: impl Into<Name>, table: impl Into<Name>) -> Self {
        TableName {
            namespace: namespace.into(),
            table: table.into(),
        }
    }

    /// The schema (PostgreSQL) or database (MySQL) holding the table.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The table's own name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The namespace, shared.
    pub fn namespace_name(&self) -> &Name {
        &self.namespace
    }

    /// The table's own name, shared.
    pub fn table_name(&self) -> &Name {
        &self.table
    }

    /// Reads `namespace.table` (parts quoted as the module says). The error says what is
    /// wrong and what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        match parts(text)?.as_slice() {
            [Part::Literal(namespace), Part::Literal(table)] => {
                Ok(TableName::new(namespace.as_str(), table.as_str()))
            }
            _ => Err(format!(
                "{text:?} is not a table name; write \"schema.table\" (\"database.table\" for \
                 MySQL), quoting a part that holds a dot: \"\\\"my.schema\\\".orders\""
            )),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_part(f, &self.namespace)?;
        f.write_str(".")?;
        write_part(f, &self.table)
    }
}

impl std::str::FromStr for TableName {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        TableName::parse(text)
    }
}

impl TryFrom<String> for TableName {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        TableName::parse(&text)
    }
}

impl From<TableName> for String {
    fn from(name: TableName) -> String {
        name.to_string()
    }
}

/// Tables to pick: `namespace.table`, either part a glob (`*` matches any run of
/// characters: `shop.*`, `shop.order_*`), or `*` alone for every table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TablePattern {
    namespace: Glob,
    table: Glob,
}

impl TablePattern {
    /// Reads a pattern; the error says what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        match parts(text)?.as_slice() {
            [Part::Glob(star)] if star == "*" => Ok(TablePattern {
                namespace: Glob::any(),
                table: Glob::any(),
            }),
            [namespace, table] => Ok(TablePattern {
                namespace: Glob::of(namespace),
                table: Glob::of(table),
            }),
            _ => Err(format!(
                "{text:?} is not a table pattern; write \"schema.table\", \"schema.*\" or \"*\" \
                 (\"database.table\" for MySQL; `*` matches any run of characters)"
            )),
        }
    }

    /// The pattern that picks exactly this table.
    pub fn exactly(name: &TableName) -> TablePattern {
        let literal = |part: &str| Glob {
            runs: vec![part.to_owned()],
        };
        TablePattern {
            namespace: literal(name.namespace()),
            table: literal(name.table()),
        }
    }

    /// Whether the pattern picks this table.
    pub fn matches(&self, name: &TableName) -> bool {
        self.matches_parts(name.namespace(), name.table())
    }

    /// Whether the pattern picks the table `table` of `namespace`.
    pub fn matches_parts(&self, namespace: &str, table: &str) -> bool {
        self.namespace.matches(namespace) && self.table.matches(table)
    }

    /// The namespace part, for a catalog query.
    pub fn namespace(&self) -> &Glob {
        &self.namespace
    }

    /// The table part, for a catalog query.
    pub fn table(&self) -> &Glob {
        &self.table
    }

    /// The one table the pattern names, when it has no `*`.
    pub fn exact(&self) -> Option<TableName> {
        Some(TableName::new(
            self.namespace.literal()?,
            self.table.literal()?,
        ))
    }
}

impl fmt::Display for TablePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_any() && self.table.is_any() {
            return f.write_str("*");
        }
        write!(f, "{}.{}", self.namespace, self.table)
    }
}

impl std::str::FromStr for TablePattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        TablePattern::parse(text)
    }
}

impl TryFrom<String> for TablePattern {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        TablePattern::parse(&text)
    }
}

impl From<TablePattern> for String {
    fn from(pattern: TablePattern) -> String {
        pattern.to_string()
    }
}

/// A column setting: `column` (in every table) or `schema.table.column`, the table part a
/// pattern; the error says what is expected.
pub fn parse_column(text: &str) -> Result<(Option<TablePattern>, String), String> {
    let bad = || {
        format!(
            "{text:?} is not a column; write \"column\" or \"schema.table.column\" (the table \
             part may use `*`)"
        )
    };
    match parts(text).map_err(|_| bad())?.as_slice() {
        [Part::Literal(column)] => Ok((None, column.clone())),
        [namespace, table, Part::Literal(column)] => Ok((
            Some(TablePattern {
                namespace: Glob::of(namespace),
                table: Glob::of(table),
            }),
            column.clone(),
        )),
        _ => Err(bad()),
    }
}

/// One part of a pattern: literal text with `*` standing for any run of characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    /// The literal runs between the stars; one run for a name without a star.
    runs: Vec<String>,
}

impl Glob {
    /// A part as written: a name, or runs between stars.
    fn of(part: &Part) -> Glob {
        match part {
            Part::Literal(name) => Glob {
                runs: vec![name.clone()],
            },
            Part::Glob(text) => Glob {
                runs: text.split('*').map(str::to_owned).collect(),
            },
        }
    }

    fn any() -> Glob {
        Glob::of(&Part::Glob("*".into()))
    }

    /// Matches every name.
    pub fn is_any(&self) -> bool {
        self.runs.iter().all(String::is_empty) && self.runs.len() > 1
    }

    /// The name it matches, when it has no star.
    pub fn literal(&self) -> Option<&str> {
        match self.runs.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }

    /// The glob as an SQL `LIKE` pattern with `\` as the escape: `*` as `%`, a literal `%`,
    /// `_` or `\` escaped.
    pub fn to_like(&self) -> String {
        let escape = |run: &str| {
            run.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        };
        self.runs
            .iter()
            .map(|r| escape(r))
            .collect::<Vec<_>>()
            .join("%")
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        let Some((first, rest)) = self.runs.split_first() else {
            return false;
        };
        let Some(mut name) = name.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return name.is_empty(); // no star: the whole name
        };
        for run in middle {
            match name.find(run.as_str()) {
                Some(at) => name = &name[at + run.len()..],
                None => return false,
            }
        }
        name.len() >= last.len() && name.ends_with(last.as_str())
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.literal() {
            Some(name) => write_part(f, name),
            None => f.write_str(&self.runs.join("*")),
        }
    }
}

/// A part of a name or pattern as written: quoted (or plain without a star), or with stars.
enum Part {
    Literal(String),
    Glob(String),
}

/// Splits at the dots outside quotes.
fn parts(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let part = if chars.peek() == Some(&'"') {
            chars.next();
            let mut name = String::new();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    Some('"') => break,
                    Some(c) => name.push(c),
                    None => return Err(format!("{text:?}: a quote is not closed")),
                }
            }
            Part::Literal(name)
        } else {
            let mut name = String::new();
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                if c == '"' {
                    return Err(format!(
                        "{text:?}: a quote may only open a part (\"\\\"a.b\\\".c\")"
                    ));
                }
                name.push(c);
                chars.next();
            }
            if name.contains('*') {
                Part::Glob(name)
            } else {
                Part::Literal(name)
            }
        };
        if matches!(&part, Part::Literal(s) | Part::Glob(s) if s.is_empty()) {
            return Err(format!("{text:?}: a part of the name is empty"));
        }
        parts.push(part);
        match chars.next() {
            None => return Ok(parts),
            Some('.') => {}
            Some(c) => return Err(format!("{text:?}: {c:?} after a quoted part")),
        }
    }
}

/// A part as the text form writes it: quoted where it must be.
fn write_part(f: &mut fmt::Formatter<'_>, part: &str) -> fmt::Result {
    if part.contains(['.', '"', '*']) || part.is_empty() {
        write!(f, "\"{}\"", part.replace('"', "\"\""))
    } else {
        f.write_str(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_from_their_text() {
        for (ns, table) in [
            ("public", "orders"),
            ("my.schema", "a\"b"),
            ("shop", "x*y"),
            ("ünï", "çödé"),
        ] {
            let name = TableName::new(ns, table);
            let text = name.to_string();
            assert_eq!(TableName::parse(&text).unwrap(), name, "{text}");
        }
        assert_eq!(
            TableName::new("my.schema", "t").to_string(),
            "\"my.schema\".t"
        );
        for bad in [
            "orders", "a.b.c", ".b", "a.", "\"a.b", "a\"b\".c", "\"a\"x.b", "a.*",
        ] {
            assert!(TableName::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn patterns_match_as_globs() {
        let p = |t: &str| TablePattern::parse(t).unwrap();
        assert!(p("*").matches_parts("any", "thing"));
        assert!(p("shop.*").matches_parts("shop", "orders"));
        assert!(!p("shop.*").matches_parts("shop2", "orders"));
        assert!(p("shop.order_*").matches_parts("shop", "order_lines"));
        assert!(!p("shop.order_*").matches_parts("shop", "orders"));
        assert!(p("*.orders").matches_parts("a", "orders"));
        assert!(p("s*p.*s").matches_parts("shop", "orders"));
        assert!(!p("s*p.*s").matches_parts("shop", "order"));
        assert!(p("a*a.t").matches_parts("aa", "t"));
        assert!(!p("a*a.t").matches_parts("a", "t"));
        assert!(p("\"x*y\".t").matches_parts("x*y", "t"));
        assert!(!p("\"x*y\".t").matches_parts("xzy", "t"));
        assert_eq!(
            p("shop.orders").exact(),
            Some(TableName::new("shop", "orders"))
        );
        assert_eq!(p("shop.*").exact(), None);
        for bad in ["", "orders", "a.b.c", "*.", "\"a"] {
            assert!(TablePattern::parse(bad).is_err(), "{bad} parsed");
        }
        for text in ["*", "shop.*", "*.orders", "s*p.o*", "\"a.b\".c"] {
            assert_eq!(p(text).to_string(), text);
        }
    }

    #[test]
    fn globs_become_like_patterns() {
        let p = TablePattern::parse("my_db.order%*").unwrap();
        assert_eq!(p.namespace().to_like(), "my\\_db");
        assert_eq!(p.table().to_like(), "order\\%%");
    }
}
