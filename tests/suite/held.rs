//! Held calls people can act on: a held call is on disk beside the audit log, so it survives a
//! restart of guardd, neither lost nor answered; its approval binds to the digest of its
//! canonical form and it runs exactly as held; a caller may leave (`--no-wait`) and come back
//! for it (`--resume`), whatever arguments it sends then.

use std::process::Stdio;

use super::{
    abuse::ask,
    approval::{CALLER, approval_rows, ctl, held, spawn, start},
    support::{self, Guardd, ToolDir, output},
};

/// `deploy` is irreversible and high: held for a human. It prints its target.
pub(super) const DEPLOY: &str = r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.deploy]
tier = "high"
irreversible = true
command = ["/usr/bin/echo", "deployed", "{target}"]
[tools.deploy.args.target]
type = "string"
"#;

fn policy() -> String {
    DEPLOY.to_owned()
}

/// guard-exec as the caller, with `flags` before the tool.
fn exec_as_caller(guardd: &Guardd, flags: &[&str], tool_args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(support::bin("guard-exec"));
    cmd.arg("--socket")
        .arg(&guardd.socket)
        .args(flags)
        .args(tool_args);
    std::os::unix::process::CommandExt::uid(&mut cmd, CALLER);
    std::os::unix::process::CommandExt::gid(&mut cmd, CALLER);
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_held_call_survives_a_restart_and_its_waiting_caller_gets_its_output() {
    if !support::privileged("a_held_call_survives_a_restart_and_its_waiting_caller_gets_its_output")
    {
        return;
    }
    let mut guardd = start(&policy(), &[]);
    let mut caller = spawn(&guardd, "deploy", &["target=alpha"]);
    let before = held(&guardd, 1);
    let id = before[0]["call_id"].as_str().expect("id").to_owned();
    let digest = before[0]["digest"].as_str().expect("digest").to_owned();
    assert!(digest.starts_with("sha256:"), "{before:?}");
    // The caller's stderr, read as it comes: the restart waits until the caller has heard that
    // its call is held (guardd lists it a moment before it tells its caller).
    let (said_tx, said_rx) = std::sync::mpsc::channel::<String>();
    let stderr = caller.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = said_tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    loop {
        let line = said_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the caller heard its call is held");
        if line.contains("needs approval") {
            break;
        }
    }

    guardd.restart();
    // Neither lost nor answered by the restart: the same call, same digest, still unanswered.
    let after = held(&guardd, 1);
    assert_eq!(after[0]["call_id"], id.as_str());
    assert_eq!(after[0]["digest"], digest.as_str());
    assert!(after[0].get("approved_by").is_none(), "{after:?}");

    // The admin sees the digest the approval binds to; a wrong one is refused.
    let wrong = ctl(&guardd, &["approve", &id, "--digest", "sha256:00"]);
    assert!(!wrong.status.success(), "{wrong:?}");
    // The refusal names what was wrong in the request: its digest, or a call that is not held.
    let frame = |call: &str| {
        let request = serde_json::json!(
            {"v": 1, "type": "approve", "call_id": call, "digest": "sha256:00"}
        );
        format!("{request}\n").into_bytes()
    };
    let refused = ask(&guardd, &frame(&id));
    assert_eq!(refused["field"], "digest", "{refused}");
    let refused = ask(&guardd, &frame("no-such-call"));
    assert_eq!(refused["field"], "call_id", "{refused}");
    let ok = ctl(&guardd, &["approve", &id]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(text(&ok.stdout).contains(&digest), "{ok:?}");

    // The caller that waited across the restart gets the call's output.
    let out = caller.wait_with_output().expect("guard-exec");
    let stderr = reader.join().expect("stderr");
    assert_eq!(out.status.code(), Some(0), "{out:?} {stderr}");
    assert_eq!(text(&out.stdout), "deployed alpha\n", "{out:?}");
    assert!(stderr.contains("waiting for guardd"), "{stderr}");
    let rows = approval_rows(&guardd);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        (rows[0]["approved"].as_bool(), rows[0]["digest"].as_str()),
        (Some(true), Some(digest.as_str()))
    );
    held(&guardd, 0);
}

#[test]
fn no_wait_then_resume_runs_the_held_arguments_whatever_is_sent_now() {
    if !support::privileged("no_wait_then_resume_runs_the_held_arguments_whatever_is_sent_now") {
        return;
    }
    let mut guardd = start(&policy(), &[]);

    // Resumed before the answer: it waits, then runs what was held.
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=alpha"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert_eq!(held(&guardd, 1)[0]["call_id"], id.as_str());
    // Nobody else may collect it, nor learn it is there.
    let mut stranger = guardd.exec("x", &[]);
    stranger.args(["--resume", &id]);
    let stranger = output(stranger);
    assert_ne!(stranger.status.code(), Some(0), "{stranger:?}");
    assert!(
        text(&stranger.stderr).contains(&format!("no call {id} is held")),
        "{stranger:?}"
    );
    let resumer = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        exec_as_caller(&guardd, &["--resume", &id], &["deploy", "target=beta"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("guard-exec --resume")
    };
    wait_for_waiter(&guardd, &id);
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = resumer.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "deployed alpha\n",
        "the held arguments: {out:?}"
    );

    // Approved while nobody waits, across a restart: it waits for its caller, who runs it.
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=gamma"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    guardd.restart();
    assert_eq!(held(&guardd, 1)[0]["approved_by"], 0);
    let out = output(exec_as_caller(
        &guardd,
        &["--resume", &id],
        &["deploy", "target=delta"],
    ));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "deployed gamma\n", "{out:?}");
    assert!(text(&out.stderr).contains("not used"), "{out:?}");
    held(&guardd, 0);
    // Run once: a second resume finds nothing.
    let again = output(exec_as_caller(&guardd, &["--resume", &id], &[]));
    assert_eq!(again.status.code(), Some(126), "{again:?}");

    // Denied while nobody waits: the resume hears it was not approved.
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=eps"],
    ));
    let id = text(&out.stdout).trim().to_owned();
    assert!(
        ctl(&guardd, &["deny", &id, "--reason", "no"])
            .status
            .success()
    );
    let out = output(exec_as_caller(&guardd, &["--resume", &id], &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let rows = approval_rows(&guardd);
    assert_eq!(rows.len(), 3, "every answer is a row: {rows:#?}");
    let finished = guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "finished")
        .count();
    assert_eq!(finished, 2);
}

/// `--resume ID --no-wait` is a release (guard-mcp's `retrieve_quarantined_tool_response`
/// sends the same): before the answer it says the call is still held and leaves it so, and a
/// stranger learns nothing of it; once approved it runs what was held.
#[test]
fn a_release_before_the_answer_leaves_the_call_held_and_runs_it_once_approved() {
    if !support::privileged("a_release_before_the_answer_leaves_the_call_held") {
        return;
    }
    let guardd = start(&policy(), &[]);
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["deploy", "target=alpha"],
    ));
    let id = text(&out.stdout).trim().to_owned();
    let early = output(exec_as_caller(
        &guardd,
        &["--resume", &id, "--no-wait"],
        &[],
    ));
    assert_eq!(early.status.code(), Some(75), "{early:?}");
    assert_eq!(text(&early.stdout).trim(), id, "{early:?}");
    // Asked of a call that is not its own, a release says nothing of it: the same words as
    // for a call that does not exist.
    let stranger = |id: &str| {
        let mut cmd = guardd.exec("x", &[]);
        cmd.args(["--resume", id, "--no-wait"]);
        output(cmd)
    };
    let theirs = stranger(&id);
    assert_eq!(theirs.status.code(), Some(126), "{theirs:?}");
    assert!(theirs.stdout.is_empty(), "{theirs:?}");
    let none = stranger("1a0-1-0000000000000000");
    assert_eq!(
        text(&theirs.stderr).replace(&id, "ID"),
        text(&none.stderr).replace("1a0-1-0000000000000000", "ID"),
    );
    assert_eq!(held(&guardd, 1)[0]["call_id"], id.as_str());
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let ran = output(exec_as_caller(
        &guardd,
        &["--resume", &id, "--no-wait"],
        &[],
    ));
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert_eq!(text(&ran.stdout), "deployed alpha\n", "{ran:?}");
    held(&guardd, 0);
}

/// Waits until the held call has a caller waiting for it (guardd's `pending` does not say; the
/// call's `held` event does, so watch for the resumer's pending reply through the audit-free
/// way: a short pause bounded by the call being still held).
fn wait_for_waiter(guardd: &Guardd, id: &str) {
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(held(guardd, 1)[0]["call_id"], id);
}

#[test]
fn a_restart_keeps_a_held_quarantined_call_generic_to_its_caller() {
    if !support::privileged("a_restart_keeps_a_held_quarantined_call_generic_to_its_caller") {
        return;
    }
    let dir = ToolDir::new("guard-held");
    let ws = dir.subdir("ws", 0o777);
    let p = format!(
        r#"
[settings]
disclose_reasons = true
[tools.note]
tier = "low"
command = ["/usr/bin/touch", "{ws}/noted"]
[tools.note.args.text]
type = "string"
[tools.note.effects]
write = ["{ws}/noted"]
[[rules]]
id = "dlp"
tools = ["note"]
detect = ["aws_access_key"]
action = "quarantine"
message = "a secret in the arguments"
"#,
        ws = ws.display()
    );
    let guardd = start(&p, &[]);
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["note", "text=AKIAIOSFODNN7EXAMPLE"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("quarantine"), "{stderr}");
    assert!(
        !stderr.contains("secret"),
        "the reason stays in the audit row: {stderr}"
    );
    let id = text(&out.stdout).trim().to_owned();
    assert!(ctl(&guardd, &["deny", &id]).status.success());
    // A caller that waits hears "held for review" and the id, even with reasons disclosed.
    let caller = spawn(&guardd, "note", &["text=AKIAIOSFODNN7EXAMPLE"]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(ctl(&guardd, &["deny", &id]).status.success());
    let out = caller.wait_with_output().expect("guard-exec");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("held for review") && stderr.contains(&id),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
    assert!(!ws.join("noted").exists());
}

/// A policy whose held calls are notified by `notify` (a command line).
fn notifying(ws: &std::path::Path, notify: &str) -> String {
    format!(
        r#"{}
[tools.note]
tier = "low"
command = ["/usr/bin/echo", "noted"]
[tools.note.args.text]
type = "string"
[[rules]]
id = "dlp"
tools = ["note"]
detect = ["aws_access_key"]
action = "quarantine"
message = "a secret in the arguments"

[approvals]
notify = [{notify}]
notify_timeout = 5
[approvals.notify_effects]
write = ["{ws}/notified.json"]
"#,
        policy(),
        ws = ws.display()
    )
}

/// The `notified` rows so far, waiting up to 10 s for `n` of them.
fn notified(guardd: &Guardd, n: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows: Vec<serde_json::Value> = guardd
            .audit_rows()
            .into_iter()
            .filter(|r| r["kind"] == "notified")
            .collect();
        if rows.len() >= n || std::time::Instant::now() > deadline {
            assert_eq!(rows.len(), n, "{rows:#?}");
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_notifier_receives_the_held_calls_redacted_summary_and_digest() {
    if !support::privileged("the_notifier_receives_the_held_calls_redacted_summary_and_digest") {
        return;
    }
    let dir = ToolDir::new("guard-held");
    let judge = super::judges::testjudge(&dir);
    let ws = dir.subdir("ws", 0o777);
    let record = format!(
        r#""{}", "record", "{}/notified.json""#,
        judge.display(),
        ws.display()
    );
    let guardd = start(&notifying(&ws, &record), &[]);
    let out = output(exec_as_caller(
        &guardd,
        &["--no-wait"],
        &["note", "text=key AKIAIOSFODNN7EXAMPLE"],
    ));
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    let rows = notified(&guardd, 1);
    assert_eq!(
        (rows[0]["call_id"].as_str(), &rows[0]["error"]),
        (Some(id.as_str()), &serde_json::Value::Null)
    );
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ws.join("notified.json")).expect("the notifier wrote"),
    )
    .expect("JSON summary");
    let held = held(&guardd, 1);
    assert_eq!(summary["call_id"], id.as_str());
    assert_eq!(summary["digest"], held[0]["digest"]);
    assert_eq!(summary["decision"], "quarantine");
    let args = summary["args"].to_string();
    assert!(
        !args.contains("AKIAIOSFODNN7EXAMPLE") && args.contains("REDACTED"),
        "{args}"
    );
}

#[test]
fn a_failing_notifier_is_recorded_and_the_call_stays_held() {
    if !support::privileged("a_failing_notifier_is_recorded_and_the_call_stays_held") {
        return;
    }
    let dir = ToolDir::new("guard-held");
    let judge = super::judges::testjudge(&dir);
    let ws = dir.subdir("ws", 0o777);
    let failing = format!(r#""{}", "exit", "3""#, judge.display());
    let guardd = start(&notifying(&ws, &failing), &[]);
    let caller = spawn(&guardd, "deploy", &["target=alpha"]);
    let rows = notified(&guardd, 1);
    assert!(
        rows[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("exited 3")),
        "{rows:#?}"
    );
    // Never a silent approval: still held, and it runs only once an admin approves it.
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(approval_rows(&guardd).is_empty());
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn an_approved_call_does_not_run_once_its_program_changed() {
    if !support::privileged("an_approved_call_does_not_run_once_its_program_changed") {
        return;
    }
    let dir = ToolDir::new("guard-held");
    // The program is a file of its own, which the test changes while the call is held.
    let program = dir.dir.join("deployer");
    std::fs::copy("/usr/bin/echo", &program).expect("copy echo");
    let p = policy().replace("/usr/bin/echo", &program.display().to_string());
    let guardd = start(&p, &[]);
    let caller = spawn(&guardd, "deploy", &["target=alpha"]);
    let id = held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    {
        let _copying = support::FORK_LOCK
            .write()
            .unwrap_or_else(|e| e.into_inner());
        std::fs::copy("/usr/bin/true", &program).expect("replace the program");
    }
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    let out = caller.wait_with_output().expect("guard-exec");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        text(&out.stderr).contains("changed since the call was held"),
        "{out:?}"
    );
    let rows = approval_rows(&guardd);
    assert_eq!(rows.len(), 2, "the approval, then the refusal: {rows:#?}");
    assert_eq!(rows[1]["approved"], false);
}

#[test]
fn a_held_record_refused_or_gone_at_a_start_is_answered_once_in_the_log() {
    if !support::privileged("a_held_record_refused_or_gone_at_a_start_is_answered_once_in_the_log")
    {
        return;
    }
    let mut guardd = start(&policy(), &[]);
    let hold = |target: &str| {
        let out = output(exec_as_caller(
            &guardd,
            &["--no-wait"],
            &["deploy", &format!("target={target}")],
        ));
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        text(&out.stdout).trim().to_owned()
    };
    let (edited, deleted, kept) = (hold("alpha"), hold("beta"), hold("gamma"));
    let status = guardd.stop();
    assert!(status.success(), "{status}");
    let mut dir = guardd.audit.as_os_str().to_owned();
    dir.push(".pending");
    let dir = std::path::PathBuf::from(dir);
    let record = |id: &str| dir.join(format!("{id}.json"));
    let bytes = std::fs::read(record(&edited)).expect("record");
    std::fs::write(record(&edited), &bytes[..bytes.len() / 2]).expect("truncate");
    std::fs::remove_file(record(&deleted)).expect("delete");
    guardd.start_again();
    // Neither runs, and each is answered in the log, with why; the intact one stays held.
    assert_eq!(held(&guardd, 1)[0]["call_id"], kept.as_str());
    let answers = |guardd: &Guardd| approval_rows(guardd);
    let rows = answers(&guardd);
    for (id, why) in [(&edited, "refused"), (&deleted, "gone")] {
        let row = rows
            .iter()
            .find(|r| r["call_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no answer for {id}: {rows:#?}"));
        assert_eq!(row["approved"], false, "{row:#}");
        assert!(
            row["reason"].as_str().is_some_and(|r| r.contains(why)),
            "{row:#}"
        );
    }
    // The refused record is set aside, for an operator to look at: reported once.
    assert!(dir.join(format!("{edited}.json.refused")).exists());
    guardd.restart();
    assert_eq!(answers(&guardd).len(), rows.len());
}

/// `review` reads its caller's stream and is held for a human.
const REVIEW: &str = r#"
[settings]
max_allowed_tier = "high"
escalation_threshold = "high"
disclose_reasons = true

[tools.review]
tier = "high"
irreversible = true
command = ["/bin/cat"]
stdin = "caller"
"#;

/// Runs `cmd` with `input` on its stdin (a pipe, closed once written), to its end.
fn piped(mut cmd: std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("spawn")
    };
    let mut stdin = child.stdin.take().expect("stdin");
    // A guardd that refused the input may have stopped reading it.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().expect("wait")
}

#[test]
fn a_held_calls_input_is_read_when_held_shown_and_run_as_approved() {
    if !support::privileged("a_held_calls_input_is_read_when_held_shown_and_run_as_approved") {
        return;
    }
    let guardd = start(REVIEW, &[]);
    let approved = b"approved input\n\x1b[2J";
    let out = piped(
        exec_as_caller(&guardd, &["--no-wait"], &["review"]),
        approved,
    );
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    // The admin sees the input, its size and digest, before anything runs.
    let calls = held(&guardd, 1);
    let input = &calls[0]["input"];
    assert_eq!(input["bytes"], approved.len(), "{calls:?}");
    assert_eq!(input["text"], text(approved), "{calls:?}");
    assert!(
        input["sha256"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{calls:?}"
    );
    let listed = text(&ctl(&guardd, &["pending"]).stdout);
    assert!(
        listed.contains(&format!("input {} bytes", approved.len()))
            && listed.contains(r"approved input\u{a}\u{1b}[2J"),
        "shown, escaped: {listed}"
    );
    assert!(ctl(&guardd, &["approve", &id]).status.success());
    // The caller comes back with another stream: the tool reads what was approved.
    let out = piped(
        exec_as_caller(&guardd, &["--resume", &id], &[]),
        b"SWAPPED AFTER APPROVAL",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, approved, "{out:?}");

    // An input over the bound is refused, nothing held, with a row.
    let out = piped(
        exec_as_caller(&guardd, &["--no-wait"], &["review"]),
        &[b'x'; 70_000],
    );
    assert!(!matches!(out.status.code(), Some(0 | 75)), "{out:?}");
    assert!(text(&out.stderr).contains("at most 65536 bytes"), "{out:?}");
    held(&guardd, 0);
    let rows = approval_rows(&guardd);
    assert!(
        rows.iter()
            .any(|r| r["approved"] == false
                && r["reason"].as_str().is_some_and(|w| w.contains("65536"))),
        "{rows:#?}"
    );
}
