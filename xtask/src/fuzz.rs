//! `cargo xtask fuzz`: runs each cargo-fuzz target of `fuzz/` for a while. cargo-fuzz is
//! installed on first use; the targets build with guard's pinned nightly (sanitizers), which
//! `cargo xtask setup` installs.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::toolchain::EBPF_TOOLCHAIN;

/// The targets of `fuzz/fuzz_targets/`, in the order they run.
pub const TARGETS: &[&str] = &["protocol_frame", "policy_parse", "decide"];

/// Seconds each target runs, by default and under `cargo xtask test` with `CI=true`.
pub const DEFAULT_SECONDS: u64 = 60;

#[derive(clap::Args)]
pub struct FuzzOptions {
    /// Seconds each target runs.
    #[arg(long, default_value_t = DEFAULT_SECONDS)]
    pub seconds: u64,
    /// Run only these targets (default: all).
    pub targets: Vec<String>,
}

/// `cargo +TOOLCHAIN`, the pinned nightly.
fn cargo_nightly() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{EBPF_TOOLCHAIN}"));
    cmd
}

/// True when cargo-fuzz answers under the pinned nightly.
fn have_cargo_fuzz() -> bool {
    cargo_nightly()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs cargo-fuzz unless it is there already (so a second run changes nothing).
pub fn ensure_cargo_fuzz() -> Result<()> {
    if have_cargo_fuzz() {
        return Ok(());
    }
    println!("fuzz: installing cargo-fuzz");
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() || !have_cargo_fuzz() {
        bail!("cargo install cargo-fuzz failed: {status}");
    }
    Ok(())
}

pub fn fuzz(root: &Path, opts: &FuzzOptions) -> Result<()> {
    ensure_cargo_fuzz()?;
    let targets: Vec<&str> = if opts.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in &opts.targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("unknown fuzz target {t:?}; known: {}", TARGETS.join(", "));
            }
        }
        opts.targets.iter().map(String::as_str).collect()
    };
    for target in targets {
        println!("fuzz: {target} for {} s", opts.seconds);
        // Run from fuzz/ (its own workspace); corpus and artifacts stay there (git-ignored).
        let status = cargo_nightly()
            .current_dir(root.join("fuzz"))
            // A cargo of the outer workspace may be in the environment; the fuzz crate needs
            // nightly's.
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTUP_TOOLCHAIN")
            .args(["fuzz", "run", target, "--"])
            .arg(format!("-max_total_time={}", opts.seconds))
            // Frames are at most 1 MiB; inputs far smaller find the bugs faster.
            .arg("-max_len=65536")
            .status()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        if !status.success() {
            bail!(
                "fuzz target {target} failed ({status}): the crashing input is in fuzz/artifacts/{target}/; \
                 reproduce with `cargo +{EBPF_TOOLCHAIN} fuzz run {target} <file>` and add it as a regression test"
            );
        }
    }
    Ok(())
}
