//! Launches from a persistent client: what an agent feels. Agents reach guard through
//! guard-mcp, the Python client or a hook, each one process that stays up and sends `exec`
//! frames over the socket; guard-exec's own start is a shell user's cost, not the guard's. This
//! driver is such a client: it runs `/bin/true` through guardd (a connection, an `exec` with
//! its stdio, the decision, the exit), with its own fork+exec, and confined by bwrap, in turn.
//! Bare fork+exec is the goal's baseline; bwrap, a confinement the same client could choose
//! instead, is one whose cost moves with the host's as guard's does.

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

/// The rows `launch from a client p50` and `p99`, and the same against bwrap (info).
pub fn launch_from_a_client(bin_dir: &Path, scale: &Scale, report: &mut Report) -> Result<()> {
    let mut guardd = Guardd::start(bin_dir, POLICY, &[])?;
    let open = || std::fs::File::open("/dev/null");
    let null = [open()?, open()?, open()?];
    // Warm every path once.
    exec_true(&guardd.socket, &null)?;
    fork_exec_true()?;
    bwrap_true()?;
    let (mut guarded, mut bare, mut bwrap) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..scale.launch_runs {
        // Rotating which goes first, so none always follows another.
        for turn in 0..3 {
            match (round + turn) % 3 {
                0 => guarded.push(exec_true(&guardd.socket, &null)?),
                1 => bare.push(fork_exec_true()?),
                _ => bwrap.push(bwrap_true()?),
            }
        }
    }
    guardd.stop()?;
    let (g50, g99) = p50_p99(&mut guarded);
    let (b50, b99) = p50_p99(&mut bare);
    let (w50, w99) = p50_p99(&mut bwrap);
    let note = format!(
        "{} calls each, alternating: a connection and an `exec` frame with /dev/null as stdio, \
         to the exit reply (both audit rows durable), against the same process's own \
         fork+exec of /bin/true",
        scale.launch_runs
    );
    report.rows.push(
        Row::new("launch from a client p50", "ms", g50)
            .baseline("the client's fork+exec", b50)
            .goal(Goal::RatioAtMost(2.0))
            .note(note),
    );
    report.rows.push(
        Row::new("launch from a client p99", "ms", g99)
            .baseline("the client's fork+exec", b99)
            .goal(Goal::RatioAtMost(2.5)),
    );
    for (name, guard, bwrap) in [("p50", g50, w50), ("p99", g99, w99)] {
        report.rows.push(
            Row::new(format!("launch from a client {name} vs bwrap"), "ms", guard)
                .baseline("the client's bwrap --unshare-all", bwrap),
        );
    }
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
