//! The runtime in-process: cancelled through its token, it saves cursors and resumes.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;

fn config(dir: &std::path::Path, events: u64) -> Config {
    Config::from_toml(&format!(
        r#"
data_dir = "{data}"
shutdown_timeout = "5s"
[admin]
enabled = false
[pipelines.p.source]
kind = "generator"
events = {events}
interval = "1ms"
[pipelines.p.sinks.f]
kind = "file"
path = "{out}"
"#,
        data = dir.join("data").display(),
        out = dir.join("out").display(),
    ))
    .unwrap()
}

fn lines(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("out/events-000001.jsonl")).map_or(0, |t| t.lines().count())
}

/// Waits until the output holds at least `n` lines, or panics after a while.
async fn wait_for_lines(dir: &std::path::Path, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lines(dir) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the output never reached {n} lines"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn cursor(dir: &std::path::Path) -> u64 {
    let bytes = std::fs::read(dir.join("data/pipelines/p/offsets/sink-f.json")).unwrap();
    serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["next_offset"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_token_stops_everything_with_cursors_saved() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(crate::daemon::run(
        config(dir.path(), 100_000),
        cancel.clone(),
    ));
    wait_for_lines(dir.path(), 50).await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("shutdown in time")
        .unwrap()
        .unwrap();
    let written = lines(dir.path());
    assert_eq!(
        cursor(dir.path()),
        written as u64,
        "the cursor saved on shutdown matches the output"
    );

    // Run again: it resumes at the cursor and writes each event once.
    let cancel = CancellationToken::new();
    let target = written + 30;
    let run = tokio::spawn(crate::daemon::run(
        config(dir.path(), 100_000),
        cancel.clone(),
    ));
    wait_for_lines(dir.path(), target).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let text = std::fs::read_to_string(dir.path().join("out/events-000001.jsonl")).unwrap();
    let seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["source"]["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(seqs.len() >= target);
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "a gap or a repeat across the restart"
    );
}
