//! Lets siphon's binaries find DuckDB's prebuilt library by themselves: built with the
//! `duckdb` feature against `DUCKDB_LIB_DIR` (not `duckdb-bundled`), they carry an rpath to
//! the binary's own directory (`$ORIGIN`: the tarball of `scripts/dist` puts the library
//! beside it) and to `DUCKDB_LIB_DIR`, so that no `LD_LIBRARY_PATH` is needed to run them.

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    let prebuilt = std::env::var_os("CARGO_FEATURE_DUCKDB").is_some()
        && std::env::var_os("CARGO_FEATURE_DUCKDB_BUNDLED").is_none();
    if let (true, Some(dir)) = (prebuilt, std::env::var_os("DUCKDB_LIB_DIR")) {
        println!(
            "cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN:{}",
            dir.to_string_lossy()
        );
    }
}
