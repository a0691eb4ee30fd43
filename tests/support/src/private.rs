//! Servers of a test's own, on free ports, for tests that restart, stop or reconfigure their
//! server: the machine's shared servers are in use by every other test meanwhile. Each is
//! stopped (immediately) and its directory removed when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::free_port;

fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = command
        .output()
        .with_context(|| format!("{what}: starting {command:?}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// A PostgreSQL cluster of its own (initdb + pg_ctl), prepared for logical replication, on a
/// free port. As root (as `scripts/test` runs) its files belong to the `postgres` user.
#[derive(Debug)]
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    settings: Vec<String>,
}

impl PrivatePostgres {
    /// A new cluster with `settings` (`name=value`, as `postgres -c` takes them) besides
    /// those logical replication needs, started.
    pub fn start(settings: &[&str]) -> anyhow::Result<PrivatePostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context(
                "PostgreSQL's server binaries (package postgresql; scripts/services installs it)",
            )?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .max()
            .context("no initdb under /usr/lib/postgresql/*/bin")?;
        let dir = tempfile::tempdir()?;
        let pg = PrivatePostgres {
            dir,
            bin,
            port: free_port(),
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        };
        if is_root() {
            run(
                Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(pg.dir.path()),
                "chown",
            )?;
        }
        run(
            &mut pg.as_owner(
                &pg.bin.join("initdb"),
                &[
                    "-D",
                    &pg.data().display().to_string(),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                ],
            ),
            "initdb",
        )?;
        pg.start_server()?;
        Ok(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command run as the cluster's owner (`postgres` when the tests run as root).
    fn as_owner(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        command.args(args).stdin(Stdio::null());
        command
    }

    fn start_server(&self) -> anyhow::Result<()> {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_wal_senders=10 \
             -c max_replication_slots=10 -c fsync=off -c synchronous_commit=off",
            self.port,
            self.dir.path().display()
        );
        for s in &self.settings {
            options.push_str(&format!(" -c {s}"));
        }
        run(
            &mut self.as_owner(
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    &self.data().display().to_string(),
                    "-l",
                    &self.dir.path().join("server.log").display().to_string(),
                    "-w",
                    "-o",
                    &options,
                    "start",
                ],
            ),
            "pg_ctl start",
        )
    }

    /// A URL of database `db` on it.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A client of database `db`.
    pub async fn client(&self, db: &str) -> anyhow::Result<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::connect(&self.url(db), tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to the private PostgreSQL on {}", self.port))?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// Stops it (`fast`: sessions are ended; `immediate`: as a crash) and starts it again.
    pub fn restart(&self, mode: &str) -> anyhow::Result<()> {
        self.stop(mode)?;
        self.start_server()
    }

    fn stop(&self, mode: &str) -> anyhow::Result<()> {
        run(
            &mut self.as_owner(
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    &self.data().display().to_string(),
                    "-m",
                    mode,
                    "-w",
                    "stop",
                ],
            ),
            "pg_ctl stop",
        )
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.stop("immediate");
    }
}

/// A MariaDB server of its own (mariadb-install-db + mariadbd) with the binlog as siphon
/// needs it, on a free port; root without a password.
#[derive(Debug)]
pub struct PrivateMariadb {
    dir: tempfile::TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
    server: Option<Child>,
}

impl PrivateMariadb {
    /// A new server, started.
    pub fn start() -> anyhow::Result<PrivateMariadb> {
        let dir = tempfile::tempdir()?;
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdin(Stdio::null());
        if is_root() {
            install.arg("--user=root");
        }
        run(&mut install, "mariadb-install-db (package mariadb-server)")?;
        let mut db = PrivateMariadb {
            dir,
            port: free_port(),
            server: None,
        };
        db.start_server()?;
        Ok(db)
    }

    fn start_server(&mut self) -> anyhow::Result<()> {
        let ready = |log: &str| log.matches("ready for connections").count();
        let started_before = ready(&self.log());
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))?;
        let mut command = Command::new("mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--socket={}",
                self.dir.path().join("sock").display()
            ))
            .arg(format!("--log-bin={}", data.join("bin").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--server-id=1",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if is_root() {
            command.arg("--user=root");
        }
        let child = command
            .spawn()
            .context("mariadbd (package mariadb-server)")?;
        self.server = Some(child);
        // Ready once this server says so: a connection to the port alone could reach another
        // process that took the port meanwhile.
        let deadline = Instant::now() + Duration::from_secs(60);
        while ready(&self.log()) == started_before {
            if let Some(status) = self
                .server
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("mariadbd exited ({status}):\n{}", self.log());
            }
            ensure!(
                Instant::now() < deadline,
                "mariadbd did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The root URL (no database).
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// A connection as root, to database `db` (`None`: none).
    pub async fn conn(&self, db: Option<&str>) -> anyhow::Result<mysql_async::Conn> {
        let url = match db {
            Some(db) => format!("{}/{db}", self.url()),
            None => self.url(),
        };
        Ok(mysql_async::Conn::new(mysql_async::Opts::from_url(&url)?).await?)
    }

    /// Shuts it down cleanly and starts it again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        run(
            Command::new("mariadb-admin").args([
                "--no-defaults",
                "-uroot",
                "-h127.0.0.1",
                &format!("-P{}", self.port),
                "shutdown",
            ]),
            "mariadb-admin shutdown",
        )?;
        if let Some(mut child) = self.server.take() {
            child.wait()?;
        }
        self.start_server()
    }

    /// kill -9 of the server, as a crash (what it wrote to the operating system survives),
    /// and a start: InnoDB's crash recovery and the binlog's.
    pub fn crash(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.server.take() {
            child.kill()?;
            child.wait()?;
        }
        self.start_server()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Redis server of a test's own on a free port, its data appended to a file fsynced at
/// every write (`--appendonly yes --appendfsync always`), so that a restart, even after kill
/// -9, keeps every write Redis acknowledged. The machine's shared Redis keeps nothing on
/// disk, and a test must not restart it.
#[derive(Debug)]
pub struct PrivateRedis {
    server: crate::ServerProcess,
}

impl PrivateRedis {
    /// A new server, started and answering.
    pub fn start() -> anyhow::Result<PrivateRedis> {
        let server = crate::ServerProcess::start("redis-server", "redis-server", |data, port| {
            let mut args: Vec<std::ffi::OsString> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
                .map(Into::into)
                .to_vec();
            args.extend(["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir"].map(Into::into));
            args.push(data.into());
            args
        })
        .map_err(|e| anyhow::anyhow!("{e:#} (redis-server comes with the redis-server package, which scripts/services installs)"))?;
        Ok(PrivateRedis { server })
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.server.port)
    }

    /// kill -9 of the server and a start on the same port and data.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.server.restart()
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// A NATS server of its own with JetStream, its store in its directory (`nats-server -js
/// -sd`), on a free port.
#[derive(Debug)]
pub struct PrivateNats {
    server: crate::ServerProcess,
}

impl PrivateNats {
    /// A new server, started and listening.
    pub fn start() -> anyhow::Result<PrivateNats> {
        let server = crate::ServerProcess::start("nats-server", "nats-server", |data, port| {
            let mut args: Vec<std::ffi::OsString> =
                ["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"]
                    .map(Into::into)
                    .to_vec();
            args.push(data.into());
            args
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "{e:#} (nats-server comes with the nats-server package, which scripts/services installs)"
            )
        })?;
        Ok(PrivateNats { server })
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.server.port)
    }

    /// kill -9 of the server and a start on the same port and store.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.server.restart()
    }

    /// kill -9 of the server; [`PrivateNats::start_again`] brings it back.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.server.kill()
    }

    /// Starts it again on the same port and store after [`PrivateNats::kill`].
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.server.run()
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// A RabbitMQ node of its own (`rabbitmq-server` under its own node name, AMQP and
/// distribution ports, database and logs in its directory, no plugins), on a free port. It
/// keeps a durable queue's persistent messages through kill -9, as the shared broker does.
#[derive(Debug)]
pub struct PrivateRabbitmq {
    server: crate::ServerProcess,
}

impl PrivateRabbitmq {
    /// A new node, started and listening (Erlang takes some seconds to boot).
    pub fn start() -> anyhow::Result<PrivateRabbitmq> {
        let server = crate::ServerProcess::start_with_env(
            "rabbitmq-server",
            // The script itself: the wrapper in /usr/sbin would run it as the rabbitmq user.
            "/usr/lib/rabbitmq/bin/rabbitmq-server",
            |data, port| {
                let config = data.join("rabbitmq.conf");
                let plugins = data.join("enabled_plugins");
                // Errors surface as the server's own when it starts without them.
                let _ = std::fs::write(&config, format!("listeners.tcp.default = 127.0.0.1:{port}\n"));
                let _ = std::fs::write(&plugins, "[].\n");
                let path = |p: PathBuf| p.into_os_string();
                let env = [
                    // Not the machine's broker's settings (its node name, its port).
                    ("RABBITMQ_CONF_ENV_FILE", "/dev/null".into()),
                    ("RABBITMQ_NODENAME", format!("siphon-test-{port}@localhost").into()),
                    ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".into()),
                    ("RABBITMQ_NODE_PORT", port.to_string().into()),
                    ("RABBITMQ_DIST_PORT", free_port().to_string().into()),
                    ("RABBITMQ_CONFIG_FILE", path(config)),
                    ("RABBITMQ_ENABLED_PLUGINS_FILE", path(plugins)),
                    ("RABBITMQ_MNESIA_BASE", path(data.join("mnesia"))),
                    ("RABBITMQ_LOG_BASE", path(data.join("log"))),
                    ("RABBITMQ_PID_FILE", path(data.join("pid"))),
                ];
                (
                    Vec::new(),
                    env.into_iter().map(|(k, v)| (k.into(), v)).collect(),
                )
            },
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "{e:#} (rabbitmq-server comes with the rabbitmq-server package, which scripts/services installs)"
            )
        })?;
        Ok(PrivateRabbitmq { server })
    }

    /// Its URL, as user guest (allowed from loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.server.port)
    }

    /// kill -9 of the node and a start on the same port and database.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.server.restart()
    }

    /// What the node printed.
    pub fn log(&self) -> String {
        self.server.log()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found in a full run: the node's distribution port, free at its start, was another
    /// process's by its restart, and the node did not boot ("could not bind to distribution
    /// port"). The restart now chooses that port again.
    #[test]
    fn a_rabbitmq_node_restarts_when_its_distribution_port_was_taken() {
        let mut node = PrivateRabbitmq::start().unwrap();
        let dist: u16 = node
            .server
            .env("RABBITMQ_DIST_PORT")
            .and_then(|port| port.to_str()?.parse().ok())
            .expect("the node's distribution port");
        node.server.kill().unwrap();
        // What another test's connection did with it.
        let _taken = std::net::TcpListener::bind(("0.0.0.0", dist)).unwrap();
        node.restart().unwrap_or_else(|e| panic!("{e:#}"));
        assert_ne!(
            node.server
                .env("RABBITMQ_DIST_PORT")
                .and_then(|p| p.to_str()),
            Some(dist.to_string().as_str())
        );
        std::net::TcpStream::connect(("127.0.0.1", node.server.port)).expect("AMQP listens");
    }
}
