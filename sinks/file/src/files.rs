//! Rotating output files with a cursor saved after each fsynced batch.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use siphon_core::log::LogId;
use siphon_core::sink::StoreCursor;
use siphon_core::{Error, Result, write_atomic};

use crate::FileSinkConfig;

/// What the files hold for sure: everything up to `file_len` bytes of file `file_seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cursor {
    /// The change log the offset belongs to (absent before logs had identities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log_id: Option<LogId>,
    next_offset: u64,
    file_seq: u64,
    file_len: u64,
}

/// The files of one `file` sink.
#[derive(Debug)]
pub(crate) struct RotatingFiles {
    config: FileSinkConfig,
    seq: u64,
    file: File,
    len: u64,
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

impl RotatingFiles {
    /// Opens the files, cutting anything written after the last saved cursor. Returns the
    /// saved cursor, if there is one.
    pub fn open(config: FileSinkConfig) -> Result<(Self, Option<StoreCursor>)> {
        fs::create_dir_all(&config.path).map_err(io("create", &config.path))?;
        let path = cursor_path(&config);
        let cursor: Option<Cursor> = match fs::read(&path) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                path: path.clone(),
                position: 0,
                reason: e.to_string(),
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io("read", &path)(e)),
        };
        let seqs = list(&config)?;
        let (seq, len) = match &cursor {
            Some(c) => (c.file_seq, c.file_len),
            None => (seqs.last().copied().unwrap_or(1), 0),
        };
        // Files started after the cursor was saved hold nothing committed.
        for later in seqs.iter().filter(|s| **s > seq) {
            let p = file_path(&config, *later);
            fs::remove_file(&p).map_err(io("remove", &p))?;
        }
        let path = file_path(&config, seq);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        if cursor.is_none() {
            file.set_len(0).map_err(io("truncate", &path))?;
        } else if file.metadata().map_err(io("stat", &path))?.len() > len {
            tracing::info!(file = %path.display(), keep = len, "cutting lines written after the last saved cursor");
            file.set_len(len).map_err(io("truncate", &path))?;
        }
        Ok((
            RotatingFiles {
                config,
                seq,
                file,
                len,
            },
            cursor.map(|c| StoreCursor {
                next_offset: c.next_offset,
                log: c.log_id,
            }),
        ))
    }

    /// Writes lines, rotating before a line that would pass `max_file_size`.
    pub fn write_lines(&mut self, lines: &[Vec<u8>]) -> Result<()> {
        let mut buf = Vec::new();
        for line in lines {
            let pending = self.len + buf.len() as u64;
            if pending > 0 && pending + line.len() as u64 > self.config.max_file_size.0 {
                self.flush_buf(&mut buf)?;
                self.rotate()?;
            }
            buf.extend_from_slice(line);
        }
        self.flush_buf(&mut buf)
    }

    fn flush_buf(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        let path = file_path(&self.config, self.seq);
        self.file.write_all(buf).map_err(io("write", &path))?;
        self.len += buf.len() as u64;
        buf.clear();
        Ok(())
    }

    fn rotate(&mut self) -> Result<()> {
        let path = file_path(&self.config, self.seq);
        self.file.sync_data().map_err(io("fsync", &path))?;
        self.seq += 1;
        let next = file_path(&self.config, self.seq);
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&next)
            .map_err(io("open", &next))?;
        self.file.set_len(0).map_err(io("truncate", &next))?;
        self.len = 0;
        if self.config.max_files > 0 {
            let seqs = list(&self.config)?;
            let excess = seqs.len().saturating_sub(self.config.max_files as usize);
            for old in &seqs[..excess] {
                let p = file_path(&self.config, *old);
                fs::remove_file(&p).map_err(io("remove", &p))?;
            }
        }
        Ok(())
    }

    /// Fsyncs the current file and saves the cursor: everything written is now committed.
    pub fn commit(&mut self, next_offset: u64, log: Option<&LogId>) -> Result<()> {
        let path = file_path(&self.config, self.seq);
        self.file.sync_data().map_err(io("fsync", &path))?;
        let cursor = Cursor {
            log_id: log.cloned(),
            next_offset,
            file_seq: self.seq,
            file_len: self.len,
        };
        write_atomic(
            &cursor_path(&self.config),
            &serde_json::to_vec(&cursor).expect("plain struct"),
        )
    }

    /// Checks that the directory takes new files.
    pub fn check_writable(&self) -> Result<()> {
        let probe = self
            .config
            .path
            .join(format!(".{}.check", self.config.prefix));
        fs::write(&probe, b"")
            .and_then(|()| fs::remove_file(&probe))
            .map_err(io("write", &probe))
    }

    /// Deletes every file and the cursor, and starts again from file 1.
    pub fn reset(&mut self) -> Result<()> {
        for seq in list(&self.config)? {
            let p = file_path(&self.config, seq);
            fs::remove_file(&p).map_err(io("remove", &p))?;
        }
        let _ = fs::remove_file(cursor_path(&self.config));
        let (fresh, _) = RotatingFiles::open(self.config.clone())?;
        *self = fresh;
        Ok(())
    }

    /// Paths of the files, oldest first.
    pub fn paths(config: &FileSinkConfig) -> Result<Vec<PathBuf>> {
        Ok(list(config)?
            .into_iter()
            .map(|s| file_path(config, s))
            .collect())
    }
}

fn file_path(config: &FileSinkConfig, seq: u64) -> PathBuf {
    config
        .path
        .join(format!("{}-{seq:06}.jsonl", config.prefix))
}

fn cursor_path(config: &FileSinkConfig) -> PathBuf {
    config.path.join(format!("{}.cursor.json", config.prefix))
}

fn list(config: &FileSinkConfig) -> Result<Vec<u64>> {
    let mut seqs = Vec::new();
    let prefix = format!("{}-", config.prefix);
    let entries = match fs::read_dir(&config.path) {
        Ok(entries) => entries,
        // Someone removed the directory (to rebuild the store): it holds nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(seqs),
        Err(e) => return Err(io("list", &config.path)(e)),
    };
    for entry in entries {
        let name = entry.map_err(io("list", &config.path))?.file_name();
        let name = name.to_string_lossy();
        if let Some(seq) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".jsonl"))
            .and_then(|n| n.parse().ok())
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}
