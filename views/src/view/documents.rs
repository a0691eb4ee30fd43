//! Documents out of the state: the roots a change touches, found by walking up the joins,
//! and each root's document built from the rows the state holds.

use super::*;

impl View {
    /// Adds to `touched` the roots whose documents hold `row` as node `n`.
    pub(super) fn roots_of(
        &self,
        store: &Store<'_>,
        n: usize,
        row: &Row,
        touched: &mut BTreeSet<Vec<u8>>,
    ) -> Result<(), ViewError> {
        let node = &self.nodes[n];
        match (&node.link, node.parent) {
            (Link::Root, _) => {
                if let Some(key) = self.key_of(node.table, row) {
                    touched.insert(encode(&key));
                }
            }
            (Link::One { .. }, Some(parent)) => {
                let Some(key) = self.single_key(node.table, row) else {
                    return Ok(());
                };
                for holder in self.holders(store, n, key)? {
                    self.roots_of_key(store, parent, holder, touched)?;
                }
            }
            (Link::Many { foreign_key, .. }, Some(parent)) => {
                let Some(value) = linked(row, foreign_key) else {
                    return Ok(());
                };
                let key = self.key_row(self.nodes[parent].table, value);
                self.roots_of_key(store, parent, encode(&key), touched)?;
            }
            _ => unreachable!("only the root has no parent"),
        }
        Ok(())
    }

    /// [`View::roots_of`] the row of node `n` with primary key `key` (the root's key
    /// itself, even before its row exists).
    pub(super) fn roots_of_key(
        &self,
        store: &Store<'_>,
        n: usize,
        key: Vec<u8>,
        touched: &mut BTreeSet<Vec<u8>>,
    ) -> Result<(), ViewError> {
        if matches!(self.nodes[n].link, Link::Root) {
            touched.insert(key);
            return Ok(());
        }
        match self.row(store, self.nodes[n].table, &key)? {
            Some(row) => self.roots_of(store, n, &row, touched),
            None => Ok(()),
        }
    }

    /// The node's object of `row`: its columns, then its joins.
    pub(super) fn object(
        &self,
        store: &Store<'_>,
        n: usize,
        row: &Row,
    ) -> Result<Map<String, Json>, ViewError> {
        let node = &self.nodes[n];
        let mut object: Map<String, Json> = if node.columns.is_empty() {
            row.iter()
                .map(|(c, v)| (c.to_owned(), field_json(v, true)))
                .collect()
        } else {
            node.columns
                .iter()
                .map(|c| {
                    let value = row.get(c).map_or(Json::Null, |v| field_json(v, true));
                    (c.clone(), value)
                })
                .collect()
        };
        for &child in &node.children {
            let joined = &self.nodes[child];
            match &joined.link {
                Link::One {
                    foreign_key,
                    flatten,
                } => {
                    let target = match linked(row, foreign_key) {
                        Some(value) => {
                            let key = encode(&self.key_row(joined.table, value));
                            self.row(store, joined.table, &key)?
                        }
                        None => None,
                    };
                    let inner = target.map(|t| self.object(store, child, &t)).transpose()?;
                    match (flatten, inner) {
                        (None, inner) => {
                            object.insert(
                                joined.field.clone(),
                                inner.map_or(Json::Null, Json::Object),
                            );
                        }
                        (Some(prefix), Some(inner)) => {
                            object.extend(
                                inner.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)),
                            );
                        }
                        (Some(prefix), None) => {
                            object.extend(
                                joined
                                    .columns
                                    .iter()
                                    .map(|c| (format!("{prefix}{c}"), Json::Null)),
                            );
                        }
                    }
                }
                Link::Many { order_by, .. } => {
                    let mut rows = Vec::new();
                    if let Some(key) = self.single_key(node.table, row) {
                        for holder in self.holders(store, child, key)? {
                            if let Some(r) = self.row(store, joined.table, &holder)? {
                                rows.push((holder, r));
                            }
                        }
                    }
                    // By the column, then by primary key as values (their encoded bytes do
                    // not sort as the numbers do).
                    let key = |r: &Row| self.key_of(joined.table, r);
                    rows.sort_by(|(ka, a), (kb, b)| {
                        order_by
                            .as_ref()
                            .map_or(Ordering::Equal, |c| order(a.get(c), b.get(c)))
                            .then_with(|| order_rows(key(a).as_ref(), key(b).as_ref()))
                            .then_with(|| ka.cmp(kb))
                    });
                    let items = rows
                        .iter()
                        .map(|(_, r)| self.object(store, child, r).map(Json::Object))
                        .collect::<Result<Vec<_>, _>>()?;
                    object.insert(joined.field.clone(), Json::Array(items));
                }
                Link::Root => unreachable!("the root is no join"),
            }
        }
        Ok(object)
    }

    /// The primary keys of the rows holding join `n`'s foreign key equal to `value`.
    pub(super) fn holders(
        &self,
        store: &Store<'_>,
        n: usize,
        value: &Value,
    ) -> Result<Vec<Vec<u8>>, ViewError> {
        let prefix = link_prefix(n, value);
        let links = &store.links;
        let mut out = Vec::new();
        for entry in links.range(prefix.as_slice()..)? {
            let (key, _) = entry?;
            let Some(holder) = key.value().strip_prefix(prefix.as_slice()) else {
                break;
            };
            out.push(holder.to_vec());
        }
        Ok(out)
    }

    pub(super) fn row(
        &self,
        store: &Store<'_>,
        table: usize,
        key: &[u8],
    ) -> Result<Option<Row>, ViewError> {
        let rows = &store.rows;
        let Some(bytes) = rows.get(row_key(table, key).as_slice())? else {
            return Ok(None);
        };
        postcard::from_bytes(bytes.value()).map(Some).map_err(|e| {
            ViewError::Store(format!(
                "a row of {} does not decode: {e}",
                self.tables[table].name
            ))
        })
    }

    /// The first `limit` rows of `table`, with their keys.
    pub(super) fn first_rows(
        &self,
        store: &Store<'_>,
        table: usize,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Row)>, ViewError> {
        let prefix = [table_tag(table)];
        let rows = &store.rows;
        let mut out = Vec::new();
        for entry in rows.range(&prefix[..]..)?.take(limit) {
            let (key, value) = entry?;
            let Some(key) = key.value().strip_prefix(&prefix[..]) else {
                break;
            };
            let row = postcard::from_bytes(value.value())
                .map_err(|e| ViewError::Store(format!("a row does not decode: {e}")))?;
            out.push((key.to_vec(), row));
        }
        Ok(out)
    }
}

/// A column's value where it links (not NULL, sent).
pub(super) fn linked<'r>(row: &'r Row, column: &str) -> Option<&'r Value> {
    row.get(column)
        .filter(|v| !matches!(v, Value::Null | Value::Unchanged))
}

/// The order of an array's elements by a column: numbers as numbers, instants and dates
/// in time, text by code point; NULLs last (as PostgreSQL orders them ascending).
pub(super) fn order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    let number = |v: &Value| match v {
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        Value::Float32(f) => Some(f64::from(*f)),
        Value::Float64(f) => Some(*f),
        Value::Decimal(d) => d.parse().ok(),
        _ => None,
    };
    let null = |v: Option<&Value>| v.is_none_or(|v| matches!(v, Value::Null | Value::Unchanged));
    match (a, b) {
        _ if null(a) || null(b) => null(a).cmp(&null(b)),
        (Some(a), Some(b)) => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            _ => match (a, b) {
                (Value::Date(x), Value::Date(y)) => x.cmp(y),
                (
                    Value::Timestamp(x) | Value::TimestampTz(x),
                    Value::Timestamp(y) | Value::TimestampTz(y),
                ) => x.cmp(y),
                _ => value_text(a).cmp(&value_text(b)),
            },
        },
        _ => Ordering::Equal,
    }
}

/// [`order`] of primary keys, column by column.
pub(super) fn order_rows(a: Option<&Row>, b: Option<&Row>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a
            .iter()
            .zip(b.iter())
            .map(|((_, x), (_, y))| order(Some(x), Some(y)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal),
        _ => Ordering::Equal,
    }
}
