//! A sink that takes a view's documents (`view = "VIEW"`): the view's state, kept on disk
//! beside the pipeline's offsets, takes the sink's batches of its tables' changes and hands
//! the sink the documents they touch instead.
//!
//! The state is committed before the sink applies the documents, so after a crash it may be
//! ahead of the sink's cursor: the sink reads again from its cursor, the changes taken in
//! again converge on the same state (each change sets a row whole), and the roots whose
//! documents were given past the cursor are given again ([`View::resume`]), since a change
//! taken in twice need not touch them again (a row deleted twice is found once). A state
//! behind the cursor (a new view, a lost file) makes the sink read from where the state ends
//! instead.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use siphon_core::name::TableName;
use siphon_core::sink::{SinkBatch, SinkRecord};
use siphon_core::source::TableInfo;
use siphon_core::{Error, SourceInfo};
use siphon_view::{View, ViewConfig, ViewError};
use tokio::sync::watch;

use super::status::SinkProgress;

/// What `view = "VIEW"` names, and where its state lives.
#[derive(Debug, Clone)]
pub(crate) struct ViewSpec {
    /// The view's name: its documents' table.
    pub name: String,
    pub config: ViewConfig,
    /// The store of its state: `<pipeline dir>/views/<sink>.redb`.
    pub path: PathBuf,
}

/// A view's state, open.
#[derive(Debug)]
pub(super) struct SinkView {
    view: View,
    /// The table the documents are changes of.
    table: TableInfo,
    /// The sink's progress: what its store has applied.
    progress: watch::Receiver<SinkProgress>,
    /// Which reading of the log may change the state: each start of one (a resume, a reset)
    /// moves it on, so that a batch a stopped reading had under way when it stopped (its
    /// task is aborted; the blocking apply is not) changes nothing. Held while the state
    /// changes.
    reading: Mutex<u64>,
}

impl SinkView {
    /// Opens the state of `spec` over the source's `tables`; the sink opens on the
    /// documents' table ([`SinkView::table`]).
    pub fn open(
        spec: &ViewSpec,
        tables: &[TableInfo],
        progress: watch::Receiver<SinkProgress>,
    ) -> Result<SinkView, Error> {
        if let Some(dir) = spec.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::transient(format!(
                    "view {}: cannot make {}: {e}",
                    spec.name,
                    dir.display()
                ))
            })?;
        }
        let keys = |name: &TableName| {
            tables
                .iter()
                .find(|t| &t.name == name)
                .map(|t| t.key_columns.clone())
        };
        let view = View::open(&spec.path, &spec.config, keys).map_err(|e| error(&spec.name, &e))?;
        if view.reshaped() {
            tracing::warn!(view = %spec.name, "the view's tables, keys or joins changed since its state was kept: it is built again from the log");
        }
        let (root, key) = view.root();
        let table = siphon_view::document_table(&spec.name, root, key.to_vec());
        Ok(SinkView {
            view,
            table,
            progress,
            reading: Mutex::new(0),
        })
    }

    /// The table the documents are changes of.
    pub fn table(&self) -> &TableInfo {
        &self.table
    }

    /// The next log offset the state has not taken in.
    pub fn next_offset(&self) -> Result<u64, Error> {
        self.view
            .next_offset()
            .map_err(|e| error(self.table.name.table(), &e))
    }

    /// Where the sink starts reading again with its store at `applied`: the documents given
    /// past it are given again at the next end of a source transaction. A new reading
    /// begins ([`SinkView::reading`]).
    pub fn resume(&self, applied: u64) -> Result<(), Error> {
        let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        *reading += 1;
        self.view
            .resume(applied)
            .map_err(|e| error(self.table.name.table(), &e))
    }

    /// The number of the reading under way, which its batches carry
    /// ([`SinkView::documents`]).
    pub fn reading(&self) -> u64 {
        *self.reading.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the state (a rebuild of the sink's store from the start of the log).
    pub fn clear(&self) -> Result<(), Error> {
        let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        *reading += 1;
        self.view
            .clear()
            .map_err(|e| error(self.table.name.table(), &e))
    }

    /// Takes in the batch's changes and puts in their place the documents of the roots its
    /// source transaction touched, once it ends (none before). Each document is a record at
    /// the batch's last offset: where the sink stands once it has applied it. Blocking
    /// (the state's commit waits for the disk).
    /// `last_source`: where the batch's last record came from.
    pub fn documents(
        &self,
        batch: &mut SinkBatch,
        last_source: Option<&SourceInfo>,
        reading: u64,
    ) -> Result<(), Error> {
        let current = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        if *current != reading {
            return Err(Error::transient(
                "the reading of the log this batch belongs to has stopped",
            ));
        }
        let events: Vec<_> = batch.records.drain(..).map(|r| r.event).collect();
        let applied = self.progress.borrow().committed;
        let documents = self
            .view
            .apply(&events, batch.end, batch.ends_transaction, applied)
            .map_err(|e| error(self.table.name.table(), &e))?;
        let source = match (last_source, documents.is_empty()) {
            (_, true) => return Ok(()),
            (Some(source), false) => source,
            (None, false) => {
                return Err(Error::permanent(
                    "a batch that ends a transaction has no change to take its position from",
                ));
            }
        };
        let (offset, now) = (batch.end - 1, super::now_ms());
        batch.records = documents
            .into_iter()
            .map(|d| SinkRecord {
                offset,
                event: d.into_event(&self.table.name, source.clone(), now),
            })
            .collect();
        Ok(())
    }
}

fn error(view: &str, e: &ViewError) -> Error {
    let message = format!("view {view}: {e}");
    if e.is_transient() {
        Error::transient(message)
    } else {
        Error::permanent(message)
    }
}
