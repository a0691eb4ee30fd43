//! Talking to a running daemon's admin API.

use std::time::Duration;

use siphon_core::TableName;

use crate::config::Config;
use crate::runtime::PipelineStatus;

/// A client of the admin API named in the configuration.
#[derive(Debug)]
pub(super) struct AdminClient {
    base: String,
    http: reqwest::Client,
    token: Option<siphon_core::Secret>,
}

impl AdminClient {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(AdminClient {
            base: format!("http://{}", config.admin.listen),
            http,
            token: config.admin.resolved_token()?,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t.expose()),
            None => req,
        }
    }

    /// Whether a daemon answers on the admin address.
    pub async fn is_up(&self) -> bool {
        self.request(reqwest::Method::GET, "/health")
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Every pipeline's status.
    pub async fn pipelines(&self) -> anyhow::Result<Vec<PipelineStatus>> {
        let resp = self
            .request(reqwest::Method::GET, "/api/pipelines")
            .send()
            .await?;
        check(&resp)?;
        Ok(resp.json().await?)
    }

    /// Starts a replay; returns the offset it runs to.
    pub async fn replay(
        &self,
        pipeline: &str,
        sink: &str,
        from: u64,
        reset: bool,
    ) -> anyhow::Result<u64> {
        let path =
            format!("/api/pipelines/{pipeline}/sinks/{sink}/replay?from={from}&reset={reset}");
        let resp = self.request(reqwest::Method::POST, &path).send().await?;
        if !resp.status().is_success() {
            let status = resp.status();
            anyhow::bail!(
                "the daemon refused the replay ({status}): {}",
                resp.text().await.unwrap_or_default().trim()
            );
        }
        let body: serde_json::Value = resp.json().await?;
        body["until"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("unexpected answer from the daemon: {body}"))
    }
}

impl AdminClient {
    /// Asks the daemon for an incremental snapshot of `tables`.
    pub async fn snapshot(&self, pipeline: &str, tables: &[TableName]) -> anyhow::Result<()> {
        let names: Vec<String> = tables.iter().map(ToString::to_string).collect();
        let path = format!(
            "/api/pipelines/{pipeline}/snapshot?tables={}",
            names.join(",")
        );
        self.post(&path, "the snapshot").await
    }

    /// Stops, pauses or resumes the pipeline's incremental snapshot.
    pub async fn snapshot_control(&self, pipeline: &str, action: &str) -> anyhow::Result<()> {
        let path = format!("/api/pipelines/{pipeline}/snapshot/{action}");
        self.post(&path, &format!("the snapshot {action}")).await
    }

    async fn post(&self, path: &str, what: &str) -> anyhow::Result<()> {
        let resp = self.request(reqwest::Method::POST, path).send().await?;
        check_token(&resp)?;
        if !resp.status().is_success() {
            let status = resp.status();
            anyhow::bail!(
                "the daemon refused {what} ({status}): {}",
                resp.text().await.unwrap_or_default().trim()
            );
        }
        Ok(())
    }
}

fn check_token(resp: &reqwest::Response) -> anyhow::Result<()> {
    if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
        anyhow::bail!("the admin API wants a token: set admin.token_file or SIPHON__ADMIN__TOKEN");
    }
    Ok(())
}

fn check(resp: &reqwest::Response) -> anyhow::Result<()> {
    check_token(resp)?;
    if !resp.status().is_success() {
        anyhow::bail!("the admin API answered {}", resp.status());
    }
    Ok(())
}
