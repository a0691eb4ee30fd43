//! The daemon end to end: generator source → change log → file sink, stopped with SIGTERM,
//! killed with -9, replayed; the output is compared with what the source produced.

use crate::common;

use std::time::Duration;

use common::{Setup, drain_and_stop, expected_rows, expected_store_rows, fold, sink, wait_status};

fn assert_exactly_once(setup: &Setup, n: u64) {
    let seq = setup.output_sequence();
    let expected: Vec<u64> = (0..n).collect();
    if seq != expected {
        let dupes = seq.windows(2).filter(|w| w[1] <= w[0]).count();
        panic!(
            "the sink holds {} events ({} out of order or repeated); expected 0..{n} once each",
            seq.len(),
            dupes
        );
    }
    assert_eq!(
        fold(&setup.output()),
        expected_rows(setup, n),
        "the folded output differs from the source rows"
    );
}

/// After a replay of a compacted log the store holds the same rows, from fewer events.
fn assert_same_rows(setup: &Setup, n: u64) {
    let seq = setup.output_sequence();
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "events out of order or repeated: {seq:?}"
    );
    assert_eq!(
        fold(&setup.output()),
        expected_rows(setup, n),
        "the folded output differs from the source rows"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_shuts_down_cleanly_and_resumes_without_gaps_or_repeats() {
    let setup = Setup::new(1400, "5ms", "");
    let mut d = setup.start();
    wait_status(&d, Duration::from_secs(30), "some records applied", |s| {
        sink(s)["next_offset"].as_u64() > Some(100)
    })
    .await;
    d.signal("TERM").unwrap();
    let status = d.wait(Duration::from_secs(15)).unwrap();
    assert!(status.success(), "exit status {status}; log:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("shut down cleanly"), "{log}");
    // The cursor on disk matches what the sink wrote: nothing applied was left unrecorded.
    let cursor: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            setup
                .dir
                .path()
                .join("data/pipelines/demo/offsets/sink-out.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let written = setup.output_sequence().len() as u64;
    assert_eq!(
        cursor["next_offset"].as_u64(),
        Some(written),
        "the saved cursor does not match the output"
    );
    assert!(
        written < 1400,
        "the test should stop the daemon mid-way (it wrote everything already)"
    );

    // Started again, it picks up where it left off.
    drain_and_stop(setup.start(), 1400).await;
    assert_exactly_once(&setup, 1400);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_repeatedly_loses_and_repeats_nothing() {
    let setup = Setup::new(3000, "2ms", "");
    for round in 0..6u64 {
        let mut d = setup.start();
        // Once it has applied more (a different amount each round, at most all of it: a fast
        // daemon may have applied everything by then), kill it without warning.
        let applied = setup.output().len() as u64;
        let target = (applied + 40 + round * 37).min(3000);
        wait_status(&d, Duration::from_secs(60), "progress", |s| {
            sink(s)["next_offset"].as_u64() >= Some(target)
        })
        .await;
        d.kill_9().unwrap();
    }
    drain_and_stop(setup.start(), 3000).await;
    assert_exactly_once(&setup, 3000);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rebuilds_the_store_online_and_offline() {
    let setup = Setup::new(500, "1ms", "");
    let mut d = setup.start();
    wait_status(&d, Duration::from_secs(60), "all records applied", |s| {
        sink(s)["next_offset"].as_u64() == Some(500)
    })
    .await;

    // Online: the daemon pauses the sink, resets it, replays, and goes on.
    wipe_and_replay(&setup, "replay done: 500 records");
    d.signal("TERM").unwrap();
    assert!(d.wait(Duration::from_secs(15)).unwrap().success());

    // Offline: the same from the data directory.
    wipe_and_replay(&setup, "offline");

    // A replay from the middle without reset re-applies nothing the sink already holds.
    let out = setup.cli(&["replay", "demo", "out", "--from", "200"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same_rows(&setup, 500);
}

/// Removes the sink's files, rebuilds them with `siphon replay --from 0 --reset` (whose output
/// must mention `expect`), and compares with the source.
fn wipe_and_replay(setup: &Setup, expect: &str) {
    std::fs::remove_dir_all(setup.out_dir()).unwrap();
    let out = setup.cli(&["replay", "demo", "out", "--from", "0", "--reset"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains(expect), "{stderr}");
    assert_same_rows(setup, 500);
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_api_serves_health_readiness_metrics_and_status_behind_a_token() {
    let setup = Setup::new(300, "1ms", "");
    let text = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace("[admin]\n", "[admin]\ntoken = \"t0ken-s3cret\"\n");
    std::fs::write(&setup.config, text).unwrap();
    let mut d = setup.start();
    let http = reqwest::Client::new();
    let get = |path: &str, token: bool| {
        let req = http.get(format!("{}{path}", d.admin));
        if token {
            req.bearer_auth("t0ken-s3cret")
        } else {
            req
        }
        .send()
    };
    assert_eq!(get("/health", false).await.unwrap().status(), 200);
    assert_eq!(get("/metrics", false).await.unwrap().status(), 401);
    assert_eq!(get("/api/pipelines", false).await.unwrap().status(), 401);
    let wrong = http
        .get(format!("{}/metrics", d.admin))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    // Ready once the source and the sink run.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get("/ready", true).await.unwrap().status() != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "never ready:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Wait for everything applied (through the status API, with the token).
    loop {
        let s: serde_json::Value = get("/api/pipelines", true)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if sink(&s)["next_offset"].as_u64() == Some(300) {
            assert_eq!(sink(&s)["lag_records"], 0);
            assert_eq!(sink(&s)["state"], "running");
            assert_eq!(s[0]["log"]["end_offset"], 300);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not caught up: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = get("/metrics", true).await.unwrap().text().await.unwrap();
    for line in [
        "siphon_log_end_offset{pipeline=\"demo\"} 300",
        "siphon_sink_applied_offset{pipeline=\"demo\",sink=\"out\"} 300",
        "siphon_sink_lag_records{pipeline=\"demo\",sink=\"out\"} 0",
        "siphon_sink_records_applied_total{pipeline=\"demo\",sink=\"out\"} 300",
        "siphon_source_up{pipeline=\"demo\"} 1",
        "siphon_source_seconds_behind{pipeline=\"demo\"} 0",
        "siphon_sink_lag_ms{pipeline=\"demo\",sink=\"out\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    // `siphon status` reads the running daemon (with the token from the config), and never
    // prints the token.
    let out = setup.cli(&["status"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("daemon: running") && stdout.contains("cursor 300"),
        "{stdout}"
    );
    d.signal("TERM").unwrap();
    assert!(d.wait(Duration::from_secs(15)).unwrap().success());
    assert!(
        !d.log().contains("t0ken-s3cret"),
        "the token appeared in the log"
    );
    let out = setup.cli(&["status", "--json"]);
    let offline: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sink(&offline)["state"], "offline");
    assert_eq!(sink(&offline)["next_offset"], 300);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_that_cannot_be_built_refuses_the_start_naming_it() {
    // A second file sink whose directory cannot be created (a file is in the way).
    let setup = Setup::new(200, "1ms", "");
    let blocker = setup.dir.path().join("blocked");
    std::fs::write(&blocker, "not a directory").unwrap();
    let text = std::fs::read_to_string(&setup.config).unwrap()
        + &format!(
            "\n[pipelines.demo.sinks.broken]\nkind = \"file\"\npath = \"{}/sub\"\n",
            blocker.display()
        );
    std::fs::write(&setup.config, text).unwrap();
    let out = setup.cli(&["run"]);
    // Building that sink fails at start, naming it: the daemon refuses to run half-configured.
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sink broken"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_that_lost_records_waits_for_a_replay_and_recovers_with_it() {
    let setup = Setup::new(200, "1ms", "");
    // A cursor saying the log's size cap dropped records this sink never applied.
    let offsets = setup.dir.path().join("data/pipelines/demo/offsets");
    std::fs::create_dir_all(&offsets).unwrap();
    std::fs::write(
        offsets.join("sink-out.json"),
        r#"{"next_offset": 0, "lost": {"first": 0, "end": 5}}"#,
    )
    .unwrap();
    let d = setup.start();
    let status = wait_status(
        &d,
        Duration::from_secs(30),
        "the sink to need a replay",
        |s| sink(s)["state"] == "needs_replay",
    )
    .await;
    let error = sink(&status)["last_error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("dropped offsets 0..5")
            && error.contains("siphon replay demo out --from 0 --reset"),
        "{error}"
    );
    assert!(
        setup.output().is_empty(),
        "a sink needing a replay applied records"
    );

    let out = setup.cli(&["replay", "demo", "out", "--from", "0", "--reset"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drain_and_stop(d, 200).await;
    assert_exactly_once(&setup, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_cursor_file_stops_only_a_sink_that_cannot_do_without_it() {
    let setup = Setup::new(
        200,
        "1ms",
        "\n[pipelines.demo.sinks.echo]\nkind = \"stdout\"\n",
    );
    let offsets = setup.dir.path().join("data/pipelines/demo/offsets");
    std::fs::create_dir_all(&offsets).unwrap();
    // Torn by a crash of the machine: the file sink keeps its own cursor beside its files,
    // the stdout sink has nothing else.
    for sink in ["out", "echo"] {
        std::fs::write(offsets.join(format!("sink-{sink}.json")), b"{\"next_off").unwrap();
    }
    let d = setup.start();
    let status = wait_status(
        &d,
        Duration::from_secs(30),
        "the stdout sink to stop",
        |s| s[0]["sinks"]["echo"]["state"] == "failed",
    )
    .await;
    let error = status[0]["sinks"]["echo"]["last_error"].as_str().unwrap();
    assert!(
        error.contains("cannot be read") && error.contains("siphon replay demo echo --from"),
        "{error}"
    );
    drain_and_stop(d, 200).await;
    assert_exactly_once(&setup, 200);
}

/// The data directory is lost while the file sink's output (elsewhere) keeps its cursor: by
/// default an event file, whose past the new log cannot give back, stops and says how to
/// rebuild it; with `on_other_log = "rebuild"` it is rebuilt from the new log, each event
/// once.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_followed_a_lost_log_is_rebuilt_or_refused() {
    let setup = Setup::new(120, "1ms", "");
    let d = setup.start();
    drain_and_stop(d, 120).await;
    assert_exactly_once(&setup, 120);
    std::fs::remove_dir_all(setup.dir.path().join("data")).unwrap();
    let d = setup.start();
    let status = wait_status(&d, Duration::from_secs(30), "the sink to refuse", |s| {
        sink(s)["state"] == "failed"
    })
    .await;
    let error = sink(&status)["last_error"].as_str().unwrap();
    assert!(
        error.contains("belongs to another change log")
            && error.contains("siphon replay demo out --from 0 --reset"),
        "{error}"
    );
    drop(d);
    // Rebuilt from the new log (a new generator run writes the same 120 events).
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "batch_size = 50\n",
        "batch_size = 50\non_other_log = \"rebuild\"\n",
    );
    std::fs::write(&setup.config, text).unwrap();
    std::fs::remove_dir_all(setup.dir.path().join("data")).unwrap();
    let d = setup.start();
    drain_and_stop(d, 120).await;
    assert_exactly_once(&setup, 120);
}

/// A source that cannot reach its database: status never says the sinks are current, the
/// daemon is not ready, and the metrics give an alert rule what it needs.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_that_cannot_start_shows_in_status_readiness_and_metrics() {
    let port = siphon_test_support::free_port();
    let source = format!(
        "kind = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1:{port}/nowhere\"\ntables = [\"public.t\"]"
    );
    let setup = Setup::with_source(&source, 0, "");
    let d = setup.start();
    let status = wait_status(
        &d,
        Duration::from_secs(30),
        "the source to be behind",
        |s| {
            s[0]["source_behind_ms"]
                .as_u64()
                .is_some_and(|ms| ms >= 1500)
        },
    )
    .await;
    assert_ne!(status[0]["source"]["state"], "running", "{status:#}");
    assert!(
        sink(&status)["lag_ms"]
            .as_u64()
            .is_some_and(|ms| ms >= 1500),
        "a sink of a source that never started shows no lag: {status:#}"
    );
    let http = reqwest::Client::new();
    let ready = http.get(format!("{}/ready", d.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let metrics = http
        .get(format!("{}/metrics", d.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "siphon_source_up{pipeline=\"demo\"} 0"),
        "{metrics}"
    );
    let behind: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("siphon_source_seconds_behind{pipeline=\"demo\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no siphon_source_seconds_behind in\n{metrics}"));
    assert!(behind >= 1.5, "{behind}");
}

/// Passwords given in every form a connection string takes (user info, a `?password=`
/// parameter, a libpq `key=value` string), to endpoints that refuse the connection: none
/// appears in the log, in status, in the metrics, or in what the CLI prints.
#[tokio::test(flavor = "multi_thread")]
async fn passwords_never_appear_in_logs_status_metrics_or_the_cli() {
    let dead = siphon_test_support::free_port();
    let secrets = [
        "Pw1KeyValue",
        "Pw2Redis",
        "Pw3Query",
        "Pw4UserInfo",
        "Pw5Elastic",
        "Pw6Token",
    ];
    let source = format!(
        "kind = \"postgres\"\nurl = \"host=127.0.0.1 port={dead} user=postgres password=Pw1KeyValue dbname=x\"\ntables = [\"public.t\"]"
    );
    let sinks = format!(
        r#"
[pipelines.demo.sinks.cache]
kind = "redis"
url = "redis://:Pw2Redis@127.0.0.1:{dead}"
max_backoff = "200ms"

[pipelines.demo.sinks.warehouse]
kind = "postgres"
url = "postgres://postgres@127.0.0.1:{dead}/x?password=Pw3Query"
max_backoff = "200ms"

[pipelines.demo.sinks.audit]
kind = "postgres"
url = "postgres://postgres:Pw4UserInfo@127.0.0.1:{dead}/x"
max_backoff = "200ms"

[pipelines.demo.sinks.search]
kind = "elasticsearch"
url = "http://127.0.0.1:{dead}"
username = "elastic"
password = "Pw5Elastic"
max_backoff = "200ms"
"#
    );
    let setup = Setup::with_source(&source, 0, &sinks);
    let text = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace("[admin]\n", "[admin]\ntoken = \"Pw6Token\"\n");
    std::fs::write(&setup.config, text).unwrap();
    // The sinks wait for the source's tables, which never come: they are opened by a check.
    let check = setup.cli(&["check", "--connect"]);
    let d = setup.start();
    let http = reqwest::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", d.admin))
            .bearer_auth("Pw6Token")
            .send()
    };
    // Until the source has failed to connect a few times.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status: serde_json::Value = get("/api/pipelines").await.unwrap().json().await.unwrap();
        if status[0]["source"]["errors"].as_u64().unwrap_or(0) >= 2 {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{status:#}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        status[0]["source"]["last_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{status:#}"
    );
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    let cli = setup.cli(&["status"]);
    let cli_json = setup.cli(&["status", "--json"]);
    drop(d);
    let outputs = [
        (
            "the log",
            std::fs::read_to_string(setup.dir.path().join("daemon.log")).unwrap(),
        ),
        ("status", status.to_string()),
        ("metrics", metrics),
        (
            "siphon status",
            String::from_utf8_lossy(&cli.stdout).into_owned()
                + &String::from_utf8_lossy(&cli.stderr),
        ),
        (
            "siphon status --json",
            String::from_utf8_lossy(&cli_json.stdout).into_owned(),
        ),
        (
            "siphon check",
            String::from_utf8_lossy(&check.stdout).into_owned()
                + &String::from_utf8_lossy(&check.stderr),
        ),
    ];
    assert!(
        outputs[5].1.contains("connect") || outputs[5].1.contains("refused"),
        "the check reached nothing: {}",
        outputs[5].1
    );
    for (what, text) in &outputs {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{secret} appears in {what}:\n{text}"
            );
        }
    }
}

/// A web page the operator has open must not drive the admin API: a cross-origin replay is
/// refused, and so is any request naming a host the API does not answer to (DNS rebinding).
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_refuses_cross_origin_and_rebound_requests() {
    let setup = Setup::new(50, "1ms", "");
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[admin]\n",
        "[admin]\nallowed_hosts = [\"siphon.internal\"]\n",
    );
    std::fs::write(&setup.config, text).unwrap();
    let d = setup.start();
    drop(
        wait_status(&d, Duration::from_secs(30), "the sink to apply all", |s| {
            sink(s)["next_offset"] == 50
        })
        .await,
    );
    let http = reqwest::Client::new();
    let port = setup.admin_port;
    let replay = format!(
        "{}/api/pipelines/demo/sinks/out/replay?from=0&reset=true",
        d.admin
    );
    let post = |host: &str, origin: Option<&str>| {
        let mut req = http.post(&replay).header("Host", host);
        if let Some(origin) = origin {
            req = req.header("Origin", origin);
        }
        req.send()
    };
    let evil = format!("evil.example:{port}");
    let local = format!("127.0.0.1:{port}");
    for (host, origin) in [
        (evil.as_str(), Some("http://evil.example")),
        (evil.as_str(), None),
        (local.as_str(), Some("http://evil.example")),
        (local.as_str(), Some("null")),
    ] {
        let status = post(host, origin).await.unwrap().status();
        assert_eq!(status, 403, "Host {host}, Origin {origin:?}");
    }
    let read = |host: String| {
        http.get(format!("{}/api/pipelines", d.admin))
            .header("Host", host)
            .send()
    };
    assert_eq!(read(evil.clone()).await.unwrap().status(), 403);
    // A Host that is not text is no name this API answers to.
    let unreadable = http
        .get(format!("{}/api/pipelines", d.admin))
        .header(
            "Host",
            reqwest::header::HeaderValue::from_bytes(b"evil\xff.example").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(unreadable.status(), 403);
    // A scraper reaching /metrics by a service's name is answered.
    let scrape = http
        .get(format!("{}/metrics", d.admin))
        .header("Host", format!("siphon.monitoring.svc:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), 200);
    assert_eq!(
        read(format!("localhost:{port}")).await.unwrap().status(),
        200
    );
    assert_eq!(
        read(format!("siphon.internal:{port}"))
            .await
            .unwrap()
            .status(),
        200
    );
    // Nothing was reset: the output still holds every event once.
    assert_eq!(setup.output_sequence(), (0..50).collect::<Vec<_>>());
    // The CLI (no Origin, an IP address in Host) still replays.
    let out = setup.cli(&["replay", "demo", "out", "--from", "0", "--reset"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drain_and_stop(d, 50).await;
    assert_exactly_once(&setup, 50);
}

/// A sink whose store refuses its writes for good stops alone: the source and the other
/// sink go on to the end of the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_permanent_error_stops_only_that_sink() {
    let target = siphon_test_support::postgres().await.unwrap();
    // A table siphon did not make where the sink would write: a permanent error.
    target
        .execute("create schema demo; create table demo.orders (id bigint primary key)")
        .await
        .unwrap();
    let setup = Setup::new(
        300,
        "1ms",
        &format!(
            "\n[pipelines.demo.sinks.warehouse]\nkind = \"postgres\"\nurl = \"{}\"\n",
            target.url
        ),
    );
    let d = setup.start();
    let status = wait_status(&d, Duration::from_secs(60), "the warehouse to stop", |s| {
        s[0]["sinks"]["warehouse"]["state"] == "failed"
    })
    .await;
    let error = status[0]["sinks"]["warehouse"]["last_error"]
        .as_str()
        .unwrap();
    assert!(error.contains("not made by siphon"), "{error}");
    // The other sink and the source go on.
    drain_and_stop(d, 300).await;
    assert_exactly_once(&setup, 300);
}

/// A sink stuck on a receiver that is down: its lag in seconds is the age of the oldest
/// record it has not applied, growing while nothing goes in (in status and in `/metrics`),
/// and its error says where (scheme, host and port, no password) and why (refused).
#[tokio::test(flavor = "multi_thread")]
async fn a_stuck_sink_s_lag_grows_and_its_error_says_where_and_why() {
    let port = siphon_test_support::free_port();
    let setup = Setup::new(
        300,
        "1ms",
        &format!(
            "\n[pipelines.demo.sinks.hook]\nkind = \"http\"\n\
             url = \"http://siphon:pa55word@127.0.0.1:{port}/hook\"\nattempts = 1\n"
        ),
    );
    let d = setup.start();
    let hook = |s: &serde_json::Value| s[0]["sinks"]["hook"].clone();
    let lag_ms = |s: &serde_json::Value| hook(s)["lag_ms"].as_u64().unwrap_or(0);
    let stuck = wait_status(&d, Duration::from_secs(60), "the webhook to fail", |s| {
        hook(s)["last_error"].is_string() && lag_ms(s) > 0
    })
    .await;
    let first = lag_ms(&stuck);
    // Its error stays readable between its attempts (it was cleared at each reopening).
    let later = wait_status(&d, Duration::from_secs(60), "the lag to grow", |s| {
        assert!(hook(s)["last_error"].is_string(), "the error went: {s:#}");
        lag_ms(s) >= first + 2000
    })
    .await;
    assert_eq!(hook(&later)["next_offset"], 0, "{later:#}");
    let error = hook(&later)["last_error"].as_str().unwrap().to_owned();
    assert!(
        error.contains(&format!("http://127.0.0.1:{port}"))
            && error.to_lowercase().contains("connection refused")
            && !error.contains("url (")
            && !error.contains("pa55word"),
        "{error}"
    );
    let metrics = reqwest::get(format!("{}/metrics", d.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let served: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("siphon_sink_lag_ms{pipeline=\"demo\",sink=\"hook\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no lag for the hook in\n{metrics}"));
    assert!(served >= first + 2000, "{served} ms in /metrics");
}

/// The log's hard size cap removes records a stuck sink has not read: status says it needs a
/// replay (and how), the metric says so, and the other sink goes on.
#[tokio::test(flavor = "multi_thread")]
async fn records_lost_to_max_size_mark_the_sink_for_a_replay() {
    let dead = siphon_test_support::free_port();
    // The cap leaves the file sink, which keeps up, a thousand events of slack.
    let source = "kind = \"generator\"\ntables = [\"demo.orders\", \"demo.customers\"]\nkeys = 40\n\
                  events = 2000\ntransaction_size = 7\ninterval = \"5ms\"";
    let setup = Setup::with_log(
        source,
        "segment_size = \"16KiB\"\nmax_size = \"256KiB\"\ncompaction = false\nmaintenance_interval = \"50ms\"",
        2000,
        &format!(
            "\n[pipelines.demo.sinks.stuck]\nkind = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1:{dead}/x\"\nmax_backoff = \"100ms\"\n"
        ),
    );
    let d = setup.start();
    let status = wait_status(
        &d,
        Duration::from_secs(60),
        "the stuck sink to need a replay",
        |s| s[0]["sinks"]["stuck"]["state"] == "needs_replay" && sink(s)["next_offset"] == 2000,
    )
    .await;
    let stuck = &status[0]["sinks"]["stuck"];
    assert!(stuck["lost"]["end"].as_u64().unwrap() > 0, "{stuck}");
    let error = stuck["last_error"].as_str().unwrap();
    assert!(error.contains("siphon replay demo stuck --from"), "{error}");
    assert!(
        status[0]["records_lost"].as_u64().unwrap() > 0,
        "{status:#}"
    );
    let metrics = reqwest::get(format!("{}/metrics", d.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "siphon_sink_needs_replay{pipeline=\"demo\",sink=\"stuck\"} 1"),
        "{metrics}"
    );
    // It stays so while its task retries its store (a few retries, at 100ms at most).
    let retries = stuck["retries"].as_u64().unwrap_or(0);
    let later = wait_status(&d, Duration::from_secs(30), "more retries", |s| {
        s[0]["sinks"]["stuck"]["retries"].as_u64() >= Some(retries + 3)
    })
    .await;
    assert_eq!(later[0]["sinks"]["stuck"]["state"], "needs_replay");
    drain_and_stop(d, 2000).await;
    assert_exactly_once(&setup, 2000);
}

/// A sink stuck in a request to its store holds the shutdown no longer than
/// `shutdown_timeout`, and a second signal ends the process at once; neither loses what the
/// stuck sink had not committed, nor makes the other sink repeat anything.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_timeout_and_a_second_signal_bound_a_stuck_sink() {
    let search = siphon_test_support::search::SearchStandIn::start()
        .await
        .unwrap();
    let setup = Setup::new(
        600,
        "5ms",
        &format!(
            "\n[pipelines.demo.sinks.search]\nkind = \"elasticsearch\"\nurl = \"{}\"\nbatch_size = 20\n",
            search.url
        ),
    );
    let set_shutdown_timeout = |timeout: &str| {
        let text = std::fs::read_to_string(&setup.config).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("shutdown_timeout"))
            .unwrap()
            .to_owned();
        let text = text.replace(&line, &format!("shutdown_timeout = \"{timeout}\""));
        std::fs::write(&setup.config, text).unwrap();
    };
    let wait_held = |d: &siphon_test_support::Daemon| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while search.held() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no request reached the stalled cluster:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    // Round 1: the cluster hangs while the search sink writes a batch.
    set_shutdown_timeout("2s");
    let mut d = setup.start();
    wait_status(
        &d,
        Duration::from_secs(30),
        "the search sink to apply",
        |s| s[0]["sinks"]["search"]["next_offset"].as_u64() > Some(40),
    )
    .await;
    search.set_stall(true);
    wait_held(&d);
    let asked = std::time::Instant::now();
    d.signal("TERM").unwrap();
    let status = d.wait(Duration::from_secs(30)).unwrap();
    let took = asked.elapsed();
    let log = d.log();
    assert!(status.success(), "exit status {status}; log:\n{log}");
    assert!(
        log.contains("shutdown timeout reached"),
        "the stuck sink did not hold the shutdown:\n{log}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(12),
        "the shutdown took {took:?} with shutdown_timeout = 2s"
    );

    // Round 2: stuck again (it cannot open its store); a second signal ends it at once,
    // although the timeout is a minute.
    set_shutdown_timeout("60s");
    let mut d = setup.start();
    wait_held(&d);
    let applied = setup.output().len() as u64;
    wait_status(&d, Duration::from_secs(30), "the file sink to go on", |s| {
        sink(s)["next_offset"].as_u64() > Some(applied + 20)
    })
    .await;
    d.signal("TERM").unwrap();
    // Signals sent together arrive as one: the second goes once the first has been seen (the
    // log holds round 1's line too).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while d.log().matches("a second signal exits at once").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let asked = std::time::Instant::now();
    d.signal("TERM").unwrap();
    let status = d
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", d.log()));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the second signal took {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130), "log:\n{}", d.log());

    // Round 3: the cluster answers again; both stores end with every row, the file sink
    // with every event once.
    search.set_stall(false);
    let d = setup.start();
    wait_status(
        &d,
        Duration::from_secs(60),
        "the search sink to catch up",
        |s| s[0]["sinks"]["search"]["next_offset"].as_u64() == Some(600),
    )
    .await;
    drain_and_stop(d, 600).await;
    assert_exactly_once(&setup, 600);
    let mut documents = std::collections::BTreeMap::new();
    for table in ["orders", "customers"] {
        for (id, doc) in search.documents(table) {
            documents.insert((table.to_owned(), id.parse::<i64>().unwrap()), doc);
        }
    }
    let want = expected_store_rows(&setup, 600);
    let differing: Vec<String> = want
        .keys()
        .chain(documents.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| want.get(k) != documents.get(k))
        .map(|k| {
            format!(
                "{k:?}: source {:?}, search {:?}",
                want.get(k),
                documents.get(k)
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "the search documents differ from the source rows:\n{}\nlog:\n{}",
        differing.join("\n"),
        std::fs::read_to_string(setup.dir.path().join("daemon.log")).unwrap_or_default()
    );
}

/// A full disk under the data directory (a tmpfs of the test's own) pauses the pipeline:
/// the log's appends and the sinks' cursor saves fail and are retried, and once space
/// returns everything goes on, nothing lost or repeated. A sink whose cursor could not be
/// saved stopped for good before (the chaos harness found it).
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_pauses_the_pipeline_until_space_returns() {
    let disk = siphon_test_support::SmallDisk::new(64 << 20).unwrap();
    let setup = Setup::new(3000, "2ms", "");
    std::os::unix::fs::symlink(disk.path(), setup.dir.path().join("data")).unwrap();
    let d = setup.start();
    wait_status(&d, Duration::from_secs(60), "some records applied", |s| {
        sink(s)["next_offset"].as_u64() > Some(200)
    })
    .await;
    disk.fill().unwrap();
    let status = wait_status(
        &d,
        Duration::from_secs(60),
        "the sink meeting the full disk",
        |s| {
            sink(s)["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("No space left"))
        },
    )
    .await;
    assert_ne!(sink(&status)["state"], "failed", "{}", sink(&status));
    tokio::time::sleep(Duration::from_secs(1)).await;
    disk.free_up().unwrap();
    drain_and_stop(d, 3000).await;
    assert_exactly_once(&setup, 3000);
}
