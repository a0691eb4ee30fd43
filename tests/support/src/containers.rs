//! The same servers from testcontainers, for machines with a Docker engine
//! (`--features containers` and `SIPHON_TEST_CONTAINERS=1`). Each server starts once per
//! test process and is shared by its tests, which still get a database of their own.

use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use testcontainers_modules::{mariadb::Mariadb, redis::Redis};
use tokio::sync::OnceCell;

pub(crate) fn enabled() -> bool {
    std::env::var("SIPHON_TEST_CONTAINERS").is_ok_and(|v| v == "1")
}

static POSTGRES: OnceCell<ContainerAsync<GenericImage>> = OnceCell::const_new();
static MARIADB: OnceCell<ContainerAsync<Mariadb>> = OnceCell::const_new();
static REDIS: OnceCell<ContainerAsync<Redis>> = OnceCell::const_new();

pub(crate) async fn postgres_url() -> anyhow::Result<String> {
    let c = POSTGRES
        .get_or_try_init(|| async {
            GenericImage::new("postgres", "16")
                .with_exposed_port(ContainerPort::Tcp(5432))
                .with_wait_for(WaitFor::message_on_stderr(
                    "database system is ready to accept connections",
                ))
                .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
                .with_cmd([
                    "postgres",
                    "-c",
                    "wal_level=logical",
                    "-c",
                    "max_replication_slots=20",
                    "-c",
                    "max_wal_senders=20",
                ])
                .start()
                .await
        })
        .await?;
    Ok(format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        c.get_host_port_ipv4(5432).await?
    ))
}

pub(crate) async fn mysql_url() -> anyhow::Result<String> {
    let c = MARIADB
        .get_or_try_init(|| async {
            Mariadb::default()
                .with_cmd([
                    "--log-bin=mysql-bin",
                    "--server-id=1",
                    "--binlog-format=ROW",
                    "--binlog-row-image=FULL",
                    "--binlog-row-metadata=FULL",
                ])
                .start()
                .await
        })
        .await?;
    Ok(format!(
        "mysql://root@127.0.0.1:{}",
        c.get_host_port_ipv4(3306).await?
    ))
}

pub(crate) async fn redis_url() -> anyhow::Result<String> {
    let c = REDIS
        .get_or_try_init(|| async { Redis::default().start().await })
        .await?;
    Ok(format!(
        "redis://127.0.0.1:{}",
        c.get_host_port_ipv4(6379).await?
    ))
}
