//! Launches from a persistent client: what an agent feels. Agents reach guard through
//! guard-mcp, the Python client or a hook, each one process that stays up and sends `exec`
//! frames over the socket; guard-exec's own start is a shell user's cost, not the guard's. This
//! driver is such a client: it runs `/bin/true` through guardd (a connection, an `exec` with
//! its stdio, the decision, the exit), with its own fork+exec, confined by bwrap, and at the
//! floor of what guard does, in turn. The goals are against what moves with the host as guard's
//! cost does: bwrap, a confinement the same client could choose instead, and the floor: the
//! tool started in namespaces like a call's, and the two audit rows' `fdatasync`s, which no
//! guarded launch can go below. Bare fork+exec is shown, as information.

use std::{
    io::{BufRead as _, BufReader},
    os::{
        fd::AsRawFd as _,
        unix::{fs::PermissionsExt as _, net::UnixStream, process::CommandExt as _},
    },
    path::Path,
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    Scale,
    daemon::{Guardd, TempDir},
    report::{Goal, Report, Row, p50_p99},
};

/// `/bin/true` as a tool.
const POLICY: &str = "[tools.true]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n";

/// One call of `true` from this process over `socket`, with /dev/null as its stdio, to its
/// exit reply; its wall time in ms.
fn exec_true(socket: &Path, null: &[std::fs::File; 3]) -> Result<f64> {
    let t = Instant::now();
    let stream = UnixStream::connect(socket).context("connect")?;
    let fds: Vec<i32> = null.iter().map(|f| f.as_raw_fd()).collect();
    let frame = b"{\"v\":1,\"type\":\"exec\",\"tool\":\"true\",\"args\":{}}\n";
    guard::protocol::conn::send_with_fds(&stream, frame, &fds).context("send")?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).context("read")? == 0 {
            bail!("guardd closed the connection");
        }
        if line.contains("\"type\":\"exit\"") {
            break;
        }
        if line.contains("\"type\":\"error\"") || line.contains("\"decision\":\"block\"") {
            bail!("refused: {line}");
        }
    }
    if !line.contains("\"code\":0") {
        bail!("not a success: {line}");
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// `/bin/true` run by this process itself, as the client would without guard.
fn fork_exec_true() -> Result<f64> {
    run(&mut Command::new("/bin/true"))
}

/// `/bin/true` run by this process in bwrap's namespaces, as the bench's launch phase runs it.
fn bwrap_true() -> Result<f64> {
    run(Command::new("bwrap").args(["--unshare-all", "--ro-bind", "/", "/", "/bin/true"]))
}

/// The namespaces a call of `/bin/true` is cloned into: a call that connects nowhere gets a
/// network of its own.
const CALL_NAMESPACES: libc::c_int = libc::CLONE_NEWPID
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS;

/// The floor of a guarded launch of `/bin/true`: a decision row of the size guardd writes
/// appended to a file beside the audit log and `fdatasync`ed, `/bin/true` cloned into
/// [`CALL_NAMESPACES`] and waited for, and the end row, synced the same way; its wall time in
/// ms.
fn floor_true(rows: &mut std::fs::File, null: &std::fs::File) -> Result<f64> {
    use std::io::Write as _;
    // About the size of the rows of a call of `true` (decision and finished).
    let row = [b'x'; 900];
    let t = Instant::now();
    rows.write_all(&row)?;
    rows.sync_data()?;
    let program = c"/bin/true";
    let argv = [program.as_ptr(), std::ptr::null()];
    let fd = null.as_raw_fd();
    // SAFETY: a fork with namespaces; the child only calls dup2, execv and _exit, which are
    // async-signal-safe, on values made before the clone.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_long::from(CALL_NAMESPACES | libc::SIGCHLD),
            0,
            0,
            0,
            0,
        )
    };
    if pid == 0 {
        // SAFETY: as above, in the child.
        unsafe {
            for target in 0..3 {
                libc::dup2(fd, target);
            }
            libc::execv(program.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    }
    if pid < 0 {
        bail!("clone: {}", std::io::Error::last_os_error());
    }
    let mut status = 0;
    // SAFETY: waiting for the child just made.
    if unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) } < 0 || status != 0 {
        bail!("the floor's /bin/true: status {status}");
    }
    rows.write_all(&row)?;
    rows.sync_data()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// `cmd` run to its exit with /dev/null as its stdio; its wall time in ms.
fn run(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("{:?}: {status}", cmd.get_program());
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// The rows `launch from a client p50` and `p99` against the client's fork+exec (information),
/// `launch from a client p50 vs bwrap` and `p99 vs bwrap`, and `launch from a client vs floor`.
pub fn launch_from_a_client(bin_dir: &Path, scale: &Scale, report: &mut Report) -> Result<()> {
    let mut guardd = Guardd::start(bin_dir, POLICY, &[])?;
    let open = || std::fs::File::open("/dev/null");
    let null = [open()?, open()?, open()?];
    // The floor's rows, on the audit log's file system.
    let floor_rows = guardd.audit.with_extension("floor");
    let mut rows = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&floor_rows)?;
    // Warm every path once.
    exec_true(&guardd.socket, &null)?;
    fork_exec_true()?;
    bwrap_true()?;
    floor_true(&mut rows, &null[0])?;
    let (mut guarded, mut bare, mut bwrap, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..scale.launch_runs {
        // Rotating which goes first, so none always follows another.
        for turn in 0..4 {
            match (round + turn) % 4 {
                0 => guarded.push(exec_true(&guardd.socket, &null)?),
                1 => bare.push(fork_exec_true()?),
                2 => bwrap.push(bwrap_true()?),
                _ => floor.push(floor_true(&mut rows, &null[0])?),
            }
        }
    }
    guardd.stop()?;
    drop(rows);
    let _ = std::fs::remove_file(&floor_rows);
    let (g50, g99) = p50_p99(&mut guarded);
    let (b50, b99) = p50_p99(&mut bare);
    let (w50, w99) = p50_p99(&mut bwrap);
    let (f50, _) = p50_p99(&mut floor);
    let note = format!(
        "{} calls each, alternating: a connection and an `exec` frame with /dev/null as stdio, \
         to the exit reply (both audit rows durable), against the same process's own \
         fork+exec of /bin/true",
        scale.launch_runs
    );
    report.rows.push(
        Row::new("launch from a client p50", "ms", g50)
            .baseline("the client's fork+exec", b50)
            .note(note),
    );
    report.rows.push(
        Row::new("launch from a client p99", "ms", g99).baseline("the client's fork+exec", b99),
    );
    for (name, guard, bwrap) in [("p50", g50, w50), ("p99", g99, w99)] {
        report.rows.push(
            Row::new(format!("launch from a client {name} vs bwrap"), "ms", guard)
                .baseline("the client's bwrap --unshare-all", bwrap)
                .goal(Goal::RatioAtMost(0.7)),
        );
    }
    report.rows.push(
        Row::new("launch from a client vs floor", "ms", g50)
            .baseline(
                "true cloned into a call's namespaces, two rows fdatasync'd",
                f50,
            )
            .goal(Goal::RatioAtMost(1.5))
            .note(
                "p50s; the floor: a 900-byte row appended and fdatasync'd on the audit log's \
                 file system, /bin/true cloned into new pid, mount, ipc, net and uts namespaces \
                 and waited for, and a second row synced",
            ),
    );
    Ok(())
}

/// The uid that floods guardd in `call latency under a connection flood`: no user's, listed as
/// a client so that it gets a whole uid's share, not a stranger's.
const FLOODER: u32 = 40_001;

/// `guard-testtool flood` as [`FLOODER`]: 5,000 connections to `socket`, 64 of them silent
/// followers, reopened as guardd closes them; returns once they were tried.
fn flood(bin_dir: &Path, dir: &TempDir, socket: &Path) -> Result<Child> {
    // A copy the flooding uid can run (the build's directory may not be open to it).
    let tool = dir.join("guard-testtool");
    std::fs::copy(bin_dir.join("guard-testtool"), &tool).context("copying guard-testtool")?;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))?;
    let mut cmd = Command::new(&tool);
    cmd.arg("flood")
        .arg(socket)
        .args(["5000", "64", "1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // SAFETY: setgroups/setgid/setuid between fork and exec are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(FLOODER) < 0
                || libc::setuid(FLOODER) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("spawning the flood")?;
    let mut line = String::new();
    let stdout = child.stdout.take().context("the flood's stdout")?;
    BufReader::new(stdout).read_line(&mut line)?;
    if !line.starts_with("flooding") {
        let _ = child.kill();
        bail!("the flood did not start: {line:?}");
    }
    Ok(child)
}

/// The row `call latency under a connection flood p99`: root's calls while another uid holds
/// every connection guardd gives it, against the same calls on the same guardd just before.
pub fn latency_under_a_flood(bin_dir: &Path, scale: &Scale, report: &mut Report) -> Result<()> {
    let policy = format!("[settings]\nclients = [{FLOODER}]\n\n{POLICY}");
    let mut guardd = Guardd::start(bin_dir, &policy, &[])?;
    // The socket is 0660 root:root: the flooder meets the fair admission, not the file mode.
    std::fs::set_permissions(&guardd.socket, std::fs::Permissions::from_mode(0o666))?;
    let open = || std::fs::File::open("/dev/null");
    let null = [open()?, open()?, open()?];
    exec_true(&guardd.socket, &null)?;
    let runs = scale.launch_runs.min(300);
    let quiet: Result<Vec<f64>> = (0..runs)
        .map(|_| exec_true(&guardd.socket, &null))
        .collect();
    let dir = TempDir::new("guard-bench-flood")?;
    let mut flooder = flood(bin_dir, &dir, &guardd.socket)?;
    let flooded: Result<Vec<f64>> = (0..runs)
        .map(|_| exec_true(&guardd.socket, &null))
        .collect();
    let _ = flooder.kill();
    let _ = flooder.wait();
    guardd.stop()?;
    let (_, q99) = p50_p99(&mut quiet?);
    let (_, f99) = p50_p99(&mut flooded?);
    report.rows.push(
        Row::new("call latency under a connection flood p99", "ms", f99)
            .baseline("the same calls, no flood", q99)
            .goal(Goal::RatioAtMost(2.0))
            .note(format!(
                "{runs} calls of /bin/true from root, then {runs} more while uid {FLOODER} \
                 holds 5,000 connections to guardd (64 of them silent followers), reopened \
                 as guardd refuses or drops them"
            )),
    );
    Ok(())
}
