//! The `siphon` binary: all of it lives in the library.

fn main() -> std::process::ExitCode {
    siphon::cli::main()
}
