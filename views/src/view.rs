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
//! documents is built from the state. The plan of tables and joins is in [`plan`], the
//! store's layout in [`store`], the walk to roots and the building of documents in
//! [`documents`].

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

mod documents;
mod plan;
mod store;
#[cfg(test)]
mod tests;

use documents::linked;
use plan::{Link, Node, Table};
use store::*;

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
}
