//! inspect_ai's approval policies file against a real guardd: a YAML file as its documentation
//! writes one, named by `[settings] approval_policies`, answers calls as inspect_ai would: `auto`
//! runs an escalated call without a human, a `human` whose `choices` leave out terminate cannot
//! be answered with `guardctl deny --terminate` (only approved or denied), and one with
//! inspect_ai's default choices can, which terminates the caller's session.

use serde_json::Value;

use super::support::{self, Guardd, TempDir, output};

/// The policy, its approvers in `approvals` (an absolute path).
fn policy(approvals: &std::path::Path) -> String {
    format!(
        r#"
[settings]
approval_policies = "{}"

[approvals]
allow_self = true

[tools.note]
tier = "low"
command = ["/bin/echo", "noted"]

[tools.deploy]
tier = "high"
irreversible = true
command = ["/bin/echo", "deployed"]

[tools.mail]
tier = "high"
irreversible = true
command = ["/bin/echo", "mailed"]

[[rules]]
id = "notes-need-a-look"
tools = ["note"]
action = "escalate"
message = "notes are looked at"
"#,
        approvals.display()
    )
}

/// inspect_ai's documentation's shape: a human for some tools, `auto` for the rest.
const APPROVALS: &str = "\
approvers:
  - name: human
    tools: deploy
    choices: [approve, reject]

  - name: human
    tools: [\"mail\"]

  - name: auto
    tools: \"*\"
";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `guard-exec --no-wait TOOL` in `session`: the held call's id.
fn held(guardd: &Guardd, tool: &str, session: &str) -> String {
    let mut cmd = guardd.exec(tool, &[]);
    cmd.args(["--no-wait", "--session", session]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(75), "{tool} is held: {out:?}");
    text(&out.stdout).trim().to_owned()
}

#[test]
fn an_inspect_ai_approval_file_answers_calls_as_inspect_ai_would() {
    if !support::privileged("an_inspect_ai_approval_file_answers_calls_as_inspect_ai_would") {
        return;
    }
    let dir = TempDir::new("approval-file");
    let approvals = dir.join("approval.yaml");
    std::fs::write(&approvals, APPROVALS).expect("approval.yaml");
    let guardd = Guardd::start(&policy(&approvals));

    // auto: the escalated note runs, no human asked.
    let out = output(guardd.exec("note", &[]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "noted\n");

    // A human without terminate among its choices: deny --terminate is refused, the call stays
    // held, and approving it runs it.
    let id = held(&guardd, "deploy", "conv-7");
    let refused = output(guardd.ctl(&["deny", &id, "--terminate"]));
    assert!(!refused.status.success(), "{refused:?}");
    assert!(text(&refused.stderr).contains("'terminate'"), "{refused:?}");
    assert!(output(guardd.ctl(&["approve", &id])).status.success());
    let mut resume = guardd.exec("x", &[]);
    resume.args(["--resume", &id]);
    let ran = output(resume);
    assert_eq!(text(&ran.stdout), "deployed\n", "{ran:?}");

    // A human with inspect_ai's default choices: deny --terminate ends the call and blocks its
    // session, which another session is not.
    let id = held(&guardd, "mail", "conv-8");
    let terminated = output(guardd.ctl(&["deny", &id, "--terminate", "--reason", "no mail"]));
    assert!(terminated.status.success(), "{terminated:?}");
    let mut later = guardd.exec("note", &[]);
    later.args(["--session", "conv-8"]);
    assert_eq!(output(later).status.code(), Some(77));
    let mut other = guardd.exec("note", &[]);
    other.args(["--session", "conv-9"]);
    assert_eq!(output(other).status.code(), Some(0));
    let rows = guardd.audit_rows();
    let session: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "session").collect();
    assert_eq!(session.len(), 1, "{session:#?}");
    assert_eq!(session[0]["session"], "conv-8");
    assert_eq!(session[0]["call_id"], id.as_str());
    assert_eq!(session[0]["by"], 0, "the admin who terminated it");
    let answered = rows
        .iter()
        .find(|r| r["kind"] == "approval" && r["call_id"] == id.as_str())
        .expect("the answer's row");
    assert_eq!(answered["outcome"], "terminate", "{answered}");
    // Nothing to terminate: said, and the call stays held for a plain answer.
    let mut lone = guardd.exec("mail", &[]);
    lone.arg("--no-wait");
    let lone = text(&output(lone).stdout).trim().to_owned();
    let refused = output(guardd.ctl(&["deny", &lone, "--terminate"]));
    assert!(
        text(&refused.stderr).contains("nothing to terminate"),
        "{refused:?}"
    );
    assert!(output(guardd.ctl(&["deny", &lone])).status.success());
}

/// What an admin may answer a held call with follows the approvers of the policy in force: a
/// reload that narrows a human's choices binds the calls it already holds, and a quarantined
/// call (which no approver answers) may not be approved where an auto approver would refuse
/// the tool's calls (an outside pass's F-A and F-E).
#[test]
fn an_admins_choices_follow_the_approvers_in_force_and_bind_a_quarantine() {
    if !support::privileged("an_admins_choices_follow_the_approvers_in_force") {
        return;
    }
    let dir = TempDir::new("approval-file-reload");
    let approvals = dir.join("approval.yaml");
    std::fs::write(&approvals, APPROVALS).expect("approval.yaml");
    let quarantine = "\n[tools.wipe]\ntier = \"low\"\ncommand = [\"/bin/echo\", \"wiped\"]\n\n\
                      [[rules]]\nid = \"look-first\"\ntools = [\"wipe\"]\naction = \"quarantine\"\n\n\
                      [[approvers]]\ntools = [\"wipe\"]\napprover = \"auto\"\ndecision = \"reject\"\n";
    let guardd = Guardd::start(&(policy(&approvals) + quarantine));

    // Held with approve among its choices; the approval file then says reject only.
    let id = held(&guardd, "deploy", "conv-1");
    let narrowed = APPROVALS.replace("choices: [approve, reject]", "choices: [reject]");
    std::fs::write(&approvals, narrowed).expect("approval.yaml");
    assert!(output(guardd.ctl(&["reload"])).status.success());
    let refused = output(guardd.ctl(&["approve", &id]));
    assert!(!refused.status.success(), "{refused:?}");
    assert!(text(&refused.stderr).contains("'approve'"), "{refused:?}");
    assert!(output(guardd.ctl(&["deny", &id])).status.success());

    // Quarantined by a rule, past the auto approver that refuses the tool: deny only.
    let id = held(&guardd, "wipe", "conv-2");
    let refused = output(guardd.ctl(&["approve", &id]));
    assert!(!refused.status.success(), "{refused:?}");
    assert!(output(guardd.ctl(&["deny", &id])).status.success());
    let finished = guardd.audit_rows();
    assert!(
        !finished.iter().any(|r| r["kind"] == "finished"),
        "nothing ran"
    );
}
