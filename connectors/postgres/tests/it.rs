//! The PostgreSQL source against the test server: one test binary, each file a module.

mod differential;
mod golden;
mod stream;
mod tls;
mod types;
