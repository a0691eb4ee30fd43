//! The stages between the log and a sink: each decoded event passes through a sink's chain
//! of stages in order, and each passes it on, changed or not, or drops it. A sink's `tables`
//! and `exclude_columns` are its first stages ([`super::routing`]); transforms plug in as
//! more.

use std::fmt::Debug;
use std::sync::Arc;

use crate::event::Event;

/// One step between the log and a sink.
///
/// A stage sees the events of the log in order and may change any of them (its rows, its
/// schema); it must keep what the runtime relies on: the event's key (a sink addresses the
/// row by it), and the log's order (it sees one event at a time and returns it in place).
pub trait Stage: Send + Sync + Debug {
    /// What it makes of `event`: `true` to pass it on (as it is now), `false` to drop it.
    fn apply(&self, event: &mut Event) -> bool;
}

/// A sink's stages, in order.
#[derive(Debug, Clone, Default)]
pub struct Stages(Vec<Arc<dyn Stage>>);

impl Stages {
    /// These stages, in this order.
    pub fn new(stages: Vec<Arc<dyn Stage>>) -> Self {
        Stages(stages)
    }

    /// Passes `event` through each stage in turn; `false` once one drops it.
    pub fn apply(&self, event: &mut Event) -> bool {
        self.0.iter().all(|stage| stage.apply(event))
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
        fn apply(&self, event: &mut Event) -> bool {
            self.0.fetch_add(1, Ordering::Relaxed);
            for row in [&mut event.before, &mut event.after].into_iter().flatten() {
                for (column, _) in &mut row.0 {
                    if &**column == "name" {
                        *column = "title".into();
                    }
                }
            }
            true
        }
    }

    /// Drops odd keys.
    #[derive(Debug)]
    struct EvenOnly;

    impl Stage for EvenOnly {
        fn apply(&self, event: &mut Event) -> bool {
            event.key.as_ref().and_then(|k| k.get("id")) == Some(&Value::Int(2))
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
        assert!(stages.apply(&mut kept));
        assert!(!stages.apply(&mut dropped));
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
