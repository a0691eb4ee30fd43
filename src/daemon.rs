//! The daemon: every pipeline and the admin API, until shutdown.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Runs every pipeline and the admin API until `cancel` fires, then shuts down gracefully:
/// sources stop, sinks finish the batch in flight and save their cursors, within
/// `shutdown_timeout`.
pub async fn run(config: Config, cancel: CancellationToken) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    let runtime = crate::runtime::start(&config, &cancel, &mut tasks)?;
    if config.admin.enabled {
        let server = crate::admin::bind(&config.admin, runtime).await?;
        let cancel = cancel.clone();
        tasks.spawn(async move { server.serve(cancel).await });
    }
    tracing::info!(pipelines = config.pipelines.len(), "siphon is running");
    cancel.cancelled().await;
    crate::runtime::shut_down(tasks, config.shutdown_timeout).await;
    Ok(())
}
