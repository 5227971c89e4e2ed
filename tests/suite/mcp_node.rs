//! guard-mcp driven by the official MCP TypeScript SDK (`@modelcontextprotocol/sdk` from npm, in
//! setup's `target/node`), as the clients built on Node start and call it: on Unix socket pairs
//! (Node's `child_process`), against a real guardd. Its tools and their schemas, an allowed call
//! whose structured content the SDK checks against the tool's output schema, and a blocked one.

use std::path::Path;

use serde_json::{Value, json};

use super::support::{self, Guardd, ToolDir};

/// Runs tests/node/mcp_session.cjs with `plan` on guard-mcp at `socket`: one JSON value a
/// step, and what the session wrote on stderr (guard-mcp's log among it: the SDK lets the
/// server's stderr through).
pub(super) fn session(modules: &Path, socket: &Path, plan: &Value) -> (Vec<Value>, String) {
    let server = json!({
        "command": support::bin("guard-mcp"),
        "args": ["--socket", socket],
        "cwd": support::default_workspace(),
        "env": {"GUARD_MCP_LOG": "warn,guard_mcp::stdio=debug"},
    });
    let mut cmd = std::process::Command::new("node");
    cmd.arg(support::workspace().join("tests/node/mcp_session.cjs"))
        .arg(modules)
        .arg(server.to_string())
        .arg(plan.to_string());
    let (steps, log) = super::mcp::steps_of(cmd);
    (steps, String::from_utf8_lossy(&log).into_owned())
}

#[test]
fn mcp_typescript_sdk_lists_runs_an_allowed_call_and_reports_a_block() {
    let test = "mcp_typescript_sdk_lists_runs_an_allowed_call_and_reports_a_block";
    if !support::privileged(test) {
        return;
    }
    let Some(modules) = support::node_modules(test) else {
        return;
    };
    let tools = ToolDir::new("mcp-node");
    // Messages longer than a socket's buffer both ways: a long argument, a long output.
    let policy = super::mcp::policy(&tools.tool)
        + "[tools.say]\ntier = \"low\"\ncommand = [\"/bin/echo\", \"{text}\"]\n\
           [tools.say.args.text]\ntype = \"string\"\nmax_len = 400000\n\
           [tools.count]\ntier = \"low\"\ncommand = [\"/usr/bin/seq\", \"100000\"]\n";
    let guardd = Guardd::start(&policy);
    let text = "abcdefgh".repeat(12_000);
    let plan = json!([
        {"list": true},
        {"call": "echo", "arguments": {"words": "hello there"}},
        {"call": "echo", "arguments": {"words": "Hello; rm -rf /"}},
        {"ping": true},
        {"call": "say", "arguments": {"text": text}},
        {"call": "count"},
    ]);
    let (steps, log) = session(&modules, &guardd.socket, &plan);
    assert_eq!(steps.len(), 6, "{steps:?}");
    // Node gave it socket pairs, which it reads and writes from the runtime's own thread.
    assert!(log.contains("stdin is a stream socket"), "{log}");

    // The list, with the schemas the SDK keeps to check results against.
    let listed = steps[0]["tools"].as_array().expect("tools");
    let names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "count",
            "echo",
            "mail",
            "net",
            "say",
            "slow",
            "retrieve_quarantined_tool_response"
        ],
        "{listed:?}"
    );
    assert_eq!(listed[1]["inputSchema"]["required"], json!(["words"]));
    assert!(listed[1]["outputSchema"].is_object(), "{}", listed[1]);

    // Allowed: its output, exit 0, and a receipt the SDK let through its output schema.
    let ok = &steps[1];
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["texts"][0], "hello there\n");
    assert_eq!(ok["structured"]["exit_code"], 0);
    assert_eq!(ok["structured"]["receipt"]["verdict"], "conformed");
    assert_eq!(ok["structured"]["receipt"]["execs"], json!(["/bin/echo"]));

    // Blocked by the policy's pattern: an error result saying so, nothing run.
    let blocked = &steps[2];
    assert_eq!(blocked["isError"], true, "{blocked}");
    assert_eq!(blocked["structured"]["decision"], "block");
    assert_eq!(steps[3]["pong"], true);
    // The long argument reached the tool whole, and the long output the client (589 kB, more
    // than a socket's buffer: written as the client reads it).
    assert_eq!(
        steps[4]["texts"][0].as_str().map(str::trim_end),
        Some(&*text)
    );
    let counted = steps[5]["texts"][0].as_str().expect("its output");
    assert_eq!(counted.len(), 588_895);
    assert!(
        counted.ends_with("\n99999\n100000\n"),
        "{}",
        &counted[counted.len() - 20..]
    );
    let rows = guardd.audit_rows();
    let finished = rows.iter().filter(|r| r["kind"] == "finished").count();
    assert_eq!(
        finished, 3,
        "the allowed calls ran, the blocked one did not"
    );
}
