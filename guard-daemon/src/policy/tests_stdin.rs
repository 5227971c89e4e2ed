//! A tool's `stdin`: what a plan's stdin is for each form, what the listing says of it, and the
//! errors of each mistake, located.

use std::path::Path;

use serde_json::json;

use super::{Policy, StdinSpec};
use crate::call::{intent::Intent, plan::Stdin};

fn load(text: &str) -> Result<Policy, Vec<String>> {
    Policy::parse(Path::new("test.toml"), text)
        .map_err(|e| e.iter().map(|e| e.to_string()).collect())
}

const TOOLS: &str = r#"
[tools.write]
tier = "low"
command = ["/usr/bin/tee", "--", "{path}"]
stdin = { arg = "content" }
[tools.write.args.path]
type = "path"
[tools.write.args.content]
type = "string"
required = false

[tools.cat]
tier = "low"
command = ["/bin/cat"]
stdin = "caller"

[tools.ls]
tier = "low"
command = ["/bin/ls"]
"#;

fn stdin_of(p: &Policy, tool: &str, args: serde_json::Value) -> Stdin {
    let serde_json::Value::Object(args) = args else {
        panic!("an object")
    };
    let v = p.decide(&Intent::new(tool, args));
    v.plan.expect("a plan").confinement.stdin
}

#[test]
fn each_form_gives_its_plan_its_stdin_and_the_listing_says_so() {
    let p = load(TOOLS).expect("loads");
    assert_eq!(
        stdin_of(&p, "write", json!({"path": "/tmp/x", "content": "hi\n"})),
        Stdin::Input("hi\n".into())
    );
    // Optional and left out: an empty input, which the policy said the call may have.
    assert_eq!(
        stdin_of(&p, "write", json!({"path": "/tmp/x"})),
        Stdin::Input(String::new())
    );
    assert_eq!(stdin_of(&p, "cat", json!({})), Stdin::Caller);
    assert_eq!(stdin_of(&p, "ls", json!({})), Stdin::Passed);
    let listed: Vec<_> = p.listing().into_iter().map(|t| (t.name, t.stdin)).collect();
    assert_eq!(
        listed,
        [
            ("cat".to_owned(), Some(StdinSpec::Caller)),
            ("ls".to_owned(), None),
            ("write".to_owned(), Some(StdinSpec::Arg("content".into()))),
        ]
    );
    let wire = serde_json::to_value(p.listing()).expect("JSON");
    assert_eq!(wire[0]["stdin"], "caller");
    assert_eq!(wire[2]["stdin"], json!({"arg": "content"}));
    assert!(wire[1].get("stdin").is_none(), "{wire}");
}

#[test]
fn a_plan_without_stdin_serialises_as_before() {
    // The digest of a held call covers its serialised plan: a plan of a tool without `stdin`
    // must read as it did before the field existed.
    let p = load(TOOLS).expect("loads");
    let plan = p
        .decide(&Intent::new("ls", serde_json::Map::new()))
        .plan
        .expect("a plan");
    let text = serde_json::to_string(&plan).expect("JSON");
    assert!(!text.contains("stdin"), "{text}");
    let written = p
        .decide(&Intent::new(
            "write",
            json!({"path": "/tmp/x", "content": "c"})
                .as_object()
                .cloned()
                .expect("an object"),
        ))
        .plan
        .expect("a plan");
    let back: crate::call::plan::LaunchPlan =
        serde_json::from_str(&serde_json::to_string(&written).expect("JSON")).expect("reads");
    assert_eq!(back, written);
}

#[test]
fn each_stdin_mistake_is_a_located_error_naming_its_key() {
    let cases = [
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = { arg = \"body\" }\n",
            "test.toml:4:17: tools.a.stdin.arg: 'body' names no argument of this tool",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = { arg = \"p\" }\n\
             [tools.a.args.p]\ntype = \"path\"\n",
            "test.toml:4:17: tools.a.stdin.arg: argument 'p' is of type path",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = \"stream\"\n",
            "test.toml:4:9: tools.a.stdin: expected \"caller\" or { arg = \"NAME\" }, found 'stream'",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = true\n",
            "test.toml:4:9: tools.a.stdin: expected \"caller\" or { arg = \"NAME\" }, found boolean",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = { argument = \"x\" }\n",
            "test.toml:4:11: tools.a.stdin.argument: unknown key",
        ),
        (
            "[tools.a]\ntier = \"low\"\ncommand = [\"/bin/x\"]\nstdin = { argument = \"x\" }\n",
            "tools.a.stdin: missing key 'arg'",
        ),
        (
            "[tools.a]\ntier = \"low\"\nstdin = \"caller\"\n",
            "tools.a: effects, cwd, env, stdin or tmp given but no command to apply them to",
        ),
    ];
    for (text, want) in cases {
        let errs = load(text).expect_err("a mistake");
        assert!(
            errs.iter().any(|e| e.starts_with(want) || e.contains(want)),
            "{want:?} not in {errs:?}"
        );
    }
}
