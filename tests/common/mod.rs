//! Helpers shared by the end-to-end tests: a data directory with a config, the daemon, and
//! what the generator's events should leave in a store.

#![allow(dead_code)] // each test binary uses a different part

pub mod db;
pub mod debezium;
pub mod pg;
pub mod stores;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use siphon_source_generator::{GeneratorConfig, GeneratorSource};
use siphon_test_support::{Daemon, free_port};

/// The daemon the tests run: `SIPHON_BIN` if set (scripts/test gives them an optimized build
/// of the same code, with its debug checks), else the debug build cargo made beside them.
pub fn bin() -> &'static Path {
    static BIN: LazyLock<PathBuf> = LazyLock::new(|| {
        std::env::var_os("SIPHON_BIN")
            .map_or_else(|| env!("CARGO_BIN_EXE_siphon").into(), PathBuf::from)
    });
    &BIN
}

/// A data directory and a config for one test: a generator pipeline `demo` into a file sink
/// `out`.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub admin_port: u16,
    pub events: u64,
}

impl Setup {
    /// `events` generator events, a transaction of 7 every `interval`; `extra` is appended to the config.
    pub fn new(events: u64, interval: &str, extra: &str) -> Self {
        let source = format!(
            r#"kind = "generator"
tables = ["demo.orders", "demo.customers"]
keys = 40
events = {events}
transaction_size = 7
interval = "{interval}""#
        );
        Self::with_source(&source, events, extra)
    }

    /// A pipeline `demo` with the given `[pipelines.demo.source]` body into the file sink `out`.
    pub fn with_source(source: &str, events: u64, extra: &str) -> Self {
        Self::with_log(
            source,
            "segment_size = \"64KiB\"\nmaintenance_interval = \"200ms\"",
            events,
            extra,
        )
    }

    /// [`Setup::with_source`] with the given `[pipelines.demo.log]` body.
    pub fn with_log(source: &str, log: &str, events: u64, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let admin_port = free_port();
        let config = dir.path().join("siphon.toml");
        let text = format!(
            r#"
data_dir = "{data}"
shutdown_timeout = "10s"

[admin]
listen = "127.0.0.1:{admin_port}"

[pipelines.demo.source]
{source}

[pipelines.demo.log]
{log}

[pipelines.demo.sinks.out]
kind = "file"
path = "{out}"
max_file_size = "32KiB"
max_files = 0
batch_size = 50
{extra}
"#,
            data = dir.path().join("data").display(),
            out = dir.path().join("out").display(),
        );
        std::fs::write(&config, text).unwrap();
        Setup {
            dir,
            config,
            admin_port,
            events,
        }
    }

    pub fn start(&self) -> Daemon {
        self.start_with_env(&[])
    }

    /// [`Setup::start`] with variables `env` set in the daemon's environment.
    pub fn start_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        let d = Daemon::start_with_env(
            bin(),
            &self.config,
            self.admin_port,
            &self.dir.path().join("daemon.log"),
            env,
        )
        .unwrap();
        self.wait_for_admin(&d);
        d
    }

    fn wait_for_admin(&self, d: &Daemon) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.admin_port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the daemon's admin API did not come up:\n{}", d.log());
    }

    /// The records sink `sink` set aside in its dead-letter file, in order.
    pub fn dead_letters(&self, sink: &str) -> Vec<Json> {
        let path = self
            .dir
            .path()
            .join(format!("data/pipelines/demo/dead-letter/{sink}.jsonl"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Every JSON line the file sink wrote, in order.
    pub fn output(&self) -> Vec<Json> {
        self.output_map(|event| event)
    }

    /// What `f` makes of each event of the output, in order: a long run's output read without
    /// holding every envelope at once.
    pub fn output_map<T>(&self, mut f: impl FnMut(Json) -> T) -> Vec<T> {
        let mut files: Vec<_> = std::fs::read_dir(self.out_dir())
            .map(|d| {
                d.map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .flat_map(|file| {
                let text = std::fs::read_to_string(file).unwrap();
                // A line the sink is still writing is not output yet.
                let complete = text.rfind('\n').map_or("", |end| &text[..end]);
                complete
                    .lines()
                    .map(|l| f(serde_json::from_str(l).unwrap()))
                    .collect::<Vec<T>>()
            })
            .collect()
    }

    /// The sequence numbers of the generator events in the output, in order.
    pub fn output_sequence(&self) -> Vec<u64> {
        self.output()
            .iter()
            .map(|l| l["source"]["seq"].as_u64().unwrap())
            .collect()
    }

    /// Runs `siphon ARGS --config <config>`.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(bin())
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .output()
            .unwrap()
    }

    pub fn generator(&self) -> GeneratorSource {
        GeneratorSource::new(
            "demo",
            GeneratorConfig {
                tables: vec![
                    "demo.orders".parse().unwrap(),
                    "demo.customers".parse().unwrap(),
                ],
                keys: 40,
                events: self.events,
                transaction_size: 7,
                ..GeneratorConfig::default()
            },
        )
    }
}

/// Folds change events (Debezium JSON) into the rows they leave: (table, id) → row.
pub fn fold(events: &[Json]) -> BTreeMap<(String, i64), Json> {
    let mut rows = BTreeMap::new();
    for e in events {
        let table = e["source"]["table"].as_str().unwrap().to_owned();
        match e["op"].as_str().unwrap() {
            "t" => rows.retain(|(t, _), _| *t != table),
            "d" => {
                rows.remove(&(table, e["before"]["id"].as_i64().unwrap()));
            }
            _ => {
                rows.insert(
                    (table, e["after"]["id"].as_i64().unwrap()),
                    e["after"].clone(),
                );
            }
        }
    }
    rows
}

/// The rows the first `n` generator events leave, as the source tables would hold them, in
/// the events' (Debezium's) encoding: what the file sink's output folds to.
pub fn expected_rows(setup: &Setup, n: u64) -> BTreeMap<(String, i64), Json> {
    let g = setup.generator();
    let events: Vec<Json> = (0..n)
        .map(|i| siphon_format::envelope::envelope(&g.event(i)))
        .collect();
    fold(&events)
}

/// [`expected_rows`] in the stores' encoding of values (`siphon_format::json::value_json`):
/// what a search index or a cache holds.
pub fn expected_store_rows(setup: &Setup, n: u64) -> BTreeMap<(String, i64), Json> {
    let g = setup.generator();
    let events: Vec<Json> = (0..n).map(|i| store_envelope(&g.event(i))).collect();
    fold(&events)
}

/// An event's envelope with its rows in the stores' encoding of values, for [`fold`] into
/// what a store holds.
pub fn store_envelope(event: &siphon_core::Event) -> Json {
    let mut json = siphon_format::envelope::envelope(event);
    for (field, row) in [("before", &event.before), ("after", &event.after)] {
        if let Some(row) = row {
            json[field] = siphon_format::json::row_json(row);
        }
    }
    json
}

/// What in a status document says that the pipelines are getting on: offsets, counts and
/// states (not the lags and times that change by themselves).
fn progress_of(status: &Json) -> String {
    let mut out = String::new();
    for pipeline in status.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{}|{}|",
            pipeline["log"]["end_offset"], pipeline["records_appended"]
        ));
        if let Some(metrics) = pipeline["source_metrics"].as_object() {
            for (name, value) in metrics {
                if !(name.contains("lag") || name.contains("behind") || name.ends_with("_ms")) {
                    out.push_str(&format!("{name}={value},"));
                }
            }
        }
        if let Some(sinks) = pipeline["sinks"].as_object() {
            for (name, sink) in sinks {
                out.push_str(&format!(
                    "{name}:{}:{}:{},",
                    sink["next_offset"], sink["committed_offset"], sink["records_applied"]
                ));
            }
        }
    }
    out
}

/// Polls the admin API until `done` holds for the status JSON; panics once the pipelines
/// have made no progress for `stall` (their offsets and counts unchanged): a deadline that
/// follows progress, so that a busy machine slows a test without failing it — and, as a
/// backstop where something else keeps moving, after ten times `stall` in all.
pub async fn wait_status(
    d: &Daemon,
    stall: Duration,
    what: &str,
    done: impl Fn(&Json) -> bool,
) -> Json {
    let client = reqwest::Client::new();
    let mut last = Json::Null;
    let started = Instant::now();
    let mut moved = (String::new(), Instant::now());
    loop {
        if let Ok(resp) = client
            .get(format!("{}/api/pipelines", d.admin))
            .send()
            .await
            && let Ok(json) = resp.json::<Json>().await
        {
            if done(&json) {
                return json;
            }
            let progress = progress_of(&json);
            if progress != moved.0 {
                moved = (progress, Instant::now());
            }
            last = json;
        }
        if moved.1.elapsed() > stall || started.elapsed() > 10 * stall {
            panic!(
                "waiting for {what}: nothing moved for {stall:?}, or {:?} in all; last status: {last:#}\ndaemon log:\n{}",
                10 * stall,
                d.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits through the read-your-writes endpoint until `sink` of pipeline `demo` has applied
/// everything up to `position` (`lsn=…` or `gtid=…`); panics once its committed offset has
/// not moved for `stall` (or after ten times `stall` in all).
pub async fn wait_applied(d: &Daemon, sink: &str, position: &str, stall: Duration) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut moved = (Json::Null, Instant::now());
    loop {
        let url = format!(
            "{}/api/pipelines/demo/sinks/{sink}/wait?{position}&timeout=5s",
            d.admin
        );
        let last = match client.get(&url).send().await {
            Ok(resp) if resp.status() == 200 => return,
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body: Json = resp.json().await.unwrap_or(Json::Null);
                assert!(
                    status == 408,
                    "{sink}: HTTP {status} waiting for {position}: {body}"
                );
                // The sink's progress only: the source's position moves by itself.
                if body["committed_offset"] != moved.0 {
                    moved = (body["committed_offset"].clone(), Instant::now());
                }
                body.to_string()
            }
            // The daemon busy, or restarting: the stall limit decides.
            Err(e) => e.to_string(),
        };
        assert!(
            moved.1.elapsed() < stall && started.elapsed() < 10 * stall,
            "{sink}: nothing moved for {stall:?} waiting for {position}: {last}\n{}",
            d.log()
        );
    }
}

/// The sink `out`'s status in a status document.
pub fn sink(status: &Json) -> &Json {
    &status[0]["sinks"]["out"]
}

/// Waits until the sink `out` has applied `n` records, then stops the daemon with SIGTERM and
/// checks that it exited cleanly.
pub async fn drain_and_stop(mut d: Daemon, n: u64) {
    wait_status(&d, Duration::from_secs(90), "all records applied", |s| {
        sink(s)["next_offset"].as_u64() == Some(n)
    })
    .await;
    d.signal("TERM").unwrap();
    let status = d.wait(Duration::from_secs(15)).unwrap();
    assert!(status.success(), "exit status {status}; log:\n{}", d.log());
}

/// siphon's JSON of a delete (`json`, a record's value) with the columns `not_null` its old
/// row lacks (null: PostgreSQL sent the key only) as Avro writes them (`avro`, the same record
/// read back): a value Debezium invents, since the Avro schema holds no null there.
pub fn zeros_of_a_delete(avro: &Json, json: &mut Json, not_null: &[&str]) {
    if json["op"] != "d" {
        return;
    }
    if let Some(before) = json["before"].as_object_mut() {
        for (column, v) in before.iter_mut() {
            if v.is_null() && not_null.contains(&column.as_str()) {
                *v = avro["before"][column].clone();
            }
        }
    }
}
