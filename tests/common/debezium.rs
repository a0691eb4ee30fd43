//! The real Debezium (`scripts/debezium/dump`) beside siphon: its run, what it wrote, and
//! the replication slots its runs and siphon's make active.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::Value as Json;
use siphon_test_support::PgDatabase;

/// How a Debezium run ends.
#[derive(Clone, Copy)]
pub enum End {
    /// An `initial` snapshot: when the engine completes it (or 5 s after its last record).
    Snapshot,
    /// A stream: at this many records, the number the workload makes. A minute after its
    /// last record if fewer come, so that a loaded machine's pause between two records does
    /// not end it early.
    After(usize),
}

/// Debezium's run over `tables` of `db` from slot `slot` (`snapshot_mode`: "initial",
/// "no_data", …), writing its records to `out` and ending as `end` says; the caller adds
/// Debezium's properties as arguments.
pub fn dump(
    db: &PgDatabase,
    tables: &str,
    slot: &str,
    snapshot_mode: &str,
    out: &Path,
    end: End,
) -> Command {
    let (records, idle_s) = match end {
        End::Snapshot => (1000, 5),
        End::After(records) => (records, 60),
    };
    let mut cmd = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/debezium/dump"));
    cmd.args([&db.name, tables, slot, snapshot_mode])
        .arg(records.to_string())
        .arg(out)
        .env("DBZ_IDLE_S", idle_s.to_string())
        .stdout(Stdio::null());
    cmd
}

/// A Debezium run under way, killed if dropped before its end: a test that fails leaves no
/// JVM behind it holding a replication slot (slots are few; the next tests would find none).
pub struct Run(Child);

impl Run {
    /// Starts `dump`'s command.
    pub fn spawn(mut dump: Command) -> Run {
        Run(dump.spawn().expect(
            "scripts/debezium/dump runs (java and javac are needed: scripts/services installs them)",
        ))
    }

    /// Its exit status. It ends by itself (at its record count, when idle, or when its engine
    /// stops; scripts/debezium/DbzDump.java).
    pub fn wait(mut self) -> ExitStatus {
        self.0.wait().unwrap()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `read_committed` consumer in group `group` of partition 0 of each of `topics`, from its
/// beginning: what siphon's Kafka sink committed, read as Debezium's records are.
pub fn committed_reader(brokers: &str, group: &str, topics: &[&str]) -> BaseConsumer {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut assignment = rdkafka::TopicPartitionList::new();
    for topic in topics {
        assignment
            .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// The records a run wrote, one JSON value a line (none if it wrote no file).
pub fn records(path: &Path) -> Vec<Json> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Whether replication slot `slot` of `db` has a reader.
pub async fn slot_active(db: &PgDatabase, slot: &str) -> bool {
    db.client()
        .await
        .unwrap()
        .query_opt(
            "select 1 from pg_replication_slots where slot_name = $1 and active",
            &[&slot],
        )
        .await
        .unwrap()
        .is_some()
}
