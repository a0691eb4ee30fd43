//! The command line as a user meets it: exit codes, error messages, environment overrides.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Setup, bin};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_config_exits_2_naming_the_key() {
    let setup = Setup::new(10, "1ms", "max_backoff = \"forever\"");
    let out = setup.cli(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pipelines.demo.sinks.out.max_backoff"),
        "{}",
        stderr(&out)
    );

    let out = Command::new(bin())
        .args(["run", "--config", "/nonexistent/siphon.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent/siphon.toml"),
        "{}",
        stderr(&out)
    );
}

/// `--version` names what the build holds, and the binary starts with no environment at all
/// from another directory (its rpath finds DuckDB's library).
#[test]
fn the_version_names_the_build_and_needs_no_environment() {
    let out = Command::new(bin())
        .arg("--version")
        .env_clear()
        .current_dir("/")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        env!("CARGO_PKG_VERSION"),
        "sources: postgres, mysql, generator",
        "duckdb (prebuilt libduckdb.so)",
        "redis",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
}

#[test]
fn environment_overrides_any_key() {
    let setup = Setup::new(10, "1ms", "");
    let out = setup.cli(&["check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A bad value from the environment is refused like one from the file: the override applies.
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&setup.config)
        .env("SIPHON__PIPELINES__DEMO__LOG__FSYNC", "sometimes")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pipelines.demo.log.fsync") && stderr(&out).contains("sometimes"),
        "{}",
        stderr(&out)
    );
    // A good one changes the configuration.
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&setup.config)
        .env("SIPHON__DATA_DIR", "/tmp/elsewhere")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("data_dir /tmp/elsewhere"),
        "{out:?}"
    );
}

#[test]
fn check_connect_reaches_every_component() {
    let setup = Setup::new(10, "1ms", "");
    let out = setup.cli(&["check", "--connect"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(
        stdout.contains("ok      demo: source generator")
            && stdout.contains("ok      demo: sink out (file)"),
        "{stdout}"
    );

    // A sink that cannot write is reported and fails the check.
    let blocker = setup.dir.path().join("file-in-the-way");
    std::fs::write(&blocker, "").unwrap();
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        &format!("path = \"{}\"", setup.out_dir().display()),
        &format!("path = \"{}/sub\"", blocker.display()),
    );
    std::fs::write(&setup.config, text).unwrap();
    let out = setup.cli(&["check", "--connect"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("FAILED  demo: sink out"),
        "{out:?}"
    );
}

/// An admin port open beyond loopback with no token: `check` and `run` refuse it, naming the
/// key and the fix; `admin.allow_unauthenticated` lets it start, and the log says so. With a
/// token, `/health` and `/ready` answer without it (a load balancer's probes), `/metrics` only
/// under `admin.metrics_public`, the API never.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_port_beyond_loopback_needs_a_token_or_words() {
    let setup = Setup::new(10, "1ms", "");
    let listen = format!("0.0.0.0:{}", setup.admin_port);
    for command in ["check", "run"] {
        let out = Command::new(bin())
            .args([command, "--config"])
            .arg(&setup.config)
            .env("SIPHON__ADMIN__LISTEN", &listen)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        for named in ["admin.listen", "admin.token", "allow_unauthenticated"] {
            assert!(stderr(&out).contains(named), "{command}: {}", stderr(&out));
        }
    }

    let d = setup.start_with_env(&[
        ("SIPHON__ADMIN__LISTEN", &listen),
        ("SIPHON__ADMIN__ALLOW_UNAUTHENTICATED", "true"),
    ]);
    // The log is written by a thread of its own: the line may follow the port by a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !d.log().contains("without a token") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(d.log().contains("without a token"), "{}", d.log());
    drop(d);

    let http = reqwest::Client::new();
    for (metrics_public, metrics_status) in [("false", 401), ("true", 200)] {
        let d = setup.start_with_env(&[
            ("SIPHON__ADMIN__LISTEN", &listen),
            ("SIPHON__ADMIN__TOKEN", "t0ken-s3cret"),
            ("SIPHON__ADMIN__METRICS_PUBLIC", metrics_public),
        ]);
        let status = |path: &str| {
            let request = http.get(format!("{}{path}", d.admin)).send();
            async move { request.await.unwrap().status().as_u16() }
        };
        assert_eq!(status("/health").await, 200);
        assert_ne!(status("/ready").await, 401, "/ready asks for the token");
        assert_eq!(
            status("/metrics").await,
            metrics_status,
            "metrics_public = {metrics_public}"
        );
        assert_eq!(status("/api/pipelines").await, 401);
    }
}
#[tokio::test(flavor = "multi_thread")]
async fn log_tail_prints_the_events_as_json() {
    let setup = Setup::new(30, "1ms", "");
    let mut d = setup.start();
    common::wait_status(&d, std::time::Duration::from_secs(30), "all applied", |s| {
        common::sink(s)["next_offset"].as_u64() == Some(30)
    })
    .await;
    d.signal("TERM").unwrap();
    d.wait(std::time::Duration::from_secs(15)).unwrap();
    let out = setup.cli(&["log", "tail", "demo", "--from", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // Pretty JSON documents, one after the other.
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 30);
    assert_eq!(docs[0]["offset"], 0);
    assert_eq!(docs[0]["event"]["op"], "c");
    assert_eq!(docs[6]["ends_transaction"], true);
    assert_eq!(docs[5]["ends_transaction"], false);

    // One envelope a line: the same events.
    let out = setup.cli(&["log", "tail", "demo", "--from", "0", "--format", "jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 30);
    for (line, doc) in lines.iter().zip(&docs) {
        assert_eq!(*line, doc["event"]);
    }

    let out = setup.cli(&["log", "stats"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("demo"),
        "{out:?}"
    );

    // A table the source does not capture is refused, naming the ones it does.
    let out = setup.cli(&["snapshot", "demo", "public.nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("public.nope is not one of pipeline demo's tables (demo."),
        "{}",
        stderr(&out)
    );
    // An incremental snapshot runs in the daemon: without one, it says so.
    let out = setup.cli(&["snapshot", "demo", "demo.orders"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("runs in the running daemon"),
        "{}",
        stderr(&out)
    );
}
