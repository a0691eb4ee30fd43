//! What every message sink shares (Redis Streams, NATS JetStream, RabbitMQ and webhooks):
//! the settings every one of them has ([`message_config!`]), and the one encoding of an event
//! as a message ([`MessageEncoder`]) — its destination (stream, subject, routing key) from a
//! template, Debezium's key and envelope, and the facts a consumer dedupes and orders by: the
//! event's id (the log's identity and the event's offset), its offset, the source's position
//! and transaction ([`Message::headers`] where the broker carries headers). With `value =
//! "outbox"`, an outbox table's rows are routed as events instead ([`OutboxRouter`]).

mod config;
mod encode;
mod outbox;

pub use config::{DESTINATION_PLACEHOLDERS, MessageSettings, ValueForm, default_destination, yes};
pub use encode::{Encoded, Facts, Message, MessageEncoder, ValueEncoder, header};
pub use outbox::{OutboxConfig, OutboxRouter, ROUTE_PLACEHOLDERS, Routed};
