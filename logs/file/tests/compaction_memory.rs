//! The memory a compaction pass takes does not grow with the log: over 10,000 and over
//! 100,000 distinct keys, each written twice, the peak of what the pass allocates stays under
//! a fixed bound (its key map's `compaction_memory` and a segment's buffers), and the
//! compacted log holds each key's newest record and nothing older. Before, a pass held every
//! key of the log and the set of every offset it kept (the 3M-row table of the issue: 585–668
//! MB for the pass).
#![allow(unsafe_code)] // the counting allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use siphon_core::log::{ChangeLog, Consumer, LogReader, NewRecord, RecordFlags};
use siphon_core::units::ByteSize;
use siphon_log_file::{FileLog, FileLogConfig};

/// The system allocator, counting what is allocated now and the most since the last reset.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes a compaction pass allocated over a log of `keys` keys written twice.
fn peak_of_a_pass(keys: usize) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        segment_size: ByteSize(1 << 20),
        compaction_memory: ByteSize(1 << 20),
        compaction_dirty_ratio: 0.0,
        ..FileLogConfig::default()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    for round in 0..2 {
        for batch in (0..keys).collect::<Vec<_>>().chunks(5000) {
            let records: Vec<NewRecord> = batch
                .iter()
                .map(|k| NewRecord {
                    key: format!("public.items:{k:08}").into_bytes(),
                    value: format!("{round}:{k}:{}", "v".repeat(60)).into_bytes(),
                    flags: RecordFlags::TXN_END,
                })
                .collect();
            log.append_blocking(&records).unwrap();
        }
    }
    // One more segment, so that every record above is in a closed one.
    let tail: Vec<NewRecord> = (0..20)
        .map(|i| NewRecord {
            key: Vec::new(),
            value: vec![b'x'; 60_000 + i],
            flags: RecordFlags::TXN_END,
        })
        .collect();
    log.append_blocking(&tail).unwrap();
    let everyone = [Consumer {
        name: "sink".into(),
        next_offset: log.durable_end(),
        keeps_history: false,
    }];
    let mut peak = 0;
    let mut compacted = 0;
    // Passes until the log is clean (a full key map leaves the rest to the next).
    for _ in 0..100 {
        let before = NOW.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let report = log.maintain_blocking(&everyone).unwrap();
        peak = peak.max(PEAK.load(Ordering::Relaxed) - before);
        compacted += report.records_compacted;
        if report.records_compacted == 0 && compacted > 0 {
            break;
        }
    }
    assert_eq!(
        compacted as usize, keys,
        "each key's older record compacted"
    );
    let mut reader = log.file_reader(0).unwrap();
    let mut newest = 0;
    loop {
        let records = reader.read_available(10_000).unwrap();
        if records.is_empty() {
            break;
        }
        newest += records
            .iter()
            .filter(|r| !r.key.is_empty() && r.value.starts_with(b"1:"))
            .count();
    }
    assert_eq!(newest, keys, "each key's newest record kept");
    peak
}

#[test]
fn a_pass_takes_bounded_memory_however_many_keys_the_log_holds() {
    let small = peak_of_a_pass(10_000);
    let large = peak_of_a_pass(100_000);
    eprintln!("peak of a pass: {small} bytes over 10,000 keys, {large} over 100,000");
    // The key map (1 MiB), a segment's read and write buffers (about 1.3 MiB), a frame.
    let bound = 4 << 20;
    assert!(
        small < bound && large < bound,
        "peak of a pass: {small} bytes over 10,000 keys, {large} over 100,000 (bound {bound})"
    );
}
