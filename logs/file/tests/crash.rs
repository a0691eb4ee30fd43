//! kill -9 of a process appending to the file log, many times: on reopen every acknowledged
//! (fsynced) record is intact, offsets are dense, and nothing follows a torn record.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use siphon_core::log::{LogReader, NewRecord};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLog, FileLogConfig};

const DIR_VAR: &str = "SIPHON_CRASH_CHILD_DIR";

fn config() -> FileLogConfig {
    FileLogConfig {
        segment_size: ByteSize(256 << 10),
        ..FileLogConfig::default()
    }
}

/// The value stored at `offset`: its length and content follow from the offset.
fn value_for(offset: u64) -> Vec<u8> {
    let len = 20 + (offset * 7919 % 900) as usize;
    (0..len).map(|i| (offset as usize + i) as u8).collect()
}

/// Not a test: the child process that the crash test kills. It appends until killed and
/// prints the end offset after each acknowledged append.
#[test]
#[ignore = "helper process for kill_9_while_appending, started by it"]
fn crash_child_appender() {
    let dir = std::env::var(DIR_VAR).expect("run by kill_9_while_appending");
    let log = FileLog::open(&dir, config()).unwrap();
    let mut next = log
        .last_record_blocking()
        .unwrap()
        .map_or(0, |r| r.offset + 1);
    let mut out = std::io::stdout().lock();
    for batch in 0u64.. {
        let n = 1 + batch % 37;
        let records: Vec<_> = (next..next + n)
            .map(|o| NewRecord {
                key: o.to_le_bytes().to_vec(),
                value: value_for(o),
                ..Default::default()
            })
            .collect();
        let range = log.append_blocking(&records).unwrap();
        assert_eq!(range.start, next);
        next = range.end;
        writeln!(out, "{next}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_while_appending() {
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged = 0u64;
    for round in 0..25u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_child_appender",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(end) = line.trim().parse::<u64>()
                    && tx.send(end).is_err()
                {
                    return;
                }
            }
        });
        // Let it append for a while, varying where the kill lands.
        let until = Instant::now() + Duration::from_millis(30 + round * 17 % 120);
        let mut seen_this_round = 0;
        while Instant::now() < until || seen_this_round == 0 {
            if let Ok(end) = rx.recv_timeout(Duration::from_secs(20)) {
                acknowledged = acknowledged.max(end);
                seen_this_round += 1;
            } else {
                panic!("the child appended nothing in 20 s");
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        while let Ok(end) = rx.try_recv() {
            acknowledged = acknowledged.max(end);
        }

        let log = FileLog::open(dir.path(), config()).unwrap();
        let mut reader = log.file_reader(0).unwrap();
        let mut expected = 0u64;
        loop {
            let batch = reader.read_available(10_000).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                assert_eq!(rec.offset, expected, "round {round}: offsets must be dense");
                assert_eq!(
                    rec.value,
                    value_for(rec.offset),
                    "round {round}: record {} damaged",
                    rec.offset
                );
                expected += 1;
            }
        }
        assert!(
            expected >= acknowledged,
            "round {round}: acknowledged up to {acknowledged}, but the log ends at {expected}"
        );
    }
    assert!(
        acknowledged > 1000,
        "too few appends to mean anything: {acknowledged}"
    );
}
