//! The view's plan: its tables with their keys, and its nodes — the root, then each join,
//! a parent before its children — as the configuration gives them.

use super::*;

/// The joins deeper than the root's at most: `orders → lines → product`.
pub(super) const MAX_DEPTH: usize = 2;

#[derive(Debug)]
pub(super) struct Table {
    pub(super) name: TableName,
    /// Primary-key columns.
    pub(super) key: Vec<String>,
}

#[derive(Debug)]
pub(super) struct Node {
    /// Index in `tables`.
    pub(super) table: usize,
    /// Its field in the parent's object.
    pub(super) field: String,
    /// Its columns in the document; empty: all.
    pub(super) columns: Vec<String>,
    pub(super) parent: Option<usize>,
    pub(super) link: Link,
    pub(super) children: Vec<usize>,
}

#[derive(Debug)]
pub(super) enum Link {
    Root,
    /// The parent's `foreign_key` holds this row's primary key.
    One {
        foreign_key: String,
        flatten: Option<String>,
    },
    /// This row's `foreign_key` holds the parent's primary key.
    Many {
        foreign_key: String,
        order_by: Option<String>,
    },
}

impl View {
    /// The joins whose foreign key `table`'s rows hold, with that column.
    pub(super) fn held_by(&self, table: usize) -> impl Iterator<Item = (usize, &str)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(move |(n, node)| match &node.link {
                Link::One { foreign_key, .. } => {
                    let parent = node.parent.expect("a join has a parent");
                    (self.nodes[parent].table == table).then_some((n, foreign_key.as_str()))
                }
                Link::Many { foreign_key, .. } => {
                    (node.table == table).then_some((n, foreign_key.as_str()))
                }
                Link::Root => None,
            })
    }

    /// `row`'s primary key, where it has every key column.
    pub(super) fn key_of(&self, table: usize, row: &Row) -> Option<Row> {
        self.tables[table]
            .key
            .iter()
            .map(|c| row.get(c).map(|v| (c.as_str(), joinable(v))))
            .collect()
    }

    /// The value of a one-column primary key.
    pub(super) fn single_key<'r>(&self, table: usize, row: &'r Row) -> Option<&'r Value> {
        linked(row, &self.tables[table].key[0])
    }

    /// The key row of a one-column primary key `value`.
    pub(super) fn key_row(&self, table: usize, value: &Value) -> Row {
        Row(vec![(
            self.tables[table].key[0].as_str().into(),
            joinable(value),
        )])
    }

    /// The index of table `name`, added if new; its primary key from `keys`.
    pub(super) fn table(
        &mut self,
        name: &str,
        keys: &impl Fn(&TableName) -> Option<Vec<String>>,
    ) -> Result<usize, ViewError> {
        let parsed = TableName::parse(name).map_err(ViewError::Config)?;
        if let Some(i) = self.tables.iter().position(|t| t.name == parsed) {
            return Ok(i);
        }
        let key = keys(&parsed).filter(|k| !k.is_empty()).ok_or_else(|| {
            ViewError::Config(format!(
                "{name}: no primary key (a view's tables need one), or no such table among those the source captures"
            ))
        })?;
        if self.tables.len() == usize::from(u8::MAX) {
            return Err(ViewError::Config("a view joins 255 tables at most".into()));
        }
        self.tables.push(Table { name: parsed, key });
        Ok(self.tables.len() - 1)
    }

    /// Adds the joins of node `parent` (at `depth`).
    pub(super) fn joins(
        &mut self,
        parent: usize,
        one: &BTreeMap<String, OneConfig>,
        many: &BTreeMap<String, ManyConfig>,
        depth: usize,
        keys: &impl Fn(&TableName) -> Option<Vec<String>>,
    ) -> Result<(), ViewError> {
        if depth > MAX_DEPTH && !(one.is_empty() && many.is_empty()) {
            return Err(ViewError::Config(format!(
                "joins nest {MAX_DEPTH} levels below the root at most"
            )));
        }
        for (field, join) in one {
            let table = self.table(&join.table, keys)?;
            if self.tables[table].key.len() != 1 {
                return Err(ViewError::Config(format!(
                    "one.{field}: {} has a primary key of {} columns; a to-one join points to a one-column key",
                    join.table,
                    self.tables[table].key.len()
                )));
            }
            let n = self.node(
                parent,
                table,
                field,
                &join.columns,
                Link::One {
                    foreign_key: join.foreign_key.clone(),
                    flatten: join.flatten.clone(),
                },
            );
            self.joins(n, &join.one, &join.many, depth + 1, keys)?;
        }
        for (field, join) in many {
            let parent_table = self.nodes[parent].table;
            if self.tables[parent_table].key.len() != 1 {
                return Err(ViewError::Config(format!(
                    "many.{field}: {} has a primary key of {} columns; a to-many join points to a one-column key",
                    self.tables[parent_table].name,
                    self.tables[parent_table].key.len()
                )));
            }
            let table = self.table(&join.table, keys)?;
            let n = self.node(
                parent,
                table,
                field,
                &join.columns,
                Link::Many {
                    foreign_key: join.foreign_key.clone(),
                    order_by: join.order_by.clone(),
                },
            );
            self.joins(n, &join.one, &join.many, depth + 1, keys)?;
        }
        Ok(())
    }

    pub(super) fn node(
        &mut self,
        parent: usize,
        table: usize,
        field: &str,
        columns: &[String],
        link: Link,
    ) -> usize {
        self.nodes.push(Node {
            table,
            field: field.to_owned(),
            columns: columns.to_vec(),
            parent: Some(parent),
            link,
            children: Vec::new(),
        });
        let n = self.nodes.len() - 1;
        self.nodes[parent].children.push(n);
        n
    }

    /// Where node `n` is in the configuration: `many.lines.one.product.` (empty for the
    /// root).
    pub(super) fn path(&self, n: usize) -> String {
        let node = &self.nodes[n];
        let Some(parent) = node.parent else {
            return String::new();
        };
        let kind = match node.link {
            Link::One { .. } => "one",
            _ => "many",
        };
        format!("{}{kind}.{}.", self.path(parent), node.field)
    }
}
