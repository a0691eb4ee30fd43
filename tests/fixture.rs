//! A data directory written by an earlier build is read and resumed by this one: the fixture
//! `tests/fixtures/datadir-8cf3556` (made by its `make.sh` with siphon at 8cf3556) holds the
//! logs of a generator, a PostgreSQL and a MariaDB pipeline — every record with its source
//! position in that build's format —, their checkpoints and a file sink's cursors, and what
//! that build printed of each log. This build must print the same, and the generator
//! pipeline (whose positions need no server) must go on where it stopped.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use siphon_test_support::{Daemon, free_port};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/datadir-8cf3556"
);

/// Copies the fixture into a temporary directory (tests must not change it).
fn copy_of_fixture() -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(Path::new(FIXTURE), dir.path());
    dir
}

/// `siphon ARGS --config siphon.toml`, run in `dir`; its standard output.
fn cli(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(args)
        .args(["--config", "siphon.toml"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "siphon {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn expected(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURE).join("expected").join(name)).unwrap()
}

/// Compares line by line, so that a difference is shown where it is.
fn assert_same(what: &str, got: &str, want: &str) {
    for (n, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "{what}: line {} differs", n + 1);
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{what}: line count"
    );
}

#[test]
fn every_record_of_an_earlier_builds_logs_reads_the_same() {
    let dir = copy_of_fixture();
    for pipeline in ["gen", "pg", "my"] {
        let pretty = cli(
            dir.path(),
            &["log", "tail", pipeline, "--from", "0", "--format", "pretty"],
        );
        assert_same(
            &format!("{pipeline}: log tail --format pretty"),
            &pretty,
            &expected(&format!("{pipeline}.pretty")),
        );
        let mut args = vec![
            "log", "tail", pipeline, "--from", "0", "--format", "records",
        ];
        if pipeline != "gen" {
            args.push("--schemas");
        }
        assert_same(
            &format!("{pipeline}: log tail --format records"),
            &cli(dir.path(), &args),
            &expected(&format!("{pipeline}.records")),
        );
    }
    let status: String = cli(dir.path(), &["status"])
        .lines()
        .filter(|l| !l.to_lowercase().contains("ago") && !l.to_lowercase().contains("uptime"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_same("status", &status, &expected("status"));
}

#[tokio::test]
async fn an_earlier_builds_generator_pipeline_resumes_where_it_stopped() {
    let dir = copy_of_fixture();
    // The generator pipeline alone (the others' positions belong to servers long gone), with
    // twice the events: the source must go on from event 140, the sink from its cursor.
    let admin_port = free_port();
    let config = std::fs::read_to_string(dir.path().join("siphon.toml")).unwrap();
    let gen_only: String = config
        .split("\n[")
        .filter(|section| {
            !section.starts_with("pipelines.pg") && !section.starts_with("pipelines.my")
        })
        .collect::<Vec<_>>()
        .join("\n[")
        .replace("events = 140", "events = 280")
        .replace(
            "data_dir = \"data\"",
            &format!("data_dir = {:?}", dir.path().join("data")),
        )
        .replace(
            "path = \"out/gen\"",
            &format!("path = {:?}", dir.path().join("out/gen")),
        )
        .replace(
            "[admin]\nenabled = false",
            &format!("[admin]\nlisten = \"127.0.0.1:{admin_port}\""),
        );
    assert!(gen_only.contains("events = 280") && !gen_only.contains("postgres"));
    std::fs::write(dir.path().join("siphon.toml"), gen_only).unwrap();

    let mut daemon = Daemon::start(
        common::bin(),
        &dir.path().join("siphon.toml"),
        admin_port,
        &dir.path().join("daemon.log"),
    )
    .unwrap();
    common::wait_status(
        &daemon,
        Duration::from_secs(60),
        "280 events applied",
        |s| s[0]["sinks"]["out"]["committed_offset"] == 280,
    )
    .await;
    daemon.signal("TERM").unwrap();
    daemon.wait(Duration::from_secs(30)).unwrap();

    // The log: the fixture's 140 records, then 140 more, the generator's events 0..280 in order.
    let tail = cli(
        dir.path(),
        &["log", "tail", "gen", "--from", "0", "--format", "jsonl"],
    );
    let sequence: Vec<u64> = tail
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["source"]["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sequence, (0..280).collect::<Vec<_>>(), "the log's events");

    // The sink: each event once, in order, the fixture's lines first.
    let mut lines = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("out/gen"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        lines.extend(std::fs::read_to_string(file).unwrap().lines().map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["source"]["seq"]
                .as_u64()
                .unwrap()
        }));
    }
    assert_eq!(
        lines,
        (0..280).collect::<Vec<_>>(),
        "the file sink's events"
    );
}
