//! The `siphon` binary: all of it lives in the library.

/// siphon allocates many small values per event; mimalloc handles that much faster than the
/// system allocator (measured: BENCHMARKS.md, PostgreSQL snapshot).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    siphon::cli::main()
}
