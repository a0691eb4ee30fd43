//! The state's store (redb): its tables, and how rows, links and keys are laid out in it.
//! Keys are postcard bytes, which no other key's bytes begin with, so a prefix scan finds
//! exactly one value's links.

use super::*;

pub(super) const ROWS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("rows");
pub(super) const LINKS: TableDefinition<'_, &[u8], ()> = TableDefinition::new("links");
pub(super) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// The roots the open source transaction touched so far.
pub(super) const TOUCHED: TableDefinition<'_, &[u8], ()> = TableDefinition::new("touched");
/// The roots whose documents were given and may not be applied yet: by the offset after the
/// batch that gave them, their keys (postcard), until the sink has applied that far.
pub(super) const EMITTED: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("emitted");
/// The roots given again after a restart, at the first end of a source transaction at or
/// past [`RESUME_UNTIL`].
pub(super) const RESUMED: TableDefinition<'_, &[u8], ()> = TableDefinition::new("resumed");
/// The furthest offset the roots in [`RESUMED`] were given at: given again before it, a
/// document would carry a lower version than the one a store may hold.
pub(super) const RESUME_UNTIL: &str = "resume_until";
/// The next log offset the state has not taken in.
pub(super) const NEXT_OFFSET: &str = "next_offset";

/// The shape of view the state is of (see [`View::shape`]).
pub(super) const SHAPE: TableDefinition<'_, &str, &str> = TableDefinition::new("shape");
pub(super) const SHAPE_KEY: &str = "shape";

/// The store's page cache: the state lives on disk, this much of it in memory (redb's
/// default is a gigabyte).
pub(super) const CACHE_BYTES: usize = 32 << 20;

/// Rows a truncate reads from the state at once.
pub(super) const TRUNCATE_CHUNK: usize = 1000;

/// The state's rows and links, open once in a store transaction.
pub(super) struct Store<'t> {
    pub(super) rows: redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(super) links: redb::Table<'t, &'static [u8], ()>,
}

/// The root keys of an `emitted` entry.
pub(super) fn decode_keys(bytes: &[u8]) -> Result<Vec<Vec<u8>>, ViewError> {
    postcard::from_bytes(bytes)
        .map_err(|e| ViewError::Store(format!("given documents' keys do not decode: {e}")))
}

pub(super) fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("rows and values serialize")
}

pub(super) fn table_tag(table: usize) -> u8 {
    u8::try_from(table).expect("a view joins 255 tables at most")
}

pub(super) fn row_key(table: usize, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(table_tag(table));
    out.extend_from_slice(key);
    out
}

pub(super) fn link_prefix(join: usize, value: &Value) -> Vec<u8> {
    let mut out = vec![table_tag(join)];
    out.extend(encode(&joinable(value)));
    out
}

/// [`joinable`] values of a key.
pub(super) fn joinable_row(key: &Row) -> Row {
    Row(key.iter().map(|(c, v)| (c.into(), joinable(v))).collect())
}

/// A key or foreign-key value as the joins compare it: SQL joins an `int` column to a
/// `bigint unsigned` or a `numeric` one by value, so a whole number is one value whatever
/// its type (its encoded bytes are what the store compares).
pub(super) fn joinable(value: &Value) -> Value {
    match value {
        Value::UInt(u) => i64::try_from(*u).map_or(value.clone(), Value::Int),
        Value::Decimal(d) => d.parse::<i64>().map_or(value.clone(), Value::Int),
        _ => value.clone(),
    }
}

pub(super) fn link_key(join: usize, value: &Value, holder: &[u8]) -> Vec<u8> {
    let mut out = link_prefix(join, value);
    out.extend_from_slice(holder);
    out
}
