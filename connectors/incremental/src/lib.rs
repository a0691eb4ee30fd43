//! Incremental snapshots: tables read again while streaming goes on, without locks, by the
//! watermark method (Netflix's DBLog; Debezium's incremental snapshots). What is the same for
//! every source lives here; each source writes the watermarks into its own change stream and
//! reads the chunks.
//!
//! A table is read in primary-key chunks. For each chunk the source writes a low watermark
//! into its change stream, reads the chunk, and writes a high watermark. The stream sees the
//! low watermark, then every transaction that committed around the read, then the high
//! watermark: each key such a transaction changed is dropped from the chunk (the stream
//! carries a newer or equal state of it), and the rest go into the log as `r` events at the
//! high watermark, after everything streamed before it. So an `r` event never goes back in
//! time, and the stream never pauses. The tables left and the last key read are in the
//! source's checkpoint ([`Progress`]), saved once a chunk's rows are durable: after a crash
//! the snapshot goes on from the last finished chunk.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use siphon_core::Event;
use siphon_core::event::{KeyChange, Op};
use siphon_core::name::TableName;
use siphon_core::source::{SnapshotRequest, SourceMetrics};

/// Rows read per chunk.
pub const CHUNK_ROWS: usize = 4096;

/// What survives a restart, in the source's checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// Tables still to read (as the source names them), the current one first.
    pub tables: VecDeque<TableName>,
    /// The current table's last key read, each key column in the source's text form; none
    /// before its first chunk.
    pub after: Option<Vec<String>>,
    /// Rows emitted so far.
    pub rows: u64,
    /// Rows of the current table emitted so far.
    #[serde(default)]
    pub table_rows: u64,
    /// Paused on request: no chunk is read until resumed.
    #[serde(default)]
    pub paused: bool,
}

impl Progress {
    /// Adds tables to read (each once).
    pub fn request(&mut self, tables: impl IntoIterator<Item = TableName>) {
        for table in tables {
            if !self.tables.contains(&table) {
                self.tables.push_back(table);
            }
        }
    }

    /// Reads tables (again) from their first key: one being read now starts over, the rest
    /// are added (each once). For a table whose rows are not the ones read so far (another
    /// table renamed over it).
    pub fn restart(&mut self, tables: impl IntoIterator<Item = TableName>) {
        for table in tables {
            if self.tables.front() == Some(&table) {
                self.after = None;
                self.table_rows = 0;
            } else {
                self.request([table]);
            }
        }
    }

    /// Takes what was asked through the admin API or CLI since the last call (tables to read,
    /// stop, pause, resume); whether anything was asked (the caller saves and reports the
    /// progress then, which tells the CLI its request was taken). Only between chunks: a stop
    /// must not leave a chunk open whose end would move the next table's place.
    pub fn take_requests(&mut self, metrics: &SourceMetrics) -> bool {
        let requests = metrics.take_snapshot_requests();
        let taken = !requests.is_empty();
        for request in requests {
            match request {
                SnapshotRequest::Tables(tables) => self.request(tables),
                SnapshotRequest::Stop => {
                    if !self.tables.is_empty() {
                        tracing::info!(tables = ?self.tables, "incremental snapshot stopped on request");
                    }
                    *self = Progress {
                        rows: self.rows,
                        ..Progress::default()
                    };
                }
                SnapshotRequest::Pause => self.paused = true,
                SnapshotRequest::Resume => self.paused = false,
            }
        }
        taken
    }

    /// A table is done (or cannot be read): the next one is current.
    pub fn next_table(&mut self) {
        self.tables.pop_front();
        self.after = None;
        self.table_rows = 0;
    }

    /// Whether a chunk is to be read now.
    pub fn wants_chunk(&self) -> bool {
        !self.paused && !self.tables.is_empty()
    }

    /// A closed chunk's rows are durable: where the table stands now.
    pub fn chunk_done(&mut self, rows: usize, next_after: Option<Vec<String>>) {
        self.rows += rows as u64;
        self.table_rows += rows as u64;
        match next_after {
            Some(after) => self.after = Some(after),
            None => {
                if let Some(done) = self.tables.front() {
                    tracing::info!(table = %done, rows = self.rows, "incremental snapshot: table done");
                }
                self.next_table();
            }
        }
    }

    /// The progress in status and metrics (the source adds
    /// `incremental_snapshot_table_rows_estimate`, the database's estimate of the current
    /// table's size, for a progress bar).
    pub fn report(&self, metrics: &SourceMetrics) {
        // A table not begun has no estimate yet (the source sets it when it opens the table):
        // the last table's would show against it.
        if self.table_rows == 0 && self.after.is_none() {
            metrics.set("incremental_snapshot_table_rows_estimate", 0.0);
        }
        metrics.set("incremental_snapshot_rows", self.rows as f64);
        metrics.set("incremental_snapshot_table_rows", self.table_rows as f64);
        metrics.set("incremental_snapshot_tables_left", self.tables.len() as f64);
        metrics.set(
            "incremental_snapshot_paused",
            f64::from(u8::from(self.paused)),
        );
        metrics.snapshot_requests_reported();
    }
}

/// A chunk read between its watermarks, waiting for the stream to pass the high one.
#[derive(Debug)]
pub struct Chunk {
    /// The watermarks' id: random, so that a watermark of a chunk read before a restart,
    /// which the stream sends again, matches no chunk read after it.
    id: String,
    /// Its rows as `r` events (placed by the source when the high watermark arrives).
    rows: Vec<Event>,
    /// The table it reads.
    table: TableName,
    /// The stream is past the low watermark.
    open: bool,
    /// Log keys the stream changed since the low watermark.
    changed: HashSet<Vec<u8>>,
    /// The stream truncated the table since the low watermark.
    truncated: bool,
    /// Whether the chunk's read could not see a transaction (in progress when it began; by
    /// [`SourceInfo::tx_id`](siphon_core::SourceInfo::tx_id)). One it could not see may have
    /// committed just before the low watermark, so that the stream carries it before the
    /// window opens: its keys leave the chunk wherever the stream carries them.
    unseen: Unseen,
    /// Where the next chunk starts; none when this one ended the table.
    next_after: Option<Vec<String>>,
}

/// Which watermark of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Written before the chunk is read.
    Low,
    /// Written after.
    High,
}

impl Mark {
    /// The watermark's text: its kind and the chunk's id.
    pub fn text(self, id: &str) -> String {
        match self {
            Mark::Low => format!("low {id}"),
            Mark::High => format!("high {id}"),
        }
    }

    /// Reads a watermark's text.
    pub fn parse(text: &str) -> Option<(Mark, &str)> {
        let (kind, id) = text.split_once(' ')?;
        match kind {
            "low" => Some((Mark::Low, id)),
            "high" => Some((Mark::High, id)),
            _ => None,
        }
    }
}

/// A new chunk id.
pub fn chunk_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Chunk {
    /// A chunk of `table` read between the watermarks of `id`.
    pub fn new(
        id: String,
        table: TableName,
        rows: Vec<Event>,
        next_after: Option<Vec<String>>,
    ) -> Chunk {
        Chunk {
            id,
            rows,
            table,
            open: false,
            changed: HashSet::new(),
            truncated: false,
            unseen: Unseen(None),
            next_after,
        }
    }

    /// The chunk of a read that could not see the transactions `unseen` says it could not.
    pub fn not_seeing(mut self, unseen: impl Fn(u64) -> bool + Send + Sync + 'static) -> Chunk {
        self.unseen = Unseen(Some(Box::new(unseen)));
        self
    }

    /// Notes a change the stream carries (between the watermarks, or of a transaction the
    /// read could not see, its key leaves the chunk).
    pub fn saw(&mut self, event: &Event) {
        let unseen = || {
            event
                .source
                .tx_id
                .zip(self.unseen.0.as_ref())
                .is_some_and(|(t, unseen)| unseen(t))
        };
        if !(self.open || unseen())
            || self.table.namespace() != event.source.namespace()
            || self.table.table() != &*event.source.table
        {
            return;
        }
        if event.op == Op::Truncate {
            self.truncated = true;
            return;
        }
        self.changed.insert(event.log_key());
        if let Some(KeyChange::From(old) | KeyChange::To(old)) = &event.key_change {
            self.changed.insert(event.log_key_of(old));
        }
    }

    /// A watermark in the stream: the low one opens the window; the high one closes it and
    /// gives back the rows to append (placed by the caller), with where the table stands
    /// after them. Another chunk's watermark (one from before a restart) is ignored.
    pub fn watermark(&mut self, text: &str) -> Option<Closed> {
        let (mark, id) = Mark::parse(text)?;
        if id != self.id {
            return None;
        }
        match mark {
            Mark::Low => {
                self.open = true;
                None
            }
            Mark::High if self.open => {
                let rows = if self.truncated {
                    Vec::new()
                } else {
                    let changed = std::mem::take(&mut self.changed);
                    let mut rows = std::mem::take(&mut self.rows);
                    rows.retain(|e| !changed.contains(&e.log_key()));
                    rows
                };
                Some(Closed {
                    rows,
                    next_after: self.next_after.take(),
                })
            }
            Mark::High => None,
        }
    }
}

/// What a chunk's read could not see (none: everything).
struct Unseen(Option<Box<dyn Fn(u64) -> bool + Send + Sync>>);

impl std::fmt::Debug for Unseen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Unseen(..)"
        } else {
            "Unseen(none)"
        })
    }
}

/// A chunk whose window closed.
#[derive(Debug)]
pub struct Closed {
    /// Its rows to append.
    pub rows: Vec<Event>,
    /// Where the next chunk starts; none: the table is done.
    pub next_after: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_tables_estimate_is_not_shown_against_the_next() {
        let metrics = SourceMetrics::default();
        let mut progress = Progress::default();
        progress.request([
            TableName::parse("a.x").unwrap(),
            TableName::parse("a.y").unwrap(),
        ]);
        // The source sets a table's estimate when it opens it.
        metrics.set("incremental_snapshot_table_rows_estimate", 100.0);
        progress.chunk_done(60, Some(vec!["60".into()]));
        progress.report(&metrics);
        let estimate = |m: &SourceMetrics| m.values()["incremental_snapshot_table_rows_estimate"];
        assert_eq!(estimate(&metrics), 100.0, "the table being read keeps it");
        progress.chunk_done(40, None);
        progress.report(&metrics);
        assert_eq!(estimate(&metrics), 0.0, "a.y, not opened yet, has none");
    }

    #[test]
    fn stop_keeps_the_row_count_and_pause_survives_new_tables() {
        let metrics = SourceMetrics::default();
        let mut progress = Progress::default();
        metrics.request_snapshot(SnapshotRequest::Tables(vec![
            TableName::parse("a.x").unwrap(),
            TableName::parse("a.y").unwrap(),
        ]));
        metrics.request_snapshot(SnapshotRequest::Pause);
        assert!(progress.take_requests(&metrics));
        assert!(!progress.wants_chunk(), "paused");
        progress.chunk_done(10, Some(vec!["5".into()]));
        metrics.request_snapshot(SnapshotRequest::Resume);
        metrics.request_snapshot(SnapshotRequest::Tables(vec![
            TableName::parse("a.x").unwrap(),
        ]));
        assert!(progress.take_requests(&metrics));
        assert!(progress.wants_chunk());
        assert_eq!(
            progress.tables.len(),
            2,
            "a table asked for twice is read once"
        );
        metrics.request_snapshot(SnapshotRequest::Stop);
        assert!(progress.take_requests(&metrics));
        assert_eq!(
            progress,
            Progress {
                rows: 10,
                ..Progress::default()
            }
        );
        assert!(!progress.take_requests(&metrics), "nothing asked");
        metrics.request_snapshot(SnapshotRequest::Resume);
        assert!(
            progress.take_requests(&metrics),
            "asked, though nothing changed: taken all the same"
        );
    }

    #[test]
    fn a_transaction_the_read_could_not_see_drops_its_keys_before_the_window_too() {
        use siphon_core::Row;
        use siphon_core::testing::{TABLE, event, row};
        let change = |id: i64, tx: u64| {
            let mut e = event(
                TABLE,
                Op::Update,
                id,
                None,
                Some(row(id, "new", siphon_core::Value::Null)),
            );
            e.source.tx_id = Some(tx);
            e
        };
        let rows: Vec<Event> = (1..=3)
            .map(|id| {
                event(
                    TABLE,
                    Op::Read,
                    id,
                    None,
                    Some(row(id, "old", siphon_core::Value::Null)),
                )
            })
            .collect();
        let mut chunk = Chunk::new("c".into(), TableName::new("public", TABLE), rows, None)
            .not_seeing(|tx| tx == 7);
        // Before the low watermark: tx 7 (unseen by the read) drops key 1; tx 8 (seen) not.
        chunk.saw(&change(1, 7));
        chunk.saw(&change(2, 8));
        assert!(chunk.watermark(&Mark::Low.text("c")).is_none());
        chunk.saw(&change(3, 9));
        let closed = chunk.watermark(&Mark::High.text("c")).unwrap();
        let left: Vec<_> = closed.rows.iter().map(|e| e.key.clone().unwrap()).collect();
        assert_eq!(left, [Row(vec![("id".into(), siphon_core::Value::Int(2))])]);
    }

    #[test]
    fn marks_read_back() {
        assert_eq!(Mark::parse(&Mark::Low.text("ab")), Some((Mark::Low, "ab")));
        assert_eq!(
            Mark::parse(&Mark::High.text("ab")),
            Some((Mark::High, "ab"))
        );
        assert_eq!(Mark::parse("mid ab"), None);
    }
}
