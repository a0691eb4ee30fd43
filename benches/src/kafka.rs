//! `siphon-bench kafka`: the PostgreSQL source into the Kafka log on a real broker (noida-db,
//! started here on a free port), with and without transactions, next to the file log on the
//! same changes and to rdkafka's own produce loop of the same records, in one run.
//!
//! One transaction inserting `rows` rows is read from a slot's backlog each time (a slot per
//! run, all made before the insert), until the log holds every row durably: committed in
//! Kafka, or fsynced by the file log. The reference is librdkafka itself: the records the
//! first transactional run wrote (keys, values, siphon's headers) read back into memory, then
//! produced again by a plain idempotent producer with the same compression into a topic of
//! their own, timed until the last is acknowledged. Each round runs the four in turn, the
//! next round in the opposite order (a source read first after the insert is slower).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use siphon_core::kind::LogContext;
use siphon_core::log::ChangeLog;
use siphon_log_kafka::{KafkaLog, KafkaLogConfig};
use siphon_source_postgres::{PostgresKind, SnapshotMode};
use siphon_test_support::KafkaBroker;

use crate::figure::{Figure, Measure, Rates, thousands};
use crate::pg::{BULK, TABLE, psql, run_source, siphon_in};
use crate::tools;

/// A record as read back: key, value, headers.
type Record = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>);

/// What one round measured.
#[derive(Debug, Default, Clone, Copy)]
struct Round {
    file: Duration,
    transactions: Duration,
    idempotent: Duration,
    reference: Duration,
}

/// The source on `slot` into a Kafka log of pipeline `pipeline` until it holds `records`
/// records; returns the time.
async fn siphon_kafka(
    url: &str,
    slot: &str,
    broker: &KafkaBroker,
    pipeline: &str,
    transactions: bool,
    records: u64,
) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir()?;
    let config: KafkaLogConfig = serde_json::from_value(serde_json::json!({
        "brokers": broker.brokers(),
        "transactions": transactions,
    }))?;
    let ctx = LogContext {
        pipeline: pipeline.to_owned(),
        dir: dir.path().join("log"),
        positions: Arc::new(PostgresKind),
    };
    let log: Arc<dyn ChangeLog> = Arc::new(KafkaLog::open(&config, &ctx)?);
    run_source(log, dir.path(), url, slot, SnapshotMode::Never, records).await
}

/// Every record of partition 0 of `topic`.
fn read_back(broker: &KafkaBroker, topic: &str) -> anyhow::Result<Vec<Record>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", "siphon-bench")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // As siphon's own partition consumers (siphon_kafka::consume): noida-db answers a fetch
        // with everything from the offset on.
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "16384")
        .set("receive.message.max.bytes", "2147483647")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;
    let mut out = Vec::new();
    // poll answers None for events other than messages too (an offset commit): the read fails
    // only when nothing came for a while. (With auto-commit on and `None` taken for the end,
    // a first fetch slower than the commit interval — 200,000 records, ~600 MB in one answer
    // from noida-db — failed the kafka group in 3 of 6 runs of `siphon-bench all`.)
    let mut last = Instant::now();
    loop {
        let polled = consumer.poll(Duration::from_secs(1));
        if polled.is_some() {
            last = Instant::now();
        }
        match polled {
            Some(Ok(m)) => out.push((
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                m.headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default(),
            )),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => return Err(e.into()),
            None if last.elapsed() > Duration::from_secs(300) => {
                anyhow::bail!("reading {topic} back: nothing for 300 s")
            }
            None => {}
        }
    }
}

/// librdkafka's produce loop: `records` into `topic`, idempotent, lz4 as siphon's log, until
/// every one is acknowledged.
fn produce(broker: &KafkaBroker, topic: &str, records: &[Record]) -> anyhow::Result<Duration> {
    let producer: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("enable.idempotence", "true")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    let started = Instant::now();
    for (key, value, headers) in records {
        let mut owned = OwnedHeaders::new_with_capacity(headers.len());
        for (k, v) in headers {
            owned = owned.insert(Header {
                key: k,
                value: Some(v),
            });
        }
        let mut record = BaseRecord::<Vec<u8>, Vec<u8>>::to(topic).headers(owned);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    back,
                )) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
    producer.flush(Duration::from_secs(300))?;
    Ok(started.elapsed())
}

/// Runs the bench on the server at `url`: `rows` rows, `rounds` rounds; prints a table row per
/// round and the ratios' spread.
pub fn run(url: &str, rows: u64, rounds: usize) -> anyhow::Result<()> {
    tools::require(&[tools::PSQL])?;
    let all = measure(url, rows, rounds, 0)?;
    println!(
        "| round | file log rows/s | Kafka, transactions rows/s | Kafka, idempotent rows/s | rdkafka produce loop records/s | transactions / rdkafka | idempotent / rdkafka |"
    );
    println!("|---|---|---|---|---|---|---|");
    let rates = |f: &Figure| match &f.measure {
        Measure::Rates(r) => r.clone(),
        _ => unreachable!("the Kafka bench measures rates"),
    };
    for (round, figures) in all.iter().enumerate() {
        let [tx, idem, file] = [&figures[0], &figures[1], &figures[2]].map(rates);
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
            round + 1,
            file.siphon_rate(),
            tx.siphon_rate(),
            idem.siphon_rate(),
            tx.reference_rate(),
            tx.ratio(),
            idem.ratio(),
        );
    }
    for (i, what) in ["transactions", "idempotent", "file log"]
        .iter()
        .enumerate()
    {
        let mut v: Vec<f64> = all.iter().map(|f| rates(&f[i]).ratio()).collect();
        v.sort_by(f64::total_cmp);
        println!(
            "{what} / rdkafka: median {:.2}, min {:.2}, max {:.2}",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        );
    }
    Ok(())
}

/// `rounds` rounds of the bench on the server at `url`, each a Kafka broker's run with
/// transactions, without, and the file log's, every one beside rdkafka's produce loop of the
/// same records in the same round. Round `first_round` + i runs the four in turn when even,
/// in the opposite order when odd.
pub fn measure(
    url: &str,
    rows: u64,
    rounds: usize,
    first_round: usize,
) -> anyhow::Result<Vec<Vec<Figure>>> {
    let rt = crate::pg::runtime()?;
    let broker = KafkaBroker::start()?;
    let db = format!("siphon_bench_kafka_{}", std::process::id());
    crate::pg::in_database(url, &db, |db_url| {
        psql(db_url, TABLE)?;
        let slots: usize = psql(db_url, "show max_replication_slots")?.parse()?;
        anyhow::ensure!(
            rounds * 3 <= slots,
            "{rounds} rounds need {} replication slots; the server has max_replication_slots = {slots}",
            rounds * 3
        );
        for round in 0..rounds {
            for what in ["file", "tx", "idem"] {
                psql(
                    db_url,
                    &format!(
                        "select pg_create_logical_replication_slot('{what}_{round}', 'pgoutput')"
                    ),
                )?;
            }
        }
        psql(db_url, &BULK.replace("$ROWS", &rows.to_string()))?;
        let mut captured: Option<Vec<Record>> = None;
        let mut all = Vec::new();
        for round in 0..rounds {
            let mut r = Round::default();
            let mut steps: Vec<&str> = vec!["file", "tx", "idem", "ref"];
            if (first_round + round) % 2 == 1 {
                steps.reverse();
            }
            // The reference needs the records of a transactional run.
            if captured.is_none() {
                steps.retain(|s| *s != "ref");
                steps.push("ref");
            }
            for step in steps {
                match step {
                    "file" => {
                        let dir = tempfile::tempdir()?;
                        r.file = rt.block_on(siphon_in(
                            &dir,
                            db_url,
                            &format!("file_{round}"),
                            SnapshotMode::Never,
                            rows,
                        ))?;
                    }
                    "tx" => {
                        let pipeline = format!("tx{round}");
                        r.transactions = rt.block_on(siphon_kafka(
                            db_url,
                            &format!("tx_{round}"),
                            &broker,
                            &pipeline,
                            true,
                            rows,
                        ))?;
                        if captured.is_none() {
                            captured =
                                Some(read_back(&broker, &format!("{pipeline}.public.orders"))?);
                        }
                    }
                    "idem" => {
                        r.idempotent = rt.block_on(siphon_kafka(
                            db_url,
                            &format!("idem_{round}"),
                            &broker,
                            &format!("idem{round}"),
                            false,
                            rows,
                        ))?;
                    }
                    _ => {
                        let records = captured.as_deref().unwrap_or_default();
                        anyhow::ensure!(
                            records.len() as u64 >= rows,
                            "read back {} records of {rows}",
                            records.len()
                        );
                        r.reference = produce(
                            &broker,
                            &format!("reference{round}"),
                            &records[..rows as usize],
                        )?;
                    }
                }
            }
            all.push(r.figures(rows));
        }
        Ok(all)
    })
}

impl Round {
    /// The round as figures: Kafka with transactions, idempotent, and the file log, each
    /// beside the produce loop.
    fn figures(&self, rows: u64) -> Vec<Figure> {
        [
            ("Kafka log, transactions", self.transactions),
            ("Kafka log, idempotent", self.idempotent),
            ("file log (beside the Kafka log)", self.file),
        ]
        .into_iter()
        .map(|(what, time)| Figure {
            what: what.into(),
            workload: format!("PostgreSQL, 1 transaction of {} rows", thousands(rows)),
            measure: Measure::Rates(Rates::timed(
                "rows",
                "rdkafka's produce loop of the same records",
                rows,
                &[time],
                &[self.reference],
            )),
            target: None,
        })
        .collect()
    }
}
