//! Kernel programs, end to end: the connect programs deny what a guarded cgroup may not reach,
//! leave every other process alone, and the exec observer reports guarded execs.

use std::{
    io::{ErrorKind, Read as _},
    net::{Ipv4Addr, TcpListener},
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use guard::{
    cgroup::{self, Cgroup},
    monitor::{Destination, Monitor},
};
use guard_common::{
    call::CallConfig,
    event::{ACTION_ALLOWED, ACTION_DENIED, Event, KIND_CONNECT, KIND_EXEC},
    net::PROTO_TCP,
};

use super::support;

/// Connects to 127.0.0.1:`port` with bash's /dev/tcp, optionally from inside `cgroup`.
fn bash_connect(port: u16, cgroup: Option<&Cgroup>) -> (Output, u32) {
    let mut cmd = Command::new("/bin/bash");
    cmd.args(["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{port}")])
        .stdin(Stdio::null())
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
    let child = cmd.spawn().expect("spawn bash");
    let pid = child.id();
    (child.wait_with_output().expect("wait bash"), pid)
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

#[test]
fn connect_programs_deny_unapproved_destinations_and_report_execs() {
    if !support::privileged("connect_programs_deny_unapproved_destinations_and_report_execs") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _enter = rt.enter();

    let unified = cgroup::unified_mount().expect("cgroup v2 mount");
    let root = Cgroup::create(&unified, &support::unique("guard-test")).expect("root cgroup");
    let call = Cgroup::create(root.path(), "call").expect("call cgroup");
    let mut monitor = Monitor::load(root.path()).expect("load and attach kernel programs");
    let mut events = monitor
        .take_events()
        .expect("events")
        .expect("event stream");

    let (denied_listener, denied_port) = listener();
    let (allowed_listener, allowed_port) = listener();
    let allowed = [Destination {
        addr: Ipv4Addr::LOCALHOST.into(),
        port: allowed_port,
        proto: PROTO_TCP,
    }];
    monitor
        .watch(call.id(), CallConfig::default(), &allowed)
        .expect("watch call");

    // Inside the call: the unapproved port is refused by the kernel and nothing reaches it.
    let (out, denied_pid) = bash_connect(denied_port, Some(&call));
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
    let (out, _) = bash_connect(allowed_port, Some(&call));
    assert!(
        out.status.success(),
        "approved connect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        has_pending(&allowed_listener),
        "the approved listener saw nothing"
    );

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
    let mut seen: Vec<Event> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let want = |seen: &[Event]| {
        let exec = seen
            .iter()
            .any(|e| e.kind == KIND_EXEC && e.pid == denied_pid);
        let deny = seen
            .iter()
            .any(|e| e.kind == KIND_CONNECT && e.action == ACTION_DENIED);
        exec && deny
    };
    while !want(&seen) && Instant::now() < deadline {
        let mut batch = Vec::new();
        let _ = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(200), events.next_batch(&mut batch)).await
        });
        seen.extend(batch);
    }
    let exec = seen
        .iter()
        .find(|e| e.kind == KIND_EXEC && e.pid == denied_pid)
        .unwrap_or_else(|| panic!("no exec event for pid {denied_pid}"));
    assert_eq!(exec.cgroup_id, call.id());
    assert_eq!(exec.action, ACTION_ALLOWED);
    let path = exec.path.split(|&b| b == 0).next().unwrap_or_default();
    assert_eq!(path, b"/bin/bash");

    let deny = seen
        .iter()
        .find(|e| e.kind == KIND_CONNECT && e.action == ACTION_DENIED)
        .expect("no connect-denied event");
    assert_eq!(
        (deny.cgroup_id, deny.port, deny.proto),
        (call.id(), denied_port, PROTO_TCP)
    );
    assert_eq!(&deny.addr[..4], &[127, 0, 0, 1]);
    assert!(
        seen.iter().all(|e| e.cgroup_id == call.id()),
        "an event came from outside the guarded cgroup"
    );
    assert_eq!(monitor.dropped().expect("counters"), 0);
}
