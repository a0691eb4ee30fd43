//! The MySQL/MariaDB source against the test server: one test binary, each file a module.

mod harness;

mod full_disk;
mod gtid;
mod source;
mod tls;
