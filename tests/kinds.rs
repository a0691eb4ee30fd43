//! A kind of source, of log and of sink, each added by one entry in the list of kinds, runs
//! end to end through the daemon: the kinds below live only in this test, which registers
//! them beside the built-in ones and runs the daemon in-process on a configuration naming
//! them (`kind = "counter"`, `"memory"`, `"collect"`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use siphon::config::Config;
use siphon::kinds::{self, Kinds};
use siphon_core::event::{Event, Op, Row, SnapshotMarker, SourceInfo, Value};
use siphon_core::kind::{Kind, LogContext, LogKind, SinkKind, SourceKind};
use siphon_core::log::{ChangeLog, LogId};
use siphon_core::position::{
    DebeziumSource, Point, Position, SourceFields, SourcePoint, SourcePosition, point_as,
};
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::{Source, SourceContext, TableInfo, now_ms};
use siphon_core::testing::MemoryLog;
use siphon_core::{Result, TableName};
use tokio_util::sync::CancellationToken;

/// `kind = "counter"`: events 0..count, each a row `{id, n}` of `test.counted`, one a
/// transaction. Its positions and points are its own: an event's number, and `count=N` in
/// the read-your-writes API (event N is in the log).
#[derive(Debug)]
struct Counter;

/// A counter event's position: its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Count(u64);

impl Position for Count {
    fn encode(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }

    fn commit_point(&self) -> String {
        format!("#{}", self.0)
    }

    fn debezium_source(&self, _: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![("count", self.0.into())],
            schema_name: "test.counter.Source",
            schema_fields: vec![("int64", false, "count")],
        }
    }

    fn to_json(&self) -> serde_json::Value {
        self.0.into()
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl Point for Count {
    fn covers(&self, asked: &dyn Point) -> bool {
        point_as::<Count>(asked).is_some_and(|asked| self >= asked)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CounterConfig {
    /// How many events.
    count: u64,
}

impl Kind for Counter {
    const NAME: &'static str = "counter";
    type Config = CounterConfig;

    fn validate(config: &CounterConfig) -> std::result::Result<(), String> {
        if config.count == 0 {
            return Err("count must be at least 1".into());
        }
        Ok(())
    }
}

impl SourceKind for Counter {
    const CONNECTOR: &'static str = "counter";

    fn build(config: &CounterConfig, pipeline: &str) -> Box<dyn Source> {
        Box::new(CounterSource {
            count: config.count,
            pipeline: pipeline.to_owned(),
        })
    }

    fn decode_position(bytes: &[u8]) -> Option<SourcePosition> {
        let n = u64::from_le_bytes(bytes.try_into().ok()?);
        Some(SourcePosition::new(Count(n)))
    }

    fn parse_point(param: &str, text: &str) -> Option<std::result::Result<SourcePoint, String>> {
        (param == "count").then(|| {
            text.parse()
                .map(|n| Arc::new(Count(n)) as SourcePoint)
                .map_err(|_| format!("count={text:?} is not a number"))
        })
    }
}

#[derive(Debug)]
struct CounterSource {
    count: u64,
    pipeline: String,
}

#[async_trait]
impl Source for CounterSource {
    async fn check(&mut self) -> Result<()> {
        Ok(())
    }

    async fn tables(&mut self) -> Result<Vec<TableInfo>> {
        Ok(vec![TableInfo {
            name: TableName::new("test", "counted"),
            key_columns: vec!["id".into()],
        }])
    }

    async fn run(&mut self, ctx: &SourceContext) -> Result<()> {
        let next = match ctx.last_event(&Counter).await? {
            Some(event) => match event.source.position.get::<Count>() {
                Some(Count(n)) => n + 1,
                None => panic!("not a counter's position: {:?}", event.source.position),
            },
            None => 0,
        };
        for n in next..self.count {
            let key = Row(vec![("id".into(), Value::Int(n as i64))]);
            let event = Event {
                op: Op::Create,
                before: None,
                after: Some(Row(vec![
                    ("id".into(), Value::Int(n as i64)),
                    ("n".into(), Value::Text(format!("event {n}"))),
                ])),
                key: Some(key),
                source: SourceInfo {
                    connector: "counter".into(),
                    name: self.pipeline.as_str().into(),
                    db: "test".into(),
                    schema: Some("test".into()),
                    table: "counted".into(),
                    position: SourcePosition::new(Count(n)),
                    tx_id: Some(n),
                    ts_ms: now_ms(),
                    snapshot: SnapshotMarker::False,
                },
                ts_ms: now_ms(),
                transaction: None,
                key_change: None,
                schema: None,
            };
            let range = ctx.append(&[event], true).await?;
            ctx.metrics.reached(Arc::new(Count(n)), range.end);
        }
        ctx.cancel.cancelled().await;
        Ok(())
    }
}

/// `kind = "memory"`: a log in this process's memory, one per directory.
#[derive(Debug)]
struct Memory;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryConfig {}

static MEMORY_LOGS: LazyLock<Mutex<BTreeMap<PathBuf, MemoryLog>>> = LazyLock::new(Mutex::default);

impl Kind for Memory {
    const NAME: &'static str = "memory";
    type Config = MemoryConfig;
}

impl LogKind for Memory {
    fn open(_: &MemoryConfig, ctx: &LogContext) -> Result<Arc<dyn ChangeLog>> {
        let mut logs = MEMORY_LOGS.lock().unwrap();
        Ok(Arc::new(logs.entry(ctx.dir.clone()).or_default().clone()))
    }

    fn open_existing(_: &MemoryConfig, ctx: &LogContext) -> Result<Option<Arc<dyn ChangeLog>>> {
        let logs = MEMORY_LOGS.lock().unwrap();
        Ok(logs
            .get(&ctx.dir)
            .map(|log| Arc::new(log.read_only()) as Arc<dyn ChangeLog>))
    }

    fn retention(_: &MemoryConfig) -> String {
        "everything, in this process's memory".to_owned()
    }
}

/// `kind = "collect"`: keeps every event it applies, by its `name`, for the test to read.
#[derive(Debug)]
struct Collect;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectConfig {
    /// Where the test finds what it applied.
    name: String,
}

/// Offset and `n` of each event a collector applied, in order.
type Applied = Vec<(u64, String)>;

/// What each collector applied, by its name.
static COLLECTED: LazyLock<Mutex<BTreeMap<String, Applied>>> = LazyLock::new(Mutex::default);

impl Kind for Collect {
    const NAME: &'static str = "collect";
    type Config = CollectConfig;
}

impl SinkKind for Collect {
    fn build(config: &CollectConfig, _: &str, _: &str) -> Result<Box<dyn Sink>> {
        Ok(Box::new(CollectSink {
            name: config.name.clone(),
        }))
    }
}

#[derive(Debug)]
struct CollectSink {
    name: String,
}

#[async_trait]
impl Sink for CollectSink {
    async fn check(&mut self) -> Result<()> {
        Ok(())
    }

    async fn open(&mut self, _: &[TableInfo], _: &LogId) -> Result<Option<StoreCursor>> {
        Ok(None)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        let mut collected = COLLECTED.lock().unwrap();
        let mine = collected.entry(self.name.clone()).or_default();
        for r in &batch.records {
            if mine.last().is_some_and(|(offset, _)| *offset >= r.offset) {
                continue; // applied already
            }
            let n = match r.event.after.as_ref().and_then(|a| a.get("n")) {
                Some(Value::Text(n)) => n.clone(),
                other => panic!("a counter event without its n: {other:?}"),
            };
            mine.push((r.offset, n));
        }
        Ok(())
    }

    async fn reset(&mut self, _: &[TableInfo]) -> Result<()> {
        COLLECTED.lock().unwrap().remove(&self.name);
        Ok(())
    }
}

/// This build's kinds and the test's own: one entry each.
fn kinds() -> Kinds {
    let mut kinds = Kinds::builtin();
    kinds.sources.push(kinds::source::<Counter>());
    kinds.logs.push(kinds::log::<Memory>());
    kinds.sinks.push(kinds::sink::<Collect>());
    kinds
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_a_log_and_a_sink_of_test_kinds_run_through_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let port = siphon_test_support::free_port();
    let config = Config::from_toml_with(
        &format!(
            r#"
data_dir = "{}"
[admin]
listen = "127.0.0.1:{port}"
[pipelines.counted.source]
kind = "counter"
count = 500
[pipelines.counted.log]
kind = "memory"
[pipelines.counted.sinks.seen]
kind = "collect"
name = "seen"
"#,
            dir.path().display()
        ),
        &kinds(),
    )
    .unwrap();
    assert_eq!(config.pipelines["counted"].source_kind(), "counter");
    assert_eq!(config.pipelines["counted"].log.kind(), "memory");
    let cancel = CancellationToken::new();
    let daemon = tokio::spawn(siphon::daemon::run(config, cancel.clone()));

    // Every event reaches the sink, once and in order; a deadline that follows progress.
    let mut last = (0, std::time::Instant::now());
    loop {
        let seen = COLLECTED.lock().unwrap().get("seen").map_or(0, Vec::len);
        if seen == 500 {
            break;
        }
        if seen != last.0 {
            last = (seen, std::time::Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(60),
            "the collect sink stopped at {seen} of 500 events"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The wait endpoint takes the counter's own points, and shows its own positions.
    let wait = |query: &str| {
        let url = format!("http://127.0.0.1:{port}/api/pipelines/counted/sinks/seen/wait?{query}");
        async move {
            let resp = reqwest::get(url).await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let (status, body) = wait("count=499&timeout=10s").await;
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["point"], "#499", "{body}");
    assert_eq!(answer["applied_position"], "#499", "{body}");
    let (status, body) = wait("count=many").await;
    assert!(
        status == 400 && body.contains("not a number"),
        "{status} {body}"
    );
    let (status, body) = wait("lsn=0/16B3748").await;
    assert!(
        status == 400 && body.contains("names no point by lsn="),
        "{status} {body}"
    );
    cancel.cancel();
    daemon.await.unwrap().unwrap();
    let seen = COLLECTED.lock().unwrap()["seen"].clone();
    let want: Vec<(u64, String)> = (0..500).map(|n| (n, format!("event {n}"))).collect();
    assert_eq!(seen, want);
}

#[test]
fn a_test_kinds_settings_are_checked_like_any_kinds() {
    let err = Config::from_toml_with(
        "[pipelines.p.source]\nkind = \"counter\"\ncount = 0\n[pipelines.p.sinks.s]\nkind = \"collect\"\nname = \"x\"\n",
        &kinds(),
    )
    .unwrap_err();
    assert_eq!(err.key, "pipelines.p.source", "{err}");
    assert!(err.message.contains("count"), "{err}");
    let err = Config::from_toml_with(
        "[pipelines.p.source]\nkind = \"counter\"\ncount = 1\ncuont = 2\n[pipelines.p.sinks.s]\nkind = \"collect\"\nname = \"x\"\n",
        &kinds(),
    )
    .unwrap_err();
    assert!(err.message.contains("cuont"), "{err}");
    // Without the test's entries the kinds are unknown, and the message lists the others.
    let err = Config::from_toml(
        "[pipelines.p.source]\nkind = \"counter\"\ncount = 1\n[pipelines.p.sinks.s]\nkind = \"stdout\"\n",
    )
    .unwrap_err();
    assert!(
        err.message.contains("unknown kind \"counter\"") && err.message.contains("postgres"),
        "{err}"
    );
}
