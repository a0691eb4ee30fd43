//! The server's and the client's errors as siphon's, with whether retrying helps.

use siphon_core::Error;

/// Maps a client error: network trouble and a server that went away are transient; a refusal
/// (access, a purged binlog, bad SQL) is permanent.
pub fn my_error(what: &str, e: &mysql_async::Error) -> Error {
    match e {
        mysql_async::Error::Server(s) => {
            let mut message = format!(
                "{what}: MySQL error {} ({}): {}",
                s.code, s.state, s.message
            );
            if s.code == 4052 {
                message.push_str(
                    " (another replica, or a siphon pipeline of the same name, registered with \
                     this server id: give each pipeline its own server_id)",
                );
            }
            match s.code {
                // Shutdown in progress, connection killed, query interrupted, too many connections,
                // lock wait timeout, deadlock.
                1040 | 1053 | 1152 | 1159 | 1161 | 1205 | 1213 | 1317 | 2006 | 2013 => {
                    Error::transient(message)
                }
                _ => Error::permanent(message),
            }
        }
        mysql_async::Error::Url(u) => Error::permanent(format!("{what}: url: {u}")),
        other => Error::transient(format!(
            "{what}: {}",
            siphon_core::error::with_causes(other)
        )),
    }
}
