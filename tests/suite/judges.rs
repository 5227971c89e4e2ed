//! Semantic judges: programs guard runs confined before a call, with the proposed call on
//! stdin; the call runs only when each judge's score and confidence reach its thresholds. A
//! judge that rejects, times out, prints garbage or tries to reach the network (it may not:
//! it runs confined) blocks the call, and every verdict is a `judged` audit row.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
};

use serde_json::Value;

use super::support::{self, Guardd, ToolDir, output};

/// `guard-testjudge` beside the test tool, where `guard-tool` can run it.
pub(super) fn testjudge(dir: &ToolDir) -> PathBuf {
    let path = dir.dir.join("guard-testjudge");
    if std::fs::hard_link(support::bin("guard-testjudge"), &path).is_err() {
        let _copying = support::FORK_LOCK
            .write()
            .unwrap_or_else(|e| e.into_inner());
        std::fs::copy(support::bin("guard-testjudge"), &path).expect("copy testjudge");
    }
    path
}

fn policy(judge: &Path, ws: &Path, port: u16) -> String {
    let (j, ws) = (judge.display(), ws.display());
    let mut p = format!(
        r#"
[settings]
disclose_reasons = true
judges = ["reject"]

[judges.accept]
command = ["{j}", "score", "0.9", "0.8", "reads only", "--probe"]
criteria = "Is the call safe and needed?"
[judges.reject]
command = ["{j}", "score", "0.2", "0.9", "it reads a secret"]
[judges.unsure]
command = ["{j}", "score", "0.9", "0.1", "not sure"]
min_confidence = 0.5
[judges.slow]
command = ["{j}", "sleep", "30"]
timeout = 1
[judges.garbage]
command = ["{j}", "garbage"]
[judges.net]
command = ["{j}", "connect", "127.0.0.1:{port}"]
[judges.failing]
command = ["{j}", "exit", "2"]
"#
    );
    for (tool, judges) in [
        ("t_accept", r#"judges = ["accept"]"#),
        ("t_reject", r#"judges = ["accept", "reject"]"#),
        ("t_default", ""),
        ("t_skip", "skip_judge = true"),
        ("t_unsure", r#"judges = ["unsure"]"#),
        ("t_slow", r#"judges = ["slow"]"#),
        ("t_garbage", r#"judges = ["garbage"]"#),
        ("t_net", r#"judges = ["net"]"#),
        ("t_failing", r#"judges = ["failing"]"#),
    ] {
        p.push_str(&format!(
            r#"
[tools.{tool}]
tier = "low"
command = ["/usr/bin/cat", "{ws}/file"]
{judges}
[tools.{tool}.effects]
read = ["{ws}/file"]
"#
        ));
    }
    // A path argument: the judge reads it opened beneath its root, as the call would.
    p.push_str(&format!(
        r#"
[tools.t_path]
tier = "low"
command = ["/usr/bin/cat", "{{path}}"]
judges = ["accept"]
[tools.t_path.args.path]
type = "path"
within = ["{ws}"]
[tools.t_path.effects]
read = ["{{path}}"]
"#
    ));
    p
}

fn judged(guardd: &Guardd) -> Vec<Value> {
    guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "judged")
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn judges_allow_only_what_they_vouch_for_and_fail_closed() {
    if !support::privileged("judges_allow_only_what_they_vouch_for_and_fail_closed") {
        return;
    }
    let dir = ToolDir::new("guard-judges");
    let judge = testjudge(&dir);
    let ws = dir.subdir("ws", 0o755);
    std::fs::write(ws.join("file"), "the workspace file\n").expect("file");
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let guardd = Guardd::start(&policy(&judge, &ws, port));

    // Rejected: the second judge's low score blocks, with its reasoning (reasons disclosed).
    let out = output(guardd.exec("t_reject", &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("judge 'reject'")
            && stderr.contains("below min_score 0.7")
            && stderr.contains("it reads a secret"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // Accepted: the call runs; the judge got the payload aegis describes, could read the
    // call's file and could not write it.
    let mut accept = guardd.exec("t_accept", &[]);
    accept.args(["--task", "summarise the workspace"]);
    let out = output(accept);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "the workspace file\n");
    let rows = judged(&guardd);
    let row = rows.last().expect("a judged row");
    assert_eq!(
        (row["judge"].as_str(), row["allowed"].as_bool()),
        (Some("accept"), Some(true))
    );
    let answer = &row["answer"];
    assert_eq!(answer["score"], 0.9);
    let got = &answer["metadata"]["received"];
    assert_eq!(
        got["validation_context"],
        "semantic_judge_pre_execution_inner_loop"
    );
    assert_eq!(got["criteria"], "Is the call safe and needed?");
    assert_eq!(got["task"], "summarise the workspace");
    assert_eq!(got["proposed_tool_call"]["tool"], "t_accept");
    assert_eq!(got["proposed_tool_call"]["command"][0], "/usr/bin/cat");
    assert!(
        got["available_tools"]
            .as_array()
            .is_some_and(|t| t.len() == 10),
        "{got}"
    );
    assert_eq!(
        got["policy_violations"],
        serde_json::json!(["t_reject"]),
        "{got}"
    );
    let probe = &answer["metadata"]["probe"][0];
    assert_eq!(probe["read"], "ok", "{probe}");
    assert_ne!(
        probe["write"], "ok",
        "a judge reads the call's paths, never writes: {probe}"
    );

    let path_arg = format!("path={}/file", ws.display());
    let out = output(guardd.exec("t_path", &[&path_arg]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "the workspace file\n");
    let rows = judged(&guardd);
    let probe = &rows.last().expect("a judged row")["answer"]["metadata"]["probe"][0];
    assert_eq!(probe["read"], "ok", "{probe}");

    // [settings] judges applies to a tool that names none; skip_judge bypasses it.
    assert_eq!(
        output(guardd.exec("t_default", &[])).status.code(),
        Some(126)
    );
    assert_eq!(output(guardd.exec("t_skip", &[])).status.code(), Some(0));

    // Each way of failing rejects, with its reason.
    for (tool, why) in [
        ("t_unsure", "below min_confidence 0.5"),
        ("t_slow", "timed out after 1 s"),
        ("t_garbage", "no GradientResult"),
        // It connects nowhere, so it has a network namespace of its own: the host's loopback
        // is not there to reach, its own refuses, and the judge fails.
        ("t_net", "Connection refused"),
        ("t_failing", "exited 2"),
    ] {
        let out = output(guardd.exec(tool, &[]));
        assert_eq!(out.status.code(), Some(126), "{tool}: {out:?}");
        assert!(text(&out.stderr).contains(why), "{tool}: {out:?}");
        assert!(out.stdout.is_empty(), "{tool} ran: {out:?}");
    }
    // The judge that tried the network never reached it: it runs confined.
    assert!(listener.accept().is_err(), "a confined judge connected out");

    // Every verdict is a row: reject (and accept before it), accept, path, default, the five
    // failures.
    let rows = judged(&guardd);
    assert_eq!(rows.len(), 10, "{rows:#?}");
    let net = rows.iter().find(|r| r["judge"] == "net").expect("net row");
    assert_eq!(net["allowed"].as_bool(), Some(false), "{net}");
    assert!(net["answer"].is_null(), "{net}");
    assert!(
        net["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Connection refused")),
        "{net}"
    );
    // ...and an event in guardctl's history.
    let events = output(guardd.ctl(&["events", "--kind", "judged", "--json"]));
    let events: Vec<Value> = text(&events.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(events.len(), 10, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["judge"] == "net" && e["allowed"] == false)
    );
    let slow = rows
        .iter()
        .find(|r| r["judge"] == "slow")
        .expect("slow row");
    assert!(
        slow["reason"]
            .as_str()
            .is_some_and(|r| r.contains("timed out")),
        "{slow}"
    );
}

#[test]
fn a_judges_reasoning_reaches_the_caller_only_when_reasons_are_disclosed() {
    if !support::privileged("a_judges_reasoning_reaches_the_caller_only_when_reasons_are_disclosed")
    {
        return;
    }
    let dir = ToolDir::new("guard-judges");
    let judge = testjudge(&dir);
    let ws = dir.subdir("ws", 0o755);
    std::fs::write(ws.join("file"), "x\n").expect("file");
    let p = policy(&judge, &ws, 9).replace("disclose_reasons = true", "disclose_reasons = false");
    let guardd = Guardd::start(&p);
    let out = output(guardd.exec("t_reject", &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("blocked by policy"), "{stderr}");
    assert!(
        !stderr.contains("secret") && !stderr.contains("judge"),
        "{stderr}"
    );
    // Its own caller (root here) reads the judge's reasons over the socket (`guardctl why`).
    let id = stderr
        .split("(call ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the call's id")
        .to_owned();
    let why = output(guardd.ctl(&["why", &id]));
    assert!(why.status.success(), "{why:?}");
    let said = text(&why.stdout);
    assert!(
        said.contains("it reads a secret") && said.contains("judge:"),
        "{said}"
    );
    let rows = judged(&guardd);
    assert!(
        rows.iter()
            .any(|r| r["answer"]["reasoning"] == "it reads a secret"),
        "the audit row keeps it: {rows:#?}"
    );
}
