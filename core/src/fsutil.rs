//! Small filesystem helpers for crash-safe writes.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Replaces `path` with `bytes` atomically: write a temporary file, fsync it, rename it over
/// `path`, fsync the directory. A crash leaves either the old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes, true)
}

/// Replaces `path` with `bytes` through a temporary file and a rename, so a reader never sees
/// half of it; with `durable`, fsynced as [`write_atomic`] does. Without, a crash may leave the
/// old content or none: only for files that can be rebuilt (indexes).
pub fn replace(path: &Path, bytes: &[u8], durable: bool) -> Result<()> {
    let tmp = write_temporary(path, bytes, durable)?;
    commit_staged(&tmp, path)?;
    if durable {
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// Renames staged content over `path`.
pub fn commit_staged(staged: &Path, path: &Path) -> Result<()> {
    fs::rename(staged, path).map_err(Error::io("rename", path))
}

fn write_temporary(path: &Path, bytes: &[u8], durable: bool) -> Result<PathBuf> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(Error::io("create", &tmp))?;
    f.write_all(bytes).map_err(Error::io("write", &tmp))?;
    if durable {
        f.sync_all().map_err(Error::io("fsync", &tmp))?;
    }
    Ok(tmp)
}

/// Fsyncs a directory, so that files created, renamed or removed in it stay so.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("fsync", dir))
}
