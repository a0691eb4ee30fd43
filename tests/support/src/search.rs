//! An in-process stand-in for Elasticsearch/OpenSearch, because neither server can run on
//! this machine. It implements the documented parts siphon uses: `_bulk` (NDJSON `index` and
//! `delete` with `version_type=external`, per-item status, 409 on a stale version),
//! `_mget`, `GET`, `PUT` and `DELETE /{index}/_doc/{id}`, `_delete_by_query` with `match_all`, `DELETE /{index}`
//! and `GET /`. Deletes leave a versioned tombstone (Elasticsearch keeps them for
//! `index.gc_deletes`, 60 s by default; here for ever). Faults can be switched on: every
//! request answered 429 or 503, as an overloaded or stopped cluster would.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value as Json, json};

/// A document's version and source; `None` is a delete's tombstone.
type Entry = (u64, Option<Json>);

#[derive(Debug, Default)]
struct Inner {
    indices: BTreeMap<String, BTreeMap<String, Entry>>,
    fault: Option<u16>,
    reject_id: Option<String>,
    requests: u64,
}

/// The running stand-in; it stops when dropped.
#[derive(Debug)]
pub struct SearchStandIn {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SearchStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SearchStandIn {
    /// Starts one on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/", get(root))
            .route("/_bulk", post(bulk))
            .route("/_mget", post(mget))
            .route("/{index}", axum::routing::delete(delete_index))
            .route(
                "/{index}/_doc/{id}",
                get(get_doc).put(put_doc).delete(delete_doc),
            )
            .route("/{index}/_delete_by_query", post(delete_by_query))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(SearchStandIn { url, inner, task })
    }

    /// Answers every request with `status` (429, 503, …) until called with `None`.
    pub fn set_fault(&self, status: Option<u16>) {
        self.inner.lock().unwrap().fault = status;
    }

    /// Refuses to index the document with this id (400, as a mapping error would).
    pub fn reject_id(&self, id: Option<&str>) {
        self.inner.lock().unwrap().reject_id = id.map(str::to_owned);
    }

    /// The live documents of `index` by id.
    pub fn documents(&self, index: &str) -> BTreeMap<String, Json> {
        self.inner
            .lock()
            .unwrap()
            .indices
            .get(index)
            .map(|docs| {
                docs.iter()
                    .filter_map(|(id, (_, doc))| Some((id.clone(), doc.clone()?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes every index (a wiped cluster).
    pub fn wipe(&self) {
        self.inner.lock().unwrap().indices.clear();
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.inner.lock().unwrap().requests
    }
}

type Shared = State<Arc<Mutex<Inner>>>;

/// Counts the request; the fault's response if one is switched on.
fn fault(inner: &Mutex<Inner>) -> Option<Response> {
    let mut inner = inner.lock().unwrap();
    inner.requests += 1;
    let status = StatusCode::from_u16(inner.fault?).ok()?;
    Some(
        (
            status,
            axum::Json(json!({"error": {"type": "stand_in_fault"}, "status": status.as_u16()})),
        )
            .into_response(),
    )
}

async fn root(State(inner): Shared) -> Response {
    fault(&inner).unwrap_or_else(|| {
        axum::Json(json!({"name": "stand-in", "version": {"number": "8.15.0"}, "tagline": "You Know, for Search"})).into_response()
    })
}

async fn bulk(State(inner): Shared, body: String) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut lines = body.lines().filter(|l| !l.trim().is_empty());
    let mut items = Vec::new();
    let mut errors = false;
    let mut state = inner.lock().unwrap();
    while let Some(line) = lines.next() {
        let Ok(action) = serde_json::from_str::<Json>(line) else {
            return (StatusCode::BAD_REQUEST, "malformed action line").into_response();
        };
        let Some((op, meta)) = action.as_object().and_then(|o| o.iter().next()) else {
            return (StatusCode::BAD_REQUEST, "empty action").into_response();
        };
        let index = meta["_index"].as_str().unwrap_or_default().to_owned();
        let id = meta["_id"].as_str().unwrap_or_default().to_owned();
        let version = meta["version"].as_u64();
        let external = meta["version_type"] == "external";
        let doc = if op == "index" {
            match lines.next().map(serde_json::from_str::<Json>) {
                Some(Ok(doc)) if doc.is_object() => Some(doc),
                _ => {
                    errors = true;
                    items.push(json!({op: {"_index": index, "_id": id, "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "the document is not a JSON object"}}}));
                    continue;
                }
            }
        } else {
            None
        };
        if op == "index" && state.reject_id.as_deref() == Some(id.as_str()) {
            errors = true;
            items.push(json!({op: {"_index": index, "_id": id, "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "failed to parse field [note]"}}}));
            continue;
        }
        let docs = state.indices.entry(index.clone()).or_default();
        let current = docs.get(&id).map(|(v, _)| *v);
        let (status, result) = match (external, version) {
            (true, Some(v)) if current.is_some_and(|c| v <= c) => {
                (409, "version_conflict_engine_exception")
            }
            (true, Some(v)) => {
                let existed = docs.get(&id).is_some_and(|(_, d)| d.is_some());
                docs.insert(id.clone(), (v, doc.clone()));
                match (op.as_str(), existed) {
                    ("delete", true) => (200, "deleted"),
                    ("delete", false) => (404, "not_found"),
                    (_, true) => (200, "updated"),
                    (_, false) => (201, "created"),
                }
            }
            _ => (400, "action_request_validation_exception"),
        };
        if status == 409 || status == 400 {
            errors = true;
            items.push(json!({op: {"_index": index, "_id": id, "status": status, "error": {"type": result, "reason": format!("[{id}]: version conflict or bad request")}}}));
        } else {
            items.push(json!({op: {"_index": index, "_id": id, "_version": version, "result": result, "status": status}}));
        }
    }
    axum::Json(json!({"took": 1, "errors": errors, "items": items})).into_response()
}

async fn mget(State(inner): Shared, axum::Json(body): axum::Json<Json>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let state = inner.lock().unwrap();
    let docs: Vec<Json> = body["docs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let (index, id) = (d["_index"].as_str().unwrap_or_default(), d["_id"].as_str().unwrap_or_default());
            match state.indices.get(index).and_then(|i| i.get(id)) {
                Some((v, Some(doc))) => json!({"_index": index, "_id": id, "_version": v, "found": true, "_source": doc}),
                _ => json!({"_index": index, "_id": id, "found": false}),
            }
        })
        .collect();
    axum::Json(json!({"docs": docs})).into_response()
}

async fn get_doc(State(inner): Shared, Path((index, id)): Path<(String, String)>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let state = inner.lock().unwrap();
    match state.indices.get(&index).and_then(|i| i.get(&id)) {
        Some((v, Some(doc))) => axum::Json(
            json!({"_index": index, "_id": id, "_version": v, "found": true, "_source": doc}),
        )
        .into_response(),
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"_index": index, "_id": id, "found": false})),
        )
            .into_response(),
    }
}

async fn delete_by_query(
    State(inner): Shared,
    Path(index): Path<String>,
    axum::Json(body): axum::Json<Json>,
) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    if body["query"].get("match_all").is_none() {
        return (
            StatusCode::BAD_REQUEST,
            "the stand-in supports match_all only",
        )
            .into_response();
    }
    let mut state = inner.lock().unwrap();
    let Some(docs) = state.indices.get_mut(&index) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "index_not_found_exception"}})),
        )
            .into_response();
    };
    let deleted = docs.values().filter(|(_, d)| d.is_some()).count();
    docs.clear();
    axum::Json(json!({"deleted": deleted})).into_response()
}

async fn delete_index(State(inner): Shared, Path(index): Path<String>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    match inner.lock().unwrap().indices.remove(&index) {
        Some(_) => axum::Json(json!({"acknowledged": true})).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "index_not_found_exception"}})),
        )
            .into_response(),
    }
}

/// Indexes a document with internal versioning (the cursor document).
async fn put_doc(
    State(inner): Shared,
    Path((index, id)): Path<(String, String)>,
    axum::Json(doc): axum::Json<Json>,
) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    let docs = state.indices.entry(index.clone()).or_default();
    let (version, created) = match docs.get(&id) {
        Some((v, d)) => (v + 1, d.is_none()),
        None => (1, true),
    };
    docs.insert(id.clone(), (version, Some(doc)));
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (
        status,
        axum::Json(json!({"_index": index, "_id": id, "_version": version, "result": if created { "created" } else { "updated" }})),
    )
        .into_response()
}

/// Deletes a document with internal versioning, leaving a tombstone.
async fn delete_doc(State(inner): Shared, Path((index, id)): Path<(String, String)>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    let docs = state.indices.entry(index.clone()).or_default();
    match docs.get(&id).cloned() {
        Some((v, Some(_))) => {
            docs.insert(id.clone(), (v + 1, None));
            axum::Json(json!({"_index": index, "_id": id, "_version": v + 1, "result": "deleted"}))
                .into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"_index": index, "_id": id, "result": "not_found"})),
        )
            .into_response(),
    }
}
