//! A held call released by the model, as the MCP quarantine proposal has it, through both
//! official SDKs against a real guardd: guard-mcp answers the held call at once with a generic
//! text and its id, `retrieve_quarantined_tool_response` says it still waits, an admin's
//! approval reaches the client as `notifications/tools/list_changed`, and the release runs the
//! call and returns its output (again when asked twice); a denied call's release runs nothing.

use serde_json::{Value, json};

use super::support::{self, Guardd};

const RELEASE: &str = "retrieve_quarantined_tool_response";

/// `mail` is held for a human; the test's root approves its own calls.
pub(super) const POLICY: &str = r#"
[approvals]
allow_self = true

[tools.mail]
tier = "high"
irreversible = true
command = ["/bin/echo", "mailed", "{to}"]
[tools.mail.args.to]
type = "string"
"#;

/// The session's plan: a held call, released too early, approved, released twice; a second
/// held call, denied, released.
fn plan(guardd: &Guardd) -> Value {
    let ctl = |verb: &str| {
        json!([
            support::bin("guardctl"),
            "--socket",
            guardd.socket,
            verb,
            "{call_id}"
        ])
    };
    json!([
        {"list": true},
        {"call": "mail", "arguments": {"to": "bob"}},
        {"call": RELEASE, "call_id_of": 1},
        {"run": ctl("approve"), "call_id_of": 1},
        {"await_list_changed": 20},
        {"list": true},
        {"call": RELEASE, "call_id_of": 1},
        {"call": RELEASE, "call_id_of": 1},
        {"call": "mail", "arguments": {"to": "eve"}},
        {"run": ctl("deny"), "call_id_of": 8},
        {"await_list_changed": 20},
        {"call": RELEASE, "call_id_of": 8},
    ])
}

/// What both SDKs' sessions must show of [`plan`].
fn assert_released(guardd: &Guardd, steps: &[Value]) {
    assert_eq!(steps.len(), 12, "{steps:#?}");
    let listed = steps[0]["tools"].as_array().expect("tools");
    let release = listed
        .iter()
        .find(|t| t["name"] == RELEASE)
        .unwrap_or_else(|| panic!("no release tool in {listed:?}"));
    assert_eq!(release["inputSchema"]["required"], json!(["call_id"]));

    // Held: answered at once, generically, with its id; nothing ran.
    let held = &steps[1];
    let id = held["structured"]["call_id"].as_str().expect("an id");
    assert_eq!(held["isError"], true, "{held}");
    assert_eq!(held["structured"]["decision"], "escalate", "{held}");
    let text = held["texts"][0].as_str().expect("a text");
    assert!(text.contains(id) && text.contains(RELEASE), "{text}");
    assert!(
        !text.contains("irreversible"),
        "the reason is not the model's: {text}"
    );
    let early = &steps[2];
    assert_eq!(early["isError"], true, "{early}");
    assert!(
        early["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("still held")),
        "{early}"
    );
    assert_eq!(steps[3]["code"], 0, "approve: {}", steps[3]);

    // Approved: the client is told, the release tool says which call is ready, and the release
    // runs it (once: asked again, the same result).
    assert_eq!(steps[4]["list_changed"], true, "{steps:#?}");
    let relisted = steps[5]["tools"].as_array().expect("tools");
    let described = relisted
        .iter()
        .find(|t| t["name"] == RELEASE)
        .expect("release");
    let about = described["description"].as_str().expect("description");
    assert!(about.contains(&format!("{id} (mail): approved")), "{about}");
    for ran in &steps[6..8] {
        assert_eq!(ran["isError"], false, "{ran}");
        assert_eq!(ran["texts"][0], "mailed bob\n", "{ran}");
        assert_eq!(ran["structured"]["call_id"], id, "{ran}");
        assert_eq!(ran["structured"]["exit_code"], 0, "{ran}");
    }

    // Denied: the release runs nothing and says it was not approved.
    let eve = steps[8]["structured"]["call_id"].as_str().expect("an id");
    assert_eq!(steps[9]["code"], 0, "deny: {}", steps[9]);
    assert_eq!(steps[10]["list_changed"], true, "{steps:#?}");
    let denied = &steps[11];
    assert_eq!(denied["isError"], true, "{denied}");
    assert!(
        denied["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("not approved")),
        "{denied}"
    );

    let rows = guardd.audit_rows();
    let finished: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert_eq!(finished.len(), 1, "one call ran: {finished:#?}");
    assert_eq!(finished[0]["call_id"], id);
    assert!(
        !rows
            .iter()
            .any(|r| r["kind"] == "finished" && r["call_id"] == eve)
    );
}

#[test]
fn mcp_python_sdk_releases_a_held_call_once_approved() {
    let test = "mcp_python_sdk_releases_a_held_call_once_approved";
    if !support::privileged(test) {
        return;
    }
    let Some(python) = support::python(test) else {
        return;
    };
    let guardd = Guardd::start(POLICY);
    let steps = super::mcp::session(&python, &guardd.socket, &plan(&guardd));
    assert_released(&guardd, &steps);
}

#[test]
fn mcp_typescript_sdk_releases_a_held_call_once_approved() {
    let test = "mcp_typescript_sdk_releases_a_held_call_once_approved";
    if !support::privileged(test) {
        return;
    }
    let Some(modules) = support::node_modules(test) else {
        return;
    };
    let guardd = Guardd::start(POLICY);
    let (steps, log) = super::mcp_node::session(&modules, &guardd.socket, &plan(&guardd));
    assert!(!log.contains("panicked"), "{log}");
    assert_released(&guardd, &steps);
}

/// A caller that would wait for a held call itself (`guard-exec --resume ID`) is not shut out
/// by guard-mcp's watch of it: it takes the watch's place and runs the call once approved, and
/// guard-mcp then says the call is no longer held, never that it was not approved (an outside
/// pass's F4).
#[test]
fn mcp_a_callers_own_wait_displaces_the_watch_and_nothing_says_not_approved() {
    let test = "mcp_a_callers_own_wait_displaces_the_watch";
    if !support::privileged(test) {
        return;
    }
    let Some(python) = support::python(test) else {
        return;
    };
    let guardd = Guardd::start(POLICY);
    let out = guardd.dir.join("resumed.out");
    let resume = format!(
        "{} --socket {} --resume {{call_id}} > {} 2>&1 &",
        support::bin("guard-exec").display(),
        guardd.socket.display(),
        out.display()
    );
    let approve = json!([
        support::bin("guardctl"),
        "--socket",
        guardd.socket,
        "approve",
        "{call_id}"
    ]);
    let plan = json!([
        {"call": "mail", "arguments": {"to": "carol"}},
        {"run": ["sh", "-c", resume], "call_id_of": 0},
        {"run": ["sleep", "1"]},
        {"run": approve, "call_id_of": 0},
        {"run": ["sh", "-c", format!("sleep 2; cat {}", out.display())]},
        {"call": RELEASE, "call_id_of": 0},
        {"await_list_changed": 5},
        {"list": true},
    ]);
    let steps = super::mcp::session(&python, &guardd.socket, &plan);
    // guard-exec's notice that it waits, then the call's output.
    let resumed = steps[4]["stdout"].as_str().unwrap_or_default();
    assert!(resumed.ends_with("\nmailed carol\n"), "{steps:#?}");
    let released = &steps[5];
    let text = released["texts"][0].as_str().unwrap_or_default();
    assert!(
        !text.contains("not approved") && !text.contains("mailed"),
        "{released}"
    );
    let listed = steps[7]["tools"].as_array().expect("tools");
    let about = (listed.iter().find(|t| t["name"] == RELEASE))
        .and_then(|t| t["description"].as_str())
        .unwrap_or_default();
    assert!(about.contains("(mail): no longer held"), "{about}");
}
