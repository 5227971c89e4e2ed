//! Deciding calls under a policy with secrets, and the cloud metadata address as an argument.

use std::path::Path;

use serde_json::{Value as Json, json};

use super::*;
use crate::{
    audit::testdir::TestDir,
    call::decision::{Decision, Stage},
};

fn decide(p: &Policy, tool: &str, args: Json) -> Verdict {
    let Json::Object(args) = args else {
        panic!("args must be an object")
    };
    p.decide(&Intent::new(tool, args))
}

/// A policy whose tool `api` is given secret `tok` (value `tok-0123456789`), and whose tool
/// `echo` is not.
fn with_secret(dir: &TestDir) -> Policy {
    use std::os::unix::fs::PermissionsExt as _;
    let file = dir.path().join("tok");
    std::fs::write(&file, "tok-0123456789\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let text = format!(
        r#"
[secrets.tok]
source = "file:{}"
hosts = ["api.example.com:443"]

[tools.api]
tier = "low"
command = ["/usr/bin/curl", "https://api.example.com/"]
env = {{ AUTH = "Bearer {{secret:tok}}" }}
[tools.api.effects]
connect = ["api.example.com:443"]

[tools.echo]
tier = "low"
command = ["/bin/echo", "{{text}}"]
[tools.echo.args.text]
type = "string"
"#,
        file.display()
    );
    Policy::parse(Path::new("test.toml"), &text).expect("loads")
}

#[test]
fn a_plan_carries_the_placeholder_never_the_value() {
    let dir = TestDir::new("secret-plan");
    let p = with_secret(&dir);
    let v = decide(&p, "api", json!({}));
    assert_eq!(v.row.decision, Decision::Allow);
    let plan = v.plan.expect("plan");
    let shown = serde_json::to_string(&plan).expect("json");
    assert!(shown.contains("Bearer {secret:tok}"), "{shown}");
    assert!(!shown.contains("0123456789"), "{shown}");
    assert_eq!(plan.confinement.secrets(), ["tok"]);
    let launched = secrets::rendered(&plan, p.secrets())
        .expect("rendered")
        .expect("some");
    assert!(
        launched
            .confinement
            .env
            .contains(&("AUTH".into(), "Bearer tok-0123456789".into()))
    );
    assert!(
        secrets::rendered(&plan, &[]).is_err(),
        "a secret gone is no launch"
    );
}

#[test]
fn an_argument_holding_a_value_in_any_form_is_quarantined_and_masked() {
    let dir = TestDir::new("secret-arg");
    let p = with_secret(&dir);
    // Raw, and base64 ("tok-0123456789" is dG9rLTAxMjM0NTY3ODk=), in a nested key too.
    for args in [
        json!({"text": "say tok-0123456789 now"}),
        json!({"text": "dG9rLTAxMjM0NTY3ODk="}),
        json!({"text": {"tok-0123456789": 1}}),
    ] {
        let v = decide(&p, "echo", args.clone());
        assert_eq!(v.row.decision, Decision::Quarantine, "{args}");
        assert_eq!(v.row.check_name, "secret");
        // Held as any quarantine is (its plan, when its arguments pass); nothing runs with it:
        // an approval is refused (`review::answer::barred`).
        assert_eq!(v.row.metadata.stage, Some(Stage::Secret), "{args}");
        let kept = v.redacted_args.to_string();
        assert!(
            kept.contains("[secret:tok]") && !kept.contains("0123456789"),
            "{kept}"
        );
    }
    assert_eq!(
        decide(&p, "echo", json!({"text": "hello"})).row.decision,
        Decision::Allow
    );
}

#[test]
fn a_url_naming_the_metadata_address_is_blocked_unless_its_hosts_name_it() {
    let text = |hosts: &str| {
        format!(
            r#"
[tools.get]
tier = "low"
command = ["/usr/bin/curl", "--", "{{url}}"]
[tools.get.args.url]
type = "url"
{hosts}
[tools.get.effects]
connect = ["{{url}}"]
"#
        )
    };
    let open = Policy::parse(Path::new("t.toml"), &text("")).expect("loads");
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
    ] {
        let v = decide(&open, "get", json!({ "url": url }));
        assert_eq!(v.row.decision, Decision::Block, "{url}");
        assert!(v.row.reason.contains("metadata"), "{}", v.row.reason);
    }
    let named = text("hosts = [\"169.254.169.254\"]");
    let named = Policy::parse(Path::new("t.toml"), &named).expect("loads");
    let v = decide(&named, "get", json!({"url": "http://169.254.169.254/"}));
    assert_eq!(v.row.decision, Decision::Allow);
}
