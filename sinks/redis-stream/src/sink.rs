//! The Redis Streams sink.

use async_trait::async_trait;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_sink_message::{Message, MessageEncoder, MessageSettings};
use siphon_sink_redis::RedisClient;

use crate::config::RedisStreamConfig;

/// Adds a batch's entries, then sets the cursor. KEYS: the streams, then the cursor key.
/// ARGV: the cursor's value, MAXLEN (0: none), whether the cursor must exist (1/0), then per
/// entry the stream's index in KEYS, the entry id, the number of fields and the fields and
/// values. Returns how many entries it added.
const APPLY: &str = r"
local cursor = KEYS[#KEYS]
if ARGV[3] == '1' and redis.call('EXISTS', cursor) == 0 then
  return redis.error_reply('SIPHONLOST the cursor key ' .. cursor .. ' is gone: Redis lost its data (flushed, or restarted without persistence)')
end
local added = 0
local i = 4
while i <= #ARGV do
  local fields = tonumber(ARGV[i + 2])
  local args = { KEYS[tonumber(ARGV[i])] }
  if ARGV[2] ~= '0' then
    args[#args + 1] = 'MAXLEN'
    args[#args + 1] = '~'
    args[#args + 1] = ARGV[2]
  end
  args[#args + 1] = ARGV[i + 1]
  for j = 1, fields * 2 do
    args[#args + 1] = ARGV[i + 2 + j]
  end
  local reply = redis.pcall('XADD', unpack(args))
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'equal or smaller', 1, true) then
      return reply
    end
  else
    added = added + 1
  end
  i = i + 3 + fields * 2
end
redis.call('SET', cursor, ARGV[1])
return added
";

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

    /// Adds `messages` to their streams and sets the cursor to `next`, in one script.
    async fn write(&mut self, messages: &[Message], next: u64) -> Result<()> {
        // The streams are the script's keys, each entry names its stream by its index.
        let mut streams: Vec<&str> = Vec::new();
        let indices: Vec<usize> = messages
            .iter()
            .map(|m| match streams.iter().position(|s| *s == m.destination) {
                Some(i) => i + 1,
                None => {
                    streams.push(&m.destination);
                    streams.len()
                }
            })
            .collect();
        // EVAL, not EVALSHA: the script is small beside a batch, and needs no cache.
        let mut eval = redis::cmd("EVAL");
        eval.arg(APPLY)
            .arg(streams.len() + 1)
            .arg(&streams)
            .arg(&self.cursor_key)
            .arg(format!(
                "{next} {}",
                self.log.as_ref().map_or("", LogId::as_str)
            ))
            .arg(self.max_len.unwrap_or(0))
            .arg(if self.cursor.is_some() { "1" } else { "0" });
        for (message, index) in messages.iter().zip(indices) {
            eval.arg(index).arg(entry_id(message.offset));
            push_fields(&mut eval, message);
        }
        let mut conn = self.client.conn().await?;
        let added: redis::RedisResult<u64> = eval.query_async(&mut conn).await;
        match added {
            Ok(_) => {
                self.cursor = Some(next);
                Ok(())
            }
            Err(e) if e.code() == Some("SIPHONLOST") => {
                self.cursor = None;
                Err(Error::transient(format!(
                    "redis {}: {}",
                    self.client.url(),
                    e.detail().unwrap_or_default()
                )))
            }
            Err(e) => Err(self.client.error(&e, "adding to the streams")),
        }
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

/// A message's fields in its stream entry, after their count.
fn push_fields(eval: &mut redis::Cmd, message: &Message) {
    let count = 5 + usize::from(message.key.is_some()) + usize::from(message.txid.is_some());
    eval.arg(count);
    if let Some(key) = &message.key {
        eval.arg("key").arg(key.as_slice());
    }
    eval.arg("value")
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
        eval.arg("txid").arg(txid);
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
                "destination: {:?} names no {{table}}, and this sink reads the log's tables interleaved (a consumer group's member): an entry of one table could come after a later one of another and be refused; give each table its stream ({{table}} in destination), or read without consumer_group",
                self.settings.destination
            )));
        }
        let log = self.log.clone().unwrap_or_else(LogId::random);
        let messages: Vec<Message> = batch
            .records
            .iter()
            .map(|record| self.encoder.encode(record, &log))
            .collect();
        self.write(&messages, batch.end).await
    }

    /// Moves the cursor back; the entries the log sends again are refused by their ids, so
    /// a replay into the same streams adds nothing (a replay with `--reset` empties them).
    async fn rewind(&mut self, next: u64) -> Result<()> {
        self.write(&[], next).await
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
