//! The connection every Redis sink makes, and how it reads Redis' errors.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo, IntoConnectionInfo, RedisError};
use siphon_core::{ConnectionUrl, Error, Result, Secret};

/// The error codes of a server that cannot answer now but will: retrying helps.
pub(crate) const BUSY: [&str; 6] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
];

/// A connection to one Redis server, made on first use and again after a connection error.
#[derive(Debug)]
pub struct RedisClient {
    url: ConnectionUrl,
    password: Option<Secret>,
    timeout: Duration,
    conn: Option<MultiplexedConnection>,
}

impl RedisClient {
    /// A client of `url` (`password` overrides one in it), waiting `timeout` for each answer.
    pub fn new(url: &ConnectionUrl, password: Option<Secret>, timeout: Duration) -> Self {
        RedisClient {
            url: url.clone(),
            password,
            timeout,
            conn: None,
        }
    }

    /// Where and how to connect: the URL, with `password` if one was given.
    pub fn connection_info(&self) -> Result<ConnectionInfo> {
        let mut info = self
            .url
            .expose()
            .into_connection_info()
            .map_err(|e| Error::Config(format!("url: {e}")))?;
        if let Some(password) = &self.password {
            let settings = info
                .redis_settings()
                .clone()
                .set_password(password.expose());
            info = info.set_redis_settings(settings);
        }
        Ok(info)
    }

    /// The connection, made on first use and after a connection error.
    pub async fn conn(&mut self) -> Result<MultiplexedConnection> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let info = self.connection_info()?;
        let client = redis::Client::open(info).map_err(|e| self.error(&e, "connecting"))?;
        let conn = client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout)),
            )
            .await
            .map_err(|e| self.error(&e, "connecting"))?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Classifies a Redis error (a lost connection or a busy server is transient); a
    /// connection error drops the connection. The message shows the URL without its password.
    pub fn error(&mut self, e: &RedisError, what: &str) -> Error {
        let message = format!(
            "redis {} {what}: {}",
            &self.url,
            siphon_core::error::with_causes(e)
        );
        let connection = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_unrecoverable_error();
        // A MULTI whose commands a busy server refused as they were queued ends EXECABORT.
        let busy = e.code().is_some_and(|code| BUSY.contains(&code))
            || (e.code() == Some("EXECABORT")
                && BUSY.iter().any(|code| e.to_string().contains(code)));
        if connection {
            self.conn = None;
        }
        if connection || busy {
            Error::transient(message)
        } else {
            Error::permanent(message)
        }
    }

    /// The server's URL (its password hidden when shown).
    pub fn url(&self) -> &ConnectionUrl {
        &self.url
    }
}
