//! Every caller bounded (issue 49, points 12-14): what a caller sends costs guardd bounded
//! memory, a bounded metrics text and bounded audit rows, and a caller that writes too much of
//! the log is refused while root keeps room. The hostile caller is a uid of no user, a client
//! of the policy, sending raw frames (`guard-testtool send`); each attack beside its control:
//! the same caller within the limits, another uid, or root.

use std::{
    fs,
    io::{Read as _, Write as _},
    net::TcpStream,
    os::unix::fs::PermissionsExt as _,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    fair::{as_uid, runnable, timed},
    support::{self, Guardd, TempDir, output},
};

/// The caller that sends too much, and a well-behaved one: ids of no user, both clients.
const HOSTILE: u32 = 40_041;
const CALLER: u32 = 40_042;

fn policy() -> String {
    format!(
        r#"
[settings]
clients = [{HOSTILE}, {CALLER}]
disclose_reasons = true

[tools.exit_with]
tier = "low"
command = ["/bin/sh", "-c", "exit \"$0\"", "{{code}}"]
[tools.exit_with.args.code]
type = "integer"
min = 0
max = 255
[tools.exit_with.effects]
exec = ["/bin/sh"]
"#
    )
}

/// guardd with `extra` flags, its socket open to the test's uids.
fn start(extra: &[&str]) -> Guardd {
    let guardd = Guardd::start_with(&policy(), extra);
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
    guardd
}

/// An `exec` frame.
fn exec(tool: &str, args: Value, session: Option<&str>) -> Vec<u8> {
    let mut frame = json!({"v": 1, "type": "exec", "tool": tool, "args": args});
    if let Some(s) = session {
        frame["session"] = s.into();
    }
    let mut out = serde_json::to_vec(&frame).expect("JSON");
    out.push(b'\n');
    out
}

/// `frame` sent `n` times by `uid`, each on its own connection with the first `@N@` replaced by
/// its count; the first line of each answer.
fn send_as(guardd: &Guardd, uid: u32, frame: &[u8], n: usize) -> Vec<Value> {
    let dir = TempDir::new("guard-bounds");
    let tool = runnable(&dir, "guard-testtool");
    let file = dir.join("frame");
    fs::write(&file, frame).expect("frame");
    let mut cmd = Command::new(tool);
    cmd.arg("send")
        .arg(&guardd.socket)
        .arg(&file)
        .arg(n.to_string());
    as_uid(&mut cmd, uid);
    let (out, _) = timed(cmd, Duration::from_secs(300)).expect("the sender hung");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:.200}: {e}")))
        .collect()
}

/// guardd's resident memory, in bytes.
fn rss(guardd: &Guardd) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", guardd.child.id())).expect("status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS");
    kib << 10
}

/// Root's call runs to its end.
#[track_caller]
fn root_is_served(guardd: &Guardd) {
    let out = output(guardd.exec("exit_with", &["code:=5"]));
    assert_eq!(out.status.code(), Some(5), "{out:?}");
}

#[track_caller]
fn all_refused_naming(replies: &[Value], field: &str) {
    for r in replies {
        assert_eq!(
            (&r["type"], &r["field"]),
            (&json!("error"), &json!(field)),
            "{r:.300}"
        );
    }
}

#[track_caller]
fn all_blocked(replies: &[Value]) {
    for r in replies {
        assert_eq!(
            (&r["type"], &r["decision"]),
            (&json!("decision"), &json!("block")),
            "{r:.300}"
        );
    }
}

#[test]
fn bounds_a_long_session_is_refused_by_name_and_costs_guardd_no_memory() {
    if !support::privileged("bounds_a_long_session_is_refused_by_name_and_costs_guardd_no_memory") {
        return;
    }
    let guardd = start(&[]);
    root_is_served(&guardd);
    let before = rss(&guardd);
    // 300 blocked calls, each with a new 900 kB session: once they took guardd from 12 to 273
    // MiB, for good.
    let long = format!("@N@{}", "s".repeat(900_000));
    let refused = send_as(&guardd, HOSTILE, &exec("nope", json!({}), Some(&long)), 300);
    // Control: sessions at the limit are taken, and their calls decided.
    let at_limit = format!("@N@{}", "s".repeat(250));
    let taken = send_as(
        &guardd,
        HOSTILE,
        &exec("nope", json!({}), Some(&at_limit)),
        300,
    );
    let after = rss(&guardd);
    assert!(
        after < before + (48 << 20),
        "guardd grew from {} to {} MiB",
        before >> 20,
        after >> 20
    );
    assert_eq!(refused.len(), 300);
    all_refused_naming(&refused, "session");
    all_blocked(&taken);
    root_is_served(&guardd);
}

/// `GET path` from the metrics endpoint: the whole answer, or what came before `within`.
fn get(addr: &str, within: Duration) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(within)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut text = Vec::new();
    let _ = s.read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

#[test]
fn bounds_metrics_label_only_the_policys_tools_and_answer_a_few_scrapes_at_once() {
    if !support::privileged(
        "bounds_metrics_label_only_the_policys_tools_and_answer_a_few_scrapes_at_once",
    ) {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let guardd = start(&["--metrics-listen", &addr]);
    // 100 blocked calls, each of a new tool of 253 bytes: a label each, kept for good, and in
    // every scrape.
    let name = format!("@N@{}", "t".repeat(250));
    let replies = send_as(&guardd, HOSTILE, &exec(&name, json!({}), None), 100);
    all_blocked(&replies);
    // A name past a policy's longest is refused, by name.
    let long = "t".repeat(900_000);
    all_refused_naming(
        &send_as(&guardd, HOSTILE, &exec(&long, json!({}), None), 1),
        "tool",
    );
    root_is_served(&guardd);
    let text = get(&addr, Duration::from_secs(10));
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.300}");
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("guard_calls_total{"))
        .collect();
    let unregistered = calls
        .iter()
        .find(|l| l.contains("tool=\"(unregistered)\"") && l.contains("decision=\"block\""));
    assert!(
        unregistered.is_some_and(|l| l.ends_with(" 100")),
        "{calls:#?}"
    );
    assert!(
        calls.iter().any(|l| l.contains("tool=\"exit_with\"")),
        "{calls:#?}"
    );
    assert!(!text.contains("tttttttt"), "a caller's name is a label");
    assert!(text.len() < 16 << 10, "{} bytes", text.len());
    // Scrapes at once: eight connections that send nothing hold every place, and the next is
    // told at once instead of waiting behind them.
    let idle: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let busy = get(&addr, Duration::from_secs(4));
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy:.300}");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(idle);
    // Their places come back once they go.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = get(&addr, Duration::from_secs(10));
        if text.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "{text:.300}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The audit log's rows, and the longest line's bytes.
fn rows_and_longest(guardd: &Guardd) -> (Vec<Value>, usize) {
    let text = fs::read_to_string(&guardd.audit).expect("audit log");
    let longest = text.lines().map(str::len).max().unwrap_or_default();
    (guardd.audit_rows(), longest)
}

#[test]
fn bounds_an_audit_row_is_bounded_whatever_the_caller_sends() {
    if !support::privileged("bounds_an_audit_row_is_bounded_whatever_the_caller_sends") {
        return;
    }
    let guardd = start(&[]);
    // A 900 kB tool name: refused by name, and no row holds it (it was held three times by a
    // decision row, and 130 such requests filled a 256 MiB file system in under a second).
    let long = "t".repeat(900_000);
    all_refused_naming(
        &send_as(&guardd, HOSTILE, &exec(&long, json!({}), None), 3),
        "tool",
    );
    // 900 kB of arguments: the call is decided, and its row holds their start and their size
    // and SHA-256.
    let args = json!({"content": "a".repeat(900_000), "path": "/x"});
    all_blocked(&send_as(&guardd, HOSTILE, &exec("nope", args, None), 3));
    // Control: small arguments are recorded whole.
    all_blocked(&send_as(
        &guardd,
        HOSTILE,
        &exec("nope", json!({"a": "b"}), None),
        1,
    ));
    root_is_served(&guardd);
    let (rows, longest) = rows_and_longest(&guardd);
    assert!(longest < 80 << 10, "a row of {longest} bytes");
    let decisions: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "decision").collect();
    assert_eq!(decisions.len(), 5, "{rows:#?}");
    let cut: Vec<&&Value> = decisions
        .iter()
        .filter(|r| !r["args_cut"].is_null())
        .collect();
    assert_eq!(cut.len(), 3);
    for r in cut {
        assert!(
            r["args_cut"]["bytes"].as_u64() > Some(900_000),
            "{:.300}",
            r["args_cut"]
        );
        assert_eq!(r["args_cut"]["sha256"].as_str().map(str::len), Some(64));
        assert!(
            r["args"]["content"]
                .as_str()
                .is_some_and(|c| c.ends_with('…'))
        );
    }
    assert!(
        decisions
            .iter()
            .any(|r| r["args"] == json!({"a": "b"}) && r["args_cut"].is_null())
    );
    guard::audit::verify(&guardd.audit).expect("the chain holds");
}

#[test]
fn bounds_a_caller_past_its_audit_share_is_refused_and_others_are_not() {
    if !support::privileged("bounds_a_caller_past_its_audit_share_is_refused_and_others_are_not") {
        return;
    }
    let guardd = start(&["--audit-bytes-per-uid", "262144"]);
    // Rows of about 60 kB: the fifth fills the share of 256 KiB a minute.
    let args = json!({"content": "a".repeat(60_000)});
    let replies = send_as(&guardd, HOSTILE, &exec("nope", args.clone(), None), 20);
    let decided = replies.iter().filter(|r| r["type"] == "decision").count();
    assert!((3..=6).contains(&decided), "{decided} decided");
    all_blocked(&replies[..decided]);
    for r in &replies[decided..] {
        assert_eq!(r["type"], "error", "{r:.300}");
        let e = r["error"].as_str().unwrap_or_default();
        assert!(
            e.contains(&format!("uid {HOSTILE}")) && e.contains("audit-bytes-per-uid"),
            "{e}"
        );
        assert!(r["retry_after_ms"].as_u64() > Some(0), "{r}");
    }
    // Another uid's calls, and root's, are admitted.
    all_blocked(&send_as(&guardd, CALLER, &exec("nope", args, None), 1));
    root_is_served(&guardd);
    let rows = guardd.audit_rows();
    let decisions = rows.iter().filter(|r| r["kind"] == "decision").count();
    assert_eq!(decisions, decided + 2);
}

#[test]
fn bounds_root_keeps_room_in_a_log_its_callers_filled() {
    if !support::privileged("bounds_root_keeps_room_in_a_log_its_callers_filled") {
        return;
    }
    // A 24 MiB file system for the log, 8 MiB of which its reserve holds: rows of about 64 kB
    // fill the rest in some 250 calls.
    let fs_ = super::audit::Tmpfs::mount("24m");
    let audit = fs_.path().join("audit.jsonl");
    let audit_arg = audit.display().to_string();
    let guardd = start(&["--audit", &audit_arg, "--audit-bytes-per-uid", "0"]);
    let args = json!({"content": "a".repeat(70_000)});
    let replies = send_as(&guardd, HOSTILE, &exec("nope", args.clone(), None), 400);
    // Root's call is admitted and runs (it was refused, 75, with the others'), and its rows are
    // written.
    root_is_served(&guardd);
    let decided = replies.iter().filter(|r| r["type"] == "decision").count();
    assert!(decided > 100 && decided < 400, "{decided} decided");
    all_blocked(&replies[..decided]);
    for r in &replies[decided..] {
        let e = r["error"].as_str().unwrap_or_default();
        assert!(e.contains("kept for root's and admins' calls"), "{r:.300}");
    }
    // Another caller is refused too: the room left is root's.
    let other = send_as(&guardd, CALLER, &exec("nope", args, None), 1);
    assert_eq!(other[0]["type"], "error", "{:.300}", other[0]);
    let rows = guardd.audit_rows();
    let root = rows
        .iter()
        .filter(|r| r["tool"] == "exit_with")
        .map(|r| r["kind"].as_str().unwrap_or_default())
        .collect::<Vec<_>>();
    assert_eq!(root, ["decision", "finished"], "{root:?}");
    guard::audit::verify(&audit).expect("the chain holds");
}

#[test]
fn bounds_audit_keep_rotated_removes_the_oldest_rotated_files() {
    if !support::privileged("bounds_audit_keep_rotated_removes_the_oldest_rotated_files") {
        return;
    }
    let guardd = start(&[
        "--audit-rotate-bytes",
        "4096",
        "--audit-keep-rotated",
        "2",
        "--audit-keep-rotated-seconds",
        "0",
    ]);
    let args = json!({"content": "a".repeat(2000)});
    all_blocked(&send_as(&guardd, 0, &exec("nope", args, None), 40));
    root_is_served(&guardd);
    let dir = guardd.audit.parent().expect("the log's directory");
    let name = guardd
        .audit
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    let rotated: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix(name)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|r| r.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    assert_eq!(rotated.len(), 2, "{rotated:?}");
    // What went is said in the chain, which still holds.
    let text: String = guard::audit::read_rows(&guardd.audit)
        .expect("read")
        .filter_map(Result::ok)
        .filter(|r| r["kind"] == "pruned")
        .map(|r| Value::Object(r).to_string())
        .collect();
    assert!(!text.is_empty(), "no pruned row");
    let summary = guard::audit::verify(&guardd.audit).expect("the chain holds");
    assert_eq!(summary.files, 3, "{summary:?}");
}
