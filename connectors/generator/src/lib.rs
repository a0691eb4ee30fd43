//! The generator source (`kind = "generator"`): a deterministic stream of inserts, updates and
//! deletes over a few tables, for demos, tests and benchmarks. It needs no database.
//!
//! Event `n` is a pure function of `n` and the settings, so the source resumes exactly after
//! the last event the log holds, and a test can compute what any store should contain.

mod config;

use async_trait::async_trait;
use serde_json::{Value as Json, json};
use siphon_core::event::{Event, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo, Value};
use siphon_core::kind::{Kind, SourceKind};
use siphon_core::position::{DebeziumSource, Position, SourceFields, SourcePoint, SourcePosition};
use siphon_core::source::{Source, SourceContext, TableInfo, now_ms};
use siphon_core::{Error, Result};

pub use config::GeneratorConfig;

/// `kind = "generator"`.
#[derive(Debug)]
pub struct GeneratorKind;

impl Kind for GeneratorKind {
    const NAME: &'static str = "generator";
    type Config = GeneratorConfig;
    fn validate(config: &GeneratorConfig) -> std::result::Result<(), String> {
        config.validate()
    }
}

impl SourceKind for GeneratorKind {
    const CONNECTOR: &'static str = "generator";

    fn build(config: &GeneratorConfig, pipeline: &str) -> Box<dyn Source> {
        Box::new(GeneratorSource::new(pipeline, config.clone()))
    }

    fn decode_position(bytes: &[u8]) -> Option<SourcePosition> {
        postcard::from_bytes(bytes)
            .ok()
            .map(|n| SourcePosition::new(Sequence(n)))
    }

    fn parse_point(_: &str, _: &str) -> Option<std::result::Result<SourcePoint, String>> {
        None // nothing to wait for: the generator has no database
    }
}

/// A generator event's position: its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sequence(pub u64);

impl Position for Sequence {
    fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(&self.0).expect("encoding into a Vec cannot fail")
    }

    fn commit_point(&self) -> String {
        self.0.to_string()
    }

    fn debezium_source(&self, source: SourceFields<'_>) -> DebeziumSource {
        DebeziumSource {
            fields: vec![
                ("schema", json!(source.schema)),
                ("table", json!(source.table)),
                ("txId", json!(source.tx_id)),
                ("seq", json!(self.0)),
            ],
            schema_name: "siphon.generator.Source",
            schema_fields: vec![
                ("string", false, "schema"),
                ("string", false, "table"),
                ("int64", true, "txId"),
                ("int64", true, "seq"),
            ],
        }
    }

    fn to_json(&self) -> Json {
        json!({ "Sequence": self.0 })
    }
}

/// The generator source.
#[derive(Debug)]
pub struct GeneratorSource {
    config: GeneratorConfig,
    pipeline: String,
}

impl GeneratorSource {
    /// A generator for `pipeline` (the server name in each event's source block).
    pub fn new(pipeline: &str, config: GeneratorConfig) -> Self {
        GeneratorSource {
            config,
            pipeline: pipeline.to_owned(),
        }
    }

    /// Event number `n`. Per key the operations cycle: insert, three updates, delete.
    pub fn event(&self, n: u64) -> Event {
        let c = &self.config;
        let tables = c.tables.len() as u64;
        let name = &c.tables[(n % tables) as usize];
        let (schema, table) = (name.namespace(), name.table());
        let local = n / tables;
        let id = (local % c.keys) as i64;
        let round = local / c.keys;
        let op = match round % 5 {
            0 => Op::Create,
            4 => Op::Delete,
            _ => Op::Update,
        };
        let row = Row(vec![
            ("id".into(), Value::Int(id)),
            ("name".into(), Value::Text(format!("{table}-{id}"))),
            (
                "amount".into(),
                Value::Decimal(format!("{}.{:02}", n % 10_000, n % 100)),
            ),
            ("version".into(), Value::Int(round as i64)),
            (
                "updated_at".into(),
                Value::TimestampTz(1_700_000_000_000_000 + n as i64 * 1_000),
            ),
        ]);
        let key = Row(vec![("id".into(), Value::Int(id))]);
        let (before, after) = match op {
            Op::Delete => (Some(key.clone()), None),
            _ => (None, Some(row)),
        };
        let tx = n / c.transaction_size;
        Event {
            op,
            before,
            after,
            key: c.primary_key.then_some(key),
            source: SourceInfo {
                connector: "generator".into(),
                name: self.pipeline.as_str().into(),
                db: "generator".into(),
                schema: Some(schema.into()),
                table: table.into(),
                position: SourcePosition::new(Sequence(n)),
                tx_id: Some(tx),
                ts_ms: 1_700_000_000_000 + n as i64,
                snapshot: SnapshotMarker::False,
            },
            ts_ms: now_ms(),
            transaction: Some(TransactionInfo {
                id: tx.to_string(),
                total_order: n % c.transaction_size + 1,
                data_collection_order: n % c.transaction_size / tables + 1,
            }),
            key_change: None,
            schema: None,
        }
    }

    /// Whether event `n` is the last of its transaction.
    pub fn ends_transaction(&self, n: u64) -> bool {
        (n + 1).is_multiple_of(self.config.transaction_size) || Some(n + 1) == self.limit()
    }

    fn limit(&self) -> Option<u64> {
        (self.config.events > 0).then_some(self.config.events)
    }
}

#[async_trait]
impl Source for GeneratorSource {
    async fn check(&mut self) -> Result<()> {
        Ok(()) // nothing upstream to reach
    }

    async fn tables(&mut self) -> Result<Vec<TableInfo>> {
        let key_columns = if self.config.primary_key {
            vec!["id".to_owned()]
        } else {
            vec![]
        };
        Ok(self
            .config
            .tables
            .iter()
            .map(|t| TableInfo {
                name: t.clone(),
                key_columns: key_columns.clone(),
            })
            .collect())
    }

    async fn run(&mut self, ctx: &SourceContext) -> Result<()> {
        // Resume after the last event the log holds.
        let mut next = match ctx.last_event(&GeneratorKind).await? {
            None => 0,
            Some(last) => match last.source.position.get::<Sequence>() {
                Some(Sequence(n)) => n + 1,
                None => {
                    return Err(Error::permanent(format!(
                        "pipeline {}: the log holds events of another source ({}); use a new data_dir",
                        ctx.pipeline, last.source.connector
                    )));
                }
            },
        };
        tracing::info!(pipeline = %ctx.pipeline, from = next, "generator source starting");
        ctx.metrics.connected();
        // A zero interval is allowed (as fast as the log takes it); tokio's is not.
        let mut ticker = tokio::time::interval(
            self.config
                .interval
                .0
                .max(std::time::Duration::from_nanos(1)),
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.limit().is_some_and(|limit| next >= limit) {
                ctx.metrics.caught_up();
                tracing::info!(pipeline = %ctx.pipeline, events = next, "generator source finished its events");
                ctx.cancel.cancelled().await;
                return Ok(());
            }
            tokio::select! {
                _ = ctx.cancel.cancelled() => return Ok(()),
                _ = ticker.tick() => {}
            }
            ctx.metrics.working();
            // One transaction per tick (several at once when the interval is zero).
            let mut batch = Vec::new();
            loop {
                batch.push(self.event(next));
                next += 1;
                if self.ends_transaction(next - 1)
                    && (!self.config.interval.0.is_zero() || batch.len() >= 1000)
                {
                    break;
                }
                if self.limit().is_some_and(|limit| next >= limit) {
                    break;
                }
            }
            let ends = self.ends_transaction(next - 1);
            ctx.append(&batch, ends).await?;
            ctx.metrics.caught_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use siphon_core::TableName;

    use super::*;

    fn generator(events: u64) -> GeneratorSource {
        GeneratorSource::new(
            "demo",
            GeneratorConfig {
                tables: vec![
                    TableName::new("demo", "orders"),
                    TableName::new("demo", "customers"),
                ],
                keys: 3,
                events,
                transaction_size: 4,
                ..GeneratorConfig::default()
            },
        )
    }

    #[test]
    fn each_key_cycles_through_insert_updates_delete() {
        let g = generator(0);
        let ops: Vec<_> = (0..5).map(|round| g.event(round * 6).op).collect();
        assert_eq!(
            ops,
            [Op::Create, Op::Update, Op::Update, Op::Update, Op::Delete]
        );
        assert_eq!(g.event(30).op, Op::Create);
        assert_eq!(&*g.event(1).source.table, "customers");
        assert!(g.ends_transaction(3) && !g.ends_transaction(4));
    }

    #[tokio::test]
    async fn resumes_after_the_last_event_in_the_log() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let log =
            siphon_log_file::FileLog::open(dir.path().join("log"), Default::default()).unwrap();
        let offsets = siphon_core::offsets::OffsetStore::open(dir.path().join("offsets")).unwrap();
        let ctx = SourceContext {
            pipeline: "demo".into(),
            log: Arc::new(log.clone()),
            offsets,
            cancel: Default::default(),
            metrics: Default::default(),
        };
        let mut g = GeneratorSource::new(
            "demo",
            GeneratorConfig {
                events: 10,
                ..generator(10).config
            },
        );
        g.config.interval = siphon_core::units::HumanDuration(std::time::Duration::ZERO);
        ctx.append(&[g.event(0), g.event(1)], false).await.unwrap();
        let run = tokio::spawn({
            let ctx = ctx.clone();
            async move { g.run(&ctx).await }
        });
        let mut rx = siphon_core::log::ChangeLog::subscribe(&log);
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            rx.wait_for(|e| *e >= 10),
        )
        .await
        .unwrap()
        .unwrap();
        ctx.cancel.cancel();
        run.await.unwrap().unwrap();
        let mut reader = log.file_reader(0).unwrap();
        let recs = siphon_core::log::LogReader::read_available(&mut reader, 100).unwrap();
        let seqs: Vec<u64> = recs
            .iter()
            .map(|r| {
                Event::decode(&r.value, &siphon_core::schema::NoSchemas, &GeneratorKind)
                    .unwrap()
                    .source
                    .position
                    .get::<Sequence>()
                    .expect("a generator's position")
                    .0
            })
            .collect();
        assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    }
}
