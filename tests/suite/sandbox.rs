//! The confined launch, end to end: `guard::sandbox::spawn` forks from this test process and
//! confines only the child (landlock and seccomp are never installed here), which execs
//! `guard-testtool` as the `guard-tool` user. Each test asserts what the tool saw: output, errno,
//! exit code.

use std::{
    fs,
    io::Read as _,
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::fs::PermissionsExt as _,
    },
    path::{Path, PathBuf},
    process::Command,
    sync::Once,
    time::Duration,
};

use guard::{
    call::{
        gate,
        plan::{Confinement, Effects, Endpoint, LaunchPlan},
    },
    sandbox::{
        self, Gated, LaunchOptions, Outcome, SandboxError,
        cgroup::{self, Cgroup},
    },
};

use super::support::{self, ToolDir, dead};

const USER: &str = "guard-tool";

/// Creates the `guard-tool` system user if missing, as `cargo xtask setup` does.
fn ensure_user() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if nix::unistd::User::from_name(USER).ok().flatten().is_some() {
            return;
        }
        let status = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .expect("run useradd");
        // 9: the user exists (created meanwhile by another process).
        assert!(
            status.success() || status.code() == Some(9),
            "useradd {USER}: {status}"
        );
    });
}

/// The call's cgroup under the v2 hierarchy; `Cgroup` kills and removes it on drop.
fn call_cgroup() -> Cgroup {
    let root = cgroup::unified_mount().expect("cgroup v2 mounted");
    Cgroup::create(&root, &support::unique("guard-test")).expect("create test cgroup")
}

fn options() -> LaunchOptions {
    let root = cgroup::unified_mount().expect("cgroup v2 mounted");
    LaunchOptions {
        limits: sandbox::detect_limits(&root),
        ..LaunchOptions::default()
    }
}

fn plan(scratch: &ToolDir, args: &[&str], effects: Effects) -> LaunchPlan {
    let mut argv = vec![scratch.tool.clone().into_os_string()];
    argv.extend(args.iter().map(Into::into));
    LaunchPlan {
        tool: "testtool".into(),
        argv,
        effects,
        confinement: Confinement {
            timeout: Duration::from_secs(20),
            ..Confinement::default()
        },
        enforce: Default::default(),
    }
}

struct Ran {
    outcome: Outcome,
    /// What the launch says it applied.
    applied: sandbox::Applied,
    stdout: String,
    stderr: String,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe2")
}

fn drain(fd: OwnedFd) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = fs::File::from(fd).read_to_string(&mut s);
        s
    })
}

/// Spawns `plan` confined in `cg`, waits for it with its timeout, and collects its output.
fn run_in(plan: &LaunchPlan, cg: &Cgroup) -> Result<Ran, SandboxError> {
    run_with(plan, cg, &options()).map(|(ran, _)| ran)
}

/// [`run_in`] with `opts`; also the v1 limit directories the call was in.
fn run_with(
    plan: &LaunchPlan,
    cg: &Cgroup,
    opts: &LaunchOptions,
) -> Result<(Ran, Vec<PathBuf>), SandboxError> {
    ensure_user();
    let stdin: OwnedFd = fs::File::open("/dev/null").expect("open /dev/null").into();
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    let launched = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        sandbox::spawn(plan, cg, [stdin, out_w, err_w], opts)?
    };
    let v1: Vec<PathBuf> = launched.v1_cgroups().map(Path::to_owned).collect();
    let applied = launched.applied.clone();
    let (out, err) = (drain(out_r), drain(err_r));
    let outcome = to_end(launched, cg, plan)?;
    let ran = Ran {
        outcome,
        applied,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    Ok((ran, v1))
}

/// Follows `launched`, a launch of `plan` in `cg`, to its end with the plan's timeout.
fn to_end(
    launched: sandbox::Launched,
    cg: &Cgroup,
    plan: &LaunchPlan,
) -> Result<Outcome, SandboxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(sandbox::run_to_end(
        launched,
        cg,
        plan.confinement.timeout,
        |_| {},
    ))
}

fn run(plan: &LaunchPlan) -> Ran {
    let cg = call_cgroup();
    run_in(plan, &cg).expect("launch")
}

/// Asserts that the single action of `args` fails with `errno_name` and exit code 1.
fn assert_fails(scratch: &ToolDir, args: &[&str], effects: Effects, errno_name: &str) {
    let r = run(&plan(scratch, args, effects));
    assert_eq!(
        r.outcome.exit_code, 1,
        "{args:?}: stdout {:?} stderr {:?}",
        r.stdout, r.stderr
    );
    assert!(
        errno_name
            .split('|')
            .any(|e| r.stderr.starts_with(&format!("ERR {e} "))),
        "{args:?}: expected {errno_name}, stderr {:?}",
        r.stderr
    );
}

#[test]
fn sandbox_allowed_read_prints_and_other_reads_are_denied() {
    if !support::privileged("sandbox_allowed_read_prints_and_other_reads_are_denied") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let data = s.dir.join("data.txt");
    fs::write(&data, "hello from the guard\n").expect("write data");
    fs::set_permissions(&data, fs::Permissions::from_mode(0o644)).expect("chmod");
    let secret = s.dir.join("secret.txt");
    fs::write(&secret, "not for the tool\n").expect("write secret");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).expect("chmod");

    let effects = Effects {
        read: vec![data.clone()],
        ..Effects::default()
    };
    let r = run(&plan(
        &s,
        &["read", data.to_str().expect("utf8")],
        effects.clone(),
    ));
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
    assert_eq!(r.stdout, "hello from the guard\n");
    assert!(!r.outcome.timed_out);

    // World-readable, so only landlock stands in the way.
    assert_fails(
        &s,
        &["read", secret.to_str().expect("utf8")],
        effects.clone(),
        "EACCES",
    );
    assert_fails(&s, &["read", "/etc/hostname"], effects, "EACCES");
}

#[test]
fn sandbox_write_outside_effects_is_refused() {
    if !support::privileged("sandbox_write_outside_effects_is_refused") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // 0777: the user may write both by file mode; only the sandbox tells them apart (the
    // call's read-only mount view, EROFS, and landlock behind it, EACCES).
    let allowed = s.subdir("out", 0o777);
    let other = s.subdir("other", 0o777);
    let effects = Effects {
        write: vec![allowed.clone()],
        ..Effects::default()
    };
    let inside = allowed.join("f.txt");
    let r = run(&plan(
        &s,
        &["write", inside.to_str().expect("utf8"), "ok"],
        effects.clone(),
    ));
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
    assert_eq!(fs::read_to_string(&inside).expect("written"), "ok");

    let outside = other.join("f.txt");
    assert_fails(
        &s,
        &["write", outside.to_str().expect("utf8"), "no"],
        effects,
        "EROFS",
    );
    assert!(!outside.exists());
}

#[test]
fn sandbox_proc_self_shows_the_call_not_the_host() {
    if !support::privileged("sandbox_proc_self_shows_the_call_not_the_host") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // Its own status, limits, command line and descriptors: read (the control).
    for path in [
        "/proc/self/status",
        "/proc/self/limits",
        "/proc/self/cmdline",
        "/proc/self/fdinfo/0",
    ] {
        let r = run(&plan(&s, &["read", path], Effects::default()));
        assert_eq!(r.outcome.exit_code, 0, "{path}: {:?}", r.stderr);
    }
    // A call that connects somewhere shares the host's network namespace: the host's mount
    // table and network namespace, which lie beneath /proc/self too (every mount, every socket
    // with its peer, routes and neighbours), stay out of its reach.
    let connects = || Effects {
        connect: vec![guard::call::plan::Endpoint {
            host: "127.0.0.1".into(),
            port: 9,
        }],
        ..Effects::default()
    };
    for path in [
        "/proc/self/mountinfo",
        "/proc/self/mounts",
        "/proc/self/mountstats",
        "/proc/self/net/tcp",
        "/proc/self/net/unix",
        "/proc/thread-self/mountinfo",
        "/proc/thread-self/net/route",
    ] {
        assert_fails(&s, &["read", path], connects(), "EACCES");
    }
    // One that connects nowhere has a network namespace of its own: its whole /proc is its
    // own, its processes only (the tool is its pid 1; guardd is not there), its network only.
    let r = run(&plan(
        &s,
        &["read", "/proc/self/net/tcp"],
        Effects::default(),
    ));
    assert_eq!(r.outcome.exit_code, 0, "{:?}", r.stderr);
    assert_eq!(
        r.stdout.lines().count(),
        1,
        "a header, no host socket: {}",
        r.stdout
    );
    let r = run(&plan(&s, &["read", "/proc/1/cmdline"], Effects::default()));
    assert!(r.stdout.contains("guard-testtool"), "{:?}", r.stdout);
    let guardd = std::process::id();
    let r = run(&plan(
        &s,
        &["read", &format!("/proc/{guardd}/status")],
        Effects::default(),
    ));
    assert_ne!(
        r.outcome.exit_code, 0,
        "the host's process {guardd} is there: {}",
        r.stdout
    );
}

#[test]
fn sandbox_escape_syscalls_are_eperm() {
    if !support::privileged("sandbox_escape_syscalls_are_eperm") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    for args in [
        &["io_uring"][..],
        &["ptrace"],
        &["unshare-user"],
        &["socket", "packet", "raw"],
        &["socket", "netlink", "dgram"],
        // No `unix` effect: no Unix sockets, so no connect to a pathname socket.
        &["socket", "unix", "stream"],
        &["socketpair-dgram"],
    ] {
        assert_fails(&s, args, Effects::default(), "EPERM");
    }
    // No connect effects, in the host's network namespace (a `unix` tool shares it): no inet
    // sockets at all. (One with a network namespace of its own has them: they reach its
    // loopback only, `sandbox_a_call_that_connects_nowhere_serves_itself_on_its_own_loopback`.)
    let unix = Effects {
        unix: true,
        ..Effects::default()
    };
    assert_fails(&s, &["socket", "inet", "stream"], unix, "EPERM");
    // The host's mount table mount by mount (statmount, listmount), as closed as
    // /proc/self/mountinfo: EPERM, where the bare call answers EFAULT or EINVAL.
    for nr in ["457", "458"] {
        let r = run(&plan(&s, &["syscall", nr], Effects::default()));
        assert!(r.stdout.contains("errno EPERM"), "{nr}: {:?}", r.stdout);
    }
    // chroot, with which a tool run as root would move what its absolute names mean, and so
    // where the write-opens' judge looks (attack45): EPERM, where the bare call answers EFAULT
    // (a null name).
    let chroot = libc::SYS_chroot.to_string();
    let r = run(&plan(&s, &["syscall", &chroot], Effects::default()));
    assert!(r.stdout.contains("errno EPERM"), "chroot: {:?}", r.stdout);
    // openat2, whose flags (in memory) neither seccomp nor the open observer can read without
    // a race: ENOSYS, so programs fall back to openat.
    let r = run(&plan(&s, &["syscall", "437"], Effects::default()));
    assert!(r.stdout.contains("errno ENOSYS"), "openat2: {:?}", r.stdout);
    // The x32 twin of io_uring_setup (425 | 0x4000_0000) is killed, not let through.
    let r = run(&plan(&s, &["syscall", "0x400001a9"], Effects::default()));
    assert_eq!(
        r.outcome.signal,
        Some(libc::SIGSYS),
        "stdout {:?}",
        r.stdout
    );
    // With the `unix` effect a Unix socket is fine.
    let unix = || Effects {
        unix: true,
        ..Effects::default()
    };
    let r = run(&plan(&s, &["socket", "unix", "stream"], unix()));
    assert_eq!(
        (r.outcome.exit_code, r.stdout.as_str()),
        (0, "socket unix stream ok\n")
    );
    let r = run(&plan(&s, &["socketpair-dgram"], unix()));
    assert_eq!(
        (r.outcome.exit_code, r.stdout.as_str()),
        (0, "socketpair dgram ok\n")
    );
}

#[test]
fn sandbox_root_is_explicit_and_still_filtered() {
    if !support::privileged("sandbox_root_is_explicit_and_still_filtered") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // Root has CAP_NET_RAW, so this EPERM comes from seccomp alone.
    let mut p = plan(&s, &["socket", "packet", "raw"], Effects::default());
    p.confinement.run_as = Some("root".into());
    let r = run(&p);
    assert_eq!(r.outcome.exit_code, 1, "stdout {:?}", r.stdout);
    assert!(r.stderr.starts_with("ERR EPERM "), "stderr {:?}", r.stderr);

    let mut p = plan(&s, &["whoami"], Effects::default());
    p.confinement.run_as = Some("root".into());
    let r = run(&p);
    assert!(
        r.stdout.starts_with("uid=0 gid=0 groups=[] nnp=1"),
        "stdout {:?}",
        r.stdout
    );
    // Where the limits are rlimits (no memory or pids cgroup), RLIMIT_NPROC would not bind
    // uid 0: a root call does not run there, and another user's does.
    let rlimits = LaunchOptions {
        limits: sandbox::LimitsMode::Rlimit,
        ..options()
    };
    match run_with(&p, &call_cgroup(), &rlimits) {
        Err(SandboxError::RootUnlimited) => {}
        other => panic!("root under rlimits: {:?}", other.map(|(r, _)| r.stdout)),
    }
    p.confinement.run_as = None;
    let (r, _) = run_with(&p, &call_cgroup(), &rlimits).expect("guard-tool under rlimits");
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
}

#[test]
fn sandbox_a_root_tool_keeps_only_the_capabilities_its_plan_names() {
    if !support::privileged("sandbox_a_root_tool_keeps_only_the_capabilities_its_plan_names") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let root = |action: &str, caps: &[&str]| {
        let mut p = plan(&s, &[action], Effects::default());
        p.confinement.run_as = Some("root".into());
        p.confinement.capabilities = caps.iter().map(|c| c.to_string()).collect();
        run_in(&p, &call_cgroup())
    };
    // None kept: uid 0 owns what root owns, and that is all. A priority above the default is
    // CAP_SYS_NICE's, which this process has.
    let none = "0000000000000000";
    let r = root("caps", &[]).expect("launch");
    assert_eq!(
        r.stdout,
        format!("CapInh:{none} CapPrm:{none} CapEff:{none} CapBnd:{none} CapAmb:{none}\n"),
        "stderr {:?}",
        r.stderr
    );
    assert_eq!(r.applied.capabilities, Some(Vec::new()));
    let r = root("nice-raise", &[]).expect("launch");
    assert!(r.stderr.starts_with("ERR EACCES "), "stderr {:?}", r.stderr);
    // One kept: that one, in every set an exec as root fills (CAP_SYS_NICE is 23).
    let kept = "0000000000800000";
    let r = root("caps", &["CAP_SYS_NICE"]).expect("launch");
    assert_eq!(
        r.stdout,
        format!("CapInh:{none} CapPrm:{kept} CapEff:{kept} CapBnd:{kept} CapAmb:{none}\n"),
        "stderr {:?}",
        r.stderr
    );
    assert_eq!(
        r.applied.capabilities,
        Some(vec!["CAP_SYS_NICE".to_string()])
    );
    let r = root("nice-raise", &["CAP_SYS_NICE"]).expect("launch");
    assert_eq!(
        (r.outcome.exit_code, r.stdout.as_str()),
        (0, "nice -1\n"),
        "stderr {:?}",
        r.stderr
    );
    // One this process lacks itself (where it lacks one: a VM's init may keep
    // CAP_SYS_RESOURCE from root) cannot be kept, and nothing runs.
    let status = fs::read_to_string("/proc/self/status").expect("status");
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapBnd");
    let names = ["CAP_SYS_RESOURCE", "CAP_SYS_NICE", "CAP_NET_ADMIN"];
    let numbers = [24, 23, 12];
    if let Some(i) = numbers.iter().position(|n| bounding & 1 << n == 0) {
        match root("caps", &[names[i]]) {
            Err(SandboxError::Child { stage, errno }) => {
                assert_eq!((stage, errno), ("capabilities", libc::EPERM));
            }
            other => panic!("{}: {:?}", names[i], other.map(|r| r.stdout)),
        }
    }
}

#[test]
fn sandbox_inet_sockets_and_landlock_ports_follow_connect_effects() {
    if !support::privileged("sandbox_inet_sockets_and_landlock_ports_follow_connect_effects") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let denied = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = allowed.local_addr().expect("addr").port();
    let effects = Effects {
        connect: vec![Endpoint {
            host: "127.0.0.1".into(),
            port,
        }],
        ..Effects::default()
    };
    let to = |l: &std::net::TcpListener| l.local_addr().expect("addr").to_string();
    let r = run(&plan(&s, &["connect", &to(&allowed)], effects.clone()));
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
    assert_eq!(r.stdout, format!("connected {}\n", to(&allowed)));
    assert_fails(&s, &["connect", &to(&denied)], effects.clone(), "EACCES");
    assert_fails(&s, &["socket", "inet", "raw"], effects.clone(), "EPERM");
    assert_fails(&s, &["socket", "packet", "dgram"], effects, "EPERM");
}

#[test]
fn sandbox_runs_as_guard_tool_without_groups_and_with_no_new_privs() {
    if !support::privileged("sandbox_runs_as_guard_tool_without_groups_and_with_no_new_privs") {
        return;
    }
    ensure_user();
    let user = nix::unistd::User::from_name(USER)
        .expect("lookup")
        .expect("guard-tool exists");
    let s = ToolDir::new("guard-sandbox");
    let r = run(&plan(&s, &["whoami"], Effects::default()));
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("uid={} gid={} groups=[] nnp=1\n", user.uid, user.gid)
    );
}

#[test]
fn sandbox_timeout_kills_the_whole_tree() {
    if !support::privileged("sandbox_timeout_kills_the_whole_tree") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let mut p = plan(&s, &["fork", "5", "--", "sleep", "30"], Effects::default());
    p.confinement.timeout = Duration::from_millis(1500);
    let cg = call_cgroup();
    let r = run_in(&p, &cg).expect("launch");
    assert!(r.outcome.timed_out);
    assert_eq!(r.outcome.signal, Some(libc::SIGKILL));
    assert_eq!(r.outcome.exit_code, 128 + libc::SIGKILL);
    assert!(
        r.outcome.duration < Duration::from_secs(10),
        "{:?}",
        r.outcome.duration
    );
    assert_eq!(
        r.stdout
            .lines()
            .filter(|l| l.starts_with("forked "))
            .count(),
        5
    );
    assert_eq!(
        cg.pids().expect("cgroup.procs"),
        Vec::<u32>::new(),
        "tree left behind"
    );
    // The forked children are gone from the whole system, not only from the cgroup.
    for line in r.stdout.lines().filter_map(|l| l.strip_prefix("forked ")) {
        let pid = support::host_pid(line.split_whitespace().nth(1).expect("pid"));
        assert!(dead(pid, Duration::from_secs(2)), "child {pid} still alive");
    }
}

#[test]
fn sandbox_inherited_fds_are_not_visible() {
    if !support::privileged("sandbox_inherited_fds_are_not_visible") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // An fd without close-on-exec, as a careless library would leave one.
    let file = fs::File::open("/dev/null").expect("open");
    let leaked = 117;
    // SAFETY: dup2 onto an fd number no other part of the test uses; closed below.
    assert_eq!(unsafe { libc::dup2(file.as_raw_fd(), leaked) }, leaked);
    let r = run(&plan(&s, &["fds"], Effects::default()));
    // SAFETY: closes the fd dup'ed above.
    unsafe { libc::close(leaked) };
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);
    let fds: Vec<&str> = r
        .stdout
        .trim()
        .strip_prefix("fds ")
        .expect("fds line")
        .split(',')
        .collect();
    assert!(fds.starts_with(&["0", "1", "2"]), "{fds:?}");
    assert!(!fds.contains(&"117"), "inherited fd visible: {fds:?}");
    // 0, 1, 2 and the directory being listed.
    assert_eq!(fds.len(), 4, "{fds:?}");
}

#[test]
fn sandbox_pids_limit_stops_a_fork_bomb() {
    if !support::privileged("sandbox_pids_limit_stops_a_fork_bomb") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let mut p = plan(&s, &["fork", "50"], Effects::default());
    p.confinement.pids_max = Some(5);
    let r = run(&p);
    assert_eq!(r.outcome.exit_code, 1, "stdout {:?}", r.stdout);
    assert!(r.stderr.starts_with("ERR EAGAIN "), "stderr {:?}", r.stderr);
    let forked = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("forked "))
        .count();
    assert!(forked < 5, "forked {forked} with pids.max 5");
}

#[test]
fn a_v1_limit_directory_is_kept_for_the_next_call_which_gets_its_own_limits_there() {
    if !support::privileged(
        "a_v1_limit_directory_is_kept_for_the_next_call_which_gets_its_own_limits_there",
    ) {
        return;
    }
    let opts = options();
    if opts.limits != sandbox::LimitsMode::CgroupV1 {
        // CI runs on a host like ours (memory and pids on cgroup v1): there it may not skip.
        let why = format!("limits are not on cgroup v1 here ({})", opts.limits);
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{why}, under CI=true"
        );
        eprintln!("{why}: nothing to keep");
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    let out = s.subdir("out", 0o777);
    let call_as = |args: &[&str], pids: u64, writable: &str| {
        let mut p = plan(
            &s,
            args,
            Effects {
                write: vec![out.clone(), PathBuf::from(writable)],
                ..Effects::default()
            },
        );
        p.confinement.pids_max = Some(pids);
        p.confinement.memory_max = Some(256 << 20);
        run_with(&p, &call_cgroup(), &opts).expect("launch")
    };
    let call = |args: &[&str], pids: u64| call_as(args, pids, "/dev/null");
    // `fork-wait` leaves nothing behind: each call's end finds its directories empty.
    let forked = |r: &Ran| r.stdout.trim().strip_prefix("forked ").map(str::to_owned);

    let (first, dirs) = call(&["fork-wait", "50"], 5);
    assert!(
        first.stderr.starts_with("ERR EAGAIN "),
        "stderr {:?}",
        first.stderr
    );
    assert_eq!(forked(&first).as_deref(), Some("4"), "{}", first.stdout);
    assert_eq!(dirs.len(), 2, "memory and pids: {dirs:?}");
    // The next call is in the same directories, held to its own limit, not the first's.
    let (second, kept) = call(&["fork-wait", "20"], 40);
    assert_eq!(kept, dirs, "the first call's directories were not kept");
    assert_eq!(second.outcome.exit_code, 0, "stderr {:?}", second.stderr);
    assert_eq!(forked(&second).as_deref(), Some("20"), "{}", second.stdout);
    let (third, again) = call(&["fork-wait", "50"], 5);
    assert_eq!(again, dirs);
    assert_eq!(forked(&third).as_deref(), Some("4"), "{}", third.stdout);
    // Handed on with its high-water mark reset (the next call sees its own peak): after a call
    // that took 32 MiB, a small one's peak is its own, give or take what the kernel frees late.
    let (took, again) = call(&["touch-mib", "32"], 5);
    assert_eq!(took.outcome.exit_code, 0, "stderr {:?}", took.stderr);
    assert_eq!(again, dirs);
    let (small, again) = call(&["fork-wait", "1"], 5);
    assert_eq!(small.outcome.exit_code, 0, "stderr {:?}", small.stderr);
    assert_eq!(again, dirs);
    let memory = |file: &str| -> u64 {
        let text = fs::read_to_string(dirs[0].join(file)).expect("memory file");
        text.trim().parse().expect("bytes")
    };
    let peak = memory("memory.max_usage_in_bytes");
    assert!(peak < 16 << 20, "the 32 MiB call's peak was kept: {peak}");

    // A call that leaves memory charged there that the kernel cannot take back without swap
    // (a file on a tmpfs, 1 MiB: attack41) does not hand its directories on, however little.
    let shm = std::path::Path::new("/dev/shm").join(support::unique("guard-v1"));
    let (wrote, pinned) = call_as(
        &["write-mib", shm.to_str().expect("utf-8"), "1"],
        5,
        "/dev/shm",
    );
    assert_eq!(wrote.outcome.exit_code, 0, "stderr {:?}", wrote.stderr);
    assert_eq!(pinned, dirs);
    // (The file is still there, and charged, when the next call asks for directories.)
    let (_, next) = call(&["fork-wait", "1"], 5);
    let _ = fs::remove_file(&shm);
    assert!(next.iter().all(|d| !pinned.contains(d)), "{next:?}");
    assert!(
        pinned.iter().all(|d| !d.exists()),
        "handed on, or kept, with a tmpfs file charged: {pinned:?}"
    );
    // Nor one that leaves more than a little (what it wrote, while the file stays).
    let dirs = next;
    let file = out.join("written");
    let (wrote, charged) = call(&["write-mib", file.to_str().expect("utf-8"), "16"], 5);
    assert_eq!(wrote.outcome.exit_code, 0, "stderr {:?}", wrote.stderr);
    assert_eq!(charged, dirs);
    let (_, fresh) = call(&["fork-wait", "1"], 5);
    assert!(fresh.iter().all(|d| !dirs.contains(d)), "{fresh:?}");
    assert!(
        charged.iter().all(|d| !d.exists()),
        "handed on, or kept, with 16 MiB charged: {charged:?}"
    );
    // The directories kept go with their guard.
    drop(opts);
    assert!(
        fresh.iter().all(|d| !d.exists()),
        "outlived their guard: {fresh:?}"
    );
}

#[test]
fn sandbox_system_binaries_run_and_child_errors_name_their_stage() {
    if !support::privileged("sandbox_system_binaries_run_and_child_errors_name_their_stage") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // /bin/true under the full filter: the deny list (personality included) does not break libc.
    let mut p = plan(&s, &[], Effects::default());
    p.argv = vec!["/bin/true".into()];
    assert_eq!(run(&p).outcome.exit_code, 0);
    p.argv = vec!["/bin/false".into()];
    assert_eq!(run(&p).outcome.exit_code, 1);

    let mut p = plan(&s, &["exit", "0"], Effects::default());
    p.confinement.cwd = Some(s.dir.join("no-such-dir"));
    let cg = call_cgroup();
    match run_in(&p, &cg) {
        Err(SandboxError::Child { stage, errno }) => {
            assert_eq!((stage, errno), ("cwd", libc::ENOENT));
        }
        other => panic!("expected a cwd failure, got {:?}", other.map(|r| r.outcome)),
    }
}

#[test]
fn sandbox_strict_mode_kills_outside_the_listed_syscalls() {
    if !support::privileged("sandbox_strict_mode_kills_outside_the_listed_syscalls") {
        return;
    }
    let s = ToolDir::new("guard-sandbox");
    // The base set of strict mode is enough for a dynamically linked program to start and exit.
    let mut p = plan(&s, &[], Effects::default());
    p.argv = vec!["/bin/true".into()];
    p.confinement.syscalls = vec!["getpid".into()];
    let r = run(&p);
    assert_eq!(r.outcome.exit_code, 0, "stderr {:?}", r.stderr);

    // whoami needs getuid, getgroups...: not listed, so the kernel kills the tool with SIGSYS.
    let mut p = plan(&s, &["whoami"], Effects::default());
    p.confinement.syscalls = vec!["getpid".into()];
    let r = run(&p);
    assert_eq!(
        r.outcome.signal,
        Some(libc::SIGSYS),
        "stdout {:?}",
        r.stdout
    );
    assert!(r.stdout.is_empty());
}

#[test]
fn a_pinned_program_runs_as_checked_whatever_its_path_names_after() {
    if !support::privileged("a_pinned_program_runs_as_checked_whatever_its_path_names_after") {
        return;
    }
    ensure_user();
    let scratch = ToolDir::new("guard-pin");
    let sha256 = guard::approval::digest::Program::identify(scratch.tool.clone())
        .expect("hash the tool")
        .sha256;
    let p = plan(&scratch, &["exit", "3"], Effects::default());
    let cg = call_cgroup();
    // Another content than the approved one: not launched.
    let wrong = sandbox::prepare(&p, &cg, &options())
        .expect("prepare")
        .pin(&"0".repeat(64));
    assert!(
        matches!(wrong, Err(SandboxError::ProgramChanged { .. })),
        "{:?}",
        wrong.err()
    );
    // The approved content, checked; then the path is made to name another program...
    let ready = sandbox::prepare(&p, &cg, &options())
        .expect("prepare")
        .pin(&sha256)
        .expect("pin");
    let other = scratch.dir.join("other");
    fs::copy("/bin/true", &other).expect("copy /bin/true");
    fs::set_permissions(&other, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::rename(&other, &scratch.tool).expect("swap the program");
    // ...and the checked file runs (the tool's exit 3), not what the path names now (0).
    let null = || -> OwnedFd { fs::File::open("/dev/null").expect("/dev/null").into() };
    let launched = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        ready.start([null(), null(), null()]).expect("start")
    };
    let outcome = to_end(launched, &cg, &p).expect("run");
    assert_eq!(outcome.exit_code, 3, "{outcome:?}");
}

#[test]
fn a_child_execs_the_tool_only_past_an_open_gate_and_leaves_before_it_otherwise() {
    if !support::privileged(
        "a_child_execs_the_tool_only_past_an_open_gate_and_leaves_before_it_otherwise",
    ) {
        return;
    }
    ensure_user();
    let scratch = ToolDir::new("guard-gate");
    let p = plan(&scratch, &["exit", "3"], Effects::default());
    let cg = call_cgroup();
    let null = || -> OwnedFd { fs::File::open("/dev/null").expect("/dev/null").into() };
    let start_at = |ready: sandbox::Ready, stdio, gate: &gate::Gate| {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        ready.start_at(stdio, gate).expect("start at the gate")
    };
    let closed = |gated| match gated {
        Gated::Closed(ready, stdio) => (*ready, stdio),
        Gated::Started(_) => panic!("the tool ran past a gate that did not open"),
    };
    let ready = sandbox::prepare(&p, &cg, &options()).expect("prepare");
    // Shut (its decision row could not be written): the child leaves, and nothing of the call
    // is left in its cgroup.
    let (shut, opener) = gate::new();
    drop(opener);
    let (ready, stdio) = closed(start_at(ready, [null(), null(), null()], &shut));
    assert!(cg.pids().expect("pids").is_empty());
    // Not opened in time (the row is slow): the same, and the launch comes back whole.
    let (late, _opener) = gate::new();
    let (ready, stdio) = closed(start_at(ready, stdio, &late));
    assert!(cg.pids().expect("pids").is_empty());
    // Opened: the tool runs (its exit 3).
    let (open, opener) = gate::new();
    let opening = std::thread::spawn(move || opener.open());
    let Gated::Started(launched) = start_at(ready, stdio, &open) else {
        panic!("the child left at an open gate");
    };
    opening.join().expect("opened");
    let outcome = to_end(*launched, &cg, &p).expect("run");
    assert_eq!(outcome.exit_code, 3, "{outcome:?}");
}

/// The kernel's backstop behind guardd's Unix connects (`writes::backstop`): linked to a call's
/// cgroup, it refuses (EPERM) every Unix connect a task there makes itself, whatever the path,
/// so that what guardd lets go on in the kernel (a descriptor swapped under its look) reaches
/// nothing; guardd's own cgroup (here the test's) still connects. Unlinked, the same connects.
#[test]
fn sandbox_the_unix_backstop_refuses_a_calls_own_unix_connects() {
    if !support::privileged("sandbox_the_unix_backstop_refuses_a_calls_own_unix_connects") {
        return;
    }
    use guard::sandbox::writes::backstop::{UnixBackstop, own_cgroup_id};
    use std::os::unix::process::CommandExt as _;
    let dir = support::TempDir::new("guard-backstop");
    let path = dir.0.join("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let cg = call_cgroup();
    let own = own_cgroup_id(&cgroup::unified_mount().expect("v2")).expect("own cgroup");
    let backstop = UnixBackstop::load(own).expect("load: this kernel has connect_unix");
    let connect = |cg: &Cgroup| -> String {
        let procs = cg.procs_fd().expect("procs");
        let mut c = Command::new("python3");
        c.args([
            "-c",
            "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    \
             s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(e.errno)",
        ])
        .arg(&path);
        // SAFETY: write(2) on a descriptor opened before fork is async-signal-safe.
        unsafe {
            let fd = procs.as_raw_fd();
            c.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = c.output().expect("python3");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cg_dir = cg.dir_fd().expect("dir");
    let link = backstop
        .link(std::os::fd::AsFd::as_fd(&cg_dir))
        .expect("link");
    assert_eq!(
        connect(&cg),
        format!("{}\n", libc::EPERM),
        "refused in the kernel"
    );
    // The test's own (standing for guardd's) connects.
    let mine = std::os::unix::net::UnixStream::connect(&path);
    assert!(mine.is_ok(), "{mine:?}");
    drop(link);
    assert_eq!(connect(&cg), "connected\n", "unlinked, the same connect");
}
