//! Each shipped example policy (`policies/examples/*.toml`) runs as shipped, against a real
//! guardd: every `[[tools.NAME.examples]]` it carries is called through guard-exec and ends as
//! it says, an allowed one run by the tool's stand-in command after the shipped stand-in
//! judges and approvers (`policies/examples/libexec/`, which `cargo xtask install` puts in
//! `PREFIX/libexec/guard`) have answered it; an escalated or quarantined one held.

use serde_json::Value;

use super::support::{self, Guardd, output};

/// Where the examples name their programs, and where the checkout has them.
const INSTALLED: &str = "/usr/local/libexec/guard/";

/// Example `name`'s policy, its programs those of the checkout.
fn example(name: &str) -> String {
    let dir = support::workspace().join("policies/examples");
    let text = std::fs::read_to_string(dir.join(name)).expect("example");
    let shipped = format!("{}/", dir.join("libexec").display());
    text.replace(INSTALLED, &shipped)
}

/// Each `(tool, args, expect)` of the policy's `[[tools.NAME.examples]]`.
fn cases(policy: &str) -> Vec<(String, Value, String)> {
    let doc: toml::Table = toml::from_str(policy).expect("TOML");
    let mut out = Vec::new();
    let tools = doc.get("tools").and_then(|t| t.as_table()).expect("tools");
    for (name, tool) in tools {
        let examples = tool.get("examples").and_then(|e| e.as_array());
        for ex in examples.into_iter().flatten() {
            let args = ex
                .get("args")
                .map_or(Value::Object(Default::default()), |a| {
                    serde_json::to_value(a).expect("args as JSON")
                });
            let expect = ex.get("expect").and_then(|e| e.as_str()).expect("expect");
            out.push((name.clone(), args, expect.to_owned()));
        }
    }
    out
}

/// Whether guard-exec's exit fits the decision the example expects: run (0), blocked (126),
/// held (75, `--no-wait`), or, for an escalated call an approver of the policy answered, run.
fn fits(expect: &str, code: Option<i32>, approved_by_approver: bool) -> bool {
    match expect {
        "allow" => code == Some(0),
        "escalate" | "quarantine" if approved_by_approver => code == Some(0),
        "escalate" | "quarantine" => code == Some(75),
        _ => code == Some(126),
    }
}

#[test]
fn every_example_policy_runs_its_examples_as_shipped() {
    if !support::privileged("every_example_policy_runs_its_examples_as_shipped") {
        return;
    }
    for name in [
        "aegis.toml",
        "inspect_ai.toml",
        "invariant.toml",
        "quarantine.toml",
        "signet.toml",
    ] {
        let policy = example(name);
        let guardd = Guardd::start(&policy);
        let cases = cases(&policy);
        assert!(!cases.is_empty(), "{name} carries no example");
        for (i, (tool, args, expect)) in cases.iter().enumerate() {
            let mut cmd = guardd.exec(tool, &[]);
            cmd.args(["--no-wait", "--args", &args.to_string()]);
            let out = output(cmd);
            let rows = guardd.audit_rows();
            // One decision row a call, in order: this call's is the i-th.
            let decisions: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "decision").collect();
            let row = decisions
                .get(i)
                .unwrap_or_else(|| panic!("{name}: no row: {rows:#?}"));
            assert_eq!(
                row["decision"]["decision"],
                expect.as_str(),
                "{name}: {tool} {args}"
            );
            let approver = rows.iter().any(|r| {
                r["kind"] == "approval"
                    && r["call_id"] == row["call_id"]
                    && r["approved"] == true
                    && r["approver"].is_string()
            });
            assert!(
                fits(expect, out.status.code(), approver),
                "{name}: {tool} {args} ({expect}): {out:?}"
            );
            if out.status.code() == Some(0) {
                let said = String::from_utf8_lossy(&out.stdout);
                assert!(said.starts_with("stand-in "), "{name}: {tool}: {said}");
            }
        }
        // No judge rejected an example: each stand-in answered.
        let rows = guardd.audit_rows();
        let rejected: Vec<&Value> = (rows.iter())
            .filter(|r| r["kind"] == "judged" && r["allowed"] != true)
            .collect();
        assert!(rejected.is_empty(), "{name}: {rejected:#?}");
    }
}

/// A tool the policy gives no command can be decided but not run: an exec of it is blocked
/// saying so (where the caller once heard "allowed" and then a closed connection, exit 69),
/// and a check of it is decided as the policy says.
#[test]
fn a_tool_without_a_command_is_refused_saying_so_and_still_checked() {
    if !support::privileged("a_tool_without_a_command_is_refused_saying_so") {
        return;
    }
    let guardd = Guardd::start("[tools.decided]\ntier = \"low\"\n");
    let out = output(guardd.exec("decided", &[]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("has no command"), "{said}");
    let rows = guardd.audit_rows();
    let row = rows
        .iter()
        .find(|r| r["kind"] == "decision")
        .expect("a decision row");
    assert_eq!(row["decision"]["check_name"], "no_command", "{row}");
    let policy = guardd.dir.join("policy.toml");
    let policy = policy.to_str().expect("a UTF-8 path");
    let check = output(guardd.ctl(&["check", "decided", "--json", "--policy", policy]));
    let checked = String::from_utf8_lossy(&check.stdout);
    assert!(checked.contains("\"allow\""), "{check:?}");
}
