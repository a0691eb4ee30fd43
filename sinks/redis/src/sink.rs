//! The Redis sink.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use redis::RedisError;
use redis::aio::MultiplexedConnection;
use siphon_core::log::LogId;
use siphon_core::sink::changes::{Change, net_changes};
use siphon_core::sink::routing::NameTemplate;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};

use crate::client::{BUSY, RedisClient};
use crate::config::{KEY_PLACEHOLDERS, RedisFormat, RedisMode, RedisSinkConfig};
use crate::encode::{Encoder, StoredRow};
use crate::resp::{Commands, RespConnection, RespError};

/// Bytes of commands encoded before they are written (Redis applies them while the next
/// are encoded).
const CHUNK_BYTES: usize = 64 << 10;

/// Stored rows read back for a batch, by Redis key, and the keys Redis refused to read.
#[derive(Debug, Default)]
struct StoredRows {
    rows: HashMap<String, StoredRow>,
    refused: HashMap<String, String>,
}

/// Keeps rows (or their absence) in Redis; see the crate documentation.
#[derive(Debug)]
pub struct RedisSink {
    config: RedisSinkConfig,
    encoder: Encoder,
    cursor_key: String,
    /// The stored cursor as of the last open or write (this sink is its only writer).
    cursor: Option<u64>,
    /// The log its cursor is a position in (given at open).
    log: Option<LogId>,
    client: RedisClient,
    /// The connection batches are written on (made on first use and after a failure).
    writer: Option<RespConnection>,
    /// Its name in `CLIENT LIST`: `siphon:<pipeline>:<sink>`.
    client_name: String,
}

impl RedisSink {
    /// A sink for sink `sink` of pipeline `pipeline` (they name its cursor key).
    pub fn new(config: RedisSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let encoder = Encoder {
            prefix: config.prefix.clone(),
            key: NameTemplate::parse(&config.key, KEY_PLACEHOLDERS).map_err(Error::Config)?,
            mode: config.mode,
            format: config.format,
        };
        Ok(RedisSink {
            cursor_key: format!("{}siphon:cursor:{pipeline}:{sink}", config.prefix),
            client: RedisClient::new(&config.url, config.password.clone(), config.timeout.0),
            config,
            encoder,
            cursor: None,
            log: None,
            writer: None,
            // A client name has no spaces or newlines.
            client_name: format!("siphon:{pipeline}:{sink}")
                .chars()
                .map(|c| if c.is_ascii_graphic() { c } else { '_' })
                .collect(),
        })
    }

    async fn conn(&mut self) -> Result<MultiplexedConnection> {
        self.client.conn().await
    }

    fn error(&mut self, e: &RedisError, what: &str) -> Error {
        self.client.error(e, what)
    }

    /// Applies `changes`, then sets the cursor to `next_cursor` once Redis has acknowledged
    /// them all. The changes are encoded into RESP a chunk at a time, each chunk written as
    /// soon as it is full, so that Redis applies one while the next is encoded. After a
    /// failure the cursor has not moved and the whole batch is applied again (idempotently:
    /// each key gets its last value). A command Redis refuses for good (WRONGTYPE) does not
    /// stop the others: the cursor is then set to the refused change, which is reported as
    /// rejected; a refusal of a server that cannot write now (READONLY after a failover,
    /// LOADING, OOM) is transient.
    async fn write(
        &mut self,
        changes: &[Change<'_>],
        stored: &HashMap<String, StoredRow>,
        next_cursor: u64,
    ) -> Result<()> {
        // Rejected before anything is written, the cursor unmoved: applying the batch again
        // without it redoes the changes before it.
        if let Some(keyless) = changes.iter().find(|c| c.event().key.is_none()) {
            return Err(
                keyless.rejected("the table has no primary key, so its rows have no Redis key")
            );
        }
        let mut refused = None;
        if !changes.is_empty() {
            let mut conn = match self.writer.take() {
                Some(conn) => conn,
                None => self.connect_writer().await?,
            };
            let mut owner = Vec::with_capacity(changes.len());
            let sent = self.send(&mut conn, changes, stored, &mut owner).await;
            refused = sent.map_err(|e| self.write_error(e, "applying a batch"))?;
            if let Some((_, why)) = &refused
                && (why.starts_with("OOM") || BUSY.iter().any(|code| why.starts_with(code)))
            {
                return Err(Error::transient(format!(
                    "redis {} applying a batch: {why}",
                    self.client.url()
                )));
            }
            self.writer = Some(conn);
            refused = refused.map(|(at, why)| (owner[at], why));
        }
        match refused {
            Some((at, why)) => {
                let change = &changes[at];
                self.set_cursor(change.offset()).await?;
                Err(change.rejected(why))
            }
            None => self.set_cursor(next_cursor).await,
        }
    }

    /// Encodes and writes `changes` (each with a key) on `conn`, noting in `owner` the change
    /// each command comes from, then reads the replies; returns the first command Redis
    /// refused, and why.
    async fn send(
        &self,
        conn: &mut RespConnection,
        changes: &[Change<'_>],
        stored: &HashMap<String, StoredRow>,
        owner: &mut Vec<usize>,
    ) -> std::result::Result<Option<(usize, String)>, RespError> {
        let (ttl_ms, timeout) = (self.ttl_ms(), self.config.timeout.0);
        let mut commands = Commands::with_capacity(CHUNK_BYTES + 4096);
        for (i, change) in changes.iter().enumerate() {
            let base = change
                .unchanged_from()
                .and_then(|from| stored.get(&self.encoder.key_of(change.event(), from)));
            let key = self.encoder.row_key(change.event()).unwrap_or_default();
            let n = self.encoder.push(&mut commands, &key, change, base, ttl_ms);
            owner.extend(std::iter::repeat_n(i, n));
            if commands.bytes().len() >= CHUNK_BYTES {
                conn.write(&commands, timeout).await?;
                commands.clear();
            }
        }
        conn.write(&commands, timeout).await?;
        conn.replies(timeout).await
    }

    /// A new write connection.
    async fn connect_writer(&self) -> Result<RespConnection> {
        let info = self.client.connection_info()?;
        RespConnection::connect(&info, &self.client_name, self.config.timeout.0)
            .await
            .map_err(|e| self.write_error(e, "connecting"))
    }

    /// A failure of the write connection: transient, but for a setup the server refused for
    /// good (a wrong password).
    fn write_error(&self, e: RespError, what: &str) -> Error {
        let message = format!(
            "redis {} {what}: {}",
            self.client.url(),
            siphon_core::error::with_causes(&e)
        );
        match e {
            RespError::Refused(why) if !BUSY.iter().any(|code| why.starts_with(code)) => {
                Error::permanent(message)
            }
            _ => Error::transient(message),
        }
    }

    /// Moves the cursor. Once there is one it must still be there (`SET … XX`): a missing
    /// cursor means Redis lost its data (FLUSHALL, a restart without persistence), and the
    /// error makes the runtime open the sink again, find no cursor, and rebuild the keys.
    async fn set_cursor(&mut self, next: u64) -> Result<()> {
        let mut conn = self.conn().await?;
        let log = self.log.as_ref().map_or("", LogId::as_str);
        let mut set = redis::cmd("SET");
        set.arg(&self.cursor_key).arg(format!("{next} {log}"));
        if self.cursor.is_some() {
            set.arg("XX");
        }
        let done: redis::RedisResult<Option<String>> = set.query_async(&mut conn).await;
        if done
            .map_err(|e| self.error(&e, "setting the cursor"))?
            .is_none()
        {
            self.cursor = None;
            return Err(Error::transient(format!(
                "redis {}: the cursor key {} is gone: Redis lost its data (flushed, or restarted without persistence)",
                &self.config.url, self.cursor_key
            )));
        }
        self.cursor = Some(next);
        Ok(())
    }

    fn ttl_ms(&self) -> u64 {
        self.config
            .ttl
            .map_or(0, |t| u64::try_from(t.0.as_millis()).unwrap_or(u64::MAX))
    }

    /// The cursor key holds `"<next offset> <log id>"` (only the offset before logs had
    /// identities).
    async fn stored_cursor(&mut self) -> Result<Option<StoreCursor>> {
        let mut conn = self.conn().await?;
        let value: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(&self.cursor_key)
            .query_async(&mut conn)
            .await;
        let Some(value) = value.map_err(|e| self.error(&e, "reading the cursor"))? else {
            return Ok(None);
        };
        let (offset, log) = value.split_once(' ').unwrap_or((&value, ""));
        let next_offset = offset.parse().map_err(|_| {
            Error::permanent(format!(
                "redis: the cursor key {} holds {value:?}, not a cursor; delete it to rebuild the keys",
                self.cursor_key
            ))
        })?;
        Ok(Some(StoreCursor {
            next_offset,
            log: (!log.is_empty()).then(|| LogId::from_stored(log)),
        }))
    }

    /// Deletes every key matching `pattern`; returns how many.
    async fn delete_matching(&mut self, pattern: &str) -> Result<u64> {
        let mut conn = self.conn().await?;
        let mut cursor = 0u64;
        let mut deleted = 0;
        loop {
            let page: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await;
            let (next, keys) = page.map_err(|e| self.error(&e, "scanning keys"))?;
            if !keys.is_empty() {
                let n: redis::RedisResult<u64> =
                    redis::cmd("UNLINK").arg(&keys).query_async(&mut conn).await;
                deleted += n.map_err(|e| self.error(&e, "deleting keys"))?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Removes every key of the truncated table, unless the cursor shows it was done.
    async fn truncate(&mut self, change: &Change<'_>) -> Result<()> {
        let offset = change.offset();
        let source = &change.event().source;
        let pattern = self
            .encoder
            .table_pattern(source.namespace(), &source.table);
        let deleted = self.delete_matching(&pattern).await?;
        tracing::info!(table = %source.table_name(), deleted, "truncate: removed the table's keys");
        self.set_cursor(offset + 1).await
    }

    /// The stored rows the batch's upserts take unchanged columns from (their own, or the
    /// old key's for a row whose key changed), by Redis key, read before anything is written.
    async fn stored_rows(&mut self, changes: &[Change<'_>]) -> Result<StoredRows> {
        let mut stored = StoredRows::default();
        if self.config.mode != RedisMode::Upsert {
            return Ok(stored);
        }
        let mut keys: Vec<String> = changes
            .iter()
            .filter_map(|c| Some(self.encoder.key_of(c.event(), c.unchanged_from()?)))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(stored);
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for key in &keys {
            match self.config.format {
                RedisFormat::Json => pipe.get(key),
                RedisFormat::Hash => pipe.hgetall(key),
            };
        }
        let mut conn = self.conn().await?;
        let replies: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
            pipe.query_async(&mut conn).await;
        let replies = replies.map_err(|e| self.error(&e, "reading stored rows"))?;
        for (key, reply) in keys.into_iter().zip(replies) {
            let row = reply.and_then(|value| match self.config.format {
                RedisFormat::Json => {
                    let doc: Option<String> = redis::from_redis_value(value)?;
                    Ok(match doc.map(|d| serde_json::from_str(&d)) {
                        Some(Ok(serde_json::Value::Object(fields))) => {
                            Some(StoredRow::Json(fields))
                        }
                        // Not a row this sink wrote: as good as none.
                        _ => None,
                    })
                }
                RedisFormat::Hash => {
                    let fields: HashMap<String, String> = redis::from_redis_value(value)?;
                    Ok((!fields.is_empty()).then_some(StoredRow::Hash(fields)))
                }
            });
            match row {
                Ok(Some(row)) => {
                    stored.rows.insert(key, row);
                }
                Ok(None) => {}
                Err(e) => {
                    stored.refused.insert(key, e.to_string());
                }
            }
        }
        Ok(stored)
    }
}

#[async_trait]
impl Sink for RedisSink {
    async fn check(&mut self) -> Result<()> {
        let mut conn = self.conn().await?;
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
        pong.map(drop).map_err(|e| self.error(&e, "PING"))
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        if let Some(t) = tables.iter().find(|t| t.key_columns.is_empty()) {
            return Err(Error::permanent(format!(
                "table {} has no primary key, so its rows have no Redis key; give it one, or leave it out of this sink with `tables`",
                t.name
            )));
        }
        // Without {schema} in the key, tables of the same name in two schemas share keys.
        if !self.config.key.contains("{schema}") {
            let mut names: Vec<&str> = tables.iter().map(|t| t.name.table()).collect();
            names.sort_unstable();
            if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
                return Err(Error::permanent(format!(
                    "two captured tables are named {:?} in different schemas, and the key {:?} has no {{schema}}: their rows would share keys; add {{schema}} to `key`",
                    pair[0], self.config.key
                )));
            }
        }
        self.log = Some(log.clone());
        let stored = self.stored_cursor().await?;
        self.cursor = stored.as_ref().map(|c| c.next_offset);
        Ok(stored)
    }

    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        // Below the stored cursor everything is applied already (in the log's one order; a
        // consumer group's stretches skip nothing).
        let applied = if batch.ordered {
            self.cursor.unwrap_or(0)
        } else {
            0
        };
        if batch.end <= applied {
            return Ok(());
        }
        let records = &batch.records[batch.records.partition_point(|r| r.offset < applied)..];
        let all = net_changes(records);
        let stored = self.stored_rows(&all).await?;
        // A change whose stored row Redis refuses to read (a key of another type) is
        // rejected once the changes before it are applied.
        let refused = all.iter().enumerate().find_map(|(i, c)| {
            let key = self.encoder.key_of(c.event(), c.unchanged_from()?);
            Some((i, stored.refused.get(&key)?))
        });
        // With a refusal, the cursor stops before the first record of any key not applied,
        // so that applying the batch again (without the refused record) redoes all of them.
        let (changes, end) = match refused {
            Some((i, _)) => {
                let unapplied: HashSet<Vec<u8>> =
                    all[i..].iter().map(|c| c.event().log_key()).collect();
                let first = records
                    .iter()
                    .filter(|r| {
                        r.offset >= all[i].offset() || unapplied.contains(&r.event.log_key())
                    })
                    .map(|r| r.offset)
                    .min()
                    .unwrap_or(all[i].offset());
                (&all[..i], first)
            }
            None => (&all[..], batch.end),
        };
        let mut segment = 0;
        for (i, change) in changes.iter().enumerate() {
            if let Change::Truncate { offset, .. } = change {
                self.write(&changes[segment..i], &stored.rows, *offset)
                    .await?;
                self.truncate(change).await?;
                segment = i + 1;
            }
        }
        self.write(&changes[segment..], &stored.rows, end).await?;
        match refused {
            Some((i, reason)) => Err(all[i].rejected(reason.clone())),
            None => Ok(()),
        }
    }

    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.set_cursor(next).await
    }

    fn keeps_cursor(&self) -> bool {
        true
    }

    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        for table in tables {
            let (schema, name) = (table.name.namespace(), table.name.table());
            let pattern = self.encoder.table_pattern(schema, name);
            let deleted = self.delete_matching(&pattern).await?;
            tracing::info!(table = %table.name, deleted, "reset: removed the table's keys");
        }
        let mut conn = self.conn().await?;
        let done: redis::RedisResult<u64> = redis::cmd("DEL")
            .arg(&self.cursor_key)
            .query_async(&mut conn)
            .await;
        done.map(drop)
            .map_err(|e| self.error(&e, "deleting the cursor"))
    }
}
