//! Attacks on approvals and judges from outside: ways to get a call run that nobody approved as
//! held, or a helper's answer read as something it did not say. Each is a scenario that ran
//! the call (or lost the answer) before its fix.

use serde_json::Value;

use super::{
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
    assert!(!text(&out.stdout).contains("ran"), "the changed call ran: {out:?}");
    assert!(text(&out.stderr).contains("no_evil"), "{out:?}");
    let judged = rows(&guardd, "judged");
    assert_eq!(judged.len(), 3, "{judged:#?}");
    assert_eq!(
        judged.iter().map(|r| r["allowed"].clone()).collect::<Vec<_>>(),
        [false, true, false],
        "{judged:#?}"
    );
}
