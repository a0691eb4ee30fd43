//! The log compliance suite: what every [`ChangeLog`] promises, checked against a real
//! instance of the log under test, and what it promises beyond that ([`LogPromises`]) where
//! it says it does. A log kind's crate runs it in its tests:
//!
//! ```ignore
//! siphon_core::testing::log::assert_log_compliance(|| async { MyLogUnderTest::new() }).await;
//! ```
//!
//! Each check gets a fresh log. It returns what was wrong rather than panicking, so that the
//! suite's own tests can show it failing against deliberately broken logs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::log::{ChangeLog, Consumer, LogRecord, NewRecord, RecordFlags};
use crate::schema::{Column, ColumnKind, SchemaId, TableSchema};

/// A log under test: one place (a directory, a topic) that can be opened again.
#[async_trait::async_trait]
pub trait LogUnderTest: Send + Sync {
    /// Opens the log for writing; called again after every handle of the previous opening
    /// was dropped, it must find what was durable then.
    async fn open(&self) -> crate::Result<Arc<dyn ChangeLog>>;

    /// Opens the log read-only beside a writer that has it open, if the kind can.
    async fn open_read_only(&self) -> crate::Result<Option<Arc<dyn ChangeLog>>>;
}

/// What a check found wrong.
type Verdict = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($what:tt)+) => {
        if !$cond {
            return Err(format!($($what)+));
        }
    };
}

/// Runs every check, each on a fresh log from `fresh`; panics naming the checks that failed.
pub async fn assert_log_compliance<L: LogUnderTest>(fresh: impl AsyncFnMut() -> L) {
    if let Err(failures) = run_log_compliance(fresh).await {
        panic!("the log breaks its promises:\n{failures}");
    }
}

/// Runs every check, each on a fresh log from `fresh`; the failures, one a line, each with
/// the check's name.
pub async fn run_log_compliance<L: LogUnderTest>(
    mut fresh: impl AsyncFnMut() -> L,
) -> Result<(), String> {
    let mut failures = Vec::new();
    macro_rules! check {
        ($name:literal, $check:ident) => {
            let under_test = fresh().await;
            if let Err(why) = $check(&under_test).await {
                failures.push(format!("{}: {why}", $name));
            }
        };
    }
    check!("per-key order", per_key_order);
    check!("promised order and offsets", promised_order_and_offsets);
    check!(
        "readers see only durable records",
        only_durable_records_are_read
    );
    check!("a waiting reader wakes", a_waiting_reader_wakes);
    check!("reads past the end", reads_past_the_end);
    check!(
        "durable records survive a reopen",
        durable_records_survive_a_reopen
    );
    check!("identity", identity);
    check!("schema records", schema_records);
    check!(
        "read-only opening follows the writer",
        read_only_follows_the_writer
    );
    check!("transaction marks", transaction_marks);
    check!(
        "replay rebuilds the current rows",
        replay_rebuilds_the_current_rows
    );
    check!("records found by time", records_found_by_time);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn record(key: &str, value: &str) -> NewRecord {
    NewRecord {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        flags: RecordFlags::TXN_END,
    }
}

/// Every record from `from` that is durable now.
fn read_all(log: &dyn ChangeLog, from: u64) -> Result<Vec<LogRecord>, String> {
    let mut reader = log.reader(from).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    loop {
        let batch = reader.read_available(1000).map_err(|e| e.to_string())?;
        if batch.is_empty() {
            return Ok(out);
        }
        out.extend(batch);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each key's values as a reader sees them, in order.
fn by_key(records: &[LogRecord]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in records {
        out.entry(text(&r.key)).or_default().push(text(&r.value));
    }
    out
}

/// Appends `n` batches that interleave three keys; what each key got, in order.
async fn append_interleaved(log: &dyn ChangeLog, n: usize) -> Result<Vec<NewRecord>, String> {
    let mut appended = Vec::new();
    for batch in 0..n {
        let records: Vec<NewRecord> = (0..6)
            .map(|i| record(["a", "b", "c"][i % 3], &format!("{batch}-{i}")))
            .collect();
        appended.extend(records.iter().cloned());
        log.append(records).await.map_err(|e| e.to_string())?;
    }
    Ok(appended)
}

async fn per_key_order(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let appended = append_interleaved(&*log, 5).await?;
    let read = read_all(&*log, log.start_offset())?;
    let want: BTreeMap<String, Vec<String>> = {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &appended {
            out.entry(text(&r.key)).or_default().push(text(&r.value));
        }
        out
    };
    ensure!(
        by_key(&read) == want,
        "each key's records came back as {:?}, appended as {want:?}",
        by_key(&read)
    );
    for key in want.keys() {
        let offsets: Vec<u64> = read
            .iter()
            .filter(|r| text(&r.key) == *key)
            .map(|r| r.offset)
            .collect();
        ensure!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "key {key}: offsets {offsets:?} do not grow with the appends"
        );
    }
    Ok(())
}

async fn promised_order_and_offsets(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let promises = log.promises();
    let mut ranges = Vec::new();
    let mut appended = Vec::new();
    for batch in 0..4 {
        let records: Vec<NewRecord> = (0..5)
            .map(|i| record(&format!("k{i}"), &format!("{batch}-{i}")))
            .collect();
        appended.extend(records.iter().map(|r| text(&r.value)));
        let range = log.append(records).await.map_err(|e| e.to_string())?;
        ensure!(
            range.end - range.start == 5,
            "an append of 5 records got the offsets {range:?}"
        );
        ranges.push(range);
    }
    if promises.dense_offsets {
        ensure!(
            ranges.windows(2).all(|w| w[0].end == w[1].start),
            "dense offsets promised, but the appends got {ranges:?}"
        );
        ensure!(
            log.durable_end() == ranges.last().expect("appended").end,
            "dense offsets promised, but the durable end is {} after appends ending at {}",
            log.durable_end(),
            ranges.last().expect("appended").end
        );
    }
    if promises.total_order {
        let read: Vec<String> = read_all(&*log, log.start_offset())?
            .iter()
            .map(|r| text(&r.value))
            .collect();
        ensure!(
            read == appended,
            "one total order promised, but a reader saw {read:?} after appends of {appended:?}"
        );
    }
    Ok(())
}

async fn only_durable_records_are_read(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    log.append(vec![record("a", "durable")])
        .await
        .map_err(|e| e.to_string())?;
    let end = log.durable_end();
    let mut reader = log.reader(log.start_offset()).map_err(|e| e.to_string())?;
    let first = reader.read_available(100).map_err(|e| e.to_string())?;
    ensure!(
        first.len() == 1,
        "read {} records, 1 was appended",
        first.len()
    );
    log.append_unsynced(vec![record("a", "open 1"), record("b", "open 2")])
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        log.durable_end() == end,
        "the durable end moved from {end} to {} with records not yet durable",
        log.durable_end()
    );
    let early = reader.read_available(100).map_err(|e| e.to_string())?;
    ensure!(
        early.is_empty(),
        "a reader saw records not yet durable: {:?}",
        early.iter().map(|r| text(&r.value)).collect::<Vec<_>>()
    );
    let last = log.last_record().await.map_err(|e| e.to_string())?;
    ensure!(
        last.as_ref().map(|r| text(&r.value)).as_deref() == Some("open 2"),
        "the last record is {:?}, not the last one appended (not yet durable)",
        last.map(|r| text(&r.value))
    );
    log.append(vec![record("c", "closes")])
        .await
        .map_err(|e| e.to_string())?;
    let rest: Vec<String> = reader
        .read_available(100)
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| text(&r.value))
        .collect();
    ensure!(
        rest == ["open 1", "open 2", "closes"],
        "after the next append a reader saw {rest:?}"
    );
    Ok(())
}

async fn a_waiting_reader_wakes(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let mut reader = log.reader(log.durable_end()).map_err(|e| e.to_string())?;
    let waiting = tokio::spawn(async move { reader.next_batch(10).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    ensure!(
        !waiting.is_finished(),
        "a reader at the end returned before any append"
    );
    log.append(vec![record("a", "wake")])
        .await
        .map_err(|e| e.to_string())?;
    // Generous: the reader needs only to be scheduled.
    match tokio::time::timeout(Duration::from_secs(30), waiting).await {
        Ok(Ok(Ok(batch))) => {
            ensure!(
                batch.len() == 1 && batch[0].value == b"wake",
                "the woken reader got {batch:?}"
            );
            Ok(())
        }
        Ok(Ok(Err(e))) => Err(format!("the waiting reader failed: {e}")),
        Ok(Err(e)) => Err(format!("the waiting reader panicked: {e}")),
        Err(_) => Err("a reader waiting at the end did not wake on an append".into()),
    }
}

async fn reads_past_the_end(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let appended = log
        .append(vec![record("a", "1"), record("b", "2")])
        .await
        .map_err(|e| e.to_string())?;
    let mut ahead = log.reader(appended.end + 3).map_err(|e| e.to_string())?;
    let none = ahead.read_available(10).map_err(|e| e.to_string())?;
    ensure!(
        none.is_empty(),
        "a reader past the end read {} records",
        none.len()
    );
    for i in 0..6 {
        log.append(vec![record("c", &i.to_string())])
            .await
            .map_err(|e| e.to_string())?;
    }
    let got = ahead.read_available(100).map_err(|e| e.to_string())?;
    ensure!(
        got.iter().all(|r| r.offset >= appended.end + 3) && !got.is_empty(),
        "a reader made past the end read {:?}",
        got.iter().map(|r| r.offset).collect::<Vec<_>>()
    );
    Ok(())
}

/// `offset_at_time` finds the first record taken at or after a time, from a read-only
/// opening too, and the end for a time after the last.
async fn records_found_by_time(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let mut appended = Vec::new();
    for batch in 0..3 {
        let records = (0..4)
            .map(|i| record(["a", "b"][i % 2], &format!("{batch}-{i}")))
            .collect();
        appended.push(log.append(records).await.map_err(|e| e.to_string())?);
        // Records' times are milliseconds: batches apart by more.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let records = read_all(log.as_ref(), 0)?;
    let time_of = |offset: u64| {
        records
            .iter()
            .find(|r| r.offset == offset)
            .map(|r| r.timestamp_ms)
    };
    let second = appended[1].start;
    let at = time_of(second).ok_or("the second batch's first record is missing")?;
    ensure!(
        time_of(appended[0].end - 1).is_some_and(|t| t < at),
        "the batches' records were taken at the same millisecond: {records:?}"
    );
    let read_only = under_test
        .open_read_only()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no read-only opening")?;
    for (which, log) in [("writer", &log), ("read-only", &read_only)] {
        let find = |t: i64| {
            let log = log.clone();
            async move {
                tokio::task::spawn_blocking(move || log.offset_at_time(t))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
        };
        let cases = [
            (0, 0),
            (at, second),
            (at - 1, second),
            (i64::MAX, log.durable_end()),
        ];
        for (time, want) in cases {
            let got = find(time).await?;
            ensure!(
                got == want,
                "{which}: the first record at or after {time} ms is at offset {want}, offset_at_time says {got}"
            );
        }
    }
    Ok(())
}

async fn durable_records_survive_a_reopen(under_test: &impl LogUnderTest) -> Verdict {
    let (before, end) = {
        let log = under_test.open().await.map_err(|e| e.to_string())?;
        append_interleaved(&*log, 3).await?;
        (read_all(&*log, log.start_offset())?, log.durable_end())
    };
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let after = read_all(&*log, log.start_offset())?;
    ensure!(
        after == before,
        "a reopened log reads {} records, {} were durable",
        after.len(),
        before.len()
    );
    let more = log
        .append(vec![record("d", "after")])
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        more.start >= end,
        "an append after the reopen got offset {}, below the old end {end}",
        more.start
    );
    Ok(())
}

async fn identity(under_test: &impl LogUnderTest) -> Verdict {
    let id = {
        let log = under_test.open().await.map_err(|e| e.to_string())?;
        log.append(vec![record("a", "1")])
            .await
            .map_err(|e| e.to_string())?;
        log.id().clone()
    };
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    ensure!(
        *log.id() == id,
        "the identity changed from {id} to {} on reopen",
        log.id()
    );
    Ok(())
}

fn table_schema(table: &str, columns: &[&str]) -> TableSchema {
    TableSchema {
        id: SchemaId::UNREGISTERED,
        connector: "postgresql".into(),
        server: "compliance".into(),
        database: "db".into(),
        schema: Some("public".into()),
        table: table.into(),
        columns: columns
            .iter()
            .map(|c| Column {
                name: (*c).into(),
                type_name: "text".into(),
                type_id: 25,
                type_modifier: -1,
                kind: ColumnKind::Text { length: None },
                nullable: true,
                generated: false,
            })
            .collect(),
        key: vec![0],
    }
}

async fn schema_records(under_test: &impl LogUnderTest) -> Verdict {
    let (a, b) = {
        let log = under_test.open().await.map_err(|e| e.to_string())?;
        let schemas = log.schemas();
        let a = schemas
            .register(&table_schema("a", &["id"]))
            .map_err(|e| e.to_string())?;
        let b = schemas
            .register(&table_schema("b", &["id", "x"]))
            .map_err(|e| e.to_string())?;
        let again = schemas
            .register(&table_schema("a", &["id"]))
            .map_err(|e| e.to_string())?;
        ensure!(
            a.id != SchemaId::UNREGISTERED && a.id != b.id,
            "two versions got the ids {:?} and {:?}",
            a.id,
            b.id
        );
        ensure!(
            again.id == a.id,
            "an equal version registered again got {:?}, not {:?}",
            again.id,
            a.id
        );
        ensure!(
            schemas.schema(b.id).as_deref() == Some(&*b),
            "the version registered as {:?} does not come back by its id",
            b.id
        );
        (a, b)
    };
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let all = log.schemas().all();
    ensure!(
        all.iter().any(|s| **s == *a) && all.iter().any(|s| **s == *b) && all.len() == 2,
        "a reopened log holds the schema versions {:?}",
        all.iter()
            .map(|s| (s.id, s.table.clone()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

async fn read_only_follows_the_writer(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    log.append(vec![record("a", "before")])
        .await
        .map_err(|e| e.to_string())?;
    let Some(view) = under_test
        .open_read_only()
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(()); // the kind has no read-only opening
    };
    ensure!(
        view.id() == log.id(),
        "the read-only view has another identity"
    );
    ensure!(
        view.append(vec![record("x", "refused")]).await.is_err(),
        "a read-only view took an append"
    );
    let mut reader = view
        .reader(view.start_offset())
        .map_err(|e| e.to_string())?;
    let seen = reader.read_available(10).map_err(|e| e.to_string())?;
    ensure!(seen.len() == 1, "the view read {} of 1 record", seen.len());
    let registered = log
        .schemas()
        .register(&table_schema("late", &["id"]))
        .map_err(|e| e.to_string())?;
    log.append_unsynced(vec![record("b", "open")])
        .await
        .map_err(|e| e.to_string())?;
    // Long enough for a view that polls to look more than once.
    if let Ok(early) = tokio::time::timeout(Duration::from_secs(1), reader.next_batch(10)).await {
        return Err(format!(
            "the view read a record the writer had not made durable: {early:?}"
        ));
    }
    log.append(vec![record("c", "after")])
        .await
        .map_err(|e| e.to_string())?;
    let followed = tokio::time::timeout(Duration::from_secs(30), async {
        let mut seen = Vec::new();
        while seen.len() < 2 {
            seen.extend(reader.next_batch(10).await?);
        }
        Ok::<_, crate::Error>(seen)
    })
    .await;
    match followed {
        Ok(Ok(batch)) if batch.iter().map(|r| text(&r.value)).eq(["open", "after"]) => {}
        other => {
            return Err(format!(
                "the view's reader, after the writer appended: {other:?}"
            ));
        }
    }
    ensure!(
        view.schemas().schema(registered.id).is_some(),
        "the view does not find a schema version registered after it opened"
    );
    Ok(())
}

async fn transaction_marks(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    if !log.promises().transaction_marks {
        return Ok(());
    }
    let flags = [
        RecordFlags::default(),
        RecordFlags::TXN_END,
        RecordFlags::TOMBSTONE,
        RecordFlags::TOMBSTONE.with(RecordFlags::TXN_END),
    ];
    let records: Vec<NewRecord> = flags
        .iter()
        .enumerate()
        .map(|(i, f)| NewRecord {
            flags: *f,
            ..record(&format!("k{i}"), "v")
        })
        .collect();
    log.append(records).await.map_err(|e| e.to_string())?;
    let read: Vec<bool> = read_all(&*log, log.start_offset())?
        .iter()
        .map(|r| r.flags.contains(RecordFlags::TXN_END))
        .collect();
    let want: Vec<bool> = flags
        .iter()
        .map(|f| f.contains(RecordFlags::TXN_END))
        .collect();
    ensure!(
        read == want,
        "transaction marks promised: appended {want:?}, read {read:?}"
    );
    Ok(())
}

/// A small deterministic generator, so that a failure is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// The model: appends of upserts and deletes over a few keys, maintenance now and then with
/// every consumer caught up, and a replay from the log's start folded into rows must give
/// the rows the appends leave — whatever compaction and retention removed.
async fn replay_rebuilds_the_current_rows(under_test: &impl LogUnderTest) -> Verdict {
    let log = under_test.open().await.map_err(|e| e.to_string())?;
    let mut rng = Rng(0x5eed_cafe);
    let mut rows: BTreeMap<String, String> = BTreeMap::new();
    for step in 0..300 {
        let n = 1 + rng.below(8);
        let mut batch = Vec::new();
        for i in 0..n {
            let key = format!("k{}", rng.below(12));
            if rng.below(5) == 0 {
                rows.remove(&key);
                batch.push(NewRecord {
                    key: key.into_bytes(),
                    value: Vec::new(),
                    flags: RecordFlags::TOMBSTONE.with(RecordFlags::TXN_END),
                });
            } else {
                let value = format!("{step}.{i}");
                rows.insert(key.clone(), value.clone());
                batch.push(record(&key, &value));
            }
        }
        log.append(batch).await.map_err(|e| e.to_string())?;
        if rng.below(20) == 0 {
            let everyone = [Consumer {
                name: "caught up".into(),
                next_offset: log.durable_end(),
                keeps_history: false,
            }];
            log.maintain(&everyone).await.map_err(|e| e.to_string())?;
        }
    }
    let mut replayed: BTreeMap<String, String> = BTreeMap::new();
    for r in read_all(&*log, log.start_offset())? {
        if r.flags.contains(RecordFlags::TOMBSTONE) {
            replayed.remove(&text(&r.key));
        } else {
            replayed.insert(text(&r.key), text(&r.value));
        }
    }
    ensure!(
        replayed == rows,
        "a replay from the start gives {replayed:?}, the appends left {rows:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use async_trait::async_trait;
    use tokio::sync::watch;

    use super::*;
    use crate::log::{LogId, LogPromises, LogReader, LogStats, MaintenanceReport};
    use crate::schema::SchemaStore;
    use crate::testing::MemoryLog;

    /// A memory log, opened again as a restarted process would.
    struct Memory(MemoryLog);

    #[async_trait]
    impl LogUnderTest for Memory {
        async fn open(&self) -> crate::Result<Arc<dyn ChangeLog>> {
            Ok(Arc::new(self.0.reopened()))
        }

        async fn open_read_only(&self) -> crate::Result<Option<Arc<dyn ChangeLog>>> {
            Ok(Some(Arc::new(self.0.read_only())))
        }
    }

    #[tokio::test]
    async fn the_memory_log_keeps_every_promise() {
        assert_log_compliance(async || Memory(MemoryLog::default())).await;
    }

    /// A log that breaks one promise on top of the memory log.
    #[derive(Debug)]
    enum Broken {
        /// Makes records readable before they are durable.
        PublishesEarly(MemoryLog),
        /// Reverses each append's records (and so a key's).
        ReordersKeys(MemoryLog),
    }

    impl Broken {
        fn inner(&self) -> &MemoryLog {
            match self {
                Broken::PublishesEarly(log) | Broken::ReordersKeys(log) => log,
            }
        }
    }

    #[async_trait]
    impl ChangeLog for Broken {
        async fn append(&self, mut records: Vec<NewRecord>) -> crate::Result<Range<u64>> {
            if let Broken::ReordersKeys(_) = self {
                records.reverse();
            }
            self.inner().append(records).await
        }

        async fn append_unsynced(&self, records: Vec<NewRecord>) -> crate::Result<Range<u64>> {
            match self {
                Broken::PublishesEarly(log) => log.append(records).await,
                Broken::ReordersKeys(log) => log.append_unsynced(records).await,
            }
        }

        fn id(&self) -> &LogId {
            self.inner().id()
        }

        fn schemas(&self) -> &dyn SchemaStore {
            self.inner().schemas()
        }

        fn start_offset(&self) -> u64 {
            self.inner().start_offset()
        }

        fn durable_end(&self) -> u64 {
            self.inner().durable_end()
        }

        fn subscribe(&self) -> watch::Receiver<u64> {
            self.inner().subscribe()
        }

        fn reader(&self, from: u64) -> crate::Result<Box<dyn LogReader>> {
            self.inner().reader(from)
        }

        async fn last_record(&self) -> crate::Result<Option<LogRecord>> {
            self.inner().last_record().await
        }

        async fn maintain(&self, consumers: &[Consumer]) -> crate::Result<MaintenanceReport> {
            self.inner().maintain(consumers).await
        }

        fn maintenance_interval(&self) -> Option<Duration> {
            None
        }

        fn stats(&self) -> LogStats {
            self.inner().stats()
        }

        fn promises(&self) -> LogPromises {
            self.inner().promises()
        }
    }

    struct BrokenUnderTest(MemoryLog, fn(MemoryLog) -> Broken);

    #[async_trait]
    impl LogUnderTest for BrokenUnderTest {
        async fn open(&self) -> crate::Result<Arc<dyn ChangeLog>> {
            Ok(Arc::new((self.1)(self.0.reopened())))
        }

        async fn open_read_only(&self) -> crate::Result<Option<Arc<dyn ChangeLog>>> {
            Ok(None)
        }
    }

    #[tokio::test]
    async fn a_log_that_publishes_before_its_records_are_durable_fails() {
        let failures = run_log_compliance(async || {
            BrokenUnderTest(MemoryLog::default(), Broken::PublishesEarly)
        })
        .await
        .unwrap_err();
        assert!(
            failures.contains("readers see only durable records"),
            "{failures}"
        );
    }

    #[tokio::test]
    async fn a_log_that_reorders_a_keys_records_fails() {
        let failures = run_log_compliance(async || {
            BrokenUnderTest(MemoryLog::default(), Broken::ReordersKeys)
        })
        .await
        .unwrap_err();
        assert!(failures.contains("per-key order"), "{failures}");
        assert!(
            failures.contains("replay rebuilds the current rows"),
            "{failures}"
        );
    }
}
