//! Any text as a policy file: Policy::parse loads it or returns located errors, never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match guard::policy::Policy::parse(Path::new("fuzz.toml"), text) {
        Ok(policy) => {
            // A policy that loads can be asked about each of its tools.
            let names: Vec<String> = policy.tools().map(str::to_owned).collect();
            for name in names {
                let _ = policy.tool_info(&name);
                let intent = guard::call::intent::Intent::new(name, serde_json::Map::new());
                let _ = policy.decide(&intent);
            }
        }
        Err(errors) => assert!(!errors.is_empty(), "an Err without errors"),
    }
});
