//! `cargo xtask setup`: every piece guard needs on the host, checked, and installed or mounted
//! when missing and we are root. Each piece reports one line when it changed something or cannot
//! be fixed; a run that finds everything in place says so in one line.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    node, repo,
    toolchain::{self, EBPF_TOOLCHAIN},
    venv,
};

/// Debian packages of the peers `cargo xtask bench` compares guard with.
const BENCH_PACKAGES: &[&str] = &["bubblewrap", "firejail", "hyperfine"];
/// Debian packages the agent-day suite's commands use (`tests/suite/agentday.rs`): zip and
/// unzip, and the system Python's venv with wheel, for an editable install without an index.
const AGENT_DAY_PACKAGES: &[&str] = &["zip", "unzip", "python3-venv", "python3-wheel"];
/// The Debian packages `cargo xtask vm` boots its kernels with, and fetches them with.
const VM_PACKAGES: &[&str] = &["qemu-system-x86", "curl"];
/// The unprivileged user that confined tools run as by default.
pub const TOOL_USER: &str = "guard-tool";

#[derive(clap::Args, Default)]
pub struct Options {
    /// Also install the sandboxes guard is benchmarked against (bubblewrap, firejail).
    #[arg(long)]
    pub bench: bool,
}

/// What one check found.
enum Outcome {
    /// Already in place: says nothing.
    Present,
    /// Was missing and is now in place.
    Fixed(String),
    /// Missing and not fixable here: what and how to fix.
    Missing(String),
}

struct Check {
    name: &'static str,
    run: fn(&Ctx) -> Result<Outcome>,
}

struct Ctx {
    root: bool,
    bench: bool,
}

/// Debian packages bpf-linker is built against, for LLVM `major`.
fn llvm_packages(major: u32) -> Vec<String> {
    vec![
        format!("llvm-{major}-dev"),
        format!("libpolly-{major}-dev"),
        "libzstd-dev".into(),
        format!("clang-{major}"),
    ]
}

/// The target guard-exec is built for: this machine's, on musl (see `run::shim`).
pub fn shim_target() -> String {
    format!("{}-unknown-linux-musl", env::consts::ARCH)
}

/// The musl standard library for the toolchain that builds the workspace: rust-std for one
/// more target, added beside the host's. The compiler, its version and its defaults stay as
/// they are.
fn musl_target(_: &Ctx) -> Result<Outcome> {
    let target = shim_target();
    let installed = || {
        Command::new("rustup")
            .args(["target", "list", "--installed"])
            .current_dir(repo::root())
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .any(|l| l == target)
            })
    };
    if installed() {
        return Ok(Outcome::Present);
    }
    let ok = status(
        Command::new("rustup")
            .args(["target", "add", &target])
            .current_dir(repo::root()),
    )?;
    Ok(if ok && installed() {
        Outcome::Fixed(format!(
            "added the {target} standard library to the workspace's toolchain (guard-exec links \
             against musl)"
        ))
    } else {
        Outcome::Missing(format!("`rustup target add {target}` failed"))
    })
}

fn llvm_prefix(major: u32) -> PathBuf {
    PathBuf::from(format!("/usr/lib/llvm-{major}"))
}

const CHECKS: &[Check] = &[
    Check {
        name: "ebpf toolchain",
        run: ebpf_toolchain,
    },
    Check {
        name: "musl target",
        run: musl_target,
    },
    Check {
        name: "debian packages",
        run: debian_packages,
    },
    Check {
        name: "bpf-linker",
        run: bpf_linker,
    },
    Check {
        name: "BTF",
        run: btf,
    },
    Check {
        name: "landlock",
        run: landlock,
    },
    Check {
        name: "cgroup v2",
        run: cgroup2,
    },
    Check {
        name: "tracefs",
        run: tracefs,
    },
    Check {
        name: "bpffs",
        run: bpffs,
    },
    Check {
        name: "tool user",
        run: tool_user,
    },
    Check {
        name: "python venv",
        run: python_venv,
    },
    Check {
        name: "node packages",
        run: node_packages,
    },
    Check {
        name: "mdbook",
        run: mdbook,
    },
];

pub fn run(opts: &Options) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let ctx = Ctx {
        root: euid == 0,
        bench: opts.bench,
    };
    let (mut changed, mut missing) = (0, 0);
    for check in CHECKS {
        match (check.run)(&ctx).with_context(|| format!("setup: {}", check.name))? {
            Outcome::Present => {}
            Outcome::Fixed(what) => {
                changed += 1;
                println!("setup: {}: {what}", check.name);
            }
            Outcome::Missing(how) => {
                missing += 1;
                println!("setup: {}: MISSING: {how}", check.name);
            }
        }
    }
    if missing > 0 {
        bail!("setup: {missing} piece(s) missing; see the lines above");
    }
    if changed == 0 {
        println!("setup: everything in place, nothing to do");
    }
    Ok(())
}

fn needs_root(what: &str) -> Outcome {
    Outcome::Missing(format!("{what}; run `cargo xtask setup` as root"))
}

fn status(cmd: &mut Command) -> Result<bool> {
    let program = format!("{cmd:?}");
    Ok(cmd
        .status()
        .with_context(|| format!("running {program}"))?
        .success())
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn debian_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"install ok installed"))
}

fn debian_packages(ctx: &Ctx) -> Result<Outcome> {
    let mut wanted = match toolchain::toolchain_llvm() {
        Some(major) => llvm_packages(major),
        // The toolchain check above said why; nothing to build bpf-linker for yet.
        None => Vec::new(),
    };
    wanted.extend(AGENT_DAY_PACKAGES.iter().map(|p| p.to_string()));
    wanted.extend(VM_PACKAGES.iter().map(|p| p.to_string()));
    if ctx.bench {
        wanted.extend(BENCH_PACKAGES.iter().map(|p| p.to_string()));
    }
    let missing: Vec<String> = wanted
        .into_iter()
        .filter(|p| !debian_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(Outcome::Present);
    }
    let list = missing.join(" ");
    if !ctx.root {
        return Ok(needs_root(&format!(
            "Debian packages {list} are not installed"
        )));
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
    };
    let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
    if !apt(&["update", "-q"])?.success()
        || !apt(&[&["install", "-y", "-q"], &missing[..]].concat())?.success()
    {
        return Ok(Outcome::Missing(format!(
            "apt-get install {list} failed; see its output above"
        )));
    }
    Ok(Outcome::Fixed(format!("installed {list}")))
}

/// The pinned toolchain with rust-src, installed beside the user's own: the default toolchain
/// and `nightly` are never touched.
fn ebpf_toolchain(_: &Ctx) -> Result<Outcome> {
    let has_rust_src = || {
        Command::new("rustup")
            .args([
                "component",
                "list",
                "--installed",
                "--toolchain",
                EBPF_TOOLCHAIN,
            ])
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .any(|l| l.starts_with("rust-src"))
            })
    };
    if toolchain::toolchain_llvm().is_some() && has_rust_src() {
        return Ok(Outcome::Present);
    }
    // Installs into the invoking user's rustup home: no root needed.
    let ok = status(Command::new("rustup").args([
        "toolchain",
        "install",
        EBPF_TOOLCHAIN,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
        "--no-self-update",
    ]))?;
    Ok(match toolchain::toolchain_llvm() {
        Some(llvm) if ok && has_rust_src() => Outcome::Fixed(format!(
            "installed {EBPF_TOOLCHAIN} (LLVM {llvm}) with rust-src for the kernel programs"
        )),
        _ => Outcome::Missing(format!(
            "`rustup toolchain install {EBPF_TOOLCHAIN} --profile minimal --component rust-src` failed"
        )),
    })
}

/// bpf-linker built against the LLVM of the pinned toolchain; rebuilt when it links another.
fn bpf_linker(_: &Ctx) -> Result<Outcome> {
    let Some(want) = toolchain::toolchain_llvm() else {
        return Ok(Outcome::Missing(format!(
            "bpf-linker must match {EBPF_TOOLCHAIN}'s LLVM, and that toolchain is not installed"
        )));
    };
    let installed = toolchain::linker_path();
    let have = installed.as_deref().and_then(toolchain::linker_llvm);
    if toolchain::check_llvm(Some(want), have).is_ok() {
        return Ok(Outcome::Present);
    }
    let prefix = llvm_prefix(want);
    if !prefix.join("bin/llvm-config").exists() {
        return Ok(Outcome::Missing(format!(
            "bpf-linker needs LLVM {want} at {} (Debian's llvm-{want}-dev)",
            prefix.display()
        )));
    }
    if let Some(other) = installed
        .as_deref()
        .filter(|p| !p.starts_with(toolchain::cargo_home()))
    {
        // Not ours to replace: cargo's copy would install beside it and lose on PATH.
        return Ok(Outcome::Missing(format!(
            "{} links LLVM {} but {EBPF_TOOLCHAIN} needs LLVM {want}: remove it, then run setup again",
            other.display(),
            have.map_or("?".into(), |v| v.to_string()),
        )));
    }
    let path = format!(
        "{}/bin:{}",
        prefix.display(),
        env::var("PATH").unwrap_or_default()
    );
    let ok = status(
        Command::new("cargo")
            .args(["install", "--force", "--locked", "bpf-linker", "--version"])
            .arg(toolchain::BPF_LINKER_VERSION)
            .args(["--no-default-features", "--features"])
            .arg(format!("llvm-{want}"))
            .env("PATH", path)
            .env("LLVM_PREFIX", &prefix),
    )?;
    let now = toolchain::linker_path()
        .as_deref()
        .and_then(toolchain::linker_llvm);
    Ok(match toolchain::check_llvm(Some(want), now) {
        Ok(()) if ok => Outcome::Fixed(match have {
            Some(old) => format!("rebuilt bpf-linker against LLVM {want} (it linked LLVM {old})"),
            None => format!("built and installed bpf-linker against LLVM {want}"),
        }),
        Ok(()) => {
            Outcome::Missing("`cargo install bpf-linker` failed; see its output above".into())
        }
        Err(why) => Outcome::Missing(why),
    })
}

fn btf(_: &Ctx) -> Result<Outcome> {
    Ok(if Path::new("/sys/kernel/btf/vmlinux").exists() {
        Outcome::Present
    } else {
        Outcome::Missing(
            "no /sys/kernel/btf/vmlinux: the kernel needs CONFIG_DEBUG_INFO_BTF=y".into(),
        )
    })
}

fn landlock(_: &Ctx) -> Result<Outcome> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: with a NULL attr, size 0 and the VERSION flag the syscall only returns the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    // ABI 1 to 3 run too, with what they have; guardd says at start what each lacks.
    Ok(if abi >= 1 {
        Outcome::Present
    } else {
        Outcome::Missing(
            "landlock is not enabled: boot with lsm=...,landlock (kernel >= 5.13)".into(),
        )
    })
}

fn is_mounted(target: &str, fstype: &str) -> bool {
    fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
        m.lines().any(|l| {
            let mut f = l.split_whitespace();
            let _source = f.next();
            f.next() == Some(target) && f.next() == Some(fstype)
        })
    })
}

fn mount(ctx: &Ctx, fstype: &str, target: &str) -> Result<Outcome> {
    if is_mounted(target, fstype) {
        return Ok(Outcome::Present);
    }
    if !ctx.root {
        return Ok(needs_root(&format!("{fstype} is not mounted at {target}")));
    }
    let ok = status(Command::new("mount").args(["-t", fstype, fstype, target]))?;
    Ok(if ok {
        Outcome::Fixed(format!("mounted {fstype} at {target}"))
    } else {
        Outcome::Missing(format!("`mount -t {fstype} {fstype} {target}` failed"))
    })
}

fn cgroup2(_: &Ctx) -> Result<Outcome> {
    Ok(
        if is_mounted("/sys/fs/cgroup/unified", "cgroup2")
            || is_mounted("/sys/fs/cgroup", "cgroup2")
        {
            Outcome::Present
        } else {
            Outcome::Missing(
                "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified".into(),
            )
        },
    )
}

fn tracefs(ctx: &Ctx) -> Result<Outcome> {
    mount(ctx, "tracefs", "/sys/kernel/tracing")
}

fn bpffs(ctx: &Ctx) -> Result<Outcome> {
    mount(ctx, "bpf", "/sys/fs/bpf")
}

fn tool_user(ctx: &Ctx) -> Result<Outcome> {
    if quiet(Command::new("getent").args(["passwd", TOOL_USER])) {
        return Ok(Outcome::Present);
    }
    if !ctx.root {
        return Ok(needs_root(&format!("user {TOOL_USER} does not exist")));
    }
    let ok = status(Command::new("useradd").args([
        "--system",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        TOOL_USER,
    ]))?;
    Ok(if ok {
        Outcome::Fixed(format!(
            "created the unprivileged user {TOOL_USER} that tools run as"
        ))
    } else {
        Outcome::Missing(format!("`useradd --system {TOOL_USER}` failed"))
    })
}

/// The tests' Node packages (the MCP TypeScript SDK); no root needed.
fn node_packages(_: &Ctx) -> Result<Outcome> {
    Ok(match node::ensure() {
        Ok(None) => Outcome::Present,
        Ok(Some(what)) => Outcome::Fixed(what),
        Err(why) => Outcome::Missing(why),
    })
}

/// mdbook, which builds the book (`cargo xtask docs`); no root needed.
fn mdbook(_: &Ctx) -> Result<Outcome> {
    Ok(match crate::docs::ensure_mdbook() {
        Ok(None) => Outcome::Present,
        Ok(Some(what)) => Outcome::Fixed(what),
        Err(why) => Outcome::Missing(why),
    })
}

/// The tests' Python environment (the MCP SDK, the Python client); no root needed.
fn python_venv(_: &Ctx) -> Result<Outcome> {
    Ok(match venv::ensure() {
        Ok(None) => Outcome::Present,
        Ok(Some(what)) => Outcome::Fixed(what),
        Err(why) => Outcome::Missing(why),
    })
}
