//! What siphon's Kafka log (`logs/kafka`) and Kafka sink (`sinks/kafka`) share: the settings
//! of a cluster (brokers, TLS, SASL), the topics siphon creates, the Debezium records of an
//! event with siphon's headers (JSON, or Avro with a schema registry), and the producer that
//! writes them transactionally or idempotently.

mod admin;
mod client;
pub mod config;
pub mod consume;
mod context;
mod error;
pub mod headers;
mod publisher;
mod records;
pub mod registry;

pub use admin::{TopicSpec, Topics};
pub use context::Quiet;
pub use error::{is_fenced, kafka_error};
pub use publisher::{Delivery, Place, Publisher};
pub use records::{OutRecord, RecordEncoder, distinct_topics, table_topic, topic_name};
