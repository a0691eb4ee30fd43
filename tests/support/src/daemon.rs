//! A siphon daemon as a child process, for end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A port on loopback that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running `siphon run`; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    /// The admin API's base URL.
    pub admin: String,
    log_path: PathBuf,
}

impl Daemon {
    /// Starts `binary run --config config`, logging to `log_path`, with the admin API on `admin_port`.
    pub fn start(
        binary: &Path,
        config: &Path,
        admin_port: u16,
        log_path: &Path,
    ) -> anyhow::Result<Self> {
        Self::start_with_env(binary, config, admin_port, log_path, &[])
    }

    /// [`Daemon::start`] with variables `env` set in the daemon's environment.
    pub fn start_with_env(
        binary: &Path,
        config: &Path,
        admin_port: u16,
        log_path: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)?;
        let child = Command::new(binary)
            .args(["run", "--config"])
            .arg(config)
            // SIPHON_TEST_LOG (a RUST_LOG filter) makes the daemons of a test say more.
            .env(
                "RUST_LOG",
                std::env::var("SIPHON_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(Daemon {
            child: Some(child),
            admin: format!("http://127.0.0.1:{admin_port}"),
            log_path: log_path.to_owned(),
        })
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Sends a signal with `kill(1)`.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .child
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("already stopped"))?
            .id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
        Ok(())
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("already stopped"))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the daemon did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9, and wait for it.
    pub fn kill_9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.kill_9();
    }
}
