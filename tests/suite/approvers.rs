//! Approvers by tool glob: the `[[approvers]]` matching an escalated call's tool answer it in
//! policy order, first match first, each `escalate` handing it to the next. Each outcome, as
//! inspect_ai's approval policies name them, with its audit row.

use std::path::Path;

use serde_json::Value;

use super::{
    judges::testjudge,
    support::{self, Guardd, ToolDir, output},
};

const TOOLS: &[&str] = &[
    "t_auto",
    "t_reject",
    "t_terminate",
    "t_chain",
    "t_modify",
    "t_modify_bad",
    "t_judge_ok",
    "t_judge_no",
    "t_broken",
    "t_human",
];

fn policy(j: &Path) -> String {
    let j = j.display();
    let mut p = format!(
        r#"
[settings]
disclose_reasons = true

[judges.accept]
command = ["{j}", "score", "0.9", "0.9", "fine"]
[judges.reject]
command = ["{j}", "score", "0.1", "0.9", "too risky"]

[[rules]]
id = "gate"
tools = ["t_*"]
action = "escalate"
message = "needs an approver"

[[rules]]
id = "no-forbidden"
tools = ["t_modify_bad"]
arg = "target"
equals = "forbidden"
action = "block"
message = "forbidden target"

[[approvers]]
tools = ["t_auto"]
approver = "auto"
[[approvers]]
tools = ["t_reject"]
approver = '''command:["{j}", "reject", "not today"]'''
[[approvers]]
tools = ["t_terminate"]
approver = '''command:["{j}", "terminate", "destructive"]'''
[[approvers]]
tools = ["t_chain"]
approver = '''command:["{j}", "escalate"]'''
[[approvers]]
tools = ["t_ch*"]
approver = "auto"
decision = "escalate"
[[approvers]]
tools = ["t_chain"]
approver = "auto"
[[approvers]]
tools = ["t_modify"]
approver = '''command:["{j}", "modify", "target=safe"]'''
[[approvers]]
tools = ["t_modify_bad"]
approver = '''command:["{j}", "modify", "target=forbidden"]'''
[[approvers]]
tools = ["t_judge_ok"]
approver = "judge:accept"
[[approvers]]
tools = ["t_judge_no"]
approver = "judge:reject"
[[approvers]]
tools = ["t_broken"]
approver = '''command:["{j}", "garbage"]'''
[[approvers]]
tools = ["t_*"]
approver = "human"

[tools.free]
tier = "low"
command = ["/usr/bin/echo", "ran", "free", "{{target}}"]
[tools.free.args.target]
type = "string"
"#
    );
    for t in TOOLS {
        p.push_str(&format!(
            r#"
[tools.{t}]
tier = "medium"
command = ["/usr/bin/echo", "ran", "{t}", "{{target}}"]
[tools.{t}.args.target]
type = "string"
"#
        ));
    }
    p
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The approval rows of one call.
fn answers(guardd: &Guardd, call_id: &str) -> Vec<Value> {
    guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "approval" && r["call_id"] == call_id)
        .collect()
}

fn run(guardd: &Guardd, tool: &str, session: Option<&str>) -> std::process::Output {
    let mut cmd = guardd.exec(tool, &["target=orig"]);
    if let Some(s) = session {
        cmd.args(["--session", s]);
    }
    output(cmd)
}

#[test]
fn approvers_by_glob_answer_escalated_calls_with_each_outcome() {
    if !support::privileged("approvers_by_glob_answer_escalated_calls_with_each_outcome") {
        return;
    }
    let dir = ToolDir::new("guard-approvers");
    let j = testjudge(&dir);
    let guardd = Guardd::start(&policy(&j));

    // approve (auto)
    let out = run(&guardd, "t_auto", None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "ran t_auto orig\n");
    let rows = answers(&guardd, &guardd.last_decision_id());
    assert_eq!(
        (rows[0]["approver"].as_str(), rows[0]["outcome"].as_str()),
        (Some("auto"), Some("approve"))
    );

    // reject (a command), with its explanation (reasons disclosed)
    let out = run(&guardd, "t_reject", None);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(text(&out.stderr).contains("not today"), "{out:?}");
    let rows = answers(&guardd, &guardd.last_decision_id());
    assert_eq!(
        (
            rows[0]["approver"].as_str(),
            rows[0]["outcome"].as_str(),
            rows[0]["approved"].as_bool()
        ),
        (Some("command"), Some("reject"), Some(false))
    );

    // escalate, escalate, approve: each approver in turn, each answer a row
    let out = run(&guardd, "t_chain", None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows = answers(&guardd, &guardd.last_decision_id());
    let outcomes: Vec<&str> = rows.iter().filter_map(|r| r["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["escalate", "escalate", "approve"], "{rows:#?}");

    // modify: the approver's arguments are decided again and recorded, then run
    let out = run(&guardd, "t_modify", None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "ran t_modify safe\n",
        "the modified call ran"
    );
    let id = guardd.last_decision_id();
    let rows = answers(&guardd, &id);
    assert_eq!(rows[0]["outcome"], "modify");
    assert_eq!(rows[0]["modified_args"]["target"], "safe");
    let decisions: Vec<Value> = guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "decision" && r["call_id"] == id.as_str())
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    assert_eq!(decisions[1]["args"]["target"], "safe");
    // guardctl show: the call under the decision it ran under, its review beside it.
    let shown = output(guardd.ctl(&["show", &id, "--json"]));
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("show prints JSON");
    assert_eq!(shown["args"]["target"], "safe", "{shown:#}");
    assert_eq!(shown["exit"]["exit_code"], 0, "{shown:#}");
    let kinds: Vec<&str> = shown["review"]
        .as_array()
        .expect("review")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["approval", "decision"], "{shown:#}");
    // ...and modified arguments the policy blocks do not run.
    let out = run(&guardd, "t_modify_bad", None);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(text(&out.stderr).contains("forbidden target"), "{out:?}");
    assert!(out.stdout.is_empty());

    // judge:NAME approves what the judge allows, rejects the rest
    assert_eq!(run(&guardd, "t_judge_ok", None).status.code(), Some(0));
    let out = run(&guardd, "t_judge_no", None);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        text(&out.stderr).contains("too risky") || text(&out.stderr).contains("min_score"),
        "{out:?}"
    );

    // a command approver that answers garbage rejects (fail closed)
    let out = run(&guardd, "t_broken", None);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(text(&out.stderr).contains("no Approval"), "{out:?}");

    // human: held for an admin, as before
    let caller = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("t_human", &["target=orig", "--no-wait"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("guard-exec")
    };
    assert_eq!(caller.status.code(), Some(75), "{caller:?}");
    let pending = output(guardd.ctl(&["pending", "--json"]));
    assert!(text(&pending.stdout).contains("t_human"), "{pending:?}");
}

#[test]
fn terminate_blocks_the_session_until_an_admin_clears_it() {
    if !support::privileged("terminate_blocks_the_session_until_an_admin_clears_it") {
        return;
    }
    let dir = ToolDir::new("guard-approvers");
    let j = testjudge(&dir);
    let mut guardd = Guardd::start(&policy(&j));

    let out = run(&guardd, "t_terminate", Some("conv-1"));
    assert_eq!(out.status.code(), Some(77), "a distinct exit: {out:?}");
    assert!(text(&out.stderr).contains("destructive"), "{out:?}");
    // Any later call of that session is blocked, even one the policy allows; another session
    // is not.
    let out = run(&guardd, "free", Some("conv-1"));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(out.stdout.is_empty());
    assert_eq!(run(&guardd, "free", Some("conv-2")).status.code(), Some(0));
    // The block outlives a restart of guardd.
    guardd.restart();
    assert_eq!(run(&guardd, "free", Some("conv-1")).status.code(), Some(77));
    let list = output(guardd.ctl(&["sessions", "--json"]));
    assert!(text(&list.stdout).contains("conv-1"), "{list:?}");
    let cleared = output(guardd.ctl(&["sessions", "--clear", "conv-1"]));
    assert!(cleared.status.success(), "{cleared:?}");
    let out = run(&guardd, "free", Some("conv-1"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let sessions: Vec<Value> = guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "session")
        .collect();
    assert_eq!(sessions.len(), 2, "terminated, then cleared: {sessions:#?}");
    assert_eq!(
        (
            sessions[0]["terminated"].as_bool(),
            sessions[1]["by"].as_u64()
        ),
        (Some(true), Some(0))
    );
}

/// With `[agents]`, a terminate blocks the caller's agent, whatever session it names or
/// leaves out: the agent is who the kernel says the caller is, a session only what it says.
#[test]
fn terminate_blocks_the_callers_agent_whatever_session_it_names() {
    if !support::privileged("terminate_blocks_the_callers_agent_whatever_session_it_names") {
        return;
    }
    let dir = ToolDir::new("guard-approvers");
    let j = testjudge(&dir);
    let guardd = Guardd::start(&format!("{}\n[agents.bot]\nuids = [0]\n", policy(&j)));
    let out = run(&guardd, "t_terminate", None);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    // Another session, or none: the agent's calls are blocked.
    for session in [Some("conv-9"), None] {
        let out = run(&guardd, "free", session);
        assert_eq!(out.status.code(), Some(77), "{session:?}: {out:?}");
        assert!(
            text(&out.stderr).contains("agent 'bot' was terminated"),
            "{out:?}"
        );
    }
    let cleared = output(guardd.ctl(&["sessions", "--clear", "agent:bot"]));
    assert!(cleared.status.success(), "{cleared:?}");
    let out = run(&guardd, "free", Some("conv-9"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
