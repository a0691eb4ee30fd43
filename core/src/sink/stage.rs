//! The stages between the log and a sink: each decoded event passes through a sink's chain
//! of stages in order, and each passes it on, changed or not, or drops it. A sink's `tables`
//! and `exclude_columns` are its first stages ([`super::routing`]); its transforms (the
//! `siphon-transform` crate) are the ones after. The log keeps what the source saw: stages
//! are views of it, applied again on every replay.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use crate::event::Event;
use crate::schema::{SchemaId, TableSchema};
use crate::source::TableInfo;

/// One step between the log and a sink.
///
/// A stage sees the events of the log in order and may change any of them (its rows, its
/// schema, its table); it must keep what the runtime relies on: the event's key (a sink
/// addresses the row by it; a stage that renames a key column renames it in the key too), and
/// the log's order (it sees one event at a time and returns it in place). A dropped event
/// still moves the sink's cursor past it.
pub trait Stage: Send + Sync + Debug {
    /// What it makes of `event`: `Ok(true)` to pass it on (as it is now), `Ok(false)` to drop
    /// it, or why this event cannot pass (the runtime writes the event to the dead-letter file
    /// or stops the sink, as its `on_error` says).
    fn apply(&self, event: &mut Event) -> Result<bool, String>;

    /// The table as the sink sees it after this stage (renamed, its key columns renamed), or
    /// `None` when the stage drops every event of it: what the sink prepares and resets.
    fn table(&self, table: TableInfo) -> Option<TableInfo> {
        Some(table)
    }
}

/// A sink's stages, in order.
#[derive(Debug, Clone, Default)]
pub struct Stages(Vec<Arc<dyn Stage>>);

impl Stages {
    /// These stages, in this order.
    pub fn new(stages: Vec<Arc<dyn Stage>>) -> Self {
        Stages(stages)
    }

    /// These stages followed by `more`.
    pub fn then(mut self, more: impl IntoIterator<Item = Arc<dyn Stage>>) -> Self {
        self.0.extend(more);
        self
    }

    /// Passes `event` through each stage in turn: `Ok(false)` once one drops it, the first
    /// stage's error where one fails.
    pub fn apply(&self, event: &mut Event) -> Result<bool, String> {
        for stage in &self.0 {
            if !stage.apply(event)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The tables the sink sees of `tables`, as the stages name them.
    pub fn tables(&self, tables: Vec<TableInfo>) -> Vec<TableInfo> {
        tables
            .into_iter()
            .filter_map(|table| {
                self.0
                    .iter()
                    .try_fold(table, |table, stage| stage.table(table))
            })
            .collect()
    }
}

/// The schemas a stage rewrites (columns removed, renamed or retyped), made once per schema
/// version, since every event of a table carries the same one.
#[derive(Debug, Default)]
pub struct SchemaRewrites(Mutex<Rewritten>);

/// Each version's rewrite, and the last one asked for (a run of one table's events asks
/// for the same one each time: no hashing then).
#[derive(Debug, Default)]
struct Rewritten {
    last: Option<(SchemaId, Arc<TableSchema>)>,
    by_version: HashMap<SchemaId, Arc<TableSchema>>,
}

impl SchemaRewrites {
    /// `schema` as `rewrite` makes it, made the first time this version is seen.
    pub fn get(
        &self,
        schema: &TableSchema,
        rewrite: impl FnOnce(&TableSchema) -> TableSchema,
    ) -> Arc<TableSchema> {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((id, rewritten)) = &cache.last
            && *id == schema.id
        {
            return rewritten.clone();
        }
        let rewritten = cache
            .by_version
            .entry(schema.id)
            .or_insert_with(|| Arc::new(rewrite(schema)))
            .clone();
        cache.last = Some((schema.id, rewritten.clone()));
        rewritten
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::event::{Op, Value};
    use crate::testing::{event, row};

    /// Renames the `name` column, and counts what it saw.
    #[derive(Debug, Default)]
    struct Rename(AtomicUsize);

    impl Stage for Rename {
        fn apply(&self, event: &mut Event) -> Result<bool, String> {
            self.0.fetch_add(1, Ordering::Relaxed);
            for row in [&mut event.before, &mut event.after].into_iter().flatten() {
                for (column, _) in &mut row.0 {
                    if &**column == "name" {
                        *column = "title".into();
                    }
                }
            }
            Ok(true)
        }
    }

    /// Drops odd keys.
    #[derive(Debug)]
    struct EvenOnly;

    impl Stage for EvenOnly {
        fn apply(&self, event: &mut Event) -> Result<bool, String> {
            Ok(event.key.as_ref().and_then(|k| k.get("id")) == Some(&Value::Int(2)))
        }
    }

    #[test]
    fn events_pass_the_stages_in_order_until_one_drops_them() {
        let rename = Arc::new(Rename::default());
        let stages = Stages::new(vec![Arc::new(EvenOnly), rename.clone()]);
        let mut kept = event(
            "compliance",
            Op::Create,
            2,
            None,
            Some(row(2, "a", Value::Null)),
        );
        let mut dropped = event(
            "compliance",
            Op::Create,
            1,
            None,
            Some(row(1, "b", Value::Null)),
        );
        assert_eq!(stages.apply(&mut kept), Ok(true));
        assert_eq!(stages.apply(&mut dropped), Ok(false));
        assert_eq!(
            rename.0.load(Ordering::Relaxed),
            1,
            "a dropped event goes no further"
        );
        let after = kept.after.unwrap();
        assert_eq!(after.get("title"), Some(&Value::Text("a".into())));
        assert_eq!(after.get("name"), None);
    }
}
