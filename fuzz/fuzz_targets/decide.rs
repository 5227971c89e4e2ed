//! A fixed policy (guard's default) and arbitrary JSON as a call's tool and arguments: decide
//! always answers, and a call it allows names only paths within the declared workspace.
#![no_main]

use std::{path::Path, sync::OnceLock};

use guard::{call::intent::Intent, policy::Policy};
use libfuzzer_sys::fuzz_target;

const POLICY: &str = include_str!("../../policies/default.toml");

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::parse(Path::new("default.toml"), POLICY).expect("default policy"))
}

fuzz_target!(|data: &[u8]| {
    // First line: the tool's name; the rest: its arguments as JSON.
    let (tool, args) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(tool) = std::str::from_utf8(tool) else {
        return;
    };
    let Ok(serde_json::Value::Object(args)) = serde_json::from_slice(args) else {
        return;
    };
    let verdict = policy().decide(&Intent::new(tool, args));
    // The workspace tools' file effects never leave the workspace, whatever the arguments.
    if let Some(plan) = &verdict.plan
        && matches!(tool, "read_file" | "list_dir" | "write_file")
    {
        for p in plan.effects.read.iter().chain(&plan.effects.write) {
            assert!(
                p.starts_with("/srv/agent/workspace")
                    && !p.components().any(|c| c == std::path::Component::ParentDir),
                "{tool}: effect {} escapes the workspace",
                p.display()
            );
        }
    }
});
