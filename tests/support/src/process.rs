//! A server of a test's own: a child process listening on a free port of 127.0.0.1, its data
//! and log in a temporary directory; killed -9 when dropped, and restartable on the same
//! port and data. It runs in a process group of its own, and a kill reaches the whole group:
//! a server started by a script (rabbitmq-server runs Erlang as its child) dies whole.

use std::ffi::OsString;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::free_port;

/// What a server is started with, made of its data directory and port.
type Setup = dyn Fn(&Path, u16) -> (Vec<OsString>, Vec<(OsString, OsString)>) + Send + Sync;

/// A server's [`Setup`], kept to choose its other ports again at a restart.
struct SetupFn(Box<Setup>);

impl std::fmt::Debug for SetupFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetupFn")
    }
}

/// A server process on 127.0.0.1.
#[derive(Debug)]
pub struct ServerProcess {
    name: &'static str,
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    setup: std::sync::Arc<SetupFn>,
}

/// Whether a server's log says it could not bind a port someone else holds.
fn port_taken(log: &str) -> bool {
    [
        "already in use",
        "could not bind",
        "dist_port_already_used",
        "EADDRINUSE",
        "eaddrinuse",
    ]
    .iter()
    .any(|said| log.contains(said))
}

impl ServerProcess {
    /// Starts `program` with the arguments `args` makes of its data directory and port, and
    /// waits until it listens (`name` says which server in errors).
    pub fn start(
        name: &'static str,
        program: impl Into<OsString>,
        args: impl Fn(&Path, u16) -> Vec<OsString> + Send + Sync + 'static,
    ) -> anyhow::Result<ServerProcess> {
        Self::start_with_env(name, program, move |data, port| {
            (args(data, port), Vec::new())
        })
    }

    /// [`ServerProcess::start`] for a server that takes its settings from the environment
    /// too: `setup` makes its arguments and environment of its data directory and port.
    ///
    /// A free port is free only until someone else takes it: a server that exits at its
    /// start saying a port was in use (another test's connection took it meanwhile; a
    /// private RabbitMQ node's distribution port did, in a full run) is started again on new
    /// ports, a few times.
    pub fn start_with_env(
        name: &'static str,
        program: impl Into<OsString>,
        setup: impl Fn(&Path, u16) -> (Vec<OsString>, Vec<(OsString, OsString)>) + Send + Sync + 'static,
    ) -> anyhow::Result<ServerProcess> {
        let program = program.into();
        let setup = std::sync::Arc::new(SetupFn(Box::new(setup)));
        let mut tries = 0;
        loop {
            let dir = tempfile::tempdir()?;
            let port = free_port();
            let data = dir.path().join("data");
            std::fs::create_dir_all(&data)?;
            let (args, env) = (setup.0)(&data, port);
            let mut server = ServerProcess {
                name,
                program: program.clone(),
                args,
                env,
                dir,
                child: None,
                port,
                setup: setup.clone(),
            };
            match server.run() {
                Ok(()) => return Ok(server),
                Err(e) if tries < 3 && port_taken(&server.log()) => {
                    tries += 1;
                    eprintln!(
                        "{name}: a port was taken at its start; starting it on new ports ({e:#})"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts it on its port and data directory (again, after [`ServerProcess::kill`]).
    pub fn run(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))?;
        let child = Command::new(&self.program)
            // What a server leaves where it runs (Erlang's erl_crash.dump) stays in its
            // directory, not in the checkout.
            .current_dir(self.dir.path())
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.program.to_string_lossy()))?;
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("{} exited ({status}): {}", self.name, self.log());
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{} did not listen on {} within 60s: {}",
                    self.name,
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// kill -9 of the server's process group (its data stays), and a wait until its port
    /// is closed (the group's processes gone with it).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            signal_group(&child, "KILL");
            child.kill().ok();
            child.wait()?;
            let started = Instant::now();
            while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                if started.elapsed() > Duration::from_secs(30) {
                    bail!("{} still listens on {} after kill -9", self.name, self.port);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// SIGTERM, and a wait for the server to exit (a server that keeps its writes in memory
    /// until it stops, as noida-db does, keeps them so); then a start on the same port and
    /// data.
    pub fn restart_gracefully(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            signal_group(&child, "TERM");
            let started = Instant::now();
            while child.try_wait()?.is_none() {
                if started.elapsed() > Duration::from_secs(30) {
                    child.kill()?;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.run()
    }

    /// kill -9, and a start on the same port and data. Its other ports (a RabbitMQ node's
    /// distribution port) were free at its first start only: one another process took
    /// meanwhile is chosen again, a few times.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        let mut tries = 0;
        loop {
            let before = self.log().len();
            match self.run() {
                Ok(()) => return Ok(()),
                Err(e) if tries < 3 && port_taken(&self.log()[before..]) => {
                    tries += 1;
                    eprintln!(
                        "{}: a port was taken at its restart; starting it on new ports but its own ({e:#})",
                        self.name
                    );
                    self.kill()?;
                    (self.args, self.env) =
                        (self.setup.0)(&self.dir.path().join("data"), self.port);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The value of `name` in the environment it was started with.
    pub fn env(&self, name: &str) -> Option<&OsString> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// Sends `signal` to `child`'s process group (its id is the child's: `process_group(0)`).
fn signal_group(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
