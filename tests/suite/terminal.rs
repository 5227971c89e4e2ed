//! What reaches the admin's terminal (issue 49, point 2): a caller chooses tool names, sessions
//! and arguments, and guardctl prints them to an admin. Each is shown with every character that
//! could move the cursor, erase a line or reorder text (C0, DEL, C1, bidi controls) written as a
//! visible escape, byte for byte; the JSON outputs stay exact JSON, holding the names as chosen.

use serde_json::Value;

use super::{
    approval::{CALLER, start},
    judges::testjudge,
    support::{self, Guardd, ToolDir, output},
};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// guard-exec as the [`CALLER`], an unprivileged client.
fn exec_as(guardd: &Guardd, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(support::bin("guard-exec"));
    cmd.arg("--socket").arg(&guardd.socket).args(args);
    std::os::unix::process::CommandExt::uid(&mut cmd, CALLER);
    std::os::unix::process::CommandExt::gid(&mut cmd, CALLER);
    output(cmd)
}

/// guardctl as the admin (root): its output, which must have succeeded.
fn admin(guardd: &Guardd, args: &[&str]) -> String {
    let out = output(guardd.ctl(args));
    assert!(out.status.success(), "guardctl {args:?}: {out:?}");
    text(&out.stdout)
}

/// The one line of `out` that holds `needle`.
#[track_caller]
fn line_with<'a>(out: &'a str, needle: &str) -> &'a str {
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(lines.len(), 1, "one line with {needle:?} in:\n{out}");
    lines[0]
}

/// What a terminal would act on: ESC, CR, DEL, the C1 CSI and the bidi override.
#[track_caller]
fn assert_inert(what: &str, out: &str) {
    let raw = ['\x1b', '\r', '\x7f', '\u{9b}', '\u{202e}', '\u{2066}'];
    assert!(
        !out.contains(raw),
        "{what} printed a raw control character: {out:?}"
    );
}

/// `wipe` is escalated to an approver that terminates the caller's session; `deploy` is held
/// for a human.
fn policy(judge: &std::path::Path) -> String {
    format!(
        r#"
[[rules]]
id = "gate"
tools = ["wipe"]
action = "escalate"
message = "needs an approver"

[[approvers]]
tools = ["wipe"]
approver = '''command:["{}", "terminate", "destructive"]'''

[tools.wipe]
tier = "medium"
command = ["/usr/bin/echo", "wiped"]

[tools.deploy]
tier = "high"
irreversible = true
command = ["/usr/bin/echo", "deployed", "{{target}}"]
[tools.deploy.args.target]
type = "string"
"#,
        judge.display()
    )
}

#[test]
fn what_a_caller_chose_reaches_the_admins_terminal_escaped() {
    if !support::privileged("what_a_caller_chose_reaches_the_admins_terminal_escaped") {
        return;
    }
    let dir = ToolDir::new("guard-term");
    let guardd = start(&policy(&testjudge(&dir)), &[]);

    // A tool name that, printed raw, erases its own line and the one above (a diverged call's)
    // and writes "conformed" there; with C1 CSI, DEL and a right-to-left override.
    let tool = "t\r\x1b[2K\x1b[1Aconformed\u{9b}2J\x7f\u{202e}";
    let shown = r"t\u{d}\u{1b}[2K\u{1b}[1Aconformed\u{9b}2J\u{7f}\u{202e}";
    let out = exec_as(&guardd, &[tool]);
    assert_eq!(out.status.code(), Some(126), "not in the registry: {out:?}");
    let row = guardd
        .audit_rows()
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "decision")
        .expect("its decision row");
    assert_eq!(row["tool"], tool, "the log keeps the name as chosen");
    let (ts, id) = (
        row["ts"].as_str().expect("ts"),
        row["call_id"].as_str().expect("id"),
    );
    let calls = admin(&guardd, &["calls"]);
    assert_inert("calls", &calls);
    let expected = format!(
        "{ts} {id:<18} {shown} {:<10} {:<10} exit {:<4} -",
        format!("uid {CALLER}"),
        "block",
        "-"
    );
    assert_eq!(line_with(&calls, id), expected);
    let events = admin(&guardd, &["events", "--call", id]);
    assert_inert("events", &events);
    assert!(line_with(&events, id).contains(shown), "{events}");
    // JSON stays JSON: the name as chosen, read back exactly.
    let json = admin(&guardd, &["calls", "--json"]);
    let listed: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert!(listed.iter().any(|c| c["tool"] == tool), "{json}");

    // A session named to make the list read as empty.
    let session = "conv\r\x1b[2Kno session is terminated\u{2066}";
    let out = exec_as(&guardd, &["wipe", "--session", session]);
    assert_eq!(out.status.code(), Some(77), "terminated: {out:?}");
    let sessions = admin(&guardd, &["sessions"]);
    assert_inert("sessions", &sessions);
    let line = line_with(&sessions, "terminated by");
    assert!(
        line.starts_with(r"conv\u{d}\u{1b}[2Kno session is terminated\u{2066} uid 65534"),
        "{line:?}"
    );

    // A held call whose argument holds DEL, the C1 CSI and a bidi override: JSON leaves them
    // raw, the admin's lines do not.
    let out = exec_as(
        &guardd,
        &["deploy", "target=a\x7fb\u{9b}2J\u{202e}c", "--no-wait"],
    );
    assert_eq!(out.status.code(), Some(75), "held: {out:?}");
    let id = text(&out.stdout).trim().to_owned();
    let args = r#"{"target":"a\u{7f}b\u{9b}2J\u{202e}c"}"#;
    let pending = admin(&guardd, &["pending"]);
    assert_inert("pending", &pending);
    assert_eq!(line_with(&pending, "  args "), format!("  args {args}"));
    let approved = admin(&guardd, &["approve", &id]);
    assert_inert("approve", &approved);
    let line = line_with(&approved, "approving");
    assert!(
        line.ends_with(&format!("program /usr/bin/echo, args {args}")),
        "{line:?}"
    );
    let shown = admin(&guardd, &["show", &id]);
    assert_inert("show", &shown);
    assert_eq!(line_with(&shown, "args  "), format!("args        {args}"));
}
