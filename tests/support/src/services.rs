//! Fresh databases on the machine's servers.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, anyhow};

const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306";
const REDIS_DEFAULT: &str = "redis://127.0.0.1:6379";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name no other test (in this or another process) uses.
fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}_{}_{n}_{nanos}", std::process::id())
}

fn endpoint(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn unreachable(what: &str, var: &str, url: &str, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "{what} is not reachable at {url} ({e}). Start and prepare it with `scripts/services` \
         (as root), or point {var} at a running server."
    )
}

/// Runs `cleanup` to its end on a thread and runtime of its own: a `Drop` cannot await, and
/// may run inside a runtime that cannot block. Best effort: a failure leaves what it would
/// have removed.
fn clean_up<F: Future<Output = Option<()>> + Send + 'static>(cleanup: F) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(cleanup)
    })
    .join();
}

/// Replaces the database (path) of a URL.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A fresh PostgreSQL database, dropped when the value is dropped.
#[derive(Debug)]
pub struct PgDatabase {
    /// Its name.
    pub name: String,
    /// A URL connecting to it.
    pub url: String,
    admin_url: String,
}

/// Creates a fresh PostgreSQL database on the test server.
pub async fn postgres() -> anyhow::Result<PgDatabase> {
    #[cfg(feature = "containers")]
    if crate::containers::enabled() {
        return postgres_at(&crate::containers::postgres_url().await?).await;
    }
    postgres_at(&endpoint("SIPHON_TEST_PG_URL", PG_DEFAULT)).await
}

async fn postgres_at(admin_url: &str) -> anyhow::Result<PgDatabase> {
    let (client, conn) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| unreachable("PostgreSQL", "SIPHON_TEST_PG_URL", admin_url, e))?;
    tokio::spawn(conn);
    // A server that runs but was never prepared would otherwise show up as a source that
    // waits for a snapshot until the test times out.
    let wal_level: String = client
        .query_one("show wal_level", &[])
        .await
        .context("reading wal_level")?
        .get(0);
    anyhow::ensure!(
        wal_level == "logical",
        "PostgreSQL at {admin_url} has wal_level = {wal_level}; the tests need logical. Prepare it \
         with `scripts/services` (as root)."
    );
    let name = unique_name("siphon_test");
    client
        .batch_execute(&format!("create database {name}"))
        .await
        .context("creating the test database")?;
    Ok(PgDatabase {
        url: with_database(admin_url, &name),
        name,
        admin_url: admin_url.to_owned(),
    })
}

impl PgDatabase {
    /// Runs SQL statements (a schema, a workload) on a client of its own.
    pub async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        Ok(self.client().await?.batch_execute(sql).await?)
    }

    /// A new client on this database.
    pub async fn client(&self) -> anyhow::Result<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// Drops a replication slot, waiting (up to 10 s) for the walsender of a session that
    /// just ended to let go of it.
    pub async fn drop_slot(&self, slot: &str) -> anyhow::Result<()> {
        let client = self.client().await?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match client
                .execute("select pg_drop_replication_slot($1)", &[&slot])
                .await
            {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("dropping the slot {slot}")),
            }
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        // Replication slots of the database go first, or the database cannot be
        // dropped.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        clean_up(async move {
            let (client, conn) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
                .await
                .ok()?;
            tokio::spawn(conn);
            let _ = client
                    .batch_execute(&format!(
                        "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{name}' and pid <> pg_backend_pid();
                         select pg_drop_replication_slot(slot_name) from pg_replication_slots where database = '{name}';
                         drop database if exists {name}"
                    ))
                    .await;
            Some(())
        });
    }
}

/// A fresh MariaDB/MySQL database, dropped when the value is dropped.
#[derive(Debug)]
pub struct MysqlDatabase {
    /// Its name.
    pub name: String,
    /// A URL connecting to it.
    pub url: String,
    /// A replica server id of its own, for a pipeline reading it: tests of one binary run at
    /// once with pipelines of the same name, whose default server ids are the same, and the
    /// server drops a replica when another registers with its id (error 4052).
    pub server_id: u32,
    admin_url: String,
}

/// Creates a fresh database on the test MariaDB/MySQL server.
pub async fn mysql() -> anyhow::Result<MysqlDatabase> {
    #[cfg(feature = "containers")]
    if crate::containers::enabled() {
        return mysql_at(&crate::containers::mysql_url().await?).await;
    }
    mysql_at(&endpoint("SIPHON_TEST_MYSQL_URL", MYSQL_DEFAULT)).await
}

/// A fresh database on the MariaDB/MySQL server at `admin_url` (a private one, say).
pub async fn mysql_at(admin_url: &str) -> anyhow::Result<MysqlDatabase> {
    use mysql_async::prelude::Queryable;
    let opts = mysql_async::Opts::from_url(admin_url).context("SIPHON_TEST_MYSQL_URL")?;
    let mut conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| unreachable("MariaDB", "SIPHON_TEST_MYSQL_URL", admin_url, e))?;
    let name = unique_name("siphon_test");
    conn.query_drop(format!("create database {name}"))
        .await
        .context("creating the test database")?;
    conn.disconnect().await?;
    // Apart from the defaults (5400000-5499999): a range per process, an id per database.
    let server_id = 6_000_000
        + (std::process::id() % 10_000) * 100
        + COUNTER.fetch_add(1, Ordering::Relaxed) % 100;
    Ok(MysqlDatabase {
        url: with_database(admin_url, &name),
        name,
        admin_url: admin_url.to_owned(),
        server_id,
    })
}

impl MysqlDatabase {
    /// A new connection to this database.
    pub async fn conn(&self) -> anyhow::Result<mysql_async::Conn> {
        Ok(mysql_async::Conn::new(mysql_async::Opts::from_url(&self.url)?).await?)
    }
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        clean_up(async move {
            use mysql_async::prelude::Queryable;
            let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&admin_url).ok()?)
                .await
                .ok()?;
            let _ = conn
                .query_drop(format!("drop database if exists {name}"))
                .await;
            let _ = conn.disconnect().await;
            Some(())
        });
    }
}

/// A key prefix of its own on the test Redis; its keys are deleted when the value is dropped.
#[derive(Debug)]
pub struct RedisKeyspace {
    /// The server's URL.
    pub url: String,
    /// The prefix every key of this test starts with.
    pub prefix: String,
}

/// A fresh key prefix on the test Redis server.
pub async fn redis() -> anyhow::Result<RedisKeyspace> {
    #[cfg(feature = "containers")]
    let url = if crate::containers::enabled() {
        crate::containers::redis_url().await?
    } else {
        endpoint("SIPHON_TEST_REDIS_URL", REDIS_DEFAULT)
    };
    #[cfg(not(feature = "containers"))]
    let url = endpoint("SIPHON_TEST_REDIS_URL", REDIS_DEFAULT);
    let ks = RedisKeyspace {
        prefix: format!("{}:", unique_name("siphon_test")),
        url,
    };
    let mut conn = ks.conn().await?;
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(|e| unreachable("Redis", "SIPHON_TEST_REDIS_URL", &ks.url, e))?;
    anyhow::ensure!(pong == "PONG", "Redis answered {pong:?} to PING");
    Ok(ks)
}

impl RedisKeyspace {
    /// A new connection to the server.
    /// A connection that may take a while to make and to answer: redis' defaults (1 s and
    /// 500 ms) fail a test's reads on a busy machine.
    pub async fn conn(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        redis_conn(&self.url)
            .await
            .map_err(|e| unreachable("Redis", "SIPHON_TEST_REDIS_URL", &self.url, e))
    }
}

/// A connection to the Redis server at `url` that may take a while to make and to answer:
/// redis' defaults (1 s and 500 ms) fail a test's reads on a busy machine.
pub async fn redis_conn(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(60)))
        .set_response_timeout(Some(std::time::Duration::from_secs(60)));
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

impl Drop for RedisKeyspace {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        let _ = std::thread::spawn(move || {
            let client = redis::Client::open(url.as_str()).ok()?;
            let mut conn = client.get_connection().ok()?;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query(&mut conn)
                .ok()?;
            if !keys.is_empty() {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
            }
            Some(())
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("mysql://root@h:3306", "x"),
            "mysql://root@h:3306/x"
        );
        assert_eq!(
            with_database("postgres://h/db?sslmode=disable", "x"),
            "postgres://h/x?sslmode=disable"
        );
    }
}

const NATS_DEFAULT: &str = "nats://127.0.0.1:4222";

/// A subject prefix (and stream name) of its own on the test NATS server, with JetStream; the
/// stream of that name is deleted when the value is dropped.
#[derive(Debug)]
pub struct NatsNamespace {
    /// The server's URL.
    pub url: String,
    /// The first token of every subject of this test, and its stream's name.
    pub prefix: String,
}

/// A fresh subject prefix on the test NATS server (`nats-server -js`).
pub async fn nats() -> anyhow::Result<NatsNamespace> {
    let ns = NatsNamespace {
        url: endpoint("SIPHON_TEST_NATS_URL", NATS_DEFAULT),
        prefix: unique_name("siphon_test"),
    };
    let client = ns.client().await?;
    // The account's JetStream information: a server without -js has no responder for it.
    let answer = client.request("$JS.API.INFO", "".into()).await;
    if let Err(e) = answer {
        anyhow::bail!(
            "NATS at {} has no JetStream ({e}): start nats-server with -js (`scripts/services` does)",
            ns.url
        );
    }
    Ok(ns)
}

impl NatsNamespace {
    /// A new client of the server.
    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        async_nats::ConnectOptions::new()
            .connection_timeout(std::time::Duration::from_secs(60))
            .request_timeout(Some(std::time::Duration::from_secs(60)))
            .connect(&self.url)
            .await
            .map_err(|e| unreachable("NATS", "SIPHON_TEST_NATS_URL", &self.url, e))
    }
}

impl Drop for NatsNamespace {
    fn drop(&mut self) {
        let (url, stream) = (self.url.clone(), self.prefix.clone());
        clean_up(async move {
            let client = async_nats::connect(&url).await.ok()?;
            let _ = async_nats::jetstream::new(client)
                .delete_stream(&stream)
                .await;
            Some(())
        });
    }
}

/// Every message of `stream` on `subject` (all of them for `None`), in the stream's order:
/// its headers and payload (read by an ephemeral pull consumer).
pub async fn nats_messages(
    client: &async_nats::Client,
    stream: &str,
    subject: Option<&str>,
) -> anyhow::Result<Vec<async_nats::jetstream::Message>> {
    use async_nats::jetstream::consumer::{AckPolicy, pull};
    let jetstream = async_nats::jetstream::new(client.clone());
    let stream = match jetstream.get_stream(stream).await {
        Ok(stream) => stream,
        Err(_) => return Ok(Vec::new()),
    };
    let mut consumer = stream
        .create_consumer(pull::Config {
            filter_subject: subject.unwrap_or_default().to_owned(),
            ack_policy: AckPolicy::None,
            inactive_threshold: std::time::Duration::from_secs(60),
            ..Default::default()
        })
        .await?;
    let mut pending = consumer.info().await?.num_pending as usize;
    let mut out = Vec::with_capacity(pending);
    while pending > 0 {
        let mut batch = consumer
            .fetch()
            .max_messages(pending.min(1000))
            .expires(std::time::Duration::from_secs(30))
            .messages()
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let before = out.len();
        while let Some(message) = futures_util::StreamExt::next(&mut batch).await {
            out.push(message.map_err(|e| anyhow!("{e}"))?);
        }
        anyhow::ensure!(
            out.len() > before,
            "NATS gave no message with {pending} pending"
        );
        pending -= out.len() - before;
    }
    Ok(out)
}

const RABBITMQ_DEFAULT: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// An exchange of its own on the test RabbitMQ (topic, durable), and a queue bound to it
/// with `#` that takes every message; both are deleted when the value is dropped.
#[derive(Debug)]
pub struct RabbitExchange {
    /// The server's URL.
    pub url: String,
    /// The exchange's name, a name no other test uses (also the queue's).
    pub exchange: String,
}

/// A fresh exchange and queue on the test RabbitMQ server.
pub async fn rabbitmq() -> anyhow::Result<RabbitExchange> {
    rabbitmq_at(&endpoint("SIPHON_TEST_RABBITMQ_URL", RABBITMQ_DEFAULT)).await
}

/// A fresh exchange and queue on the RabbitMQ server at `url` (one of a test's own).
pub async fn rabbitmq_at(url: &str) -> anyhow::Result<RabbitExchange> {
    let ex = RabbitExchange {
        url: url.to_owned(),
        exchange: unique_name("siphon_test"),
    };
    ex.declare().await?;
    Ok(ex)
}

impl RabbitExchange {
    /// Declares the durable topic exchange, the durable queue of the same name and its
    /// binding to every routing key. Declaring what exists changes nothing, so a consumer
    /// declares again after it connects again, as this does after a node restarts.
    pub async fn declare(&self) -> anyhow::Result<()> {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let channel = self.channel().await?;
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                lapin::ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_declare(
                self.exchange.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_bind(
                self.exchange.as_str().into(),
                self.exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(())
    }

    /// A channel on a new connection to the server.
    pub async fn channel(&self) -> anyhow::Result<lapin::Channel> {
        let connection =
            lapin::Connection::connect(&self.url, lapin::ConnectionProperties::default())
                .await
                .map_err(|e| unreachable("RabbitMQ", "SIPHON_TEST_RABBITMQ_URL", &self.url, e))?;
        Ok(connection.create_channel().await?)
    }

    /// Takes every message the queue holds, in order.
    pub async fn drain(&self) -> anyhow::Result<Vec<lapin::message::Delivery>> {
        self.drain_with(Ok).await
    }

    /// What `f` makes of every message the queue holds, in order, each taken as it comes (a
    /// long run's queue is not held whole).
    pub async fn drain_with<T>(
        &self,
        mut f: impl FnMut(lapin::message::Delivery) -> anyhow::Result<T>,
    ) -> anyhow::Result<Vec<T>> {
        use futures_util::StreamExt;
        use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let channel = self.channel().await?;
        let queue = self.exchange.as_str();
        let held = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?
            .message_count() as usize;
        // A consumer with many deliveries in flight: one basic.get a message took minutes for
        // a chaos run's hundreds of thousands.
        channel.basic_qos(1000, BasicQosOptions::default()).await?;
        let mut consumer = channel
            .basic_consume(
                queue.into(),
                "siphon-test-drain".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        let mut out = Vec::with_capacity(held);
        while out.len() < held {
            let delivery =
                tokio::time::timeout(std::time::Duration::from_secs(60), consumer.next())
                    .await
                    .map_err(|_| anyhow!("the queue gave {} of {held} messages", out.len()))?
                    .ok_or_else(|| anyhow!("the consumer ended after {} of {held}", out.len()))??;
            out.push(f(delivery)?);
        }
        Ok(out)
    }
}

/// A message siphon published, as a consumer reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitEvent {
    /// Its `message_id`: the event's id.
    pub id: String,
    /// Its routing key: the event's destination.
    pub routing_key: String,
    /// Its body, as JSON.
    pub value: serde_json::Value,
}

impl RabbitExchange {
    /// Takes every message the queue holds, in order, as siphon's events.
    pub async fn drain_events(&self) -> anyhow::Result<Vec<RabbitEvent>> {
        self.drain_events_with(|event| event).await
    }

    /// What `f` makes of every message the queue holds, in order, as siphon's events.
    pub async fn drain_events_with<T>(
        &self,
        mut f: impl FnMut(RabbitEvent) -> T,
    ) -> anyhow::Result<Vec<T>> {
        self.drain_with(|message| {
            Ok(f(RabbitEvent {
                id: message
                    .properties
                    .message_id()
                    .as_ref()
                    .context("a message without message_id")?
                    .to_string(),
                routing_key: message.routing_key.to_string(),
                value: serde_json::from_slice(&message.data)?,
            }))
        })
        .await
    }
}

impl Drop for RabbitExchange {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.exchange.clone());
        clean_up(async move {
            let connection =
                lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
                    .await
                    .ok()?;
            let channel = connection.create_channel().await.ok()?;
            let _ = channel
                .queue_delete(name.as_str().into(), Default::default())
                .await;
            let _ = channel
                .exchange_delete(name.as_str().into(), Default::default())
                .await;
            Some(())
        });
    }
}

/// Closes, on the broker's side, every connection to the test RabbitMQ whose name contains
/// `name` (`rabbitmqctl close_connection`): what a network failure or a broker restart does
/// to a client. Returns how many it closed.
pub fn rabbitmq_close_connections(name: &str) -> anyhow::Result<usize> {
    let listed = std::process::Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "client_properties", "-q"])
        .output()
        .context("rabbitmqctl (package rabbitmq-server; scripts/services installs it)")?;
    anyhow::ensure!(
        listed.status.success(),
        "rabbitmqctl list_connections: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let mut closed = 0;
    for line in String::from_utf8_lossy(&listed.stdout).lines() {
        if !line.contains(name) {
            continue;
        }
        let Some(pid) = line.split_whitespace().next() else {
            continue;
        };
        let out = std::process::Command::new("rabbitmqctl")
            .args(["close_connection", pid, "closed by a test"])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "rabbitmqctl close_connection: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        closed += 1;
    }
    Ok(closed)
}
