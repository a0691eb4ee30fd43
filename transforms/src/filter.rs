//! `filter` (on the event) and `filter_rows` (on the row state a store keeps).

use siphon_core::event::{Event, Op, Row, Value};
use siphon_core::name::TablePattern;
use siphon_core::sink::stage::Stage;

use crate::expression::{self, Expression};
use crate::native::Facts;

/// Keeps the events its expression holds for.
#[derive(Debug)]
pub struct Filter {
    label: String,
    when: Expression,
}

impl Filter {
    /// The names a filter's expression may read.
    pub const VARIABLES: &[&str] = &["op", "before", "after", "key", "table", "source"];

    pub(crate) fn new(label: String, when: Expression) -> Filter {
        Filter { label, when }
    }
}

impl Stage for Filter {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        let rows = [
            ("before", event.before.as_ref()),
            ("after", event.after.as_ref()),
            ("key", event.key.as_ref()),
        ];
        let facts = Facts {
            rows: &rows,
            op: Some(event.op.code()),
        };
        self.when
            .holds_for(&facts, |v| {
                expression::event_variable(event, v, self.when.columns(v))
            })
            .map_err(|e| format!("{}: {e}", self.label))
    }
}

/// Keeps the rows its expression holds for: a store of current rows then holds exactly the
/// rows that match, whatever their history.
#[derive(Debug)]
pub struct FilterRows {
    label: String,
    when: Expression,
    tables: Vec<TablePattern>,
}

impl FilterRows {
    /// The names a row filter's expression may read.
    pub const VARIABLES: &[&str] = &["row", "table", "source"];

    pub(crate) fn new(label: String, when: Expression, tables: Vec<TablePattern>) -> FilterRows {
        FilterRows {
            label,
            when,
            tables,
        }
    }

    /// Whether `row` matches.
    fn holds(&self, event: &Event, row: &Row) -> Result<bool, String> {
        let facts = Facts {
            rows: &[("row", Some(row))],
            op: None,
        };
        self.when
            .holds_for(&facts, |v| match v {
                "row" => expression::row(row, self.when.columns("row")),
                other => expression::source_variable(event, other),
            })
            .map_err(|e| format!("{}: {e}", self.label))
    }

    /// Whether the new row matches (its columns the source did not send taken from the old
    /// row, where there is one); `None` for an event without one.
    fn after_matches(&self, event: &Event) -> Result<Option<bool>, String> {
        let Some(after) = &event.after else {
            return Ok(None);
        };
        match &event.before {
            Some(before) if after.iter().any(|(_, v)| matches!(v, Value::Unchanged)) => {
                self.holds(event, &after.fill_unchanged(before)).map(Some)
            }
            _ => self.holds(event, after).map(Some),
        }
    }
}

impl Stage for FilterRows {
    fn apply(&self, event: &mut Event) -> Result<bool, String> {
        if !crate::applies_to(&self.tables, event) {
            return Ok(true);
        }
        Ok(match event.op {
            Op::Create | Op::Read => self.after_matches(event)? != Some(false),
            Op::Update => {
                if self.after_matches(event)? == Some(false) {
                    // The row does not match (any more, or ever: an old row cannot tell, since
                    // PostgreSQL sends none, or its key with the rest unsent, under the default
                    // replica identity): the store must not hold it. Deleting a row a store
                    // never held changes nothing.
                    event.op = Op::Delete;
                    if event.before.is_none() {
                        event.before = event.after.take();
                    } else {
                        event.after = None;
                    }
                }
                true
            }
            // For the same reason, every delete passes.
            Op::Delete | Op::Truncate => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::testing::{event, row};

    use super::*;

    fn paid(status: &str) -> Row {
        row(1, "a", Value::Text(status.into()))
    }

    fn rows_filter() -> FilterRows {
        let when = Expression::compile("row.note == 'paid'", FilterRows::VARIABLES).unwrap();
        FilterRows::new("transforms[0] (filter_rows)".into(), when, Vec::new())
    }

    #[test]
    fn a_row_that_stops_matching_is_deleted_and_one_that_starts_is_upserted() {
        let f = rows_filter();
        let mut e = event("t", Op::Update, 1, Some(paid("paid")), Some(paid("open")));
        assert_eq!(f.apply(&mut e), Ok(true));
        assert_eq!(e.op, Op::Delete);
        assert_eq!(e.after, None);
        assert_eq!(e.before, Some(paid("paid")));
        let mut e = event("t", Op::Update, 1, Some(paid("open")), Some(paid("paid")));
        assert_eq!(f.apply(&mut e), Ok(true));
        assert_eq!(e.op, Op::Update);
        // Whether or not it matched before, a row that does not match is deleted.
        let mut e = event("t", Op::Update, 1, Some(paid("open")), Some(paid("open")));
        assert_eq!(f.apply(&mut e), Ok(true));
        assert_eq!(e.op, Op::Delete);
        // No old row: the update of a row that does not match may remove one the store has.
        let mut e = event("t", Op::Update, 1, None, Some(paid("open")));
        assert_eq!(f.apply(&mut e), Ok(true));
        assert_eq!(
            (e.op, e.before, e.after),
            (Op::Delete, Some(paid("open")), None)
        );
        let mut e = event("t", Op::Create, 1, None, Some(paid("open")));
        assert_eq!(f.apply(&mut e), Ok(false));
        let mut e = event("t", Op::Delete, 1, Some(paid("open")), None);
        assert_eq!(f.apply(&mut e), Ok(true));
    }

    #[test]
    fn unchanged_columns_are_read_from_the_old_row() {
        let f = rows_filter();
        // An update that left `note` unchanged (TOAST): read from the old row.
        let mut unchanged = paid("paid");
        unchanged.0[2].1 = Value::Unchanged;
        let mut e = event("t", Op::Update, 1, Some(paid("paid")), Some(unchanged));
        assert_eq!(f.apply(&mut e), Ok(true));
        assert_eq!(e.op, Op::Update);
    }

    #[test]
    fn a_failing_expression_names_the_transform() {
        let when = Expression::compile("row.missing > 1", FilterRows::VARIABLES).unwrap();
        let f = FilterRows::new("transforms[2] (filter_rows)".into(), when, Vec::new());
        let mut e = event("t", Op::Create, 1, None, Some(paid("paid")));
        let error = f.apply(&mut e).unwrap_err();
        assert!(
            error.starts_with("transforms[2] (filter_rows): "),
            "{error}"
        );
    }

    #[test]
    fn an_event_filter_sees_the_operation_and_both_rows() {
        let when = Expression::compile(
            "op == 'u' && before.note != after.note && table == 'public.t'",
            Filter::VARIABLES,
        )
        .unwrap();
        let f = Filter::new("transforms[0] (filter)".into(), when);
        let mut changed = event("t", Op::Update, 1, Some(paid("a")), Some(paid("b")));
        assert_eq!(f.apply(&mut changed), Ok(true));
        let mut same = event("t", Op::Update, 1, Some(paid("a")), Some(paid("a")));
        assert_eq!(f.apply(&mut same), Ok(false));
    }
}
