//! A small filesystem of its own, to fill up: what a full disk does to the part that writes
//! there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

/// A size-limited tmpfs mounted on a fresh directory, unmounted when dropped. Needs root, as
/// `scripts/test` runs.
#[derive(Debug)]
pub struct SmallDisk {
    dir: tempfile::TempDir,
    filler: PathBuf,
}

impl SmallDisk {
    /// A filesystem of `bytes`.
    pub fn new(bytes: u64) -> anyhow::Result<SmallDisk> {
        let dir = tempfile::tempdir()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .context("mount (util-linux)")?;
        ensure!(
            status.success(),
            "mounting a tmpfs failed ({status}): run the tests as root, as scripts/test does"
        );
        let filler = dir.path().join("filler");
        Ok(SmallDisk { dir, filler })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes still free.
    pub fn free(&self) -> anyhow::Result<u64> {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.dir.path())
            .output()
            .context("df")?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("df printed {text:?}"))
    }

    /// Fills it up until only `left` bytes are free.
    pub fn fill_leaving(&self, left: u64) -> anyhow::Result<()> {
        let free = self.free()?;
        let grow = free.saturating_sub(left);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filler)?;
        // Written, not just sized: tmpfs counts only pages that hold data.
        let mut writer = std::io::BufWriter::new(file);
        let block = vec![0xa5u8; 64 * 1024];
        let mut written = 0;
        while written < grow {
            let n = block.len().min(usize::try_from(grow - written)?);
            writer.write_all(&block[..n])?;
            written += n as u64;
        }
        writer.flush()?;
        Ok(())
    }

    /// Fills it up completely, while others write there too: until a write finds no space.
    pub fn fill(&self) -> anyhow::Result<()> {
        match self.fill_leaving(0) {
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::StorageFull) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Frees what [`SmallDisk::fill_leaving`] took.
    pub fn free_up(&self) -> anyhow::Result<()> {
        match std::fs::remove_file(&self.filler) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
