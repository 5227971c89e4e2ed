//! Kernel programs, end to end: the connect programs deny what a guarded cgroup may not reach
//! and leave every other process alone; the exec program reports guarded execs and kills an
//! unapproved image before it runs.

use std::{
    io::{ErrorKind, Read as _},
    net::{Ipv4Addr, TcpListener},
    os::{
        fd::AsRawFd as _,
        unix::process::{CommandExt as _, ExitStatusExt as _},
    },
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use guard::{
    monitor::{Destination, EventStream, Monitor, Watch},
    sandbox::cgroup::{self, Cgroup},
};
use guard_common::{
    call::{CallConfig, FLAG_ENFORCE_EXEC, FLAG_NET},
    event::{
        ACTION_ALLOWED, ACTION_DENIED, ACTION_KILLED, Event, KIND_CONNECT, KIND_EXEC, KIND_SOCKET,
    },
    net::PROTO_TCP,
};

use super::support;

/// A guard root cgroup with one call cgroup, and the kernel programs attached to the root.
/// Field order is drop order: programs detach before the cgroups are removed.
struct Kernel {
    rt: tokio::runtime::Runtime,
    monitor: Monitor,
    events: EventStream,
    call: Cgroup,
    _root: Cgroup,
}

impl Kernel {
    fn new(watch: impl FnOnce(&Cgroup) -> Watch) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let unified = cgroup::unified_mount().expect("cgroup v2 mount");
        let root = Cgroup::create(&unified, &support::unique("guard-test")).expect("root cgroup");
        let call = Cgroup::create(root.path(), "call").expect("call cgroup");
        let (monitor, events) = {
            let _enter = rt.enter();
            let mut monitor = Monitor::load(root.path(), true, guard::monitor::DEFAULT_RING_BYTES)
                .expect("load and attach kernel programs");
            let events = monitor
                .take_events()
                .expect("events")
                .expect("event stream");
            (monitor, events)
        };
        let mut kernel = Self {
            rt,
            monitor,
            events,
            call,
            _root: root,
        };
        let watch = watch(&kernel.call);
        kernel
            .monitor
            .watch(kernel.call.id(), &watch)
            .expect("watch call");
        kernel
    }

    /// Collects events until `done` says so or 5 seconds pass.
    fn events_until(&mut self, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let mut seen: Vec<Event> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(&seen) && Instant::now() < deadline {
            let mut batch = Vec::new();
            let events = &mut self.events;
            let _ = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(200), events.next_batch(&mut batch))
                    .await
            });
            seen.extend(batch);
        }
        seen
    }
}

/// Runs `script` with bash, from inside `cgroup` if given.
fn bash(script: &str, cgroup: Option<&Cgroup>) -> (Output, u32) {
    let mut cmd = Command::new("/bin/bash");
    cmd.args(["-c", script]);
    run_in(cmd, cgroup)
}

/// Runs guard-testtool with `args` (as root, without seccomp or landlock), inside `cgroup` if given.
fn testtool(args: &[&str], cgroup: Option<&Cgroup>) -> (Output, u32) {
    let mut cmd = Command::new(support::bin("guard-testtool"));
    cmd.args(args);
    run_in(cmd, cgroup)
}

/// Runs `cmd` to its end, from inside `cgroup` if given; returns its output and pid.
fn run_in(mut cmd: Command, cgroup: Option<&Cgroup>) -> (Output, u32) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cgroup) = cgroup {
        let procs = cgroup.procs_fd().expect("open cgroup.procs");
        // SAFETY: write(2) on an fd opened before fork is async-signal-safe and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd.spawn().expect("spawn");
    let pid = child.id();
    (child.wait_with_output().expect("wait"), pid)
}

/// Connects to 127.0.0.1:`port` with bash's /dev/tcp.
fn bash_connect(port: u16, cgroup: Option<&Cgroup>) -> (Output, u32) {
    bash(&format!("exec 3<>/dev/tcp/127.0.0.1/{port}"), cgroup)
}

/// True if a connection is waiting on `listener` (non-blocking).
fn has_pending(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).expect("nonblocking");
    match listener.accept() {
        Ok((mut stream, _)) => {
            let _ = stream.read(&mut [0; 1]);
            true
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

fn path_of(event: &Event) -> &[u8] {
    event.path.split(|&b| b == 0).next().unwrap_or_default()
}

#[test]
fn connect_programs_deny_unapproved_destinations_and_report_execs() {
    if !support::privileged("connect_programs_deny_unapproved_destinations_and_report_execs") {
        return;
    }
    let (denied_listener, denied_port) = listener();
    let (allowed_listener, allowed_port) = listener();
    let mut kernel = Kernel::new(|_| Watch {
        config: CallConfig {
            flags: FLAG_NET,
            ..CallConfig::default()
        },
        destinations: vec![Destination {
            addr: Ipv4Addr::LOCALHOST.into(),
            port: allowed_port,
            proto: PROTO_TCP,
            prefix: None,
        }],
        ..Watch::default()
    });
    let call_id = kernel.call.id();

    // Inside the call: the unapproved port is refused by the kernel and nothing reaches it.
    let (out, denied_pid) = bash_connect(denied_port, Some(&kernel.call));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "connect to an unapproved port succeeded"
    );
    assert!(
        stderr.contains("Operation not permitted"),
        "expected EPERM, got: {stderr}"
    );
    assert!(
        !has_pending(&denied_listener),
        "the unapproved listener saw a connection"
    );

    // Inside the call: the approved destination works.
    let (out, _) = bash_connect(allowed_port, Some(&kernel.call));
    assert!(
        out.status.success(),
        "approved connect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        has_pending(&allowed_listener),
        "the approved listener saw nothing"
    );
    // Again: it works again, and is not reported again (no event per connect in a loop).
    let (out, _) = bash_connect(allowed_port, Some(&kernel.call));
    assert!(out.status.success(), "second approved connect failed");
    // A second refusal, after it, so that every earlier event has been read once it is seen.
    let (out, _) = bash_connect(denied_port, Some(&kernel.call));
    assert!(!out.status.success(), "second unapproved connect succeeded");

    // Outside the guard's cgroups: the same unapproved port is reachable.
    let (out, _) = bash_connect(denied_port, None);
    assert!(
        out.status.success(),
        "unguarded connect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        has_pending(&denied_listener),
        "the unguarded connect did not arrive"
    );

    // The kernel reported the guarded exec and the denied connect, and nothing of the outsider.
    let connects = |seen: &[Event], action| {
        seen.iter()
            .filter(|e| e.kind == KIND_CONNECT && e.action == action)
            .count()
    };
    let seen = kernel.events_until(|seen| {
        seen.iter()
            .any(|e| e.kind == KIND_EXEC && e.pid == denied_pid)
            && connects(seen, ACTION_DENIED) == 2
    });
    assert_eq!(
        connects(&seen, ACTION_ALLOWED),
        1,
        "approved connects reported"
    );
    let exec = seen
        .iter()
        .find(|e| e.kind == KIND_EXEC && e.pid == denied_pid)
        .unwrap_or_else(|| panic!("no exec event for pid {denied_pid}"));
    assert_eq!((exec.cgroup_id, exec.action), (call_id, ACTION_ALLOWED));
    assert_eq!(path_of(exec), b"/bin/bash");
    let deny = seen
        .iter()
        .find(|e| e.kind == KIND_CONNECT && e.action == ACTION_DENIED)
        .expect("no connect-denied event");
    assert_eq!(
        (deny.cgroup_id, deny.port, deny.proto),
        (call_id, denied_port, PROTO_TCP)
    );
    assert_eq!(&deny.addr[..4], &[127, 0, 0, 1]);
    assert!(
        seen.iter().all(|e| e.cgroup_id == call_id),
        "an event came from outside the guarded cgroup"
    );
    assert_eq!(kernel.monitor.dropped().expect("counters"), 0);
}

#[test]
fn an_unapproved_exec_is_killed_before_the_image_runs() {
    if !support::privileged("an_unapproved_exec_is_killed_before_the_image_runs") {
        return;
    }
    let mut kernel = Kernel::new(|_| Watch {
        config: CallConfig {
            flags: FLAG_ENFORCE_EXEC,
            ..CallConfig::default()
        },
        execs: vec!["/bin/bash".into()],
        ..Watch::default()
    });
    let marker = std::env::temp_dir().join(support::unique("guard-exec-marker"));
    // bash may run (approved); it then execs /bin/sh in place, which is not approved.
    let script = format!(
        "echo bash-ran; exec /bin/sh -c 'echo sh-ran > {}'",
        marker.display()
    );
    let (out, pid) = bash(&script, Some(&kernel.call));
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "sh was not killed: {:?}",
        out.status
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "bash-ran\n",
        "the approved image did not run"
    );
    assert!(!marker.exists(), "sh ran: its marker file exists");

    let seen = kernel.events_until(|seen| seen.iter().any(|e| e.action == ACTION_KILLED));
    let killed = seen
        .iter()
        .find(|e| e.action == ACTION_KILLED)
        .expect("no kill event");
    assert_eq!(
        (killed.kind, killed.pid, killed.cgroup_id),
        (KIND_EXEC, pid, kernel.call.id())
    );
    assert_eq!(path_of(killed), b"/bin/sh");
    let bash_exec = seen
        .iter()
        .find(|e| e.kind == KIND_EXEC && e.action == ACTION_ALLOWED)
        .expect("no bash exec event");
    assert_eq!(path_of(bash_exec), b"/bin/bash");

    // The same exec outside any guarded cgroup is untouched.
    let status = Command::new("/bin/sh")
        .args(["-c", "exit 3"])
        .status()
        .expect("sh");
    assert_eq!(status.code(), Some(3));
}

/// Asserts that guard-testtool's `socket FAMILY TYPE` succeeded or failed with EPERM.
fn assert_socket(out: &Output, ok: bool, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if ok {
        assert!(out.status.success(), "{what}: refused: {stderr}");
    } else {
        assert!(!out.status.success(), "{what}: created");
        assert!(
            stderr.contains("ERR EPERM"),
            "{what}: expected EPERM, got: {stderr}"
        );
    }
}

/// Asserts that guard-testtool was killed by SIGKILL before its action printed anything.
fn assert_killed(out: &Output, what: &str) {
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{what}: not killed: {:?}",
        out.status
    );
    assert!(out.stdout.is_empty(), "{what}: the socket was created");
}

#[test]
fn sock_create_refuses_sockets_outside_the_calls_needs() {
    if !support::privileged("sock_create_refuses_sockets_outside_the_calls_needs") {
        return;
    }
    // A call without connect effects: AF_UNIX only. The tool runs as root without seccomp, so
    // only the kernel programs can refuse: sock_create with EPERM for inet families, the
    // sys_enter_socket tracepoint with SIGKILL for the others (sock_create never sees them).
    let mut kernel = Kernel::new(|_| Watch::default());
    let call = Some(&kernel.call);
    let (out, packet_pid) = testtool(&["socket", "packet", "raw"], call);
    assert_killed(&out, "packet raw in a call");
    let (out, inet6_pid) = testtool(&["socket", "inet6", "stream"], call);
    assert_socket(&out, false, "inet6 stream without connect effects");
    let (out, _) = testtool(&["socket", "netlink", "raw"], call);
    assert_killed(&out, "netlink in a call");
    let (out, _) = testtool(&["socket", "unix", "stream"], call);
    assert_socket(&out, true, "unix stream in a call");

    // Outside the guard's cgroups, root creates all of them.
    for (family, ty) in [("packet", "raw"), ("inet6", "stream"), ("netlink", "raw")] {
        let (out, _) = testtool(&["socket", family, ty], None);
        assert_socket(&out, true, &format!("{family} {ty} outside"));
    }

    let seen =
        kernel.events_until(|seen| seen.iter().filter(|e| e.kind == KIND_SOCKET).count() >= 3);
    let sockets: Vec<&Event> = seen.iter().filter(|e| e.kind == KIND_SOCKET).collect();
    assert_eq!(sockets.len(), 3, "one event per refused socket");
    assert!(sockets.iter().all(|e| e.cgroup_id == kernel.call.id()));
    let packet = sockets
        .iter()
        .find(|e| e.pid == packet_pid)
        .expect("no event for the packet socket");
    assert_eq!(
        (
            i32::from(packet.family),
            packet.sock_type as i32,
            packet.action
        ),
        (libc::AF_PACKET, libc::SOCK_RAW, ACTION_KILLED)
    );
    let inet6 = sockets
        .iter()
        .find(|e| e.pid == inet6_pid)
        .expect("no event for the inet6 socket");
    assert_eq!(
        (
            i32::from(inet6.family),
            inet6.sock_type as i32,
            inet6.action
        ),
        (libc::AF_INET6, libc::SOCK_STREAM, ACTION_DENIED)
    );
}

#[test]
fn sock_create_allows_inet_sockets_to_a_call_with_connect_effects() {
    if !support::privileged("sock_create_allows_inet_sockets_to_a_call_with_connect_effects") {
        return;
    }
    let kernel = Kernel::new(|_| Watch {
        config: CallConfig {
            flags: FLAG_NET,
            ..CallConfig::default()
        },
        ..Watch::default()
    });
    let call = Some(&kernel.call);
    for (family, ty) in [("inet", "stream"), ("inet6", "dgram")] {
        let (out, _) = testtool(&["socket", family, ty], call);
        assert_socket(
            &out,
            true,
            &format!("{family} {ty} in a call with FLAG_NET"),
        );
    }
    // socket(AF_INET, SOCK_RAW, IPPROTO_ICMP): testtool's `socket` passes protocol 0, which
    // inet refuses for raw sockets before the hook runs.
    let raw_icmp = ["syscall", "41", "2", "3", "1"];
    let (out, _) = testtool(&raw_icmp, call);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "syscall 41 errno EPERM 1",
        "inet raw with FLAG_NET"
    );
    let (out, _) = testtool(&raw_icmp, None);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("syscall 41 ok"),
        "inet raw outside: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for (family, ty) in [("packet", "dgram"), ("netlink", "dgram")] {
        let (out, _) = testtool(&["socket", family, ty], call);
        assert_killed(&out, &format!("{family} {ty} with FLAG_NET"));
    }
}

#[test]
fn sys_enter_records_the_syscalls_of_a_call_only() {
    if !support::privileged("sys_enter_records_the_syscalls_of_a_call_only") {
        return;
    }
    let kernel = Kernel::new(|_| Watch::default());
    let id = kernel.call.id();
    // The test process itself makes syscalls all the time, outside the call: none count.
    assert_eq!(
        kernel.monitor.syscalls(id).expect("read set"),
        Vec::<u32>::new()
    );

    // getcpu(NULL, NULL, NULL): a syscall guard-testtool makes only when asked.
    let getcpu = libc::SYS_getcpu as u32;
    let (out, _) = testtool(&["syscall", &getcpu.to_string()], None);
    assert!(out.status.success(), "getcpu outside");
    assert_eq!(
        kernel.monitor.syscalls(id).expect("read set"),
        Vec::<u32>::new()
    );

    let (out, _) = testtool(&["syscall", &getcpu.to_string()], Some(&kernel.call));
    assert!(out.status.success(), "getcpu in the call");
    let set = kernel.monitor.syscalls(id).expect("read set");
    for nr in [getcpu, libc::SYS_execve as u32, libc::SYS_write as u32] {
        assert!(set.contains(&nr), "syscall {nr} missing from {set:?}");
    }
    assert!(!set.contains(&(libc::SYS_io_uring_setup as u32)), "{set:?}");

    // A cgroup the guard does not watch has no set.
    let other = Cgroup::create(kernel._root.path(), "other").expect("cgroup");
    assert_eq!(
        kernel.monitor.syscalls(other.id()).expect("read"),
        Vec::<u32>::new()
    );
}
