//! The RabbitMQ sink.

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use siphon_core::log::LogId;
use siphon_core::sink::{Sink, SinkBatch, StoreCursor};
use siphon_core::source::TableInfo;
use siphon_core::{Error, Result};
use siphon_sink_message::{Message, MessageEncoder, header};

use crate::config::{ExchangeType, RabbitmqSinkConfig};

/// AMQP's `delivery_mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// How long after a connection made again (the broker restarted, or the network broke) a
/// message no queue took is retried rather than rejected: a queue that a restarted broker
/// failed to recover has no routes until it is restarted or a consumer declares it again,
/// and until then what is bound to it comes back unrouted.
const RECOVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Publishes each event with publisher confirms; see the crate documentation.
pub struct RabbitmqSink {
    config: RabbitmqSinkConfig,
    encoder: MessageEncoder,
    /// `<pipeline>.<sink>`, the connection's name in the broker's management tools.
    name: String,
    exchange: String,
    /// The broker, as errors show it: scheme, host, port and vhost.
    shown: String,
    /// The connection and its channel in confirm mode, once open.
    open: Option<(Connection, Channel)>,
    /// When a connection was made again after one was lost (none yet: the first).
    reconnected: Option<std::time::Instant>,
    /// Whether a connection was ever made.
    connected_once: bool,
    log: Option<LogId>,
}

impl std::fmt::Debug for RabbitmqSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitmqSink")
            .field("broker", &self.shown)
            .field("exchange", &self.exchange)
            .field("connected", &self.open.is_some())
            .finish_non_exhaustive()
    }
}

impl RabbitmqSink {
    /// Sink `sink` of pipeline `pipeline`.
    pub fn new(config: &RabbitmqSinkConfig, pipeline: &str, sink: &str) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let prefix = config.prefix.clone().unwrap_or_else(|| pipeline.to_owned());
        let uri: lapin::uri::AMQPUri = config.url.expose().parse().map_err(Error::Config)?;
        Ok(RabbitmqSink {
            encoder: MessageEncoder::new(&config.message(), pipeline).map_err(Error::Config)?,
            name: format!("{pipeline}.{sink}"),
            exchange: config.exchange.clone().unwrap_or(prefix),
            shown: format!(
                "{}://{}:{}/{}",
                if config.url.expose().starts_with("amqps://") {
                    "amqps"
                } else {
                    "amqp"
                },
                uri.authority.host,
                uri.authority.port,
                uri.vhost
            ),
            config: config.clone(),
            open: None,
            reconnected: None,
            connected_once: false,
            log: None,
        })
    }

    fn error(&self, doing: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        let cause = siphon_core::error::with_causes(&*e.into());
        Error::transient(format!("rabbitmq {}: {doing}: {cause}", self.shown))
    }

    /// A connection and a channel in confirm mode, made again when the last one broke.
    async fn channel(&mut self) -> Result<Channel> {
        if let Some((connection, channel)) = &self.open {
            if connection.status().connected() && channel.status().connected() {
                return Ok(channel.clone());
            }
            self.open = None;
        }
        let mut uri: lapin::uri::AMQPUri =
            self.config.url.expose().parse().map_err(Error::Config)?;
        if let Some(password) = &self.config.password {
            uri.authority.userinfo.password = password.expose().to_owned();
        }
        let tls =
            lapin::tcp::OwnedTLSConfig {
                identity: None,
                cert_chain: match &self.config.tls_ca_file {
                    Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                        Error::Config(format!("tls_ca_file: {}: {e}", path.display()))
                    })?),
                    None => None,
                },
            };
        let properties =
            ConnectionProperties::default().with_connection_name(self.name.clone().into());
        let runtime = lapin::runtime::default_runtime().map_err(|e| self.error("runtime", e))?;
        let connect = Connection::connect_uri_with_config(uri, properties, tls, runtime);
        let connection = tokio::time::timeout(self.config.timeout.0, connect)
            .await
            .map_err(|_| self.error("connecting", "no answer"))?
            .map_err(|e| self.error("connecting", e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| self.error("opening a channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| self.error("asking for publisher confirms", e))?;
        let options = ExchangeDeclareOptions {
            durable: true,
            // Without declaring, a passive declare checks that the exchange exists.
            passive: !self.config.declare_exchange,
            ..Default::default()
        };
        let kind = match self.config.exchange_type {
            ExchangeType::Topic => lapin::ExchangeKind::Topic,
            ExchangeType::Direct => lapin::ExchangeKind::Direct,
            ExchangeType::Fanout => lapin::ExchangeKind::Fanout,
            ExchangeType::Headers => lapin::ExchangeKind::Headers,
        };
        if let Err(e) = channel
            .exchange_declare(
                self.exchange.as_str().into(),
                kind,
                options,
                FieldTable::default(),
            )
            .await
        {
            // The broker closes the channel: a missing exchange, or one of another type.
            return Err(Error::permanent(format!(
                "rabbitmq {}: exchange {}: {e}{}",
                self.shown,
                self.exchange,
                if self.config.declare_exchange {
                    " (an exchange of that name with other settings exists: give exchange_type its type, or name another exchange)"
                } else {
                    " (declare_exchange = false: create it, or let the sink declare it)"
                }
            )));
        }
        self.open = Some((connection, channel.clone()));
        if self.connected_once {
            self.reconnected = Some(std::time::Instant::now());
        }
        self.connected_once = true;
        Ok(channel)
    }
}

/// A message's properties: persistent, its id, and its facts (and Debezium's key) as
/// headers.
fn properties(message: &Message) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in message.headers() {
        headers.insert(
            ShortString::from(name),
            AMQPValue::LongString(LongString::from(value)),
        );
    }
    if let Some(key) = &message.key {
        headers.insert(
            ShortString::from(header::KEY),
            AMQPValue::LongString(LongString::from(key.clone())),
        );
    }
    BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type("application/json".into())
        .with_message_id(message.id.as_str().into())
        .with_headers(headers)
}

#[async_trait]
impl Sink for RabbitmqSink {
    /// Connects, and declares the exchange (or checks that it exists).
    async fn check(&mut self) -> Result<()> {
        self.channel().await.map(drop)
    }

    /// The broker keeps no cursor: siphon's own says where to go on.
    async fn open(&mut self, _tables: &[TableInfo], log: &LogId) -> Result<Option<StoreCursor>> {
        self.log = Some(log.clone());
        self.channel().await?;
        Ok(None)
    }

    /// Publishes the batch's messages without waiting, then waits for every confirm in
    /// order: the cursor moves only once the broker took them all. A message no queue
    /// took comes back (it was published `mandatory`): that record is rejected.
    async fn apply(&mut self, batch: &SinkBatch) -> Result<()> {
        let log = self
            .log
            .clone()
            .ok_or_else(|| Error::permanent("rabbitmq: a batch before open"))?;
        let channel = self.channel().await?;
        let mut confirms = Vec::with_capacity(batch.records.len());
        for record in &batch.records {
            // A delete the row state drops, an outbox table's update, has no message.
            let Some(message) = self.encoder.encode(record, &log)? else {
                continue;
            };
            let confirm = channel
                .basic_publish(
                    self.exchange.as_str().into(),
                    message.destination.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &message.value,
                    properties(&message),
                )
                .await;
            match confirm {
                Ok(confirm) => confirms.push((confirm, record, message.destination)),
                Err(e) => {
                    self.open = None;
                    return Err(self.error("publishing", e));
                }
            }
        }
        for (confirm, record, routing_key) in confirms {
            let confirmed = tokio::time::timeout(self.config.timeout.0, confirm).await;
            match confirmed {
                Ok(Ok(Confirmation::Ack(None))) => {}
                Ok(Ok(Confirmation::Ack(Some(returned)))) => {
                    let why = format!(
                        "rabbitmq: exchange {} routed {routing_key} to no queue ({} {})",
                        self.exchange, returned.reply_code, returned.reply_text
                    );
                    if self.reconnected.is_some_and(|at| at.elapsed() < RECOVERY) {
                        return Err(Error::transient(format!(
                            "{why}: the broker may still be starting its queues after the connection was made again; retrying"
                        )));
                    }
                    return Err(record.rejected(format!("{why}: bind a queue to it")));
                }
                Ok(Ok(Confirmation::Nack(_))) => {
                    return Err(self.error(
                        &format!("publishing to {routing_key}"),
                        "the broker could not take the message (nack)",
                    ));
                }
                Ok(Ok(Confirmation::NotRequested)) => {
                    return Err(Error::permanent(
                        "rabbitmq: the channel is not in confirm mode",
                    ));
                }
                Ok(Err(e)) => {
                    self.open = None;
                    return Err(self.error("waiting for a confirm", e));
                }
                Err(_) => {
                    self.open = None;
                    return Err(self.error(
                        "waiting for a confirm",
                        format!("none within {:?}", self.config.timeout.0),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Nothing to remove: what was published is the queues'.
    async fn reset(&mut self, _tables: &[TableInfo]) -> Result<()> {
        Ok(())
    }

    /// Every event is a message: the log never compacts what the sink has not published.
    fn keeps_history(&self) -> bool {
        true
    }
}
