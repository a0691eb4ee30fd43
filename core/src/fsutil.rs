//! Small filesystem helpers for crash-safe writes.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// Replaces `path` with `bytes` atomically: write a temporary file, fsync it, rename it over
/// `path`, fsync the directory. A crash leaves either the old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(Error::io("create", &tmp))?;
    f.write_all(bytes).map_err(Error::io("write", &tmp))?;
    f.sync_all().map_err(Error::io("fsync", &tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(Error::io("rename", path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Fsyncs a directory, so that files created, renamed or removed in it stay so.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("fsync", dir))
}
