//! Fair admission (issue 32): one uid that floods guardd with connections and silent followers
//! stops no one but itself, every connection has read and write deadlines, and a client gives up
//! on a guardd that does not take its call (75) instead of hanging. Each attack runs beside its
//! control: another uid's calls and root's `guardctl status`, timed.

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::{
        fd::AsRawFd as _,
        unix::{fs::PermissionsExt as _, net::UnixStream, process::CommandExt as _},
    },
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::support::{self, FORK_LOCK, Guardd, TempDir, ToolDir};

/// The flooding uid and the well-behaved one: ids of no user, which SO_PEERCRED reports as they
/// are, both listed as clients.
const HOSTILE: u32 = 40_001;
const CALLER: u32 = 40_002;

fn policy() -> String {
    format!(
        r#"
[settings]
clients = [{HOSTILE}, {CALLER}]

[tools.exit_with]
tier = "low"
command = ["/bin/sh", "-c", "exit \"$0\"", "{{code}}"]
[tools.exit_with.args.code]
type = "integer"
min = 0
max = 255
[tools.exit_with.effects]
exec = ["/bin/sh"]

[tools.pause]
tier = "low"
command = ["/bin/sleep", "30"]
"#
    )
}

/// `cmd` run as `uid` (its gid too, no supplementary groups).
pub(super) fn as_uid(cmd: &mut Command, uid: u32) -> &mut Command {
    // SAFETY: setgroups/setgid/setuid between fork and exec are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(uid) < 0
                || libc::setuid(uid) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Runs `cmd` with no stdin; its output and how long it took, or `None` (killed) when it ran
/// past `limit`: a hang fails the test in seconds, not at the idle timeout. Its output goes to
/// files, not pipes: guard-exec passes its stdio to guardd, and a socket that never accepts
/// would hold a pipe's write end open for good.
pub(super) fn timed(mut cmd: Command, limit: Duration) -> Option<(Output, Duration)> {
    let dir = TempDir::new("guard-timed");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out).expect("stdout file"))
        .stderr(fs::File::create(&err).expect("stderr file"));
    let started = Instant::now();
    let mut child = {
        let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("spawn")
    };
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let output = Output {
        status,
        stdout: fs::read(&out).expect("stdout"),
        stderr: fs::read(&err).expect("stderr"),
    };
    Some((output, took))
}

/// A copy of a workspace binary that any uid may run (the target directory may not be
/// traversable by it).
pub(super) fn runnable(dir: &TempDir, name: &str) -> PathBuf {
    let copy = dir.join(name);
    fs::copy(support::bin(name), &copy).expect("copy");
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).expect("chmod");
    copy
}

/// The flooding client, killed on drop.
struct Flood(Child);

impl Flood {
    /// `guard-testtool flood` as [`HOSTILE`]: `n` connections, the first `followers` of them
    /// following the tool list without ever reading, those guardd closes (refused, idle,
    /// dropped) opened again every second. Returns once the first `n` were tried.
    fn start(tools: &ToolDir, socket: &Path, n: usize, followers: usize) -> Self {
        let mut cmd = Command::new(&tools.tool);
        cmd.args(["flood", &socket.display().to_string()])
            .args([n.to_string(), followers.to_string(), "1000".into()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        as_uid(&mut cmd, HOSTILE);
        let mut child = {
            let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
            cmd.spawn().expect("spawn the flood")
        };
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("flood");
        assert!(line.starts_with("flooding"), "flood: {line:?}");
        Self(child)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// guardd's status as root's `guardctl status --json` gives it, within `limit`.
#[track_caller]
fn status_within(guardd: &Guardd, limit: Duration) -> (Value, Duration) {
    let (out, took) = timed(guardd.ctl(&["status", "--json"]), limit)
        .unwrap_or_else(|| panic!("guardctl status did not answer within {limit:?}"));
    assert!(out.status.success(), "{out:?}");
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    (status, took)
}

/// `calls` calls of [`CALLER`], one after another, each within `limit`; their slowest.
#[track_caller]
fn calls_complete(guardd: &Guardd, exec: &Path, calls: usize, limit: Duration) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in 0..calls {
        let mut cmd = Command::new(exec);
        cmd.arg("--socket")
            .arg(&guardd.socket)
            .args(["exit_with", "code:=5"]);
        as_uid(&mut cmd, CALLER);
        let (out, took) = timed(cmd, limit).unwrap_or_else(|| {
            panic!("call {i} of uid {CALLER} did not complete within {limit:?}")
        });
        assert_eq!(out.status.code(), Some(5), "call {i}: {out:?}");
        slowest = slowest.max(took);
    }
    slowest
}

/// The hostile uid's own next call is refused as busy (75) at once, not left hanging.
#[track_caller]
fn the_flooder_hears_busy(guardd: &Guardd, exec: &Path) {
    let mut cmd = Command::new(exec);
    cmd.arg("--socket")
        .arg(&guardd.socket)
        .args(["exit_with", "code:=5"]);
    as_uid(&mut cmd, HOSTILE);
    let (out, _) = timed(cmd, Duration::from_secs(20)).expect("the flooder's call ended");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(stderr.contains("busy"), "{stderr}");
}

fn guardd_for_two_uids(extra: &[&str]) -> Guardd {
    let guardd = Guardd::start_with(&policy(), extra);
    // The socket is 0660 root:root: open it up, so the access rules and the fair admission,
    // not the file mode, are what the two uids meet.
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
    guardd
}

#[test]
fn fair_thousands_of_connections_from_one_uid_stop_no_other_uid() {
    if !support::privileged("fair_thousands_of_connections_from_one_uid_stop_no_other_uid") {
        return;
    }
    let tools = ToolDir::new("guard-fair");
    let exec = runnable(&tools.dir, "guard-exec");
    let guardd = guardd_for_two_uids(&[]);
    // Control, before the flood: the caller's calls and root's status.
    let quiet = calls_complete(&guardd, &exec, 3, Duration::from_secs(20));

    // 5,000 idle connections and 64 silent followers from one uid, reopened as guardd closes
    // them. Before fair admission, 4,096 of them took every connection slot and the rest filled
    // the listen queue: a call waited for the idle timeout, 28 s, again and again.
    let flood = Flood::start(&tools, &guardd.socket, 5000, 64);
    let slowest = calls_complete(&guardd, &exec, 20, Duration::from_secs(5));
    let (status, took) = status_within(&guardd, Duration::from_secs(5));
    the_flooder_hears_busy(&guardd, &exec);
    // What guardd holds of the flood: one uid's cap, its followers' cap.
    let held = &status["connections"];
    let open = held["open"].as_u64().expect("open");
    assert!(open <= 256 + 2, "guardd holds {open} connections: {held}");
    assert!(open >= 200, "the flood did not reach guardd: {held}");
    assert!(held["followers"].as_u64() <= Some(8), "{held}");
    eprintln!(
        "calls: {quiet:?} quiet, slowest {slowest:?} under the flood; status {took:?}; {held}"
    );
    drop(flood);
}

#[test]
fn fair_silent_followers_with_few_connections_block_no_one() {
    if !support::privileged("fair_silent_followers_with_few_connections_block_no_one") {
        return;
    }
    let tools = ToolDir::new("guard-fair");
    let exec = runnable(&tools.dir, "guard-exec");
    // The issue's case: sixteen silent followers held every connection of a guardd with
    // --max-connections 16, calls and `guardctl status` included, for good.
    let guardd = guardd_for_two_uids(&["--max-connections", "16"]);
    let flood = Flood::start(&tools, &guardd.socket, 64, 64);
    calls_complete(&guardd, &exec, 10, Duration::from_secs(5));
    let (status, _) = status_within(&guardd, Duration::from_secs(5));
    the_flooder_hears_busy(&guardd, &exec);
    let held = &status["connections"];
    // The flooder's reserve (8) and the pool (16); 8 of them follow.
    assert!(held["open"].as_u64() <= Some(8 + 16 + 2), "{held}");
    assert!(held["followers"].as_u64() <= Some(8), "{held}");
    drop(flood);
}

/// Whether guardd has closed its end of `s` within `within` (unread data or not).
fn closed_by_guardd(s: &UnixStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd, waited on for 50 ms.
        unsafe { libc::poll(&raw mut p, 1, 50) };
        if p.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
    }
}

#[test]
fn fair_a_client_that_reads_nothing_is_dropped_at_the_deadlines() {
    if !support::privileged("fair_a_client_that_reads_nothing_is_dropped_at_the_deadlines") {
        return;
    }
    let guardd = Guardd::start_with(&policy(), &["--write-timeout", "1", "--keepalive", "1"]);
    // Replies left unread: guardd's writes fill the socket, then wait out the write deadline
    // (before, they waited for good, past any idle timeout).
    let mut unread = UnixStream::connect(&guardd.socket).expect("connect");
    let status = b"{\"v\":1,\"type\":\"status\"}\n".repeat(4000);
    unread.write_all(&status).expect("send");
    // A follower that reads nothing: dropped at its first keepalive plus the write deadline.
    let mut silent = UnixStream::connect(&guardd.socket).expect("connect");
    silent
        .write_all(b"{\"v\":1,\"type\":\"tools\",\"follow\":true}\n")
        .expect("follow");
    // Control: a follower that reads gets keepalives, and stays as long as it reads.
    let reader = UnixStream::connect(&guardd.socket).expect("connect");
    (&reader)
        .write_all(b"{\"v\":1,\"type\":\"tools\",\"follow\":true}\n")
        .expect("follow");
    reader
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let reading = std::thread::spawn(move || {
        let mut kinds = Vec::new();
        for line in BufReader::new(&reader).lines().take(8) {
            let Ok(line) = line else { break };
            let frame: Value = serde_json::from_str(&line).expect("JSON");
            kinds.push(frame["type"].as_str().unwrap_or("?").to_owned());
        }
        kinds
    });
    assert!(
        closed_by_guardd(&silent, Duration::from_secs(10)),
        "a silent follower stayed"
    );
    assert!(
        closed_by_guardd(&unread, Duration::from_secs(10)),
        "unread replies held the connection"
    );
    let kinds = reading.join().expect("reader");
    let mut want = vec!["tools".to_owned()];
    want.extend(std::iter::repeat_n("keepalive".to_owned(), 7));
    assert_eq!(kinds, want, "the reading follower");
}

/// A listener that never accepts, its queue full: what a stuck or flooded guardd looks like to
/// a caller. The first `queued` connections wait in its queue; the next ones wait for room.
pub(super) struct Stuck {
    _dir: TempDir,
    pub(super) socket: PathBuf,
    _listener: std::os::unix::net::UnixListener,
    _queued: Vec<UnixStream>,
}

impl Stuck {
    pub(super) fn new(full: bool) -> Self {
        let dir = TempDir::new("guard-stuck");
        let socket = dir.join("stuck.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        // SAFETY: listen(2) on our own bound socket: a backlog of one to fill, else of 16.
        unsafe { libc::listen(listener.as_raw_fd(), if full { 1 } else { 16 }) };
        let mut queued = Vec::new();
        if full {
            // A backlog of one holds two; connect without blocking until it refuses.
            while queued.len() < 16 {
                match nonblocking_connect(&socket) {
                    Some(s) => queued.push(s),
                    None => break,
                }
            }
        }
        Self {
            _dir: dir,
            socket,
            _listener: listener,
            _queued: queued,
        }
    }
}

/// A connection made without waiting for room in the listen queue; `None` when there is none.
fn nonblocking_connect(path: &Path) -> Option<UnixStream> {
    // SAFETY: a new socket of ours, connected to a NUL-terminated path within sun_path.
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        assert!(fd >= 0, "socket");
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr
            .sun_path
            .iter_mut()
            .zip(path.as_os_str().as_encoded_bytes())
        {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::connect(fd, (&raw const addr).cast(), len) == 0 {
            Some(<UnixStream as std::os::fd::FromRawFd>::from_raw_fd(fd))
        } else {
            libc::close(fd);
            None
        }
    }
}

#[test]
fn fair_callers_give_up_on_a_guardd_that_does_not_take_their_call() {
    // No guardd and no root needed: a socket that never accepts.
    let timeouts = ["--connect-timeout", "1", "--reply-timeout", "1"];
    let exec = |socket: &Path| {
        let mut cmd = Command::new(support::bin("guard-exec"));
        cmd.arg("--socket")
            .arg(socket)
            .args(timeouts)
            .args(["exit_with", "code:=5"]);
        cmd
    };
    let limit = Duration::from_secs(10);
    // Its queue full: the connect itself would wait for good.
    let full = Stuck::new(true);
    let (out, took) = timed(exec(&full.socket), limit).expect("guard-exec hung on connect");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{out:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Room in the queue, never accepted: connected, the call sent, never taken.
    let stuck = Stuck::new(false);
    let (out, took) = timed(exec(&stuck.socket), limit).expect("guard-exec hung on its call");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // guardctl, through the environment.
    let mut ctl = Command::new(support::bin("guardctl"));
    ctl.arg("--socket")
        .arg(&stuck.socket)
        .arg("status")
        .env("GUARD_CONNECT_TIMEOUT", "1")
        .env("GUARD_REPLY_TIMEOUT", "1");
    let (out, _) = timed(ctl, limit).expect("guardctl status hung");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    // Control: no socket at all is unreachable (69), not busy.
    let gone = full.socket.with_file_name("none.sock");
    let (out, _) = timed(exec(&gone), limit).expect("guard-exec hung");
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

/// `script` run by python3 as `uid` with `socket` as its argument, its stdin a pipe it may wait
/// on; the first line it printed.
fn python_as(uid: u32, script: &str, socket: &Path) -> (Child, String) {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    as_uid(&mut cmd, uid);
    let mut child = {
        let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("python3")
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its first line");
    (child, line)
}

/// A uid that is no client: what it may do is be told "not permitted", on its reserve alone.
const STRANGER: u32 = 40_003;

/// Sends, as [`STRANGER`], messages of one byte and 253 descriptors on 8 connections, never a
/// whole frame, then holds them until its stdin closes; prints how many connections guardd
/// closed and then `holding`.
const DESCRIPTOR_FLOOD: &str = r#"
import os, socket, sys
fd = os.open("/dev/null", os.O_RDONLY)
conns, closed = [], 0
for _ in range(8):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    try:
        for _ in range(40):
            socket.send_fds(s, [b"{"], [fd] * 253)
        s.settimeout(10)
        closed += s.recv(1) == b""
    except OSError:
        closed += 1
    conns.append(s)
print(closed, "holding", flush=True)
sys.stdin.read()
"#;

#[test]
fn fair_descriptors_no_request_needs_are_refused_and_cost_guardd_nothing() {
    if !support::privileged("fair_descriptors_no_request_needs_are_refused") {
        return;
    }
    let tools = ToolDir::new("guard-fair");
    let exec = runnable(&tools.dir, "guard-exec");
    let guardd = guardd_for_two_uids(&[]);
    let pid = guardd.child.id();
    let before = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count();
    let (mut flood, line) = python_as(STRANGER, DESCRIPTOR_FLOOD, &guardd.socket);
    // While its connections are open: guardd holds none of the descriptors sent, and closed
    // every connection that sent more than an exec's three.
    let during = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count();
    assert_eq!(line.trim(), "8 holding", "{line}");
    assert!(
        during <= before + 8 + 2,
        "guardd holds {during} descriptors, {before} before"
    );
    calls_complete(&guardd, &exec, 3, Duration::from_secs(5));
    status_within(&guardd, Duration::from_secs(5));
    drop(flood.stdin.take());
    let _ = flood.wait();
}

#[test]
fn fair_one_uid_s_long_calls_delay_no_other_uid_s_call() {
    if !support::privileged("fair_one_uid_s_long_calls_delay_no_other_uid_s_call") {
        return;
    }
    let tools = ToolDir::new("guard-fair");
    let exec = runnable(&tools.dir, "guard-exec");
    // Four slots: before, the flooder's four long calls took them all, and the caller's waited
    // out the longest.
    let guardd = guardd_for_two_uids(&["--max-calls", "4"]);
    let long: Vec<Child> = (0..8)
        .map(|_| {
            let mut cmd = Command::new(&exec);
            cmd.arg("--socket")
                .arg(&guardd.socket)
                .arg("pause")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            as_uid(&mut cmd, HOSTILE);
            let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
            cmd.spawn().expect("guard-exec")
        })
        .collect();
    // The flooder's share (half of the slots) runs, its other calls wait behind its own.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = status_within(&guardd, Duration::from_secs(5));
        let running = status["running"].as_array().map_or(0, Vec::len);
        let queued = status["queued"].as_u64().unwrap_or(0);
        if running == 2 && queued == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "running {running}, queued {queued}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    calls_complete(&guardd, &exec, 3, Duration::from_secs(5));
    for mut c in long {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Opens 24 connections as its uid and sends each a frame of a million bytes short of its end;
/// prints how many guardd closed, then holds the rest until its stdin closes.
const UNFINISHED_FRAMES: &str = r#"
import socket, sys, time
conns, closed = [], 0
for _ in range(24):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    try:
        s.sendall(b"a" * 1_000_000)
    except OSError:
        pass
    conns.append(s)
said = ""
time.sleep(1)  # for guardd to read what was sent last
for s in conns:
    s.settimeout(0.1)
    try:
        shut = s.recv(1) == b""
        said += "c" if shut else "o"
    except socket.timeout:
        shut = False
        said += "o"
    except OSError as e:
        shut = True
        said += "e"
    closed += shut
print(closed, said, flush=True)
sys.stdin.read()
"#;

#[test]
fn fair_one_uid_s_unfinished_requests_hold_sixteen_frames_at_most() {
    if !support::privileged("fair_one_uid_s_unfinished_requests_hold_sixteen_frames_at_most") {
        return;
    }
    let tools = ToolDir::new("guard-fair");
    let exec = runnable(&tools.dir, "guard-exec");
    let guardd = guardd_for_two_uids(&[]);
    let (mut flood, line) = python_as(HOSTILE, UNFINISHED_FRAMES, &guardd.socket);
    // 16 MiB is sixteen frames of a million bytes and some: at most sixteen stay open (which
    // ones, and so how many, depends on the order guardd read them in: the read that crosses
    // the share closes its connection, which gives its bytes back).
    let closed: usize = line
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!((8..=12).contains(&closed), "{line}");
    calls_complete(&guardd, &exec, 3, Duration::from_secs(5));
    drop(flood.stdin.take());
    let _ = flood.wait();
}
