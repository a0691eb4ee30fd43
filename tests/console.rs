//! The operator's console in a real browser: headless Chromium, through chromedriver, driven
//! by fantoccini (a WebDriver client), against a daemon with an admin token running a
//! PostgreSQL pipeline into three sinks (a file, a webhook the test stops on purpose, and one
//! whose receiver is down, its lag growing on the page). The
//! API refuses every action without the token, from another origin and under a rebound Host,
//! and the page says why. The Grafana dashboard and the alerting rules in `packaging/` query
//! only metrics `/metrics` serves, and the rules pass `promtool check rules`.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value as Json, json};
use siphon_test_support::{Daemon, free_port, postgres};

const TOKEN: &str = "console-test-token";
const BIG_ROWS: i64 = 300_000;
const DASHBOARD: &str = "packaging/grafana/siphon-dashboard.json";
const RULES: &str = "packaging/prometheus/siphon-alerts.yml";

/// chromedriver on a free port, killed with the Chromium it started (its process group)
/// when dropped, also when a test fails before it closes its session.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("chromedriver does not start ({e}): scripts/services installs Debian's chromium and chromium-driver")
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }

    /// A headless Chromium (as root it needs `--no-sandbox`), `rebound.test` resolving to
    /// loopback as a DNS rebinding attack would make it.
    async fn browser(&self) -> Client {
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--no-first-run",
                    "--disable-dev-shm-usage", "--window-size=1280,1000",
                    "--host-resolver-rules=MAP rebound.test 127.0.0.1",
                ],
            },
        });
        let Json::Object(capabilities) = capabilities else {
            unreachable!()
        };
        // rustls (fantoccini's, for https:// drivers) needs its provider chosen: ring and
        // aws-lc-rs are both in this build.
        siphon_core::tls::install_default_provider();
        ClientBuilder::rustls()
            .unwrap()
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session through chromedriver (scripts/services installs chromium)")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// Where the screenshots go (printed, kept after the run).
fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    let path = screenshots().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// What `script` (the body of a function) returns in the page.
async fn eval(browser: &Client, script: &str) -> Json {
    browser.execute(script, Vec::new()).await.unwrap()
}

/// Waits until `check` (a script returning null until it has its answer) answers in the page:
/// it fails once what the page shows of the pipelines (offsets, counts, states) has not
/// changed for `stall` — a deadline that follows the daemon's progress — or after ten times
/// `stall` in all.
async fn wait_page(browser: &Client, what: &str, stall: Duration, check: &str) -> Json {
    let probe = format!(
        "const visible = (css) => {{ const m = document.querySelector(css); return m.hidden ? '' : m.textContent; }};
         const answer = (() => {{ {check} }})();
         return {{answer, shown: document.querySelector('#pipelines').textContent,
                  status: visible('#status-message'), action: visible('#action-message')}};"
    );
    let started = Instant::now();
    let mut moved = (Json::Null, Instant::now());
    loop {
        let mut seen = eval(browser, &probe).await;
        if !seen["answer"].is_null() {
            return seen["answer"].clone();
        }
        let progress = seen["shown"].take();
        if progress != moved.0 {
            moved = (progress, Instant::now());
        }
        if moved.1.elapsed() > stall || started.elapsed() > 10 * stall {
            screenshot(browser, "failed-wait").await;
            panic!(
                "waiting in the page for {what}: the page did not change for {stall:?}, or \
                 {:?} in all; its messages: {seen}",
                10 * stall
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn click(browser: &Client, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

async fn type_into(browser: &Client, css: &str, text: &str) {
    let input = browser.find(Locator::Css(css)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

/// Clicks `css`, then the confirmation's Confirm.
async fn act(browser: &Client, css: &str) {
    click(browser, css).await;
    wait_page(
        browser,
        "the confirmation",
        Duration::from_secs(30),
        "return document.querySelector('#confirm').open ? true : null;",
    )
    .await;
    click(browser, "#confirm-yes").await;
}

/// The webhook: takes every batch until `refuse` is set, then answers 400.
async fn webhook(refuse: Arc<AtomicBool>) -> u16 {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let refuse = refuse.clone();
            async move {
                if refuse.load(Ordering::Relaxed) {
                    (axum::http::StatusCode::BAD_REQUEST, "refused on purpose")
                } else {
                    (axum::http::StatusCode::OK, "ok")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The metric names `/metrics` serves.
async fn served_metrics(admin: &str) -> BTreeSet<String> {
    let text = reqwest::Client::new()
        .get(format!("{admin}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

/// The `siphon_…` metric names a PromQL text uses.
fn queried_metrics(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = promql;
    while let Some(at) = rest.find("siphon_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// Every PromQL expression of the dashboard, by its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Json = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap())
        .expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("every panel is named");
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                title.to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    queries
}

#[test]
fn the_dashboard_has_its_panels_and_the_alerting_rules_pass_promtool() {
    let titles: BTreeSet<String> = dashboard_queries().into_iter().map(|(t, _)| t).collect();
    for wanted in [
        "Lag",
        "Throughput",
        "Source up",
        "Snapshot progress",
        "Errors",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "no panel named {wanted}: {titles:?}"
        );
    }
    let out = Command::new("promtool")
        .args(["check", "rules", RULES])
        .output()
        .expect("promtool runs (Debian's prometheus package has it; scripts/services installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_the_pipeline_and_acts_through_the_api() {
    let db = postgres().await.unwrap();
    db.execute(&format!(
        "create table items (id int primary key, v int not null);
         create table big (id int primary key, v text not null);
         insert into big select g, 'row ' || g from generate_series(1, {BIG_ROWS}) g;
         analyze big;"
    ))
    .await
    .unwrap();
    let refuse = Arc::new(AtomicBool::new(false));
    let hook_port = webhook(refuse.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let config = dir.path().join("siphon.toml");
    std::fs::write(
        &config,
        format!(
            r#"
data_dir = "{data}"
shutdown_timeout = "10s"

[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"

[pipelines.demo.source]
kind = "postgres"
url = "{url}"
tables = ["public.*"]
slot = "{slot}"
publication = "{slot}"
snapshot = "never"
status_interval = "500ms"

[pipelines.demo.sinks.out]
kind = "file"
path = "{out}"

[pipelines.demo.sinks.hook]
kind = "http"
url = "http://127.0.0.1:{hook_port}/hook"
batch_size = 500

[pipelines.demo.sinks.down]
kind = "http"
url = "http://127.0.0.1:{down_port}/hook"
attempts = 1
"#,
            data = dir.path().join("data").display(),
            out = dir.path().join("out").display(),
            url = db.url,
            slot = db.name,
            down_port = free_port(),
        ),
    )
    .unwrap();
    let daemon = Daemon::start(
        common::bin(),
        &config,
        admin_port,
        &dir.path().join("daemon.log"),
    )
    .unwrap();
    let admin = daemon.admin.clone();
    let driver = Driver::start();
    let browser = driver.browser().await;
    let stall = Duration::from_secs(90);

    // Without the token, the page reads nothing and says why.
    browser.goto(&format!("{admin}/")).await.unwrap();
    wait_page(
        &browser,
        "the page to ask for the token",
        stall,
        "const m = document.querySelector('#status-message');
         return !m.hidden && m.textContent.includes('HTTP 401') && m.textContent.includes('admin token') ? m.textContent : null;",
    )
    .await;
    screenshot(&browser, "1-without-token").await;

    // With it, both sinks are listed.
    type_into(&browser, "#token", TOKEN).await;
    click(&browser, "#token-save").await;
    wait_page(
        &browser,
        "both sinks",
        stall,
        "return document.querySelector('tr.sink[data-sink=\"out\"]') && document.querySelector('tr.sink[data-sink=\"hook\"]') ? true : null;",
    )
    .await;

    // A writer: the events/s plot's points change while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let client = db.client().await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                client
                    .batch_execute(&format!(
                        "insert into items values ({}, {n}) on conflict (id) do update set v = excluded.v",
                        n % 500
                    ))
                    .await
                    .unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    let points = "return document.querySelector('svg[data-sink=\"out\"][data-series=\"rate\"]').getAttribute('data-points');";
    let before = eval(&browser, points).await;
    let changed = wait_page(
        &browser,
        "the events/s plot to move",
        stall,
        &format!(
            "const p = (() => {{ {points} }})();
             return p !== {before} && p && p.split(',').some((v) => +v > 0) ? p : null;"
        ),
    )
    .await;
    eprintln!("events/s points: {before} -> {changed}");
    screenshot(&browser, "2-streaming").await;

    // A sink whose receiver is down: its lag in seconds grows on the page, and its error
    // says where and why.
    let stuck = |at_least: f64| {
        format!(
            "const row = document.querySelector('tr.sink[data-sink=\"down\"]');
             const text = row.querySelector('.lag').textContent;
             const m = text.match(/, ([\\d.]+) (s|min|h)$/);
             const seconds = m ? +m[1] * {{s: 1, min: 60, h: 3600}}[m[2]] : 0;
             const error = row.querySelector('td.error').textContent;
             return seconds >= {at_least} && error.toLowerCase().includes('connection refused')
               ? {{text, seconds, error}} : null;"
        )
    };
    let first = wait_page(&browser, "the stuck sink's lag", stall, &stuck(1.0)).await;
    let later = wait_page(
        &browser,
        "the stuck sink's lag to grow",
        stall,
        &stuck(first["seconds"].as_f64().unwrap() + 3.0),
    )
    .await;
    eprintln!("a stuck sink on the page: {first} -> {later}");
    let error = later["error"].as_str().unwrap();
    assert!(
        error.contains("http://127.0.0.1:") && !error.contains("url ("),
        "{later}"
    );
    screenshot(&browser, "2b-stuck-sink").await;

    // A snapshot started from the page, paused and resumed there, its progress shown to its
    // end.
    type_into(
        &browser,
        ".pipeline[data-pipeline=\"demo\"] .snapshot-tables",
        "public.big",
    )
    .await;
    act(
        &browser,
        ".pipeline[data-pipeline=\"demo\"] [data-action=\"snapshot-start\"]",
    )
    .await;
    // Rows read and more to come, or (a machine fast enough to read them all between two of
    // the page's polls) done.
    let midway = wait_page(
        &browser,
        "the snapshot's progress",
        stall,
        "const s = document.querySelector('.snapshot');
         return (s.dataset.state === 'running' && +s.dataset.rows > 0) || s.dataset.state === 'done'
           ? {state: s.dataset.state, text: s.querySelector('.snapshot-text').textContent,
              bar: s.querySelector('progress').value} : null;",
    )
    .await;
    eprintln!("snapshot midway: {midway}");
    screenshot(&browser, "3-snapshot-progress").await;
    if midway["state"] == "running" {
        let bar = midway["bar"].as_f64().unwrap();
        assert!(bar > 0.0 && bar < 1.0, "{midway}");
        let text = midway["text"].as_str().unwrap();
        assert!(text.contains("of about 300.0k in this table"), "{midway}");
    }
    // Paused from the page (unless it is done already), then resumed.
    act(
        &browser,
        ".pipeline[data-pipeline=\"demo\"] [data-action=\"snapshot-pause\"]",
    )
    .await;
    let paused = wait_page(
        &browser,
        "the snapshot paused",
        stall,
        "const s = document.querySelector('.snapshot');
         return s.dataset.state === 'paused' || s.dataset.state === 'done'
           ? {state: s.dataset.state, text: s.querySelector('.snapshot-text').textContent} : null;",
    )
    .await;
    eprintln!("snapshot paused: {paused}");
    if paused["state"] == "paused" {
        assert!(
            paused["text"]
                .as_str()
                .unwrap()
                .starts_with("paused; 1 table(s) left"),
            "{paused}"
        );
        screenshot(&browser, "3b-snapshot-paused").await;
    }
    act(
        &browser,
        ".pipeline[data-pipeline=\"demo\"] [data-action=\"snapshot-resume\"]",
    )
    .await;
    let done = wait_page(
        &browser,
        "the snapshot to complete",
        stall,
        "const s = document.querySelector('.snapshot');
         return s.dataset.state === 'done'
           ? {rows: +s.dataset.rows, text: s.querySelector('.snapshot-text').textContent,
              bar: s.querySelector('progress').value} : null;",
    )
    .await;
    assert_eq!(done["rows"], BIG_ROWS, "{done}");
    assert_eq!(done["bar"], 1.0, "{done}");
    screenshot(&browser, "4-snapshot-done").await;

    // The webhook sink stopped on purpose: the page shows its error, also among the recent.
    refuse.store(true, Ordering::Relaxed);
    let error = wait_page(
        &browser,
        "the webhook sink's error",
        stall,
        "const row = document.querySelector('tr.sink[data-sink=\"hook\"]');
         const error = row.querySelector('td.error').textContent;
         return row.dataset.state === 'failed' && error.includes('400') ? error : null;",
    )
    .await;
    assert!(
        error.as_str().unwrap().contains("refused on purpose"),
        "{error}"
    );
    wait_page(
        &browser,
        "the error among the recent ones",
        stall,
        "const items = [...document.querySelectorAll('#notices li.error')];
         return items.some((li) => li.textContent.includes('hook') && li.textContent.includes('400')) ? true : null;",
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    assert!(writer.await.unwrap() > 20);
    screenshot(&browser, "5-sink-failed").await;

    // The page at a phone's width.
    browser.set_window_size(390, 844).await.unwrap();
    screenshot(&browser, "6-phone").await;
    browser.set_window_size(1280, 1000).await.unwrap();

    // A wrong token: an action is refused, and the page says why.
    type_into(&browser, "#token", "not-the-token").await;
    click(&browser, "#token-save").await;
    type_into(&browser, "tr.sink[data-sink=\"out\"] .replay-from", "0").await;
    act(
        &browser,
        "tr.sink[data-sink=\"out\"] [data-action=\"replay\"]",
    )
    .await;
    let refused = wait_page(
        &browser,
        "the replay refused",
        stall,
        "const m = document.querySelector('#action-message').textContent;
         return m.startsWith('Replay sink out') && m.includes('HTTP 401') ? m : null;",
    )
    .await;
    eprintln!("{refused}");
    screenshot(&browser, "7-refused-without-token").await;

    // Under a rebound Host, the page reads and does nothing, and says why.
    browser
        .goto(&format!("http://rebound.test:{admin_port}/"))
        .await
        .unwrap();
    type_into(&browser, "#token", TOKEN).await;
    click(&browser, "#token-save").await;
    let rebound = wait_page(
        &browser,
        "the rebound Host refused",
        stall,
        "const m = document.querySelector('#status-message').textContent;
         return m.includes('HTTP 403') && m.includes('rebound.test') ? m : null;",
    )
    .await;
    eprintln!("{rebound}");
    screenshot(&browser, "8-rebound-host").await;
    browser.close().await.unwrap();

    // Every action, over HTTP: refused without the token, from another origin, and under a
    // rebound Host; nothing is done on GET.
    let http = reqwest::Client::new();
    let actions = [
        "/api/pipelines/demo/snapshot?tables=public.items",
        "/api/pipelines/demo/snapshot/pause",
        "/api/pipelines/demo/snapshot/resume",
        "/api/pipelines/demo/snapshot/stop",
        "/api/pipelines/demo/sinks/out/replay?from=0&reset=true",
    ];
    for action in actions {
        let url = format!("{admin}{action}");
        let no_token = http.post(&url).send().await.unwrap();
        assert_eq!(no_token.status(), 401, "{action} without the token");
        let foreign = http
            .post(&url)
            .bearer_auth(TOKEN)
            .header("Origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403, "{action} from another origin");
        assert!(foreign.text().await.unwrap().contains("cross-origin"));
        let rebound = http
            .post(&url)
            .bearer_auth(TOKEN)
            .header("Host", format!("rebound.test:{admin_port}"))
            .send()
            .await
            .unwrap();
        assert_eq!(rebound.status(), 403, "{action} under a rebound Host");
        assert!(rebound.text().await.unwrap().contains("allowed_hosts"));
        let get = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(get.status(), 405, "{action} on GET");
    }
    let status: Json = http
        .get(format!("{admin}/api/pipelines"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        status[0]["source_metrics"]["incremental_snapshot_requests"], 3.0,
        "only the page's start, pause and resume were asked for: {status:#}"
    );
    assert_ne!(status[0]["sinks"]["out"]["state"], "replaying");

    // Every metric the dashboard and the rules query is served (the snapshot and the stream
    // made the source's own gauges appear).
    let served = served_metrics(&admin).await;
    let rules = std::fs::read_to_string(RULES).unwrap();
    let mut missing = Vec::new();
    for (title, expr) in dashboard_queries()
        .into_iter()
        .chain(std::iter::once(("the alerting rules".to_owned(), rules)))
    {
        for name in queried_metrics(&expr) {
            if !served.contains(&name) {
                missing.push(format!("{title}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "queried but not served: {missing:?}\nserved: {served:?}"
    );
    drop(daemon);
    db.drop_slot(&db.name).await.unwrap();
}
