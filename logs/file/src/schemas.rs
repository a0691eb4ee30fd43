//! The file log's schema store: every version registered in one log, in one append-only file
//! beside its segments.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use siphon_core::schema::{SchemaId, SchemaLookup, SchemaStore, SchemaVersions, TableSchema};
use siphon_core::{Error, Result};

/// The schema versions of one log, kept in one append-only file beside its segments.
///
/// ```text
/// file  = entry*
/// entry = len:u32le  crc32c(body):u32le  body     (body: a postcard-encoded TableSchema)
/// ```
///
/// A torn last entry (a crash while registering) is cut off when the file is opened for
/// writing: no record refers to it, since registration returns only after the fsync.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Debug)]
struct Registry {
    path: PathBuf,
    versions: SchemaVersions,
    /// `None` when opened read-only.
    file: Option<File>,
    /// Bytes of whole entries read from the file.
    read_len: u64,
}

/// The registry's file in a log directory.
const FILE_NAME: &str = "schemas";

impl SchemaRegistry {
    /// Opens (or creates) the registry of the log in `dir`, for registering.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_in(dir, true)
    }

    /// Opens the registry of the log in `dir` for lookups only; it reads versions registered
    /// since when asked for one it does not hold.
    pub fn open_read_only(dir: &Path) -> Result<Self> {
        Self::open_in(dir, false)
    }

    fn open_in(dir: &Path, writable: bool) -> Result<Self> {
        let mut registry = Registry {
            path: dir.join(FILE_NAME),
            versions: SchemaVersions::default(),
            file: None,
            read_len: 0,
        };
        registry.read_new()?;
        if writable {
            let path = &registry.path;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(Error::io("open", path))?;
            let len = file.metadata().map_err(Error::io("stat", path))?.len();
            if len > registry.read_len {
                tracing::warn!(file = %path.display(), bytes = len - registry.read_len, "cutting a torn schema entry off the registry");
                file.set_len(registry.read_len)
                    .map_err(Error::io("truncate", path))?;
                file.sync_all().map_err(Error::io("fsync", path))?;
            }
            registry.file = Some(file);
        }
        Ok(SchemaRegistry {
            inner: Arc::new(Mutex::new(registry)),
        })
    }
}

impl SchemaStore for SchemaRegistry {
    fn register(&self, schema: &TableSchema) -> Result<Arc<TableSchema>> {
        if let Some(reason) = schema.invalid() {
            return Err(Error::Codec(reason));
        }
        let mut registry = self.inner.lock().unwrap();
        if let Some(found) = registry.versions.find(schema) {
            return Ok(found);
        }
        let registered = registry.versions.next_version(schema)?;
        let id = registered.id;
        let body = postcard::to_allocvec(&*registered).map_err(|e| Error::Codec(e.to_string()))?;
        let mut entry = Vec::with_capacity(body.len() + 8);
        entry.extend_from_slice(&(body.len() as u32).to_le_bytes());
        entry.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        entry.extend_from_slice(&body);
        let path = registry.path.clone();
        let file = registry
            .file
            .as_mut()
            .ok_or_else(|| Error::Config("the schema registry was opened read-only".into()))?;
        file.write_all(&entry).map_err(Error::io("write", &path))?;
        file.sync_data().map_err(Error::io("fsync", &path))?;
        registry.read_len += entry.len() as u64;
        registry.versions.add(registered.clone());
        tracing::debug!(table = %registered.name(), id = id.0, "registered a table schema");
        Ok(registered)
    }

    fn all(&self) -> Vec<Arc<TableSchema>> {
        self.inner.lock().unwrap().versions.all()
    }
}

impl SchemaLookup for SchemaRegistry {
    fn schema(&self, id: SchemaId) -> Option<Arc<TableSchema>> {
        let mut registry = self.inner.lock().unwrap();
        if id >= registry.versions.next_id() && registry.file.is_none() {
            // Read-only: the writing process may have registered it since.
            if let Err(e) = registry.read_new() {
                tracing::warn!(error = %e, "reading the schema registry");
            }
        }
        registry.versions.get(id)
    }
}

impl Registry {
    /// Reads the entries past `read_len`, stopping at a torn or damaged one.
    fn read_new(&mut self) -> Result<()> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("read", &self.path)(e)),
        };
        let mut at = self.read_len as usize;
        while let Some(header) = bytes.get(at..at + 8) {
            let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
            let Some(body) = bytes.get(at + 8..at + 8 + len) else {
                break;
            };
            if crc32c::crc32c(body) != crc {
                break;
            }
            let schema: TableSchema = postcard::from_bytes(body).map_err(|e| Error::Corrupt {
                path: self.path.clone(),
                position: at as u64,
                reason: format!("a schema entry that does not decode: {e}"),
            })?;
            if let Some(reason) = schema.invalid() {
                return Err(Error::Corrupt {
                    path: self.path.clone(),
                    position: at as u64,
                    reason,
                });
            }
            if schema.id != self.versions.next_id() {
                return Err(Error::Corrupt {
                    path: self.path.clone(),
                    position: at as u64,
                    reason: format!(
                        "schema {} where {} was expected",
                        schema.id.0,
                        self.versions.next_id().0
                    ),
                });
            }
            self.versions.add(Arc::new(schema));
            at += 8 + len;
        }
        self.read_len = at as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::schema::{Column, ColumnKind};

    use super::*;

    fn schema(table: &str, columns: &[&str]) -> TableSchema {
        TableSchema {
            id: SchemaId::UNREGISTERED,
            connector: "postgresql".into(),
            server: "p".into(),
            database: "db".into(),
            schema: Some("public".into()),
            table: table.into(),
            columns: columns
                .iter()
                .map(|c| Column {
                    name: (*c).into(),
                    type_name: "integer".into(),
                    type_id: 23,
                    type_modifier: -1,
                    kind: ColumnKind::Int32,
                    nullable: true,
                    generated: false,
                })
                .collect(),
            key: vec![0],
        }
    }

    #[test]
    fn registration_is_idempotent_durable_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let registry = SchemaRegistry::open(dir.path()).unwrap();
        let a1 = registry.register(&schema("a", &["id"])).unwrap();
        let b1 = registry.register(&schema("b", &["id"])).unwrap();
        let a2 = registry.register(&schema("a", &["id", "x"])).unwrap();
        assert_eq!(
            (a1.id, b1.id, a2.id),
            (SchemaId(1), SchemaId(2), SchemaId(3))
        );
        assert_eq!(
            registry.register(&schema("a", &["id"])).unwrap().id,
            SchemaId(1)
        );
        let reader = SchemaRegistry::open_read_only(dir.path()).unwrap();
        let a3 = registry.register(&schema("a", &["id", "y"])).unwrap();
        assert_eq!(
            reader.schema(a3.id).as_deref(),
            Some(&*a3),
            "read-only picks up new versions"
        );
        drop(registry);
        let reopened = SchemaRegistry::open(dir.path()).unwrap();
        assert_eq!(reopened.all().len(), 4);
        assert_eq!(reopened.schema(SchemaId(3)).as_deref(), Some(&*a2));
        assert_eq!(
            reopened.register(&schema("a", &["id", "x"])).unwrap().id,
            SchemaId(3)
        );
    }

    #[test]
    fn a_torn_last_entry_is_cut_off_and_its_id_given_again() {
        let dir = tempfile::tempdir().unwrap();
        let registry = SchemaRegistry::open(dir.path()).unwrap();
        registry.register(&schema("a", &["id"])).unwrap();
        registry.register(&schema("b", &["id"])).unwrap();
        drop(registry);
        let path = dir.path().join(FILE_NAME);
        let len = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let registry = SchemaRegistry::open(dir.path()).unwrap();
        assert_eq!(registry.all().len(), 1);
        let c = registry.register(&schema("c", &["id"])).unwrap();
        assert_eq!(c.id, SchemaId(2));
        drop(registry);
        assert_eq!(SchemaRegistry::open(dir.path()).unwrap().all().len(), 2);
    }
}
