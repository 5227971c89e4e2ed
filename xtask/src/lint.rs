//! `cargo xtask lint`: what CI holds every change to besides the tests: rustfmt's layout,
//! clippy with every warning an error (the workspace's lints are in `Cargo.toml`, the function
//! length in `clippy.toml`), no product source file over [`MAX_LINES`] lines, and no circle of
//! imports between modules ([`crate::imports`]).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use crate::repo::{cargo, check, root};

/// The longest a product source file may be: past it, a file holds more than one idea.
const MAX_LINES: usize = 500;
/// The product's sources (tests, benchmarks and fuzz targets are not held to the length).
const PRODUCT: [&str; 5] = [
    "guard-common/src",
    "guard-ebpf/src",
    "guard-daemon/src",
    "guard-mcp/src",
    "xtask/src",
];

/// The crates' root files, each read for circles of imports.
const CRATE_ROOTS: [&str; 8] = [
    "guard-common/src/lib.rs",
    "guard-ebpf/src/main.rs",
    "guard-daemon/src/lib.rs",
    "guard-daemon/src/bin/guardd/main.rs",
    "guard-daemon/src/bin/guard-exec.rs",
    "guard-daemon/src/bin/guardctl/main.rs",
    "guard-mcp/src/main.rs",
    "xtask/src/main.rs",
];

/// Runs every check, and fails naming the first that failed.
pub fn lint() -> Result<()> {
    check(cargo().args(["fmt", "--all", "--", "--check"]))
        .context("rustfmt: run `cargo fmt --all`")?;
    // guard-ebpf builds for the BPF target only (through guard-daemon's build script), so
    // clippy sees the default members.
    check(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    let long = long_files(&root())?;
    if !long.is_empty() {
        bail!(
            "product files over {MAX_LINES} lines (split them by concept):\n{}",
            long.join("\n")
        );
    }
    let mut circles = Vec::new();
    for root_file in CRATE_ROOTS {
        for circle in crate::imports::circles(&root().join(root_file))? {
            circles.push(format!("{root_file}: {}", circle.join(" <-> ")));
        }
    }
    if !circles.is_empty() {
        bail!(
            "modules that import each other round (imports go one way, down the stages):\n{}",
            circles.join("\n")
        );
    }
    Ok(())
}

/// `path: N lines` for each product `.rs` file over the limit.
fn long_files(root: &Path) -> Result<Vec<String>> {
    let mut long = Vec::new();
    let mut dirs: Vec<PathBuf> = PRODUCT.iter().map(|d| root.join(d)).collect();
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !is_tests(&path) {
                let lines = fs::read_to_string(&path)?.lines().count();
                if lines > MAX_LINES {
                    long.push(format!("{}: {lines} lines", path.display()));
                }
            }
        }
    }
    long.sort();
    Ok(long)
}

/// A module of unit tests only (`tests.rs`), which the limit does not cover.
fn is_tests(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
}
