//! The Elasticsearch/OpenSearch sink.

use std::collections::HashMap;
use std::fmt::Write as _;

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::{Value as Json, json};
use siphon_core::event::{Event, Row};
use siphon_core::log::LogId;
use siphon_core::sink::changes::{Change, net_changes};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{ConnectionUrl, Error, Result, Value};
use siphon_format::json::field_json;
use siphon_format::json::key_text;

use crate::config::{ElasticsearchSinkConfig, INDEX_PLACEHOLDERS};

/// Keeps one document per row in a search cluster; see the crate documentation.
#[derive(Debug)]
pub struct ElasticsearchSink {
    config: ElasticsearchSinkConfig,
    index: NameTemplate,
    http: reqwest::Client,
    /// The cluster's URL without a trailing `/` (it may hold a password).
    base: ConnectionUrl,
    /// Path of the document holding this sink's cursor.
    cursor_doc: String,
    /// The log the cursor is a position in (given at open).
    log: Option<LogId>,
}

/// One bulk action and the change it comes from.
struct Action<'c, 'a> {
    change: &'c Change<'a>,
    lines: String,
}

impl ElasticsearchSink {
    /// A sink for sink `sink` of pipeline `pipeline` (they name its cursor document) writing
    /// to the cluster at `config.url`.
    pub fn new(config: ElasticsearchSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let mut http = reqwest::Client::builder().timeout(config.timeout.0);
        if let Some(tls) =
            siphon_core::tls::client_config(config.tls_mode(), config.tls_ca_file.as_deref())?
        {
            http = http.use_preconfigured_tls(tls);
        }
        let http = http
            .build()
            .map_err(|e| Error::Config(format!("elasticsearch client: {e}")))?;
        Ok(ElasticsearchSink {
            index: NameTemplate::parse(&config.index, INDEX_PLACEHOLDERS).map_err(Error::Config)?,
            base: ConnectionUrl::new(config.url.expose().trim_end_matches('/')),
            cursor_doc: format!("/{}/_doc/{pipeline}.{sink}", config.cursor_index),
            config,
            http,
            log: None,
        })
    }

    /// The cursor document, if there is one.
    async fn stored_cursor(&self) -> Result<Option<StoreCursor>> {
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::GET, &self.cursor_doc),
                "reading the cursor",
            )
            .await?;
        match status {
            404 => Ok(None),
            200..=299 => {
                let source = &reply["_source"];
                let next_offset = source["next_offset"].as_u64().ok_or_else(|| {
                    Error::permanent(format!(
                        "elasticsearch: the cursor document {} holds no next_offset: {reply:.300}",
                        self.cursor_doc
                    ))
                })?;
                Ok(Some(StoreCursor {
                    next_offset,
                    log: source["log_id"].as_str().map(LogId::from_stored),
                }))
            }
            _ => Err(Error::permanent(format!(
                "elasticsearch reading the cursor {}: HTTP {status}: {reply:.300}",
                self.cursor_doc
            ))),
        }
    }

    /// Writes the cursor document.
    async fn save_cursor(&self, next: u64) -> Result<()> {
        let body = json!({"next_offset": next, "log_id": self.log.as_ref().map(LogId::as_str)});
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::PUT, &self.cursor_doc)
                    .json(&body),
                "saving the cursor",
            )
            .await?;
        if status >= 400 {
            return Err(Error::permanent(format!(
                "elasticsearch saving the cursor {}: HTTP {status}: {reply:.300}",
                self.cursor_doc
            )));
        }
        Ok(())
    }

    /// The index of a source table, refused if Elasticsearch would not take the name as one
    /// index (a table named `a,b` or `*` would otherwise make `reset` delete others).
    fn index_of(&self, schema: &str, table: &str) -> Result<String> {
        let index = self
            .index
            .render(&[("schema", schema), ("table", table)])
            .to_lowercase();
        crate::config::check_index_name(&index).map_err(|why| {
            Error::permanent(format!(
                "elasticsearch: the index name {index:?} of table {schema}.{table} is not one \
                 Elasticsearch takes ({why}); map the table to another name with `index`"
            ))
        })?;
        Ok(index)
    }

    fn event_index(&self, event: &Event) -> Result<String> {
        self.index_of(event.source.namespace(), &event.source.table)
    }

    /// Creates the index of the cursor documents, unless it exists.
    async fn create_cursor_index(&self) -> Result<()> {
        let index = &self.config.cursor_index;
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::PUT, &format!("/{index}")),
                "creating the cursor index",
            )
            .await?;
        let exists = reply["error"]["type"] == "resource_already_exists_exception";
        if status >= 400 && !exists {
            return Err(Error::permanent(format!(
                "elasticsearch creating the index {index}: HTTP {status}: {reply:.300}"
            )));
        }
        Ok(())
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self
            .http
            .request(method, format!("{}{path}", self.base.expose()));
        if let Some(key) = &self.config.api_key {
            r.header("Authorization", format!("ApiKey {}", key.expose()))
        } else if let Some(user) = &self.config.username {
            let password = self.config.password.as_ref().map_or("", |p| p.expose());
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            r.header("Authorization", format!("Basic {token}"))
        } else {
            r
        }
    }

    /// Sends a request; connection errors, timeouts, 429 and 5xx are transient.
    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<(u16, Json)> {
        let url = &self.config.url;
        let response = request.send().await.map_err(|e| {
            // With its causes (a TLS handshake says why it failed), and the redacted URL
            // rather than the one reqwest would name.
            let cause = siphon_core::error::with_causes(&e.without_url());
            Error::transient(format!("elasticsearch {url} {what}: {cause}"))
        })?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| {
            let cause = siphon_core::error::with_causes(&e.without_url());
            Error::transient(format!(
                "elasticsearch {url} {what}: reading the answer: {cause}"
            ))
        })?;
        if status == 429 || status >= 500 {
            return Err(Error::transient(format!(
                "elasticsearch {url} {what}: HTTP {status}: {:.300}",
                body
            )));
        }
        if status == 401 || status == 403 {
            return Err(Error::permanent(format!(
                "elasticsearch {url} {what}: HTTP {status} (check username/password or api_key): {body:.300}"
            )));
        }
        Ok((
            status,
            serde_json::from_str(&body).unwrap_or(Json::String(body)),
        ))
    }

    /// The stored documents the batch's upserts take unchanged columns from (their own, or the
    /// old key's for a row whose key changed), by (index, id), read before anything is written.
    async fn stored(&self, changes: &[Change<'_>]) -> Result<HashMap<(String, String), Json>> {
        let wanted: Vec<(String, String)> = changes
            .iter()
            .filter_map(|c| {
                let from = c.unchanged_from()?;
                Some(
                    self.event_index(c.event())
                        .map(|index| (index, key_text(from))),
                )
            })
            .collect::<Result<_>>()?;
        if wanted.is_empty() {
            return Ok(HashMap::new());
        }
        let body = json!({"docs": wanted.iter().map(|(i, id)| json!({"_index": i, "_id": id})).collect::<Vec<_>>()});
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::POST, "/_mget").json(&body),
                "reading stored documents",
            )
            .await?;
        if status >= 400 {
            return Err(Error::permanent(format!(
                "elasticsearch _mget: HTTP {status}: {reply}"
            )));
        }
        // One answer per document asked for, in order (the answer names the concrete index,
        // which is not the one asked for behind an alias). Only `found: false` means absent:
        // anything else that is not a document is an error, never taken for absence.
        let docs = reply["docs"]
            .as_array()
            .filter(|docs| docs.len() == wanted.len())
            .ok_or_else(|| {
                Error::transient(format!(
                    "elasticsearch _mget answered no document list for {} documents: {reply:.300}",
                    wanted.len()
                ))
            })?;
        let mut stored = HashMap::new();
        for (want, doc) in wanted.into_iter().zip(docs) {
            match (&doc["found"], doc["_source"].is_object()) {
                (Json::Bool(true), true) => {
                    stored.insert(want, doc["_source"].clone());
                }
                (Json::Bool(false), _) => {}
                _ => {
                    return Err(Error::transient(format!(
                        "elasticsearch _mget of {}/{}: {doc:.300}",
                        want.0, want.1
                    )));
                }
            }
        }
        Ok(stored)
    }

    /// The bulk lines of one change; `None` for an upsert whose unchanged columns have no
    /// stored document to come from (a document is written whole or not at all).
    fn action<'c, 'a>(
        &self,
        change: &'c Change<'a>,
        stored: &HashMap<(String, String), Json>,
    ) -> Result<Option<Action<'c, 'a>>> {
        let event = change.event();
        let key = event.key.as_ref().ok_or_else(|| {
            change.rejected("the table has no primary key, so its rows have no document id")
        })?;
        let (index, id) = (self.event_index(event)?, key_text(key));
        let meta = json!({"_index": index, "_id": id, "version": change.offset(), "version_type": "external"});
        let mut lines = String::new();
        match change {
            Change::Upsert { row, .. } => {
                let base = match change.unchanged_from() {
                    Some(from) => match stored.get(&(index.clone(), key_text(from))) {
                        Some(doc) => Some(doc),
                        None => {
                            tracing::warn!(
                                index,
                                id,
                                offset = change.offset(),
                                "a row that leaves columns unchanged has no stored document to take them from: not written"
                            );
                            return Ok(None);
                        }
                    },
                    None => None,
                };
                let doc = document(row, base, event.is_document());
                let _ = writeln!(lines, "{}", json!({"index": meta}));
                let _ = writeln!(lines, "{doc}");
            }
            _ => {
                let _ = writeln!(lines, "{}", json!({"delete": meta}));
            }
        }
        Ok(Some(Action { change, lines }))
    }

    /// Sends actions in `_bulk` requests of at most `bulk_max_size`; handles each item.
    async fn bulk(&self, actions: &[Action<'_, '_>]) -> Result<()> {
        let limit = usize::try_from(self.config.bulk_max_size.0).unwrap_or(usize::MAX);
        let mut start = 0;
        while start < actions.len() {
            let mut end = start;
            let mut body = String::new();
            while end < actions.len()
                && (end == start || body.len() + actions[end].lines.len() <= limit)
            {
                body.push_str(&actions[end].lines);
                end += 1;
            }
            let items = self.bulk_request(body, end - start).await?;
            for (result, action) in items.iter().zip(&actions[start..end]) {
                let delete = matches!(action.change, Change::Delete { .. });
                if let Some(reason) = refusal(result, delete)? {
                    return Err(action.change.rejected(reason));
                }
            }
            start = end;
        }
        Ok(())
    }

    /// Sends one `_bulk` request of `actions` actions; returns each action's result.
    async fn bulk_request(&self, body: String, actions: usize) -> Result<Vec<Json>> {
        let request = self
            .request(reqwest::Method::POST, "/_bulk")
            .header("Content-Type", "application/x-ndjson")
            .body(body);
        let (status, reply) = self.send(request, "bulk").await?;
        if status >= 400 {
            return Err(Error::permanent(format!(
                "elasticsearch _bulk: HTTP {status}: {reply:.300}"
            )));
        }
        let items = reply["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if items.len() != actions {
            return Err(Error::transient(format!(
                "elasticsearch _bulk answered {} items for {actions} actions",
                items.len(),
            )));
        }
        Ok(items
            .iter()
            .map(|item| {
                item.as_object()
                    .and_then(|o| o.values().next())
                    .cloned()
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Applies a batch's net changes: bulk requests, each truncate in its place.
    async fn apply_changes(&self, batch: &SinkBatch) -> Result<()> {
        let changes = net_changes(&batch.records);
        let stored = self.stored(&changes).await?;
        let mut actions = Vec::with_capacity(changes.len());
        for change in &changes {
            if let Change::Truncate { .. } = change {
                self.bulk(&actions).await?;
                actions.clear();
                self.truncate(change).await?;
            } else {
                actions.extend(self.action(change, &stored)?);
            }
        }
        self.bulk(&actions).await
    }

    /// A truncate at offset `T` deletes every document of the index older than `T`: each id
    /// (read with a scroll, a page at a time) is deleted with version `T`, which the cluster
    /// refuses (409) for a document written after the truncate. So a replay across the
    /// truncate, or a batch applied again after an error, never deletes what came after it
    /// (`_delete_by_query` did, leaving tombstones at those documents' versions that refused
    /// their replay).
    async fn truncate(&self, change: &Change<'_>) -> Result<()> {
        let index = self.event_index(change.event())?;
        let version = change.offset();
        // Documents indexed in the last second are not searchable before a refresh.
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::POST, &format!("/{index}/_refresh")),
                "refreshing the index to truncate",
            )
            .await?;
        if status == 404 {
            return Ok(()); // no index: nothing to truncate
        }
        if status >= 400 {
            return Err(Error::permanent(format!(
                "elasticsearch refreshing {index}: HTTP {status}: {reply:.300}"
            )));
        }
        let mut page = self
            .send(
                self.request(
                    reqwest::Method::POST,
                    &format!("/{index}/_search?scroll=1m"),
                )
                .json(&json!({"size": 1000, "_source": false, "sort": ["_doc"]})),
                "listing the documents to truncate",
            )
            .await?;
        let mut scroll_ids = Vec::new();
        loop {
            let (status, reply) = page;
            match status {
                // The index went meanwhile: nothing to truncate.
                404 if scroll_ids.is_empty() => break,
                // The scroll expired: the truncate starts again (its deletes are idempotent).
                404 => {
                    return Err(Error::transient(format!(
                        "elasticsearch: the scroll over {index} expired during a truncate: {reply:.300}"
                    )));
                }
                s if s >= 400 => {
                    return Err(Error::permanent(format!(
                        "elasticsearch listing {index} to truncate it: HTTP {s}: {reply:.300}"
                    )));
                }
                _ => {}
            }
            let hits = reply["hits"]["hits"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let (false, Some(scroll_id)) = (
                hits.is_empty(),
                reply["_scroll_id"].as_str().map(str::to_owned),
            ) else {
                break;
            };
            let mut body = String::new();
            for hit in hits {
                let meta = json!({"_index": index, "_id": hit["_id"], "version": version, "version_type": "external"});
                let _ = writeln!(body, "{}", json!({ "delete": meta }));
            }
            for result in self.bulk_request(body, hits.len()).await? {
                if let Some(reason) = refusal(&result, true)? {
                    return Err(change.rejected(reason));
                }
            }
            page = self
                .send(
                    self.request(reqwest::Method::POST, "/_search/scroll")
                        .json(&json!({"scroll": "1m", "scroll_id": scroll_id})),
                    "listing the documents to truncate",
                )
                .await?;
            scroll_ids.push(scroll_id);
        }
        if !scroll_ids.is_empty() {
            // Frees the scroll early; the cluster lets it expire anyway.
            self.send(
                self.request(reqwest::Method::DELETE, "/_search/scroll")
                    .json(&json!({"scroll_id": scroll_ids})),
                "clearing a scroll",
            )
            .await?;
        }
        Ok(())
    }
}

/// What a bulk item's result means: done (`None`; a 409 says a newer version is there, and
/// for a delete a 404 says the document or index is not), retry (a transient error), or a
/// refusal with the cluster's reason.
fn refusal(result: &Json, delete: bool) -> Result<Option<String>> {
    match result["status"].as_u64().unwrap_or(0) {
        200..=299 | 409 => Ok(None),
        404 if delete => Ok(None),
        429 | 500..=599 => Err(Error::transient(format!(
            "elasticsearch _bulk item: {result}"
        ))),
        _ => Ok(Some(result["error"].to_string())),
    }
}

/// The row as a document; an unchanged column takes its stored value. A view's `document`
/// embeds its nested objects and arrays.
fn document(row: &Row, stored: Option<&Json>, document: bool) -> Json {
    let mut doc = serde_json::Map::with_capacity(row.len());
    for (column, value) in row.iter() {
        let v = match value {
            Value::Unchanged => match stored.and_then(|s| s.get(column)) {
                Some(v) => v.clone(),
                None => continue,
            },
            v => field_json(v, document),
        };
        doc.insert(column.to_owned(), v);
    }
    Json::Object(doc)
}

#[async_trait]
impl Sink for ElasticsearchSink {
    async fn check(&mut self) -> Result<()> {
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::GET, "/"),
                "checking the cluster",
            )
            .await?;
        if status >= 400 {
            return Err(Error::permanent(format!(
                "elasticsearch {}: HTTP {status}: {reply}",
                &self.config.url
            )));
        }
        Ok(())
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        if let Some(t) = tables.iter().find(|t| t.key_columns.is_empty()) {
            return Err(Error::permanent(format!(
                "table {} has no primary key, so its rows have no document id; give it one, or leave it out of this sink with `tables`",
                t.name
            )));
        }
        for table in tables {
            let (schema, name) = (table.name.namespace(), table.name.table());
            self.index_of(schema, name)?;
        }
        self.check().await?;
        self.create_cursor_index().await?;
        self.log = Some(log.clone());
        self.stored_cursor().await
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.save_cursor(next).await
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        self.apply_changes(batch).await?;
        // After the documents: a cursor behind them only makes a replay re-apply a little,
        // which the external versions make harmless.
        self.save_cursor(batch.end).await
    }

    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        for table in tables {
            let (schema, name) = (table.name.namespace(), table.name.table());
            let index = self.index_of(schema, name)?;
            let (status, reply) = self
                .send(
                    self.request(reqwest::Method::DELETE, &format!("/{index}")),
                    "deleting an index",
                )
                .await?;
            if status >= 400 && status != 404 {
                return Err(Error::permanent(format!(
                    "elasticsearch deleting index {index}: HTTP {status}: {reply}"
                )));
            }
            tracing::info!(index, "reset: deleted the index");
        }
        let (status, reply) = self
            .send(
                self.request(reqwest::Method::DELETE, &self.cursor_doc),
                "deleting the cursor",
            )
            .await?;
        if status >= 400 && status != 404 {
            return Err(Error::permanent(format!(
                "elasticsearch deleting the cursor {}: HTTP {status}: {reply:.300}",
                self.cursor_doc
            )));
        }
        Ok(())
    }
}
