//! The reference tools and servers a bench needs, checked before it measures anything: a
//! missing tool fails with the Debian package that provides it, a server that does not answer
//! with the script that starts it.

use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A command-line tool of the machine and the Debian package that provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

pub const PSQL: Tool = Tool {
    name: "psql",
    package: "postgresql-client",
};
pub const PG_RECVLOGICAL: Tool = Tool {
    name: "pg_recvlogical",
    package: "postgresql-client",
};
pub const PGBENCH: Tool = Tool {
    name: "pgbench",
    package: "postgresql (pgbench comes with the server: postgresql-15 on Debian 12)",
};
pub const MARIADB: Tool = Tool {
    name: "mariadb",
    package: "mariadb-client",
};
pub const MARIADB_BINLOG: Tool = Tool {
    name: "mariadb-binlog",
    package: "mariadb-client",
};
pub const REDIS_BENCHMARK: Tool = Tool {
    name: "redis-benchmark",
    package: "redis-tools",
};
pub const REDIS_CLI: Tool = Tool {
    name: "redis-cli",
    package: "redis-tools",
};

/// Fails, naming every missing tool and its package, unless each of `tools` runs
/// (`--version`; Debian's wrappers for PostgreSQL's tools exist without the tool itself).
pub fn require(tools: &[Tool]) -> anyhow::Result<()> {
    let mut missing: Vec<String> = Vec::new();
    for tool in tools {
        let runs = Command::new(tool.name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let line = format!("{} (Debian package {})", tool.name, tool.package);
        if !runs && !missing.contains(&line) {
            missing.push(line);
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "missing reference tools: {}; install them (apt-get install …) or run scripts/services",
        missing.join(", ")
    );
    Ok(())
}

/// Fails unless something listens at `host:port` (`what` names the server in the message).
pub fn reachable(what: &str, host: &str, port: u16) -> anyhow::Result<()> {
    let addrs: Vec<_> = (host, port).to_socket_addrs()?.collect();
    let up = addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_secs(3)).is_ok());
    anyhow::ensure!(
        up,
        "{what} at {host}:{port} does not answer; scripts/services starts it"
    );
    Ok(())
}

/// The host and port of a URL like `scheme://user@host:port/db` (`default_port` without one).
pub fn host_port(url: &str, default_port: u16) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host_port.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_owned(), p.parse().unwrap()),
        _ => (host_port.to_owned(), default_port),
    }
}

/// [`reachable`] for the server of `url`.
pub fn reachable_url(what: &str, url: &str, default_port: u16) -> anyhow::Result<()> {
    let (host, port) = host_port(url, default_port);
    reachable(what, &host, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_reads_urls() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/postgres", 1),
            ("127.0.0.1".into(), 5432)
        );
        assert_eq!(
            host_port("mysql://root@127.0.0.1:3306", 1),
            ("127.0.0.1".into(), 3306)
        );
        assert_eq!(
            host_port("redis://127.0.0.1", 6379),
            ("127.0.0.1".into(), 6379)
        );
        assert_eq!(
            host_port("amqp://guest:guest@localhost:5672/%2f", 1),
            ("localhost".into(), 5672)
        );
    }

    #[test]
    fn a_missing_tool_names_its_package() {
        let err = require(&[Tool {
            name: "siphon-no-such-tool",
            package: "siphon-no-such-package",
        }])
        .unwrap_err()
        .to_string();
        assert!(err.contains("siphon-no-such-tool (Debian package siphon-no-such-package)"));
    }
}
