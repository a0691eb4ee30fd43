//! The write path's own RESP connection: a batch's commands encoded straight into one buffer,
//! written while their replies are read, and the replies scanned (counted, the first error
//! kept) instead of parsed into values. The sink's other traffic (its cursor, stored rows,
//! SCAN) goes through the `redis` crate's connection.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Commands in RESP, encoded back to back.
#[derive(Debug, Default)]
pub(crate) struct Commands {
    out: Vec<u8>,
    count: usize,
}

impl Commands {
    /// Room for about `bytes` of commands.
    pub fn with_capacity(bytes: usize) -> Self {
        Commands {
            out: Vec::with_capacity(bytes),
            count: 0,
        }
    }

    /// Starts a command of `args` arguments (its name included); the caller then adds
    /// exactly that many with [`Commands::arg`].
    pub fn command(&mut self, args: usize) -> &mut Self {
        self.count += 1;
        self.line(b'*', args)
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<[u8]>) -> &mut Self {
        let arg = arg.as_ref();
        self.line(b'$', arg.len());
        self.out.extend_from_slice(arg);
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Forgets the commands, keeping the buffer.
    pub fn clear(&mut self) {
        self.out.clear();
        self.count = 0;
    }

    /// How many commands.
    pub fn len(&self) -> usize {
        self.count
    }

    /// The encoded commands.
    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    fn line(&mut self, kind: u8, n: usize) -> &mut Self {
        self.out.push(kind);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self
    }
}

/// Why a RESP exchange failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RespError {
    /// The connection failed or timed out: a new one may succeed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The server refused the connection's setup (AUTH, SELECT).
    #[error("{0}")]
    Refused(String),
    /// The server sent what is not RESP.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
}

/// One connection, used for one batch at a time.
#[derive(Debug)]
pub(crate) struct RespConnection {
    stream: TcpStream,
    /// Replies read and not scanned yet: `replies[at..]`.
    replies: Vec<u8>,
    at: usize,
    /// Commands written since the last [`RespConnection::replies`], and how many of their
    /// replies are scanned.
    written: usize,
    answered: usize,
    /// The first error among those replies, with its command's index.
    refused: Option<(usize, String)>,
}

impl RespConnection {
    /// Connects to the server `info` names, authenticates, selects its database and names
    /// the connection `name` (`CLIENT LIST` shows it).
    pub async fn connect(
        info: &ConnectionInfo,
        name: &str,
        timeout: Duration,
    ) -> Result<Self, RespError> {
        let (host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host.as_str(), *port),
            _ => {
                return Err(RespError::Refused(
                    "only redis:// (TCP) servers are supported by this build".into(),
                ));
            }
        };
        let stream = within(timeout, TcpStream::connect((host, port))).await?;
        stream.set_nodelay(true)?;
        let mut conn = RespConnection {
            stream,
            replies: Vec::with_capacity(64 << 10),
            at: 0,
            written: 0,
            answered: 0,
            refused: None,
        };
        let settings = info.redis_settings();
        let mut setup = Commands::default();
        if let Some(password) = settings.password() {
            match settings.username() {
                Some(user) => setup.command(3).arg("AUTH").arg(user).arg(password),
                None => setup.command(2).arg("AUTH").arg(password),
            };
        }
        if settings.db() != 0 {
            let db = settings.db().to_string();
            setup.command(2).arg("SELECT").arg(db);
        }
        // The name is a courtesy: a user without the right to set it (ACL), or a proxy that
        // does not know the command, still writes.
        let named = setup.len();
        setup.command(3).arg("CLIENT").arg("SETNAME").arg(name);
        match conn.send(&setup, timeout).await? {
            Some((at, refused)) if at < named => Err(RespError::Refused(refused)),
            _ => Ok(conn),
        }
    }

    /// Sends `commands` and reads their replies: [`RespConnection::write`], then
    /// [`RespConnection::replies`].
    pub async fn send(
        &mut self,
        commands: &Commands,
        timeout: Duration,
    ) -> Result<Option<(usize, String)>, RespError> {
        self.write(commands, timeout).await?;
        self.replies(timeout).await
    }

    /// Writes `commands`, waiting at most `timeout` for each step of progress, and takes
    /// the replies already there without waiting for more: Redis works on the commands while
    /// the caller encodes the next ones, and replies never pile up (a proxy or an output
    /// buffer limit could stop taking commands until they are read).
    pub async fn write(&mut self, commands: &Commands, timeout: Duration) -> Result<(), RespError> {
        let mut bytes = commands.bytes();
        while !bytes.is_empty() {
            match within(timeout, self.stream.write(bytes)).await? {
                0 => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                n => bytes = &bytes[n..],
            }
        }
        self.written += commands.len();
        loop {
            self.take_replies()?;
            self.make_room();
            match self.stream.try_read_buf(&mut self.replies) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads the replies of every command written since the last call, waiting at most
    /// `timeout` for each read; returns the first error reply, with the index of the command
    /// it answers among them. An `Err` leaves the connection unusable.
    pub async fn replies(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<(usize, String)>, RespError> {
        loop {
            self.take_replies()?;
            if self.answered == self.written {
                (self.written, self.answered) = (0, 0);
                return Ok(self.refused.take());
            }
            self.make_room();
            if within(timeout, self.stream.read_buf(&mut self.replies)).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
    }

    /// Scans the whole replies buffered, keeping the first error.
    fn take_replies(&mut self) -> Result<(), RespError> {
        while self.answered < self.written {
            let Some((len, error)) = scan(&self.replies[self.at..])? else {
                break;
            };
            if let Some(error) = error
                && self.refused.is_none()
            {
                self.refused = Some((self.answered, error));
            }
            self.at += len;
            self.answered += 1;
        }
        Ok(())
    }

    /// Moves the replies not scanned yet to the buffer's start, with room to read more.
    fn make_room(&mut self) {
        self.replies.drain(..self.at);
        self.at = 0;
        if self.replies.capacity() - self.replies.len() < 16 << 10 {
            self.replies.reserve(64 << 10);
        }
    }
}

/// `io`, failing with `TimedOut` if it takes longer than `timeout`: Redis made no progress.
async fn within<T>(
    timeout: Duration,
    io: impl Future<Output = std::io::Result<T>>,
) -> Result<T, RespError> {
    match tokio::time::timeout(timeout, io).await {
        Ok(done) => Ok(done?),
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}

/// The length of the reply `buf` starts with and its error text if it is an error; `None`
/// if `buf` does not hold all of it yet.
fn scan(buf: &[u8]) -> Result<Option<(usize, Option<String>)>, RespError> {
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    if line_end == 0 {
        return Err(RespError::Protocol("a reply without a type"));
    }
    let line = &buf[1..line_end];
    let after = line_end + 2;
    match buf[0] {
        b'+' | b':' => Ok(Some((after, None))),
        b'-' => Ok(Some((
            after,
            Some(String::from_utf8_lossy(line).into_owned()),
        ))),
        b'$' => match number(line)? {
            n if n < 0 => Ok(Some((after, None))),
            n => {
                let end = after + n as usize + 2;
                match buf.get(end - 2..end) {
                    None => Ok(None),
                    Some(b"\r\n") => Ok(Some((end, None))),
                    Some(_) => Err(RespError::Protocol("a bulk string longer than its length")),
                }
            }
        },
        b'*' => {
            let mut end = after;
            for _ in 0..number(line)?.max(0) {
                match scan(&buf[end..])? {
                    Some((len, _)) => end += len,
                    None => return Ok(None),
                }
            }
            Ok(Some((end, None)))
        }
        _ => Err(RespError::Protocol("a reply of an unknown type")),
    }
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RespError::Protocol("a length that is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_resp_arrays_of_bulk_strings() {
        let mut commands = Commands::default();
        commands.command(3).arg("SET").arg("k").arg("");
        commands.command(1).arg(b"PING");
        assert_eq!(commands.len(), 2);
        assert_eq!(
            commands.bytes(),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n"
        );
    }

    #[test]
    fn replies_are_scanned_whole_or_not_at_all() {
        let replies: &[u8] =
            b":1\r\n+OK\r\n-WRONGTYPE no\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n";
        let mut at = 0;
        let mut found = Vec::new();
        while let Some((len, error)) = scan(&replies[at..]).unwrap() {
            found.push(error);
            at += len;
        }
        assert_eq!(at, replies.len());
        assert_eq!(
            found,
            vec![
                None,
                None,
                Some("WRONGTYPE no".to_owned()),
                None,
                None,
                None
            ]
        );
        // Every cut short of a whole reply waits for more.
        for cut in [1, 3, 20, 28, 33, 40, replies.len() - 1] {
            let mut at = 0;
            while let Some((len, _)) = scan(&replies[at..cut]).unwrap() {
                at += len;
            }
            assert!(at <= cut && scan(&replies[at..cut]).unwrap().is_none());
        }
        assert!(scan(b"?what\r\n").is_err());
        assert!(scan(b"\r\n:1\r\n").is_err());
        assert!(scan(b"$1\r\nabc\r\n").is_err());
    }
}
