//! What the source's tests share: a source over a temporary log, run as the runtime runs it.
// Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphon_core::event::Op;
use siphon_core::log::{ChangeLog, LogReader};
use siphon_core::offsets::OffsetStore;
use siphon_core::source::{SnapshotMode, Source, SourceContext};
use siphon_core::units::HumanDuration;
use siphon_core::{Event, Row, Value};
use siphon_log_file::FileLog;
use siphon_source_mysql::{MysqlConfig, MysqlSource};
use siphon_test_support::MysqlDatabase;
use tokio_util::sync::CancellationToken;

pub struct Harness {
    _dir: tempfile::TempDir,
    /// Transient errors the source was run again after.
    pub retries: Arc<std::sync::atomic::AtomicU64>,
    pub log: FileLog,
    pub ctx: SourceContext,
    pub config: MysqlConfig,
}

impl Harness {
    pub fn new(db: &MysqlDatabase, pipeline: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("log");
        Self::with_log_dir(db, pipeline, dir, &log_dir)
    }

    /// A harness whose log lives in `log_dir` (a small disk, say); the rest in `dir`.
    pub fn with_log_dir(
        db: &MysqlDatabase,
        pipeline: &str,
        dir: tempfile::TempDir,
        log_dir: &std::path::Path,
    ) -> Self {
        let log = FileLog::open(log_dir, Default::default()).unwrap();
        let ctx = SourceContext {
            pipeline: pipeline.into(),
            log: Arc::new(log.clone()),
            offsets: OffsetStore::open(dir.path().join("offsets")).unwrap(),
            cancel: CancellationToken::new(),
            metrics: Default::default(),
        };
        let config = MysqlConfig {
            url: siphon_core::ConnectionUrl::new(db.url.clone()),
            password: None,
            password_file: None,
            tables: vec![format!("{}.items", db.name).parse().unwrap()],
            // The database's own: tests run at once, and the server drops a replica when
            // another registers with its id.
            server_id: Some(db.server_id),
            snapshot: SnapshotMode::Initial,
            heartbeat_interval: HumanDuration(Duration::from_millis(500)),
            tls: siphon_source_mysql::TlsMode::Disable,
            tls_server_name: None,
            tls_ca_file: None,
            watermark_table: "siphon.watermarks".parse().unwrap(),
        };
        Harness {
            _dir: dir,
            retries: Arc::default(),
            log,
            ctx,
            config,
        }
    }

    /// Runs the source until cancelled, retrying transient errors as the runtime does.
    pub fn start(
        &self,
    ) -> (
        tokio::task::JoinHandle<siphon_core::Result<()>>,
        CancellationToken,
    ) {
        let cancel = CancellationToken::new();
        let ctx = SourceContext {
            cancel: cancel.clone(),
            ..self.ctx.clone()
        };
        let mut source = MysqlSource::new(&ctx.pipeline, self.config.clone());
        let retries = self.retries.clone();
        let run = tokio::spawn(async move {
            loop {
                match source.run(&ctx).await {
                    Err(e) if e.is_transient() && !ctx.cancel.is_cancelled() => {
                        tracing::info!(error = %e, "retrying");
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    done => return done,
                }
            }
        });
        (run, cancel)
    }

    /// Waits until the source's snapshot is done: what is written from now on is streamed.
    pub async fn wait_for_streaming(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.ctx.metrics.values().get("snapshot_running") != Some(&0.0) {
            assert!(
                Instant::now() < deadline,
                "the source never finished its snapshot"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn events(&self) -> Vec<Event> {
        let mut reader = self.log.file_reader(0).unwrap();
        let mut out = Vec::new();
        loop {
            let batch = reader.read_available(100_000).unwrap();
            if batch.is_empty() {
                return out;
            }
            out.extend(batch.into_iter().map(|r| {
                Event::decode(
                    &r.value,
                    self.log.schemas(),
                    &siphon_source_mysql::MysqlKind,
                )
                .unwrap()
            }));
        }
    }

    /// Waits until the folded log holds exactly these ids.
    pub async fn wait_for_ids(&self, what: &str, ids: &BTreeSet<i64>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let folded = fold(&self.events());
            if folded.keys().copied().collect::<BTreeSet<_>>() == *ids {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the log holds {} rows, the table {}",
                folded.len(),
                ids.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Folds events into id → row.
pub fn fold(events: &[Event]) -> BTreeMap<i64, Row> {
    let mut rows = BTreeMap::new();
    let id = |r: &Row| match r.get("id") {
        Some(Value::Int(i)) => *i,
        other => panic!("no id: {other:?}"),
    };
    for e in events {
        match e.op {
            Op::Create | Op::Read | Op::Update => {
                let after = e.after.clone().unwrap();
                rows.insert(id(&after), after);
            }
            Op::Delete => {
                rows.remove(&id(e.before.as_ref().unwrap()));
            }
            Op::Truncate => rows.clear(),
        }
    }
    rows
}
