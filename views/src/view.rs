//! The view's state and its incremental maintenance.
//!
//! The store holds three tables. `rows`: each joined table's current rows, by table and
//! primary key. `links`: for each join, which row holds which foreign key — `(join, foreign
//! key value, holder's primary key)` — so that the rows pointing to a row are one range scan
//! away (an order's line items; a customer's orders). `meta`: the log offset the state is at.
//! `touched`: the roots the source transaction in progress touched so far. `emitted`: the
//! roots whose documents were given but may not be applied by the sink yet; after a restart
//! they are given again (see [`View::resume`]).
//! A change finds the roots it touches by walking up the joins from the changed row, once
//! with the row as it was and once as it is; after the transaction each of those roots'
//! documents is built from the state. Keys are postcard bytes, which no other key's bytes
//! begin with, so a prefix scan finds exactly one value's links.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use redb::backends::InMemoryBackend;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde_json::{Map, Value as Json};
use siphon_core::event::{Event, Op, Row, Value};
use siphon_core::name::TableName;
use siphon_format::json::{field_json, value_text};

use crate::ViewError;
use crate::config::{ManyConfig, OneConfig, ViewConfig};

const ROWS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("rows");
const LINKS: TableDefinition<'_, &[u8], ()> = TableDefinition::new("links");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// The roots the open source transaction touched so far.
const TOUCHED: TableDefinition<'_, &[u8], ()> = TableDefinition::new("touched");
/// The roots whose documents were given and may not be applied yet: by the offset after the
/// batch that gave them, their keys (postcard), until the sink has applied that far.
const EMITTED: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("emitted");
/// The roots given again after a restart, at the first end of a source transaction at or
/// past [`RESUME_UNTIL`].
const RESUMED: TableDefinition<'_, &[u8], ()> = TableDefinition::new("resumed");
/// The furthest offset the roots in [`RESUMED`] were given at: given again before it, a
/// document would carry a lower version than the one a store may hold.
const RESUME_UNTIL: &str = "resume_until";
/// The next log offset the state has not taken in.
const NEXT_OFFSET: &str = "next_offset";

/// The shape of view the state is of (see [`View::shape`]).
const SHAPE: TableDefinition<'_, &str, &str> = TableDefinition::new("shape");
const SHAPE_KEY: &str = "shape";

/// The store's page cache: the state lives on disk, this much of it in memory (redb's
/// default is a gigabyte).
const CACHE_BYTES: usize = 32 << 20;

/// Rows a truncate reads from the state at once.
const TRUNCATE_CHUNK: usize = 1000;

/// The joins deeper than the root's at most: `orders → lines → product`.
const MAX_DEPTH: usize = 2;

/// The state's rows and links, open once in a store transaction.
struct Store<'t> {
    rows: redb::Table<'t, &'static [u8], &'static [u8]>,
    links: redb::Table<'t, &'static [u8], ()>,
}

/// A root's document after a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The root row's primary key.
    pub key: Row,
    /// The document; `None`: the root row is gone (delete the document).
    pub body: Option<Json>,
}

/// A view's state, on disk; see the module documentation.
#[derive(Debug)]
pub struct View {
    db: Database,
    tables: Vec<Table>,
    /// The root first, then each join, a parent before its children.
    nodes: Vec<Node>,
    /// The store held the state of another shape of view, and was emptied.
    reshaped: bool,
}

#[derive(Debug)]
struct Table {
    name: TableName,
    /// Primary-key columns.
    key: Vec<String>,
}

#[derive(Debug)]
struct Node {
    /// Index in `tables`.
    table: usize,
    /// Its field in the parent's object.
    field: String,
    /// Its columns in the document; empty: all.
    columns: Vec<String>,
    parent: Option<usize>,
    link: Link,
    children: Vec<usize>,
}

#[derive(Debug)]
enum Link {
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
    /// The view `config` over a store at `path` (made if missing); `keys` gives each
    /// table's primary-key columns (as the source's catalog has them).
    pub fn open(
        path: &Path,
        config: &ViewConfig,
        keys: impl Fn(&TableName) -> Option<Vec<String>>,
    ) -> Result<View, ViewError> {
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)?;
        View::with_store(db, config, &keys)
    }

    /// Whether `config` fits the tables whose primary keys `keys` gives (each table there,
    /// each join to a one-column key, two levels at most) and whose column names `columns`
    /// gives, where it knows them (each chosen column, foreign key and order there), without
    /// a store on disk.
    pub fn check(
        config: &ViewConfig,
        keys: impl Fn(&TableName) -> Option<Vec<String>>,
        columns: impl Fn(&TableName) -> Option<Vec<String>>,
    ) -> Result<(), ViewError> {
        let db = Database::builder().create_with_backend(InMemoryBackend::new())?;
        let view = View::with_store(db, config, &keys)?;
        for (n, node) in view.nodes.iter().enumerate() {
            let table = &view.tables[node.table].name;
            let has = |table: &TableName, column: &str, key: &str| match columns(table) {
                Some(known) if !known.iter().any(|c| c == column) => Err(ViewError::Config(
                    format!("{}{key}: {table} has no column {column:?}", view.path(n)),
                )),
                _ => Ok(()),
            };
            for column in &node.columns {
                has(table, column, "columns")?;
            }
            match &node.link {
                Link::Root => {}
                Link::One { foreign_key, .. } => {
                    let parent = node.parent.expect("a join has a parent");
                    has(
                        &view.tables[view.nodes[parent].table].name,
                        foreign_key,
                        "foreign_key",
                    )?;
                }
                Link::Many {
                    foreign_key,
                    order_by,
                } => {
                    has(table, foreign_key, "foreign_key")?;
                    if let Some(column) = order_by {
                        has(table, column, "order_by")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Where node `n` is in the configuration: `many.lines.one.product.` (empty for the
    /// root).
    fn path(&self, n: usize) -> String {
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

    fn with_store(
        db: Database,
        config: &ViewConfig,
        keys: &impl Fn(&TableName) -> Option<Vec<String>>,
    ) -> Result<View, ViewError> {
        let mut view = View {
            db,
            tables: Vec::new(),
            nodes: Vec::new(),
            reshaped: false,
        };
        let root = view.table(&config.root, keys)?;
        view.nodes.push(Node {
            table: root,
            field: String::new(),
            columns: config.columns.clone(),
            parent: None,
            link: Link::Root,
            children: Vec::new(),
        });
        view.joins(0, &config.one, &config.many, 1, keys)?;
        let txn = view.db.begin_write()?;
        txn.open_table(ROWS)?;
        txn.open_table(LINKS)?;
        txn.open_table(META)?;
        txn.open_table(TOUCHED)?;
        txn.open_table(EMITTED)?;
        txn.open_table(RESUMED)?;
        // The state's entries are tagged by a table's and a join's place in the view: a view
        // whose tables, keys or joins changed reads nothing of the old state, and starts
        // anew.
        let shape = view.shape();
        let mut shapes = txn.open_table(SHAPE)?;
        let stored = shapes.get(SHAPE_KEY)?.map(|v| v.value().to_owned());
        if stored.as_deref() != Some(shape.as_str()) {
            shapes.insert(SHAPE_KEY, shape.as_str())?;
            view.reshaped = stored.is_some();
        }
        drop(shapes);
        txn.commit()?;
        if view.reshaped {
            view.clear()?;
        }
        Ok(view)
    }

    /// What the state's layout depends on: each table with its key, each join with its
    /// table, its parent and its foreign key.
    fn shape(&self) -> String {
        let tables: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{}({})", t.name, t.key.join(",")))
            .collect();
        let joins: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                let link = match &n.link {
                    Link::Root => String::new(),
                    Link::One { foreign_key, .. } => format!("one:{foreign_key}"),
                    Link::Many { foreign_key, .. } => format!("many:{foreign_key}"),
                };
                format!("{}<{:?}:{link}", n.table, n.parent)
            })
            .collect();
        format!("{} | {}", tables.join(" "), joins.join(" "))
    }

    /// Whether the store held the state of a view of another shape (other tables, keys or
    /// joins), which was emptied at open: the view is built again from the log.
    pub fn reshaped(&self) -> bool {
        self.reshaped
    }

    /// The root table and its primary-key columns.
    pub fn root(&self) -> (&TableName, &[String]) {
        let root = &self.tables[self.nodes[0].table];
        (&root.name, &root.key)
    }

    /// The next log offset the state has not taken in (0 for a new store).
    pub fn next_offset(&self) -> Result<u64, ViewError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(NEXT_OFFSET)?.map_or(0, |v| v.value()))
    }

    /// Forgets every row and offset: the state of a view that has taken nothing in.
    pub fn clear(&self) -> Result<(), ViewError> {
        let txn = self.db.begin_write()?;
        txn.open_table(ROWS)?.retain(|_, _| false)?;
        txn.open_table(LINKS)?.retain(|_, ()| false)?;
        txn.open_table(META)?.retain(|_, _| false)?;
        txn.open_table(TOUCHED)?.retain(|_, ()| false)?;
        txn.open_table(EMITTED)?.retain(|_, _| false)?;
        txn.open_table(RESUMED)?.retain(|_, ()| false)?;
        txn.commit()?;
        Ok(())
    }

    /// After a restart, with the sink's store at offset `applied`: the roots whose documents
    /// were given after it are given again, at the first end of a source transaction at or
    /// past the furthest offset they were given at (so that their version is not lower than
    /// one a store may hold). Their changes may be taken in already (the state commits before
    /// the sink applies), and a change taken in again need not touch them (a row deleted
    /// twice is found once): without this, a document the sink never applied would stay stale.
    pub fn resume(&self, applied: u64) -> Result<(), ViewError> {
        let txn = self.db.begin_write()?;
        let mut emitted = txn.open_table(EMITTED)?;
        let mut resumed = txn.open_table(RESUMED)?;
        let mut until = None;
        for entry in emitted.range(applied + 1..)? {
            let (end, keys) = entry?;
            until = Some(end.value());
            for key in decode_keys(keys.value())? {
                resumed.insert(key.as_slice(), ())?;
            }
        }
        emitted.retain(|_, _| false)?;
        drop((emitted, resumed));
        if let Some(until) = until {
            let mut meta = txn.open_table(META)?;
            let earlier = meta.get(RESUME_UNTIL)?.map_or(0, |v| v.value());
            meta.insert(RESUME_UNTIL, until.max(earlier))?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Takes in `events` and records `next_offset`, in one transaction of the store (a crash
    /// leaves it before or after). The roots they touch are kept, on disk, until a batch
    /// `ends_transaction`: that batch gives the documents of every root the source
    /// transaction touched, each once, as they are after the whole of it (none before).
    /// `applied`: the sink has applied every document given up to this offset.
    pub fn apply(
        &self,
        events: &[Event],
        next_offset: u64,
        ends_transaction: bool,
        applied: u64,
    ) -> Result<Vec<Document>, ViewError> {
        let txn = self.db.begin_write()?;
        txn.open_table(EMITTED)?
            .retain_in(..=applied, |_, _| false)?;
        let mut store = Store {
            rows: txn.open_table(ROWS)?,
            links: txn.open_table(LINKS)?,
        };
        let mut touched = BTreeSet::new();
        for event in events {
            let Some(table) = self.tables.iter().position(|t| {
                t.name.namespace() == event.source.namespace()
                    && t.name.table() == &*event.source.table
            }) else {
                continue;
            };
            if event.op == Op::Truncate {
                // A chunk at a time: each removes its rows, so the next starts where it ended.
                loop {
                    let chunk = self.first_rows(&store, table, TRUNCATE_CHUNK)?;
                    if chunk.is_empty() {
                        break;
                    }
                    for stored in chunk {
                        self.change(&mut store, table, Some(&stored), None, &mut touched)?;
                    }
                }
                continue;
            }
            let old_key = event
                .before
                .as_ref()
                .and_then(|b| self.key_of(table, b))
                .or_else(|| event.key.as_ref().map(joinable_row));
            let old = match &old_key {
                Some(key) => {
                    let key = encode(key);
                    self.row(&store, table, &key)?.map(|row| (key, row))
                }
                None => None,
            };
            let new = match (event.op, &event.after) {
                (Op::Delete, _) | (_, None) => None,
                (_, Some(after)) => {
                    // Columns the source did not send are as they were.
                    let earlier = old.as_ref().map(|(_, r)| r).or(event.before.as_ref());
                    let row = earlier.map_or_else(|| after.clone(), |e| after.fill_unchanged(e));
                    self.key_of(table, &row)
                        .or_else(|| event.key.as_ref().map(joinable_row))
                        .map(|key| (encode(&key), row))
                }
            };
            self.change(&mut store, table, old.as_ref(), new.as_ref(), &mut touched)?;
        }
        let root = &self.tables[self.nodes[0].table];
        let mut pending = txn.open_table(TOUCHED)?;
        if !ends_transaction {
            for key in &touched {
                pending.insert(key.as_slice(), ())?;
            }
            drop((pending, store));
            txn.open_table(META)?.insert(NEXT_OFFSET, next_offset)?;
            txn.commit()?;
            return Ok(Vec::new());
        }
        // The roots of the transaction's earlier batches (and those given again after a
        // restart), with this batch's: a transaction within one batch never writes them.
        if !pending.is_empty()? {
            for entry in pending.iter()? {
                touched.insert(entry?.0.value().to_vec());
            }
            pending.retain(|_, ()| false)?;
        }
        drop(pending);
        let mut resumed = txn.open_table(RESUMED)?;
        if !resumed.is_empty()? {
            let until = txn
                .open_table(META)?
                .get(RESUME_UNTIL)?
                .map_or(0, |v| v.value());
            if next_offset >= until {
                for entry in resumed.iter()? {
                    touched.insert(entry?.0.value().to_vec());
                }
                resumed.retain(|_, ()| false)?;
            }
        }
        drop(resumed);
        if !touched.is_empty() {
            txn.open_table(EMITTED)?
                .insert(next_offset, encode(&touched).as_slice())?;
        }
        let mut documents = Vec::with_capacity(touched.len());
        for key in touched {
            let body = match self.row(&store, self.nodes[0].table, &key)? {
                Some(row) => Some(Json::Object(self.object(&store, 0, &row)?)),
                None => None,
            };
            let key: Row = postcard::from_bytes(&key).map_err(|e| {
                ViewError::Store(format!("a key of {} does not decode: {e}", root.name))
            })?;
            documents.push(Document { key, body });
        }
        drop(store);
        txn.open_table(META)?.insert(NEXT_OFFSET, next_offset)?;
        txn.commit()?;
        Ok(documents)
    }

    /// Replaces row `old` of `table` with `new` (either absent), adding the roots either
    /// touches to `touched`.
    fn change(
        &self,
        store: &mut Store<'_>,
        table: usize,
        old: Option<&(Vec<u8>, Row)>,
        new: Option<&(Vec<u8>, Row)>,
        touched: &mut BTreeSet<Vec<u8>>,
    ) -> Result<(), ViewError> {
        let nodes: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].table == table)
            .collect();
        if let Some((_, row)) = old {
            for &n in &nodes {
                self.roots_of(store, n, row, touched)?;
            }
        }
        match (old, new) {
            // Written over in place.
            (Some((old_key, _)), Some((new_key, _))) if old_key == new_key => {}
            (Some((key, _)), _) => {
                store.rows.remove(row_key(table, key).as_slice())?;
            }
            _ => {}
        }
        if let Some((key, row)) = new {
            store
                .rows
                .insert(row_key(table, key).as_slice(), encode(row).as_slice())?;
        }
        for (join, foreign_key) in self.held_by(table) {
            let link = |side: Option<&(Vec<u8>, Row)>| {
                side.and_then(|(key, row)| Some(link_key(join, linked(row, foreign_key)?, key)))
            };
            let (was, is) = (link(old), link(new));
            // Most updates leave the foreign key as it was.
            if was != is {
                if let Some(was) = was {
                    store.links.remove(was.as_slice())?;
                }
                if let Some(is) = is {
                    store.links.insert(is.as_slice(), ())?;
                }
            }
        }
        if let Some((_, row)) = new {
            for &n in &nodes {
                self.roots_of(store, n, row, touched)?;
            }
        }
        Ok(())
    }

    /// The joins whose foreign key `table`'s rows hold, with that column.
    fn held_by(&self, table: usize) -> impl Iterator<Item = (usize, &str)> {
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

    /// Adds to `touched` the roots whose documents hold `row` as node `n`.
    fn roots_of(
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
    fn roots_of_key(
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
    fn object(
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
    fn holders(
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

    fn row(&self, store: &Store<'_>, table: usize, key: &[u8]) -> Result<Option<Row>, ViewError> {
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
    fn first_rows(
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

    /// `row`'s primary key, where it has every key column.
    fn key_of(&self, table: usize, row: &Row) -> Option<Row> {
        self.tables[table]
            .key
            .iter()
            .map(|c| row.get(c).map(|v| (c.as_str(), joinable(v))))
            .collect()
    }

    /// The value of a one-column primary key.
    fn single_key<'r>(&self, table: usize, row: &'r Row) -> Option<&'r Value> {
        linked(row, &self.tables[table].key[0])
    }

    /// The key row of a one-column primary key `value`.
    fn key_row(&self, table: usize, value: &Value) -> Row {
        Row(vec![(
            self.tables[table].key[0].as_str().into(),
            joinable(value),
        )])
    }

    /// The index of table `name`, added if new; its primary key from `keys`.
    fn table(
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
    fn joins(
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

    fn node(
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
}

/// A column's value where it links (not NULL, sent).
fn linked<'r>(row: &'r Row, column: &str) -> Option<&'r Value> {
    row.get(column)
        .filter(|v| !matches!(v, Value::Null | Value::Unchanged))
}

/// The root keys of an `emitted` entry.
fn decode_keys(bytes: &[u8]) -> Result<Vec<Vec<u8>>, ViewError> {
    postcard::from_bytes(bytes)
        .map_err(|e| ViewError::Store(format!("given documents' keys do not decode: {e}")))
}

fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("rows and values serialize")
}

fn table_tag(table: usize) -> u8 {
    u8::try_from(table).expect("a view joins 255 tables at most")
}

fn row_key(table: usize, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(table_tag(table));
    out.extend_from_slice(key);
    out
}

fn link_prefix(join: usize, value: &Value) -> Vec<u8> {
    let mut out = vec![table_tag(join)];
    out.extend(encode(&joinable(value)));
    out
}

/// [`joinable`] values of a key.
fn joinable_row(key: &Row) -> Row {
    Row(key.iter().map(|(c, v)| (c.into(), joinable(v))).collect())
}

/// A key or foreign-key value as the joins compare it: SQL joins an `int` column to a
/// `bigint unsigned` or a `numeric` one by value, so a whole number is one value whatever
/// its type (its encoded bytes are what the store compares).
fn joinable(value: &Value) -> Value {
    match value {
        Value::UInt(u) => i64::try_from(*u).map_or(value.clone(), Value::Int),
        Value::Decimal(d) => d.parse::<i64>().map_or(value.clone(), Value::Int),
        _ => value.clone(),
    }
}

fn link_key(join: usize, value: &Value, holder: &[u8]) -> Vec<u8> {
    let mut out = link_prefix(join, value);
    out.extend_from_slice(holder);
    out
}

/// The order of an array's elements by a column: numbers as numbers, instants and dates
/// in time, text by code point; NULLs last (as PostgreSQL orders them ascending).
fn order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
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
fn order_rows(a: Option<&Row>, b: Option<&Row>) -> Ordering {
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use siphon_core::testing::event;

    use super::*;

    /// orders with their customer (nested) and line items (ordered by `line`), each line
    /// with its product's name flattened in.
    fn shop() -> ViewConfig {
        serde_json::from_value(json!({
            "root": "public.orders",
            "columns": ["id", "status"],
            "one": {"customer": {"table": "public.customers", "foreign_key": "customer_id",
                                 "columns": ["name"]}},
            "many": {"lines": {"table": "public.line_items", "foreign_key": "order_id",
                               "order_by": "line", "columns": ["line", "qty"],
                               "one": {"product": {"table": "public.products",
                                                   "foreign_key": "product_id",
                                                   "columns": ["name"], "flatten": "product_"}}}}
        }))
        .unwrap()
    }

    fn open(dir: &Path) -> View {
        View::open(&dir.join("view.redb"), &shop(), |_| Some(vec!["id".into()])).unwrap()
    }

    fn row(columns: &[(&str, Value)]) -> Row {
        columns.iter().map(|(c, v)| (*c, v.clone())).collect()
    }

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn text(t: &str) -> Value {
        Value::Text(t.into())
    }

    fn insert(table: &str, id: i64, columns: &[(&str, Value)]) -> Event {
        let mut all = vec![("id", int(id))];
        all.extend_from_slice(columns);
        event(table, Op::Create, id, None, Some(row(&all)))
    }

    fn update(table: &str, id: i64, columns: &[(&str, Value)]) -> Event {
        let mut all = vec![("id", int(id))];
        all.extend_from_slice(columns);
        event(table, Op::Update, id, None, Some(row(&all)))
    }

    fn bodies(documents: Vec<Document>) -> BTreeMap<i64, Option<Json>> {
        documents
            .into_iter()
            .map(|d| {
                let Some(Value::Int(id)) = d.key.get("id") else {
                    panic!("{d:?}")
                };
                (*id, d.body)
            })
            .collect()
    }

    fn line(id: i64, order: i64, line: i64, product: i64) -> Event {
        insert(
            "line_items",
            id,
            &[
                ("order_id", int(order)),
                ("line", int(line)),
                ("qty", int(1)),
                ("product_id", int(product)),
            ],
        )
    }

    #[test]
    fn a_transaction_gives_each_touched_document_once_as_the_join_is_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let view = open(dir.path());
        let first = view
            .apply(
                &[
                    // Children before their parents: the order's document comes out whole.
                    line(100, 10, 2, 7),
                    line(101, 10, 1, 8),
                    insert("products", 7, &[("name", text("tea"))]),
                    insert(
                        "orders",
                        10,
                        &[("customer_id", int(1)), ("status", text("new"))],
                    ),
                    insert("customers", 1, &[("name", text("Ann"))]),
                    insert(
                        "orders",
                        11,
                        &[("customer_id", int(1)), ("status", text("new"))],
                    ),
                    insert(
                        "orders",
                        12,
                        &[("customer_id", int(2)), ("status", text("new"))],
                    ),
                ],
                7,
                true,
                0,
            )
            .unwrap();
        let docs = bodies(first);
        assert_eq!(docs.len(), 3, "{docs:#?}");
        assert_eq!(
            docs[&10],
            Some(
                json!({"id": 10, "status": "new", "customer": {"name": "Ann"}, "lines": [
                    {"line": 1, "qty": 1, "product_name": null},
                    {"line": 2, "qty": 1, "product_name": "tea"},
                ]})
            )
        );
        assert_eq!(docs[&12].as_ref().unwrap()["customer"], Json::Null);
        assert_eq!(view.next_offset().unwrap(), 7);

        // A rename touches every order of the customer, and only those.
        let renamed = bodies(
            view.apply(
                &[update("customers", 1, &[("name", text("Bo"))])],
                8,
                true,
                0,
            )
            .unwrap(),
        );
        assert_eq!(renamed.keys().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(
            renamed[&11].as_ref().unwrap()["customer"],
            json!({"name": "Bo"})
        );

        // A product touches the orders of its lines; a line moved touches both orders.
        let product = bodies(
            view.apply(
                &[insert("products", 8, &[("name", text("cup"))])],
                9,
                true,
                0,
            )
            .unwrap(),
        );
        assert_eq!(product.keys().copied().collect::<Vec<_>>(), [10]);
        let moved = event(
            "line_items",
            Op::Update,
            101,
            None,
            Some(row(&[
                ("id", int(101)),
                ("order_id", int(11)),
                ("line", int(1)),
                ("qty", int(3)),
                ("product_id", int(8)),
            ])),
        );
        let moved = bodies(view.apply(&[moved], 10, true, 0).unwrap());
        assert_eq!(moved.keys().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(
            moved[&10].as_ref().unwrap()["lines"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            moved[&11].as_ref().unwrap()["lines"],
            json!([{"line": 1, "qty": 3, "product_name": "cup"}])
        );

        // A deleted root is a document to delete; a truncate touches every root it reached.
        let deleted = bodies(
            view.apply(&[event("orders", Op::Delete, 10, None, None)], 11, true, 0)
                .unwrap(),
        );
        assert_eq!(deleted, BTreeMap::from([(10, None)]));
        let truncated = bodies(
            view.apply(
                &[event("line_items", Op::Truncate, 0, None, None)],
                12,
                true,
                0,
            )
            .unwrap(),
        );
        assert_eq!(truncated.keys().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(truncated[&11].as_ref().unwrap()["lines"], json!([]));
    }

    /// The state commits before the sink applies the documents: after a crash between the
    /// two, a change read again that no longer changes the state (a row deleted twice) must
    /// still give the document the sink missed.
    #[test]
    fn documents_the_sink_did_not_apply_are_given_again_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let removal = [event("line_items", Op::Delete, 100, None, None)];
        {
            let view = open(dir.path());
            let built = vec![
                insert("orders", 10, &[("status", text("new"))]),
                line(100, 10, 1, 7),
            ];
            assert_eq!(bodies(view.apply(&built, 2, true, 0).unwrap()).len(), 1);
            // Its document given at the batch ending at 5, the sink stops before applying it.
            let lines = bodies(view.apply(&removal, 5, true, 2).unwrap());
            assert_eq!(lines[&10].as_ref().unwrap()["lines"], json!([]));
        }
        let view = open(dir.path());
        view.resume(2).unwrap();
        // Read again in smaller batches: not before offset 5, where it was given (a store
        // would refuse a lower version), then once.
        let unrelated = |id| [insert("products", id, &[("name", text("cup"))])];
        assert_eq!(view.apply(&removal, 3, true, 2).unwrap(), Vec::new());
        let again = bodies(view.apply(&unrelated(8), 5, true, 2).unwrap());
        assert_eq!(again.keys().copied().collect::<Vec<_>>(), [10]);
        assert_eq!(again[&10].as_ref().unwrap()["lines"], json!([]));
        assert_eq!(view.apply(&unrelated(9), 6, true, 2).unwrap(), Vec::new());

        // Applied, a document is not given again after a restart.
        let view = {
            drop(view);
            open(dir.path())
        };
        view.resume(6).unwrap();
        assert_eq!(view.apply(&unrelated(10), 7, true, 6).unwrap(), Vec::new());
    }

    /// A join added before another shifts the tags of the state's entries: the state is
    /// started anew rather than read as something else; a column more is the same state.
    #[test]
    fn a_view_of_another_shape_starts_its_state_anew() {
        let dir = tempfile::tempdir().unwrap();
        let keys = |_: &TableName| Some(vec!["id".to_owned()]);
        let path = dir.path().join("view.redb");
        let view = open(dir.path());
        let events = [insert("orders", 10, &[("status", text("new"))])];
        assert_eq!(view.apply(&events, 1, true, 0).unwrap().len(), 1);
        drop(view);
        let mut wider = shop();
        wider.columns.push("total".into());
        let view = View::open(&path, &wider, keys).unwrap();
        assert!(!view.reshaped());
        assert_eq!(view.next_offset().unwrap(), 1);
        drop(view);
        let mut other = shop();
        other.one.insert(
            "account".into(),
            serde_json::from_value(
                json!({"table": "public.accounts", "foreign_key": "account_id"}),
            )
            .unwrap(),
        );
        let view = View::open(&path, &other, keys).unwrap();
        assert!(view.reshaped());
        assert_eq!(view.next_offset().unwrap(), 0);
    }

    #[test]
    fn a_truncate_of_more_rows_than_a_chunk_empties_every_document() {
        let dir = tempfile::tempdir().unwrap();
        let view = open(dir.path());
        let mut events: Vec<Event> = (1..=3)
            .map(|id| insert("orders", id, &[("status", text("new"))]))
            .collect();
        events.extend((1..=2500).map(|id| line(id, id % 3 + 1, id, 7)));
        let built = bodies(view.apply(&events, 2503, true, 0).unwrap());
        assert_eq!(
            built[&1].as_ref().unwrap()["lines"]
                .as_array()
                .unwrap()
                .len(),
            833
        );
        let truncated = bodies(
            view.apply(
                &[event("line_items", Op::Truncate, 0, None, None)],
                2504,
                true,
                0,
            )
            .unwrap(),
        );
        assert_eq!(truncated.len(), 3);
        assert!(
            truncated
                .values()
                .all(|d| d.as_ref().unwrap()["lines"] == json!([]))
        );
    }

    #[test]
    fn equal_order_columns_fall_back_to_the_primary_key_as_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let view = open(dir.path());
        // Each line's qty is its id; 128 encodes to bytes that sort before 65's.
        let line = |id: i64, line: i64| {
            insert(
                "line_items",
                id,
                &[("order_id", int(1)), ("line", int(line)), ("qty", int(id))],
            )
        };
        let events = [
            insert("orders", 1, &[("status", text("new"))]),
            line(128, 1),
            line(65, 1),
            line(3, 2),
        ];
        let documents = bodies(view.apply(&events, 4, true, 0).unwrap());
        let ids: Vec<i64> = documents[&1].as_ref().unwrap()["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["qty"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, vec![65, 128, 3]);
    }

    /// A source transaction split across batches, and across a restart between them: its
    /// documents come once, at its end, with every root it touched.
    #[test]
    fn the_state_and_an_open_transaction_outlive_the_process() {
        let dir = tempfile::tempdir().unwrap();
        {
            let view = open(dir.path());
            let first = vec![
                insert("customers", 1, &[("name", text("Ann"))]),
                insert(
                    "orders",
                    10,
                    &[("customer_id", int(1)), ("status", text("new"))],
                ),
            ];
            assert_eq!(view.apply(&first, 3, false, 0).unwrap(), Vec::new());
        }
        let view = open(dir.path());
        assert_eq!(view.next_offset().unwrap(), 3);
        let rest = vec![insert(
            "orders",
            11,
            &[("customer_id", int(1)), ("status", text("new"))],
        )];
        let docs = bodies(view.apply(&rest, 4, true, 0).unwrap());
        assert_eq!(docs.keys().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(
            docs[&10].as_ref().unwrap()["customer"],
            json!({"name": "Ann"})
        );
        // Once given, a transaction's documents are not given again.
        let later = vec![insert("products", 7, &[("name", text("tea"))])];
        assert_eq!(view.apply(&later, 5, true, 0).unwrap(), Vec::new());
    }

    #[test]
    fn joins_need_one_column_keys_and_two_levels_at_most() {
        let dir = tempfile::tempdir().unwrap();
        let composite = |name: &TableName| {
            Some(if name.table() == "customers" {
                vec!["a".into(), "b".into()]
            } else {
                vec!["id".into()]
            })
        };
        let error = View::open(&dir.path().join("a.redb"), &shop(), composite).unwrap_err();
        assert!(error.to_string().contains("one.customer"), "{error}");
        let deep: ViewConfig = serde_json::from_value(json!({
            "root": "public.a",
            "one": {"b": {"table": "public.b", "foreign_key": "b_id",
                "one": {"c": {"table": "public.c", "foreign_key": "c_id",
                    "one": {"d": {"table": "public.d", "foreign_key": "d_id"}}}}}}
        }))
        .unwrap();
        let error = View::open(&dir.path().join("b.redb"), &deep, |_| {
            Some(vec!["id".into()])
        })
        .unwrap_err();
        assert!(error.to_string().contains("2 levels"), "{error}");
        let error = View::open(&dir.path().join("c.redb"), &shop(), |_| None).unwrap_err();
        assert!(error.to_string().contains("no primary key"), "{error}");
    }
}
