//! `cargo xtask install` and `uninstall` into a staging root: what install writes, the unit it
//! writes passes systemd's own checks, and uninstall removes exactly that, keeping an edited
//! policy; nothing outside the root is touched.

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

use super::support::{self, TempDir, output};

/// Every file and directory below `root`, relative, sorted.
fn tree(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(
                p.strip_prefix(root)
                    .expect("below root")
                    .display()
                    .to_string(),
            );
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&p, root, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn xtask(args: &[&str], root: &Path) -> std::process::Output {
    let mut cmd = Command::new(support::bin("xtask"));
    cmd.args(args).arg("--root").arg(root);
    let out = output(cmd);
    assert!(out.status.success(), "xtask {args:?}: {out:?}");
    out
}

/// The host paths a real install would write: staged installs must leave them as they were.
const HOST_PATHS: &[&str] = &[
    "/usr/local/bin/guardd",
    "/usr/local/bin/guardctl",
    "/usr/local/bin/guard-exec",
    "/usr/local/bin/guard-mcp",
    "/etc/systemd/system/guardd.service",
    "/etc/guard",
    "/usr/local/share/guard",
];

fn host_state() -> Vec<Option<std::time::SystemTime>> {
    HOST_PATHS
        .iter()
        .map(|p| std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

#[test]
fn install_then_uninstall_into_a_staging_root_leaves_nothing_and_touches_nothing_outside() {
    let root = TempDir::new("guard-install");
    let before = host_state();
    xtask(&["install", "--prebuilt-debug"], &root.0);
    let files = tree(&root.0);
    for want in [
        "usr/local/bin/guardd",
        "usr/local/bin/guard-exec",
        "usr/local/bin/guardctl",
        "usr/local/bin/guard-mcp",
        "usr/local/share/man/man1/guard-mcp.1",
        "usr/local/share/man/man8/guardd.8",
        "usr/local/share/man/man1/guardctl.1",
        "usr/local/share/bash-completion/completions/guardctl",
        "usr/local/share/zsh/site-functions/_guard-exec",
        "usr/local/share/fish/vendor_completions.d/guardd.fish",
        "etc/systemd/system/guardd.service",
        "etc/guard/policy.toml",
    ] {
        assert!(
            files.iter().any(|f| f == want),
            "{want} not installed: {files:#?}"
        );
    }
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .expect("installed")
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("etc/guard/policy.toml"), 0o640);
    assert_eq!(mode("usr/local/bin/guardd"), 0o755);
    let man =
        std::fs::read_to_string(root.join("usr/local/share/man/man1/guardctl.1")).expect("man");
    assert!(man.contains(".TH guardctl 1"), "{man}");

    // systemd's checks of the unit, with ExecStart pointed at the staged binary.
    let unit =
        std::fs::read_to_string(root.join("etc/systemd/system/guardd.service")).expect("unit");
    assert!(
        unit.lines().any(|l| l == "ExecStart=/usr/local/bin/guardd"),
        "{unit}"
    );
    let check = TempDir::new("guard-unit");
    let staged = unit.replace(
        "/usr/local/bin/guardd",
        &root.join("usr/local/bin/guardd").display().to_string(),
    );
    std::fs::write(check.join("guardd.service"), staged).expect("unit copy");
    let verify = output({
        let mut c = Command::new("systemd-analyze");
        c.args(["verify", "--man=no"])
            .arg(check.join("guardd.service"));
        c
    });
    assert!(
        verify.status.success(),
        "systemd-analyze verify: {verify:?}"
    );
    let security = output({
        let mut c = Command::new("systemd-analyze");
        c.args(["security", "--offline=true", "--no-pager"])
            .arg(check.join("guardd.service"));
        c
    });
    let report = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("exposure level for guardd.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {report}"));
    // The unit before hardening scored 9.6; README says what is left and why.
    assert!(exposure <= 5.0, "exposure {exposure}: {report}");

    // An edited policy survives uninstall; everything else install wrote goes.
    std::fs::write(root.join("etc/guard/policy.toml"), "# edited\n").expect("edit policy");
    let out = xtask(&["uninstall"], &root.0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kept"),
        "{out:?}"
    );
    assert_eq!(tree(&root.0), ["etc", "etc/guard", "etc/guard/policy.toml"]);
    // A second install keeps the edited policy as it is, and uninstall still leaves it.
    xtask(&["install", "--prebuilt-debug"], &root.0);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/guard/policy.toml")).expect("policy"),
        "# edited\n"
    );
    xtask(&["uninstall"], &root.0);
    std::fs::remove_file(root.join("etc/guard/policy.toml")).expect("rm policy");
    xtask(&["install", "--prebuilt-debug"], &root.0);
    xtask(&["uninstall"], &root.0);
    // The root holds what the edited-policy round left (etc/guard), nothing more.
    assert_eq!(tree(&root.0), ["etc", "etc/guard"]);
    assert_eq!(host_state(), before, "a staged install touched the host");
}

#[test]
fn guard_exec_is_linked_statically_against_musl() {
    // It starts on every call: no dynamic loader (no PT_INTERP program header) to run first,
    // and not glibc's start-up, which probes the CPU with CPUID (a VM exit each) at every start.
    let elf = std::fs::read(support::bin("guard-exec")).expect("read guard-exec");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let types: Vec<u32> = (0..phnum).map(|i| u32_at(phoff + i * phentsize)).collect();
    const PT_INTERP: u32 = 3;
    const PT_DYNAMIC: u32 = 2;
    assert!(
        !types.contains(&PT_INTERP),
        "guard-exec asks for a loader: {types:?}"
    );
    // A static PIE still relocates itself: it keeps its PT_DYNAMIC (ASLR stays).
    assert!(
        types.contains(&PT_DYNAMIC),
        "guard-exec is not position-independent: {types:?}"
    );
    // glibc's start-up reads its tunables from the environment under this name.
    let glibc = elf.windows(14).any(|w| w == b"GLIBC_TUNABLES");
    assert!(!glibc, "guard-exec is linked against glibc, not musl");
}

#[test]
fn xtask_run_serves_the_readme_s_try_line_wherever_its_runtime_dir_is() {
    if !support::privileged("xtask_run_serves_the_readme_s_try_line_wherever_its_runtime_dir_is") {
        return;
    }
    // A runtime dir that is no mount point, as /run/guard-dev is on a host whose /run is no
    // tmpfs: on the root file system, with the default policy's workspace and /tmp, guardd
    // would refuse its audit log there, so `xtask run` gives it a file system of its own.
    let runtime = std::path::PathBuf::from("/run").join(support::unique("guard-xtask-run"));
    /// Unmounts and removes the runtime dir however the test ends.
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _cleanup = Cleanup(runtime.clone());
    let mut run = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        Command::new(support::bin("xtask"))
            .args(["run", "--prebuilt", "--runtime-dir"])
            .arg(&runtime)
            .args(["--", "--cgroup", &support::unique("guard-xtask-run")])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("xtask run")
    };
    let socket = runtime.join("guard.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(_)) = run.try_wait() {
            let out = run.wait_with_output().expect("xtask run");
            panic!("xtask run exited: {out:?}");
        }
        if std::time::Instant::now() > deadline {
            let _ = run.kill();
            panic!("no socket within 20 s: {:?}", run.wait_with_output());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The README's "try" line, as `xtask run` prints it.
    let mut exec = Command::new(support::bin("guard-exec"));
    exec.args(["list_dir", "dir=/srv/agent/workspace"])
        .env("GUARD_SOCKET", &socket);
    let out = output(exec);
    // SAFETY: kill takes integers; xtask exec'd guardd, so this is guardd.
    unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGTERM) };
    let stopped = run.wait_with_output().expect("guardd");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stopped.status.success(), "{stopped:?}");
    assert!(
        String::from_utf8_lossy(&stopped.stdout).contains("mounted a tmpfs"),
        "{stopped:?}"
    );
}
