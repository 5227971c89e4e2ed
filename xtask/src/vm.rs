//! `cargo xtask vm`: guard on other kernels. Each kernel of the matrix (Debian's, fetched from
//! its archive by [`debian`]; or the host's own when it has an image to boot) boots under
//! `qemu-system-x86_64` with an initramfs ([`initramfs`]) holding the workspace's binaries,
//! whose `/init` is this binary ([`guest`]): guardd's start-up self-test, its layers, four
//! confined calls and a few end-to-end tests run there, and one line per kernel says what held.
//!
//! TCG by default: KVM inside this kind of VM hangs a stock kernel at boot, and a hang is what a
//! check cannot tell from slowness. `--accel kvm` where it works.

mod debian;
pub mod guest;
mod initramfs;
mod qemu;
mod report;

use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::repo::{cargo, root, target_dir};

/// The end-to-end tests each kernel runs: a call's exec, connect and write refused by the layer
/// that should (the kernel programs, landlock and the mount view), truncation and links (the
/// landlock rights ABI 2 and 3 added: a launch that needs Truncate is refused without it),
/// seccomp, and each landlock ABI up to the kernel's enforcing its own rights (no guardd).
pub const DEFAULT_TESTS: &[&str] = &[
    "suite::escape::escape_the_approved_host_on_another_port_is_refused",
    "suite::escape::escape_a_program_the_call_may_read_but_not_run_is_killed_and_reported_untraced",
    "suite::escape::escape_a_write_outside_the_call_s_effects_is_refused_and_reported_untraced",
    "suite::escape::escape_a_file_a_call_may_only_read_is_not_truncated",
    "suite::escape::escape_symlinks_and_hardlinks_do_not_widen_file_access",
    "suite::escape::escape_io_uring_is_refused",
    "suite::landlock_abi::landlock_abi_1_to_3_enforce_their_own_rights_and_no_more",
    "suite::landlock_abi::landlock_below_abi_3_refuses_a_launch_that_opens_up_a_directory",
];

/// The kernels `cargo xtask test` boots under `CI=true`: Debian 12's 6.1 (landlock ABI 2) and
/// Debian 13's 6.12 (ABI 6), the hosts agents run on most, beside the host's own.
pub const CI_KERNELS: &[&str] = &["bookworm", "trixie"];

/// The kernels booted when none is named.
const DEFAULT_KERNELS: &[&str] = &["bookworm", "trixie", "host"];

#[derive(clap::Args)]
pub struct VmOptions {
    /// Kernels to boot: a Debian suite (bookworm, trixie, ...), `host`, or a path to a bzImage.
    pub kernels: Vec<String>,
    /// QEMU's accelerator: tcg, or kvm where KVM works.
    #[arg(long, default_value = "tcg")]
    pub accel: String,
    /// Seconds each kernel may take, boot to power-off.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Only guardd's self-test and the four calls: no end-to-end tests.
    #[arg(long)]
    pub quick: bool,
    /// End-to-end tests to run instead of the default list (exact names; repeatable).
    #[arg(long = "test")]
    pub tests: Vec<String>,
    /// Use the binaries already built (what `cargo xtask test` does after its build).
    #[arg(long)]
    pub prebuilt: bool,
    /// Print the whole console of each guest, not only guard's lines.
    #[arg(long, short)]
    pub verbose: bool,
}

impl VmOptions {
    /// CI's run: [`CI_KERNELS`], the default tests, the binaries `cargo xtask test` built, TCG
    /// and at most ten minutes a kernel (a row takes under two here).
    pub fn ci() -> Self {
        Self {
            kernels: CI_KERNELS.iter().map(|k| k.to_string()).collect(),
            accel: "tcg".into(),
            timeout: 600,
            quick: false,
            tests: Vec::new(),
            prebuilt: true,
            verbose: false,
        }
    }
}

/// Where kernels, indices, the staged binaries and the consoles' logs go.
fn cache() -> PathBuf {
    root().join("target").join("vm")
}

/// Boots each kernel of `opts` with the binaries built (`main` sets up and builds first,
/// unless `--prebuilt`) and prints the matrix.
pub fn vm(opts: &VmOptions) -> Result<()> {
    let suite = if opts.quick {
        None
    } else {
        Some(suite_binary()?)
    };
    let cpio = cache().join("initramfs.cpio");
    build_initramfs(&cpio, suite.as_deref(), &plan(opts))?;
    let kernels: Vec<&str> = if opts.kernels.is_empty() {
        DEFAULT_KERNELS.to_vec()
    } else {
        opts.kernels.iter().map(String::as_str).collect()
    };
    let mut rows = Vec::new();
    let mut failed = 0;
    for name in kernels {
        let row = boot(name, &cpio, opts);
        if !row.passed {
            failed += 1;
        }
        rows.push(row.line);
    }
    println!("\nkernel matrix ({} accel):", opts.accel);
    for line in &rows {
        println!("{line}");
    }
    if failed > 0 {
        bail!(
            "vm: {failed} kernel(s) failed; their consoles are in {}",
            cache().display()
        );
    }
    Ok(())
}

fn plan(opts: &VmOptions) -> Vec<String> {
    if opts.quick {
        Vec::new()
    } else if opts.tests.is_empty() {
        DEFAULT_TESTS.iter().map(|t| t.to_string()).collect()
    } else {
        opts.tests.clone()
    }
}

/// One row of the matrix.
struct Row {
    line: String,
    passed: bool,
}

/// Boots kernel `name` and makes its row.
fn boot(name: &str, cpio: &Path, opts: &VmOptions) -> Row {
    let started = Instant::now();
    let kernel = match image(name) {
        Ok(Some(k)) => k,
        Ok(None) => {
            let why = format!("{name:<9} not booted: {}", host_missing());
            return Row {
                line: why,
                passed: true,
            };
        }
        Err(e) => {
            return Row {
                line: format!("{name:<9} FAILED before boot: {e:#}"),
                passed: false,
            };
        }
    };
    println!("vm: {name}: booting {} ({})", kernel.1, kernel.0.display());
    let log = cache().join(format!("{}.console.log", name.replace('/', "_")));
    let booted = qemu::boot(&kernel.0, cpio, &log, opts);
    let secs = started.elapsed().as_secs();
    match booted {
        Ok(Some(report)) => {
            let (summary, passed) = report::summary(&report, opts.quick);
            Row {
                line: format!("{name:<9} {summary}; {secs} s"),
                passed,
            }
        }
        Ok(None) => Row {
            line: format!(
                "{name:<9} FAILED: no report after {secs} s (console: {})",
                log.display()
            ),
            passed: false,
        },
        Err(e) => Row {
            line: format!("{name:<9} FAILED: {e:#} after {secs} s"),
            passed: false,
        },
    }
}

/// The image to boot for `name` and what to call it; `None` for a host kernel with no image.
fn image(name: &str) -> Result<Option<(PathBuf, String)>> {
    if name == "host" {
        let release = host_release();
        return Ok(host_images(&release)
            .into_iter()
            .find(|p| p.exists())
            .map(|p| (p, format!("the host's {release}"))));
    }
    if name.contains('/') {
        return Ok(Some((PathBuf::from(name), name.to_owned())));
    }
    let k = debian::kernel(&cache(), name)?;
    Ok(Some((k.image, format!("{} {}", k.package, k.version))))
}

fn host_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn host_images(release: &str) -> Vec<PathBuf> {
    vec![
        PathBuf::from(format!("/boot/vmlinuz-{release}")),
        PathBuf::from(format!("/lib/modules/{release}/vmlinuz")),
        PathBuf::from(format!("/usr/lib/modules/{release}/vmlinuz")),
    ]
}

fn host_missing() -> String {
    let release = host_release();
    let looked: Vec<String> = host_images(&release)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    format!(
        "the host's kernel {release} has no image here (looked at {}); boot one with \
         `cargo xtask vm PATH`",
        looked.join(", ")
    )
}

/// The end-to-end suite's test binary, built (without running it).
fn suite_binary() -> Result<PathBuf> {
    let out = cargo()
        .args(["test", "-p", "guard-tests", "--test", "all", "--no-run"])
        .args(["--message-format", "json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the end-to-end suite failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"]["name"] == "all")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo named no executable for the suite `all`")
}

/// The host programs the calls and tests run, each with its libraries.
const HOST_PROGRAMS: &[&str] = &[
    "/bin/sh",
    "/usr/bin/true",
    "/usr/bin/false",
    "/usr/bin/touch",
    "/usr/bin/cat",
    "/usr/bin/ls",
    "/usr/bin/env",
    "/usr/bin/sleep",
    "/usr/bin/id",
    "/usr/bin/rm",
    "/usr/bin/mkdir",
    "/usr/bin/ln",
    "/usr/bin/mv",
    "/usr/bin/chmod",
];

/// The guest's users: root, the tools' user and nobody.
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
    guard-tool:x:999:999::/nonexistent:/usr/sbin/nologin\n\
    nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nguard-tool:x:999:\nnogroup:x:65534:\n";

fn build_initramfs(to: &Path, suite: Option<&Path>, plan: &[String]) -> Result<()> {
    let stage = cache().join("stage");
    fs::create_dir_all(&stage)?;
    let mut a = initramfs::Archive::default();
    a.merged_usr()?;
    // This very binary, which the build may have replaced since it started.
    let me = stage.join("xtask");
    fs::copy("/proc/self/exe", &me).context("copying /proc/self/exe")?;
    let init = initramfs::stripped(&me, &stage.join("init"))?;
    a.program(Path::new("/init"), &init)?;
    for bin in ["guardd", "guardctl", "guard-exec", "guard-testtool"] {
        let built = initramfs::stripped(&target_dir(false).join(bin), &stage)?;
        a.program(&Path::new(guest::BIN).join(bin), &built)?;
    }
    if let Some(suite) = suite {
        let built = initramfs::stripped(suite, &stage)?;
        a.program(Path::new(guest::SUITE), &built)?;
    }
    a.bytes(guest::PLAN, plan.join("\n"), 0o644);
    for p in HOST_PROGRAMS.iter().filter(|p| Path::new(p).exists()) {
        a.host(Path::new(p))?;
    }
    a.file(Path::new("/etc/ld.so.cache"), Path::new("/etc/ld.so.cache"))?;
    a.bytes("/etc/passwd", PASSWD, 0o644);
    a.bytes("/etc/group", GROUP, 0o644);
    a.bytes("/etc/hostname", "guard-vm\n", 0o644);
    a.char_dev("/dev/console", 5, 1);
    for dir in ["/proc", "/sys", "/tmp", "/run", "/root", "/srv", "/var/tmp"] {
        a.dir(dir);
    }
    a.write(to)
}
