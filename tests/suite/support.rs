//! Helpers shared by the suites: privilege checks, binaries of the workspace, RAII guards.
#![allow(dead_code)]

use std::path::PathBuf;

/// True when this test may use root and the kernel. Otherwise prints why it skips, or, under
/// `CI=true`, fails: CI runs as root on a machine that has everything, so a skip there hides a
/// regression.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let why = "needs root (cgroups, BPF, setuid)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}, and privileged tests may not skip under CI=true");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// Path of a binary built from this workspace (`cargo xtask test` builds them first).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/all-HASH -> target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo xtask test`",
        path.display()
    );
    path
}

/// A unique name for things a test creates (cgroups, sockets), so parallel tests never meet.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
