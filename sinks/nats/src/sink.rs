//! The NATS JetStream sink.

use async_nats::jetstream::context::{
    DeleteStreamErrorKind, GetStreamError, GetStreamErrorKind, PublishErrorKind,
};
use async_nats::jetstream::{self, stream};
use async_nats::{HeaderMap, HeaderValue};
use async_trait::async_trait;
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, SinkRecord, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_sink_message::{Message, MessageEncoder, header};

use crate::config::{NatsSinkConfig, Retention, Storage, stream_name, stream_subject};

/// The header naming the sink that published a message (`<pipeline>.<sink>`): only a
/// message of its own tells a sink where it stopped.
pub const SINK_HEADER: &str = "siphon.sink";

/// Publishes each event to its subject once; see the crate documentation.
#[derive(Debug)]
pub struct NatsSink {
    config: NatsSinkConfig,
    encoder: MessageEncoder,
    /// `<pipeline>.<sink>`, the value of [`SINK_HEADER`].
    name: String,
    /// The stream that takes the subjects.
    stream: String,
    /// The subjects of a stream the sink creates.
    subjects: Vec<String>,
    /// The servers, as errors show them (without credentials).
    shown: String,
    jetstream: Option<jetstream::Context>,
    log: Option<LogId>,
    /// The offset below which the stream holds everything of this sink, as of its last
    /// message at open and the messages acked since: a record below it is not sent again.
    published: u64,
    /// The stream's last sequence, as of the last open or ack: the next message, published
    /// with `Nats-Expected-Last-Sequence`, must follow it.
    last_sequence: Option<u64>,
}

impl NatsSink {
    /// Sink `sink` of pipeline `pipeline`.
    pub fn new(config: &NatsSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let prefix = config.prefix.clone().unwrap_or_else(|| pipeline.to_owned());
        let subjects = match &config.subjects {
            Some(subjects) => subjects.clone(),
            None => vec![stream_subject(&config.destination).map_err(Error::Config)?],
        }
        .into_iter()
        .map(|s| s.replace("{prefix}", &prefix))
        .collect();
        Ok(NatsSink {
            encoder: MessageEncoder::new(&config.message(), pipeline).map_err(Error::Config)?,
            name: format!("{pipeline}.{sink}"),
            stream: config
                .stream
                .clone()
                .unwrap_or_else(|| stream_name(&prefix)),
            subjects,
            shown: servers(config.url.expose()),
            config: config.clone(),
            jetstream: None,
            log: None,
            published: 0,
            last_sequence: None,
        })
    }

    fn error(&self, doing: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        let cause = siphon_core::error::with_causes(&*e.into());
        Error::transient(format!("nats {}: {doing}: {cause}", self.shown))
    }

    /// The JetStream context, connecting first if need be. The client reconnects by itself
    /// once connected: a server restart costs the publishes under way (their acks time out)
    /// and nothing else.
    async fn connect(&mut self) -> Result<jetstream::Context> {
        if let Some(context) = &self.jetstream {
            return Ok(context.clone());
        }
        let config = &self.config;
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("siphon {}", self.name))
            .connection_timeout(config.timeout.0)
            .request_timeout(Some(config.timeout.0));
        if let (Some(user), Some(password)) = (&config.user, &config.password) {
            options = options.user_and_password(user.clone(), password.expose().to_owned());
        } else if let Some(user) = &config.user {
            options = options.user_and_password(user.clone(), String::new());
        }
        if let Some(token) = &config.token {
            options = options.token(token.expose().to_owned());
        }
        if let Some(path) = &config.credentials_file {
            options = options
                .credentials_file(path)
                .await
                .map_err(|e| Error::Config(format!("credentials_file: {}: {e}", path.display())))?;
        }
        if let Some(tls) =
            siphon_core::tls::client_config(config.tls_mode(), config.tls_ca_file.as_deref())?
        {
            options = options.require_tls(true).tls_client_config(tls);
        }
        let client = options
            .connect(config.url.expose())
            .await
            .map_err(|e| self.error("connecting", e))?;
        let context = jetstream::ContextBuilder::new()
            .timeout(config.timeout.0)
            .ack_timeout(config.timeout.0)
            .build(client);
        self.jetstream = Some(context.clone());
        Ok(context)
    }

    /// The stream, created when missing (and allowed to be).
    async fn stream(&self, context: &jetstream::Context) -> Result<stream::Stream> {
        match context.get_stream(&self.stream).await {
            Ok(stream) => return Ok(stream),
            Err(e) if missing(&e) => {}
            Err(e) => return Err(self.error(&format!("reading stream {}", self.stream), e)),
        }
        if !self.config.create_stream {
            return Err(Error::permanent(format!(
                "nats {}: stream {} does not exist: create it, or set create_stream = true",
                self.shown, self.stream
            )));
        }
        let config = &self.config;
        let created = context
            .create_stream(stream::Config {
                name: self.stream.clone(),
                subjects: self.subjects.clone(),
                retention: match config.retention {
                    Retention::Limits => stream::RetentionPolicy::Limits,
                    Retention::Interest => stream::RetentionPolicy::Interest,
                    Retention::Workqueue => stream::RetentionPolicy::WorkQueue,
                },
                storage: match config.storage {
                    Storage::File => stream::StorageType::File,
                    Storage::Memory => stream::StorageType::Memory,
                },
                duplicate_window: config.duplicate_window.0,
                max_age: config.max_age.map(|age| age.0).unwrap_or_default(),
                num_replicas: config.replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| self.error(&format!("creating stream {}", self.stream), e))?;
        tracing::info!(stream = %self.stream, subjects = ?self.subjects, "created the JetStream stream");
        Ok(created)
    }

    /// Where this sink stopped, from the stream's last message if this sink published it:
    /// the stream is what the server keeps, so a batch acknowledged just before a crash is
    /// not sent again (past the duplicate window it would be kept twice). Another writer's
    /// last message, or none (retention removed it), says nothing: siphon's own cursor
    /// serves.
    async fn last_published(&mut self, stream: &mut stream::Stream) -> Result<Option<StoreCursor>> {
        let info = stream
            .info()
            .await
            .map_err(|e| self.error(&format!("reading stream {}", self.stream), e))?;
        let last = info.state.last_sequence;
        self.last_sequence = Some(last);
        if last == 0 {
            return Ok(None);
        }
        let message = match stream.get_raw_message(last).await {
            Ok(message) => message,
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(self.error(&format!("reading message {last}"), e)),
        };
        let text = |name: &str| {
            message
                .headers
                .get(name)
                .map(|value| value.as_str().to_owned())
        };
        if text(SINK_HEADER).as_deref() != Some(&self.name) {
            return Ok(None);
        }
        let Some((log, offset)) = text(header::ID).and_then(|id| {
            let (log, offset) = id.rsplit_once(':')?;
            Some((log.to_owned(), offset.parse::<u64>().ok()?))
        }) else {
            return Ok(None);
        };
        Ok(Some(StoreCursor {
            next_offset: offset + 1,
            log: Some(LogId::from_stored(&log)),
        }))
    }

    /// Refuses tables whose subjects the stream does not take: a publish there would find
    /// no stream, and the event would go nowhere.
    fn check_subjects(&self, tables: &[TableInfo], taken: &[String]) -> Result<()> {
        for table in tables {
            for subject in self.encoder.destinations_of(table) {
                if !taken.iter().any(|filter| subject_matches(filter, &subject)) {
                    return Err(Error::permanent(format!(
                        "nats {}: stream {} does not take subject {subject} (its subjects: {}); add it to the stream's subjects, or change destination",
                        self.shown,
                        self.stream,
                        taken.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Publishes `message`, returning the future of its ack.
    async fn publish(
        &self,
        context: &jetstream::Context,
        message: &Message,
        record: &SinkRecord,
        max_payload: usize,
        expected_last: Option<u64>,
    ) -> Result<jetstream::context::PublishAckFuture> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.id.as_str());
        if let Some(sequence) = expected_last {
            headers.insert("Nats-Expected-Last-Sequence", sequence.to_string().as_str());
        }
        for (name, value) in message.headers() {
            headers.insert(name, HeaderValue::from(value));
        }
        headers.insert(SINK_HEADER, self.name.as_str());
        if let Some(key) = &message.key {
            headers.insert(header::KEY, String::from_utf8_lossy(key).as_ref());
        }
        if message.value.len() > max_payload {
            return Err(record.rejected(format!(
                "nats: the message is {} bytes, more than the server's max_payload ({max_payload})",
                message.value.len()
            )));
        }
        context
            .publish_with_headers(
                message.destination.clone(),
                headers,
                message.value.clone().into(),
            )
            .await
            .map_err(|e| self.error(&format!("publishing to {}", message.destination), e))
    }
}

/// Whether the stream asked for does not exist.
fn missing(e: &GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::JetStream(api) if api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Whether subject filter `filter` (`*` a token, `>` the rest) takes `subject`.
fn subject_matches(filter: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for wanted in filter.split('.') {
        match (wanted, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (wanted, Some(token)) if wanted == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

/// The servers of `urls` without user names, passwords or tokens.
fn servers(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let url = url.trim();
            match url.split_once("://") {
                Some((scheme, rest)) => {
                    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                    format!("{scheme}://{host}")
                }
                None => url.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[async_trait]
impl Sink for NatsSink {
    /// Connects and reads the stream (or sees that it is missing and may be created).
    async fn check(&mut self) -> Result<()> {
        let context = self.connect().await?;
        match context.get_stream(&self.stream).await {
            Ok(_) => Ok(()),
            Err(_) if self.config.create_stream => Ok(()),
            Err(e) => Err(self.error(&format!("reading stream {}", self.stream), e)),
        }
    }

    async fn open(&mut self, tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        let context = self.connect().await?;
        let mut stream = self.stream(&context).await?;
        let taken = stream.cached_info().config.subjects.clone();
        self.check_subjects(tables, &taken)?;
        let last = self.last_published(&mut stream).await?;
        if let Some(cursor) = last.as_ref().filter(|c| c.log.as_ref() == Some(log)) {
            self.published = self.published.max(cursor.next_offset);
        }
        Ok(last)
    }

    /// Publishes the batch's messages one after another without waiting, then waits for
    /// every ack in order: the cursor moves only once the stream holds them all. Each message
    /// names the stream's sequence it must follow (`Nats-Expected-Last-Sequence`), so that
    /// once one is lost (the connection broke under it) none after it is stored: the stream
    /// holds an unbroken run of the log, and the sink goes on after its last message.
    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        let log = self
            .log
            .clone()
            .ok_or_else(|| Error::permanent("nats: a batch before open"))?;
        let context = self.connect().await?;
        let max_payload = context.client().server_info().max_payload;
        // A consumer group's members share the stream and read the tables interleaved: no
        // order to keep across them, and no record to skip.
        let (published, mut next_sequence) = if batch.ordered {
            let last = match self.last_sequence {
                Some(last) => last,
                None => {
                    self.stream(&context)
                        .await?
                        .info()
                        .await
                        .map_err(|e| self.error(&format!("reading stream {}", self.stream), e))?
                        .state
                        .last_sequence
                }
            };
            (self.published, Some(last))
        } else {
            (0, None)
        };
        self.last_sequence = None;
        let mut acks = Vec::with_capacity(batch.records.len());
        for record in batch.records.iter().filter(|r| r.offset >= published) {
            // A delete the row state drops, an outbox table's update, has no message.
            let Some(message) = self.encoder.encode(record, &log)? else {
                continue;
            };
            let ack = self
                .publish(&context, &message, record, max_payload, next_sequence)
                .await?;
            next_sequence = next_sequence.map(|s| s + 1);
            acks.push((ack, record, message.destination));
        }
        // Known again once every ack came, none of them a duplicate's (which names the
        // sequence the message was stored at before).
        let mut last_sequence = next_sequence;
        for (ack, record, subject) in acks {
            match ack.await {
                Ok(ack) => {
                    if batch.ordered {
                        self.published = self.published.max(record.offset + 1);
                    }
                    if ack.duplicate {
                        last_sequence = None;
                    }
                }
                Err(e) => {
                    let api = std::error::Error::source(&e)
                        .and_then(|s| s.downcast_ref::<jetstream::Error>());
                    if let Some(api) = api
                        && api.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
                    {
                        return Err(record.rejected(format!("nats: stream {}: {api}", self.stream)));
                    }
                    let doing = match e.kind() {
                        PublishErrorKind::StreamNotFound => format!(
                            "no stream took subject {subject} (JetStream starting, or stream {} removed)",
                            self.stream
                        ),
                        PublishErrorKind::WrongLastSequence => format!(
                            "stream {} moved on under a message to {subject} (a message before it lost with the connection, a duplicate, or another writer of the stream)",
                            self.stream
                        ),
                        _ => format!("waiting for the ack of a message to {subject}"),
                    };
                    return Err(self.error(&doing, e));
                }
            }
        }
        if batch.ordered {
            self.published = self.published.max(batch.end);
            self.last_sequence = last_sequence;
        }
        Ok(())
    }

    /// Deletes the stream the sink creates (it is made again, empty, at open: a stream
    /// purged would still drop the messages sent again within its duplicate window), or
    /// purges the tables' subjects from a stream it may not create.
    async fn reset(&mut self, tables: &[TableInfo]) -> Result<()> {
        let context = self.connect().await?;
        self.published = 0;
        self.last_sequence = None;
        if self.config.create_stream {
            return match context.delete_stream(&self.stream).await {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.kind(), DeleteStreamErrorKind::JetStream(api) if api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) => {
                    Ok(())
                }
                Err(e) => Err(self.error(&format!("deleting stream {}", self.stream), e)),
            };
        }
        let stream = match context.get_stream(&self.stream).await {
            Ok(stream) => stream,
            Err(e) if missing(&e) => return Ok(()),
            Err(e) => return Err(self.error(&format!("reading stream {}", self.stream), e)),
        };
        for table in tables {
            for subject in self.encoder.destinations_of(table) {
                stream
                    .purge()
                    .filter(subject.clone())
                    .await
                    .map_err(|e| self.error(&format!("purging {subject}"), e))?;
            }
        }
        Ok(())
    }

    /// Every event is a message: the log never compacts what the sink has not published.
    fn keeps_history(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_filters_match_as_nats_does() {
        assert!(subject_matches("shop.*.*", "shop.public.orders"));
        assert!(subject_matches("shop.>", "shop.public.orders"));
        assert!(!subject_matches("shop.*", "shop.public.orders"));
        assert!(!subject_matches("shop.*.*.*", "shop.public.orders"));
        assert!(!subject_matches("shop.>", "shop"));
        assert!(subject_matches("shop.public.orders", "shop.public.orders"));
    }

    #[test]
    fn errors_show_servers_without_credentials() {
        assert_eq!(
            servers("nats://u:secret@a:4222, tls://token@b:4443"),
            "nats://a:4222,tls://b:4443"
        );
    }
}
