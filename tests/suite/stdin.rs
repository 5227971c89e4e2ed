//! A tool's input, through guard-exec and the socket, against a real guardd: `write_file` of
//! the default policy writes what guard-exec is piped, or its `content=`, and refuses to run
//! (leaving the file as it was) with neither; an input argument reaches the tool through
//! guardd's own pipe, never the caller's descriptor; and an exec that says it has no stdin to
//! give is refused, recorded, for a tool that reads its caller's stdin, which still runs for a
//! caller that pipes it.

use std::{io::Write as _, process::Stdio};

use serde_json::{Value, json};

use super::support::{self, FORK_LOCK, Guardd, ToolDir, output};

/// The default policy with its workspace in `ws`, and two tools: `count` reads its caller's
/// stdin; `say` prints its input argument.
/// A workspace in `dir`, the developer's (nobody's): the default policy's writing tools run as
/// its owner.
fn owned_ws(dir: &ToolDir) -> std::path::PathBuf {
    let ws = dir.subdir("ws", 0o777);
    std::os::unix::fs::chown(&ws, Some(support::NOBODY), Some(support::NOBODY)).expect("chown");
    ws
}

fn policy(ws: &std::path::Path) -> String {
    support::default_policy_in(ws)
        + r#"
[tools.count]
tier = "low"
command = ["/usr/bin/wc", "-c"]
stdin = "caller"

[tools.say]
tier = "low"
command = ["/bin/cat"]
stdin = { arg = "text" }
[tools.say.args.text]
type = "string"
"#
}

/// Runs `cmd` with `input` on its stdin (a pipe), to its end.
fn piped(mut cmd: std::process::Command, input: &[u8]) -> std::process::Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = {
        let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("spawn")
    };
    let mut stdin = child.stdin.take().expect("stdin");
    // A tool that does not read it may close the pipe first.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().expect("wait")
}

#[test]
fn guard_exec_gives_write_file_its_content_piped_or_named_and_never_an_empty_one() {
    if !support::privileged("guard_exec_gives_write_file_its_content") {
        return;
    }
    let dir = ToolDir::new("stdin");
    let ws = owned_ws(&dir);
    let guardd = Guardd::start(&policy(&ws));
    let file = ws.join("notes.md");

    let in_ws = |mut c: std::process::Command| {
        c.current_dir(&ws);
        c
    };
    let out = piped(
        in_ws(guardd.exec("write_file", &["path=notes.md"])),
        b"piped in\n",
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).expect("notes"), "piped in\n");

    // Named on the command line: guard-exec's stdin (here /dev/null) is not read.
    let out = output(in_ws(
        guardd.exec("write_file", &["path=notes.md", "content=named\n"]),
    ));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).expect("notes"), "named\n");

    // Neither: refused by the policy (a missing argument), and the file keeps its content.
    let out = output(in_ws(guardd.exec("write_file", &["path=notes.md"])));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).expect("notes"), "named\n");
}

#[test]
fn an_input_argument_reaches_the_tool_through_guardds_pipe_not_the_callers() {
    if !support::privileged("an_input_argument_reaches_the_tool_through_guardds_pipe") {
        return;
    }
    let dir = ToolDir::new("stdin");
    let ws = owned_ws(&dir);
    let guardd = Guardd::start(&policy(&ws));
    let out = piped(
        guardd.exec("say", &["text=from the argument"]),
        b"FROM THE CALLER",
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the argument");
}

#[test]
fn an_exec_without_stdin_is_refused_for_a_tool_that_reads_its_callers() {
    if !support::privileged("an_exec_without_stdin_is_refused_for_a_tool_that_reads_its_callers") {
        return;
    }
    let dir = ToolDir::new("stdin");
    let ws = owned_ws(&dir);
    let guardd = Guardd::start(&policy(&ws));
    let null: Vec<std::fs::File> = (0..3)
        .map(|_| std::fs::File::open("/dev/null").expect("/dev/null"))
        .collect();
    let fds: Vec<i32> = null.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    let exec = |tool: &str, args: Value| {
        let mut client = guard::client::Client::connect(&guardd.socket).expect("connect");
        let frame = json!({"v": 1, "type": "exec", "tool": tool, "args": args, "stdin": "none", "cwd": &ws});
        client
            .send_frame(format!("{frame}\n").as_bytes(), &fds)
            .expect("send");
        client.recv::<Value>().expect("reply").expect("a reply")
    };
    let refused = exec("count", json!({}));
    assert_eq!(
        (&refused["type"], &refused["decision"]),
        (&json!("decision"), &json!("block")),
        "{refused}"
    );
    let message = refused["message"].as_str().expect("message");
    assert!(message.contains(r#""stdin": "none""#), "{message}");
    let rows = guardd.audit_rows();
    let row = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["call_id"] == refused["call_id"])
        .expect("its decision row");
    assert_eq!(row["decision"]["check_name"], "stdin", "{row}");
    assert!(
        !rows.iter().any(|r| r["kind"] == "finished"),
        "something ran: {rows:?}"
    );
    // A tool that reads no stdin of its caller's runs for the same exec.
    assert_eq!(exec("list_dir", json!({"dir": "."}))["decision"], "allow");
    // And the caller who pipes one gets it read.
    let out = piped(guardd.exec("count", &[]), b"four");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "4");
}
