//! Test helpers for siphon: the real PostgreSQL, MariaDB and Redis of the machine, a fresh
//! database (or key prefix) per test so tests run in parallel, a Kafka broker of a test's own
//! (noida-db), a schema registry stand-in, and a daemon process handle.
//!
//! Endpoints come from `SIPHON_TEST_PG_URL`, `SIPHON_TEST_MYSQL_URL` and
//! `SIPHON_TEST_REDIS_URL`, with loopback defaults. A missing server fails the test with a
//! message naming `scripts/services`; it never skips. With the `containers` feature and
//! `SIPHON_TEST_CONTAINERS=1`, the servers are started with testcontainers instead (needs a
//! Docker engine).

#[cfg(feature = "containers")]
mod containers;
mod daemon;
mod disk;
mod kafka;
mod private;
mod process;
mod registry;
pub mod search;
mod services;

pub use daemon::{Daemon, free_port};
pub use disk::SmallDisk;
pub use kafka::KafkaBroker;
pub use private::{PrivateMariadb, PrivateNats, PrivatePostgres, PrivateRabbitmq, PrivateRedis};
pub use process::ServerProcess;
pub use registry::{RegistryStandIn, avro_connect_json};
pub use services::{
    MysqlDatabase, NatsNamespace, PgDatabase, RabbitEvent, RabbitExchange, RedisKeyspace, mysql,
    mysql_at, nats, nats_messages, postgres, rabbitmq, rabbitmq_at, rabbitmq_close_connections,
    redis, redis_conn,
};
