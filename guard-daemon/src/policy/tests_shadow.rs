//! Deciding calls of tools in shadow: what enforcing would refuse runs, marked; what shadow
//! never bends stays refused; and where a policy may not ask for shadow.

use std::path::Path;

use serde_json::{Value as Json, json};

use super::*;
use crate::{
    audit::testdir::TestDir,
    call::{decision::Decision, plan::Enforce},
};

fn decide(p: &Policy, tool: &str, args: Json) -> Verdict {
    let Json::Object(args) = args else {
        panic!("args must be an object")
    };
    p.decide(&Intent::new(tool, args))
}

/// `cat` of a path within /srv, blocked for the word `secret`, in the mode `enforce` says.
fn policy(settings: &str, tool: &str) -> Policy {
    let text = format!(
        r#"
[settings]
{settings}

[tools.cat]
tier = "low"
command = ["/bin/cat", "{{path}}"]
{tool}
[tools.cat.args.path]
type = "path"
within = ["/srv"]

[tools.echo]
tier = "high"
command = ["/bin/echo", "{{text}}"]
[tools.echo.args.text]
type = "string"

[[rules]]
id = "no-secret"
tools = ["cat"]
arg = "path"
regex = ".*secret.*"
action = "block"
"#
    );
    Policy::parse(Path::new("test.toml"), &text).expect("loads")
}

#[test]
fn a_call_enforcing_would_block_runs_in_shadow_with_would_block() {
    let p = policy("", "enforce = \"shadow\"");
    assert_eq!(p.shadow_tools(), ["cat"]);
    for (args, check) in [
        (json!({"path": "/srv/secret"}), "rule:no-secret"),
        (json!({"path": "/etc/hostname"}), "argument_validator"),
    ] {
        let v = decide(&p, "cat", args.clone());
        assert_eq!(v.row.decision, Decision::Allow, "{args}: {:?}", v.row);
        assert_eq!(v.row.check_name, check);
        assert_eq!(v.row.metadata.would_block, Some(Decision::Block));
        assert_eq!(v.row.metadata.enforce, Some(Enforce::Shadow));
        let plan = v.plan.expect("a plan to run");
        assert_eq!(plan.enforce, Enforce::Shadow);
        assert_eq!(plan.argv[1], args["path"].as_str().expect("path"));
    }
    let v = decide(&p, "cat", json!({"path": "/srv/ok"}));
    assert_eq!(v.row.decision, Decision::Allow);
    assert_eq!(v.row.metadata.would_block, None);
    assert_eq!(v.row.metadata.enforce, Some(Enforce::Shadow));
}

#[test]
fn enforced_the_same_calls_are_blocked_and_unmarked() {
    let p = policy("", "");
    assert!(p.shadow_tools().is_empty());
    let v = decide(&p, "cat", json!({"path": "/srv/secret"}));
    assert_eq!(v.row.decision, Decision::Block);
    assert_eq!(
        (v.row.metadata.enforce, v.row.metadata.would_block),
        (None, None)
    );
    let plan = decide(&p, "cat", json!({"path": "/srv/ok"}))
        .plan
        .expect("plan");
    assert_eq!(plan.enforce, Enforce::Enforce);
    // Its JSON, which approvals digest, is what it was before shadow existed.
    assert!(
        !serde_json::to_string(&plan)
            .expect("json")
            .contains("enforce")
    );
}

#[test]
fn shadow_never_runs_an_unknown_tool_or_arguments_that_fit_no_command() {
    let p = policy("enforce = \"shadow\"\nmax_allowed_tier = \"medium\"", "");
    assert_eq!(p.shadow_tools(), ["cat", "echo"]);
    let v = decide(&p, "nope", json!({}));
    assert_eq!(v.row.decision, Decision::Block);
    assert!(v.plan.is_none());
    // Above the ceiling: would be blocked, runs.
    let v = decide(&p, "echo", json!({"text": "hi"}));
    assert_eq!(v.row.decision, Decision::Allow, "{:?}", v.row);
    assert_eq!(v.row.metadata.would_block, Some(Decision::Block));
    // The wrong type, a relative path with no base, an unknown argument: nothing to run.
    for args in [
        json!({"path": 7}),
        json!({"path": "relative"}),
        json!({"path": "/srv/a", "more": 1}),
    ] {
        let v = decide(&p, "cat", args.clone());
        assert_eq!(v.row.decision, Decision::Block, "{args}");
        assert!(v.plan.is_none(), "{args}");
        assert!(
            v.row.reason.contains("not run in shadow either"),
            "{}",
            v.row.reason
        );
    }
}

#[test]
fn a_tool_given_a_secret_is_never_in_shadow() {
    let dir = TestDir::new("shadow-secret");
    use std::os::unix::fs::PermissionsExt as _;
    let file = dir.path().join("tok");
    std::fs::write(&file, "tok-0123456789\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let text = |settings: &str, tool: &str| {
        format!(
            "[settings]\n{settings}\n[secrets.tok]\nsource = \"file:{}\"\n\
             hosts = [\"api.example.com:443\"]\n[tools.api]\ntier = \"low\"\n{tool}\n\
             command = [\"/usr/bin/curl\", \"https://api.example.com/\"]\n\
             env = {{ AUTH = \"Bearer {{secret:tok}}\" }}\n[tools.api.effects]\n\
             connect = [\"api.example.com:443\"]\n",
            file.display()
        )
    };
    // All tools in shadow: this one stays enforced.
    let p = Policy::parse(Path::new("t.toml"), &text("enforce = \"shadow\"", "")).expect("loads");
    assert!(p.shadow_tools().is_empty());
    let plan = decide(&p, "api", json!({})).plan.expect("plan");
    assert_eq!(plan.enforce, Enforce::Enforce);
    // Asked for by the tool itself: an error naming the key.
    let e = Policy::parse(Path::new("t.toml"), &text("", "enforce = \"shadow\""))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("tools.api.enforce"), "{e}");
    assert!(e.contains("secret"), "{e}");
    let e = Policy::parse(Path::new("t.toml"), &text("", "enforce = \"loud\""))
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("unknown enforce 'loud' (enforce | shadow)"),
        "{e}"
    );
}

#[test]
fn a_tool_that_runs_as_root_or_as_its_workspaces_owner_is_never_in_shadow() {
    for run_as in ["root", "owner"] {
        let text = |settings: &str, tool: &str| {
            format!(
                "[settings]\n{settings}\n[workspaces]\nroots = [\"/srv/*\"]\n\
                 [tools.sh]\ntier = \"low\"\nrun_as = \"{run_as}\"\n{tool}\n\
                 command = [\"/bin/true\"]\n"
            )
        };
        let p =
            Policy::parse(Path::new("t.toml"), &text("enforce = \"shadow\"", "")).expect("loads");
        assert!(p.shadow_tools().is_empty(), "{run_as}");
        let e = Policy::parse(Path::new("t.toml"), &text("", "enforce = \"shadow\""))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("tools.sh.enforce"), "{e}");
        assert!(e.contains("cannot run in shadow"), "{e}");
    }
}

#[test]
fn a_tool_in_shadow_meets_its_examples_by_what_it_would_decide() {
    let text = r#"
[tools.cat]
tier = "low"
enforce = "shadow"
command = ["/bin/cat", "{path}"]
[tools.cat.args.path]
type = "path"
within = ["/srv"]
[[tools.cat.examples]]
args = { path = "/etc/shadow" }
expect = "block"
[[tools.cat.examples]]
args = { path = "/srv/a" }
expect = "allow"
"#;
    Policy::parse(Path::new("p.toml"), text).expect("its examples hold in shadow");
    let wrong = text.replace("expect = \"block\"", "expect = \"allow\"");
    let err = Policy::parse(Path::new("p.toml"), &wrong).expect_err("would block");
    assert!(
        err.to_string()
            .contains("expects allow but the policy decides block"),
        "{err}"
    );
}
