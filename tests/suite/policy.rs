//! guardctl against the shipped policies: the decisions the reference texts give.

use std::{path::PathBuf, process::Command};

use serde_json::{Value, json};

use super::support;

fn policies() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

/// Runs `guardctl check --json` and returns the row.
fn check(policy: &str, tool: &str, args: &str) -> Value {
    check_in(policy, tool, args, "/srv/agent/workspace")
}

/// [`check`] from the working directory `cwd`.
fn check_in(policy: &str, tool: &str, args: &str, cwd: &str) -> Value {
    let out = Command::new(support::bin("guardctl"))
        .args(["check", "--policy"])
        .arg(policies().join(policy))
        .args([tool, "--args", args, "--json", "--cwd", cwd])
        .output()
        .expect("run guardctl");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    let row: Value = serde_json::from_str(&text).expect("JSON row");
    // The exit code says the decision, as guard-exec would end: allowed, held, blocked.
    let want = match row["decision"].as_str() {
        Some("allow") => 0,
        Some("escalate" | "quarantine") => 75,
        Some("block") => 126,
        other => panic!("no decision: {other:?}"),
    };
    assert_eq!(
        out.status.code(),
        Some(want),
        "guardctl check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    row
}

fn decision(policy: &str, tool: &str, args: &str) -> String {
    check(policy, tool, args)["decision"]
        .as_str()
        .expect("decision")
        .to_string()
}

#[test]
fn signet_registry() {
    let row = check("examples/signet.toml", "rm_rf", "{}");
    assert_eq!(row["check_name"], "tool_call_inspector");
    assert_eq!(row["decision"], "block");
    assert_eq!(row["reason"], "tool 'rm_rf' not in registry");
    assert_eq!(row["metadata"]["tool"], "rm_rf");
    let row = check(
        "examples/signet.toml",
        "process_payment",
        r#"{"amount": 10}"#,
    );
    assert_eq!(row["decision"], "block");
    assert_eq!(
        row["reason"],
        "tool 'process_payment' tier CRITICAL exceeds max_allowed_tier HIGH"
    );
    assert_eq!(row["metadata"]["tier"], "CRITICAL");
    let row = check(
        "examples/signet.toml",
        "send_email",
        r#"{"to": "alice@mail.com"}"#,
    );
    assert_eq!(row["decision"], "escalate");
    assert_eq!(
        row["reason"],
        "tool 'send_email' is irreversible (HIGH); requires human approval"
    );
    assert_eq!(
        decision("examples/signet.toml", "list_files", "{}"),
        "allow"
    );
    assert_eq!(
        decision(
            "examples/signet.toml",
            "write_file",
            r#"{"path": "a", "content": "b"}"#
        ),
        "allow"
    );
}

#[test]
fn invariant_rules() {
    let p = "examples/invariant.toml";
    let row = check(p, "send_email", r#"{"to": "alice@mail.com"}"#);
    assert_eq!(row["check_name"], "rule:no-email-to-alice");
    assert_eq!(row["reason"], "Must not send any emails to Alice");
    let row = check(p, "send_email", r#"{"to": "alice@disallowed.com"}"#);
    assert_eq!(row["decision"], "block");
    assert_eq!(row["metadata"]["rule"], "no-disallowed-recipients");
    assert_eq!(
        decision(p, "send_email", r#"{"to": "bob@allowed.com"}"#),
        "allow"
    );
    assert_eq!(
        decision(p, "delete_file", r#"{"path": "important.txt"}"#),
        "block"
    );
    assert_eq!(decision(p, "read_directory", "{}"), "allow");
}

#[test]
fn inspect_ai_globs() {
    let p = "examples/inspect_ai.toml";
    assert_eq!(decision(p, "file_read", r#"{"path": "a"}"#), "allow");
    assert_eq!(
        check(p, "file_write", r#"{"path": "a"}"#)["check_name"],
        "rule:human-for-writes"
    );
    assert_eq!(decision(p, "bash", r#"{"cmd": "ls"}"#), "escalate");
    assert_eq!(decision(p, "bash", r#"{"cmd": "rm -rf /"}"#), "block");
}

#[test]
fn quarantine_dlp() {
    let p = "examples/quarantine.toml";
    let row = check(
        p,
        "http_post",
        r#"{"url": "https://x", "body": "AKIAIOSFODNN7EXAMPLE"}"#,
    );
    assert_eq!(row["decision"], "quarantine");
    assert_eq!(row["metadata"]["arg"], "body");
    assert_eq!(
        decision(p, "http_post", r#"{"url": "https://x", "body": "hello"}"#),
        "allow"
    );
}

#[test]
fn default_policy() {
    let p = "default.toml";
    let row = check(p, "read_file", r#"{"path": "src/lib.rs"}"#);
    assert_eq!(row["decision"], "allow");
    assert_eq!(
        row["plan"]["argv"],
        serde_json::json!(["/bin/cat", "--", "/srv/agent/workspace/src/lib.rs"])
    );
    assert_eq!(
        decision(p, "read_file", r#"{"path": "/etc/shadow"}"#),
        "block"
    );
    let row = check(
        p,
        "write_file",
        r#"{"path": ".git/config", "content": "x"}"#,
    );
    assert_eq!(row["check_name"], "rule:no-vcs-control-files", "{row}");
    let row = check(p, "fetch_url", r#"{"url": "https://docs.rs/serde"}"#);
    assert_eq!(
        row["plan"]["effects"]["connect"],
        serde_json::json!([{"host": "docs.rs", "port": 443}])
    );
    assert_eq!(
        decision(p, "fetch_url", r#"{"url": "https://evil.example/"}"#),
        "block"
    );
    assert_eq!(
        decision(p, "send_email", r#"{"to": "a@b.org", "body": "hi"}"#),
        "escalate"
    );
    assert_eq!(decision(p, "rm_rf", "{}"), "block");
    // The shell Claude Code's Bash runs as: the workspace writable, system programs, no network,
    // killed on divergence.
    let row = check(p, "shell", r#"{"command": "ls -la"}"#);
    assert_eq!(
        row["plan"]["argv"],
        serde_json::json!(["/bin/bash", "-c", "ls -la"])
    );
    assert_eq!(row["plan"]["effects"]["on_divergence"], "deny");
    assert_eq!(row["plan"]["effects"]["connect"], serde_json::json!([]));
    // The workspace, and the call's own temporary directory, its TMPDIR.
    let write = row["plan"]["effects"]["write"].as_array().expect("write");
    assert_eq!(
        write[..2],
        [json!("/srv/agent/workspace"), json!("/dev/null")]
    );
    let tmp = write[2].as_str().expect("tmp");
    assert!(tmp.starts_with("/run/guard-tmp/call-"), "{tmp}");
    let conf = &row["plan"]["confinement"];
    assert_eq!(conf["tmp"], tmp);
    let env = conf["env"].as_array().expect("env");
    assert!(env.contains(&json!(["TMPDIR", tmp])), "{env:?}");
    // In the caller's directory, as the workspace's owner (resolved when a call is made), and
    // nowhere but in a workspace.
    assert_eq!(conf["cwd"], "/srv/agent/workspace");
    assert_eq!(conf["run_as"], "owner");
    let outside = check_in(p, "shell", r#"{"command": "ls"}"#, "/etc");
    assert_eq!(outside["decision"], "block");
    assert_eq!(outside["check_name"], "workspace");
}

#[test]
fn every_shipped_policy_is_valid() {
    let mut files = vec![policies().join("default.toml")];
    for e in std::fs::read_dir(policies().join("examples")).expect("examples dir") {
        // Beside them, `libexec/`: the stand-ins they name.
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "toml") {
            files.push(path);
        }
    }
    for f in files {
        let out = Command::new(support::bin("guardctl"))
            .args(["policy", "check"])
            .arg(&f)
            .output()
            .expect("run guardctl");
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn broken_policy_reports_every_error_with_location() {
    let dir = std::env::temp_dir().join(support::unique("guard-policy"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let f = dir.join("broken.toml");
    std::fs::write(&f, "[settings]\nmax_allowed_tier = \"hgh\"\n[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\", \"{nope}\"]\n")
        .expect("write");
    let out = Command::new(support::bin("guardctl"))
        .args(["policy", "check"])
        .arg(&f)
        .output()
        .expect("run guardctl");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = f.display().to_string();
    assert!(
        err.contains(&format!(
            "{name}:2:20: settings.max_allowed_tier: unknown tier 'hgh'"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{name}:5:22: tools.a.command: placeholder {{nope}}"
        )),
        "{err}"
    );
    assert!(
        err.contains("max_allowed_tier = \"hgh\""),
        "source line shown: {err}"
    );
}

#[test]
fn bad_args_json_is_an_error() {
    let out = Command::new(support::bin("guardctl"))
        .args(["check", "--policy"])
        .arg(policies().join("default.toml"))
        .args(["read_file", "--args", "{not json"])
        .output()
        .expect("run guardctl");
    assert_eq!(out.status.code(), Some(1));
}

/// `guardctl policy check P` on a policy text, in a file of its own: its exit code and output.
fn check_text(dir: &support::TempDir, text: &str) -> (Option<i32>, String) {
    let path = dir.join("policy.toml");
    std::fs::write(&path, text).expect("write policy");
    let out = support::output({
        let mut c = Command::new(support::bin("guardctl"));
        c.args(["policy", "check"]).arg(&path);
        c
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A `#!` script as a tool's, a judge's, an approver's or the notifier's program runs its
/// interpreter, which landlock refuses unless the exec effects cover it: every run would fail
/// with "Permission denied". The load refuses it instead, naming the script, its interpreter
/// (through `env`, and through an interpreter that is a script itself) and the key; the same
/// policy with the interpreters listed loads.
#[test]
fn a_script_whose_interpreter_is_not_in_its_exec_effects_is_refused_at_load() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = support::TempDir::new("guard-shebang");
    let script = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p.display().to_string()
    };
    let tool = script("tool.sh", "#!/bin/sh\necho hi\n");
    let judge = script("judge", "#!/usr/bin/env sh\necho '{}'\n");
    let runner = script("runner", "#!/bin/sh\nexec \"$@\"\n");
    let approver = script("approver", &format!("#!{runner}\n"));
    let notify = script("notify.sh", "#! /bin/sh -e\ncat >/dev/null\n");
    // On this host `sh` is where env finds it on the confined PATH (/usr/bin:/bin).
    let sh = ["/usr/bin/sh", "/bin/sh"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("a sh");
    let policy = |tool_exec: &str, judge_exec: &str, approver_exec: &str, notify_exec: &str| {
        format!(
            r#"
[approvals]
notify = ["{notify}"]
notify_effects = {{ exec = [{notify_exec}] }}

[judges.j]
command = ["{judge}"]
effects = {{ exec = [{judge_exec}] }}

[[approvers]]
tools = ["t"]
approver = 'command:["{approver}"]'
effects = {{ exec = [{approver_exec}] }}

[tools.t]
tier = "low"
command = ["{tool}"]
judges = ["j"]
[tools.t.effects]
exec = [{tool_exec}]
"#
        )
    };
    let (code, out) = check_text(&dir, &policy("", "", "", ""));
    assert_eq!(code, Some(1), "{out}");
    for want in [
        format!(
            "tools.t.command: {tool} is a #! script, run by its interpreter /bin/sh: \
             tools.t.effects.exec does not cover /bin/sh"
        ),
        format!(
            "judges.j.command: {judge} is a #! script, run by its interpreter /usr/bin/env, then \
             sh, which env finds on the confined PATH (/usr/bin:/bin) at {sh}: \
             judges.j.effects.exec does not cover /usr/bin/env or {sh}"
        ),
        format!(
            "approvers[0].command: {approver} is a #! script, run by its interpreter {runner}, \
             then {runner}'s interpreter /bin/sh"
        ),
        format!("approvals.notify.command: {notify} is a #! script"),
        "(Permission denied); add \"/bin/sh\"".to_owned(),
    ] {
        assert!(out.contains(&want), "{want:?} not in:\n{out}");
    }
    // Each error names the policy file and the line of the script's path.
    let line = out
        .lines()
        .find(|l| l.contains("tools.t.command"))
        .expect("the tool's error");
    let at = format!("{}:17:", dir.join("policy.toml").display());
    assert!(line.starts_with(&at), "{line}");

    // The conforming control: the interpreters listed, as a path or a directory.
    let (code, out) = check_text(
        &dir,
        &policy(
            r#""/bin/sh""#,
            &format!(r#""/usr/bin/env", "{sh}""#),
            &format!(r#""{runner}", "/bin""#),
            r#""/bin/sh""#,
        ),
    );
    assert_eq!(code, Some(0), "{out}");
}
