//! The Node packages the tests drive guard with: the official MCP TypeScript SDK
//! (`@modelcontextprotocol/sdk` from npm), the client of the editors and agents built on Node,
//! which start an MCP server on Unix socket pairs where the Python SDK uses pipes. They live in
//! `target/node`, so `cargo clean` removes them and setup installs them again.

use std::{path::PathBuf, process::Command};

use crate::repo::root;

/// The TypeScript SDK's version, pinned: the tests assert on what it sends and reads.
pub const MCP_TS_SDK: &str = "1.32.2";

/// Where the packages live (`node_modules` beneath it).
pub fn dir() -> PathBuf {
    root().join("target/node")
}

/// True when the pinned SDK is installed there.
fn ready() -> bool {
    let manifest = dir().join("node_modules/@modelcontextprotocol/sdk/package.json");
    std::fs::read_to_string(manifest)
        .is_ok_and(|text| text.contains(&format!("\"version\": \"{MCP_TS_SDK}\"")))
}

/// Installs the SDK when it is missing or out of date; `Ok(None)` when it was in place,
/// `Ok(Some(what))` when it was installed, `Err(why)` when it could not be.
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
    let mut npm = Command::new("npm");
    npm.args([
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "--prefix",
    ])
    .arg(dir())
    .arg(format!("@modelcontextprotocol/sdk@{MCP_TS_SDK}"));
    let shown = format!("{npm:?}");
    match npm.status() {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("{shown} failed: {s}")),
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    if !ready() {
        return Err(format!(
            "{} was made but has no @modelcontextprotocol/sdk {MCP_TS_SDK}",
            dir().display()
        ));
    }
    Ok(Some(format!(
        "installed @modelcontextprotocol/sdk {MCP_TS_SDK} in {}",
        dir().display()
    )))
}
