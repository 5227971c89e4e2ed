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
        "usr/local/share/doc/guard/index.html",
        "usr/local/share/doc/guard/getting-started.html",
        "usr/local/share/doc/guard/policy/index.html",
        "usr/local/libexec/guard/security-judge",
        "usr/local/libexec/guard/shell-reviewer",
        "usr/local/share/guard/examples/aegis.toml",
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
    // The examples' stand-ins are where the examples name them, runnable.
    assert_eq!(mode("usr/local/libexec/guard/notify-chat"), 0o755);
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
    // The unit before hardening scored 9.6; the book's install page says what is left and why.
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
    // The README's "try" line, as `xtask run` prints it: from the default policy's workspace.
    let mut exec = Command::new(support::bin("guard-exec"));
    exec.args(["list_dir", "dir=."])
        .current_dir("/srv/agent/workspace")
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

/// The `name(N)` references of a roff page, its font changes and escaped hyphens undone.
fn page_references(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\fP", "")
        .replace("\\-", "-");
    let bytes = text.as_bytes();
    let mut refs = Vec::new();
    for (i, w) in bytes.windows(3).enumerate() {
        if w[0] != b'(' || !w[1].is_ascii_digit() || w[2] != b')' {
            continue;
        }
        let start = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
            .map_or(0, |s| s + 1);
        if start < i {
            refs.push(format!("{}({})", &text[start..i], w[1] as char));
        }
    }
    refs
}

/// Every installed man page refers only to installed pages (clap's own generator named a page
/// per subcommand, `guardctl-events(1)`, which nothing installs), says its section in its title,
/// and documents the variables its flags read (GUARD_SOCKET); guard-exec's documents its hook
/// mode with every flag the hook takes.
#[test]
fn man_pages_refer_only_to_installed_pages_and_document_guard_socket_and_the_hook() {
    let root = TempDir::new("guard-man");
    xtask(&["install", "--prebuilt-debug"], &root.0);
    let share = root.join("usr/local/share/man");
    let mut pages = Vec::new();
    for dir in std::fs::read_dir(&share).expect("man dirs").flatten() {
        for page in std::fs::read_dir(dir.path()).expect("pages").flatten() {
            pages.push(page.path());
        }
    }
    assert_eq!(pages.len(), 4, "{pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        let file = page.file_name().and_then(|n| n.to_str()).expect("name");
        let (name, section) = file.rsplit_once('.').expect("name.N");
        assert!(
            text.contains(&format!(".TH {name} {section} ")),
            "{file}: title of another section"
        );
        // The book the page points readers to is the one install put there.
        let text_plain = text.replace("\\-", "-");
        assert!(
            text_plain.contains("/usr/local/share/doc/guard/index.html"),
            "{file} does not point at the installed book"
        );
        assert!(root.join("usr/local/share/doc/guard/index.html").exists());
        let refs = page_references(&text);
        assert!(refs.len() >= 3, "{file} refers to no other page: {refs:?}");
        for r in refs {
            let (other, n) = r.trim_end_matches(')').split_once('(').expect("name(N)");
            let installed = share.join(format!("man{n}/{other}.{n}"));
            assert!(installed.exists(), "{file} refers to {r}, not installed");
        }
        if name != "guardd" {
            let env = text.split(".SH ENVIRONMENT").nth(1).unwrap_or("");
            assert!(
                env.contains("GUARD_SOCKET"),
                "{file}: no GUARD_SOCKET in\n{text}"
            );
        }
    }
    let exec = std::fs::read_to_string(share.join("man1/guard-exec.1")).expect("guard-exec.1");
    let exec = exec.replace("\\-", "-");
    assert!(exec.contains("guard-exec hook claude-code"), "{exec}");
    // Every flag the hook's own parser takes, as its --help lists them.
    let help = output({
        let mut c = Command::new(support::bin("guard-exec"));
        c.args(["hook", "claude-code", "--help"]);
        c
    });
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches([',', '.']))
        .filter(|w| *w != "--help" && *w != "--version")
        .collect();
    assert!(flags.len() >= 5, "{help}");
    for flag in flags {
        assert!(exec.contains(flag), "the man page omits the hook's {flag}");
    }
}

/// The installed bash completion completes guard-exec's TOOL (after options with values) and
/// guardctl's --tool with the tools guardd lets the caller call, asked at GUARD_SOCKET, and
/// offers none, silently, when guardd is not there.
#[test]
fn completion_scripts_offer_the_callers_tools_from_a_running_guardd() {
    if !support::privileged("completion_scripts_offer_the_callers_tools_from_a_running_guardd") {
        return;
    }
    let guardd = support::Guardd::start(
        "[tools.sh]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n\
         [tools.fetch_url]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n",
    );
    let bin = support::bin("guard-exec");
    let bin_dir = bin.parent().expect("target dir");
    // What bash does at a Tab: the words, the function `complete -p` names, COMPREPLY.
    let script = r#"
source <(guard-exec --generate=bash)
source <(guardctl --generate=bash)
complete_line() {
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_TYPE=9; COMPREPLY=()
    local f; f=$(complete -p "$1" | sed -E 's/.* -F ([^ ]+) .*/\1/')
    "$f" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    echo "$*: ${COMPREPLY[*]}"
}
complete_line guard-exec --session s1 ''
complete_line guard-exec f
complete_line guard-exec --no
complete_line guardctl events --tool ''
"#;
    let run = |socket: &std::path::Path| {
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        output({
            let mut c = Command::new("bash");
            c.args(["-c", script])
                .env("PATH", path)
                .env("GUARD_SOCKET", socket);
            c
        })
    };
    let out = run(&guardd.socket);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    // An empty word also gets the options; the tools come first.
    for want in [
        "guard-exec --session s1 : fetch_url sh ",
        "guard-exec f: fetch_url",
        "guard-exec --no: --no-wait",
        "guardctl events --tool : fetch_url sh",
    ] {
        assert!(
            said.lines().any(|l| l.starts_with(want)),
            "{want:?} not in:\n{said}"
        );
    }
    let out = run(&guardd.dir.join("nobody-listens.sock"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let tool = said
        .lines()
        .find(|l| l.starts_with("guard-exec --session s1 : "))
        .expect("the TOOL line");
    assert!(
        tool.contains("--socket") && !tool.contains("fetch_url") && !tool.contains(" sh "),
        "{tool}"
    );
    assert!(said.lines().any(|l| l == "guard-exec f: "), "{said}");
}
