//! An in-process stand-in for Elasticsearch/OpenSearch, because neither server can run on
//! this machine. It implements the documented parts siphon uses, as Elasticsearch behaves:
//! `_bulk` (NDJSON `index` and `delete` with `version_type=external`, per-item status, 409
//! on a stale version, 404 `index_not_found_exception` for a write to a missing index when
//! automatic index creation is off), `_mget`, `GET`, `PUT` and `DELETE /{index}/_doc/{id}`,
//! `_search` with a scroll (ids only) and `/_search/scroll`, `PUT /{index}`, `DELETE
//! /{index}` (a comma-separated list, `*` wildcards, as Elasticsearch reads it) and `GET /`. Deletes leave a versioned
//! tombstone (Elasticsearch keeps them for `index.gc_deletes`, 60 s by default; here for
//! ever). Faults can be switched on: every request answered 429 or 503, as an overloaded or
//! stopped cluster would, or held unanswered, as a hung one would.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// `action.auto_create_index = false`: a write to a missing index fails.
    no_auto_create: bool,
    /// Open scrolls: the ids still to return, and the page size.
    scrolls: BTreeMap<String, (Vec<String>, usize)>,
    /// Per index, the documents written since its last refresh: a search does not see them
    /// yet (a real cluster refreshes every second; this one only when asked).
    unrefreshed: BTreeMap<String, std::collections::BTreeSet<String>>,
    next_scroll: u64,
}

/// The running stand-in; it stops when dropped.
#[derive(Debug)]
pub struct SearchStandIn {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    /// While true, requests wait unanswered.
    stall: Arc<tokio::sync::watch::Sender<bool>>,
    /// Requests waiting on the stall now.
    held: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SearchStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A certificate authority made for a test, and the PEM file of its certificate.
#[derive(Debug)]
pub struct TestCa {
    /// The CA certificate's PEM file (what a client is told to trust).
    pub ca_file: std::path::PathBuf,
    server: rustls::ServerConfig,
    _dir: tempfile::TempDir,
}

impl TestCa {
    /// A new CA, and a server certificate it signs for `names` (host names or IP addresses).
    pub fn new(names: &[&str]) -> anyhow::Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "siphon test CA");
        let ca_key = KeyPair::generate()?;
        let ca = ca_params.self_signed(&ca_key)?;
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        let dir = tempfile::tempdir()?;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )?;
        Ok(TestCa {
            ca_file,
            server,
            _dir: dir,
        })
    }
}

/// A TCP listener whose connections go through a TLS handshake.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A client that refuses the certificate ends its handshake: take the next one.
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

impl SearchStandIn {
    /// Starts one on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        Ok(Self::serve(listener, url))
    }

    /// Starts one serving HTTPS on a free loopback port, with the server certificate of `ca`;
    /// its URL names `localhost`.
    pub async fn start_tls(ca: &TestCa) -> anyhow::Result<Self> {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://localhost:{}", tcp.local_addr()?.port());
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(ca.server.clone()));
        Ok(Self::serve(TlsListener { tcp, acceptor }, url))
    }

    fn serve<L: axum::serve::Listener>(listener: L, url: String) -> Self
    where
        L::Addr: std::fmt::Debug,
    {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let stall = Arc::new(tokio::sync::watch::Sender::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let (gate, waiting) = (stall.clone(), held.clone());
        let app = Router::new()
            .route("/", get(root))
            .route("/_bulk", post(bulk))
            .route("/_mget", post(mget))
            .route(
                "/{index}",
                axum::routing::delete(delete_index).put(create_index),
            )
            .route(
                "/{index}/_doc/{id}",
                get(get_doc).put(put_doc).delete(delete_doc),
            )
            .route("/{index}/_search", post(search))
            .route("/{index}/_refresh", post(refresh))
            .route("/_search/scroll", post(scroll).delete(clear_scroll))
            .with_state(inner.clone())
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let (gate, waiting) = (gate.clone(), waiting.clone());
                    async move {
                        let mut released = gate.subscribe();
                        if *released.borrow() {
                            waiting.fetch_add(1, Ordering::SeqCst);
                            let _ = released.wait_for(|stalled| !stalled).await;
                            waiting.fetch_sub(1, Ordering::SeqCst);
                        }
                        next.run(request).await
                    }
                },
            ));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SearchStandIn {
            url,
            inner,
            stall,
            held,
            task,
        }
    }

    /// Holds every request unanswered (a hung cluster) until called with `false`.
    pub fn set_stall(&self, on: bool) {
        self.stall.send_replace(on);
    }

    /// Requests held by the stall right now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// Answers every request with `status` (429, 503, …) until called with `None`.
    pub fn set_fault(&self, status: Option<u16>) {
        self.inner.lock().unwrap().fault = status;
    }

    /// Refuses to index the document with this id (400, as a mapping error would).
    pub fn reject_id(&self, id: Option<&str>) {
        self.inner.lock().unwrap().reject_id = id.map(str::to_owned);
    }

    /// Turns automatic index creation off (or on again): a write to a missing index then
    /// fails with 404, as with `action.auto_create_index = false`.
    pub fn set_auto_create(&self, on: bool) {
        self.inner.lock().unwrap().no_auto_create = !on;
    }

    /// Creates an empty index.
    pub fn create_index(&self, index: &str) {
        self.inner
            .lock()
            .unwrap()
            .indices
            .entry(index.to_owned())
            .or_default();
    }

    /// The names of the indices.
    pub fn indices(&self) -> Vec<String> {
        self.inner.lock().unwrap().indices.keys().cloned().collect()
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
        if !state.indices.contains_key(&index) && (op != "index" || state.no_auto_create) {
            if op == "delete" {
                items.push(
                    json!({op: {"_index": index, "_id": id, "status": 404, "result": "not_found"}}),
                );
            } else {
                errors = true;
                items.push(json!({op: {"_index": index, "_id": id, "status": 404, "error": {"type": "index_not_found_exception", "reason": format!("no such index [{index}]")}}}));
            }
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
                state
                    .unrefreshed
                    .entry(index.clone())
                    .or_default()
                    .insert(id.clone());
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

/// Makes what was indexed searchable (here always so); 404 for a missing index.
async fn refresh(State(inner): Shared, Path(index): Path<String>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    if state.indices.contains_key(&index) {
        state.unrefreshed.remove(&index);
        axum::Json(json!({"_shards": {"failed": 0}})).into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "index_not_found_exception"}, "status": 404})),
        )
            .into_response()
    }
}

/// Opens a scroll over an index's live documents (ids only).
async fn search(
    State(inner): Shared,
    Path(index): Path<String>,
    axum::Json(body): axum::Json<Json>,
) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    let Some(docs) = state.indices.get(&index) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "index_not_found_exception"}, "status": 404})),
        )
            .into_response();
    };
    let unrefreshed = state.unrefreshed.get(&index);
    let ids: Vec<String> = docs
        .iter()
        .filter(|(id, (_, doc))| doc.is_some() && !unrefreshed.is_some_and(|u| u.contains(*id)))
        .map(|(id, _)| id.clone())
        .collect();
    let size = body["size"].as_u64().unwrap_or(10) as usize;
    state.next_scroll += 1;
    let scroll_id = format!("scroll-{}", state.next_scroll);
    state.scrolls.insert(scroll_id.clone(), (ids, size));
    next_page(&mut state, &scroll_id)
}

/// The next page of an open scroll.
async fn scroll(State(inner): Shared, axum::Json(body): axum::Json<Json>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let id = body["scroll_id"].as_str().unwrap_or_default().to_owned();
    next_page(&mut inner.lock().unwrap(), &id)
}

fn next_page(state: &mut Inner, scroll_id: &str) -> Response {
    let Some((ids, size)) = state.scrolls.get_mut(scroll_id) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(
                json!({"error": {"type": "search_context_missing_exception"}, "status": 404}),
            ),
        )
            .into_response();
    };
    let page: Vec<String> = ids.drain(..(*size).min(ids.len())).collect();
    let hits: Vec<Json> = page.iter().map(|id| json!({"_id": id})).collect();
    axum::Json(json!({"_scroll_id": scroll_id, "hits": {"hits": hits}})).into_response()
}

/// Closes scrolls.
async fn clear_scroll(State(inner): Shared, axum::Json(body): axum::Json<Json>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    for id in body["scroll_id"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        state.scrolls.remove(id.as_str().unwrap_or_default());
    }
    axum::Json(json!({"succeeded": true})).into_response()
}

/// Whether `name` matches an index expression (`*` stands for any run of characters).
fn matches(expression: &str, name: &str) -> bool {
    match expression.split_once('*') {
        None => expression == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (0..=name.len() - head.len()).any(|i| matches(tail, &name[head.len() + i..]))
        }
    }
}

/// Deletes the indices an expression names: a comma-separated list of names or patterns, as
/// Elasticsearch reads it (a name that matches nothing is a 404).
async fn delete_index(State(inner): Shared, Path(expression): Path<String>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    let mut doomed = Vec::new();
    for part in expression.split(',') {
        let named: Vec<String> = state
            .indices
            .keys()
            .filter(|name| matches(part, name))
            .cloned()
            .collect();
        if named.is_empty() && !part.contains('*') {
            return (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"error": {"type": "index_not_found_exception", "reason": format!("no such index [{part}]")}})),
            )
                .into_response();
        }
        doomed.extend(named);
    }
    for name in doomed {
        state.indices.remove(&name);
    }
    axum::Json(json!({"acknowledged": true})).into_response()
}

/// Creates an index (400 if it exists).
async fn create_index(State(inner): Shared, Path(index): Path<String>) -> Response {
    if let Some(r) = fault(&inner) {
        return r;
    }
    let mut state = inner.lock().unwrap();
    if state.indices.contains_key(&index) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"type": "resource_already_exists_exception", "reason": format!("index [{index}] already exists")}, "status": 400})),
        )
            .into_response();
    }
    state.indices.insert(index.clone(), BTreeMap::new());
    axum::Json(json!({"acknowledged": true, "index": index})).into_response()
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
    if state.no_auto_create && !state.indices.contains_key(&index) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "index_not_found_exception", "reason": format!("no such index [{index}]")}, "status": 404})),
        )
            .into_response();
    }
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
