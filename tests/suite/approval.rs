//! Calls held for a human: the policy says escalate or quarantine, the call waits with its
//! caller, and only an admin's approval lets it run. Denial, silence and a caller who leaves
//! all end with nothing run, and every outcome is an audit row.

use std::{
    path::Path,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::support::{self, Guardd, ToolDir, output};

/// `deploy` is irreversible and high: escalated. `note` is low, but a secret in its text is
/// quarantined. Both leave a marker file when they run.
fn policy(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.deploy]
tier = "high"
irreversible = true
command = ["/usr/bin/touch", "{dir}/deployed"]
[tools.deploy.effects]
write = ["{dir}/deployed"]

[tools.note]
tier = "low"
command = ["/usr/bin/touch", "{dir}/noted"]
[tools.note.args.text]
type = "string"
[tools.note.effects]
write = ["{dir}/noted"]

[[rules]]
id = "dlp"
tools = ["note"]
detect = ["aws_access_key"]
action = "quarantine"
message = "a secret in the arguments"
"#
    )
}

/// The agent's uid in these tests: `nobody`, a member of the socket group [`start`] sets, so that
/// root, the admin, is not the submitter (guard refuses a submitter's own approval).
pub(super) const CALLER: u32 = 65534;

/// guardd with `policy`, its socket open to the group `nogroup` (the [`CALLER`]'s).
pub(super) fn start(policy: &str, extra: &[&str]) -> Guardd {
    let mut args = vec!["--socket-group", "nogroup"];
    args.extend(extra);
    Guardd::start_with(policy, &args)
}

/// guard-exec as the [`CALLER`].
pub(super) fn spawn(guardd: &Guardd, tool: &str, args: &[&str]) -> Child {
    let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
    let mut cmd = guardd.exec(tool, args);
    std::os::unix::process::CommandExt::uid(&mut cmd, CALLER);
    std::os::unix::process::CommandExt::gid(&mut cmd, CALLER);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("guard-exec")
}

pub(super) fn ctl(guardd: &Guardd, args: &[&str]) -> std::process::Output {
    output(guardd.ctl(args))
}

/// Waits until `n` calls are held and returns them.
pub(super) fn held(guardd: &Guardd, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ctl(guardd, &["pending", "--json"]);
        assert!(out.status.success(), "guardctl pending: {out:?}");
        let calls: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        if calls.len() == n || Instant::now() > deadline {
            assert_eq!(calls.len(), n, "held calls: {calls:?}");
            return calls;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn approval_rows(guardd: &Guardd) -> Vec<Value> {
    guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "approval")
        .collect()
}

#[test]
fn a_held_call_runs_only_once_an_admin_approves_it() {
    if !support::privileged("a_held_call_runs_only_once_an_admin_approves_it") {
        return;
    }
    let dir = ToolDir::new("guard-approval");
    let ws = dir.subdir("ws", 0o777);
    let guardd = start(&policy(&ws), &[]);

    let caller = spawn(&guardd, "deploy", &[]);
    let calls = held(&guardd, 1);
    assert_eq!(
        (calls[0]["tool"].as_str(), calls[0]["decision"].as_str()),
        (Some("deploy"), Some("escalate"))
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ws.join("deployed").exists(), "ran before approval");

    let id = calls[0]["call_id"].as_str().expect("call id");
    let out = ctl(&guardd, &["approve", id]);
    assert!(out.status.success(), "approve: {out:?}");
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs approval"),
        "{out:?}"
    );
    assert!(ws.join("deployed").exists(), "did not run after approval");
    let rows = approval_rows(&guardd);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        (rows[0]["approved"].as_bool(), rows[0]["by"].as_u64()),
        (Some(true), Some(0))
    );
    assert_eq!(rows[0]["call_id"], id);
    // Nothing is held any more, and the same call cannot be approved twice.
    held(&guardd, 0);
    assert!(!ctl(&guardd, &["approve", id]).status.success());

    // A quarantined call is held the same way.
    let caller = spawn(&guardd, "note", &["text=key AKIAIOSFODNN7EXAMPLE"]);
    let calls = held(&guardd, 1);
    assert_eq!(calls[0]["decision"], "quarantine");
    // Its arguments are shown as they will run (issue 49: a redaction once hid a command
    // from the admin), not as the audit log keeps them.
    assert_eq!(
        calls[0]["args"]["text"], "key AKIAIOSFODNN7EXAMPLE",
        "{calls:?}"
    );
    let id = calls[0]["call_id"].as_str().expect("call id");
    assert!(ctl(&guardd, &["approve", id]).status.success());
    assert_eq!(
        caller.wait_with_output().expect("guard-exec").status.code(),
        Some(0)
    );
    assert!(ws.join("noted").exists());
}

#[test]
fn a_denied_unanswered_or_abandoned_call_never_runs() {
    if !support::privileged("a_denied_unanswered_or_abandoned_call_never_runs") {
        return;
    }
    let dir = ToolDir::new("guard-approval");
    let ws = dir.subdir("ws", 0o777);
    let guardd = start(&policy(&ws), &["--approval-timeout", "2"]);

    // Denied, with a reason the caller hears.
    let caller = spawn(&guardd, "deploy", &[]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let out = ctl(&guardd, &["deny", &id, "--reason", "not on a Friday"]);
    assert!(out.status.success(), "deny: {out:?}");
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not on a Friday"),
        "{out:?}"
    );

    // Nobody answers: denied when the wait runs out.
    let started = Instant::now();
    let out = output(guardd.exec("deploy", &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no admin answered"),
        "{out:?}"
    );

    // The caller leaves: the call is withdrawn.
    let mut caller = spawn(&guardd, "deploy", &[]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    caller.kill().expect("kill guard-exec");
    let _ = caller.wait();
    held(&guardd, 0);
    assert!(!ctl(&guardd, &["approve", &id]).status.success());

    assert!(!ws.join("deployed").exists(), "a call ran without approval");
    let rows = approval_rows(&guardd);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert!(rows.iter().all(|r| r["approved"] == false), "{rows:#?}");
    assert_eq!(rows[0]["by"], 0);
    assert_eq!(rows[1]["by"], Value::Null);
}

#[test]
fn only_admins_see_and_answer_held_calls() {
    if !support::privileged("only_admins_see_and_answer_held_calls") {
        return;
    }
    let dir = ToolDir::new("guard-approval");
    let ws = dir.subdir("ws", 0o777);
    // uid 65534 may submit calls, but is no admin.
    let guardd = start(
        &policy(&ws).replacen("[settings]\n", "[settings]\nclients = [0, 65534]\n", 1),
        &[],
    );
    std::fs::set_permissions(
        &guardd.socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .expect("chmod");
    let caller = spawn(&guardd, "deploy", &[]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    for args in [vec!["approve", id.as_str()], vec!["pending"]] {
        let mut cmd = guardd.ctl(&args);
        std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
        std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
        let out = output(cmd);
        assert!(!out.status.success(), "{args:?} as nobody: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("not permitted"),
            "{out:?}"
        );
    }
    assert!(!ws.join("deployed").exists());
    assert!(ctl(&guardd, &["deny", &id]).status.success());
    assert_eq!(
        caller.wait_with_output().expect("guard-exec").status.code(),
        Some(126)
    );
}

/// The shell lines of getting started's approval in two terminals: the caller's block and
/// the admin's.
fn getting_started_approval() -> (Vec<String>, Vec<String>) {
    let page = "docs/book/src/getting-started.md";
    let lines = |name| {
        support::doc_block(page, name)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    (lines("approval-caller"), lines("approval-admin"))
}

#[test]
fn the_getting_started_approval_works_as_written() {
    if !support::privileged("the_getting_started_approval_works_as_written") {
        return;
    }
    let policy = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default.toml"),
    )
    .expect("default policy");
    // As `cargo xtask run` starts it.
    let guardd = start(&policy, &[]);
    let bin_dir = support::bin("guard-exec")
        .parent()
        .expect("bin dir")
        .display()
        .to_string();
    // Runs one line of the page in a shell, as a person would, against this test's guardd.
    let shell = |line: &str| {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(line.replace("target/debug", &bin_dir))
            .env("GUARD_SOCKET", &guardd.socket);
        cmd
    };
    let (sender, admin) = getting_started_approval();
    let export = "export GUARD_SOCKET=/run/guard-dev/guard.sock";
    assert_eq!(sender[0], export);
    assert_eq!(admin[0], export);
    assert_eq!(sender.len(), 2, "{sender:?}");
    let caller = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        shell(&sender[1])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the page's guard-exec line")
    };
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("call id")
        .to_owned();
    let pending = output(shell(&admin[1]));
    assert!(
        pending.status.success() && String::from_utf8_lossy(&pending.stdout).contains(&id),
        "the page's pending line shows the held call: {pending:?}"
    );
    let approve = output(shell(&admin[2].replace("CALL_ID", &id)));
    assert!(
        approve.status.success(),
        "the page's approve line: {approve:?}"
    );
    let out = caller.wait_with_output().expect("guard-exec");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout.contains("alice@example.com") && stdout.contains("The build is green."),
        "the stand-in mailer printed the message: {stdout}"
    );
}

#[test]
fn a_submitter_cannot_approve_its_own_call_unless_the_policy_allows_it() {
    if !support::privileged("a_submitter_cannot_approve_its_own_call_unless_the_policy_allows_it") {
        return;
    }
    let dir = ToolDir::new("guard-approval");
    let ws = dir.subdir("ws", 0o777);
    // root submits and root, an admin, answers.
    let guardd = Guardd::start(&policy(&ws));
    let own = |guardd: &Guardd| {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        guardd
            .exec("deploy", &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("guard-exec")
    };
    let caller = own(&guardd);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let out = ctl(&guardd, &["approve", &id]);
    assert!(!out.status.success(), "self-approval accepted: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("your own uid"),
        "{out:?}"
    );
    // Still held, not run, no approval row; the submitter may still withdraw it by denying.
    held(&guardd, 1);
    assert!(!ws.join("deployed").exists());
    assert!(approval_rows(&guardd).is_empty());
    assert!(ctl(&guardd, &["deny", &id]).status.success());
    assert_eq!(
        caller.wait_with_output().expect("guard-exec").status.code(),
        Some(126)
    );
    drop(guardd);

    // The policy may allow it.
    let allowing = format!("{}\n[approvals]\nallow_self = true\n", policy(&ws));
    let guardd = Guardd::start(&allowing);
    let caller = own(&guardd);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    assert_eq!(
        caller.wait_with_output().expect("guard-exec").status.code(),
        Some(0)
    );
    assert!(ws.join("deployed").exists());
}

#[test]
fn every_guardctl_json_output_parses() {
    if !support::privileged("every_guardctl_json_output_parses") {
        return;
    }
    let dir = ToolDir::new("guard-approval");
    let ws = dir.subdir("ws", 0o777);
    let guardd = start(&policy(&ws), &[]);
    let lines = |args: &[&str]| -> Vec<Value> {
        let out = ctl(&guardd, args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            !text.trim().is_empty(),
            "guardctl {args:?} printed nothing: {out:?}"
        );
        text.lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("guardctl {args:?}: not JSON ({e}): {l}"))
            })
            .collect()
    };
    // Two held calls: one to approve, one to deny.
    let first = spawn(&guardd, "deploy", &[]);
    let second = spawn(&guardd, "note", &["text=key AKIAIOSFODNN7EXAMPLE"]);
    let ids: Vec<String> = held(&guardd, 2)
        .iter()
        .map(|c| c["call_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(lines(&["pending", "--json"]).len(), 2);
    let approved = lines(&["approve", &ids[0], "--json"]);
    assert_eq!(approved[0]["approved"], true, "{approved:?}");
    let denied = lines(&["deny", &ids[1], "--reason", "no", "--json"]);
    assert_eq!(denied[0]["approved"], false, "{denied:?}");
    first.wait_with_output().expect("first");
    second.wait_with_output().expect("second");
    let reloaded = lines(&["reload", "--json"]);
    assert!(reloaded[0]["tools"].as_u64() > Some(0), "{reloaded:?}");
    assert!(lines(&["status", "--json"])[0]["audit"]["path"].is_string());
    assert!(!lines(&["calls", "--json"]).is_empty());
    assert!(!lines(&["events", "--json"]).is_empty());
    // `show` prints one object, indented for a person.
    let show: Value = serde_json::from_slice(&ctl(&guardd, &["show", &ids[0], "--json"]).stdout)
        .expect("show JSON");
    assert_eq!(show["call_id"], ids[0].as_str());
    let audit = guardd.audit.to_str().expect("utf-8").to_owned();
    assert_eq!(lines(&["audit", "verify", &audit, "--json"])[0]["ok"], true);
    let policy_file = guardd.dir.join("policy.toml");
    let policy_file = policy_file.to_str().expect("utf-8");
    assert_eq!(
        lines(&["policy", "check", policy_file, "--json"])[0]["valid"],
        true
    );
    let checked = lines(&["check", "--policy", policy_file, "deploy", "--json"]);
    assert_eq!(checked[0]["decision"], "escalate");
    // A broken policy is still one JSON object, listing its errors.
    let broken = dir.dir.join("broken.toml");
    std::fs::write(&broken, "[tools.x]\ntier = \"nope\"\n").expect("broken policy");
    let out = lines(&["policy", "check", broken.to_str().expect("utf-8"), "--json"]);
    assert_eq!(out[0]["valid"], false);
    assert!(out[0]["errors"].as_array().is_some_and(|e| !e.is_empty()));
}
