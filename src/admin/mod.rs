//! The admin HTTP API, on loopback by default:
//!
//! - `GET /` (and its `/console.js`, `/console.css`): the operator's console, a page that
//!   reads and acts through the endpoints below; the page needs no token, the endpoints it
//!   calls do (see [`console`]);
//! - `GET /health`: the process is alive (never needs the token);
//! - `GET /ready`: every pipeline's source and sinks are running (503 otherwise);
//! - `GET /metrics`: Prometheus text;
//! - `GET /api/pipelines`: status JSON (what `siphon status` prints);
//! - `GET /api/history?range=minutes|hours&since=MS`: every sink's throughput and lag a
//!   second over the last 15 minutes (or a minute over the last 24 hours), and the recent
//!   errors and dead-lettered records ([`history`]);
//! - `POST /api/pipelines/{pipeline}/sinks/{sink}/replay?from=N&reset=true`: start a replay;
//! - `POST /api/pipelines/{pipeline}/snapshot?tables=schema.table,…`: an incremental
//!   snapshot of those tables while streaming goes on (progress in the source's metrics);
//! - `POST /api/pipelines/{pipeline}/snapshot/stop|pause|resume`: forget the tables left,
//!   read no chunk until resumed, go on;
//! - `GET /api/pipelines/{pipeline}/sinks/{sink}/wait?lsn=X/Y&timeout=2s` (or `gtid=`):
//!   read-your-writes, 200 once the sink's store has every change committed up to that
//!   source position, 408 when the time runs out; the body says where the sink stands.
//!
//! With a token configured, every endpoint but `/health`, `/ready` and the console's static
//! files needs `Authorization: Bearer TOKEN` (`/metrics` too, unless `metrics_public`).
//! Without one, the API is served on loopback only, unless `allow_unauthenticated` says
//! otherwise (configuration refuses it).
//! The `/api` endpoints refuse a `Host` header that names a host other than an IP address,
//! `localhost` or `allowed_hosts` (a web page reaching the API through DNS rebinding), and
//! the replay and snapshot endpoints refuse a cross-origin request (a web page the operator has open
//! posting to it).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use siphon_core::source::SnapshotRequest;
use siphon_core::{Secret, TableName};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::AdminConfig;
use crate::runtime::{ReplayError, Runtime, WaitError};

mod console;
pub mod history;

use history::{History, Range};

/// A bound, not yet serving, admin API.
#[derive(Debug)]
pub struct AdminServer {
    listener: TcpListener,
    router: Router,
    state: AppState,
}

#[derive(Debug, Clone)]
struct AppState {
    runtime: Arc<Runtime>,
    history: Arc<History>,
    token: Option<Secret>,
    allowed_hosts: Arc<Vec<String>>,
}

/// Binds the admin API's address (failing now, with the address, if it is taken).
pub async fn bind(config: &AdminConfig, runtime: Arc<Runtime>) -> anyhow::Result<AdminServer> {
    let token = config.resolved_token()?;
    let listener = TcpListener::bind(config.listen).await.map_err(|e| {
        anyhow::anyhow!(
            "admin API: cannot listen on {} ({e}); set admin.listen to a free address",
            config.listen
        )
    })?;
    // Configuration refused this unless admin.allow_unauthenticated said so.
    if config.open_beyond_loopback(token.as_ref()) {
        tracing::warn!(listen = %config.listen, "the admin API is served beyond loopback without a token, as admin.allow_unauthenticated = true says: whoever reaches it can pause, replay and reset sinks");
    }
    let state = AppState {
        runtime,
        history: Arc::default(),
        token,
        allowed_hosts: Arc::new(
            config
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        ),
    };
    let api = Router::new()
        .route("/api/pipelines", get(pipelines))
        .route("/api/history", get(history))
        .route("/api/pipelines/{pipeline}/sinks/{sink}/wait", get(wait))
        .merge(
            Router::new()
                .route(
                    "/api/pipelines/{pipeline}/sinks/{sink}/replay",
                    post(replay),
                )
                .route("/api/pipelines/{pipeline}/snapshot", post(snapshot))
                .route(
                    "/api/pipelines/{pipeline}/snapshot/{action}",
                    post(snapshot_control),
                )
                .route_layer(middleware::from_fn(same_origin)),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), known_host));
    // Probes and scrapers reach /ready and /metrics by whatever name (a service's DNS
    // name): they answer no Host check. A load balancer's probes send no token; a scraper
    // does unless `metrics_public` says it cannot.
    let metrics_route = Router::new().route("/metrics", get(metrics));
    let (open_metrics, protected_metrics) = if config.metrics_public {
        (metrics_route, Router::new())
    } else {
        (Router::new(), metrics_route)
    };
    let protected = protected_metrics
        .merge(api)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let router = Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .merge(open_metrics)
        .merge(console::routes())
        .merge(protected)
        // No answer is read as anything but its declared type (an error echoes its input).
        .layer(axum::middleware::map_response(
            |mut response: Response| async move {
                response.headers_mut().insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    header::HeaderValue::from_static("nosniff"),
                );
                response
            },
        ))
        .with_state(state.clone());
    Ok(AdminServer {
        listener,
        router,
        state,
    })
}

impl AdminServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves, and samples the console's history, until `cancel` fires.
    pub async fn serve(self, cancel: CancellationToken) {
        if let Ok(addr) = self.listener.local_addr() {
            tracing::info!(%addr, "admin API listening");
        }
        let history = self.state.history.clone();
        tokio::spawn(history.sample_every_second(self.state.runtime.clone(), cancel.clone()));
        if let Err(e) = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await
        {
            tracing::error!(error = %e, "admin API stopped");
        }
    }
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.expose().as_bytes())) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

fn forbidden(why: &str) -> Response {
    (StatusCode::FORBIDDEN, format!("{why}\n")).into_response()
}

/// The host part of a `Host` header value (`name:port`, `[v6]:port`).
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    }
}

/// Refuses a request whose `Host` names a host other than an IP address, `localhost` or
/// one of `allowed_hosts`: that is how a page reaches the API through DNS rebinding.
async fn known_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(host) = request.headers().get(header::HOST) {
        let Ok(host) = host.to_str() else {
            return forbidden("the Host header is not readable text");
        };
        let name = host_name(host).to_ascii_lowercase();
        let known = name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || state.allowed_hosts.contains(&name);
        if !known {
            return forbidden(&format!(
                "the Host {host:?} is not one this API answers to; add it to admin.allowed_hosts"
            ));
        }
    }
    next.run(request).await
}

/// Refuses a request a web page of another origin sends (browsers name it in `Origin`).
async fn same_origin(request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        let origin = origin.to_str().unwrap_or_default();
        let same = host.is_some_and(|host| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        });
        if !same {
            return forbidden("a cross-origin request may not change anything here");
        }
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn ready(State(state): State<AppState>) -> Response {
    let statuses = state.runtime.statuses();
    let not_ready: Vec<&str> = statuses
        .iter()
        .filter(|p| !p.is_ready())
        .map(|p| p.name.as_str())
        .collect();
    if not_ready.is_empty() {
        (
            StatusCode::OK,
            axum::Json(serde_json::json!({"ready": true})),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"ready": false, "not_ready": not_ready})),
        )
            .into_response()
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = crate::runtime::status::render_metrics(&state.runtime.statuses());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn pipelines(State(state): State<AppState>) -> Response {
    axum::Json(state.runtime.statuses()).into_response()
}

#[derive(Debug, Deserialize)]
struct HistoryParams {
    /// `minutes` (the default) or `hours`.
    range: Option<String>,
    /// Only the samples taken after this time (ms since the epoch): a page that has the
    /// earlier ones asks for the new ones only.
    since: Option<i64>,
}

async fn history(State(state): State<AppState>, Query(params): Query<HistoryParams>) -> Response {
    let range = match params.range.as_deref() {
        None | Some("minutes") => Range::Minutes,
        Some("hours") => Range::Hours,
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("range={other:?}: allowed: minutes, hours"),
            )
                .into_response();
        }
    };
    axum::Json(state.history.series(range, params.since)).into_response()
}

#[derive(Debug, Deserialize)]
struct SnapshotParams {
    /// Comma-separated "schema.table" names.
    tables: String,
}

async fn snapshot(
    State(state): State<AppState>,
    Path(pipeline): Path<String>,
    Query(params): Query<SnapshotParams>,
) -> Response {
    let tables: Result<Vec<TableName>, String> = params
        .tables
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(TableName::parse)
        .collect();
    let tables = match tables {
        Ok(tables) if !tables.is_empty() => tables,
        Ok(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "tables: give one or more \"schema.table\", comma-separated",
            )
                .into_response();
        }
        Err(e) => return (StatusCode::BAD_REQUEST, format!("tables: {e}")).into_response(),
    };
    let answer = serde_json::json!({"pipeline": pipeline, "tables": tables});
    request_snapshot(&state, &pipeline, SnapshotRequest::Tables(tables), answer)
}

/// `stop`, `pause` or `resume` the pipeline's incremental snapshot.
async fn snapshot_control(
    State(state): State<AppState>,
    Path((pipeline, action)): Path<(String, String)>,
) -> Response {
    let request = match action.as_str() {
        "stop" => SnapshotRequest::Stop,
        "pause" => SnapshotRequest::Pause,
        "resume" => SnapshotRequest::Resume,
        other => {
            return (
                StatusCode::NOT_FOUND,
                format!("no snapshot action {other:?}; allowed: stop, pause, resume"),
            )
                .into_response();
        }
    };
    let answer = serde_json::json!({"pipeline": pipeline, "action": action});
    request_snapshot(&state, &pipeline, request, answer)
}

fn request_snapshot(
    state: &AppState,
    pipeline: &str,
    request: SnapshotRequest,
    answer: serde_json::Value,
) -> Response {
    match state.runtime.request_snapshot(pipeline, request) {
        Ok(()) => (StatusCode::ACCEPTED, axum::Json(answer)).into_response(),
        Err(e) => (StatusCode::CONFLICT, e.to_string()).into_response(),
    }
}

/// Longest wait a request may ask for.
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `?<point>&timeout=…`: the point as the pipeline's source names it (PostgreSQL `lsn=` with
/// `pg_current_wal_lsn()` after the commit, MariaDB `gtid=` with `@@gtid_binlog_pos`), and how
/// long to wait ("2s", "500ms"; 5s by default, 60s at most).
async fn wait(
    State(state): State<AppState>,
    Path((pipeline, sink)): Path<(String, String)>,
    Query(mut params): Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    let bad = |message: String| (StatusCode::BAD_REQUEST, message).into_response();
    let timeout = params.remove("timeout");
    let point = match params.pop_first() {
        Some((param, text)) if params.is_empty() => {
            match state.runtime.point(&pipeline, &param, &text) {
                Ok(point) => point,
                Err(e @ WaitError::NoPipeline(_)) => {
                    return (StatusCode::NOT_FOUND, e.to_string()).into_response();
                }
                Err(e @ WaitError::Unsupported(_)) => {
                    return (StatusCode::NOT_IMPLEMENTED, e.to_string()).into_response();
                }
                Err(e) => return bad(e.to_string()),
            }
        }
        _ => {
            return bad(
                "give the one point to wait for, as the pipeline's source names it: lsn= \
                 (PostgreSQL) or gtid= (MariaDB)"
                    .into(),
            );
        }
    };
    let timeout = match timeout.as_deref() {
        None => std::time::Duration::from_secs(5),
        Some(text) => match text.parse::<siphon_core::units::HumanDuration>() {
            Ok(d) if d.0 <= MAX_WAIT => d.0,
            _ => {
                return bad(format!(
                    "timeout={text:?}: a duration such as \"2s\" or \"500ms\", at most 60s"
                ));
            }
        },
    };
    match state.runtime.wait(&pipeline, &sink, point, timeout).await {
        Ok(reached) => axum::Json(reached).into_response(),
        Err(WaitError::TimedOut(at)) => {
            (StatusCode::REQUEST_TIMEOUT, axum::Json(at)).into_response()
        }
        Err(e @ (WaitError::NotFound { .. } | WaitError::NoPipeline(_))) => {
            (StatusCode::NOT_FOUND, e.to_string()).into_response()
        }
        Err(e @ WaitError::BadPoint(_)) => bad(e.to_string()),
        Err(e @ WaitError::Unsupported(_)) => {
            (StatusCode::NOT_IMPLEMENTED, e.to_string()).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
struct ReplayParams {
    from: u64,
    #[serde(default)]
    reset: bool,
}

async fn replay(
    State(state): State<AppState>,
    Path((pipeline, sink)): Path<(String, String)>,
    Query(params): Query<ReplayParams>,
) -> Response {
    match state
        .runtime
        .replay(&pipeline, &sink, params.from, params.reset)
        .await
    {
        Ok(until) => (
            StatusCode::ACCEPTED,
            axum::Json(serde_json::json!({"from": params.from, "until": until})),
        )
            .into_response(),
        Err(e @ ReplayError::NotFound { .. }) => {
            (StatusCode::NOT_FOUND, e.to_string()).into_response()
        }
        Err(e @ ReplayError::Refused(_)) => (StatusCode::CONFLICT, e.to_string()).into_response(),
    }
}
