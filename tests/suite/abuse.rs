//! Abuse of guardd itself: hostile clients, hostile tools reaching for its socket, hostile
//! policies. guardd must keep serving others, leak nothing, and never crash.

use std::{
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    os::unix::{fs::PermissionsExt as _, net::UnixStream, process::CommandExt as _},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    escape::{Setup, call, last_receipt},
    support::{self, Guardd, output},
};

/// A frame of `kind` with `body`'s fields, valid or not, as a client might send it.
fn frame(kind: &str, body: Value) -> Vec<u8> {
    let mut map = body.as_object().cloned().unwrap_or_default();
    map.insert("v".into(), 1.into());
    map.insert("type".into(), kind.into());
    let mut out = serde_json::to_vec(&map).expect("JSON");
    out.push(b'\n');
    out
}

const POLICY: &str = r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.exit_with]
tier = "low"
command = ["/bin/sh", "-c", "exit \"$0\"", "{code}"]
[tools.exit_with.args.code]
type = "integer"
min = 0
max = 255
[tools.exit_with.effects]
exec = ["/bin/sh"]
"#;

/// One request and its reply on a fresh connection; the read is bounded so a hang fails the
/// test instead of stalling it.
pub(super) fn ask(guardd: &Guardd, frame: &[u8]) -> Value {
    let mut s = UnixStream::connect(&guardd.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(frame).expect("send");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("reply");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}"))
}

fn status(guardd: &Guardd) -> Value {
    let v = ask(guardd, b"{\"v\":1,\"type\":\"status\"}\n");
    assert_eq!(v["type"], "status", "{v}");
    v
}

/// guardd still runs a call end to end.
#[track_caller]
fn serves_calls(guardd: &Guardd) {
    let out = output(guardd.exec("exit_with", &["code:=5"]));
    assert_eq!(out.status.code(), Some(5), "{out:?}");
}

fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read guardd's fds")
        .count()
}

/// Waits up to 10 s for guardd's fd count to come back to `want` or below.
fn fds_settle(pid: u32, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = open_fds(pid);
        if n <= want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[track_caller]
fn alive(guardd: &mut Guardd) {
    assert!(
        guardd.child.try_wait().expect("try_wait").is_none(),
        "guardd died"
    );
}

#[test]
fn abuse_malformed_frames_get_errors_and_guardd_serves_on() {
    if !support::privileged("abuse_malformed_frames_get_errors_and_guardd_serves_on") {
        return;
    }
    let mut guardd = Guardd::start(POLICY);
    let deep = format!("{}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = format!(
        "{{\"v\":1,\"type\":\"check\",\"tool\":\"exit_with\",\"args\":{{\"code\":{}1{}}}}}\n",
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    let frames: Vec<Vec<u8>> = vec![
        b"\xff\xfe\x00garbage\n".to_vec(),
        b"{\"v\":1e400,\"type\":\"status\"}\n".to_vec(),
        b"{\"v\":1,\"type\":\"exec\",\"tool\":\"exit_with\",\"args\":[]}\n".to_vec(),
        b"{\"v\":1,\"type\":\"exec\",\"tool\":7}\n".to_vec(),
        b"{\"v\":1,\"type\":\"\\ud800\"}\n".to_vec(),
        b"null\n".to_vec(),
        b"\"status\"\n".to_vec(),
        deep.into_bytes(),
        deep_obj.into_bytes(),
    ];
    for frame in &frames {
        let v = ask(&guardd, frame);
        assert_eq!(
            v["type"],
            "error",
            "{:?} got {v}",
            String::from_utf8_lossy(&frame[..frame.len().min(60)])
        );
        alive(&mut guardd);
    }
    // Blank lines, then a torn frame and a close: nothing to answer, nothing breaks.
    let mut s = UnixStream::connect(&guardd.socket).expect("connect");
    s.write_all(b"\n\n\n{\"v\":1,\"ty").expect("send");
    drop(s);
    // An exec frame without its three descriptors is refused, not run on guardd's own stdio.
    let v = ask(
        &guardd,
        b"{\"v\":1,\"type\":\"exec\",\"tool\":\"exit_with\",\"args\":{\"code\":0}}\n",
    );
    assert_eq!(v["type"], "error", "{v}");
    alive(&mut guardd);
    status(&guardd);
    serves_calls(&guardd);
}

#[test]
fn abuse_slow_loris_clients_do_not_block_others() {
    if !support::privileged("abuse_slow_loris_clients_do_not_block_others") {
        return;
    }
    let mut guardd = Guardd::start(POLICY);
    // Half a frame each, then silence.
    let loris: Vec<UnixStream> = (0..64)
        .map(|_| {
            let mut s = UnixStream::connect(&guardd.socket).expect("connect");
            s.write_all(b"{\"v\":1,\"type\":\"sta").expect("send");
            s
        })
        .collect();
    // One that sent nearly 1 MiB without a newline.
    let mut big = UnixStream::connect(&guardd.socket).expect("connect");
    big.write_all(&vec![b' '; (1 << 20) - 16]).expect("send");
    status(&guardd);
    serves_calls(&guardd);
    alive(&mut guardd);
    drop(loris);
    drop(big);
    status(&guardd);
}

#[test]
fn abuse_a_thousand_connections_are_bounded_and_others_are_served() {
    if !support::privileged("abuse_a_thousand_connections_are_bounded_and_others_are_served") {
        return;
    }
    // One uid's connections are capped (256 by default), the rest refused at once as busy, and
    // guardd's descriptors come back when they go. Other uids' service under such a flood is
    // `fair.rs`'s; here the flooder is root itself, which must then wait for its own.
    let mut guardd = Guardd::start(POLICY);
    let pid = guardd.child.id();
    let before = open_fds(pid);
    let conns: Vec<UnixStream> = (0..1200)
        .map(|_| UnixStream::connect(&guardd.socket).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = open_fds(pid);
    assert!(
        during <= before + 256 + 2,
        "guardd holds {during} fds with 256 connections per uid ({before} before)"
    );
    // One more is told why, at once: a refusal, not a place in the listen queue.
    let mut s = UnixStream::connect(&guardd.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Refused at accept, it may be closed before the request goes: the reply is there anyway.
    let _ = s.write_all(b"{\"v\":1,\"type\":\"status\"}\n");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("the refusal");
    let v: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["type"], "error", "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.starts_with("busy")),
        "{v}"
    );
    alive(&mut guardd);
    drop(conns);
    let after = fds_settle(pid, before);
    assert!(after <= before, "guardd holds {after} fds, {before} before");
    status(&guardd);
    serves_calls(&guardd);

    // With a low cap, guardd holds at most the pool and root's own reserve (8); the rest are
    // refused without costing it a descriptor.
    let mut capped = Guardd::start_with(POLICY, &["--max-connections", "16"]);
    let pid = capped.child.id();
    let before = open_fds(pid);
    let conns: Vec<UnixStream> = (0..300)
        .filter_map(|_| UnixStream::connect(&capped.socket).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = open_fds(pid);
    assert!(
        during <= before + 16 + 8 + 2,
        "guardd holds {during} fds with 16 connections allowed and 8 reserved ({before} before)"
    );
    alive(&mut capped);
    drop(conns);
    let after = fds_settle(pid, before);
    assert!(after <= before, "guardd holds {after} fds, {before} before");
    status(&capped);
}

#[test]
fn abuse_descriptors_sent_with_other_requests_are_closed() {
    if !support::privileged("abuse_descriptors_sent_with_other_requests_are_closed") {
        return;
    }
    let mut guardd = Guardd::start(POLICY);
    let pid = guardd.child.id();
    status(&guardd);
    let before = open_fds(pid);
    let files: Vec<fs::File> = (0..3)
        .map(|_| fs::File::open("/dev/null").expect("open"))
        .collect();
    let fds: Vec<i32> = files.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    for _ in 0..20 {
        let mut client = guard::client::Client::connect(&guardd.socket).expect("connect");
        for (kind, body) in [
            ("status", json!({})),
            ("check", json!({"tool": "exit_with", "args": {"code": 1}})),
        ] {
            client
                .send_frame(&frame(kind, body), &fds)
                .expect("send with fds");
            let reply: Value = client.recv().expect("reply").expect("a reply");
            assert_ne!(reply["type"], "error", "{reply}");
        }
        // A malformed frame with descriptors.
        client
            .send_frame(&frame("nonsense", json!({})), &fds)
            .expect("send with fds");
        let reply: Value = client.recv().expect("reply").expect("a reply");
        assert_eq!(reply["type"], "error", "{reply}");
        // A frame that is not permitted here (subscribe needs an admin; root is one, so use
        // a bad filter instead): still closed.
        client
            .send_frame(&frame("status", json!({"extra": 1})), &fds)
            .expect("send with fds");
        let _ = client.recv::<Value>();
    }
    let after = fds_settle(pid, before);
    assert!(
        after <= before,
        "guardd leaked descriptors: {before} before, {after} after"
    );
    alive(&mut guardd);
    serves_calls(&guardd);
}

#[test]
fn abuse_a_client_outside_clients_is_not_permitted_and_nothing_runs() {
    if !support::privileged("abuse_a_client_outside_clients_is_not_permitted_and_nothing_runs") {
        return;
    }
    let s = Setup::new();
    let marker = s.subdir("out", 0o777).join("marker");
    let policy = format!(
        "{}\n[tools.touch]\ntier = \"low\"\ncommand = [\"/usr/bin/touch\", \"{m}\"]\n[tools.touch.effects]\nwrite = [\"{m}\"]\n",
        POLICY.replace(
            "disclose_reasons = true",
            "disclose_reasons = true\nclients = [0]"
        ),
        m = marker.display()
    );
    let guardd = Guardd::start(&policy);
    // The socket is 0660 root:root; open it up so the access check, not the file mode, is what
    // refuses the caller.
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
    let exec = s.dir.join("guard-exec");
    fs::copy(support::bin("guard-exec"), &exec).expect("copy guard-exec");
    fs::set_permissions(&exec, fs::Permissions::from_mode(0o755)).expect("chmod");
    let nobody = 65534;
    let mut cmd = Command::new(&exec);
    cmd.arg("--socket").arg(&guardd.socket).arg("touch");
    // SAFETY: setgroups/setgid/setuid between fork and exec are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(nobody) < 0
                || libc::setuid(nobody) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = output(cmd);
    // The code the book gives a refused caller (guard-exec's exit codes).
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not permitted"),
        "{out:?}"
    );
    assert!(
        !marker.exists(),
        "the tool ran for a caller outside clients"
    );
    assert!(
        !guardd.audit_rows().iter().any(|r| r["kind"] == "finished"),
        "a call ran"
    );
    // Control: root is a client.
    let out = output(guardd.exec("touch", &[]));
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists());
}

#[test]
fn abuse_a_tool_cannot_reach_guardds_socket() {
    if !support::privileged("abuse_a_tool_cannot_reach_guardds_socket") {
        return;
    }
    let s = Setup::new();
    // Even for a call that may use Unix sockets.
    let guardd = Guardd::start(&s.policy("unix = true", ""));
    let socket = guardd.socket.display().to_string();
    let out = call(&guardd, &["ids"]);
    assert!(out.status.success(), "{out:?}");
    // The socket is root's, mode 0660, and guard-tool is in no group: DAC refuses the connect.
    let out = call(&guardd, &["unix-connect", &socket]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ERR EACCES "),
        "{out:?}"
    );
}

#[test]
fn abuse_a_tool_cannot_connect_to_guardds_socket_even_when_its_mode_allows() {
    if !support::privileged(
        "abuse_a_tool_cannot_connect_to_guardds_socket_even_when_its_mode_allows",
    ) {
        return;
    }
    let s = Setup::new();
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"", ""));
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
    // Without the `unix` effect a call in a network namespace of its own has Unix stream
    // sockets, whose connects guardd makes: not to guardd's socket, outside the call's places
    // (EACCES), and a divergence.
    let out = call(
        &guardd,
        &["unix-connect", &guardd.socket.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ERR EACCES "),
        "{out:?}"
    );
    let row = super::escape::last_receipt(&guardd);
    assert_eq!(
        row["effects_observed"]["divergences"][0]["effect"], "unix_connect",
        "{row:#}"
    );
    // Nor a datagram socketpair, whose sendto(2) would reach any pathname datagram socket.
    let out = call(&guardd, &["socketpair-dgram"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ERR EPERM "),
        "{out:?}"
    );
}

#[test]
fn abuse_guardd_refuses_a_confined_peer_whatever_the_socket_mode() {
    if !support::privileged("abuse_guardd_refuses_a_confined_peer_whatever_the_socket_mode") {
        return;
    }
    let s = Setup::new();
    let socket = |guardd: &Guardd| {
        fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
        guardd.socket.display().to_string()
    };
    // A call that may use Unix sockets reaches the socket; guardd answers it with a refusal and
    // records a divergence.
    let mut guardd = Guardd::start(&s.policy("unix = true\non_divergence = \"deny\"", ""));
    let out = call(&guardd, &["unix-connect", &socket(&guardd)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("a confined call may not use guardd"),
        "guardd answered a confined call: {stdout} ({out:?})"
    );
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "diverged", "{row:#}");
    assert_eq!(row["effects_observed"]["guardd_connects"], 1, "{row:#}");
    guardd.stop();

    // Under the default on_divergence the call is killed for it.
    let guardd = Guardd::start(&s.policy("unix = true", ""));
    let out = call(
        &guardd,
        &["unix-connect", &socket(&guardd), "--", "sleep", "5"],
    );
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let row = last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "diverged", "{row:#}");
}

#[test]
fn abuse_duplicate_keys_are_refused() {
    if !support::privileged("abuse_duplicate_keys_are_refused") {
        return;
    }
    let guardd = Guardd::start(POLICY);
    for frame in [
        &b"{\"v\":1,\"type\":\"status\",\"v\":1}\n"[..],
        b"{\"v\":1,\"type\":\"check\",\"tool\":\"nope\",\"tool\":\"exit_with\",\"args\":{\"code\":1}}\n",
        b"{\"v\":1,\"type\":\"check\",\"tool\":\"exit_with\",\"args\":{\"code\":1,\"code\":2}}\n",
    ] {
        let v = ask(&guardd, frame);
        assert_eq!(v["type"], "error", "{} got {v}", String::from_utf8_lossy(frame));
    }
}

#[test]
fn abuse_a_catastrophic_regex_decides_in_linear_time() {
    if !support::privileged("abuse_a_catastrophic_regex_decides_in_linear_time") {
        return;
    }
    let policy = format!(
        "{POLICY}\n[tools.echo]\ntier = \"low\"\ncommand = [\"/bin/true\", \"{{s}}\"]\n\
         [tools.echo.args.s]\ntype = \"string\"\n\
         [[rules]]\nid = \"evil\"\ntools = [\"echo\"]\narg = \"s\"\nregex = '(a+)+$'\n\
         action = \"block\"\nmessage = \"no\"\n\
         [[rules]]\nid = \"evil2\"\ntools = [\"echo\"]\nregex = '(x+x+)+y'\naction = \"block\"\n"
    );
    let guardd = Guardd::start(&policy);
    // A match attempt that a backtracking engine would never finish; completing at all is the
    // assertion (no timing threshold).
    for s in ["a".repeat(100_000) + "!", "x".repeat(100_000)] {
        let frame = format!(
            "{}\n",
            json!({"v": 1, "type": "check", "tool": "echo", "args": {"s": s}})
        );
        let v = ask(&guardd, frame.as_bytes());
        assert_eq!(v["type"], "decision", "{v}");
    }
    let frame = format!(
        "{}\n",
        json!({"v": 1, "type": "check", "tool": "echo", "args": {"s": "a".repeat(100_000)}})
    );
    let v = ask(&guardd, frame.as_bytes());
    assert_eq!(v["decision"]["decision"], "block", "{v}");
}

#[test]
fn abuse_a_huge_policy_loads_or_fails_cleanly() {
    if !support::privileged("abuse_a_huge_policy_loads_or_fails_cleanly") {
        return;
    }
    // 5,000 tools with an argument each: loads, and guardd serves.
    let mut big = String::from(POLICY);
    for i in 0..5_000 {
        big.push_str(&format!(
            "[tools.t{i}]\ntier = \"low\"\ncommand = [\"/bin/true\", \"{{x}}\"]\n\
             [tools.t{i}.args.x]\ntype = \"string\"\npattern = 'a{{1,{n}}}'\n",
            n = 1 + i % 50
        ));
    }
    let guardd = Guardd::start(&big);
    assert!(status(&guardd)["policy"]["tools"].as_u64() > Some(5_000));
    serves_calls(&guardd);
    drop(guardd);

    // Hostile shapes: each must be refused with a message, never crash guardd.
    let dir = support::TempDir::new("policy-abuse");
    let nested = format!("x = {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let tables = format!("{}\n", "[a.".to_owned() + &"b.".repeat(100_000) + "c]");
    let junk: String = (0..2_000_000u32)
        .map(|i| char::from(b'!' + (i.wrapping_mul(2_654_435_761) >> 26) as u8))
        .collect();
    for (name, text) in [("nested", nested), ("tables", tables), ("junk", junk)] {
        let path = dir.join(&format!("{name}.toml"));
        fs::write(&path, &text).expect("write policy");
        let mut child = Command::new(support::bin("guardd"))
            .arg("--policy")
            .arg(&path)
            .arg("--socket")
            .arg(dir.join(&format!("{name}.sock")))
            .arg("--audit")
            .arg(dir.join(&format!("{name}.jsonl")))
            .arg("--cgroup")
            .arg(support::unique("guard-abuse"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn guardd");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        let status = child.wait().expect("wait guardd");
        assert!(
            status.code().is_some_and(|c| c != 0),
            "{name}: guardd must refuse the policy with an error exit, got {status}; \
             stderr {:?}",
            &stderr[..stderr.len().min(300)]
        );
        assert!(!stderr.is_empty(), "{name}: no message");
        assert!(!Path::new(&dir.join(&format!("{name}.sock"))).exists());
    }
}
