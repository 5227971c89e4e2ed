//! Events and the audit log through a real guardd: live events reach `guardctl events --follow`
//! at once, a subscriber that never reads cannot slow calls down, every acknowledged decision
//! survives kill -9, and the chain verifies.

use std::{
    fs::File,
    io::{BufRead as _, BufReader},
    os::{fd::AsRawFd as _, unix::net::UnixStream},
    process::Stdio,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::support::{self, Guardd};

const POLICY: &str = r#"
[tools.sh]
tier = "low"
command = ["/bin/bash", "-c", "{script}"]
[tools.sh.args.script]
type = "string"
required = true
# The host's network namespace (a tool that connects nowhere gets one of its own, where its
# sockets are its own): its inet sockets are the divergences these tests need.
[tools.sh.effects]
unix = true
"#;

/// Sends one `exec` frame with /dev/null as stdio and returns the decision reply; `None` once
/// guardd is gone.
fn try_exec_frame(socket: &std::path::Path, tool: &str, args: Value) -> Option<Value> {
    let stream = UnixStream::connect(socket).ok()?;
    let null = File::open("/dev/null").expect("/dev/null");
    let fd = null.as_raw_fd();
    let frame = format!(
        "{}\n",
        json!({"v": 1, "type": "exec", "tool": tool, "args": args})
    );
    guard::protocol::conn::send_with_fds(&stream, frame.as_bytes(), &[fd, fd, fd]).ok()?;
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).ok()? == 0 {
        return None;
    }
    serde_json::from_str(&line).ok()
}

fn exec_frame(socket: &std::path::Path, tool: &str, args: Value) -> Value {
    try_exec_frame(socket, tool, args).expect("guardd answered the exec")
}

/// `guardctl events --follow` with `args`, each line `parse` takes delivered with the time it
/// arrived.
fn follow_with<T: Send + 'static>(
    guardd: &Guardd,
    args: &[&str],
    parse: fn(&str) -> Option<T>,
) -> (std::process::Child, mpsc::Receiver<(Instant, T)>) {
    let mut child = guardd
        .ctl(&[&["events", "--follow"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("guardctl events");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(v) = parse(&line)
                && tx.send((Instant::now(), v)).is_err()
            {
                return;
            }
        }
    });
    (child, rx)
}

/// `guardctl events --follow --json`, its lines delivered with the time they arrived.
fn follow(guardd: &Guardd) -> (std::process::Child, mpsc::Receiver<(Instant, Value)>) {
    follow_with(guardd, &["--json"], |line| serde_json::from_str(line).ok())
}

/// Makes calls until the follower shows a first line (the subscription is live), then drops
/// what it showed.
fn until_live<T>(guardd: &Guardd, rx: &mpsc::Receiver<(Instant, T)>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = guardd
            .exec("no_such_tool", &[])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "guardctl events --follow showed nothing"
        );
    }
    while rx.try_recv().is_ok() {}
}

/// A call of `sh` that opens an inet socket, which it may not: a socket divergence.
fn open_a_socket(guardd: &Guardd) {
    let out = guardd
        .exec("sh", &["script=exec 3<>/dev/tcp/127.0.0.1/9"])
        .stderr(Stdio::null())
        .output()
        .expect("guard-exec");
    assert_ne!(out.status.code(), Some(0));
}

/// A call of a tool the policy does not know: blocked (126).
fn call_rm_rf(guardd: &Guardd) {
    let status = guardd
        .exec("rm_rf", &[])
        .stderr(Stdio::null())
        .status()
        .expect("guard-exec");
    assert_eq!(status.code(), Some(126));
}

/// Waits for an event matching `want`, returning when it arrived.
fn wait_for<T>(rx: &mpsc::Receiver<(Instant, T)>, want: impl Fn(&T) -> bool) -> (Instant, T) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((at, v)) if want(&v) => return (at, v),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("the event never arrived");
}

/// An attempt another layer used to refuse silently, before the kernel programs saw it: a
/// connect to the approved host on another port (landlock's TCP rules) and a program the call
/// may read but not run (landlock's Execute), each on the stream as it happens, untraced, with
/// what it reached for; and a connect to the approved port does not show.
#[test]
fn follow_shows_attempts_no_layer_hides() {
    if !support::privileged("follow_shows_attempts_no_layer_hides") {
        return;
    }
    let approved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let (port, other_port) = (
        approved.local_addr().expect("addr").port(),
        other.local_addr().expect("addr").port(),
    );
    let policy = format!(
        "{POLICY}connect = [\"127.0.0.1:{port}\"]\nread = [\"/usr\"]\n\
         exec = [\"/usr/bin/bash\"]\non_divergence = \"deny\"\n"
    );
    let guardd = Guardd::start(&policy);
    let (mut tail, rx) = follow(&guardd);
    until_live(&guardd, &rx);
    let run = |script: &str| {
        guardd
            .exec("sh", &[&format!("script={script}")])
            .stderr(Stdio::null())
            .output()
            .expect("guard-exec")
    };
    // Each attempt fails, the script ignores it and exits 0, as a careless tool would.
    let out = run(&format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; exec 3<>/dev/tcp/127.0.0.1/{other_port}; \
         /usr/bin/touch /tmp/nope; exit 0"
    ));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (_, connect) = wait_for(&rx, |v| {
        v["kind"] == "divergence" && v["effect"] == "connect"
    });
    assert_eq!(
        (connect["port"].as_u64(), connect["action"].as_str()),
        (Some(u64::from(other_port)), Some("deny")),
        "{connect}"
    );
    let (_, exec) = wait_for(&rx, |v| v["kind"] == "divergence" && v["effect"] == "exec");
    assert!(
        exec["path"].as_str().is_some_and(|p| p.ends_with("/touch")),
        "{exec}"
    );
    let _ = tail.kill();
    let _ = tail.wait();
}

#[test]
fn follow_shows_a_block_and_a_divergence_as_they_happen() {
    if !support::privileged("follow_shows_a_block_and_a_divergence_as_they_happen") {
        return;
    }
    let guardd = Guardd::start(POLICY);
    let (mut tail, rx) = follow(&guardd);
    until_live(&guardd, &rx);

    // A block: its decision event is published before guard-exec even hears the decision.
    let status = guardd
        .exec("rm_rf", &[])
        .stderr(Stdio::null())
        .status()
        .expect("guard-exec");
    let done = Instant::now();
    assert_eq!(status.code(), Some(126));
    let (at, event) = wait_for(&rx, |v| v["kind"] == "decision" && v["tool"] == "rm_rf");
    assert_eq!(event["decision"], "block");
    let lag = at.saturating_duration_since(done);
    assert!(
        lag < Duration::from_millis(100),
        "block shown {lag:?} after the call ended"
    );

    // A divergence: an exec the call was not approved for, killed in the kernel.
    let out = guardd
        .exec("sh", &["script=exec /lib64/ld-linux-x86-64.so.2 /bin/true"])
        .stderr(Stdio::null())
        .output()
        .expect("guard-exec");
    let done = Instant::now();
    assert_eq!(out.status.code(), Some(137));
    let (at, event) = wait_for(&rx, |v| v["kind"] == "divergence");
    assert_eq!(
        (
            event["tool"].as_str(),
            event["effect"].as_str(),
            event["action"].as_str()
        ),
        (Some("sh"), Some("exec"), Some("kill"))
    );
    let lag = at.saturating_duration_since(done);
    assert!(
        lag < Duration::from_millis(100),
        "divergence shown {lag:?} after the call ended"
    );
    // A socket the call may not create: its divergence, and the events after it, reach the
    // follower (a socket's fields once made a frame guardctl refused, and it stopped there).
    open_a_socket(&guardd);
    let (_, event) = wait_for(&rx, |v| v["kind"] == "divergence");
    assert_eq!(
        (event["effect"].as_str(), event["sock_type"].as_str()),
        (Some("socket"), Some("stream")),
        "{event}"
    );
    call_rm_rf(&guardd);
    let (_, event) = wait_for(&rx, |v| v["kind"] == "decision" && v["tool"] == "rm_rf");
    assert_eq!(event["decision"], "block");

    // guardd goes away: the follower says so and fails, rather than ending like a quiet guard.
    drop(guardd);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = tail.try_wait().expect("wait guardctl") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = tail.kill();
            panic!("guardctl events --follow outlived guardd");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(69), "events --follow after guardd left");
}

/// `guardctl events --follow` as an operator runs it (lines for people, not `--json`): a
/// socket divergence shows, and a later call's lines still come. Its frame once carried two
/// `type` keys, which guardctl refused, and the follower exited there.
#[test]
fn follow_for_people_goes_on_past_a_socket_divergence() {
    if !support::privileged("follow_for_people_goes_on_past_a_socket_divergence") {
        return;
    }
    let guardd = Guardd::start(POLICY);
    let (mut tail, rx) = follow_with(&guardd, &[], |line| Some(line.to_owned()));
    until_live(&guardd, &rx);

    open_a_socket(&guardd);
    wait_for(&rx, |l| {
        l.contains("divergence") && l.contains("inet/stream")
    });
    call_rm_rf(&guardd);
    wait_for(&rx, |l| l.contains("rm_rf") && l.contains("block"));
    assert!(
        tail.try_wait().expect("try_wait").is_none(),
        "guardctl events --follow exited"
    );
    let _ = tail.kill();
    let _ = tail.wait();
}

#[test]
fn a_subscriber_that_never_reads_is_dropped_and_calls_go_on() {
    if !support::privileged("a_subscriber_that_never_reads_is_dropped_and_calls_go_on") {
        return;
    }
    let guardd = Guardd::start(POLICY);
    let stuck = UnixStream::connect(&guardd.socket).expect("connect");
    (&stuck).write_all_frame(b"{\"v\":1,\"type\":\"subscribe\"}\n");
    // Enough events to fill the socket buffers and then the bus's backlog behind them.
    const CALLS: usize = 5000;
    const CLIENTS: usize = 8;
    let socket = guardd.socket.clone();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let socket = socket.clone();
            thread::spawn(move || {
                (0..CALLS / CLIENTS)
                    .filter(|_| exec_frame(&socket, "rm_rf", json!({}))["decision"] == "block")
                    .count()
            })
        })
        .collect();
    let blocked: usize = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    assert_eq!(
        blocked, CALLS,
        "every call must be decided while the subscriber is stuck"
    );

    // The stuck subscriber was cut off, not waited for: with a final "lagged" event when it
    // fell behind the bus while guardd could still write to it, else when a write to it waited
    // past the write deadline, or its held bytes reached its uid's share (which way comes first
    // depends on how fast the calls come, so either ends it). Its stream ends either way.
    stuck
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut lines = BufReader::new(&stuck).lines();
    let mut last = None;
    loop {
        match lines.next() {
            Some(Ok(line)) => last = Some(line),
            // The end of its stream: guardd closed it.
            None => break,
            Some(Err(e)) => panic!("the subscriber was not cut off: {e}"),
        }
    }
    let last: Value = serde_json::from_str(&last.expect("subscriber got nothing")).expect("JSON");
    assert!(
        matches!(last["kind"].as_str(), Some("lagged" | "decision")),
        "last event: {last}"
    );

    let out = guardd
        .ctl(&["audit", "verify", guardd.audit.to_str().expect("utf-8")])
        .output()
        .expect("guardctl");
    assert!(
        out.status.success(),
        "chain broken: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(guardd.audit_rows().len(), CALLS);
}

/// `write_all` for a borrowed stream, panicking with context.
trait WriteFrame {
    fn write_all_frame(self, frame: &[u8]);
}

impl WriteFrame for &UnixStream {
    fn write_all_frame(mut self, frame: &[u8]) {
        std::io::Write::write_all(&mut self, frame).expect("send frame");
    }
}

#[test]
fn kill_9_during_a_burst_loses_no_acknowledged_decision() {
    if !support::privileged("kill_9_during_a_burst_loses_no_acknowledged_decision") {
        return;
    }
    let mut guardd = Guardd::start(POLICY);
    let socket = guardd.socket.clone();
    let (tx, rx) = mpsc::channel::<String>();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (socket, tx) = (socket.clone(), tx.clone());
            thread::spawn(move || {
                // Until guardd dies: each acknowledged decision's call id is reported.
                for _ in 0..100_000 {
                    let Some(reply) = try_exec_frame(&socket, "sh", json!({ "script": "exit 0" }))
                    else {
                        return;
                    };
                    if let Some(id) = reply["call_id"].as_str() {
                        let _ = tx.send(id.to_owned());
                    }
                }
            })
        })
        .collect();
    drop(tx);
    thread::sleep(Duration::from_millis(800));
    guardd.child.kill().expect("kill -9 guardd");
    guardd.child.wait().expect("reap guardd");
    for w in workers {
        w.join().expect("worker");
    }
    let acknowledged: Vec<String> = rx.iter().collect();
    assert!(
        acknowledged.len() > 10,
        "the burst did not get going: {} calls",
        acknowledged.len()
    );

    // Restart on the same log and cgroup: recovery keeps the chain, and every acknowledged call
    // is there; the call cgroups the dead guardd left (v2 and v1 limits) are swept.
    let restarted = Guardd::start_with(
        POLICY,
        &[
            "--audit",
            guardd.audit.to_str().expect("utf-8"),
            "--cgroup",
            &guardd.cgroup,
        ],
    );
    for root in [
        guard::sandbox::cgroup::UNIFIED_HYBRID,
        guard::sandbox::cgroup::UNIFIED_PURE,
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/memory",
    ] {
        let dir = std::path::Path::new(root).join(&guardd.cgroup);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        assert!(leftovers.is_empty(), "not swept at restart: {leftovers:?}");
    }
    let rows = restarted.audit_rows();
    for id in &acknowledged {
        assert!(
            rows.iter()
                .any(|r| r["kind"] == "decision" && r["call_id"] == id.as_str()),
            "acknowledged call {id} is missing from the audit log"
        );
    }
    drop(restarted);
    for v1 in ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory"] {
        let dir = std::path::Path::new(v1).join(&guardd.cgroup);
        assert!(!dir.exists(), "{} outlived guardd", dir.display());
    }
    let out = guardd
        .ctl(&["audit", "verify", guardd.audit.to_str().expect("utf-8")])
        .output()
        .expect("guardctl");
    assert!(
        out.status.success(),
        "chain broken after kill -9: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn events_are_for_admins_only() {
    if !support::privileged("events_are_for_admins_only") {
        return;
    }
    let guardd = Guardd::start_with(POLICY, &["--socket-group", "nogroup"]);
    // nobody, in nogroup (the socket's group), with no other groups: a client, not an admin.
    let as_nobody = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(support::bin("guardctl"))
            .arg("--socket")
            .arg(&guardd.socket)
            .args(args)
            .output()
            .expect("setpriv guardctl")
    };
    let out = as_nobody(&["events", "--follow"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not permitted"), "stderr: {stderr}");
    // The socket's group may submit and read status, not administer.
    let out = as_nobody(&["status", "--json"]);
    assert!(
        out.status.success(),
        "status as a client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn events_are_compact_lines_of_what_ran_for_whom_and_how_it_ended_filtered_by_kind() {
    if !support::privileged(
        "events_are_compact_lines_of_what_ran_for_whom_and_how_it_ended_filtered_by_kind",
    ) {
        return;
    }
    let guardd = Guardd::start(POLICY);
    let status = guardd
        .exec("sh", &["script=exit 3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("guard-exec");
    assert_eq!(status.code(), Some(3));
    let id = guardd.last_decision_id();
    let lines = |kind: &str| {
        let out = super::support::output(guardd.ctl(&["events", "--kind", kind]));
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let exits = lines("exit");
    assert_eq!(exits.lines().count(), 1, "{exits}");
    assert!(
        exits.contains(&id) && exits.contains("exit") && exits.contains("code 3 in "),
        "{exits}"
    );
    let decisions = lines("decision");
    assert!(
        decisions.contains("allow uid 0") && !decisions.contains("code 3"),
        "{decisions}"
    );
    assert!(lines("approval").is_empty());
}

/// History, as a new operator reads it after the fact: every kind of event is in the audit
/// log and found by `--kind`, a divergence is named with its target and the layer that stopped
/// it (its own line and its call's exit line), and `guardctl show` tells the call for people,
/// or as JSON with `--json`.
#[test]
fn history_names_each_kind_and_a_divergence_with_its_target() {
    if !support::privileged("history_names_each_kind_and_a_divergence_with_its_target") {
        return;
    }
    let policy = format!(
        "{POLICY}\n[tools.slow]\ntier = \"low\"\ncommand = [\"/bin/sleep\", \"30\"]\ntimeout = 1\n\
         [tools.deploy]\ntier = \"high\"\nirreversible = true\ncommand = [\"/bin/true\"]\n"
    );
    let guardd = Guardd::start(&policy);
    // A divergence: the loader run directly, an exec no effect approves, killed in the kernel.
    let out = super::support::output(
        guardd.exec("sh", &["script=exec /lib64/ld-linux-x86-64.so.2 /bin/true"]),
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let diverged = guardd.last_decision_id();
    let out = super::support::output(guardd.exec("slow", &[]));
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let slow = guardd.last_decision_id();
    let out = super::support::output(guardd.exec("deploy", &["--no-wait"]));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let held = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(guardd.ctl(&["reload"]).status().expect("reload").success());

    let lines = |kind: &str| {
        let out = super::support::output(guardd.ctl(&["events", "--kind", kind]));
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let divergences = lines("divergence");
    let line = divergences
        .lines()
        .find(|l| l.contains(&diverged))
        .unwrap_or_else(|| panic!("no divergence of {diverged} in history: {divergences}"));
    for want in [
        "exec /lib64/ld-linux-x86-64.so.2",
        "stopped by eBPF exec tracepoint",
        "-> kill",
    ] {
        assert!(line.contains(want), "{want:?} not in {line:?}");
    }
    let exits = lines("exit");
    let exit = exits.lines().find(|l| l.contains(&diverged)).expect("exit");
    assert!(
        exit.contains("code 137") && exit.contains("diverged: exec /lib64/ld-linux-x86-64.so.2"),
        "{exit}"
    );
    let launches = lines("launch");
    assert!(
        launches
            .lines()
            .any(|l| l.contains(&diverged) && l.contains("/bin/bash (2 args) uid 0")),
        "{launches}"
    );
    let kills = lines("kill");
    assert!(
        kills.contains(&slow)
            && kills.contains("timed out after 1 s")
            && !kills.contains(&diverged),
        "{kills}"
    );
    let holds = lines("held");
    assert!(
        holds.contains(&held) && holds.contains(&format!("guardctl approve {held}")),
        "{holds}"
    );
    assert!(lines("reload").contains("reload"), "no reload in history");
    // Not in the log at all: said so, not an empty answer that looks like a quiet guard.
    let out = super::support::output(guardd.ctl(&["events", "--kind", "refused"]));
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let out = super::support::output(guardd.ctl(&["events", "--kind", "divergance"]));
    assert!(!out.status.success(), "a misspelt kind is refused: {out:?}");

    // `show`, for people: the decision, caller, program, sandbox, receipt and its divergence.
    let out = super::support::output(guardd.ctl(&["show", &diverged]));
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout);
    for want in [
        "decision    allow by ",
        "caller      uid 0 ",
        "program     /bin/bash (2 args) pid ",
        "sandbox     user guard-tool ",
        "receipt     diverged, stopped by guard",
        "divergences 1",
        "exec /lib64/ld-linux-x86-64.so.2 (stopped by eBPF exec tracepoint)",
    ] {
        assert!(shown.contains(want), "{want:?} not in:\n{shown}");
    }
    assert!(!shown.trim_start().starts_with('{'), "{shown}");
    let out = super::support::output(guardd.ctl(&["show", &held]));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("held      escalate for 300 s, digest "),
        "{shown}"
    );
    // And as JSON.
    let out = super::support::output(guardd.ctl(&["show", &diverged, "--json"]));
    let shown: Value = serde_json::from_slice(&out.stdout).expect("show --json is JSON");
    let first = &shown["effects_observed"]["divergences"][0];
    assert_eq!(
        (
            first["effect"].as_str(),
            first["path"].as_str(),
            first["action"].as_str()
        ),
        (
            Some("exec"),
            Some("/lib64/ld-linux-x86-64.so.2"),
            Some("kill")
        ),
        "{shown:#}"
    );
    assert_eq!(shown["launch"]["program"], "/bin/bash", "{shown:#}");
}

/// What a call chose reaches `guardctl show` escaped: a C1 control (CSI, U+009B), which JSON
/// leaves as it is, cannot redraw the operator's terminal.
#[test]
fn show_escapes_what_a_call_chose() {
    if !support::privileged("show_escapes_what_a_call_chose") {
        return;
    }
    let guardd = Guardd::start(POLICY);
    let out = super::support::output(guardd.exec("sh", &["script=true #\u{9b}2J\u{1b}[1A"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = guardd.last_decision_id();
    let out = super::support::output(guardd.ctl(&["show", &id]));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("\\u{9b}2J"), "{shown}");
    assert!(
        !shown.contains('\u{9b}') && !shown.contains('\u{1b}'),
        "{shown:?}"
    );
}

/// Live, `--kind` keeps one kind: a timeout's kill (guardd's own kill, not a divergence's) and
/// a diverged call's exit, which names its first divergence.
#[test]
fn follow_filters_by_kind_and_an_exit_names_its_divergence() {
    if !support::privileged("follow_filters_by_kind_and_an_exit_names_its_divergence") {
        return;
    }
    let policy = format!(
        "{POLICY}\n[tools.slow]\ntier = \"low\"\ncommand = [\"/bin/sleep\", \"30\"]\ntimeout = 1\n"
    );
    let guardd = Guardd::start(&policy);
    let (mut kills, kill_rx) = follow_with(&guardd, &["--kind", "kill"], |l| Some(l.to_owned()));
    let (mut exits, exit_rx) = follow_with(&guardd, &["--kind", "exit", "--json"], |l| {
        serde_json::from_str::<Value>(l).ok()
    });
    // Live once an exit shows; the kill follower subscribed before it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = super::support::output(guardd.exec("sh", &["script=true"]));
        if exit_rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no exit event");
    }
    while exit_rx.try_recv().is_ok() {}
    let out = super::support::output(guardd.exec("slow", &[]));
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let (_, line) = wait_for(&kill_rx, |l| l.contains("slow"));
    assert!(
        line.contains("kill") && line.contains("timed out after 1 s"),
        "{line}"
    );
    open_a_socket(&guardd);
    let (_, exit) = wait_for(&exit_rx, |v| v["diverged"] == true);
    assert_eq!(
        (exit["kind"].as_str(), exit["divergence"]["effect"].as_str()),
        (Some("exit"), Some("socket")),
        "{exit}"
    );
    assert!(
        kill_rx.try_iter().all(|(_, l)| !l.contains("decision")),
        "--kind kill showed another kind"
    );
    for tail in [&mut kills, &mut exits] {
        let _ = tail.kill();
        let _ = tail.wait();
    }
}
