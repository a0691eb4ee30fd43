//! The JSON-lines sink over stdout, any writer, or rotating files.

use std::io::Write;

use async_trait::async_trait;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_sink_message::{Encoded, ValueEncoder};

use crate::config::LineSettings;
use crate::files::RotatingFiles;
use crate::{FileSinkConfig, StdoutSinkConfig};

enum Target {
    Writer(Box<dyn Write + Send>),
    Files(RotatingFiles),
}

/// Writes each event as one line of Debezium JSON (its envelope or its row state).
/// Append-only: it accepts tables without a primary key.
pub struct JsonLinesSink {
    target: Target,
    values: ValueEncoder,
    /// The next offset to write: records below it were written already.
    next_offset: u64,
    /// The cursor saved beside the files (files only).
    saved: Option<StoreCursor>,
    /// The log the cursor is a position in (given at open).
    log: Option<LogId>,
}

impl std::fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            Target::Writer(_) => "writer",
            Target::Files(_) => "files",
        };
        f.debug_struct("JsonLinesSink")
            .field("target", &target)
            .field("next_offset", &self.next_offset)
            .finish()
    }
}

impl JsonLinesSink {
    /// A sink printing to standard output.
    pub fn stdout(config: &StdoutSinkConfig) -> Result<Self> {
        Self::writer(Box::new(std::io::stdout()), &config.lines())
    }

    /// A sink writing to any writer (tests, pipes).
    pub fn writer(writer: Box<dyn Write + Send>, lines: &LineSettings) -> Result<Self> {
        Ok(JsonLinesSink {
            target: Target::Writer(writer),
            values: values(lines)?,
            next_offset: 0,
            saved: None,
            log: None,
        })
    }

    /// A sink writing rotating files. Opens them at once, cutting lines written after the
    /// last saved cursor.
    pub fn files(config: FileSinkConfig) -> Result<Self> {
        let values = values(&config.lines())?;
        let (files, saved) = RotatingFiles::open(config)?;
        Ok(JsonLinesSink {
            target: Target::Files(files),
            values,
            next_offset: saved.as_ref().map_or(0, |c| c.next_offset),
            saved,
            log: None,
        })
    }

    /// The output files of a `file` sink, oldest first.
    pub fn file_paths(config: &FileSinkConfig) -> Result<Vec<std::path::PathBuf>> {
        RotatingFiles::paths(config)
    }
}

/// The encoder of a sink's lines; an error names the key.
fn values(lines: &LineSettings) -> Result<ValueEncoder> {
    lines.validate().map_err(Error::Config)?;
    ValueEncoder::new(
        lines.value,
        &lines.row_state,
        &Default::default(),
        lines.format,
    )
    .map_err(Error::Config)
}

#[async_trait]
impl Sink for JsonLinesSink {
    async fn check(&mut self) -> Result<()> {
        match &self.target {
            Target::Files(files) => files.check_writable(),
            Target::Writer(_) => Ok(()),
        }
    }

    async fn open(&mut self, _tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        Ok(self.saved.clone())
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        // Below the cursor everything is written already (in the log's one order; a consumer
        // group's stretches skip nothing).
        let written = if batch.ordered { self.next_offset } else { 0 };
        if batch.end <= written {
            return Ok(());
        }
        let mut lines = Vec::with_capacity(batch.records.len());
        for r in batch.records.iter().filter(|r| r.offset >= written) {
            // A delete the row state drops has no line.
            let Some(Encoded::Value(mut line)) = self.values.encode(&r.event)? else {
                continue;
            };
            line.push(b'\n');
            lines.push(line);
        }
        let next = batch.end;
        match &mut self.target {
            Target::Writer(w) => {
                for line in &lines {
                    w.write_all(line)
                        .map_err(|e| Error::transient(format!("writing to stdout: {e}")))?;
                }
                w.flush()
                    .map_err(|e| Error::transient(format!("writing to stdout: {e}")))?;
            }
            Target::Files(files) => {
                files.write_lines(&lines)?;
                files.commit(next, self.log.as_ref())?;
                self.saved = Some(StoreCursor {
                    next_offset: next,
                    log: self.log.clone(),
                });
            }
        }
        self.next_offset = next;
        Ok(())
    }

    /// Every event goes out: the log never compacts what it has not written.
    fn keeps_history(&self) -> bool {
        true
    }

    fn keeps_cursor(&self) -> bool {
        matches!(self.target, Target::Files(_))
    }

    async fn reset(&mut self, _tables: &[TableInfo]) -> Result<()> {
        if let Target::Files(files) = &mut self.target {
            files.reset()?;
        }
        self.next_offset = 0;
        self.saved = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use siphon_core::sink::row_state::RowState;
    use siphon_sink_message::ValueForm;

    use siphon_core::testing::{
        SinkHarness, StoreState, apply, cursor, log_id, run_compliance_suite,
    };

    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn parse_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    struct WriterHarness {
        out: Shared,
        sink: JsonLinesSink,
    }

    #[async_trait]
    impl SinkHarness for WriterHarness {
        fn sink(&mut self) -> &mut dyn Sink {
            &mut self.sink
        }
        async fn state_of(&mut self, _table: &str) -> StoreState {
            StoreState::Lines(parse_lines(&self.out.0.lock().unwrap()))
        }
    }

    struct FileHarness {
        _dir: tempfile::TempDir,
        config: FileSinkConfig,
        sink: JsonLinesSink,
    }

    #[async_trait]
    impl SinkHarness for FileHarness {
        fn sink(&mut self) -> &mut dyn Sink {
            &mut self.sink
        }
        async fn state_of(&mut self, _table: &str) -> StoreState {
            let mut lines = Vec::new();
            for p in JsonLinesSink::file_paths(&self.config).unwrap() {
                lines.extend(parse_lines(&std::fs::read(p).unwrap()));
            }
            StoreState::Lines(lines)
        }
    }

    fn file_config(dir: &std::path::Path) -> FileSinkConfig {
        FileSinkConfig {
            path: dir.to_path_buf(),
            prefix: "events".into(),
            max_file_size: siphon_core::units::ByteSize(2048),
            max_files: 0,
            schemas: false,
            transaction_metadata: false,
            debezium: Default::default(),
            value: Default::default(),
            row_fields: RowState::all_fields(),
            deletes: Default::default(),
        }
    }

    #[tokio::test]
    async fn stdout_sink_passes_the_compliance_suite() {
        run_compliance_suite(async || {
            let out = Shared::default();
            WriterHarness {
                sink: JsonLinesSink::writer(
                    Box::new(out.clone()),
                    &file_config(Path::new(".")).lines(),
                )
                .unwrap(),
                out,
            }
        })
        .await;
    }

    #[tokio::test]
    async fn file_sink_passes_the_compliance_suite() {
        run_compliance_suite(async || {
            let dir = tempfile::tempdir().unwrap();
            let config = file_config(dir.path());
            FileHarness {
                sink: JsonLinesSink::files(config.clone()).unwrap(),
                config,
                _dir: dir,
            }
        })
        .await;
    }

    fn records(range: std::ops::Range<u64>) -> Vec<siphon_core::sink::SinkRecord> {
        use siphon_core::testing::{TABLE, event, record, row};
        range
            .map(|o| {
                record(
                    o,
                    event(
                        TABLE,
                        siphon_core::Op::Create,
                        o as i64,
                        None,
                        Some(row(o as i64, "x", siphon_core::Value::Null)),
                    ),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn file_sink_rotates_and_resumes_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let config = FileSinkConfig {
            max_files: 3,
            ..file_config(dir.path())
        };
        let mut sink = JsonLinesSink::files(config.clone()).unwrap();
        assert_eq!(sink.open(&[], &log_id()).await.unwrap(), None);
        apply(&mut sink, &records(0..40)).await.unwrap();
        let paths = JsonLinesSink::file_paths(&config).unwrap();
        assert_eq!(paths.len(), 3, "rotation keeps max_files: {paths:?}");
        // Lines written after the last commit (a crash between write and cursor) are cut.
        let last = paths.last().unwrap();
        let committed = std::fs::read(last).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(last)
            .unwrap()
            .write_all(b"{\"half\":")
            .unwrap();
        drop(sink);
        let mut sink = JsonLinesSink::files(config.clone()).unwrap();
        assert_eq!(std::fs::read(last).unwrap(), committed);
        assert_eq!(sink.open(&[], &log_id()).await.unwrap(), Some(cursor(40)));
        apply(&mut sink, &records(30..45)).await.unwrap();
        let mut ids = Vec::new();
        for p in JsonLinesSink::file_paths(&config).unwrap() {
            ids.extend(
                parse_lines(&std::fs::read(p).unwrap())
                    .iter()
                    .map(|l| l["after"]["id"].as_i64().unwrap()),
            );
        }
        assert_eq!(ids.last(), Some(&44));
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "a line was written twice: {ids:?}");
        sink.reset(&[]).await.unwrap();
        assert_eq!(JsonLinesSink::file_paths(&config).unwrap().len(), 1);
        assert_eq!(sink.open(&[], &log_id()).await.unwrap(), None);
    }

    /// `value = "row"` writes what the message sinks write: the row after the change with
    /// what happened, a delete as the old row marked deleted, or no line at all with
    /// `deletes = "drop"`.
    #[tokio::test]
    async fn a_row_state_line_is_the_row_as_the_message_sinks_write_it() {
        use siphon_core::sink::row_state::DeleteHandling;
        use siphon_core::testing::{TABLE, event, record, row};
        use siphon_core::{Op, Value};
        let changes = vec![
            record(
                0,
                event(TABLE, Op::Create, 1, None, Some(row(1, "one", Value::Null))),
            ),
            record(
                1,
                event(
                    TABLE,
                    Op::Update,
                    1,
                    Some(row(1, "one", Value::Null)),
                    Some(row(1, "uno", Value::Null)),
                ),
            ),
            record(
                2,
                event(TABLE, Op::Delete, 1, Some(row(1, "uno", Value::Null)), None),
            ),
        ];
        for (deletes, expected) in [(DeleteHandling::Rewrite, 3), (DeleteHandling::Drop, 2)] {
            let dir = tempfile::tempdir().unwrap();
            let config = FileSinkConfig {
                value: ValueForm::Row,
                deletes,
                ..file_config(dir.path())
            };
            let mut sink = JsonLinesSink::files(config.clone()).unwrap();
            sink.open(&[], &log_id()).await.unwrap();
            apply(&mut sink, &changes).await.unwrap();
            let mut lines = Vec::new();
            for p in JsonLinesSink::file_paths(&config).unwrap() {
                lines.extend(parse_lines(&std::fs::read(p).unwrap()));
            }
            assert_eq!(lines.len(), expected, "{deletes:?}: {lines:?}");
            assert_eq!(
                (&lines[0]["name"], &lines[0]["__op"]),
                (&"one".into(), &"c".into())
            );
            assert_eq!(
                (&lines[1]["name"], &lines[1]["__op"]),
                (&"uno".into(), &"u".into())
            );
            if expected == 3 {
                assert_eq!(
                    (&lines[2]["id"], &lines[2]["__deleted"]),
                    (&1.into(), &"true".into())
                );
            }
            // The cursor moves past a dropped delete all the same.
            assert_eq!(sink.open(&[], &log_id()).await.unwrap(), Some(cursor(3)));
        }
        let outbox = FileSinkConfig {
            value: ValueForm::Outbox,
            ..file_config(Path::new("."))
        };
        let error = JsonLinesSink::files(outbox).unwrap_err().to_string();
        assert!(error.contains("value:"), "{error}");
    }
}
