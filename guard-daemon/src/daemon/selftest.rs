//! The start-up self-test: the kernel layers are proven on a live process, not assumed from
//! configuration. A canary (guardd itself, in a hidden mode) runs in a guarded cgroup that may
//! neither connect anywhere nor exec anything but itself; it must get EPERM on connect and be
//! killed when it tries to exec.

use std::{
    io::{ErrorKind, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::{
        fd::AsRawFd as _,
        unix::process::{CommandExt as _, ExitStatusExt as _},
    },
    process::{Command, Stdio},
};

use guard_common::call::{CallConfig, FLAG_ENFORCE_EXEC};

use crate::{
    monitor::{Monitor, Watch},
    sandbox::cgroup::Cgroup,
};

/// The hidden argument that turns guardd into the canary.
pub const CANARY_FLAG: &str = "--self-test-canary";

/// What the canary prints when the kernel refused its connect.
const CONNECT_DENIED: &str = "connect-denied";

/// The canary: try a connect that must be refused, then an exec that must be killed.
pub fn canary(addr: SocketAddr) -> ! {
    let mut out = std::io::stdout();
    match TcpStream::connect(addr) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            let _ = writeln!(out, "{CONNECT_DENIED}");
        }
        Ok(_) => {
            let _ = writeln!(out, "connect-allowed");
        }
        Err(e) => {
            let _ = writeln!(out, "connect-error {e}");
        }
    }
    let _ = out.flush();
    let err = Command::new("/bin/true").exec();
    let _ = writeln!(out, "exec-survived {err}");
    std::process::exit(5)
}

/// Runs the canary in a fresh cgroup under `root` and checks both layers held.
pub fn run(monitor: &mut Monitor, root: &Cgroup) -> Result<(), String> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("listener: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let cgroup = Cgroup::create(root.path(), "self-test").map_err(|e| e.to_string())?;
    let watch = Watch {
        config: CallConfig {
            flags: FLAG_ENFORCE_EXEC,
            ..CallConfig::default()
        },
        destinations: vec![],
        execs: vec![exe.clone()],
        writes: vec![],
        traced: false,
    };
    monitor
        .watch(cgroup.id(), &watch)
        .map_err(|e| e.to_string())?;
    let procs = cgroup.procs_fd().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&exe);
    cmd.arg(CANARY_FLAG)
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: write(2) on an fd opened before fork is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = cmd.output();
    let _ = monitor.unwatch(cgroup.id());
    let output = output.map_err(|e| format!("canary: {e}"))?;
    let said = String::from_utf8_lossy(&output.stdout);
    if said.is_empty() && output.status.signal() == Some(libc::SIGKILL) {
        // Killed before its first line: at its own exec, the one the allow-list approves.
        return Err(format!(
            "the canary was killed at its own exec: the kernel's exec check did not find {} in \
             its allow-list",
            exe.display()
        ));
    }
    if !said.starts_with(CONNECT_DENIED) {
        return Err(format!(
            "connect was not denied in the kernel (canary said {:?})",
            said.trim()
        ));
    }
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        _ => return Err("a connection reached the canary's listener".into()),
    }
    if output.status.signal() != Some(libc::SIGKILL) {
        return Err(format!(
            "an unapproved exec was not killed (canary ended {:?}: {})",
            output.status,
            said.trim()
        ));
    }
    Ok(())
}
