//! `siphon run`.

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Runs the daemon until SIGINT/SIGTERM; a second signal exits at once.
pub(super) async fn run(config: Config) -> anyhow::Result<ExitCode> {
    let cancel = CancellationToken::new();
    tokio::spawn(watch_signals(cancel.clone()));
    crate::daemon::run(config, cancel).await?;
    Ok(ExitCode::SUCCESS)
}

async fn watch_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop siphon with SIGKILL");
        return;
    };
    let wait = async {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    let first = wait.await;
    tracing::info!(
        signal = first,
        "shutdown requested; a second signal exits at once"
    );
    cancel.cancel();
    let again = async {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    let second = again.await;
    tracing::warn!(signal = second, "second signal: exiting now");
    std::process::exit(130);
}
