//! The topics siphon writes to: created when missing, with the settings asked for; topics that
//! exist are used as they are.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::RDKafkaErrorCode;
use siphon_core::{Error, Result};

use crate::config::Connection;
use crate::context::Quiet;
use crate::error::kafka_error;

/// How a topic is made when it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Partitions.
    pub partitions: i32,
    /// Copies of each partition (-1: the broker's default).
    pub replication_factor: i32,
    /// Topic settings (`cleanup.policy`, `retention.ms`, …).
    pub config: BTreeMap<String, String>,
}

/// Makes sure topics exist; remembers the ones it saw.
pub struct Topics {
    admin: AdminClient<Quiet>,
    known: Mutex<HashSet<String>>,
    timeout: Duration,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topics").finish_non_exhaustive()
    }
}

impl Topics {
    /// Removes every record of those of `topics` that exist (Kafka's DeleteRecords, up to
    /// each partition's end): a topic that keeps only the latest record of each key refuses
    /// it, and is left as it is. Blocks.
    pub fn delete_records(&self, topics: &[String]) -> Result<()> {
        let metadata = self
            .admin
            .inner()
            .fetch_metadata(None, self.timeout)
            .map_err(|e| kafka_error("reading the cluster's topics", &e))?;
        let mut everything = rdkafka::TopicPartitionList::new();
        for topic in metadata
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|name| name == t.name()))
        {
            for partition in topic.partitions() {
                everything
                    .add_partition_offset(topic.name(), partition.id(), rdkafka::Offset::End)
                    .map_err(|e| kafka_error("listing partitions", &e))?;
            }
        }
        if everything.count() == 0 {
            return Ok(());
        }
        let options = AdminOptions::new().operation_timeout(Some(self.timeout));
        let done = futures_executor::block_on(self.admin.delete_records(&everything, &options))
            .map_err(|e| kafka_error("deleting records", &e))?;
        for element in done.elements() {
            if let Err(e) = element.error() {
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::PolicyViolation) {
                    tracing::info!(
                        topic = element.topic(),
                        "a compacted topic keeps its records (Kafka refuses to delete them)"
                    );
                } else {
                    return Err(kafka_error(
                        &format!("deleting the records of {}", element.topic()),
                        &e,
                    ));
                }
            }
        }
        Ok(())
    }

    /// An admin client of the cluster.
    pub fn connect(connection: &Connection, client_id: &str, timeout: Duration) -> Result<Self> {
        let config = connection.client_config(client_id)?;
        let admin = AdminClient::from_config_and_context(&config, Quiet)
            .map_err(|e| kafka_error("creating an admin client", &e))?;
        Ok(Topics {
            admin,
            known: Mutex::default(),
            timeout,
        })
    }

    /// Creates each of `topics` that does not exist yet with `spec`. Blocks (the admin
    /// client's own thread answers it): call it off the async runtime's threads.
    pub fn ensure(&self, topics: &[String], spec: &TopicSpec) -> Result<()> {
        let missing: Vec<&String> = {
            let known = self.known.lock().unwrap();
            topics.iter().filter(|t| !known.contains(*t)).collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let new: Vec<NewTopic<'_>> = missing
            .iter()
            .map(|name| {
                spec.config.iter().fold(
                    NewTopic::new(
                        name,
                        spec.partitions,
                        TopicReplication::Fixed(spec.replication_factor),
                    ),
                    |topic, (k, v)| topic.set(k, v),
                )
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(self.timeout));
        let results = futures_executor::block_on(self.admin.create_topics(new.iter(), &options))
            .map_err(|e| kafka_error("creating topics", &e))?;
        for result in results {
            match result {
                Ok(name) => {
                    tracing::info!(topic = %name, partitions = spec.partitions, "created a Kafka topic");
                    self.known.lock().unwrap().insert(name);
                }
                Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    self.known.lock().unwrap().insert(name);
                }
                Err((name, code)) => {
                    let message = format!("kafka: creating topic {name}: {code}");
                    return Err(match code {
                        RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::ClusterAuthorizationFailed
                        | RDKafkaErrorCode::InvalidReplicationFactor
                        | RDKafkaErrorCode::InvalidPartitions
                        | RDKafkaErrorCode::InvalidConfig
                        | RDKafkaErrorCode::InvalidTopic
                        | RDKafkaErrorCode::PolicyViolation => Error::permanent(message),
                        _ => Error::transient(message),
                    });
                }
            }
        }
        Ok(())
    }
}
