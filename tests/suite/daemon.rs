//! guardd and guard-exec end to end: a real daemon, real confined tools, real kernel programs.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{Ipv4Addr, TcpListener},
    os::unix::net::UnixStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::support::{self, Guardd, TempDir, output};

/// A policy over a workspace `dir`: a few tools built from programs every host has.
fn policy(dir: &TempDir, extra: &str) -> String {
    let ws = dir.0.display();
    format!(
        r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.cat]
tier = "low"
command = ["/bin/cat", "--", "{{path}}"]
[tools.cat.args.path]
type = "path"
required = true
within = ["{ws}"]
[tools.cat.effects]
read = ["{{path}}"]

[tools.exit_with]
tier = "low"
command = ["/bin/sh", "-c", "exit \"$0\"", "{{code}}"]
[tools.exit_with.args.code]
type = "integer"
required = true
min = 0
max = 255

[tools.bash]
tier = "low"
command = ["/bin/bash", "-c", "{{script}}"]
timeout = 2
[tools.bash.args.script]
type = "string"
required = true
[tools.bash.effects]
write = ["{ws}"]
exec = ["/usr/bin/sleep"]

[tools.pay]
tier = "critical"
irreversible = true
command = ["/bin/true"]
{extra}
"#
    )
}

#[test]
fn an_allowed_call_runs_confined_on_the_callers_stdio_and_is_audited() {
    if !support::privileged("an_allowed_call_runs_confined_on_the_callers_stdio_and_is_audited") {
        return;
    }
    let ws = TempDir::new("ws");
    std::fs::write(
        ws.join("notes.txt"),
        b"hello from the workspace\n\x00\xffbinary",
    )
    .expect("write file");
    // Syscall sets are recorded only on request: the hook costs every syscall on the host.
    let guardd = Guardd::start_with(&policy(&ws, ""), &["--trace-syscalls"]);
    let path = ws.join("notes.txt");
    let out = output(guardd.exec("cat", &[&format!("path={}", path.display())]));
    assert!(
        out.status.success(),
        "cat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout, b"hello from the workspace\n\x00\xffbinary",
        "the tool's output did not arrive intact"
    );

    // The tool's own exit code comes back.
    let out = output(guardd.exec("exit_with", &["code:=7"]));
    assert_eq!(out.status.code(), Some(7));

    let rows = guardd.audit_rows();
    let decisions: Vec<_> = rows.iter().filter(|r| r["kind"] == "decision").collect();
    let finished: Vec<_> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert_eq!((decisions.len(), finished.len()), (2, 2), "rows: {rows:#?}");
    assert_eq!(decisions[0]["decision"]["decision"], "allow");
    assert_eq!(decisions[0]["peer"]["uid"], 0);
    assert_eq!(finished[0]["call_id"], decisions[0]["call_id"]);
    assert_eq!(finished[0]["effects_observed"]["verdict"], "conformed");
    assert_eq!(finished[0]["effects_observed"]["execs"][0], "/bin/cat");
    // The kernel's syscall set of the call, by name: cat opened, read and wrote.
    let syscalls = finished[0]["effects_observed"]["syscalls"]
        .as_array()
        .expect("syscalls in the receipt");
    for name in ["execve", "openat", "read", "write"] {
        assert!(
            syscalls.iter().any(|s| s == name),
            "{name} missing from {syscalls:?}"
        );
    }
    // The files it opened, as the kernel saw them: the one it was asked for among them.
    let files = &finished[0]["effects_observed"]["files"];
    assert!(files["opened"].as_u64().unwrap_or(0) >= 1, "{files:#}");
    assert!(
        files["paths"].as_array().is_some_and(|p| p.iter().any(|f| {
            f["path"] == path.display().to_string().as_str()
                && f["access"] == "read"
                && f["result"] == "ok"
        })),
        "{files:#}"
    );
    assert_eq!(finished[0]["effects_observed"]["processes"], 1);
    assert_eq!(
        finished[1]["exit"]["exit_code"], 7,
        "finished row: {:#}",
        finished[1]
    );

    // The operator's view of the same calls.
    let audit = guardd.audit.to_str().expect("utf-8").to_owned();
    let out = guardd
        .ctl(&["calls", "--json", "--audit", &audit])
        .output()
        .expect("guardctl calls");
    let calls: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(calls.len(), 2, "calls: {calls:?}");
    assert_eq!(
        (calls[1]["tool"].as_str(), calls[1]["exit_code"].as_i64()),
        (Some("exit_with"), Some(7))
    );
    // Without --audit, guardctl reads the log this guardd writes (its status names it).
    let out = guardd
        .ctl(&["calls", "--json"])
        .output()
        .expect("guardctl calls");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        2,
        "{out:?}"
    );
    let id = calls[0]["call_id"].as_str().expect("call id");
    let out = guardd
        .ctl(&["show", id, "--json", "--audit", &audit])
        .output()
        .expect("guardctl show");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show prints JSON");
    assert_eq!(shown["effects_observed"]["verdict"], "conformed");
    assert_eq!(shown["sandbox"]["user"], "guard-tool");
    assert_eq!(shown["decision"]["decision"], "allow");

    // The receipt covers the whole tree: bash and the two processes it starts.
    let out = output(guardd.exec(
        "bash",
        &["script=/usr/bin/sleep 0 & /usr/bin/sleep 0 & wait"],
    ));
    assert!(out.status.success(), "{out:?}");
    let rows = guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("finished row");
    assert_eq!(last["effects_observed"]["processes"], 3, "{last:#}");
}

#[test]
fn blocked_calls_exit_126_and_an_absent_daemon_69() {
    if !support::privileged("blocked_calls_exit_126_and_an_absent_daemon_69") {
        return;
    }
    let ws = TempDir::new("ws");
    let mut guardd = Guardd::start(&policy(&ws, ""));
    let marker = ws.join("should-not-exist");
    for (tool, args) in [
        ("rm_rf", vec!["path=/".to_owned()]),
        ("pay", vec![]),
        ("cat", vec!["path=/etc/shadow".to_owned()]),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = output(guardd.exec(tool, &args));
        assert_eq!(out.status.code(), Some(126), "{tool} was not blocked");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.lines().count(),
            1,
            "one line on stderr expected: {stderr}"
        );
        // The call's id, so an operator can find its audit row whatever the policy discloses.
        let id = guardd.last_decision_id();
        assert!(stderr.contains(&format!("(call {id};")), "{stderr}");
    }
    assert!(!marker.exists());
    let socket = guardd.socket.clone();
    guardd.stop();
    assert!(!socket.exists(), "guardd left its socket behind");
    let mut cmd = Command::new(support::bin("guard-exec"));
    cmd.arg("--socket").arg(&socket).args(["cat", "path=/x"]);
    let out = output(cmd);
    assert_eq!(
        out.status.code(),
        Some(69),
        "an absent guardd must fail closed with 69"
    );
}

#[test]
fn an_unapproved_exec_inside_a_call_is_stopped_by_each_layer() {
    if !support::privileged("an_unapproved_exec_inside_a_call_is_stopped_by_each_layer") {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start(&policy(&ws, ""));
    let marker = ws.join("marker");
    let sh = format!("/bin/sh -c 'echo ran > {}'", marker.display());

    // First line: landlock has no execute right on /bin/sh, so execve fails; the call's exec
    // judge saw it try (issue 50), and the call is killed as diverged.
    let out = output(guardd.exec("bash", &[&format!("script=exec {sh}")]));
    assert_eq!(
        out.status.code(),
        Some(137),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not approved"));
    assert!(!marker.exists(), "the unapproved program ran");

    // Second line: the dynamic loader may be executed as far as landlock knows (every program
    // needs it), so running sh through it gets past landlock; the kernel program kills it
    // before it runs an instruction, and the call is killed as diverged.
    let out = output(guardd.exec(
        "bash",
        &[&format!("script=exec /lib64/ld-linux-x86-64.so.2 {sh}")],
    ));
    assert_eq!(
        out.status.code(),
        Some(137),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not approved"),
        "no divergence line on stderr"
    );
    assert!(!marker.exists(), "the unapproved program ran");
    let rows = guardd.audit_rows();
    let finished = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("finished row");
    let observed = &finished["effects_observed"];
    assert_eq!(observed["verdict"], "diverged", "{finished:#}");
    assert_eq!(
        observed["execs"][1], "/lib64/ld-linux-x86-64.so.2",
        "{finished:#}"
    );
}

#[test]
fn connects_reach_only_the_approved_destination() {
    if !support::privileged("connects_reach_only_the_approved_destination") {
        return;
    }
    let approved = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = approved.local_addr().expect("addr").port();
    // Same port, another loopback address: landlock (ports only) lets it through, eBPF must not.
    let other = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), port)).expect("bind 127.0.0.2");
    let ws = TempDir::new("ws");
    let extra = format!(
        r#"
[tools.probe]
tier = "low"
command = ["/bin/bash", "-c", "exec 3<>/dev/tcp/$0/{port}", "{{host}}"]
[tools.probe.args.host]
type = "string"
required = true
[tools.probe.effects]
connect = ["127.0.0.1:{port}"]
on_divergence = "deny"
"#
    );
    let guardd = Guardd::start(&policy(&ws, &extra));
    let out = output(guardd.exec("probe", &["host=127.0.0.1"]));
    assert!(
        out.status.success(),
        "approved connect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(guardd.exec("probe", &["host=127.0.0.2"]));
    assert!(!out.status.success(), "unapproved connect succeeded");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"));
    other.set_nonblocking(true).expect("nonblocking");
    assert!(
        other.accept().is_err(),
        "the unapproved destination saw a connection"
    );
    let rows = guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("finished row");
    assert_eq!(last["effects_observed"]["verdict"], "diverged");
    assert_eq!(last["effects_observed"]["connects"][0]["allowed"], false);
}

#[test]
fn a_timeout_kills_the_whole_tree_and_so_does_killing_guard_exec() {
    if !support::privileged("a_timeout_kills_the_whole_tree_and_so_does_killing_guard_exec") {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start(&policy(&ws, ""));
    let started = Instant::now();
    let out = output(guardd.exec("bash", &["script=sleep 60 & sleep 60 & wait"]));
    assert_eq!(
        out.status.code(),
        Some(137),
        "the timeout did not kill the call"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("guard stopped the call: timed out after"),
        "{out:?}"
    );

    let call_cgroups = || {
        let root = std::path::Path::new("/sys/fs/cgroup/unified").join(&guardd.cgroup);
        std::fs::read_dir(root)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().is_dir())
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(
        call_cgroups(),
        0,
        "the timed-out call's cgroup is still there"
    );

    let mut exec = guardd.exec("bash", &["script=sleep 60 & sleep 60"]);
    let mut child = exec
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("guard-exec");
    let deadline = Instant::now() + Duration::from_secs(10);
    while call_cgroups() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(call_cgroups(), 1, "the call did not start");
    child.kill().expect("kill guard-exec");
    child.wait().expect("reap guard-exec");
    let deadline = Instant::now() + Duration::from_secs(10);
    while call_cgroups() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(call_cgroups(), 0, "killing guard-exec did not end the call");
}

/// An `exec` frame for `tool` with `args` sent over a new connection, with /dev/null as the
/// call's stdio: the connection, to read the replies on.
fn send_exec(guardd: &Guardd, tool: &str, args: serde_json::Value) -> UnixStream {
    let null: Vec<std::fs::File> = (0..3)
        .map(|_| std::fs::File::open("/dev/null").expect("/dev/null"))
        .collect();
    let fds: Vec<i32> = null.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    let stream = UnixStream::connect(&guardd.socket).expect("connect");
    let frame = serde_json::json!({"v": 1, "type": "exec", "tool": tool, "args": args});
    guard::protocol::conn::send_with_fds(&stream, format!("{frame}\n").as_bytes(), &fds)
        .expect("send");
    stream
}

#[test]
fn a_caller_that_half_closes_its_connection_stops_its_call_and_hears_so() {
    if !support::privileged("a_caller_that_half_closes_its_connection_stops_its_call_and_hears_so")
    {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start(&policy(&ws, ""));
    let stream = send_exec(&guardd, "bash", serde_json::json!({"script": "sleep 60"}));
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("decision");
    assert!(line.contains("\"allow\""), "{line}");
    // The caller closes its half: guard takes that as the call cancelled.
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    // Its start (the pidfd that came with it closed by this plain read), then its end.
    line.clear();
    reader.read_line(&mut line).expect("started");
    assert!(line.contains("\"type\":\"started\""), "{line}");
    line.clear();
    reader.read_line(&mut line).expect("exit");
    let exit: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(exit["type"], "exit", "{exit}");
    assert_eq!(exit["stopped"], true, "{exit}");
    assert_eq!(exit["killed"], "caller disconnected", "{exit}");
    assert_eq!(exit["code"], 137, "{exit}");
}

#[test]
fn a_caller_that_hangs_up_before_its_call_starts_cancels_it_and_the_tool_never_runs() {
    if !support::privileged(
        "a_caller_that_hangs_up_before_its_call_starts_cancels_it_and_the_tool_never_runs",
    ) {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start(&policy(&ws, ""));
    let marker = ws.0.join("ran");
    let script = format!("echo > {}", marker.display());
    let stream = send_exec(&guardd, "bash", serde_json::json!({ "script": script }));
    // Gone before guardd has even read the request: the call is decided and recorded, and its
    // process may be cloned while the decision row is written, but the tool must not start.
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let finished = loop {
        let rows = guardd.audit_rows();
        if let Some(row) = rows.into_iter().find(|r| r["kind"] == "finished") {
            break row;
        }
        assert!(std::time::Instant::now() < deadline, "no finished row");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !marker.exists(),
        "the tool ran for a caller that was gone: {finished}"
    );
    assert!(
        finished["error"]
            .as_str()
            .is_some_and(|e| e.contains("the caller went away before the call started")),
        "{finished}"
    );
    assert!(finished["launch"].is_null(), "{finished}");
}

#[test]
fn garbage_gets_an_error_and_the_daemon_keeps_serving_others() {
    if !support::privileged("garbage_gets_an_error_and_the_daemon_keeps_serving_others") {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start(&policy(&ws, ""));
    // A long call holds one connection while other clients are served.
    let mut long = guardd.exec("bash", &["script=sleep 1"]);
    let mut long = long.stdin(Stdio::null()).spawn().expect("guard-exec");

    let mut stream = UnixStream::connect(&guardd.socket).expect("connect");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut reply = String::new();
    for garbage in [
        "{nope\n",
        "[1]\n",
        "{\"v\":1,\"type\":\"exec\",\"tool\":\"cat\",\"argz\":{}}\n",
        "{\"v\":9,\"type\":\"status\"}\n",
    ] {
        stream.write_all(garbage.as_bytes()).expect("send");
        reply.clear();
        reader.read_line(&mut reply).expect("reply");
        let v: serde_json::Value = serde_json::from_str(&reply).expect("reply is JSON");
        assert_eq!(v["type"], "error", "garbage {garbage:?} got {v}");
    }
    stream
        .write_all(b"{\"v\":1,\"type\":\"status\"}\n")
        .expect("send");
    reply.clear();
    reader.read_line(&mut reply).expect("reply");
    let status: serde_json::Value = serde_json::from_str(&reply).expect("status JSON");
    assert_eq!(status["type"], "status");
    assert_eq!(status["enforced"], true);
    let layers = status["layers"].as_array().expect("layers");
    let syscalls = layers
        .iter()
        .find(|l| l["name"] == "ebpf:syscalls")
        .expect("syscall layer listed");
    assert_eq!(
        syscalls["state"], "off",
        "syscall tracing must be off unless asked for"
    );
    assert!(
        layers
            .iter()
            .any(|l| l["name"] == "ebpf self-test" && l["state"] == "active")
    );
    // An oversized frame is refused and the daemon lives on.
    let mut big = UnixStream::connect(&guardd.socket).expect("connect");
    let _ = big.write_all(&vec![b'x'; (1 << 20) + 10]);
    let mut r = String::new();
    let _ = BufReader::new(big).read_line(&mut r);
    assert!(r.contains("exceeds"), "oversized frame reply: {r}");
    let out = output(guardd.exec("exit_with", &["code:=3"]));
    assert_eq!(out.status.code(), Some(3), "guardd stopped serving");
    assert!(long.wait().expect("long call").success());
}

#[test]
fn a_url_effect_reaches_only_the_addresses_guardd_resolved() {
    if !support::privileged("a_url_effect_reaches_only_the_addresses_guardd_resolved") {
        return;
    }
    let approved = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = approved.local_addr().expect("addr").port();
    let other = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 3), port)).expect("bind 127.0.0.3");
    let ws = TempDir::new("ws");
    // `localhost` resolves through /etc/hosts; the tool then connects wherever its `to` says.
    let extra = format!(
        r#"
[tools.fetch]
tier = "low"
command = ["/bin/bash", "-c", "exec 3<>/dev/tcp/$0/{port}", "{{to}}"]
[tools.fetch.args.url]
type = "url"
required = true
hosts = ["localhost"]
schemes = ["http"]
[tools.fetch.args.to]
type = "string"
required = true
[tools.fetch.effects]
connect = ["{{url}}"]
on_divergence = "deny"
"#
    );
    let guardd = Guardd::start(&policy(&ws, &extra));
    let url = format!("url=http://localhost:{port}/x");
    let out = output(guardd.exec("fetch", &[&url, "to=127.0.0.1"]));
    assert!(
        out.status.success(),
        "the resolved address was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(guardd.exec("fetch", &[&url, "to=127.0.0.3"]));
    assert!(
        !out.status.success(),
        "an address guardd did not resolve was reachable"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"));
    other.set_nonblocking(true).expect("nonblocking");
    assert!(
        other.accept().is_err(),
        "the unresolved address saw a connection"
    );
    // A host outside the argument's allow-list never gets as far as resolution.
    let out = output(guardd.exec(
        "fetch",
        &[&format!("url=http://example.com:{port}/"), "to=127.0.0.1"],
    ));
    assert_eq!(out.status.code(), Some(126));
}

/// guardd's bpf links to raw tracepoints (sys_enter, sys_exit), from its descriptors' fdinfo.
fn raw_tracepoint_links(guardd: &Guardd) -> usize {
    let fdinfo = format!("/proc/{}/fdinfo", guardd.child.id());
    std::fs::read_dir(&fdinfo)
        .expect("guardd's fdinfo")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter(|info| {
            // The exec program is a BTF tracepoint, also a raw_tracepoint link: count the
            // syscall ones by name.
            info.lines().any(|l| {
                l.starts_with("tp_name:") && (l.ends_with("sys_enter") || l.ends_with("sys_exit"))
            })
        })
        .count()
}

#[test]
fn syscall_tracing_is_attached_only_while_a_call_runs() {
    if !support::privileged("syscall_tracing_is_attached_only_while_a_call_runs") {
        return;
    }
    let ws = TempDir::new("ws");
    let guardd = Guardd::start_with(&policy(&ws, ""), &["--trace-syscalls"]);
    assert_eq!(raw_tracepoint_links(&guardd), 0, "attached with no call");
    let mut call = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("bash", &["script=/usr/bin/sleep 1"])
            .stdin(Stdio::null())
            .spawn()
            .expect("guard-exec")
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = 0;
    while seen < 2 && Instant::now() < deadline {
        seen = raw_tracepoint_links(&guardd);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen, 2, "sys_enter and sys_exit while the call runs");
    assert!(call.wait().expect("guard-exec").success());
    assert_eq!(
        raw_tracepoint_links(&guardd),
        0,
        "still attached after the call"
    );
}

#[test]
fn reload_puts_an_edited_policy_in_force_and_keeps_the_old_one_on_errors() {
    if !support::privileged("reload_puts_an_edited_policy_in_force_and_keeps_the_old_one_on_errors")
    {
        return;
    }
    let ws = TempDir::new("ws");
    let text = policy(&ws, "");
    let guardd = Guardd::start(&text);
    let policy_file = guardd.dir.join("policy.toml");
    let exit_with = |code: &str| output(guardd.exec("exit_with", &[&format!("code:={code}")]));
    assert_eq!(exit_with("3").status.code(), Some(3));

    // A policy that no longer knows exit_with: after the reload the call is blocked.
    std::fs::write(&policy_file, text.replace("tools.exit_with", "tools.gone")).expect("edit");
    let out = output(guardd.ctl(&["reload"]));
    assert!(out.status.success(), "reload: {out:?}");
    assert_eq!(exit_with("3").status.code(), Some(126));

    // A broken file: the reload fails, naming the file and line, and the policy in force stays.
    std::fs::write(
        &policy_file,
        format!("{text}\n[tools.bad]\ntier = \"extreme\"\n"),
    )
    .expect("break");
    let out = output(guardd.ctl(&["reload"]));
    assert!(
        !out.status.success(),
        "a broken policy was reloaded: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("policy.toml:"), "{stderr}");
    assert_eq!(
        exit_with("3").status.code(),
        Some(126),
        "the old policy was lost"
    );

    // SIGHUP reloads too; each attempt is an audit row.
    std::fs::write(&policy_file, &text).expect("restore");
    let pid = nix::unistd::Pid::from_raw(guardd.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while exit_with("4").status.code() != Some(4) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(exit_with("4").status.code(), Some(4));
    let reloads: Vec<_> = guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "reload")
        .collect();
    assert_eq!(reloads.len(), 3, "{reloads:#?}");
    assert_eq!(
        (reloads[0]["by"].as_u64(), reloads[0]["error"].is_null()),
        (Some(0), true)
    );
    assert!(reloads[1]["error"].is_string());
    assert!(reloads[2]["by"].is_null());
}

#[test]
fn a_second_guardd_on_the_same_state_refuses_to_start_and_the_first_serves_on() {
    if !support::privileged(
        "a_second_guardd_on_the_same_state_refuses_to_start_and_the_first_serves_on",
    ) {
        return;
    }
    let ws = TempDir::new("ws");
    let first = Guardd::start(&policy(&ws, ""));
    let policy_file = first.dir.join("policy.toml");
    let first_cgroup =
        std::path::Path::new(guard::sandbox::cgroup::UNIFIED_HYBRID).join(&first.cgroup);
    let first_cgroup = if first_cgroup.exists() {
        first_cgroup
    } else {
        std::path::Path::new(guard::sandbox::cgroup::UNIFIED_PURE).join(&first.cgroup)
    };
    assert!(first_cgroup.is_dir(), "{} missing", first_cgroup.display());
    let shared: [(&str, &str, &std::path::Path); 3] = [
        ("cgroup", "--cgroup", std::path::Path::new(&first.cgroup)),
        ("socket", "--socket", &first.socket),
        ("audit log", "--audit", &first.audit),
    ];
    for (what, flag, value) in shared {
        let own = TempDir::new("second");
        let mut args = vec![
            ("--policy", policy_file.clone()),
            ("--socket", own.join("guard.sock")),
            ("--audit", own.join("audit.jsonl")),
            ("--cgroup", support::unique("guard-e2e").into()),
        ];
        for (f, v) in &mut args {
            if *f == flag {
                *v = value.to_owned();
            }
        }
        let mut cmd = Command::new(support::bin("guardd"));
        for (f, v) in &args {
            cmd.arg(f).arg(v);
        }
        cmd.arg("--allow-writes-on-audit-fs");
        // Without the lock it would start and serve: bounded, so that is a failure, not a hang.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn second guardd");
        let deadline = Instant::now() + Duration::from_secs(15);
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("a second guardd sharing the {what} started");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("second guardd output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "second guardd sharing the {what}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{what} ")) && stderr.contains("in use by another"),
            "the refusal names the {what}: {stderr}"
        );
        if what == "socket" {
            let pid = format!("(pid {})", first.child.id());
            assert!(
                stderr.contains(&pid),
                "the refusal names the holder {pid}: {stderr}"
            );
        }
    }
    // The first one's cgroup is still there and it still runs calls.
    assert!(
        first_cgroup.is_dir(),
        "the second guardd removed the first one's cgroup"
    );
    let out = output(first.exec("exit_with", &["code:=7"]));
    assert_eq!(
        out.status.code(),
        Some(7),
        "the first guardd no longer runs calls: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_call_that_cannot_be_emptied_does_not_hold_up_guardd_s_only_worker() {
    if !support::privileged("a_call_that_cannot_be_emptied_does_not_hold_up_guardd_s_only_worker") {
        return;
    }
    // The tool's shell ends at once; the process it leaves behind is what guardd must kill.
    let policy = "[tools.sleep]\ntier = \"low\"\n\
                  command = [\"/bin/sh\", \"-c\", \"/usr/bin/sleep 30 & /usr/bin/sleep 0.5\"]\n\
                  [tools.sleep.effects]\nexec = [\"/usr/bin/sleep\"]\n";
    let guardd = Guardd::start_with(policy, &["--worker-threads", "1"]);
    let mut call = guardd
        .exec("sleep", &[])
        .stdin(Stdio::null())
        .spawn()
        .expect("guard-exec");
    // The process left behind, found by its cgroup under this guardd's.
    let inside = format!("/{}/call-", guardd.cgroup);
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let found = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let cgroup = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                (cgroup.contains(&inside) && cmd == b"/usr/bin/sleep\x0030\x00").then_some(pid)
            });
        if let Some(pid) = found {
            break pid;
        }
        assert!(Instant::now() < deadline, "the call's process never showed");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Frozen by the v1 freezer, it cannot die of guardd's SIGKILL (once the shell has ended)
    // until it is thawed: the call's cgroups cannot be emptied or removed meanwhile.
    let frozen = Frozen::new(pid);
    // After its wait for the cgroup to empty (5 s, in the runtime), guardd removes the call's
    // cgroups, retrying while they are busy: requests are answered meanwhile, before the stuck
    // call ends (its finished row is written once its cgroups are gone).
    let finished = |g: &Guardd| {
        g.audit_rows()
            .iter()
            .any(|r| r["kind"] == "finished" && r["tool"] == "sleep")
    };
    let until = Instant::now() + Duration::from_secs(9);
    let mut answered = 0;
    while Instant::now() < until {
        let v = super::abuse::ask(&guardd, b"{\"v\":1,\"type\":\"status\"}\n");
        assert_eq!(v["type"], "status", "{v}");
        assert!(
            !finished(&guardd),
            "a request waited for the stuck call to end"
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(answered > 10, "{answered} requests");
    drop(frozen);
    // Thawed, it dies of the kill waiting for it; the call ends as its shell did.
    let status = call.wait().expect("guard-exec");
    assert!(status.success(), "{status:?}");
    assert!(finished(&guardd), "the call ended without its finished row");
}

#[test]
fn a_reload_being_parsed_does_not_hold_up_guardd_s_only_worker() {
    if !support::privileged("a_reload_being_parsed_does_not_hold_up_guardd_s_only_worker") {
        return;
    }
    let guardd = Guardd::start_with(
        "[tools.true]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n",
        &["--worker-threads", "1"],
    );
    // Two thousand tools, each with a pattern to compile: parsing takes a second or so here.
    let mut big = String::from("[tools.true]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n");
    for i in 0..2000 {
        big.push_str(&format!(
            "[tools.t{i}]\ntier = \"low\"\ncommand = [\"/bin/echo\", \"{{msg}}\"]\n\
             [tools.t{i}.args.msg]\ntype = \"string\"\npattern = \"^[a-z]{{1,{}}}(x|y{i})*$\"\n",
            i % 50 + 1
        ));
    }
    std::fs::write(guardd.dir.join("policy.toml"), big).expect("policy");
    let mut reload = guardd.ctl(&["reload"]).spawn().expect("guardctl reload");
    // Given the time to reach guardd, the reload is being parsed: requests are answered
    // meanwhile, before its row exists (it is written once the file is parsed).
    std::thread::sleep(Duration::from_millis(100));
    let reloaded = |g: &Guardd| g.audit_rows().iter().any(|r| r["kind"] == "reload");
    let mut answered = 0;
    while reload.try_wait().expect("guardctl").is_none() {
        let v = super::abuse::ask(&guardd, b"{\"v\":1,\"type\":\"status\"}\n");
        assert_eq!(v["type"], "status", "{v}");
        if !reloaded(&guardd) {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        reload.wait().expect("guardctl").success(),
        "the reload failed"
    );
    assert!(
        answered >= 5,
        "{answered} requests answered during the reload"
    );
    let out = output(guardd.exec("t1999", &["msg=xyy1999"]));
    assert!(
        out.status.success(),
        "the new policy is not in force: {out:?}"
    );
}

/// A process held in a v1 freezer cgroup of its own until dropped (thawed even when a test
/// fails, so nothing is left stuck).
struct Frozen(std::path::PathBuf);

impl Frozen {
    fn new(pid: u32) -> Self {
        let dir = std::path::Path::new("/sys/fs/cgroup/freezer").join(support::unique("stuck"));
        std::fs::create_dir(&dir).expect("freezer cgroup");
        let frozen = Self(dir);
        std::fs::write(frozen.0.join("cgroup.procs"), pid.to_string()).expect("into the freezer");
        std::fs::write(frozen.0.join("freezer.state"), "FROZEN").expect("freeze");
        frozen
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// guardd's threads, by name, with their scheduling policy (`/proc/PID/task/*/sched`: 3 is
/// SCHED_BATCH).
fn threads(guardd: &Guardd) -> Vec<(String, Option<String>)> {
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", guardd.child.id()));
    std::fs::read_dir(&tasks)
        .expect("tasks")
        .map(|t| {
            let t = t.expect("task").path();
            let comm = std::fs::read_to_string(t.join("comm")).expect("comm");
            let sched = std::fs::read_to_string(t.join("sched")).unwrap_or_default();
            let policy = sched
                .lines()
                .find(|l| l.starts_with("policy"))
                .and_then(|l| l.split(':').nth(1))
                .map(|p| p.trim().to_owned());
            (comm.trim().to_owned(), policy)
        })
        .collect()
}

/// The mount namespaces guardd holds a descriptor of.
fn held_mount_namespaces(guardd: &Guardd) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", guardd.child.id()))
        .expect("guardd's fds")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("mnt:["))
        .count()
}

#[test]
fn guardd_leaves_a_cpu_to_its_callers_and_its_background_threads_are_batch_threads() {
    if !support::privileged(
        "guardd_leaves_a_cpu_to_its_callers_and_its_background_threads_are_batch_threads",
    ) {
        return;
    }
    let mut guardd = Guardd::start(
        "[tools.true]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n\
         [tools.nap]\ntier = \"low\"\ncommand = [\"/bin/sleep\", \"0.2\"]\n",
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads_now = threads(&guardd);
    let workers = threads_now
        .iter()
        .filter(|(c, _)| c == "guardd-worker")
        .count();
    assert_eq!(workers, cpus.saturating_sub(1).max(1), "{threads_now:?}");
    let policy = |threads: &[(String, Option<String>)], name: &str| {
        threads
            .iter()
            .find(|(c, _)| c == name)
            .unwrap_or_else(|| panic!("no {name} thread: {threads:?}"))
            .1
            .clone()
    };
    assert_eq!(policy(&threads_now, "guard-audit").as_deref(), Some("3"));
    // A call's mount view is torn down after its end, by a thread of its own (`teardown`),
    // which lets go of every view it was given. (A tool that exits before guardd has taken its
    // view, within microseconds of its exec, tears it down itself: this one naps.)
    assert!(output(guardd.exec("nap", &[])).status.success());
    // The thread is made at the first teardown, and names itself once it runs: under load,
    // a moment after the call's end.
    let deadline = Instant::now() + Duration::from_secs(10);
    let teardown = loop {
        let now = threads(&guardd);
        if now.iter().any(|(c, _)| c == "guardd-teardown") || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(policy(&teardown, "guardd-teardown").as_deref(), Some("3"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while held_mount_namespaces(&guardd) > 0 {
        assert!(
            Instant::now() < deadline,
            "a call's mount namespace is still held"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    guardd.stop();
}

#[test]
fn guardd_tells_systemd_it_is_ready_only_once_its_socket_answers() {
    if !support::privileged("guardd_tells_systemd_it_is_ready_only_once_its_socket_answers") {
        return;
    }
    let ws = TempDir::new("ws");
    let dir = TempDir::new("notify");
    std::fs::write(dir.join("policy.toml"), policy(&ws, "")).expect("policy");
    // systemd's end of the protocol: a datagram socket named by $NOTIFY_SOCKET.
    let manager =
        std::os::unix::net::UnixDatagram::bind(dir.join("notify")).expect("notify socket");
    manager
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let socket = dir.join("guard.sock");
    let mut guardd = Command::new(support::bin("guardd"))
        .arg("--policy")
        .arg(dir.join("policy.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.join("audit.jsonl"))
        .arg("--cgroup")
        .arg(support::unique("guard-e2e"))
        .arg("--allow-writes-on-audit-fs")
        .env("NOTIFY_SOCKET", dir.join("notify"))
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("guardd");
    let mut buf = [0u8; 512];
    let n = manager
        .recv(&mut buf)
        .expect("guardd sent nothing to systemd");
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    // Ready means serving: the socket answers at once.
    assert!(
        UnixStream::connect(&socket).is_ok(),
        "READY=1 before the socket listens"
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(guardd.id() as i32, libc::SIGTERM) };
    let n = manager.recv(&mut buf).expect("no STOPPING=1");
    let stopping = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    assert!(guardd.wait().expect("wait").success());
}

#[test]
fn guardd_reads_its_settings_file_and_each_flag_overrides_its_key() {
    if !support::privileged("guardd_reads_its_settings_file_and_each_flag_overrides_its_key") {
        return;
    }
    let ws = TempDir::new("ws");
    let dir = TempDir::new("config");
    std::fs::write(dir.join("policy.toml"), policy(&ws, "")).expect("policy");
    let config = dir.join("guardd.toml");
    let cgroup = support::unique("guard-e2e");
    std::fs::write(
        &config,
        format!(
            "policy = \"{}\"\nsocket = \"{}\"\naudit = \"{}\"\ncgroup = \"{cgroup}\"\n\
             allow_writes_on_audit_fs = true\nmax_calls = 7\naudit_keep_rotated = 3\n\
             worker_threads = 3\n",
            dir.join("policy.toml").display(),
            dir.join("from-file.sock").display(),
            dir.join("audit.jsonl").display(),
        ),
    )
    .expect("config");
    // --check-config prints the settings in force, the flag's over the file's.
    let mut check = Command::new(support::bin("guardd"));
    check
        .arg("--config")
        .arg(&config)
        .args(["--max-calls", "9", "--check-config"]);
    let out = output(check);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("max_calls = 9"), "{stdout}");
    assert!(stdout.contains("audit_keep_rotated = 3"), "{stdout}");
    // A week, unless configured: a flood does not rotate evidence out.
    assert!(
        stdout.contains("audit_keep_rotated_seconds = 604800"),
        "{stdout}"
    );
    assert!(stdout.contains("worker_threads = 3"), "{stdout}");
    assert!(stdout.contains("from-file.sock"), "{stdout}");
    // A flag overrides the file's key: guardd listens where the flag says.
    let flag_socket = dir.join("from-flag.sock");
    let mut guardd = Command::new(support::bin("guardd"))
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&flag_socket)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("guardd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&flag_socket).is_err() {
        assert!(
            guardd.try_wait().expect("wait").is_none(),
            "guardd exited at start"
        );
        assert!(Instant::now() < deadline, "guardd did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.join("from-file.sock").exists());
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(guardd.id() as i32, libc::SIGTERM) };
    assert!(guardd.wait().expect("wait").success());
    // A key guardd does not know stops it, naming the file, line and key.
    std::fs::write(&config, "socket = \"/run/x.sock\"\nmax_cals = 3\n").expect("config");
    let mut bad = Command::new(support::bin("guardd"));
    bad.arg("--config").arg(&config).arg("--check-config");
    let out = output(bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("guardd.toml") && stderr.contains("line 2") && stderr.contains("max_cals"),
        "{stderr}"
    );
    // A policy whose [settings] name a user this host does not have would not start guardd:
    // --check-config says so rather than "valid".
    let policy = dir.join("unknown-client.toml");
    std::fs::write(&policy, "[settings]\nclients = [\"no-such-user-guard\"]\n").expect("policy");
    let mut check = Command::new(support::bin("guardd"));
    check.arg("--policy").arg(&policy).arg("--check-config");
    let out = output(check);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no-such-user-guard"), "{stderr}");
    // A value guardd cannot run with is refused from the file (naming the key) and from the
    // flag: a ring buffer size the kernel cannot take, and no worker thread.
    let refused = |key_line: &str, flag: [&str; 2], says: &str| {
        std::fs::write(&config, format!("{key_line}\n")).expect("config");
        let mut bad = Command::new(support::bin("guardd"));
        bad.arg("--config").arg(&config).arg("--check-config");
        let out = output(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(key_line), "{stderr}");
        let mut bad = Command::new(support::bin("guardd"));
        bad.args(flag).arg("--check-config");
        let out = output(bad);
        assert!(!out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{out:?}"
        );
    };
    refused(
        "event_ring_bytes = 5000",
        ["--event-ring-bytes", "3"],
        "power of two",
    );
    refused(
        "worker_threads = 0",
        ["--worker-threads", "0"],
        "worker-threads",
    );
}

#[test]
fn a_caller_that_loses_guardd_says_stopped_only_once_the_call_s_processes_are_gone() {
    if !support::privileged(
        "a_caller_that_loses_guardd_says_stopped_only_once_the_call_s_processes_are_gone",
    ) {
        return;
    }
    use std::io::Read as _;
    let s = super::escape::Setup::new();
    let mut guardd = Guardd::start(&s.policy("", ""));
    // A call whose process takes a while to die: the kernel frees its 768 MiB first.
    let mut caller = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("tt", &["a0=hog", "a1=768"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("guard-exec")
    };
    let mut line = String::new();
    BufReader::new(caller.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the tool's first line");
    if line != "hogging\n" {
        let out = caller.wait_with_output().expect("guard-exec");
        panic!("the tool did not start: {out:?}");
    }
    let root = std::path::Path::new("/sys/fs/cgroup/unified").join(&guardd.cgroup);
    let calls: Vec<_> = std::fs::read_dir(&root)
        .expect("guardd's cgroup")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("call-"))
        .map(|e| e.path().join("cgroup.procs"))
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    guardd.crash();
    let status = caller.wait().expect("guard-exec");
    // Read the moment guard-exec has said it: nothing of the call is left.
    let left = std::fs::read_to_string(&calls[0]).unwrap_or_default();
    let mut said = String::new();
    caller
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut said)
        .expect("stderr");
    assert_eq!(status.code(), Some(69), "{said}");
    assert!(
        said.contains("the call was stopped: its processes are gone"),
        "{said}"
    );
    assert_eq!(
        left, "",
        "guard-exec said {said:?} while the call still had {left:?}"
    );
    guardd.start_again();
}
