//! Attacks on approvals and judges from outside: ways to get a call run that nobody approved as
//! held, or a helper's answer read as something it did not say. Each is a scenario that ran
//! the call (or lost the answer) before its fix.

use serde_json::Value;

use super::{
    approval::{CALLER, approval_rows, ctl, held, spawn, start},
    held::DEPLOY,
    judges::testjudge,
    support::{self, Guardd, ToolDir, output},
};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn rows(guardd: &Guardd, kind: &str) -> Vec<Value> {
    guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

#[test]
fn a_judge_whose_answer_comes_after_what_guard_reads_rejects() {
    if !support::privileged("a_judge_whose_answer_comes_after_what_guard_reads_rejects") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let policy = format!(
        r#"
[judges.flood]
command = ["{}", "flood"]

[tools.t_flood]
tier = "low"
command = ["/usr/bin/echo", "ran"]
judges = ["flood"]
"#,
        j.display()
    );
    let guardd = Guardd::start(&policy);
    // The judge's last line says no; the last line of the first MiB says yes. Reading only
    // that MiB and taking its last line would run the call.
    let out = output(guardd.exec("t_flood", &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "the call ran: {out:?}");
    let judged = rows(&guardd, "judged");
    assert_eq!(judged.len(), 1, "{judged:#?}");
    assert_eq!(judged[0]["allowed"], false, "{judged:#?}");
    assert!(
        judged[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("longer than")),
        "{judged:#?}"
    );
}

#[test]
fn arguments_an_approver_modified_are_judged_before_they_run() {
    if !support::privileged("arguments_an_approver_modified_are_judged_before_they_run") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let j = j.display();
    let policy = format!(
        r#"
[settings]
disclose_reasons = true

[judges.no_evil]
command = ["{j}", "veto", "target=evil"]

[[rules]]
id = "gate"
tools = ["t_mod"]
action = "escalate"
message = "needs an approver"

[[approvers]]
tools = ["t_mod"]
approver = '''command:["{j}", "modify", "target=evil"]'''

[tools.t_mod]
tier = "medium"
command = ["/usr/bin/echo", "ran", "{{target}}"]
judges = ["no_evil"]
[tools.t_mod.args.target]
type = "string"
"#
    );
    let guardd = Guardd::start(&policy);
    // The judge would refuse target=evil sent as it is.
    let out = output(guardd.exec("t_mod", &["target=evil"]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    // Sent as target=fine, it passes the judge; the approver then changes it to target=evil,
    // which the policy allows: the judge must see it too.
    let out = output(guardd.exec("t_mod", &["target=fine"]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        !text(&out.stdout).contains("ran"),
        "the changed call ran: {out:?}"
    );
    assert!(text(&out.stderr).contains("no_evil"), "{out:?}");
    let judged = rows(&guardd, "judged");
    assert_eq!(judged.len(), 3, "{judged:#?}");
    assert_eq!(
        judged
            .iter()
            .map(|r| r["allowed"].clone())
            .collect::<Vec<_>>(),
        [false, true, false],
        "{judged:#?}"
    );
}

/// `approve` of held call `id` is refused because the policy changed; it is denied, and its
/// waiting `caller` is told so without the call having run.
#[track_caller]
fn approve_is_refused_as_the_policy_changed(
    guardd: &Guardd,
    id: &str,
    caller: std::process::Child,
) {
    let approve = ctl(guardd, &["approve", id]);
    assert!(!approve.status.success(), "approved: {approve:?}");
    assert!(
        text(&approve.stderr).contains("the policy changed"),
        "{approve:?}"
    );
    assert!(ctl(guardd, &["deny", id]).status.success());
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "it ran: {out:?}");
}

/// Puts `policy` in force in `guardd`.
fn reload(guardd: &Guardd, policy: &str) {
    std::fs::write(guardd.dir.join("policy.toml"), policy).expect("policy");
    let out = ctl(guardd, &["reload"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_held_call_runs_only_while_the_policy_in_force_still_grants_it_as_held() {
    if !support::privileged(
        "a_held_call_runs_only_while_the_policy_in_force_still_grants_it_as_held",
    ) {
        return;
    }
    let guardd = start(DEPLOY, &[]);
    let blocked = format!(
        "{DEPLOY}\n[[rules]]\nid = \"freeze\"\ntools = [\"deploy\"]\naction = \"block\"\n\
         message = \"deploys are frozen\"\n"
    );

    // Held, then the policy blocks the tool: approving it does not run it under the plan of a
    // policy no longer in force.
    let caller = spawn(&guardd, "deploy", &["target=alpha"]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    reload(&guardd, &blocked);
    approve_is_refused_as_the_policy_changed(&guardd, &id, caller);

    // Approved while the policy granted it, then the policy changed before its caller came
    // back: it does not run, and the refusal is a row.
    reload(&guardd, DEPLOY);
    let out = output(exec_as(&guardd, &["--no-wait"], &["deploy", "target=beta"]));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    reload(&guardd, &blocked);
    let out = output(exec_as(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "it ran: {out:?}");
    assert!(text(&out.stderr).contains("the policy changed"), "{out:?}");
    let answers = approval_rows(&guardd);
    let last = answers.last().expect("rows");
    assert_eq!(
        (last["call_id"].as_str(), last["approved"].as_bool()),
        (Some(id.as_str()), Some(false)),
        "{answers:#?}"
    );

    // A change that leaves the call as it was held does not stop it.
    reload(&guardd, DEPLOY);
    let out = output(exec_as(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=gamma"],
    ));
    let id = text(&out.stdout).trim().to_owned();
    reload(
        &guardd,
        &format!("{DEPLOY}\n[tools.other]\ntier = \"low\"\ncommand = [\"/usr/bin/true\"]\n"),
    );
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = output(exec_as(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "deployed gamma\n");
}

/// guard-exec as the [`CALLER`], with `flags` before the tool.
fn exec_as(guardd: &Guardd, flags: &[&str], tool_args: &[&str]) -> std::process::Command {
    exec_as_uid(guardd, CALLER, flags, tool_args)
}

/// guard-exec as `uid`, of the socket's group (the [`CALLER`]'s), with `flags` before the tool.
fn exec_as_uid(
    guardd: &Guardd,
    uid: u32,
    flags: &[&str],
    tool_args: &[&str],
) -> std::process::Command {
    let mut cmd = std::process::Command::new(support::bin("guard-exec"));
    cmd.arg("--socket")
        .arg(&guardd.socket)
        .args(flags)
        .args(tool_args);
    std::os::unix::process::CommandExt::uid(&mut cmd, uid);
    std::os::unix::process::CommandExt::gid(&mut cmd, CALLER);
    cmd
}

#[test]
fn a_held_call_of_a_session_terminated_since_does_not_run() {
    if !support::privileged("a_held_call_of_a_session_terminated_since_does_not_run") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let policy = terminating(&j, DEPLOY);
    let guardd = start(&policy, &[]);
    // The agent leaves a call held in its session, then an approver ends the session.
    let session = ["--session", "conv-9"];
    let no_wait = ["--session", "conv-9", "--no-wait"];
    let out = output(exec_as(&guardd, &no_wait, &["deploy", "target=alpha"]));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    let out = output(exec_as(&guardd, &session, &["wipe"]));
    assert_eq!(out.status.code(), Some(77), "{out:?}");

    // The session's held call does not run while the session is terminated: not approved...
    let approve = ctl(&guardd, &["approve", &id]);
    assert!(!approve.status.success(), "{approve:?}");
    assert!(text(&approve.stderr).contains("terminated"), "{approve:?}");
    // ...and once the admin clears the session, it may be.
    assert!(
        ctl(&guardd, &["sessions", "--clear", "conv-9"])
            .status
            .success()
    );
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = output(exec_as(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "deployed alpha\n");

    // Approved, then the session is terminated before its caller comes back: it does not run.
    let out = output(exec_as(&guardd, &no_wait, &["deploy", "target=beta"]));
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = output(exec_as(&guardd, &session, &["wipe"]));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let out = output(exec_as(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "it ran: {out:?}");
    assert!(text(&out.stderr).contains("terminated"), "{out:?}");
    let last = approval_rows(&guardd).pop().expect("rows");
    assert_eq!(
        (last["call_id"].as_str(), last["approved"].as_bool()),
        (Some(id.as_str()), Some(false))
    );
}

#[test]
fn a_call_that_cannot_be_held_is_refused_with_a_row() {
    if !support::privileged("a_call_that_cannot_be_held_is_refused_with_a_row") {
        return;
    }
    let guardd = start(DEPLOY, &["--max-queue", "1"]);
    let out = output(exec_as(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=alpha"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    // The store is full: the next call is not held, and so never runs; the audit log says so.
    let out = output(exec_as(&guardd, &["--no-wait"], &["deploy", "target=beta"]));
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_ne!(out.status.code(), Some(75), "{out:?}");
    assert!(text(&out.stderr).contains("too many calls"), "{out:?}");
    held(&guardd, 1);
    let id = guardd.last_decision_id();
    let answers = approval_rows(&guardd);
    assert!(
        answers.iter().any(|r| r["call_id"] == id.as_str()
            && r["approved"] == false
            && r["reason"]
                .as_str()
                .is_some_and(|w| w.contains("too many calls"))),
        "no row says why call {id} was not held: {answers:#?}"
    );
}

/// A client of the socket group that is not [`CALLER`].
const OTHER: u32 = 40_049;

#[test]
fn one_uid_cannot_take_every_held_slot_nor_fill_the_store_with_one_call() {
    if !support::privileged("one_uid_cannot_take_every_held_slot_nor_fill_the_store_with_one_call")
    {
        return;
    }
    let guardd = start(DEPLOY, &["--max-held-per-uid", "2"]);
    // One uid leaves as many calls held as it may...
    for target in ["target=a1", "target=a2"] {
        let out = output(exec_as(&guardd, &["--no-wait"], &["deploy", target]));
        assert_eq!(out.status.code(), Some(75), "{out:?}");
    }
    // ...and its next one is refused, naming the bound, not held, never run, with a row.
    let out = output(exec_as(&guardd, &["--no-wait"], &["deploy", "target=a3"]));
    assert!(!matches!(out.status.code(), Some(0 | 75)), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("uid {CALLER} already has 2 calls"))
            && said.contains("max_held_per_uid"),
        "{said}"
    );
    held(&guardd, 2);
    let id = guardd.last_decision_id();
    assert!(
        approval_rows(&guardd)
            .iter()
            .any(|r| r["call_id"] == id.as_str()
                && r["approved"] == false
                && r["reason"]
                    .as_str()
                    .is_some_and(|w| w.contains("max_held_per_uid"))),
        "no row says why call {id} was not held"
    );

    // Another uid's call is still held, and runs once approved.
    let other = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        exec_as_uid(&guardd, OTHER, &[], &["deploy", "target=b1"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("guard-exec")
    };
    let calls = held(&guardd, 3);
    let theirs = calls
        .iter()
        .find(|c| c["uid"] == OTHER)
        .and_then(|c| c["call_id"].as_str())
        .expect("the other uid's call is held");
    assert!(ctl(&guardd, &["approve", theirs]).status.success());
    let out = other.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "deployed b1\n");

    // A call whose record would be too large is refused rather than held (its argument is
    // kept three times: as sent, as shown and in the command).
    let large = format!("target={}", "x".repeat(100_000));
    let out = output(exec_as_uid(
        &guardd,
        OTHER,
        &["--no-wait"],
        &["deploy", &large],
    ));
    assert!(!matches!(out.status.code(), Some(0 | 75)), "{out:?}");
    assert!(text(&out.stderr).contains("too large to hold"), "{out:?}");
    held(&guardd, 2);
}

#[test]
fn one_user_cannot_put_violations_in_another_users_session() {
    if !support::privileged("one_user_cannot_put_violations_in_another_users_session") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let policy = format!(
        r#"
[judges.look]
command = ["{}", "score", "0.9", "0.9", "looked"]

[tools.t_judged]
tier = "low"
command = ["/usr/bin/echo", "ran"]
judges = ["look"]
"#,
        j.display()
    );
    let guardd = start(&policy, &[]);
    // Another uid names the session root's agent uses, and gets a tool blocked in it.
    let out = output(exec_as(
        &guardd,
        &["--session", "conv-root"],
        &["rm_everything"],
    ));
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    // The judge of root's call in that session is not told of the other uid's block.
    let mut cmd = guardd.exec("t_judged", &[]);
    cmd.args(["--session", "conv-root"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let judged = rows(&guardd, "judged");
    let got = &judged.last().expect("a judged row")["answer"]["metadata"]["received"];
    assert_eq!(got["policy_violations"], serde_json::json!([]), "{got}");
    // The uid's own blocks in its own session still reach its judges.
    let out = output(exec_as(&guardd, &["--session", "conv-root"], &["t_judged"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let judged = rows(&guardd, "judged");
    let got = &judged.last().expect("a judged row")["answer"]["metadata"]["received"];
    assert_eq!(
        got["policy_violations"],
        serde_json::json!(["rm_everything"]),
        "{got}"
    );
}

#[test]
fn an_approval_can_be_withdrawn_until_its_call_runs() {
    if !support::privileged("an_approval_can_be_withdrawn_until_its_call_runs") {
        return;
    }
    let guardd = start(DEPLOY, &[]);
    let out = output(exec_as(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=alpha"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    // Approved by mistake: until its caller comes back for it, the admin can still say no.
    let deny = ctl(&guardd, &["deny", &id, "--reason", "approved by mistake"]);
    assert!(deny.status.success(), "{deny:?}");
    held(&guardd, 0);
    let out = output(exec_as(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "it ran: {out:?}");
    let answers = approval_rows(&guardd);
    let answers: Vec<_> = answers.iter().map(|r| r["approved"].clone()).collect();
    assert_eq!(answers, [true, false]);
    // Approving twice is still refused.
    let out = output(exec_as(&guardd, &["--no-wait"], &["deploy", "target=beta"]));
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    assert!(!ctl(&guardd, &["approve", &id]).status.success());
}

#[test]
fn guardd_refuses_a_store_of_held_calls_that_another_uid_owns() {
    if !support::privileged("guardd_refuses_a_store_of_held_calls_that_another_uid_owns") {
        return;
    }
    // The caller made the store's directory before guardd first ran (its audit directory let
    // it): it could then write a record there, approved, and resume it after a restart.
    let dir = support::TempDir::new("guard-atk-store");
    let pending = dir.join("audit.jsonl.pending");
    std::fs::create_dir(&pending).expect("pending");
    std::os::unix::fs::chown(&pending, Some(CALLER), Some(CALLER)).expect("chown");
    std::fs::write(dir.join("policy.toml"), DEPLOY).expect("policy");
    let socket = dir.join("guard.sock");
    let mut guardd = std::process::Command::new(support::bin("guardd"))
        .arg("--policy")
        .arg(dir.join("policy.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--audit")
        .arg(dir.join("audit.jsonl"))
        .args(["--cgroup", &support::unique("guard-e2e")])
        .arg("--allow-writes-on-audit-fs")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("guardd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = guardd.try_wait().expect("wait") {
            break status;
        }
        if std::os::unix::net::UnixStream::connect(&socket).is_ok()
            || std::time::Instant::now() > deadline
        {
            let _ = guardd.kill();
            let _ = guardd.wait();
            panic!("guardd started with its store of held calls owned by uid {CALLER}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = guardd.wait_with_output().expect("guardd");
    let stderr = text(&out.stderr);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("audit.jsonl.pending") && stderr.contains(&format!("uid {CALLER}")),
        "{stderr}"
    );
}

#[test]
fn keeping_a_terminated_session_writes_through_no_planted_symlink() {
    if !support::privileged("keeping_a_terminated_session_writes_through_no_planted_symlink") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let policy = terminating(&j, "");
    let guardd = start(&policy, &[]);
    // Someone who could write beside the audit log points the sessions file's temporary name
    // at a file of root's.
    let victim = dir.dir.join("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    let mut tmp = guardd.audit.as_os_str().to_owned();
    tmp.push(".sessions.tmp");
    std::os::unix::fs::symlink(&victim, &tmp).expect("symlink");
    let out = output(exec_as(&guardd, &["--session", "conv-7"], &["wipe"]));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "guardd wrote through the symlink"
    );
    let sessions = ctl(&guardd, &["sessions", "--json"]);
    assert!(text(&sessions.stdout).contains("conv-7"), "{sessions:?}");
}

#[test]
fn one_uid_cannot_have_another_uids_session_terminated() {
    if !support::privileged("one_uid_cannot_have_another_uids_session_terminated") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let policy = terminating(
        &j,
        "[tools.free]\ntier = \"low\"\ncommand = [\"/usr/bin/echo\", \"free\"]\n",
    );
    let guardd = start(&policy, &[]);
    // The caller names root's session and has a call of it terminated on purpose.
    let out = output(exec_as(&guardd, &["--session", "conv-root"], &["wipe"]));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    // Its own calls in that session are blocked...
    let out = output(exec_as(&guardd, &["--session", "conv-root"], &["free"]));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    // ...root's are not: it is another uid's session of the same name.
    let mut cmd = guardd.exec("free", &[]);
    cmd.args(["--session", "conv-root"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "free\n");
    // The admin sees whose session it is, and clears it by name.
    let sessions = ctl(&guardd, &["sessions", "--json"]);
    assert!(
        text(&sessions.stdout).contains(&format!("\"uid\":{CALLER}")),
        "{sessions:?}"
    );
    assert!(
        ctl(&guardd, &["sessions", "--clear", "conv-root"])
            .status
            .success()
    );
    let out = output(exec_as(&guardd, &["--session", "conv-root"], &["free"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A policy whose `wipe` is escalated to a command approver (the test judge) that terminates
/// the caller's session; `extra` adds tools.
fn terminating(judge: &std::path::Path, extra: &str) -> String {
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

{extra}"#,
        judge.display()
    )
}

/// `deploy` of [`DEPLOY`] (escalated, held for a human) and `t_low` (allowed), both judged by a
/// judge that answers "run it" after two seconds, long enough for a reload to come meanwhile;
/// with `freeze`, a rule blocks both.
fn judged_slowly(j: &std::path::Path, freeze: bool) -> String {
    let mut policy = format!(
        r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[judges.slow]
command = ["{}", "sleep", "2"]
timeout = 30

[tools.deploy]
tier = "high"
irreversible = true
command = ["/usr/bin/echo", "deployed", "{{target}}"]
judges = ["slow"]
[tools.deploy.args.target]
type = "string"

[tools.t_low]
tier = "low"
command = ["/usr/bin/echo", "ran"]
judges = ["slow"]
"#,
        j.display()
    );
    if freeze {
        policy.push_str(
            "\n[[rules]]\nid = \"freeze\"\ntools = [\"deploy\", \"t_low\"]\naction = \"block\"\n\
             message = \"frozen\"\n",
        );
    }
    policy
}

/// Waits until the audit log holds `n` decision rows.
fn decided(guardd: &Guardd, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rows(guardd, "decision").len() < n {
        assert!(std::time::Instant::now() < deadline, "no decision row");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_reload_while_a_call_is_judged_is_not_bypassed_by_the_plan_decided_before_it() {
    if !support::privileged(
        "a_reload_while_a_call_is_judged_is_not_bypassed_by_the_plan_decided_before_it",
    ) {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let j = testjudge(&dir);
    let guardd = start(&judged_slowly(&j, false), &[]);

    // An allowed call: the policy that decided it is replaced while its judge runs. What the
    // judge passed is a call the new policy blocks, so it does not run, and a row says why.
    let caller = spawn(&guardd, "t_low", &[]);
    decided(&guardd, 1);
    reload(&guardd, &judged_slowly(&j, true));
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "it ran: {out:?}");
    assert!(text(&out.stderr).contains("the policy changed"), "{out:?}");
    let refusal = rows(&guardd, "decision");
    assert_eq!(refusal.len(), 2, "{refusal:#?}");
    assert_eq!(refusal[1]["call_id"], refusal[0]["call_id"], "{refusal:#?}");
    assert_eq!(refusal[1]["decision"]["decision"], "block", "{refusal:#?}");
    assert_eq!(
        refusal[1]["decision"]["check_name"], "reload",
        "{refusal:#?}"
    );
    // Each decision row names the policy that made it: the first the one the call was
    // decided under, the refusal the one the reload put in force, as its row and
    // `guardctl status` say.
    let reloaded = rows(&guardd, "reload");
    let in_force = &reloaded.last().expect("a reload row")["version"];
    assert!(
        in_force.as_str().is_some_and(|v| v.starts_with("sha256:")),
        "{reloaded:#?}"
    );
    assert_eq!(&refusal[1]["policy"], in_force, "{refusal:#?}");
    assert!(
        refusal[0]["policy"].is_string() && refusal[0]["policy"] != *in_force,
        "{refusal:#?}"
    );
    let status = ctl(&guardd, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(&status["policy"]["version"], in_force, "{status:#}");
    let id = refusal[0]["call_id"].as_str().expect("call id");
    let shown = ctl(&guardd, &["show", id, "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("show JSON");
    assert_eq!(&shown["policy"], in_force, "{shown:#}");
    let first = shown["review"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["kind"] == "decision"));
    assert_eq!(
        first.map(|r| &r["policy"]),
        Some(&refusal[0]["policy"]),
        "{shown:#}"
    );

    // An escalated call, held once its judge has passed it: its hold is bound to the policy
    // that decided it, not to the one in force when it was held, so approving it asks the
    // policy in force again, which blocks it.
    reload(&guardd, &judged_slowly(&j, false));
    let caller = spawn(&guardd, "deploy", &["target=alpha"]);
    decided(&guardd, 3);
    reload(&guardd, &judged_slowly(&j, true));
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    approve_is_refused_as_the_policy_changed(&guardd, &id, caller);

    // The control: with no reload meanwhile, the judged call runs.
    reload(&guardd, &judged_slowly(&j, false));
    let out = output(guardd.exec("t_low", &[]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "ran\n");
}

/// A command hidden behind text a detector redacts (issue 49): `# -----BEGIN PRIVATE KEY-----`
/// once made the redaction run to the end of the argument, so the judge and the admin read
/// `echo build ok # [REDACTED:private_key]` while `touch` ran on the next line. Judges and
/// approvers see a call as it will run; the log hides only the key line it recognised.
#[test]
fn a_redaction_hides_no_command_from_a_judge_or_an_approver() {
    if !support::privileged("a_redaction_hides_no_command_from_a_judge_or_an_approver") {
        return;
    }
    let dir = ToolDir::new("guard-atk");
    let ws = dir.subdir("ws", 0o777);
    let j = testjudge(&dir);
    let policy = format!(
        r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"

[judges.no_touch]
command = ["{j}", "shun", "touch"]

[tools.judged]
tier = "low"
command = ["/bin/sh", "-c", "{{cmd}}"]
judges = ["no_touch"]
[tools.judged.args.cmd]
type = "string"
[tools.judged.effects]
write = ["{ws}"]
exec = ["/usr/bin"]

[tools.held]
tier = "high"
irreversible = true
command = ["/bin/sh", "-c", "{{cmd}}"]
[tools.held.args.cmd]
type = "string"
[tools.held.effects]
write = ["{ws}"]
exec = ["/usr/bin"]
"#,
        j = j.display(),
        ws = ws.display(),
    );
    let guardd = start(&policy, &[]);
    let mark = ws.join("MARK");
    let hidden = format!(
        "cmd=echo build ok # -----BEGIN PRIVATE KEY-----\n/usr/bin/touch {}",
        mark.display()
    );

    // The control: what the judge does not shun runs.
    let out = output(guardd.exec("judged", &["cmd=echo build ok"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "build ok\n");
    // The judge sees the hidden line, and refuses it.
    let out = output(guardd.exec("judged", &[&hidden]));
    assert_eq!(out.status.code(), Some(126), "the judge passed it: {out:?}");
    assert!(!mark.exists(), "the hidden command ran");

    // The admin sees it too, before approving.
    let caller = spawn(&guardd, "held", &[&hidden]);
    let calls = held(&guardd, 1);
    let shown = calls[0]["args"]["cmd"].as_str().unwrap_or_default();
    assert!(
        shown.contains("/usr/bin/touch") && shown.contains("BEGIN PRIVATE KEY"),
        "the admin was shown {shown:?}"
    );
    let out = ctl(
        &guardd,
        &["deny", calls[0]["call_id"].as_str().unwrap_or_default()],
    );
    assert!(out.status.success(), "{out:?}");
    let out = caller.wait_with_output().expect("guard-exec");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!mark.exists(), "the denied command ran");

    // The log redacts the key line it recognised, and nothing after it.
    let logged: Vec<String> = rows(&guardd, "decision")
        .iter()
        .filter_map(|r| r["args"]["cmd"].as_str().map(str::to_owned))
        .filter(|c| c.contains("REDACTED"))
        .collect();
    assert_eq!(logged.len(), 2, "{logged:?}");
    for cmd in logged {
        assert!(
            cmd.ends_with(&format!(
                "[REDACTED:private_key]\n/usr/bin/touch {}",
                mark.display()
            )),
            "{cmd:?}"
        );
    }
}
