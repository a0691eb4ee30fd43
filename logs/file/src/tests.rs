use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use siphon_core::log::RecordFlags;
use siphon_core::units::{ByteSize, HumanDuration};

fn small_config() -> FileLogConfig {
    FileLogConfig {
        segment_size: ByteSize(4096),
        index_interval: ByteSize(256),
        ..FileLogConfig::default()
    }
}

fn rec(key: &str, value: &str) -> NewRecord {
    NewRecord {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        flags: RecordFlags::default(),
    }
}

fn read_all(log: &FileLog, from: u64) -> Vec<LogRecord> {
    let mut reader = log.file_reader(from).unwrap();
    let mut out = Vec::new();
    loop {
        let batch = reader.read_available(1000).unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch);
    }
}

#[test]
fn appends_read_back_in_order_across_segments_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    let mut expected = Vec::new();
    for batch in 0..50 {
        let records: Vec<_> = (0..7)
            .map(|i| rec(&format!("k{i}"), &format!("v{batch}-{i}")))
            .collect();
        let range = log.append_blocking(&records).unwrap();
        assert_eq!(range, batch * 7..batch * 7 + 7);
        expected.extend(records);
    }
    assert!(
        log.stats().segments > 3,
        "small segments roll: {:?}",
        log.stats()
    );
    let check = |log: &FileLog| {
        let all = read_all(log, 0);
        assert_eq!(all.len(), expected.len());
        for (i, (got, want)) in all.iter().zip(&expected).enumerate() {
            assert_eq!(got.offset, i as u64);
            assert_eq!((&got.key, &got.value), (&want.key, &want.value));
        }
        // Seeking into the middle of a segment through the sparse index.
        for from in [0, 1, 13, 100, 200, 349] {
            assert_eq!(read_all(log, from).first().map(|r| r.offset), Some(from));
        }
        assert!(read_all(log, 350).is_empty());
    };
    check(&log);
    drop(log);
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    check(&log);
    assert_eq!(
        log.append_blocking(&[rec("k", "after reopen")]).unwrap(),
        350..351
    );
    assert_eq!(
        log.last_record_blocking().unwrap().unwrap().value,
        b"after reopen"
    );
}

#[test]
fn a_second_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _log = FileLog::open(dir.path(), small_config()).unwrap();
    let err = FileLog::open(dir.path(), small_config()).unwrap_err();
    assert!(
        err.to_string().contains("in use by another siphon"),
        "{err}"
    );
    // Readers are welcome.
    FileLog::open_read_only(dir.path(), small_config()).unwrap();
}

#[tokio::test]
async fn readers_wake_on_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    let mut reader = log.file_reader(0).unwrap();
    let waiter = tokio::spawn(async move { reader.next_batch(10).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "the reader returned before anything was appended"
    );
    ChangeLog::append(&log, vec![rec("a", "1"), rec("b", "2")])
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1]);
}

#[tokio::test]
async fn interval_fsync_makes_records_visible_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        fsync: FsyncPolicy::Interval,
        fsync_interval: HumanDuration(Duration::from_millis(20)),
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    log.append_blocking(&[rec("a", "1")]).unwrap();
    let mut reader = log.file_reader(0).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), reader.next_batch(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
}

#[test]
fn read_only_refresh_sees_new_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    log.append_blocking(&[rec("a", "1")]).unwrap();
    let ro = FileLog::open_read_only(dir.path(), small_config()).unwrap();
    assert_eq!(ro.durable_end(), 1);
    let more: Vec<_> = (0..100).map(|i| rec("b", &format!("{i:0100}"))).collect();
    log.append_blocking(&more).unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.durable_end(), 101);
    assert_eq!(read_all(&ro, 0).len(), 101);
}

#[test]
fn reading_below_the_start_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        retention_size: Some(ByteSize(1)),
        compaction: false,
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    for _ in 0..20 {
        log.append_blocking(&[rec("", &"x".repeat(1000))]).unwrap();
    }
    let report = log.maintain_blocking(&[]).unwrap();
    assert!(report.segments_deleted > 0);
    let start = ChangeLog::start_offset(&log);
    assert!(start > 0);
    match log.file_reader(0) {
        Err(Error::OffsetOutOfRange {
            requested: 0,
            start: s,
            ..
        }) => assert_eq!(s, start),
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
}

#[test]
fn max_size_drops_unread_records_and_reports_who_lost_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        max_size: Some(ByteSize(8192)),
        compaction: false,
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    for _ in 0..40 {
        log.append_blocking(&[rec("", &"y".repeat(500))]).unwrap();
    }
    let consumers = [
        Consumer {
            name: "slow".into(),
            next_offset: 2,
            keeps_history: false,
        },
        Consumer {
            name: "fast".into(),
            next_offset: 40,
            keeps_history: false,
        },
    ];
    let report = log.maintain_blocking(&consumers).unwrap();
    assert!(log.stats().size_bytes <= 8192, "{:?}", log.stats());
    assert_eq!(report.lost.len(), report.segments_deleted, "{report:?}");
    assert!(report.lost.iter().all(|(name, _)| name == "slow"));
    assert_eq!(report.lost[0].1.start, 2);
    assert_eq!(
        report.lost.last().unwrap().1.end,
        ChangeLog::start_offset(&log)
    );
}

#[test]
fn compaction_keeps_the_newest_record_per_key_and_history_readers_get_everything() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    for round in 0..30 {
        let records: Vec<_> = (0..10)
            .map(|k| rec(&format!("key{k}"), &format!("{round}:{k:>80}")))
            .collect();
        log.append_blocking(&records).unwrap();
    }
    // A history sink at offset 100: nothing from 100 on may be compacted.
    let history = Consumer {
        name: "audit".into(),
        next_offset: 100,
        keeps_history: true,
    };
    let report = log
        .maintain_blocking(std::slice::from_ref(&history))
        .unwrap();
    assert!(report.records_compacted > 0, "{report:?}");
    let all = read_all(&log, 0);
    let offsets: Vec<u64> = all.iter().map(|r| r.offset).collect();
    assert!(
        (100..300).all(|o| offsets.contains(&o)),
        "a record the history sink had not read was compacted"
    );
    assert!(all.iter().filter(|r| r.offset < 100).count() < 100);
    // Folding the compacted log gives the same state as folding the full one.
    let state: HashMap<_, _> = all
        .iter()
        .map(|r| (r.key.clone(), r.value.clone()))
        .collect();
    assert_eq!(state.len(), 10);
    for k in 0..10 {
        assert_eq!(
            state[format!("key{k}").as_bytes()],
            format!("29:{k:>80}").into_bytes()
        );
    }
}

#[test]
fn compaction_keeps_the_records_a_partial_row_needs() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    let partial = |key: &str, value: &str| NewRecord {
        flags: RecordFlags::PARTIAL,
        ..rec(key, value)
    };
    // k: a whole row, then two updates that leave a column unchanged. j: a whole row, a
    // partial update, then a whole row again.
    log.append_blocking(&[
        rec("k", "whole"),
        rec("j", "old"),
        partial("k", "update 1"),
        partial("j", "update"),
        partial("k", "update 2"),
        rec("j", "whole again"),
    ])
    .unwrap();
    // Enough of other keys to close the segments holding those.
    for round in 0..20 {
        let records: Vec<_> = (0..10)
            .map(|k| rec(&format!("other{k}"), &format!("{round}:{k:>80}")))
            .collect();
        log.append_blocking(&records).unwrap();
    }
    let report = log.maintain_blocking(&[]).unwrap();
    assert!(report.records_compacted > 0, "{report:?}");
    let kept: Vec<(Vec<u8>, Vec<u8>)> = read_all(&log, 0)
        .into_iter()
        .filter(|r| r.key == b"k" || r.key == b"j")
        .map(|r| (r.key, r.value))
        .collect();
    let pair = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
    assert_eq!(
        kept,
        [
            pair("k", "whole"),
            pair("k", "update 1"),
            pair("k", "update 2"),
            pair("j", "whole again"),
        ]
    );
}

#[test]
fn compaction_keeps_the_old_keys_records_a_moved_partial_row_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        delete_retention: HumanDuration(Duration::ZERO),
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    let with = |flags: RecordFlags, key: &str, value: &str| NewRecord {
        flags,
        ..rec(key, value)
    };
    let fill = |log: &FileLog, round: usize| {
        let records: Vec<_> = (0..10)
            .map(|k| rec(&format!("other{k}"), &format!("{round}:{k:>80}")))
            .collect();
        log.append_blocking(&records).unwrap();
    };
    let everyone_read = |log: &FileLog| {
        [Consumer {
            name: "sink".into(),
            next_offset: log.durable_end(),
            keeps_history: false,
        }]
    };
    // k1: a whole row and a partial update; then its key changes to k2, which leaves a
    // column unchanged (the delete of k1 goes with the next record, the create of k2).
    log.append_blocking(&[
        rec("k1", "whole"),
        with(RecordFlags::PARTIAL, "k1", "update"),
        with(
            RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
            "k1",
            "",
        ),
        with(RecordFlags::PARTIAL, "k2", "moved"),
    ])
    .unwrap();
    for round in 0..20 {
        fill(&log, round);
    }
    log.maintain_blocking(&everyone_read(&log)).unwrap();
    let moved: Vec<(Vec<u8>, Vec<u8>)> = read_all(&log, 0)
        .into_iter()
        .filter(|r| r.key.starts_with(b"k"))
        .map(|r| (r.key, r.value))
        .collect();
    let pair = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
    // Kept, k1's row now under the key it serves (the values, the events, as written); k1's
    // delete is its own.
    assert_eq!(
        moved,
        [
            pair("k2", "whole"),
            pair("k2", "update"),
            pair("k1", ""),
            pair("k2", "moved")
        ],
        "the moved row lost the records it takes its unchanged column from"
    );
    // Once k2 has a whole row of its own, none of it is needed.
    log.append_blocking(&[rec("k2", "whole again")]).unwrap();
    for round in 20..40 {
        fill(&log, round);
    }
    log.maintain_blocking(&everyone_read(&log)).unwrap();
    let kept: Vec<(Vec<u8>, Vec<u8>)> = read_all(&log, 0)
        .into_iter()
        .filter(|r| r.key.starts_with(b"k"))
        .map(|r| (r.key, r.value))
        .collect();
    assert_eq!(kept, [pair("k2", "whole again")]);
}

/// Appends `records` with a segment's worth of other keys after them, so that they end up
/// in closed segments; then runs maintenance with every record read by everyone.
fn close_and_compact(log: &FileLog, records: &[NewRecord]) {
    log.append_blocking(records).unwrap();
    for round in 0..20 {
        let fill: Vec<_> = (0..10)
            .map(|k| rec(&format!("fill{k}"), &format!("{round}:{k:>80}")))
            .collect();
        log.append_blocking(&fill).unwrap();
    }
    let everyone = [Consumer {
        name: "sink".into(),
        next_offset: log.durable_end(),
        keeps_history: false,
    }];
    log.maintain_blocking(&everyone).unwrap();
}

fn flagged(flags: RecordFlags, key: &str, value: &str) -> NewRecord {
    NewRecord {
        flags,
        ..rec(key, value)
    }
}

/// The kept records of keys starting with `k`, as (key, value): the key as written, where
/// the value names it (`key=value`: compaction keeps a moved row's old-key records under the
/// new key), else the record's.
fn kept(log: &FileLog) -> Vec<(String, String)> {
    read_all(log, 0)
        .into_iter()
        .filter(|r| r.key.starts_with(b"k"))
        .map(|r| {
            let value = String::from_utf8(r.value).unwrap();
            match value.split_once('=') {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => (String::from_utf8(r.key).unwrap(), value),
            }
        })
        .collect()
}

fn expiring() -> FileLogConfig {
    FileLogConfig {
        delete_retention: HumanDuration(Duration::ZERO),
        ..small_config()
    }
}

#[test]
fn a_delete_a_moved_row_needs_does_not_expire_when_its_key_comes_back() {
    // k1 moves to k2 (which needs k1's row), then k1 is made again and deleted again: the
    // first delete of k1 must stay while k1's first row does, or a replay brings k1 back.
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), expiring()).unwrap();
    let delete = RecordFlags::TOMBSTONE;
    close_and_compact(
        &log,
        &[
            rec("k1", "k1=first"),
            flagged(delete.with(RecordFlags::WITH_NEXT), "k1", "k1="),
            flagged(RecordFlags::PARTIAL, "k2", "moved"),
            rec("k1", "again"),
            flagged(delete, "k1", ""),
        ],
    );
    let kept = kept(&log);
    let alive = kept.iter().fold(HashMap::new(), |mut rows, (k, v)| {
        if v.is_empty() {
            rows.remove(k);
        } else {
            rows.insert(k.clone(), v.clone());
        }
        rows
    });
    assert!(!alive.contains_key("k1"), "k1 came back: {kept:?}");
    assert!(
        kept.contains(&("k1".into(), "first".into())),
        "k2's base went: {kept:?}"
    );
}

#[test]
fn a_key_change_whose_create_was_compacted_lends_its_chain_to_no_one() {
    // k2 got a whole row, so its create from k1 is dropped; the record after k1's delete
    // is then a partial update of another key, which must keep its own whole row.
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    close_and_compact(
        &log,
        &[
            rec("kK", "whole"),
            rec("k1", "first"),
            flagged(
                RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
                "k1",
                "",
            ),
            flagged(RecordFlags::PARTIAL, "k2", "moved"),
            flagged(RecordFlags::PARTIAL, "kK", "update"),
            rec("k2", "whole"),
        ],
    );
    close_and_compact(&log, &[]);
    let kept = kept(&log);
    assert!(
        kept.contains(&("kK".into(), "whole".into())),
        "kK lost the whole row its update needs: {kept:?}"
    );
}

#[test]
fn a_key_change_cut_at_the_durable_end_keeps_the_old_row() {
    // Compaction runs between the two halves of a key change.
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    log.append_blocking(&[rec("k1", "first")]).unwrap();
    close_and_compact(&log, &[]);
    log.append_blocking(&[flagged(
        RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
        "k1",
        "",
    )])
    .unwrap();
    // The delete is the log's last record: its create is not appended yet. (A history
    // sink that moved on makes compaction run again.)
    let everyone = [Consumer {
        name: "audit".into(),
        next_offset: log.durable_end(),
        keeps_history: true,
    }];
    log.maintain_blocking(&everyone).unwrap();
    assert!(
        kept(&log).contains(&("k1".into(), "first".into())),
        "the old row went before its key change's create arrived: {:?}",
        kept(&log)
    );
}

#[test]
fn compaction_never_marks_the_first_half_of_a_key_change_as_a_transaction_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    close_and_compact(
        &log,
        &[
            rec("k0", "old"),
            rec("k0", "superseded"),
            flagged(
                RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
                "k1",
                "",
            ),
            flagged(RecordFlags::PARTIAL, "k2", "moved"),
        ],
    );
    let delete = read_all(&log, 0)
        .into_iter()
        .find(|r| r.flags.contains(RecordFlags::WITH_NEXT))
        .unwrap();
    assert!(!delete.flags.contains(RecordFlags::TXN_END));
}

#[test]
fn readers_see_only_durable_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    log.append_blocking(&[rec("a", "durable")]).unwrap();
    log.append_unsynced_blocking(&[rec("b", "written, not fsynced")])
        .unwrap();
    let mut reader = log.file_reader(0).unwrap();
    let seen: Vec<u64> = reader
        .read_available(10)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(seen, [0], "a reader saw a record that was not durable");
    // A source resumes after what it appended (the_last_record_includes_an_unsynced_append).
    assert_eq!(log.last_record_blocking().unwrap().unwrap().offset, 1);
    log.append_blocking(&[rec("c", "commit")]).unwrap();
    let seen: Vec<u64> = reader
        .read_available(10)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(seen, [1, 2]);
}

#[test]
fn time_retention_deletes_only_what_every_sink_has_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        retention: Some(HumanDuration(Duration::ZERO)),
        compaction: false,
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    for i in 0..40 {
        log.append_blocking(&[rec("k", &format!("{i}:{}", "r".repeat(400)))])
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(2)); // older than "0s" by a millisecond
    let behind = Consumer {
        name: "slow".into(),
        next_offset: 12,
        keeps_history: false,
    };
    let report = log
        .maintain_blocking(std::slice::from_ref(&behind))
        .unwrap();
    let start = ChangeLog::start_offset(&log);
    assert!(report.segments_deleted > 0, "{report:?}");
    assert!(
        start > 0 && start <= 12,
        "retention went past an unread record: {start}"
    );
    assert!(report.lost.is_empty());
    let everyone = Consumer {
        next_offset: 40,
        ..behind
    };
    log.maintain_blocking(&[everyone]).unwrap();
    // All but the segment that holds the last record, which a source resumes from.
    let left = read_all(&log, ChangeLog::start_offset(&log));
    assert_eq!(left.last().unwrap().offset, 39);
    assert!(log.stats().segments <= 2, "{:?}", log.stats());
}

#[test]
fn torn_tail_is_cut_on_reopen_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    log.append_blocking(&[rec("a", "first"), rec("b", "second")])
        .unwrap();
    drop(log);
    let path = segment::log_path(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2, 3]); // half a frame header and body
    fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.durable_end(), 2);
    assert_eq!(log.append_blocking(&[rec("c", "third")]).unwrap(), 2..3);
    let values: Vec<_> = read_all(&log, 0).into_iter().map(|r| r.value).collect();
    assert_eq!(
        values,
        [b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]
    );
}

#[test]
fn corruption_in_a_closed_segment_is_reported_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    for _ in 0..20 {
        log.append_blocking(&[rec("k", &"z".repeat(400))]).unwrap();
    }
    drop(log);
    let path = segment::log_path(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    let mut reader = log.file_reader(0).unwrap();
    let err = reader.read_available(100).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DamagedRecord {
                offset: 0,
                position: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("record 0"), "{err}");
    // A reader from a later record of the segment names the first one it could not read.
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 0xff;
    let second = 430; // a record of a one-byte key and a 400-byte value takes 430 bytes
    bytes[second + 100] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let mut reader = log.file_reader(0).unwrap();
    let err = reader.read_available(100).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DamagedRecord {
                offset: 1,
                position: 430,
                ..
            }
        ),
        "{err}"
    );
}

/// Frames the records of `log` in its only segment: `(offset, byte position, length)`.
fn frames(log: &FileLog) -> Vec<(u64, u64, u64)> {
    let mut position = 0;
    read_all(log, 0)
        .iter()
        .map(|r| {
            let len = frame::framed_len(r) as u64;
            position += len;
            (r.offset, position - len, len)
        })
        .collect()
}

#[test]
fn damage_in_the_middle_of_the_last_segment_is_reported_not_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), FileLogConfig::default()).unwrap();
    for i in 0..20 {
        log.append_blocking(&[rec("k", &format!("durable record {i}"))])
            .unwrap();
    }
    let (_, position, len) = frames(&log)[7];
    drop(log);
    let path = segment::log_path(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[(position + len - 2) as usize] ^= 0x01; // one bit of record 7's value
    fs::write(&path, &bytes).unwrap();

    // The records after it were written and fsynced: this is damage, not a torn write, and
    // recovery must not cut them off (and the source must not resume past them).
    let err = FileLog::open(dir.path(), FileLogConfig::default()).unwrap_err();
    assert!(
        matches!(&err, Error::DamagedRecord { offset: 7, position: p, .. } if *p == position),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("record 7") && text.contains("checksum"),
        "{text}"
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the segment is left as it was"
    );
    // Read-only (siphon status, log tail) sees the same.
    let err = FileLog::open_read_only(dir.path(), FileLogConfig::default()).unwrap_err();
    assert!(
        matches!(err, Error::DamagedRecord { offset: 7, .. }),
        "{err}"
    );
}

#[test]
fn a_damaged_last_record_is_a_torn_write_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), FileLogConfig::default()).unwrap();
    for i in 0..5 {
        log.append_blocking(&[rec("k", &format!("record {i}"))])
            .unwrap();
    }
    let (_, position, len) = frames(&log)[4];
    drop(log);
    let path = segment::log_path(dir.path(), 0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[(position + len - 1) as usize] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    // Nothing whole follows it: a write the crash tore, never confirmed.
    let log = FileLog::open(dir.path(), FileLogConfig::default()).unwrap();
    assert_eq!(log.durable_end(), 4);
    assert_eq!(fs::metadata(&path).unwrap().len(), position);
}

/// The state a log leaves when folded key by key: the last record of each key, a tombstone
/// removing it. Keyless records are all kept, in order.
fn fold(records: &[(u64, &[u8], &[u8], bool)]) -> (HashMap<Vec<u8>, Vec<u8>>, Vec<u64>) {
    let mut rows = HashMap::new();
    let mut keyless = Vec::new();
    for (offset, key, value, tombstone) in records {
        if key.is_empty() {
            keyless.push(*offset);
        } else if *tombstone {
            rows.remove(*key);
        } else {
            rows.insert(key.to_vec(), value.to_vec());
        }
    }
    (rows, keyless)
}

fn tombstone(key: &str) -> NewRecord {
    NewRecord {
        flags: RecordFlags::TOMBSTONE,
        ..rec(key, "")
    }
}

#[test]
fn an_unsynced_append_that_closes_segments_loses_nothing_to_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    // Durable: a key written twice, so that compaction has something to drop in segment 0.
    log.append_blocking(&[rec("a", "old"), rec("a", "new")])
        .unwrap();
    // The start of a big transaction, not yet durable, filling several segments.
    let open: Vec<NewRecord> = (0..60)
        .map(|i| rec(&format!("t{i}"), &format!("{i:0200}")))
        .collect();
    log.append_unsynced_blocking(&open).unwrap();
    assert!(log.stats().segments > 2, "{:?}", log.stats());
    log.maintain_blocking(&[]).unwrap();
    // The transaction commits: everything it appended must be there.
    log.append_blocking(&[rec("end", "commit")]).unwrap();
    let offsets: Vec<u64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    let missing: Vec<u64> = (2..63).filter(|o| !offsets.contains(o)).collect();
    assert!(missing.is_empty(), "compaction dropped offsets {missing:?}");
}

#[test]
fn compaction_never_resurrects_a_deleted_key() {
    // The reproduction of the issue: a 3,000-byte row inserted, updated and deleted, a small
    // row right after the delete, then rows that close segments; deletes expire at once.
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        delete_retention: HumanDuration(Duration::ZERO),
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    let big = |i: usize| "x".repeat(3000 + i);
    let mut model = vec![
        rec("row1", &big(0)),
        rec("row1", &big(1)),
        tombstone("row1"),
        rec("small", "s"),
    ];
    model.extend((0..12).map(|i| rec(&format!("r{i}"), &big(i))));
    for r in &model {
        log.append_blocking(std::slice::from_ref(r)).unwrap();
    }
    let everyone_read = [Consumer {
        name: "sink".into(),
        next_offset: model.len() as u64,
        keeps_history: false,
    }];
    for _ in 0..3 {
        log.maintain_blocking(&everyone_read).unwrap();
    }
    let kept = read_all(&log, 0);
    let kept: Vec<_> = kept
        .iter()
        .map(|r| {
            let tomb = r.flags.contains(RecordFlags::TOMBSTONE);
            (r.offset, r.key.as_slice(), r.value.as_slice(), tomb)
        })
        .collect();
    let all: Vec<_> = model
        .iter()
        .enumerate()
        .map(|(o, r)| {
            let tomb = r.flags.contains(RecordFlags::TOMBSTONE);
            (o as u64, r.key.as_slice(), r.value.as_slice(), tomb)
        })
        .collect();
    assert!(
        !kept.iter().any(|(_, k, ..)| *k == b"row1"),
        "a record of the deleted key survived: {:?}",
        kept.iter()
            .map(|(o, k, ..)| (*o, String::from_utf8_lossy(k)))
            .collect::<Vec<_>>()
    );
    assert_eq!(fold(&kept).0, fold(&all).0);
}

#[test]
fn a_record_larger_than_a_reader_accepts_is_refused_at_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    // Zeroed pages are not touched until written: this costs no memory.
    let huge = NewRecord {
        key: b"k".to_vec(),
        value: vec![0; crate::frame::MAX_BODY],
        flags: RecordFlags::default(),
    };
    let err = log
        .append_blocking(&[rec("a", "before"), huge])
        .unwrap_err();
    assert!(err.to_string().contains("too large"), "{err}");
    assert_eq!(err.kind(), siphon_core::ErrorKind::Permanent);
    // Nothing of the refused call was written; the log goes on.
    assert_eq!(log.append_blocking(&[rec("b", "after")]).unwrap(), 0..1);
    assert_eq!(read_all(&log, 0).len(), 1);
}

#[test]
fn recovery_fsyncs_a_tail_it_did_not_write_before_readers_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    log.append_unsynced_blocking(&[rec("a", "written, never fsynced")])
        .unwrap();
    assert_eq!(log.durable_end(), 0);
    drop(log); // a crash of the process: the page cache keeps the bytes
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.durable_end(), 1, "the recovered record is readable");
    assert!(
        log.stats().fsyncs >= 1,
        "readers see a record that was never fsynced: {:?}",
        log.stats()
    );
}

#[test]
fn readers_racing_compaction_read_every_kept_record_intact() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        index_interval: ByteSize(64),
        ..small_config()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    let value =
        |round: u64, k: u64| format!("{round}:{k}:{}", "v".repeat(40 + (k as usize * 7) % 50));
    for round in 0..4 {
        let records: Vec<_> = (0..40)
            .map(|k| rec(&format!("k{k}"), &value(round, k)))
            .collect();
        log.append_blocking(&records).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checked = 0u64;
                let mut from = t;
                while !stop.load(Ordering::Relaxed) {
                    from = (from * 7 + 13) % log.durable_end().max(1);
                    let Ok(mut reader) = log.file_reader(from) else {
                        continue;
                    };
                    let batch = reader
                        .read_available(5)
                        .unwrap_or_else(|e| panic!("reading from {from}: {e}"));
                    for r in &batch {
                        let text = String::from_utf8(r.value.clone()).unwrap();
                        let (round, k) = text.split_once(':').unwrap();
                        let k: u64 = k.split_once(':').unwrap().0.parse().unwrap();
                        assert_eq!(text, value(round.parse().unwrap(), k), "at {}", r.offset);
                        assert_eq!(r.offset % 40, k, "offset {} holds another record", r.offset);
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    for round in 4..150 {
        let records: Vec<_> = (0..40)
            .map(|k| rec(&format!("k{k}"), &value(round, k)))
            .collect();
        log.append_blocking(&records).unwrap();
        log.maintain_blocking(&[]).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// What a generated record is: a whole row, a delete, a row leaving columns unchanged
/// (PARTIAL), or a key change to another key (a delete flagged WITH_NEXT and the new key's
/// PARTIAL create).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Whole,
    Delete,
    Partial,
    KeyChange(u8),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        5 => Just(Kind::Whole),
        2 => Just(Kind::Delete),
        3 => Just(Kind::Partial),
        1 => (1u8..6).prop_map(Kind::KeyChange),
    ]
}

type Item = (u8, u16, Kind);

/// The state a replay of `records` leaves, as a sink applies them: each key's row as its
/// whole value and the partial ones after it; the create of a key change (`…:from=k:…`)
/// takes the old key's row (which the key change's delete hands over, or, where compaction
/// dropped that delete for a newer record of the old key, the row still stored). Records name
/// their key in their value (`key:…`): compaction keeps a moved row's old-key records under
/// the new key.
fn replay(records: &[&LogRecord]) -> std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut rows = std::collections::BTreeMap::new();
    // The row a key change's delete hands to the next record, its create.
    let mut moving: Option<(u64, Vec<Vec<u8>>)> = None;
    for r in records {
        let fields: Vec<&[u8]> = r.value.split(|b| *b == b':').collect();
        let key = fields[0].to_vec();
        if key.is_empty() {
            continue;
        }
        let from = fields
            .iter()
            .find_map(|f| f.strip_prefix(b"from=".as_slice()))
            .map(<[u8]>::to_vec);
        let moved = moving
            .take()
            .filter(|(delete, _)| delete + 1 == r.offset)
            .map(|(_, row)| row);
        if r.flags.contains(RecordFlags::WITH_NEXT) {
            moving = Some((r.offset, rows.remove(&key).unwrap_or_default()));
        } else if r.flags.contains(RecordFlags::TOMBSTONE) {
            rows.remove(&key);
        } else if r.flags.contains(RecordFlags::PARTIAL) {
            let mut row = match (moved, from) {
                (Some(old), _) => old,
                (None, Some(from)) => rows.get(&from).cloned().unwrap_or_default(),
                (None, None) => rows.get(&key).cloned().unwrap_or_default(),
            };
            row.push(r.value.clone());
            rows.insert(key, row);
        } else {
            rows.insert(key, vec![r.value.clone()]);
        }
    }
    rows
}

#[derive(Debug, Clone)]
enum Step {
    Append(Vec<Item>),
    /// Appended without waiting to be durable (the start of a big transaction).
    AppendUnsynced(Vec<Item>),
    Flush,
    Reopen,
    Maintain {
        consumer: u8,
        history: bool,
    },
    /// A compaction pass that fails after rewriting this many segments (a crash or a full
    /// disk midway), leaving the rest as it was.
    MaintainCut(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => prop::collection::vec((0u8..6, 0u16..300, kind()), 1..20).prop_map(Step::Append),
        3 => prop::collection::vec((0u8..6, 0u16..300, kind()), 1..30).prop_map(Step::AppendUnsynced),
        1 => Just(Step::Flush),
        1 => Just(Step::Reopen),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(consumer, history)| Step::Maintain { consumer, history }),
        1 => (0u8..4).prop_map(Step::MaintainCut),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Append (durable or not yet), flush, reopen, retention and compaction in any order —
    /// rows leaving columns unchanged and key changes among the records, compaction's key map
    /// small enough to take several passes: the log always returns, in offset order, every
    /// record a consumer still needs, byte for byte; replaying what it returns gives the
    /// state replaying everything gives (no key comes back from the dead, no partial row
    /// loses what it builds on); and its last record is the last one appended.
    #[test]
    fn log_model(
        steps in prop::collection::vec(step(), 1..40),
        retention in prop::option::of(2000u64..20000),
        deletes_expire in any::<bool>(),
        (compaction_memory, compaction_dirty_ratio) in prop_oneof![Just((64u64 << 20, 0.0)), Just((300, 0.0)), Just((1200, 0.3))],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = FileLogConfig {
            retention_size: retention.map(ByteSize),
            delete_retention: HumanDuration(if deletes_expire { Duration::ZERO } else { Duration::from_secs(3600) }),
            compaction_memory: ByteSize(compaction_memory),
            compaction_dirty_ratio,
            ..small_config()
        };
        let mut log = FileLog::open(dir.path(), config.clone()).unwrap();
        // The model: every record ever appended, by offset.
        let mut model: Vec<NewRecord> = Vec::new();
        // Two consumers whose cursors only move forward: a plain sink and a history sink.
        let mut plain = 0u64;
        let mut audit = 0u64;
        // Records appended since the last durable append or flush.
        let mut unsynced = false;
        for step in steps {
            let sync = matches!(step, Step::Append(_));
            match step {
                Step::Append(items) | Step::AppendUnsynced(items) => {
                    let mut records: Vec<NewRecord> = Vec::new();
                    for (i, (k, len, kind)) in items.iter().enumerate() {
                        // Key 0 stands for a keyless table: never compacted. Values name their
                        // key and are distinct, so that a record read back is the right one.
                        let name = |key: u8| if key == 0 { String::new() } else { char::from(b'a' + key).to_string() };
                        let record = |key: u8, flags: RecordFlags, from: &str| NewRecord {
                            key: name(key).into_bytes(),
                            value: format!("{}:{}:{i}:{from}:{}", name(key), model.len(), "v".repeat(*len as usize)).into_bytes(),
                            flags,
                        };
                        match kind {
                            Kind::Whole => records.push(record(*k, RecordFlags::default(), "")),
                            Kind::Delete => records.push(record(*k, RecordFlags::TOMBSTONE, "")),
                            Kind::Partial => records.push(record(*k, RecordFlags::PARTIAL, "")),
                            Kind::KeyChange(to) if *k != 0 && to != k => {
                                records.push(record(*k, RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT), ""));
                                records.push(record(*to, RecordFlags::PARTIAL, &format!("from={}", name(*k))));
                            }
                            Kind::KeyChange(_) => records.push(record(*k, RecordFlags::default(), "")),
                        }
                    }
                    let range = if sync {
                        log.append_blocking(&records).unwrap()
                    } else {
                        log.append_unsynced_blocking(&records).unwrap()
                    };
                    prop_assert_eq!(range.start, model.len() as u64);
                    model.extend(records);
                    unsynced = !sync;
                }
                Step::Flush => {
                    log.flush_blocking().unwrap();
                    unsynced = false;
                }
                Step::Reopen => {
                    drop(log);
                    log = FileLog::open(dir.path(), config.clone()).unwrap();
                    unsynced = false;
                }
                Step::Maintain { consumer, history } => {
                    let cursor = if history { &mut audit } else { &mut plain };
                    *cursor = (*cursor).max(u64::from(consumer) * model.len() as u64 / 255);
                    let consumers = [
                        Consumer { name: "plain".into(), next_offset: plain, keeps_history: false },
                        Consumer { name: "audit".into(), next_offset: audit, keeps_history: true },
                    ];
                    log.maintain_blocking(&consumers).unwrap();
                }
                Step::MaintainCut(after) => {
                    let consumers = [
                        Consumer { name: "plain".into(), next_offset: plain, keeps_history: false },
                        Consumer { name: "audit".into(), next_offset: audit, keeps_history: true },
                    ];
                    super::compact::FAIL_REWRITE_AFTER.set(Some(usize::from(after)));
                    let _ = log.maintain_blocking(&consumers);
                    super::compact::FAIL_REWRITE_AFTER.set(None);
                }
            }
            if unsynced {
                prop_assert!(log.durable_end() <= model.len() as u64);
                continue;
            }
            prop_assert_eq!(log.durable_end(), model.len() as u64);
            let start = ChangeLog::start_offset(&log);
            prop_assert!(start <= plain.min(audit), "retention deleted unread records: start {}", start);
            let all = read_all(&log, start);
            let mut newest: HashMap<&[u8], u64> = HashMap::new();
            for (o, r) in model.iter().enumerate() {
                newest.insert(&r.key, o as u64);
            }
            let mut last = None;
            for r in &all {
                prop_assert!(last.is_none_or(|l| r.offset > l));
                last = Some(r.offset);
                let want = &model[r.offset as usize];
                // The key may be the one a moved row's record now serves; never emptied.
                prop_assert_eq!(r.key.is_empty(), want.key.is_empty());
                prop_assert_eq!(&r.value, &want.value);
                prop_assert_eq!(r.flags.0 & !(RecordFlags::TXN_END.0 | RecordFlags::MOVED.0), want.flags.0);
            }
            let present: std::collections::HashSet<u64> = all.iter().map(|r| r.offset).collect();
            for (o, r) in model.iter().enumerate().skip(start as usize) {
                let o = o as u64;
                let needed = r.key.is_empty() || o >= audit
                    || newest[r.key.as_slice()] == o && !(deletes_expire && r.flags.contains(RecordFlags::TOMBSTONE));
                prop_assert!(!needed || present.contains(&o), "record {} is missing", o);
            }
            let as_written: Vec<LogRecord> = model.iter().enumerate().skip(start as usize).map(|(o, r)| LogRecord {
                offset: o as u64,
                timestamp_ms: 0,
                flags: r.flags,
                key: r.key.clone(),
                value: r.value.clone(),
            }).collect();
            // Retention may have cut a key change in two: replay from a whole record on.
            let read: Vec<&LogRecord> = all.iter().collect();
            let written: Vec<&LogRecord> = as_written.iter().collect();
            let show = |m: std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>>| m.into_iter().map(|(k, v)| format!("{}={:?}", String::from_utf8_lossy(&k), v.iter().map(|x| String::from_utf8_lossy(&x[..x.len().min(14)]).to_string()).collect::<Vec<_>>())).collect::<Vec<_>>();
            prop_assert_eq!(show(replay(&read)), show(replay(&written)), "the compacted log replays to another state: {:?}", all.iter().map(|r| (r.offset, String::from_utf8_lossy(&r.key).to_string(), r.flags.0, String::from_utf8_lossy(&r.value[..r.value.len().min(12)]).to_string())).collect::<Vec<_>>());
            if model.len() as u64 > start {
                let last = log.last_record_blocking().unwrap().map(|r| r.offset);
                prop_assert_eq!(last, Some(model.len() as u64 - 1), "the last record is gone");
            }
        }
    }

    /// A cut anywhere in the last segment loses exactly the records from the cut on.
    #[test]
    fn recovery_after_a_cut_anywhere(count in 1usize..60, cut_back in 1u64..400) {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path(), small_config()).unwrap();
        let records: Vec<_> = (0..count).map(|i| rec("k", &format!("{i:040}"))).collect();
        for r in &records {
            log.append_blocking(std::slice::from_ref(r)).unwrap();
        }
        let segments = log.inner.segments.read().unwrap().clone();
        drop(log);
        let last = segments.last().unwrap();
        let cut = last.size.saturating_sub(cut_back);
        let f = fs::OpenOptions::new().write(true).open(segment::log_path(dir.path(), last.base)).unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let log = FileLog::open(dir.path(), small_config()).unwrap();
        // Records wholly before the cut survive; the rest is gone.
        let frame = records[0].value.len() as u64 + 8 + 21 + 1;
        let survivors_in_last = cut / frame;
        let expected = last.base + survivors_in_last;
        prop_assert_eq!(log.durable_end(), expected);
        let all = read_all(&log, 0);
        prop_assert_eq!(all.len() as u64, expected);
        for r in &all {
            prop_assert_eq!(&r.value, &records[r.offset as usize].value);
        }
        prop_assert_eq!(log.append_blocking(&[rec("k", "next")]).unwrap().start, expected);
    }
}

/// A source that fails in the middle of a large transaction, after appending its start
/// without an fsync, and runs again in the same process, must resume after what it appended:
/// those records become durable with the next append, so appending them again would put them
/// in the log twice.
#[test]
fn the_last_record_includes_an_unsynced_append() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileLogConfig {
        fsync: FsyncPolicy::Batch,
        ..FileLogConfig::default()
    };
    let log = FileLog::open(dir.path(), config).unwrap();
    log.append_blocking(&[rec("a", "durable")]).unwrap();
    log.append_unsynced_blocking(&[rec("b", "open transaction, part 1")])
        .unwrap();
    let last = log.last_record_blocking().unwrap().unwrap();
    assert_eq!(
        (last.offset, last.value.as_slice()),
        (1, b"open transaction, part 1".as_slice()),
        "a source resuming now would append part 1 again"
    );
    // It is durable (and read) with the next append.
    log.append_blocking(&[rec("c", "commit")]).unwrap();
    let offsets: Vec<u64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2]);
}

#[test]
fn a_pass_cut_short_and_run_again_keeps_a_moved_rows_base() {
    // k1's row moves to k2, which leaves a column unchanged. The first pass moves k1's
    // record under k2 in the first segment, then fails on the next segment (a directory in
    // the way of its rewrite): the pass run again must still know that record for k2's.
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), small_config()).unwrap();
    let fill = |round: usize| -> Vec<NewRecord> {
        (0..10)
            .map(|k| rec(&format!("fill{k}"), &format!("{round}:{k:>700}")))
            .collect()
    };
    log.append_blocking(&[rec("k1", "k1=base")]).unwrap();
    log.append_blocking(&fill(0)).unwrap();
    log.append_blocking(&[
        flagged(
            RecordFlags::TOMBSTONE.with(RecordFlags::WITH_NEXT),
            "k1",
            "k1=",
        ),
        flagged(RecordFlags::PARTIAL, "k2", "moved"),
    ])
    .unwrap();
    for round in 1..4 {
        log.append_blocking(&fill(round)).unwrap();
    }
    let segments: Vec<u64> = log
        .inner
        .segments
        .read()
        .unwrap()
        .iter()
        .map(|s| s.base)
        .collect();
    assert!(segments.len() >= 3, "{segments:?}");
    // The segment holding the key change (offsets 11 and 12), after the base's.
    let second = *segments.iter().rev().find(|&&base| base <= 11).unwrap();
    assert!(
        second > 0,
        "the key change is in the base's segment: {segments:?}"
    );
    let blocker = dir.path().join(format!("{second:020}.log.compacting"));
    std::fs::create_dir(&blocker).unwrap();
    let everyone = [Consumer {
        name: "sink".into(),
        next_offset: log.durable_end(),
        keeps_history: false,
    }];
    assert!(
        log.maintain_blocking(&everyone).is_err(),
        "the blocked rewrite failed"
    );
    std::fs::remove_dir(&blocker).unwrap();
    log.maintain_blocking(&everyone).unwrap();
    let kept = kept(&log);
    assert!(
        kept.contains(&("k1".into(), "base".into())),
        "k2's base went when the pass ran again: {kept:?}"
    );
}

#[test]
fn records_larger_than_a_read_chunk_and_across_chunks_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), FileLogConfig::default()).unwrap();
    // Sizes around and past the reader's 256 KiB chunk, so that frames straddle chunks and
    // the buffer grows for a large record and shrinks after it.
    let sizes = [
        10,
        300 << 10,
        10,
        (256 << 10) - 40,
        7,
        600 << 10,
        3,
        100_000,
        100_000,
        100_000,
    ];
    let values: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i}").repeat(*n))
        .collect();
    for value in &values {
        log.append_blocking(&[rec("k", value)]).unwrap();
    }
    let check = |log: &FileLog| {
        let got: Vec<Vec<u8>> = read_all(log, 0).into_iter().map(|r| r.value).collect();
        assert_eq!(got.len(), values.len());
        for (got, want) in got.iter().zip(&values) {
            assert!(got == want.as_bytes(), "a record of {} bytes", want.len());
        }
    };
    check(&log);
    drop(log);
    check(&FileLog::open(dir.path(), FileLogConfig::default()).unwrap());
}
