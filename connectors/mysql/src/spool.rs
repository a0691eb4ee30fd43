//! A spool: an append-only file of CRC-checked blobs, for what a source must keep durably
//! outside the change log for a while (a prepared XA transaction's rows, until its COMMIT or
//! ROLLBACK arrives, maybe days later). Written in parts as they come and fsynced once, read
//! back a batch at a time: never held whole in memory.
//!
//! Frame: `len:u32le crc32c(body):u32le body`.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use siphon_core::{Error, Result, fsutil};

/// A spool being written.
#[derive(Debug)]
pub struct SpoolWriter {
    path: PathBuf,
    file: BufWriter<File>,
    count: u64,
}

impl SpoolWriter {
    /// Creates `path` anew (an earlier file of that name is replaced).
    pub fn create(path: &Path) -> Result<SpoolWriter> {
        let file = File::create(path).map_err(Error::io("create", path))?;
        Ok(SpoolWriter {
            path: path.to_owned(),
            file: BufWriter::new(file),
            count: 0,
        })
    }

    /// Appends blobs (not yet durable).
    pub fn append<'a>(&mut self, blobs: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        for blob in blobs {
            let len = u32::try_from(blob.len()).map_err(|_| Error::TooLarge {
                bytes: blob.len(),
                limit: u32::MAX as usize,
            })?;
            let write = |file: &mut BufWriter<File>| -> std::io::Result<()> {
                file.write_all(&len.to_le_bytes())?;
                file.write_all(&crc32c::crc32c(blob).to_le_bytes())?;
                file.write_all(blob)
            };
            write(&mut self.file).map_err(Error::io("write", &self.path))?;
            self.count += 1;
        }
        Ok(())
    }

    /// Blobs appended.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Makes everything appended durable (file and directory entry) and closes the spool.
    pub fn finish(mut self) -> Result<()> {
        self.file.flush().map_err(Error::io("write", &self.path))?;
        self.file
            .get_ref()
            .sync_all()
            .map_err(Error::io("fsync", &self.path))?;
        match self.path.parent() {
            Some(dir) => fsutil::sync_dir(dir),
            None => Ok(()),
        }
    }
}

/// A finished spool, read back in order.
#[derive(Debug)]
pub struct SpoolReader {
    path: PathBuf,
    file: BufReader<File>,
    position: u64,
}

impl SpoolReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<SpoolReader> {
        let file = File::open(path).map_err(Error::io("open", path))?;
        Ok(SpoolReader {
            path: path.to_owned(),
            file: BufReader::new(file),
            position: 0,
        })
    }

    /// Up to `max` blobs; none at the end. A torn or damaged frame is an error: a finished
    /// spool was fsynced whole.
    pub fn read(&mut self, max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while out.len() < max {
            let mut header = [0u8; 8];
            match self.file.read_exact(&mut header[..1]) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                other => other.map_err(Error::io("read", &self.path))?,
            }
            let corrupt = |reason: &str| Error::Corrupt {
                path: self.path.clone(),
                position: self.position,
                reason: reason.to_owned(),
            };
            self.file
                .read_exact(&mut header[1..])
                .map_err(|_| corrupt("a cut frame header"))?;
            let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
            let mut body = vec![0u8; len];
            self.file
                .read_exact(&mut body)
                .map_err(|_| corrupt("a cut frame"))?;
            if crc32c::crc32c(&body) != crc {
                return Err(corrupt("checksum mismatch"));
            }
            self.position += 8 + len as u64;
            out.push(body);
        }
        Ok(out)
    }
}

/// Removes a spool (none there is fine).
pub fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            op: "remove",
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_read_back_in_order_a_batch_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let mut w = SpoolWriter::create(&path).unwrap();
        let blobs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; usize::from(i)]).collect();
        w.append(blobs.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(w.count(), 10);
        w.finish().unwrap();
        let mut r = SpoolReader::open(&path).unwrap();
        let mut back = Vec::new();
        loop {
            let batch = r.read(3).unwrap();
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= 3);
            back.extend(batch);
        }
        assert_eq!(back, blobs);

        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let mut r = SpoolReader::open(&path).unwrap();
        assert!(matches!(r.read(100), Err(Error::Corrupt { .. })));
        remove(&path).unwrap();
        remove(&path).unwrap();
    }
}
