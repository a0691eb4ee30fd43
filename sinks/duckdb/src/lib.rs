//! siphon's DuckDB sink.
