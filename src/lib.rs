//! siphon: a change-data-capture daemon. This library holds the daemon (CLI, configuration,
//! runtime, admin API); `main.rs` only calls [`cli::main`].

pub mod admin;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod kinds;
pub mod logging;
pub mod runtime;
