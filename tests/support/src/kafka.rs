//! A Kafka broker of a test's own: noida-db (PyPI; one Rust binary speaking the Kafka
//! protocol, with transactions and `read_committed`) on a free port, its data in a temporary
//! directory. A test may kill the daemon it runs against it with kill -9, or restart the
//! broker itself: the topics stay on disk until the value is dropped.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::process::ServerProcess;

/// A noida-db broker on 127.0.0.1; stopped (kill -9) and its data removed when dropped.
#[derive(Debug)]
pub struct KafkaBroker {
    server: ServerProcess,
    /// Its port.
    pub port: u16,
}

/// Where pip put noida-db's binary (the binary itself: killing the wrapper script pip installs
/// would leave the broker running).
fn binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("SIPHON_TEST_NOIDA_DB") {
        return Ok(path.into());
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import noida_db, os; print(os.path.join(os.path.dirname(noida_db.__file__), 'noida-db'))",
        ])
        .output()
        .context("python3, to find noida-db")?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !path.is_file() {
        bail!(
            "the test Kafka broker noida-db is not installed: run scripts/services (it runs `pip install noida-db==0.2.3`), or set SIPHON_TEST_NOIDA_DB to its binary"
        );
    }
    Ok(path)
}

impl KafkaBroker {
    /// A new broker, started and answering.
    pub fn start() -> anyhow::Result<KafkaBroker> {
        let server = ServerProcess::start("noida-db", binary()?, |data, port| {
            let mut args: Vec<std::ffi::OsString> = vec!["start".into(), "--data-dir".into()];
            args.push(data.into());
            args.extend(["--host", "127.0.0.1", "--only", "kafka", "--kafka-port"].map(Into::into));
            args.push(port.to_string().into());
            args
        })?;
        Ok(KafkaBroker {
            port: server.port,
            server,
        })
    }

    /// `host:port`, as `brokers` takes it.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What the broker printed.
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// kill -9 of the broker (its data stays).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.server.kill()
    }

    /// Stops it (SIGTERM) and starts it again on the same port and data: noida-db keeps
    /// what it committed through this, not through a kill -9.
    pub fn restart_gracefully(&mut self) -> anyhow::Result<()> {
        self.server.restart_gracefully()
    }

    /// Starts it again on the same port and data after [`KafkaBroker::kill`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.server.restart()
    }
}
