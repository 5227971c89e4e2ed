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
fn session(modules: &Path, socket: &Path, plan: &Value) -> (Vec<Value>, String) {
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
    let guardd = Guardd::start(&super::mcp::policy(&tools.tool));
    let plan = json!([
        {"list": true},
        {"call": "echo", "arguments": {"words": "hello there"}},
        {"call": "echo", "arguments": {"words": "Hello; rm -rf /"}},
        {"ping": true},
    ]);
    let (steps, log) = session(&modules, &guardd.socket, &plan);
    assert_eq!(steps.len(), 4, "{steps:?}");
    // Node gave it socket pairs, which it reads and writes from the runtime's own thread.
    assert!(log.contains("the client's socket pair"), "{log}");

    // The list, with the schemas the SDK keeps to check results against.
    let listed = steps[0]["tools"].as_array().expect("tools");
    let names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "mail", "net", "slow"], "{listed:?}");
    assert_eq!(listed[0]["inputSchema"]["required"], json!(["words"]));
    assert!(listed[0]["outputSchema"].is_object(), "{}", listed[0]);

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
    let rows = guardd.audit_rows();
    let finished = rows.iter().filter(|r| r["kind"] == "finished").count();
    assert_eq!(finished, 1, "only the allowed call ran");
}
