//! siphon-format: how events are written out for the world to read — Debezium's change event
//! envelope and records ([`envelope`]), its values, topics and Kafka Connect schemas in each
//! handling mode ([`debezium`]), and the JSON and text forms in which the stores keep values
//! and keys ([`json`]), spatial values in both ([`spatial`]). Each module uses only those
//! listed after it. [`avro`] turns a Kafka Connect schema and payload (what [`debezium`]
//! makes) into Avro, as Kafka Connect's AvroConverter does.

pub mod avro;
mod calendar;
pub mod debezium;
pub mod envelope;
pub mod json;
pub mod spatial;
