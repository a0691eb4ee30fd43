//! siphon's end-to-end tests — the daemon against real services — as one test binary, each
//! file a module: a binary a file linked the whole daemon some thirty times over, which took
//! most of a CI run's build. `scripts/test` runs them with `cargo nextest`, each test in a
//! process of its own, so no test sees another's process state; `cargo test --test e2e
//! MODULE::` runs one file's.

mod common;

mod chaos;
mod cli;
mod console;
mod daemon;
mod debezium;
mod fixture;
mod incremental;
mod kafka;
mod kinds;
mod message_sinks;
mod mysql;
mod mysql_ddl;
mod mysql_restart;
mod mysql_stores;
mod mysql_values;
mod mysql_xa;
mod new_tables;
mod outbox;
mod postgres;
mod postgres_restart;
mod services;
mod sinks;
mod spatial;
mod transforms;
mod typed_lake;
mod typed_mirror;
mod views;
mod wait;
