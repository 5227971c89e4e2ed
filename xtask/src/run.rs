//! Build, run, test, bench and install: thin wrappers that put cargo and the binaries together.

use std::{
    env, fs,
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::{
    repo::{cargo, check, root, target_dir},
    setup,
};

#[derive(clap::Args)]
pub struct BuildOptions {
    /// Build with optimisations.
    #[arg(long)]
    pub release: bool,
}

#[derive(clap::Args)]
pub struct RunOptions {
    /// Where the socket and the audit log go.
    #[arg(long, default_value = "/run/guard-dev")]
    pub runtime_dir: PathBuf,
    /// The policy to load.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Run the debug binaries already built, without setup or a build (what the tests do:
    /// cargo holds the build directory while they run).
    #[arg(long, hide = true)]
    pub prebuilt: bool,
    /// More guardd flags, after `--` (e.g. `-- --trace-syscalls`).
    #[arg(last = true)]
    pub guardd_args: Vec<String>,
}

#[derive(clap::Args)]
pub struct TestOptions {
    /// Passed to `cargo test` after `--` (e.g. a test name filter).
    #[arg(trailing_var_arg = true)]
    pub args: Vec<String>,
}

#[derive(clap::Args)]
pub struct BenchOptions {
    /// A smaller run (about a minute), without the divan benches.
    #[arg(long)]
    pub quick: bool,
    /// One phase of guard-bench: decide, check, launch, export, flight, session or agentday.
    #[arg(long)]
    pub only: Option<String>,
}

pub fn build(opts: &BuildOptions) -> Result<()> {
    let mut cmd = cargo();
    // Default members: everything but guard-ebpf, which guard-daemon's build.rs builds.
    cmd.args(["build", "--bins"]);
    if opts.release {
        cmd.arg("--release");
    }
    check(&mut cmd)?;
    shim(opts.release)
}

/// guard-exec again, linked statically against musl, in place of the one just built: it starts
/// on every call. Measured here (`perf stat -r 300 guard-exec --version`, elapsed): about 1.0 ms
/// linked dynamically, 0.7 ms statically against glibc, 0.5 ms against musl. glibc's start-up
/// probes the CPU's features and caches with CPUID (a fifth of its samples in `perf record`),
/// and each CPUID is a VM exit.
fn shim(release: bool) -> Result<()> {
    let target = setup::shim_target();
    let mut cmd = cargo();
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "guard-daemon",
        "--bin",
        "guard-exec",
    ])
    .args(["--target", &target])
    // guard-exec loads no kernel program: its build of the library embeds none.
    .env("AYA_BUILD_SKIP", "1");
    if release {
        cmd.arg("--release");
    }
    check(&mut cmd)?;
    let profile = if release { "release" } else { "debug" };
    let built = root()
        .join("target")
        .join(&target)
        .join(profile)
        .join("guard-exec");
    // A new file, not a write through cargo's copy: that one is a hard link into target/*/deps.
    let shim = target_dir(release).join("guard-exec");
    let staged = shim.with_extension("musl");
    fs::copy(&built, &staged)
        .with_context(|| format!("copying {} to {}", built.display(), staged.display()))?;
    fs::rename(&staged, &shim)
        .with_context(|| format!("renaming {} to {}", staged.display(), shim.display()))
}

pub fn run(opts: &RunOptions) -> Result<()> {
    if !opts.prebuilt {
        setup::run(&setup::Options::default())?;
        build(&BuildOptions { release: false })?;
    }
    let dir = &opts.runtime_dir;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    own_file_system(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    // The default policy's workspace, so its tools have something to work on.
    fs::create_dir_all("/srv/agent/workspace").context("creating /srv/agent/workspace")?;
    let policy = opts
        .policy
        .clone()
        .unwrap_or_else(|| root().join("policies/default.toml"));
    let socket = dir.join("guard.sock");
    let bin = target_dir(false);
    println!(
        "guard: runtime dir {} (socket guard.sock, audit log audit.jsonl)",
        dir.display()
    );
    println!(
        "  try:  cd /srv/agent/workspace && GUARD_SOCKET={} {} list_dir dir=.",
        socket.display(),
        bin.join("guard-exec").display()
    );
    println!(
        "  tail: GUARD_SOCKET={} {} events --follow",
        socket.display(),
        bin.join("guardctl").display()
    );
    // exec: Ctrl-C reaches guardd directly and it shuts down cleanly.
    let err = Command::new(bin.join("guardd"))
        .arg("--policy")
        .arg(policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.join("audit.jsonl"))
        // `nobody` stands in for an agent's user in the walk-throughs (the README's, getting
        // started's): an admin may not approve a call of their own uid.
        .args(["--socket-group", "nogroup"])
        .args(&opts.guardd_args)
        .exec();
    Err(err).context("exec guardd")
}

/// Mounts a tmpfs on `dir` unless it is a mount point already. guardd refuses an audit log on
/// a file system the policy's tools may write to (a call that filled it would leave no room for
/// the rows that record it), and on a host whose /run, /tmp and /srv are one file system the
/// default policy's are all on the log's. A tmpfs is gone at reboot, as a dev run's log may be.
fn own_file_system(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let parent = dir.join("..");
    let (here, above) = (fs::metadata(dir)?, fs::metadata(&parent)?);
    if here.dev() != above.dev() || here.ino() == above.ino() {
        return Ok(());
    }
    check(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m,mode=0755", "guard-dev"])
            .arg(dir),
    )?;
    println!(
        "guard: mounted a tmpfs on {} for the audit log: a file system of its own",
        dir.display()
    );
    Ok(())
}

pub fn test(opts: &TestOptions) -> Result<()> {
    setup::run(&setup::Options::default())?;
    // The end-to-end tests run the real binaries, so build them first; the book too, so that
    // CI fails on a page that does not build or a link that leads nowhere.
    build(&BuildOptions { release: false })?;
    crate::docs::docs()?;
    let mut cmd = cargo();
    cmd.arg("test");
    if !opts.args.is_empty() {
        cmd.arg("--").args(&opts.args);
    }
    check(&mut cmd)?;
    let ci = env::var("CI").is_ok_and(|v| v == "true");
    // CI also boots the kernel matrix's rows that pass (`crate::vm::CI_KERNELS`), with the
    // binaries just built.
    if ci && opts.args.is_empty() {
        crate::vm::vm(&crate::vm::VmOptions::ci())?;
    }
    // CI also fuzzes, each target as long as `cargo xtask fuzz` does by default.
    if ci {
        crate::fuzz::fuzz(
            &root(),
            &crate::fuzz::FuzzOptions {
                seconds: crate::fuzz::DEFAULT_SECONDS,
                targets: Vec::new(),
            },
        )?;
    }
    Ok(())
}

/// The in-process decision under divan (its own statistics), then `guard-bench`: guard against
/// its baselines, side by side in one run, as a table on stdout and `target/bench/report.json`.
pub fn bench(opts: &BenchOptions) -> Result<()> {
    setup::run(&setup::Options { bench: true })?;
    if !opts.quick && opts.only.is_none() {
        check(cargo().args(["bench", "-p", "guard-daemon", "--bench", "decide"]))?;
    }
    // After `cargo bench`, which builds the package's binaries again (guard-exec dynamic).
    build(&BuildOptions { release: true })?;
    let mut cmd = Command::new(target_dir(true).join("guard-bench"));
    cmd.arg("--out")
        .arg(root().join("target/bench/report.json"));
    if opts.quick {
        cmd.arg("--quick");
    }
    if let Some(phase) = &opts.only {
        cmd.arg("--only").arg(phase);
    }
    check(&mut cmd)
}
