//! The stream's decoding without a server, for the fuzz targets (`fuzz/`, `pgoutput`): not an
//! API. The decoder ([`pgoutput`](crate::pgoutput)) and the value decoders behind it are
//! private to this crate; this drives them as the stream does — a Relation message makes a
//! table's shape (built-in types only: the catalog is not at hand, so other types travel as
//! text, as a type the catalog does not know does), a change becomes events — so that a
//! fuzzer reaches every decoder through the bytes a server sends.

use std::collections::HashMap;

use bytes::Bytes;
use siphon_core::name::Name;
use siphon_core::schema::{Column, ColumnKind, SchemaId, SchemaStore, TableSchema};
use siphon_core::{Error, Event, Result};

use crate::catalog::builtin_kind;
use crate::events::{EventFactory, Shape};
use crate::pgoutput::{self, Message, Relation};

use super::Transaction;
use crate::values::PgType;

/// One replication stream's state: the tables' shapes and the open transaction.
#[derive(Debug)]
pub struct Stream {
    factory: EventFactory,
    shapes: HashMap<u32, Shape>,
    tx: Option<Transaction>,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            factory: EventFactory {
                name: "fuzz".into(),
                db: "fuzz".into(),
            },
            shapes: HashMap::new(),
            tx: None,
        }
    }
}

impl Stream {
    /// One pgoutput message at `wal_start`: the events it makes, or why it cannot be read.
    pub fn message(
        &mut self,
        schemas: &dyn SchemaStore,
        wal_start: u64,
        data: Bytes,
    ) -> Result<Vec<Event>> {
        let message = pgoutput::decode(data).map_err(|e| Error::permanent(e.to_string()))?;
        match message {
            Message::Begin {
                final_lsn,
                commit_time_micros,
                xid,
            } => {
                self.tx = Some(Transaction::begun(final_lsn, xid, commit_time_micros));
            }
            Message::Commit { .. } => self.tx = None,
            Message::Relation(r) => {
                let shape = shape(schemas, &self.factory, &r)?;
                self.shapes.insert(r.id, shape);
            }
            change @ (Message::Insert { .. }
            | Message::Update { .. }
            | Message::Delete { .. }
            | Message::Truncate { .. }) => return self.change(wal_start, change),
            Message::Origin { .. } | Message::Type { .. } | Message::Logical { .. } => {}
        }
        Ok(Vec::new())
    }

    /// As the stream's `change`.
    fn change(&mut self, wal_start: u64, change: Message) -> Result<Vec<Event>> {
        let t = self
            .tx
            .as_mut()
            .ok_or_else(|| Error::permanent("a change arrived outside a transaction"))?;
        let mut events = Vec::new();
        for change in super::split(&self.shapes, change)? {
            let shape = &self.shapes[&change.0];
            let (_, event) = t.event(&self.factory, shape, wal_start, change);
            events.push(event);
        }
        Ok(events)
    }
}

/// A table's shape from its Relation message alone: built-in types as the catalog gives them,
/// others as text; the key the replica identity's columns.
fn shape(schemas: &dyn SchemaStore, factory: &EventFactory, r: &Relation) -> Result<Shape> {
    let columns: Vec<Column> = r
        .columns
        .iter()
        .map(|c| Column {
            name: c.name.as_str().into(),
            type_name: format!("oid {}", c.type_oid),
            type_id: c.type_oid,
            type_modifier: c.type_modifier,
            kind: builtin_kind(c.type_oid, c.type_modifier).unwrap_or(ColumnKind::Other),
            nullable: !c.key,
            generated: false,
        })
        .collect();
    let key = (0..columns.len()).filter(|&i| r.columns[i].key).collect();
    let table_schema = schemas.register(&TableSchema {
        id: SchemaId::UNREGISTERED,
        connector: "postgresql".into(),
        server: factory.name.clone(),
        database: factory.db.clone(),
        schema: Some(r.namespace.as_str().into()),
        table: r.name.as_str().into(),
        columns,
        key,
    })?;
    let decoded: Vec<(Name, PgType)> = r
        .columns
        .iter()
        .zip(&table_schema.columns)
        .map(|(c, described)| {
            let ty = PgType::builtin(c.type_oid)
                .unwrap_or_else(|| PgType::Other(format!("oid {}", c.type_oid)));
            (described.name.clone(), ty)
        })
        .collect();
    Ok(Shape {
        schema: table_schema
            .schema
            .clone()
            .unwrap_or_else(|| r.namespace.as_str().into()),
        table: table_schema.table.clone(),
        columns: decoded,
        key: table_schema.key.clone(),
        table_schema,
    })
}
