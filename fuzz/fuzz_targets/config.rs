//! The configuration loader (src/config): TOML text through `Config::from_toml`, every
//! component's settings checked by its kind. Invariant: no panic (a bad file is an error
//! that names the key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use siphon::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::from_toml(text) {
        for (name, pipeline) in &config.pipelines {
            let _ = config.log_context(name, pipeline);
            for sink in pipeline.sinks.values() {
                let _ = sink.delivery.routing();
            }
        }
    }
});
