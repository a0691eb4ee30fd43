//! The `log_segment` target's two ways of making a log directory, and its checks.
//!
//! Raw (`raw`): the input's bytes are the files.
//!
//! ```text
//! one segment:   mode bit 1 clear; the rest is 00000000000000000000.log
//! two segments:  mode bit 1 set; [mode bit 2: index_len:u16le  index bytes]
//!                first_len:u16le  first segment  second_base:u16le  second segment
//! ```
//!
//! Damaged (`damaged`): records are appended through the log, then its files changed.
//!
//! ```text
//! input   = interval:u8  count:u8  record{count % 48}  damage*
//! record  = key_len:u8 (% 8)  value_len:u8 (× 8 bytes)  flags:u8 (bit 7: the batch ends)
//! damage  = file:u8 (% files, by name)  position:u16le  op:u8
//!           (op bit 0: cut the file at position; else xor the byte there with op)
//! ```

use std::fs;
use std::path::Path;

use siphon_core::log::{ChangeLog, LogId, LogReader, LogRecord, NewRecord, RecordFlags};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLog, FileLogConfig};

/// A directory that goes when dropped, in memory where there is a tmpfs.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new();
    if shm.is_dir() {
        builder.tempdir_in(shm)
    } else {
        builder.tempdir()
    }
    .expect("a scratch directory")
}

fn segment_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// A record's frame as the log writes it (logs/file/src/frame.rs): length, CRC32C, body.
pub fn frame(record: &LogRecord) -> Vec<u8> {
    let mut body = Vec::with_capacity(21 + record.key.len() + record.value.len());
    body.extend_from_slice(&record.offset.to_le_bytes());
    body.extend_from_slice(&record.timestamp_ms.to_le_bytes());
    body.push(record.flags.0);
    body.extend_from_slice(&(record.key.len() as u32).to_le_bytes());
    body.extend_from_slice(&record.key);
    body.extend_from_slice(&record.value);
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Every record from the log's start to its durable end; stops at an error (a damaged
/// record may be one).
fn read_all(log: &FileLog) -> Vec<LogRecord> {
    let Ok(mut reader) = log.file_reader(log.start_offset()) else {
        return Vec::new();
    };
    let mut out: Vec<LogRecord> = Vec::new();
    while let Ok(records) = reader.read_available(64) {
        if records.is_empty() {
            break;
        }
        out.extend(records);
    }
    for pair in out.windows(2) {
        assert!(
            pair[0].offset < pair[1].offset,
            "offsets went {} then {}",
            pair[0].offset,
            pair[1].offset
        );
    }
    out
}

/// A log whose recovery is done takes an append, and a reader gets it back.
fn appends_after_recovery(log: &FileLog) {
    let record = NewRecord {
        key: b"after".to_vec(),
        value: b"recovery".to_vec(),
        flags: RecordFlags::TXN_END,
    };
    let Ok(range) = log.append_blocking(std::slice::from_ref(&record)) else {
        return;
    };
    let mut reader = log
        .file_reader(range.start)
        .expect("a reader at the append");
    let read = reader.read_available(1).expect("the append reads back");
    assert_eq!(
        read.first().map(|r| (r.offset, &r.key, &r.value, r.flags)),
        Some((range.start, &record.key, &record.value, record.flags)),
        "an append after recovery did not read back"
    );
}

fn config(index_interval: u64) -> FileLogConfig {
    FileLogConfig {
        segment_size: ByteSize(4096),
        index_interval: ByteSize(index_interval.max(1)),
        ..FileLogConfig::default()
    }
}

/// Opens the log in `dir` read-only, then for writing (recovery), reading each to its end;
/// `check` sees every record read.
fn open_and_read(dir: &Path, index_interval: u64, check: &dyn Fn(&LogRecord)) {
    if let Ok(log) = FileLog::open_read_only(dir, config(index_interval)) {
        read_all(&log).iter().for_each(check);
    }
    if let Ok(log) = FileLog::open(dir, config(index_interval)) {
        read_all(&log).iter().for_each(check);
        appends_after_recovery(&log);
    }
}

fn u16_at(data: &mut &[u8]) -> Option<u16> {
    let (head, rest) = data.split_first_chunk::<2>()?;
    *data = rest;
    Some(u16::from_le_bytes(*head))
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = data.split_at(n.min(data.len()));
    *data = rest;
    head
}

/// The input's bytes as segment files (see the module's doc).
pub fn raw(mode: u8, mut data: &[u8]) {
    let dir = scratch();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if mode & 2 == 0 {
        files.push((segment_name(0), data.to_vec()));
    } else {
        let index = if mode & 4 != 0 {
            let Some(len) = u16_at(&mut data) else { return };
            Some(take(&mut data, usize::from(len)).to_vec())
        } else {
            None
        };
        let Some(len) = u16_at(&mut data) else { return };
        files.push((segment_name(0), take(&mut data, usize::from(len)).to_vec()));
        let Some(base) = u16_at(&mut data) else {
            return;
        };
        files.push((segment_name(u64::from(base)), data.to_vec()));
        if let Some(index) = index {
            files.push((format!("{:020}.idx", 0), index));
        }
    }
    for (name, bytes) in &files {
        fs::write(dir.path().join(name), bytes).unwrap();
    }
    fs::write(dir.path().join("ID"), format!("{}\n", LogId::random())).unwrap();
    let segments: Vec<&[u8]> = files
        .iter()
        .filter(|(n, _)| n.ends_with(".log"))
        .map(|(_, b)| &b[..])
        .collect();
    open_and_read(dir.path(), 4096, &|record| {
        let frame = frame(record);
        assert!(
            segments
                .iter()
                .any(|s| s.windows(frame.len()).any(|w| w == frame)),
            "a record read is in no segment file: {record:?}"
        );
    });
}

/// Records appended through the log, its files then damaged (see the module's doc).
pub fn damaged(mut data: &[u8]) {
    let (Some(&interval), Some(&count)) = (data.first(), data.get(1)) else {
        return;
    };
    data = &data[2..];
    let interval = u64::from(interval) * 16;
    let dir = scratch();
    let mut written: Vec<NewRecord> = Vec::new();
    {
        let log = FileLog::open(dir.path(), config(interval)).expect("a new log opens");
        let mut batch = Vec::new();
        for i in 0..count % 48 {
            let [key_len, value_len, flags] = match take(&mut data, 3) {
                &[a, b, c] => [a, b, c],
                _ => break,
            };
            let fill = |len: usize, salt: u8| -> Vec<u8> {
                (0..len)
                    .map(|j| (j as u8).wrapping_mul(31) ^ i ^ salt)
                    .collect()
            };
            batch.push(NewRecord {
                key: fill(usize::from(key_len % 8), 0x5a),
                value: fill(usize::from(value_len) * 8, 0xa5),
                flags: RecordFlags(flags & 0x1f),
            });
            if flags & 0x80 != 0 {
                log.append_blocking(&batch).expect("an append");
                written.append(&mut batch);
            }
        }
        if !batch.is_empty() {
            log.append_blocking(&batch).expect("an append");
            written.append(&mut batch);
        }
    }
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "LOCK")
        .collect();
    names.sort();
    while data.len() >= 4 {
        let d = take(&mut data, 4);
        let path = dir.path().join(&names[usize::from(d[0]) % names.len()]);
        let Ok(mut bytes) = fs::read(&path) else {
            continue;
        };
        let at = usize::from(u16::from_le_bytes([d[1], d[2]]));
        if d[3] & 1 != 0 {
            bytes.truncate(at);
        } else if let Some(b) = bytes.get_mut(at) {
            *b ^= d[3];
        }
        fs::write(&path, bytes).unwrap();
    }
    open_and_read(dir.path(), interval, &|record| {
        let was = usize::try_from(record.offset)
            .ok()
            .and_then(|o| written.get(o));
        assert_eq!(
            was.map(|w| (&w.key, &w.value, w.flags)),
            Some((&record.key, &record.value, record.flags)),
            "record {} read back is not the one appended",
            record.offset
        );
    });
}
