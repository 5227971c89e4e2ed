//! The Node packages the tests drive guard with: the official MCP TypeScript SDK
//! (`@modelcontextprotocol/sdk` from npm), the client of the editors and agents built on Node,
//! which start an MCP server on Unix socket pairs where the Python SDK uses pipes. Its version
//! and every dependency's are pinned by `tests/node/package-lock.json`; `npm ci` installs
//! exactly those in `target/node`, so `cargo clean` removes them and setup installs them again.

use std::{path::PathBuf, process::Command};

use crate::repo::root;

/// The files that pin the packages, in `tests/node`.
const PINS: [&str; 2] = ["package.json", "package-lock.json"];

/// Where the packages live (`node_modules` beneath it).
pub fn dir() -> PathBuf {
    root().join("target/node")
}

/// True when `target/node` was installed from the pins as they are now.
fn ready() -> bool {
    let pinned = |name: &str| {
        let want = std::fs::read(root().join("tests/node").join(name));
        let have = std::fs::read(dir().join(name));
        matches!((want, have), (Ok(w), Ok(h)) if w == h)
    };
    let sdk = dir().join("node_modules/@modelcontextprotocol/sdk/package.json");
    PINS.iter().all(|name| pinned(name)) && sdk.exists()
}

/// Installs the pinned packages when they are missing or out of date; `Ok(None)` when they were
/// in place, `Ok(Some(what))` when they were installed, `Err(why)` when they could not be.
pub fn ensure() -> Result<Option<String>, String> {
    if ready() {
        return Ok(None);
    }
    let node = Command::new("node")
        .args([
            "-e",
            "process.exit(+process.versions.node.split('.')[0] >= 18 ? 0 : 1)",
        ])
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Err("no node >= 18 with npm: install nodejs and npm".into());
    }
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for name in PINS {
        let from = root().join("tests/node").join(name);
        std::fs::copy(&from, dir.join(name)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    let mut npm = Command::new("npm");
    npm.args([
        "ci",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "--prefix",
    ])
    .arg(&dir);
    let shown = format!("{npm:?}");
    match npm.status() {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("{shown} failed: {s}")),
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    if !ready() {
        return Err(format!(
            "{} was installed but has no @modelcontextprotocol/sdk (does \
             tests/node/package.json name it?)",
            dir.display()
        ));
    }
    Ok(Some(format!(
        "installed the packages tests/node/package-lock.json pins (@modelcontextprotocol/sdk and \
         its dependencies) in {}",
        dir.display()
    )))
}
