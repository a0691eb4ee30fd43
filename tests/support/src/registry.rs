//! A stand-in for a Confluent schema registry, because none is packaged anywhere this machine
//! reaches. It answers the REST calls that siphon and Confluent's own client (the
//! `AvroConverter` Debezium uses) make, as the registry does:
//!
//! - `POST /subjects/{subject}/versions` `{"schema": S}` registers `S` under the subject and
//!   answers `{"id": N}`: ids are global, from 1, one per distinct schema text; a schema the
//!   subject has gets its id back without a new version; one another subject has keeps its id;
//! - `GET /schemas/ids/{id}` answers `{"schema": S}`;
//! - `POST /subjects/{subject}` `{"schema": S}` (the deserializer's lookup) answers
//!   `{"subject", "version", "id", "schema"}`, or 404 with error code 40403;
//! - `GET /subjects` and `GET /subjects/{subject}/versions` list what is registered.
//!
//! With a user set, every call needs its basic authentication (401 otherwise). It checks no
//! compatibility between a subject's versions (a real registry refuses, with 409, a version
//! its compatibility level forbids: `BACKWARD` by default). It runs on a thread of its own, so
//! a test that blocks on a child process does not stop it from answering.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value as Json, json};

#[derive(Debug, Default)]
struct Inner {
    /// Schema texts by id (id `n` at index `n - 1`).
    schemas: Vec<String>,
    /// Each subject's versions: schema ids, version `v` at index `v - 1`.
    subjects: BTreeMap<String, Vec<u32>>,
    /// `Authorization` every call must carry, if set.
    authorization: Option<String>,
}

/// The running stand-in; it stops when dropped.
#[derive(Debug)]
pub struct RegistryStandIn {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for RegistryStandIn {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl RegistryStandIn {
    /// Starts one on a free loopback port.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(None)
    }

    /// Starts one that takes only calls with basic authentication as `user`/`password`.
    pub fn start_with_user(user: &str, password: &str) -> anyhow::Result<Self> {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Self::start_with(Some(format!("Basic {token}")))
    }

    fn start_with(authorization: Option<String>) -> anyhow::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner {
            authorization,
            ..Inner::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = Router::new()
            .route("/subjects", get(list_subjects))
            .route("/subjects/{subject}", post(lookup))
            .route("/subjects/{subject}/versions", post(register).get(versions))
            .route("/schemas/ids/{id}", get(by_id))
            .with_state(inner.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("registry-stand-in".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("the listener");
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                });
            })?;
        Ok(RegistryStandIn {
            url,
            inner,
            stop: Some(stop),
        })
    }

    /// Every subject and its versions' schema texts, in version order.
    pub fn subjects(&self) -> BTreeMap<String, Vec<String>> {
        let inner = self.inner.lock().unwrap();
        inner
            .subjects
            .iter()
            .map(|(subject, ids)| {
                let texts = ids
                    .iter()
                    .map(|&id| inner.schemas[id as usize - 1].clone())
                    .collect();
                (subject.clone(), texts)
            })
            .collect()
    }

    /// The schema text of `id`.
    pub fn schema(&self, id: u32) -> Option<String> {
        let inner = self.inner.lock().unwrap();
        inner.schemas.get((id as usize).checked_sub(1)?).cloned()
    }
}

type Shared = State<Arc<Mutex<Inner>>>;

/// The registry's answer: 200 with its media type, or an error body it would send.
fn answer(status: StatusCode, body: &Json) -> Response {
    (
        status,
        [("content-type", "application/vnd.schemaregistry.v1+json")],
        body.to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    answer(status, &json!({"error_code": code, "message": message}))
}

/// The 401 a call without the configured authentication gets.
fn unauthorized(inner: &Inner, headers: &HeaderMap) -> Option<Response> {
    let wanted = inner.authorization.as_deref()?;
    let given = headers.get("authorization").and_then(|v| v.to_str().ok());
    (given != Some(wanted)).then(|| error(StatusCode::UNAUTHORIZED, 401, "Unauthorized"))
}

/// The schema text of a request body `{"schema": S, …}`.
fn schema_of(body: &str) -> Option<String> {
    let body: Json = serde_json::from_str(body).ok()?;
    body["schema"].as_str().map(str::to_owned)
}

async fn register(
    State(inner): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let mut inner = inner.lock().unwrap();
    if let Some(refused) = unauthorized(&inner, &headers) {
        return refused;
    }
    let Some(schema) = schema_of(&body) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, 42201, "Invalid schema");
    };
    let id = match inner.schemas.iter().position(|s| *s == schema) {
        Some(i) => i as u32 + 1,
        None => {
            inner.schemas.push(schema);
            inner.schemas.len() as u32
        }
    };
    let versions = inner.subjects.entry(subject).or_default();
    if !versions.contains(&id) {
        versions.push(id);
    }
    answer(StatusCode::OK, &json!({ "id": id }))
}

async fn lookup(
    State(inner): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let inner = inner.lock().unwrap();
    if let Some(refused) = unauthorized(&inner, &headers) {
        return refused;
    }
    let Some(versions) = inner.subjects.get(&subject) else {
        return error(StatusCode::NOT_FOUND, 40401, "Subject not found");
    };
    let schema = schema_of(&body).unwrap_or_default();
    let found = versions
        .iter()
        .enumerate()
        .find(|(_, id)| inner.schemas[**id as usize - 1] == schema);
    match found {
        Some((i, id)) => answer(
            StatusCode::OK,
            &json!({"subject": subject, "version": i + 1, "id": id, "schema": schema}),
        ),
        None => error(StatusCode::NOT_FOUND, 40403, "Schema not found"),
    }
}

async fn by_id(State(inner): Shared, Path(id): Path<u32>, headers: HeaderMap) -> Response {
    let inner = inner.lock().unwrap();
    if let Some(refused) = unauthorized(&inner, &headers) {
        return refused;
    }
    match id
        .checked_sub(1)
        .and_then(|i| inner.schemas.get(i as usize))
    {
        Some(schema) => answer(StatusCode::OK, &json!({ "schema": schema })),
        None => error(
            StatusCode::NOT_FOUND,
            40403,
            &format!("Schema {id} not found"),
        ),
    }
}

async fn list_subjects(State(inner): Shared, headers: HeaderMap) -> Response {
    let inner = inner.lock().unwrap();
    if let Some(refused) = unauthorized(&inner, &headers) {
        return refused;
    }
    answer(
        StatusCode::OK,
        &json!(inner.subjects.keys().collect::<Vec<_>>()),
    )
}

async fn versions(
    State(inner): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
) -> Response {
    let inner = inner.lock().unwrap();
    if let Some(refused) = unauthorized(&inner, &headers) {
        return refused;
    }
    match inner.subjects.get(&subject) {
        Some(ids) => answer(StatusCode::OK, &json!((1..=ids.len()).collect::<Vec<_>>())),
        None => error(StatusCode::NOT_FOUND, 40401, "Subject not found"),
    }
}

impl RegistryStandIn {
    /// Reads a record in Confluent's wire format with the schema of its id (`apache-avro`, a
    /// reader apart from siphon's writer), or with `reader` (a schema text) resolving it, as
    /// a consumer holding a later version does. The value comes out as Kafka Connect's JSON
    /// converter writes the same payload: unions as their branch's value, bytes (decimals
    /// too) in base64, floats that are no number as `"NaN"`, `"Infinity"`, `"-Infinity"`.
    /// Returns the record's schema id and its value.
    pub fn decode(&self, framed: &[u8], reader: Option<&str>) -> anyhow::Result<(u32, Json)> {
        anyhow::ensure!(
            framed.len() >= 5 && framed[0] == 0,
            "not Confluent's wire format: {framed:02x?}"
        );
        let id = u32::from_be_bytes(framed[1..5].try_into()?);
        let text = self
            .schema(id)
            .ok_or_else(|| anyhow::anyhow!("no schema {id} in the registry"))?;
        let writer = apache_avro::Schema::parse_str(&text)?;
        let reader = reader.map(apache_avro::Schema::parse_str).transpose()?;
        let mut datum = &framed[5..];
        let value = apache_avro::reader::datum::GenericDatumReader::builder(&writer)
            .maybe_reader_schema(reader.as_ref())
            .build()?
            .read_value(&mut datum)?;
        anyhow::ensure!(datum.is_empty(), "{} bytes after the datum", datum.len());
        Ok((id, avro_connect_json(value)?))
    }
}

/// An Avro value as Kafka Connect's JSON converter writes the payload it came from.
pub fn avro_connect_json(value: apache_avro::types::Value) -> anyhow::Result<Json> {
    use apache_avro::types::Value as V;
    use base64::Engine as _;
    let base64 = |b: &[u8]| Json::from(base64::engine::general_purpose::STANDARD.encode(b));
    let float = |f: f64| {
        if f.is_nan() {
            json!("NaN")
        } else if f.is_infinite() {
            json!(if f > 0.0 { "Infinity" } else { "-Infinity" })
        } else {
            json!(f)
        }
    };
    Ok(match value {
        V::Null => Json::Null,
        V::Boolean(b) => json!(b),
        V::Int(n) | V::Date(n) | V::TimeMillis(n) => json!(n),
        V::Long(n) | V::TimeMicros(n) | V::TimestampMillis(n) | V::TimestampMicros(n) => json!(n),
        // Through its shortest text, as Kafka Connect prints a float.
        V::Float(f) => float(f.to_string().parse().unwrap_or(f64::from(f))),
        V::Double(f) => float(f),
        V::Bytes(b) | V::Fixed(_, b) => base64(&b),
        V::Decimal(d) => base64(&Vec::<u8>::try_from(d)?),
        V::String(s) | V::Enum(_, s) => json!(s),
        V::Union(_, v) => avro_connect_json(*v)?,
        V::Array(items) => Json::Array(
            items
                .into_iter()
                .map(avro_connect_json)
                .collect::<Result<_, _>>()?,
        ),
        V::Record(fields) => Json::Object(
            fields
                .into_iter()
                .map(|(k, v)| Ok((k, avro_connect_json(v)?)))
                .collect::<anyhow::Result<_>>()?,
        ),
        other => anyhow::bail!("an Avro value siphon does not write: {other:?}"),
    })
}
