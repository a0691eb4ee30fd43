//! The Redis Streams sink.

use async_trait::async_trait;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_sink_message::{Message, MessageEncoder, MessageSettings};
use siphon_sink_redis::RedisClient;

use crate::config::RedisStreamConfig;

/// The error Redis gives an `XADD` whose id is at or below the stream's last: the entry was
/// added before.
const ADDED_BEFORE: &str = "equal or smaller";

/// Adds each event to its stream once; see the crate documentation.
#[derive(Debug)]
pub struct RedisStreamSink {
    client: RedisClient,
    settings: MessageSettings,
    encoder: MessageEncoder,
    max_len: Option<u64>,
    cursor_key: String,
    /// The stored cursor as of the last open or write (this sink is its only writer).
    cursor: Option<u64>,
    /// The log its cursor is a position in (given at open).
    log: Option<LogId>,
}

/// A stream entry as XRANGE gives it: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// An entry's id for log offset `offset` (Redis refuses `0-0`).
fn entry_id(offset: u64) -> String {
    format!("0-{}", offset + 1)
}

impl RedisStreamSink {
    /// Sink `sink` of pipeline `pipeline` (they name its cursor key).
    pub fn new(config: &RedisStreamConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let settings = config.message();
        Ok(RedisStreamSink {
            client: RedisClient::new(&config.url, config.password.clone(), config.timeout.0),
            encoder: MessageEncoder::new(&settings, pipeline).map_err(Error::Config)?,
            settings,
            max_len: config.max_len,
            cursor_key: config
                .cursor_key
                .clone()
                .unwrap_or_else(|| format!("siphon:cursor:{pipeline}:{sink}")),
            cursor: None,
            log: None,
        })
    }

    /// Adds `messages` to their streams, then sets the cursor to `next`. The entries go in
    /// one `MULTI`/`EXEC` under a `WATCH` of the cursor, which must still be there once set
    /// (else Redis lost its data, and nothing is added past it); the cursor follows. A crash
    /// between the two leaves the cursor behind: the entries sent again are refused by
    /// their ids.
    async fn write(&mut self, messages: &[Message], next: u64, watch: bool) -> Result<()> {
        let mut conn = self.client.conn().await?;
        let lost = format!(
            "redis {}: the cursor key {} is gone: Redis lost its data (flushed, or restarted without persistence)",
            self.client.url(),
            self.cursor_key
        );
        // Consumer group members share the cursor key: each one's SET would abort the
        // others' watched EXEC, so their batches (not in the log's order) watch nothing.
        if watch {
            let watched: redis::RedisResult<((), Option<String>)> = redis::pipe()
                .cmd("WATCH")
                .arg(&self.cursor_key)
                .cmd("GET")
                .arg(&self.cursor_key)
                .query_async(&mut conn)
                .await;
            let (_, stored) = watched.map_err(|e| self.client.error(&e, "reading the cursor"))?;
            if self.cursor.is_some() && stored.is_none() {
                let _: redis::RedisResult<()> = redis::cmd("UNWATCH").query_async(&mut conn).await;
                self.cursor = None;
                return Err(Error::transient(lost));
            }
        }
        let mut add = redis::pipe();
        add.atomic().ignore_errors();
        for message in messages {
            let xadd = add.cmd("XADD").arg(&message.destination);
            if let Some(max_len) = self.max_len {
                xadd.arg("MAXLEN").arg("~").arg(max_len);
            }
            xadd.arg(entry_id(message.offset));
            push_fields(xadd, message);
        }
        let added: redis::RedisResult<Option<Vec<redis::RedisResult<redis::Value>>>> =
            add.query_async(&mut conn).await;
        let Some(added) = added.map_err(|e| self.client.error(&e, "adding to the streams"))? else {
            return Err(Error::transient(format!(
                "redis {}: the cursor key {} changed while entries were added (Redis lost its data, or another sink writes it)",
                self.client.url(),
                self.cursor_key
            )));
        };
        let mut refused = Vec::new();
        for (result, message) in added.into_iter().zip(messages) {
            match result {
                Err(e) if e.to_string().contains(ADDED_BEFORE) => refused.push(message),
                Err(e) => return Err(self.client.error(&e, "adding to a stream")),
                Ok(_) => {}
            }
        }
        self.added_before(&mut conn, &refused).await?;
        let mut set = redis::cmd("SET");
        set.arg(&self.cursor_key).arg(format!(
            "{next} {}",
            self.log.as_ref().map_or("", LogId::as_str)
        ));
        if self.cursor.is_some() {
            set.arg("XX");
        }
        let set: redis::RedisResult<Option<String>> = set.query_async(&mut conn).await;
        if set
            .map_err(|e| self.client.error(&e, "setting the cursor"))?
            .is_none()
        {
            self.cursor = None;
            return Err(Error::transient(lost));
        }
        self.cursor = Some(next);
        Ok(())
    }

    /// Checks that the entries Redis refused as "equal or smaller" were this log's: the
    /// stream's last entry must carry this log's identity. Another writer of the stream (two
    /// pipelines sharing it, or tables of two schemas in one stream read by a consumer
    /// group) would make Redis refuse entries that were never added: that stops the sink.
    async fn added_before(
        &mut self,
        conn: &mut redis::aio::MultiplexedConnection,
        refused: &[&Message],
    ) -> Result<()> {
        let mine = format!("{}:", self.log.as_ref().map_or("", LogId::as_str));
        let mut streams: Vec<&str> = refused.iter().map(|m| m.destination.as_str()).collect();
        streams.sort_unstable();
        streams.dedup();
        for stream in streams {
            let last: redis::RedisResult<Vec<StreamEntry>> = redis::cmd("XREVRANGE")
                .arg(stream)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .query_async(conn)
                .await;
            let last = last.map_err(|e| self.client.error(&e, "reading a stream's last entry"))?;
            let writer = last
                .first()
                .and_then(|(_, fields)| fields.iter().find(|(name, _)| name == "id"))
                .map(|(_, id)| String::from_utf8_lossy(id));
            if !writer.as_ref().is_some_and(|id| id.starts_with(&mine)) {
                return Err(Error::permanent(format!(
                    "redis {}: stream {stream} holds entries this pipeline's log did not write (its last: {}), so Redis refuses this log's entry ids: give each pipeline its own streams (prefix, or {{prefix}} in destination), and a consumer group's member a stream per table and schema ({{schema}} and {{table}})",
                    self.client.url(),
                    writer.as_deref().unwrap_or("an entry without siphon's id")
                )));
            }
        }
        Ok(())
    }

    /// The cursor key holds `"<next offset> <log id>"`.
    async fn stored_cursor(&mut self) -> Result<Option<StoreCursor>> {
        let mut conn = self.client.conn().await?;
        let value: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(&self.cursor_key)
            .query_async(&mut conn)
            .await;
        let Some(value) = value.map_err(|e| self.client.error(&e, "reading the cursor"))? else {
            return Ok(None);
        };
        let (offset, log) = value.split_once(' ').unwrap_or((&value, ""));
        let next_offset = offset.parse().map_err(|_| {
            Error::permanent(format!(
                "redis: the cursor key {} holds {value:?}, not a cursor; delete it (and the streams) to publish from the log's start",
                self.cursor_key
            ))
        })?;
        Ok(Some(StoreCursor {
            next_offset,
            log: (!log.is_empty()).then(|| LogId::from_stored(log)),
        }))
    }
}

/// A message's fields, after the `XADD` last added to `pipe`.
fn push_fields(pipe: &mut redis::Pipeline, message: &Message) {
    if let Some(key) = &message.key {
        pipe.arg("key").arg(key.as_slice());
    }
    pipe.arg("value")
        .arg(message.value.as_slice())
        .arg("id")
        .arg(&message.id)
        .arg("op")
        .arg(message.op)
        .arg("offset")
        .arg(message.offset)
        .arg("position")
        .arg(&message.position);
    if let Some(txid) = &message.txid {
        pipe.arg("txid").arg(txid);
    }
    if !message.row_headers.is_empty() {
        // An outbox row's headers, as one JSON object: a field of their own would clash
        // with siphon's (both have an `id`).
        let headers: serde_json::Map<String, serde_json::Value> = message
            .row_headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone().into()))
            .collect();
        pipe.arg("headers")
            .arg(serde_json::Value::Object(headers).to_string());
    }
}

#[async_trait]
impl Sink for RedisStreamSink {
    async fn check(&mut self) -> Result<()> {
        let mut conn = self.client.conn().await?;
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
        pong.map(drop)
            .map_err(|e| self.client.error(&e, "answering PING"))
    }

    async fn open(&mut self, _tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        let stored = self.stored_cursor().await?;
        self.cursor = stored.as_ref().map(|c| c.next_offset);
        Ok(stored)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        if !batch.ordered && !self.settings.per_table() {
            return Err(Error::permanent(format!(
                "destination: {:?} does not name both {{schema}} and {{table}}, and this sink reads the log's tables interleaved (a consumer group's member): an entry of one table could come after a later one of another and be refused; give each table its stream ({{schema}} and {{table}} in destination), or read without consumer_group",
                self.settings.destination
            )));
        }
        let log = self
            .log
            .clone()
            .ok_or_else(|| Error::permanent("redis_stream: a batch before open"))?;
        let mut messages: Vec<Message> = Vec::with_capacity(batch.records.len());
        for record in &batch.records {
            messages.extend(self.encoder.encode(record, &log)?);
        }
        self.write(&messages, batch.end, batch.ordered).await
    }

    /// Moves the cursor back; the entries the log sends again are refused by their ids, so
    /// a replay into the same streams adds nothing (a replay with `--reset` empties them).
    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.write(&[], next, true).await
    }

    /// Deletes the tables' streams and the cursor.
    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        let mut keys: Vec<String> = tables
            .iter()
            .flat_map(|t| self.encoder.destinations_of(t))
            .collect();
        keys.push(self.cursor_key.clone());
        let mut conn = self.client.conn().await?;
        let deleted: redis::RedisResult<u64> =
            redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        deleted.map_err(|e| self.client.error(&e, "deleting the streams"))?;
        self.cursor = None;
        Ok(())
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    /// Every event is an entry: the log never compacts what the sink has not added.
    fn keeps_history(&self) -> bool {
        true
    }
}
