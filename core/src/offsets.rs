//! Sink cursors and source checkpoints, one small JSON file each, replaced atomically
//! (write, fsync, rename), so a crash leaves the old or the new value, never a mix.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::log::LogId;
use crate::{Error, Result, fsutil};

/// Where a sink is in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkCursor {
    /// The log the cursor belongs to (absent in cursors saved before logs had identities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_id: Option<LogId>,
    /// The next offset to apply: every record below it is applied.
    pub next_offset: u64,
    /// Set when the log's hard size cap deleted records this sink had not applied: the sink
    /// stops until it is rebuilt with `siphon replay`.
    #[serde(default)]
    pub lost: Option<LostRecords>,
}

/// Records a sink never saw because the log's hard size cap removed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostRecords {
    /// First offset lost.
    pub first: u64,
    /// Offset after the last one lost.
    pub end: u64,
}

/// The cursors and checkpoint of one pipeline, in a directory.
#[derive(Debug, Clone)]
pub struct OffsetStore {
    dir: PathBuf,
}

const SINK_PREFIX: &str = "sink-";
const SOURCE_FILE: &str = "source.json";

impl OffsetStore {
    /// Opens (creating) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
        Ok(OffsetStore { dir })
    }

    /// Opens an existing store without creating anything.
    pub fn open_existing(dir: impl AsRef<Path>) -> Self {
        OffsetStore {
            dir: dir.as_ref().to_path_buf(),
        }
    }

    fn sink_path(&self, sink: &str) -> PathBuf {
        self.dir.join(format!("{SINK_PREFIX}{sink}.json"))
    }

    /// The cursor of `sink` (offset 0 if it never saved one).
    pub fn sink(&self, sink: &str) -> Result<SinkCursor> {
        Ok(read_json(&self.sink_path(sink))?.unwrap_or_default())
    }

    /// Saves the cursor of `sink`, durably.
    pub fn save_sink(&self, sink: &str, cursor: &SinkCursor) -> Result<()> {
        write_json(&self.sink_path(sink), cursor)
    }

    /// Saves the cursor of a sink whose store keeps its own, without fsync: a reader never
    /// sees half of the file, but a crash of the machine may leave an older cursor or none,
    /// and then the store's cursor (which wins on open) or a rebuild covers it.
    pub fn save_sink_unsynced(&self, sink: &str, cursor: &SinkCursor) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(cursor).map_err(|e| Error::Codec(e.to_string()))?;
        fsutil::replace(&self.sink_path(sink), &bytes, false)
    }

    /// The source's checkpoint, in the source's own type. A file that does not parse into it
    /// is an error naming the file, never a silent default.
    pub fn source_checkpoint<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>> {
        read_json(&self.dir.join(SOURCE_FILE))
    }

    /// The path of a file the source keeps beside its checkpoint (a spool, say).
    pub fn source_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("source-{name}"))
    }

    /// The source's files ([`OffsetStore::source_file`]) whose names start with `prefix`.
    pub fn source_files(&self, prefix: &str) -> Result<Vec<PathBuf>> {
        let start = format!("source-{prefix}");
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("read", &self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(Error::io("read", &self.dir))?;
            if entry.file_name().to_string_lossy().starts_with(&start) {
                out.push(entry.path());
            }
        }
        Ok(out)
    }

    /// Saves the source's checkpoint, durably.
    pub fn save_source_checkpoint<T: Serialize>(&self, checkpoint: &T) -> Result<()> {
        write_json(&self.dir.join(SOURCE_FILE), checkpoint)
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Corrupt {
                path: path.into(),
                position: 0,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io {
            op: "read",
            path: path.into(),
            source: e,
        }),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Codec(e.to_string()))?;
    fsutil::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_and_checkpoints_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(dir.path()).unwrap();
        assert_eq!(store.sink("cache").unwrap(), SinkCursor::default());
        let cursor = SinkCursor {
            log_id: Some(LogId::random()),
            next_offset: 42,
            lost: Some(LostRecords { first: 3, end: 9 }),
        };
        store.save_sink("cache", &cursor).unwrap();
        store
            .save_source_checkpoint(&serde_json::json!({"lsn": 7}))
            .unwrap();
        let reopened = OffsetStore::open(dir.path()).unwrap();
        assert_eq!(reopened.sink("cache").unwrap(), cursor);
        assert_eq!(
            reopened.source_checkpoint::<serde_json::Value>().unwrap(),
            Some(serde_json::json!({"lsn": 7}))
        );
        // A checkpoint that does not parse into the source's type is an error.
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Typed {
            lsn: String,
        }
        let err = reopened.source_checkpoint::<Typed>().unwrap_err();
        assert!(err.to_string().contains("source.json"), "{err}");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
