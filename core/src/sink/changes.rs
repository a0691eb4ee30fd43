//! A batch reduced to its net effect per key, for stores that keep current state (caches,
//! search indexes, mirror tables).
//!
//! Within one batch only the last change of a key matters, except that a column the source
//! left [`Value::Unchanged`] takes its value from an earlier upsert of the same key in the
//! batch — or, for the row an update that changed its key created, of the old key. What is
//! still unchanged then comes from the stored row [`Change::unchanged_from`] names, which a
//! sink reads before it applies the batch (the old key's delete is in the same batch). The
//! reduced changes keep log order, so a sink may apply them one after another; a truncate
//! drops the changes of its table before it.

use std::borrow::Cow;
use std::collections::HashMap;

use super::SinkRecord;
use crate::event::{Event, KeyChange, Op, Row, SourceInfo, Value};

/// The net effect of a batch on one key, or a truncate.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<'a> {
    /// The key now holds `row` (columns still [`Value::Unchanged`] take the value of the
    /// stored row [`Change::unchanged_from`] names).
    Upsert {
        /// Offset of the last record of this key in the batch: the row's version.
        offset: u64,
        /// That record's event (for its source, table and key).
        event: &'a Event,
        /// The row, with unchanged columns filled from earlier in the batch where possible.
        row: Cow<'a, Row>,
        /// While `row` has unchanged columns: the key of the stored row holding their values.
        origin: Option<&'a Row>,
    },
    /// The key was deleted.
    Delete {
        /// Offset of the delete.
        offset: u64,
        /// The delete event.
        event: &'a Event,
    },
    /// Every row of the event's table was removed.
    Truncate {
        /// Offset of the truncate.
        offset: u64,
        /// The truncate event.
        event: &'a Event,
    },
}

impl<'a> Change<'a> {
    /// The log offset of the change.
    pub fn offset(&self) -> u64 {
        match self {
            Change::Upsert { offset, .. }
            | Change::Delete { offset, .. }
            | Change::Truncate { offset, .. } => *offset,
        }
    }

    /// The store refused this change for good: an error naming its offset and table.
    pub fn rejected(&self, reason: impl Into<String>) -> crate::Error {
        crate::Error::Rejected {
            offset: self.offset(),
            table: self.event().source.table_name(),
            reason: reason.into(),
        }
    }

    /// For an upsert whose row still has [`Value::Unchanged`] columns: the key of the stored
    /// row that holds their values — its own key, or, for a row whose key an update changed
    /// (maybe more than once in the batch), the key it had before the batch. A sink reads
    /// that row before applying the batch, takes those columns from it, and writes nothing
    /// for this change when the row is not there: a store may lack a row, never hold part of
    /// one.
    pub fn unchanged_from(&self) -> Option<&'a Row> {
        match self {
            Change::Upsert { origin, .. } => *origin,
            _ => None,
        }
    }

    /// The event the change comes from.
    pub fn event(&self) -> &'a Event {
        match self {
            Change::Upsert { event, .. }
            | Change::Delete { event, .. }
            | Change::Truncate { event, .. } => event,
        }
    }
}

/// Reduces `records` (in log order) to one change per key, in log order of each key's last
/// change. Events without a key (keyless tables) are kept as they are.
pub fn net_changes(records: &[SinkRecord]) -> Vec<Change<'_>> {
    let mut out: Vec<Option<Change<'_>>> = Vec::with_capacity(records.len());
    let mut latest: HashMap<Vec<u8>, usize> = HashMap::with_capacity(records.len());
    // The last row each key held in the batch, even once deleted (a row moved to a new key
    // takes its unchanged columns from it), with where its own unchanged columns come from.
    let mut last_rows: HashMap<Vec<u8>, (Cow<'_, Row>, Option<&Row>)> = HashMap::new();
    for r in records {
        let event = &r.event;
        if event.op == Op::Truncate {
            let of_table = |s: &SourceInfo| {
                s.table == event.source.table && s.namespace() == event.source.namespace()
            };
            for slot in &mut out {
                if slot.as_ref().is_some_and(|c| of_table(&c.event().source)) {
                    *slot = None;
                }
            }
            latest.retain(|_, i| out[*i].is_some());
            let prefix = event.source.log_key_prefix();
            last_rows.retain(|key, _| !key.starts_with(&prefix));
            out.push(Some(Change::Truncate {
                offset: r.offset,
                event,
            }));
            continue;
        }
        let mut change = match event.row() {
            Some(row) => Change::Upsert {
                offset: r.offset,
                event,
                row: Cow::Borrowed(row),
                origin: None,
            },
            None => Change::Delete {
                offset: r.offset,
                event,
            },
        };
        if event.key.is_none() {
            out.push(Some(change));
            continue;
        }
        let key = event.log_key();
        if let Change::Upsert { row, origin, .. } = &mut change
            && has_unchanged(row)
        {
            // The row it continues: the old key's for a key change, else its own earlier in
            // the batch (not from before a delete of the key).
            let (base_key, earlier) = match &event.key_change {
                Some(KeyChange::From(old_key)) => {
                    (Some(old_key), last_rows.get(&event.log_key_of(old_key)))
                }
                _ => (
                    event.key.as_ref(),
                    latest
                        .get(&key)
                        .filter(|&&i| matches!(out[i], Some(Change::Upsert { .. })))
                        .and_then(|_| last_rows.get(&key)),
                ),
            };
            *origin = match earlier {
                Some((earlier, earlier_origin)) => {
                    *row = Cow::Owned(row.fill_unchanged(earlier));
                    // What the earlier row left unchanged comes from where its did.
                    earlier_origin.or(base_key).filter(|_| has_unchanged(row))
                }
                None => base_key,
            };
        }
        if let Change::Upsert { row, origin, .. } = &change {
            last_rows.insert(key.clone(), (row.clone(), *origin));
        }
        if let Some(earlier) = latest.get(&key).copied() {
            out[earlier] = None;
        }
        latest.insert(key, out.len());
        out.push(Some(change));
    }
    out.into_iter().flatten().collect()
}

fn has_unchanged(row: &Row) -> bool {
    row.iter().any(|(_, v)| *v == Value::Unchanged)
}

/// Groups items by the source table of each (`namespace`, `table`), keeping their order
/// within a table and the tables in order of first appearance.
pub fn by_table<'i, T>(
    items: impl IntoIterator<Item = &'i T>,
    source: impl Fn(&T) -> &SourceInfo,
) -> Vec<Vec<&'i T>>
where
    T: 'i,
{
    let mut groups: Vec<Vec<&T>> = Vec::new();
    for item in items {
        let s = source(item);
        match groups.iter_mut().find(|g| {
            let first = source(g[0]);
            first.table == s.table && first.namespace() == s.namespace()
        }) {
            Some(group) => group.push(item),
            None => groups.push(vec![item]),
        }
    }
    groups
}

/// The row a history table records for an event: the new row, or for a delete the old one
/// (or, without a before-image, its key); nothing for a truncate.
pub fn history_row(event: &Event) -> Option<&Row> {
    match event.op {
        Op::Delete => event.before.as_ref().or(event.key.as_ref()),
        _ => event.row(),
    }
}

/// The columns a table write of `row` sets: every column the source sent, but not one left
/// [`Value::Unchanged`] (the store keeps its value), and not a NULL for a column the store
/// does not have (a column is created with its first non-null value).
pub fn written_columns(row: &Row, store_has: impl Fn(&str) -> bool) -> Vec<&str> {
    row.iter()
        .filter(|(c, v)| match v {
            Value::Unchanged => false,
            Value::Null => store_has(c),
            _ => true,
        })
        .map(|(c, _)| c)
        .collect()
}

/// Rows that write the same columns, for one statement each.
pub type ColumnGroup<'r, T> = (Vec<&'r str>, Vec<T>);

/// Groups items by the columns their row writes ([`written_columns`]; no row: none), in
/// order of first appearance, so that each group is one statement.
pub fn by_written_columns<'r, T>(
    items: impl IntoIterator<Item = (Option<&'r Row>, T)>,
    store_has: impl Fn(&str) -> bool,
) -> Vec<ColumnGroup<'r, T>> {
    let mut groups: Vec<ColumnGroup<'r, T>> = Vec::new();
    for (row, item) in items {
        let names = row
            .map(|r| written_columns(r, &store_has))
            .unwrap_or_default();
        match groups.iter_mut().find(|(n, _)| *n == names) {
            Some((_, list)) => list.push(item),
            None => groups.push((names, vec![item])),
        }
    }
    groups
}

/// Upserts that take the columns they leave unchanged from a stored row, for one statement:
/// the columns each writes, the columns it takes, and per row the row, the key of the
/// stored row to take them from ([`Change::unchanged_from`]) and the offset.
#[derive(Debug)]
pub struct FromStored<'r> {
    /// Columns written from the rows.
    pub written: Vec<&'r str>,
    /// Columns taken from the stored rows.
    pub taken: Vec<&'r str>,
    /// Row, key of the stored row, offset.
    pub rows: Vec<(&'r Row, &'r Row, u64)>,
}

/// Groups the upserts among `changes` that take unchanged columns from a stored row
/// ([`Change::unchanged_from`]) by the columns they write and take, in order of first
/// appearance. A column the store does not have (never yet non-null) is neither written
/// as NULL nor taken.
pub fn from_stored<'r>(
    changes: impl IntoIterator<Item = &'r Change<'r>>,
    store_has: impl Fn(&str) -> bool,
) -> Vec<FromStored<'r>> {
    let mut groups: Vec<FromStored<'r>> = Vec::new();
    for change in changes {
        let (Change::Upsert { row, offset, .. }, Some(from)) = (change, change.unchanged_from())
        else {
            continue;
        };
        let written = written_columns(row, &store_has);
        let taken: Vec<&str> = row
            .iter()
            .filter(|(c, v)| **v == Value::Unchanged && store_has(c))
            .map(|(c, _)| c)
            .collect();
        let item = (&**row, from, *offset);
        match groups
            .iter_mut()
            .find(|g| g.written == written && g.taken == taken)
        {
            Some(group) => group.rows.push(item),
            None => groups.push(FromStored {
                written,
                taken,
                rows: vec![item],
            }),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TABLE, event, record, row};

    fn offsets(changes: &[Change<'_>]) -> Vec<(u64, &'static str)> {
        changes
            .iter()
            .map(|c| {
                let kind = match c {
                    Change::Upsert { .. } => "upsert",
                    Change::Delete { .. } => "delete",
                    Change::Truncate { .. } => "truncate",
                };
                (c.offset(), kind)
            })
            .collect()
    }

    #[test]
    fn the_last_change_of_each_key_wins_in_log_order() {
        let records = vec![
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
            ),
            record(
                1,
                event(TABLE, Op::Create, 2, None, Some(row(2, "b", Value::Null))),
            ),
            record(
                2,
                event(TABLE, Op::Update, 1, None, Some(row(1, "c", Value::Null))),
            ),
            record(3, event(TABLE, Op::Delete, 2, None, None)),
            record(
                4,
                event("other", Op::Create, 2, None, Some(row(2, "d", Value::Null))),
            ),
        ];
        assert_eq!(
            offsets(&net_changes(&records)),
            [(2, "upsert"), (3, "delete"), (4, "upsert")]
        );
    }

    #[test]
    fn a_truncate_drops_earlier_changes_of_its_table_only() {
        let records = vec![
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "a", Value::Null))),
            ),
            record(
                1,
                event("other", Op::Create, 1, None, Some(row(1, "b", Value::Null))),
            ),
            record(2, event(TABLE, Op::Truncate, 0, None, None)),
            record(
                3,
                event(TABLE, Op::Create, 1, None, Some(row(1, "c", Value::Null))),
            ),
        ];
        assert_eq!(
            offsets(&net_changes(&records)),
            [(1, "upsert"), (2, "truncate"), (3, "upsert")]
        );
    }

    #[test]
    fn an_unchanged_column_takes_its_value_from_earlier_in_the_batch() {
        let records = vec![
            record(
                0,
                event(
                    TABLE,
                    Op::Create,
                    1,
                    None,
                    Some(row(1, "a", Value::Text("big".into()))),
                ),
            ),
            record(
                1,
                event(
                    TABLE,
                    Op::Update,
                    1,
                    None,
                    Some(row(1, "b", Value::Unchanged)),
                ),
            ),
            record(
                2,
                event(
                    TABLE,
                    Op::Update,
                    2,
                    None,
                    Some(row(2, "c", Value::Unchanged)),
                ),
            ),
        ];
        let changes = net_changes(&records);
        let Change::Upsert { row: first, .. } = &changes[0] else {
            panic!("{changes:?}")
        };
        assert_eq!(first.get("note"), Some(&Value::Text("big".into())));
        assert_eq!(first.get("name"), Some(&Value::Text("b".into())));
        let Change::Upsert { row: second, .. } = &changes[1] else {
            panic!("{changes:?}")
        };
        assert_eq!(
            second.get("note"),
            Some(&Value::Unchanged),
            "nothing to fill it from"
        );
    }

    #[test]
    fn a_row_whose_key_changed_takes_unchanged_columns_from_the_old_key() {
        let mut delete = event(TABLE, Op::Delete, 1, Some(row(1, "a", Value::Null)), None);
        delete.key_change = Some(KeyChange::To(row(2, "", Value::Null)));
        let mut create = event(
            TABLE,
            Op::Create,
            2,
            None,
            Some(row(2, "moved", Value::Unchanged)),
        );
        create.key_change = Some(KeyChange::From(Row(vec![("id".into(), Value::Int(1))])));
        // The old key's whole row is in the batch: the moved row is whole.
        let with_old = vec![
            record(
                0,
                event(
                    TABLE,
                    Op::Create,
                    1,
                    None,
                    Some(row(1, "a", Value::Text("big".into()))),
                ),
            ),
            record(1, delete.clone()),
            record(2, create.clone()),
        ];
        let changes = net_changes(&with_old);
        assert_eq!(offsets(&changes), [(1, "delete"), (2, "upsert")]);
        let Change::Upsert { row: moved, .. } = &changes[1] else {
            panic!("{changes:?}")
        };
        assert_eq!(moved.get("note"), Some(&Value::Text("big".into())));
        assert_eq!(changes[1].unchanged_from(), None);
        // Not in the batch: the sink reads it from the old key's stored row.
        let key = |id| Row(vec![("id".into(), Value::Int(id))]);
        let alone = vec![record(1, delete.clone()), record(2, create.clone())];
        let changes = net_changes(&alone);
        assert_eq!(changes[1].unchanged_from(), Some(&key(1)));
        // Moved, then updated again (still leaving the column unchanged): still from key 1.
        let update = event(
            TABLE,
            Op::Update,
            2,
            None,
            Some(row(2, "again", Value::Unchanged)),
        );
        let again = vec![record(1, delete), record(2, create), record(3, update)];
        let changes = net_changes(&again);
        assert_eq!(offsets(&changes), [(1, "delete"), (3, "upsert")]);
        assert_eq!(changes[1].unchanged_from(), Some(&key(1)));
        // Moved twice (1 to 2 to 3): from key 1, which the store holds.
        let mut second_delete = event(TABLE, Op::Delete, 2, Some(key(2)), None);
        second_delete.key_change = Some(KeyChange::To(key(3)));
        let mut second_create = event(
            TABLE,
            Op::Create,
            3,
            None,
            Some(row(3, "moved twice", Value::Unchanged)),
        );
        second_create.key_change = Some(KeyChange::From(key(2)));
        let twice = vec![
            record(1, again[0].event.clone()),
            record(2, again[1].event.clone()),
            record(3, second_delete),
            record(4, second_create),
        ];
        let changes = net_changes(&twice);
        let last = changes.last().unwrap();
        assert_eq!(last.offset(), 4);
        assert_eq!(last.unchanged_from(), Some(&key(1)));
    }
}
