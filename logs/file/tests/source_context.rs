//! The file log under a source's appends.

use std::sync::Arc;
use std::time::Duration;

use siphon_core::log::{NewRecord, RecordFlags};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{SourceContext, SourceMetrics};
use siphon_core::units::HumanDuration;
use siphon_log_file::{FileLog, FileLogConfig, FsyncPolicy};
use tokio_util::sync::CancellationToken;

/// `fsync = "interval"`: appends that run together share the periodic fsync instead of
/// each making its own, and each returns only once its records are durable.
#[tokio::test(flavor = "multi_thread")]
async fn interval_fsync_is_shared_by_concurrent_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(
        dir.path().join("log"),
        FileLogConfig {
            fsync: FsyncPolicy::Interval,
            fsync_interval: HumanDuration(Duration::from_millis(300)),
            ..FileLogConfig::default()
        },
    )
    .unwrap();
    let ctx = SourceContext {
        pipeline: "p".into(),
        log: Arc::new(log.clone()),
        offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
        cancel: CancellationToken::new(),
        metrics: SourceMetrics::default(),
    };
    let appends: Vec<_> = (0..20)
        .map(|i| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let record = NewRecord {
                    key: vec![i],
                    value: vec![i; 10],
                    flags: RecordFlags::TXN_END,
                };
                let range = ctx.append_records(vec![record]).await.unwrap();
                assert!(
                    ctx.log.durable_end() >= range.end,
                    "returned before durable"
                );
            })
        })
        .collect();
    for a in appends {
        a.await.unwrap();
    }
    let fsyncs = ctx.log.stats().fsyncs;
    assert!(
        fsyncs <= 2,
        "{fsyncs} fsyncs for 20 appends within one interval"
    );
}
