//! Pipeline tests: one per stage, plus load errors and property tests.

use std::path::Path;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::call::decision::{Decision, Stage};

fn policy(text: &str) -> Policy {
    match Policy::parse(Path::new("test.toml"), text) {
        Ok(p) => p,
        Err(e) => panic!("policy should load:\n{e}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match Policy::parse(Path::new("test.toml"), text) {
        Ok(_) => panic!("policy should not load"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

fn decide(p: &Policy, tool: &str, args: Json) -> Verdict {
    let Json::Object(args) = args else {
        panic!("args must be an object")
    };
    p.decide(&Intent::new(tool, args))
}

const SIGNET: &str = r#"
[tools.read_file]
tier = "low"
[tools.send_email]
tier = "high"
irreversible = true
[tools.process_payment]
tier = "critical"
irreversible = true
"#;

#[test]
fn registry_blocks_unknown_tools() {
    let v = decide(&policy(SIGNET), "rm_rf", json!({}));
    assert_eq!(v.row.decision, Decision::Block);
    assert_eq!(v.row.reason, "tool 'rm_rf' not in registry");
    assert_eq!(v.row.metadata.stage, Some(Stage::Registry));
    assert!(v.plan.is_none());
}

#[test]
fn allow_unregistered_allows_without_a_plan() {
    let p = policy(&format!("[settings]\nallow_unregistered = true\n{SIGNET}"));
    let v = decide(&p, "rm_rf", json!({"x": "y"}));
    assert_eq!(v.row.decision, Decision::Allow);
    assert!(v.plan.is_none());
}

#[test]
fn ceiling_blocks_critical() {
    let v = decide(&policy(SIGNET), "process_payment", json!({}));
    assert_eq!(v.row.decision, Decision::Block);
    assert_eq!(
        v.row.reason,
        "tool 'process_payment' tier CRITICAL exceeds max_allowed_tier HIGH"
    );
    let p = policy(&format!(
        "[settings]\nmax_allowed_tier = \"critical\"\n{SIGNET}"
    ));
    let v = decide(&p, "process_payment", json!({}));
    assert_eq!(
        v.row.decision,
        Decision::Block,
        "critical still needs allow_critical"
    );
    let p = policy(&format!(
        "[settings]\nmax_allowed_tier = \"critical\"\nallow_critical = true\n{SIGNET}"
    ));
    assert_eq!(
        decide(&p, "process_payment", json!({})).row.decision,
        Decision::Escalate
    );
}

#[test]
fn irreversible_high_escalates() {
    let v = decide(&policy(SIGNET), "send_email", json!({}));
    assert_eq!(v.row.decision, Decision::Escalate);
    assert_eq!(
        v.row.reason,
        "tool 'send_email' is irreversible (HIGH); requires human approval"
    );
    let v = decide(&policy(SIGNET), "read_file", json!({}));
    assert_eq!(v.row.decision, Decision::Allow);
}

#[test]
fn arguments_are_checked() {
    let p = policy(
        r#"
[tools.t]
tier = "low"
command = ["/bin/echo", "{n}", "{flag}"]
[tools.t.args.n]
type = "integer"
max = 5
[tools.t.args.flag]
type = "boolean"
required = false
"#,
    );
    let v = decide(&p, "t", json!({"n": 3, "flag": true}));
    assert_eq!(v.row.decision, Decision::Allow);
    let plan = v.plan.expect("plan");
    assert_eq!(plan.argv, ["/bin/echo", "3", "true"]);
    assert_eq!(
        decide(&p, "t", json!({"n": 3})).plan.expect("plan").argv,
        ["/bin/echo", "3"]
    );
    for (bad, check) in [
        (json!({}), "argument_form"),
        (json!({"n": 9}), "argument_validator"),
        (json!({"n": "3"}), "argument_form"),
        (json!({"n": 1, "other": 1}), "argument_form"),
    ] {
        let v = decide(&p, "t", bad.clone());
        assert_eq!(v.row.decision, Decision::Block, "{bad}");
        assert_eq!(v.row.check_name, check, "{bad}");
    }
}

#[test]
fn strictest_rule_wins_and_secrets_are_redacted() {
    let p = policy(
        r#"
[tools.post]
tier = "low"
[tools.post.args.body]
type = "string"
[[rules]]
id = "q"
tools = ["p*"]
detect = ["aws_access_key"]
action = "quarantine"
[[rules]]
id = "e"
tools = ["post"]
regex = ".*AKIA.*"
action = "escalate"
[[rules]]
id = "mail"
tools = ["*"]
detect = ["email"]
action = "escalate"
"#,
    );
    let v = decide(
        &p,
        "post",
        json!({"body": "AKIAIOSFODNN7EXAMPLE to bob@x.org"}),
    );
    assert_eq!(v.row.decision, Decision::Quarantine);
    assert_eq!(v.row.check_name, "rule:q");
    assert_eq!(v.row.metadata.arg.as_deref(), Some("body"));
    assert_eq!(
        v.redacted_args,
        json!({"body": "[REDACTED:aws_access_key] to [REDACTED:email]"})
    );
    // No rule applies to cards here, yet they are secret-class: always redacted.
    let v = decide(&p, "post", json!({"body": "card 4111111111111111"}));
    assert_eq!(v.row.decision, Decision::Allow);
    assert_eq!(
        v.redacted_args,
        json!({"body": "card [REDACTED:credit_card]"})
    );
}

#[test]
fn plans_carry_effects_and_confinement() {
    let p = policy(
        r#"
[tools.get]
tier = "low"
command = ["/usr/bin/curl", "--", "{url}"]
run_as = "nobody"
timeout = 5
env = { MODE = "fast" }
[tools.get.limits]
memory = "64M"
pids = 8
[tools.get.args.url]
type = "url"
hosts = ["*.example.com"]
[tools.get.effects]
connect = ["{url}", "10.0.0.1:53"]
unix = true
on_divergence = "deny"
"#,
    );
    let v = decide(&p, "get", json!({"url": "https://api.example.com/x"}));
    let plan = v.plan.expect("plan");
    assert_eq!(
        plan.effects.connect,
        [
            Endpoint {
                host: "api.example.com".into(),
                port: 443
            },
            Endpoint {
                host: "10.0.0.1".into(),
                port: 53
            }
        ]
    );
    assert_eq!(plan.effects.on_divergence, OnDivergence::Deny);
    assert!(plan.effects.unix);
    assert_eq!(plan.confinement.run_as.as_deref(), Some("nobody"));
    assert_eq!(plan.confinement.memory_max, Some(64 << 20));
    assert_eq!(plan.confinement.pids_max, Some(8));
    assert_eq!(plan.confinement.timeout, std::time::Duration::from_secs(5));
    assert_eq!(
        plan.confinement.env,
        [("MODE".to_string(), "fast".to_string())]
    );
    assert_eq!(
        decide(&p, "get", json!({"url": "https://example.com/"}))
            .row
            .decision,
        Decision::Block
    );
}

#[test]
fn a_root_tool_keeps_the_capabilities_it_names_and_no_other_tool_names_any() {
    let root = r#"
[tools.bind]
tier = "low"
command = ["/usr/bin/true"]
run_as = "root"
capabilities = ["CAP_SYS_RESOURCE", "CAP_NET_BIND_SERVICE"]
"#;
    let v = decide(&policy(root), "bind", json!({}));
    // In the kernel's order, whatever the policy's.
    assert_eq!(
        v.plan.expect("plan").confinement.capabilities,
        ["CAP_NET_BIND_SERVICE", "CAP_SYS_RESOURCE"]
    );
    let errs = errors(&root.replace("\"CAP_SYS_RESOURCE\"", "\"sys_resource\""));
    assert!(
        errs[0].starts_with(
            "test.toml:6:17: tools.bind.capabilities: 'sys_resource' is not a capability"
        ),
        "{errs:#?}"
    );
    // Another user has none to keep, whoever names it: the tool, or [settings] for all.
    for user in ["run_as = \"nobody\"", "", "run_as = \"owner\""] {
        let text = root.replace("run_as = \"root\"", user);
        let errs = errors(&format!("[workspaces]\nroots = [\"/srv\"]\n{text}"));
        assert!(
            errs.iter().any(|e| e.contains(
                "tools.bind.capabilities: only a tool run as root (run_as = \"root\") keeps"
            )),
            "{user}: {errs:#?}"
        );
    }
    let settings = format!(
        "[settings]\nrun_as = \"root\"\n{}",
        root.replace("run_as = \"root\"\n", "")
    );
    assert_eq!(
        decide(&policy(&settings), "bind", json!({}))
            .plan
            .expect("plan")
            .confinement
            .capabilities
            .len(),
        2
    );
}

#[test]
fn caller_messages_are_generic_unless_disclosed() {
    let p = policy(SIGNET);
    let v = decide(&p, "rm_rf", json!({}));
    assert_eq!(p.caller_message(&v), "blocked by policy");
    let p = policy(&format!("[settings]\ndisclose_reasons = true\n{SIGNET}"));
    assert_eq!(
        p.caller_message(&decide(&p, "rm_rf", json!({}))),
        "tool 'rm_rf' not in registry"
    );
}

#[test]
fn load_errors_have_locations_and_key_paths() {
    let errs =
        errors("[settings]\nmax_allowed_tier = \"huge\"\n[tools.a]\ntier = \"low\"\ncolour = 1\n");
    assert!(
        errs[0].starts_with("test.toml:2:20: settings.max_allowed_tier: unknown tier"),
        "{errs:?}"
    );
    assert!(
        errs[1].starts_with("test.toml:5:1: tools.a.colour: unknown key"),
        "{errs:?}"
    );
    assert_eq!(errs.len(), 2);
}

#[test]
fn meaning_errors() {
    let cases = [
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\", \"{p}\"]\n",
            "placeholder {p} names no argument",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"x\"]\n",
            "absolute path",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[[rules]]\nid = \"r\"\ntools = [\"b*\"]\naction = \"block\"\n",
            "glob 'b*' matches no tool",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[[rules]]\nid = \"r\"\ntools = [\"a\"]\nregex = \"(\"\naction = \"block\"\n",
            "bad regex",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[tools.a.limits]\nmemory = \"12Q\"\n",
            "bad size",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[[tools.a.examples]]\nexpect = \"block\"\n",
            "example expects block but the policy decides allow",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[tools.a.args.x]\ntype = \"string\"\nwithin = [\"/srv\"]\n",
            "applies only to path",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nenv = { LD_PRELOAD = \"/x.so\" }\n",
            "may not be set",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nenv = { GLIBC_TUNABLES = \"{x}\" }\n",
            "may not be set",
        ),
        (
            "[tools.a]\ntier = \"low\"\n[tools.a.effects]\nconnect = [\"example.com:443\"]\n",
            "no command to apply them to",
        ),
        ("[tools.a]\ntier = \"extreme\"\n", "unknown tier"),
        ("[tools.a]\n", "missing key 'tier'"),
    ];
    for (text, want) in cases {
        let errs = errors(text);
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{want:?} not in {errs:?}"
        );
    }
}

#[test]
fn programs_another_tool_may_write_are_refused() {
    // One tool writes where another's program or exec directory lies: a call of the first
    // replaces what the second runs, with the second's effects.
    let errs = errors(
        r#"[tools.fmt]
tier = "low"
command = ["/opt/tools/bin/fmt"]
[tools.runner]
tier = "low"
command = ["/usr/bin/env"]
[tools.runner.effects]
exec = ["/srv/out/bin"]
[tools.writer]
tier = "low"
command = ["/usr/bin/tee"]
[tools.writer.effects]
write = ["/opt/tools", "/srv/out"]
"#,
    );
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].starts_with(
            "test.toml:3:12: tools.fmt.command: program \"/opt/tools/bin/fmt\" and write effect \
             \"/opt/tools\" of tool 'writer' (line 13) both reach /opt/tools/bin/fmt: a call of \
             'writer' could replace a program this tool may run"
        ),
        "{errs:?}"
    );
    assert!(
        errs[1].starts_with("test.toml:8:9: tools.runner.effects.exec: program \"/srv/out/bin\""),
        "{errs:?}"
    );
}

#[test]
fn programs_the_call_may_write_are_refused() {
    // command[0] inside a literal write effect: the error points at the program, names the key
    // and the write effect's line.
    let errs = errors(
        r#"[tools.fmt]
tier = "low"
command = ["/opt/tools/bin/fmt", "--", "{path}"]
[tools.fmt.args.path]
type = "path"
within = ["/srv/ws"]
[tools.fmt.effects]
write = ["{path}", "/opt/tools"]
"#,
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with(
            "test.toml:3:12: tools.fmt.command: program \"/opt/tools/bin/fmt\" and write effect \
             \"/opt/tools\" (line 8) both reach /opt/tools/bin/fmt: the call could replace a \
             program it may run"
        ),
        "{errs:?}"
    );
    let cases = [
        // An exec effect inside a write effect, through `..`.
        (
            "exec = [\"/opt/tools/bin/../bin/lint\"]\nwrite = [\"/opt/tools/bin\"]",
            "tools.t.effects.exec: program \"/opt/tools/bin/../bin/lint\" and write effect \"/opt/tools/bin\" (line 10) both reach /opt/tools/bin/lint",
        ),
        // A write effect inside a tree the call may run programs from.
        (
            "exec = [\"/opt/tools\"]\nwrite = [\"/opt/tools/cache\"]",
            "both reach /opt/tools/cache",
        ),
        // A program argument whose roots hold a written path.
        (
            "exec = [\"{prog}\"]\nwrite = [\"/opt/tools/new\"]",
            "program \"{prog}\" and write effect \"/opt/tools/new\" (line 10) both reach /opt/tools/new",
        ),
        // A written argument without within can name the program itself.
        (
            "write = [\"{out}\"]",
            "tools.t.command: program \"/usr/bin/tee\" and write effect \"{out}\" (any path: 'out' has no within) (line 9) both reach /usr/bin/tee",
        ),
    ];
    for (effects, want) in cases {
        let errs = errors(&tee(effects));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{want:?} not in {errs:?}"
        );
    }
}

#[test]
fn programs_apart_from_written_paths_load() {
    for effects in [
        // The shape of the default policy's run_tests.
        "exec = [\"/usr/bin\", \"/bin\"]\nwrite = [\"{path}\", \"/tmp\"]",
        // Paths compare by whole components: /opt/toolsmith is not beneath /opt/tools.
        "exec = [\"/opt/tools/fmt\"]\nwrite = [\"/opt/toolsmith\"]",
        "exec = [\"{prog}\"]\nwrite = [\"/srv/ws/out\"]",
    ] {
        policy(&tee(effects));
    }
}

/// A tool `t` running /usr/bin/tee, with a bounded `path`, an unbounded `out` and a `prog`
/// within /opt/tools, and `effects` as the body of its effects table (from line 9).
fn tee(effects: &str) -> String {
    format!(
        r#"[tools.t]
tier = "low"
command = ["/usr/bin/tee"]
args.path = {{ type = "path", within = ["/srv/ws"], required = false }}
args.out = {{ type = "path", required = false }}
args.prog = {{ type = "path", within = ["/opt/tools"], required = false }}

[tools.t.effects]
{effects}
"#
    )
}

#[test]
fn directories_merge_and_reject_duplicates() {
    let dir = std::env::temp_dir().join(format!("guard-policy-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.toml"),
        "[settings]\nallow_critical = false\n[tools.x]\ntier = \"low\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.toml"), "[tools.y]\ntier = \"low\"\n").unwrap();
    let p = Policy::load(&dir).unwrap();
    assert_eq!(p.tools().collect::<Vec<_>>(), ["x", "y"]);
    std::fs::write(
        dir.join("c.toml"),
        "[settings]\n[tools.x]\ntier = \"low\"\n",
    )
    .unwrap();
    let errs: Vec<String> = Policy::load(&dir)
        .unwrap_err()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        errs.iter()
            .any(|e| e.contains("c.toml:1:1: settings: settings are already given")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("tool 'x' is already defined")),
        "{errs:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shipped_policies_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    for f in [
        "default.toml",
        "examples/signet.toml",
        "examples/invariant.toml",
        "examples/inspect_ai.toml",
        "examples/quarantine.toml",
    ] {
        if let Err(e) = Policy::load(&root.join(f)) {
            panic!("{f}:\n{e}");
        }
    }
}

/// The fenced blocks of a Markdown text: (info string, body), in order.
fn fenced_blocks(md: &str) -> Vec<(&str, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, String)> = None;
    for line in md.lines() {
        let fence = line.strip_prefix("```");
        if let Some((_, body)) = &mut open {
            if fence == Some("") {
                blocks.extend(open.take());
            } else {
                body.push_str(line);
                body.push('\n');
            }
        } else if let Some(info) = fence {
            open = Some((info.trim(), String::new()));
        }
    }
    assert!(open.is_none(), "unclosed code block");
    blocks
}

/// The book's policy pages (docs/book/src/policy/) cannot rot: each `toml` block is a whole
/// policy that loads; each `toml invalid` block fails with exactly the errors of the `text`
/// block after it; blocks of the other kinds (`fragment`, `project`, `with-default`) are
/// loaded by the e2e suite's `docs::every_policy_snippet_of_the_book_loads`, or skipped.
#[test]
fn docs_examples_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/policy");
    let mut pages: Vec<_> = std::fs::read_dir(&dir)
        .expect("the book's policy pages")
        .map(|e| e.expect("a page").path())
        .collect();
    pages.sort();
    let md: String = pages
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("a policy page"))
        .collect();
    let blocks = fenced_blocks(&md);
    let mut checked = 0;
    for (i, (info, body)) in blocks.iter().enumerate() {
        match *info {
            "toml" => {
                if let Err(e) = Policy::parse(Path::new("docs.toml"), body) {
                    panic!("policy page block {i} does not load:\n{e}\n---\n{body}");
                }
                checked += 1;
            }
            "toml invalid" => {
                let Err(e) = Policy::parse(Path::new("bad.toml"), body) else {
                    panic!("policy page block {i} loads but is marked invalid:\n{body}");
                };
                let shown = match blocks.get(i + 1) {
                    Some(("text", shown)) => shown,
                    _ => panic!("policy page block {i}: no text block with its errors after it"),
                };
                let want = format!("{e}\nbad.toml: {} error(s)\n", e.len());
                assert_eq!(shown, &want, "policy page block {} is out of date", i + 1);
                checked += 1;
            }
            "toml fragment" | "toml project" | "toml with-default" => {}
            other if other.starts_with("toml") => panic!("unknown block kind {other:?}"),
            _ => {}
        }
    }
    assert!(checked >= 4, "only {checked} toml blocks found");
}

fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        ".{0,40}".prop_map(Json::String),
        "(AKIA[A-Z2-7]{16}|4111 1111 1111 1111|/srv/agent/../x|https://docs.rs@x/)"
            .prop_map(Json::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn decide_never_panics(tool in "(read_file|fetch_url|write_file|send_email|x)", args in prop::collection::btree_map("(path|url|to|body|dir|.{0,4})", json_value(), 0..4)) {
        let p = Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default.toml")).unwrap();
        let v = p.decide(&Intent::new(tool, args.into_iter().collect()));
        prop_assert!(v.plan.is_none() || v.row.decision == Decision::Allow);
    }

    #[test]
    fn parse_never_panics(text in "(\\[tools\\.[a-z]{1,3}\\]\n|tier = \"(low|high|x)\"\n|command = \\[\"/b\", \"\\{[a-z]\\}\"\\]\n|\\[\\[rules\\]\\]\n|id = \"r\"\n|tools = \\[\"[a-z*]{1,2}\"\\]\n|regex = \".{0,4}\"\n|action = \"(block|allow)\"\n|\\[tools\\.a\\.args\\.[a-z]\\]\n|type = \"(path|url|integer)\"\n|.{0,10}\n){0,12}") {
        let _ = Policy::parse(Path::new("p.toml"), &text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = Policy::parse(Path::new("p.toml"), &text);
    }
}

#[test]
fn settings_run_as_is_every_tools_user_unless_the_tool_names_its_own() {
    let p = policy(
        r#"
[settings]
run_as = "nobody"
[tools.plain]
tier = "low"
command = ["/bin/true"]
[tools.own]
tier = "low"
command = ["/bin/true"]
run_as = "guard-tool"
"#,
    );
    let user = |tool| {
        decide(&p, tool, json!({}))
            .plan
            .expect("plan")
            .confinement
            .run_as
    };
    assert_eq!(user("plain").as_deref(), Some("nobody"));
    assert_eq!(user("own").as_deref(), Some("guard-tool"));
}

#[test]
fn workspaces_protected_replaces_the_list_and_refuses_what_is_no_relative_name() {
    let text = |list: &str| {
        format!(
            r#"
[workspaces]
roots = ["/srv/ws"]
protected = [{list}]
[tools.t]
tier = "low"
command = ["/bin/true"]
[tools.t.effects]
write = ["{{workspace}}"]
"#
        )
    };
    let p = policy(&text(r#"".git/hooks", "notes/keep.md""#));
    let mut intent = Intent::new("t", serde_json::Map::new());
    intent.cwd = Some("/srv/ws".into());
    let plan = p.decide(&intent).plan.expect("plan");
    assert_eq!(
        plan.effects.protected.as_deref(),
        Some(&[".git/hooks".to_owned(), "notes/keep.md".to_owned()][..])
    );
    for bad in [
        "\"/etc/passwd\"",
        "\"../up\"",
        "\"a/*\"",
        "\"a//b\"",
        "\"\"",
    ] {
        let e = errors(&text(bad));
        assert!(
            e.iter().any(|e| e.contains("workspaces.protected")),
            "{bad}: {e:?}"
        );
    }
    // Not given: the default list, and nothing in the plan says otherwise.
    let p = policy(&text("").replace("protected = []\n", ""));
    let plan = p.decide(&intent).plan.expect("plan");
    assert_eq!(plan.effects.protected, None);
}

/// Invariant's `tool:send_email({to: r".*@x.com", body: <EMAIL>})`: one rule over several
/// arguments (`[[rules.when]]`), every condition holding for a string of its own argument.
#[test]
fn a_rule_over_several_arguments_matches_only_when_each_holds() {
    let text = r#"
[tools.send_email]
tier = "low"
command = ["/bin/true"]
[tools.send_email.args.to]
type = "string"
[tools.send_email.args.body]
type = "string"

[[rules]]
id = "no-addresses-to-x"
tools = ["send_email"]
action = "block"
[[rules.when]]
arg = "to"
regex = '.*@x\.com'
[[rules.when]]
arg = "body"
detect = ["email"]
"#;
    let p = Policy::parse(Path::new("p.toml"), text).expect("policy");
    let decide = |to: &str, body: &str| {
        let mut args = serde_json::Map::new();
        args.insert("to".into(), json!(to));
        args.insert("body".into(), json!(body));
        let v = p.decide(&Intent::new("send_email", args));
        (v.row.decision, v.row.check_name)
    };
    assert_eq!(decide("a@x.com", "write to bob@y.org").0, Decision::Block);
    assert_eq!(decide("a@x.com", "hello").0, Decision::Allow);
    assert_eq!(decide("a@y.com", "write to bob@y.org").0, Decision::Allow);
    // The body's address is redacted from the log: the rule's detectors are the tool's.
    let mut args = serde_json::Map::new();
    args.insert("to".into(), json!("a@y.com"));
    args.insert("body".into(), json!("write to bob@y.org"));
    let v = p.decide(&Intent::new("send_email", args));
    assert!(
        !v.redacted_args.to_string().contains("bob@y.org"),
        "{}",
        v.redacted_args
    );

    // A condition on an argument no tool has, or with nothing to match, is an error.
    let bad = text.replace("arg = \"body\"", "arg = \"bdy\"");
    let err = Policy::parse(Path::new("p.toml"), &bad).expect_err("unknown argument");
    assert!(err.to_string().contains("rules[0].when[1].arg"), "{err}");
    let bad = text.replace("detect = [\"email\"]", "");
    let err = Policy::parse(Path::new("p.toml"), &bad).expect_err("no condition");
    assert!(
        err.to_string().contains("needs regex, equals or detect"),
        "{err}"
    );
}
