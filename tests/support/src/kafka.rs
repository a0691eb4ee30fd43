//! A Kafka broker of a test's own: noida-db (PyPI; one Rust binary speaking the Kafka
//! protocol, with transactions and `read_committed`) on a free port, its data in a temporary
//! directory. A test may kill the daemon it runs against it with kill -9, or restart the
//! broker itself: the topics stay on disk until the value is dropped.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::free_port;

/// A noida-db broker on 127.0.0.1; stopped (kill -9) and its data removed when dropped.
#[derive(Debug)]
pub struct KafkaBroker {
    bin: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
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
        let mut broker = KafkaBroker {
            bin: binary()?,
            dir: tempfile::tempdir()?,
            child: None,
            port: free_port(),
        };
        broker.run()?;
        Ok(broker)
    }

    /// `host:port`, as `brokers` takes it.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))?;
        let child = Command::new(&self.bin)
            .arg("start")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--host", "127.0.0.1", "--only", "kafka", "--kafka-port"])
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("noida-db exited ({status}): {}", self.log());
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "noida-db did not listen on {} within 60s: {}",
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// What the broker printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    /// kill -9 of the broker (its data stays).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts it again on the same port and data after [`KafkaBroker::kill`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        self.run()
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
