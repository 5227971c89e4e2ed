//! guard-mcp's calls, driven by the official MCP Python SDK against a real guardd: a tool's
//! input is an argument guardd writes to the tool's stdin (the default policy's `write_file`
//! writes the content given, never an empty stdin); a tool that reads its caller's stdin is
//! neither listed nor run; every result's `structuredContent` has the keys and types of the
//! tool's `outputSchema`; arguments that do not fit the tool are an error result the model can
//! correct and an unknown tool a JSON-RPC invalid params error (-32602), while a well-typed
//! value the policy refuses stays a recorded decision; the log is plain text when stderr is no
//! terminal.

use serde_json::{Value, json};

use super::{
    mcp::{session, session_logged},
    support::{self, Guardd, ToolDir},
};

/// The default policy, its workspace moved to `ws`, a tool that reads its caller's stdin and
/// one that never reads its input.
fn default_policy_in(ws: &std::path::Path) -> String {
    support::default_policy_in(ws)
        + "\n[tools.wc]\ntier = \"low\"\ncommand = [\"/usr/bin/wc\", \"-c\"]\nstdin = \"caller\"\n"
        + "\n[tools.sink]\ntier = \"low\"\ncommand = [\"/bin/true\"]\nstdin = { arg = \"data\" }\n"
        + "[tools.sink.args.data]\ntype = \"string\"\n"
}

fn names(list: &Value) -> Vec<&str> {
    let tools = list["tools"].as_array().expect("tools");
    tools.iter().filter_map(|t| t["name"].as_str()).collect()
}

#[test]
fn mcp_write_file_writes_the_content_given_and_a_caller_stdin_tool_is_not_offered() {
    if !support::privileged("mcp_write_file_writes_the_content_given") {
        return;
    }
    let Some(python) = support::python("mcp_write_file_writes_the_content_given") else {
        return;
    };
    let dir = ToolDir::new("mcp-in");
    let ws = dir.subdir("ws", 0o777);
    // The developer's workspace: write_file runs as its owner.
    std::os::unix::fs::chown(&ws, Some(support::NOBODY), Some(support::NOBODY)).expect("chown");
    // A file the agent replaces: the bug emptied it and reported success.
    let notes = ws.join("notes.md");
    std::fs::write(&notes, "old\n").expect("write notes");
    std::fs::set_permissions(&notes, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod notes");
    let guardd = Guardd::start(&default_policy_in(&ws));
    let content = "# Notes\nline two, with ünïcode\n";
    let plan = json!([
        {"list": true},
        {"call": "write_file", "arguments": {"path": "notes.md", "content": content}},
        {"call": "write_file", "arguments": {"path": "other.md"}},
        {"call": "wc", "arguments": {}},
        // More than a pipe holds, to a tool that never reads it: the call still ends.
        {"call": "sink", "arguments": {"data": "x".repeat(100_000)}},
        // A large file in directories still to be made: a line back, not the content.
        {"call": "write_file", "arguments": {"path": "src/new/big.txt", "content": "y".repeat(20_000)}},
    ]);
    let server = json!({
        "command": support::bin("guard-mcp"),
        "args": ["--socket", &guardd.socket],
        "cwd": ws,
    });
    let steps = super::mcp::session_with(&python, &server, &plan);

    let listed = names(&steps[0]);
    assert!(
        listed.contains(&"write_file") && listed.contains(&"sink"),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&"wc"),
        "a caller-stdin tool is offered: {listed:?}"
    );
    let tools = steps[0]["tools"].as_array().expect("tools");
    let write = tools
        .iter()
        .find(|t| t["name"] == "write_file")
        .expect("write_file");
    assert_eq!(write["inputSchema"]["required"], json!(["content", "path"]));
    assert_eq!(
        write["inputSchema"]["properties"]["content"]["type"],
        "string"
    );

    assert_eq!(steps[1]["isError"], false, "{}", steps[1]);
    assert_eq!(std::fs::read_to_string(&notes).expect("notes"), content);
    // The model is told what was written, not the content it sent (issue 50).
    let said = steps[1]["texts"][0].as_str().unwrap_or_default();
    assert!(
        said.starts_with(&format!("wrote {} bytes to ", content.len())) && !said.contains("Notes"),
        "{said:?}"
    );
    assert_eq!(steps[5]["isError"], false, "{}", steps[5]);
    let big =
        std::fs::read_to_string(ws.join("src/new/big.txt")).expect("made with its directories");
    assert_eq!(big.len(), 20_000);
    let said = steps[5]["texts"][0].as_str().unwrap_or_default();
    assert!(
        said.len() < 300 && said.contains("wrote 20000 bytes"),
        "{said:?}"
    );
    // Without its content the call does not fit the tool: an error result the model reads
    // (the specification's input validation error), and nothing is written.
    assert_eq!(steps[2]["isError"], true, "{}", steps[2]);
    let said = steps[2]["texts"][0].as_str().unwrap_or_default();
    assert!(
        said.contains("missing required argument 'content'"),
        "{}",
        steps[2]
    );
    assert!(!ws.join("other.md").exists());
    // The caller-stdin tool is not run: an MCP client has no stdin to give it.
    assert_eq!(steps[3]["error"]["code"], -32602, "{}", steps[3]);
    let message = steps[3]["error"]["message"].as_str().expect("message");
    assert!(message.contains("stdin"), "{message}");
    assert_eq!(steps[4]["isError"], false, "{}", steps[4]);
    assert_eq!(steps[4]["structured"]["exit_code"], 0);

    let rows = guardd.audit_rows();
    let tools_decided: Vec<&Value> = rows
        .iter()
        .filter(|r| r["kind"] == "decision")
        .map(|r| &r["tool"])
        .collect();
    assert_eq!(
        tools_decided,
        [&json!("write_file"), &json!("sink"), &json!("write_file")],
        "{rows:?}"
    );
}

/// `echo` is checked by type and pattern; `broken` is allowed but cannot be launched (its user
/// does not exist): every kind of result the server gives.
const CHECKED: &str = r#"
[tools.echo]
tier = "low"
command = ["/bin/echo", "{words}"]
[tools.echo.args.words]
type = "string"
pattern = '[a-z ]+'
[tools.echo.args.times]
type = "integer"
required = false

[tools.broken]
tier = "low"
command = ["/bin/true"]
run_as = "no-such-user-here"
"#;

#[test]
fn mcp_structured_content_fits_the_output_schema_and_malformed_arguments_are_error_results() {
    if !support::privileged("mcp_structured_content_fits_the_output_schema") {
        return;
    }
    let Some(python) = support::python("mcp_structured_content_fits_the_output_schema") else {
        return;
    };
    let guardd = Guardd::start(CHECKED);
    let plan = json!([
        {"list": true},
        {"call": "echo", "arguments": {"words": "hello"}},
        {"call": "echo", "arguments": {"words": "Hello; rm -rf /"}},
        {"call": "broken", "arguments": {}},
        {"call": "echo", "arguments": {"words": 5}},
        {"call": "echo", "arguments": {}},
        {"call": "echo", "arguments": {"words": "hi", "colour": "red"}},
        {"call": "echo", "arguments": {"words": "hi", "times": "2"}},
        {"call": "nope", "arguments": {}},
    ]);
    let steps = session(&python, &guardd.socket, &plan);

    // Every listed tool declares the schema; every result fits it, with the same keys whether
    // the call ran, was refused or could not be launched.
    let tools = steps[0]["tools"].as_array().expect("tools");
    for t in tools {
        let schema = &t["outputSchema"];
        assert_eq!(schema["type"], "object", "{t}");
        assert_eq!(schema["additionalProperties"], false, "{t}");
        let required = schema["required"].as_array().expect("required").len();
        assert_eq!(required, 7, "{schema}");
    }
    let results = &steps[1..4];
    for r in results {
        assert_eq!(r["schema_errors"], json!([]), "{r}");
    }
    let keys = |r: &Value| {
        let mut k: Vec<String> = r["structured"]
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    };
    assert!(
        results.iter().all(|r| keys(r) == keys(&results[0])),
        "{results:?}"
    );
    assert_eq!(steps[1]["structured"]["exit_code"], 0);
    assert_eq!(steps[2]["structured"]["decision"], "block");
    assert_eq!(steps[2]["structured"]["exit_code"], Value::Null);
    assert_eq!(steps[2]["structured"]["receipt"], Value::Null);
    assert_eq!(steps[3]["isError"], true, "{}", steps[3]);
    assert!(steps[3]["structured"]["error"].is_string(), "{}", steps[3]);

    // Arguments that do not fit: error results naming what is wrong, for the model to correct
    // (MCP 2025-11-25, SEP-1303); an unknown tool stays a JSON-RPC error.
    for (step, says) in steps[4..8].iter().zip([
        "'words' must be a string",
        "missing required argument 'words'",
        "unknown argument 'colour'",
        "'times' must be an integer",
    ]) {
        assert_eq!(step["isError"], true, "{step}");
        assert!(
            step["structured"]["error"]
                .as_str()
                .is_some_and(|e| e.contains(says)),
            "{step}"
        );
    }
    assert_eq!(steps[8]["error"]["code"], -32602, "{}", steps[8]);
    let message = steps[8]["error"]["message"].as_str().expect("message");
    assert!(message.contains("unknown tool 'nope'"), "{message}");
    // Only the calls that were calls reached guardd, each with its decision row.
    let rows = guardd.audit_rows();
    let decisions = rows.iter().filter(|r| r["kind"] == "decision").count();
    assert_eq!(decisions, 3, "{rows:?}");
}

#[test]
fn mcp_log_has_no_colour_codes_when_stderr_is_no_terminal() {
    let Some(python) = support::python("mcp_log_has_no_colour_codes") else {
        return;
    };
    let dir = support::TempDir::new("mcp-log");
    let server = json!({
        "command": support::bin("guard-mcp"),
        "args": ["--socket", dir.join("none.sock")],
        "env": {"GUARD_MCP_LOG": "debug"},
    });
    let plan = json!([{"list": true}, {"call": "echo", "arguments": {"words": "hi"}}]);
    let (steps, log) = session_logged(&python, &server, &plan);
    assert_eq!(steps[0]["tools"], json!([]));
    let text = String::from_utf8_lossy(&log);
    // The log is there (a warning of the listing without guardd), and plain.
    assert!(text.contains("listing no tools"), "{text}");
    assert!(!log.contains(&0x1b), "an escape byte in the log: {text:?}");
}

/// guardd dies while a call runs (its death kills the call): the client's error result says the
/// call was stopped once guard-mcp saw its processes gone, through the pidfd guardd passed with
/// the call's start, not before.
#[test]
fn mcp_a_call_whose_guardd_dies_is_said_stopped_once_its_processes_are_gone() {
    if !support::privileged("mcp_a_call_whose_guardd_dies_is_said_stopped_once") {
        return;
    }
    let Some(python) = support::python("mcp_guardd_dies") else {
        return;
    };
    let s = super::escape::Setup::new();
    let mut guardd = Guardd::start(&s.policy("", ""));
    let socket = guardd.socket.clone();
    let session = std::thread::spawn(move || {
        let plan = json!([{"call": "tt", "arguments": {"a0": "hog", "a1": "512"}}]);
        session(&python, &socket, &plan)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let running = support::output(guardd.ctl(&["calls", "--running", "--json"]));
        if String::from_utf8_lossy(&running.stdout).lines().count() == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{running:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    guardd.crash();
    let steps = session.join().expect("the session");
    let call = &steps[0];
    assert_eq!(call["isError"], true, "{call}");
    let said = call["texts"][0].as_str().unwrap_or_default();
    assert!(
        said.contains("the call was stopped: its processes are gone"),
        "{call}"
    );
    guardd.start_again();
}

/// A client that offers MCP roots (an editor's open folders) works in them: guard-mcp, started
/// outside every workspace, sends the client's root as the call's working directory, asks
/// again after `roots/list_changed`, and without roots works where it was started (here: in no
/// workspace, so a workspace tool is refused).
#[test]
fn mcp_a_clients_roots_pick_the_calls_workspace() {
    if !support::privileged("mcp_a_clients_roots_pick_the_calls_workspace") {
        return;
    }
    let Some(python) = support::python("mcp_a_clients_roots_pick_the_calls_workspace") else {
        return;
    };
    let dir = ToolDir::new("mcp-roots");
    let (a, b) = (dir.subdir("a", 0o755), dir.subdir("b", 0o755));
    std::fs::write(a.join("in-a.txt"), "a\n").expect("a");
    std::fs::write(b.join("in-b.txt"), "b\n").expect("b");
    let policy = support::default_policy_in(&a).replacen(
        &format!("roots = [\"{}\"]", a.display()),
        &format!("roots = [\"{}\", \"{}\"]", a.display(), b.display()),
        1,
    );
    let guardd = Guardd::start(&policy);
    let listed = |step: &Value| step["texts"].to_string();
    let list = json!({"call": "list_dir", "arguments": {"dir": "."}});
    let server = json!({
        "command": support::bin("guard-mcp"),
        "args": ["--socket", &guardd.socket],
        "cwd": "/",
        "roots": [format!("file://{}", a.display())],
    });
    let changed = json!({"roots": [format!("file://{}", b.display())]});
    let (steps, log) = session_logged(&python, &server, &json!([list, changed, list]));
    assert_eq!(
        steps[0]["isError"],
        false,
        "{steps:?} {}",
        String::from_utf8_lossy(&log)
    );
    assert!(listed(&steps[0]).contains("in-a.txt"), "{steps:?}");
    assert!(listed(&steps[2]).contains("in-b.txt"), "{steps:?}");
    // No roots offered: guard-mcp's own directory, /, is in no workspace.
    let mut plain = server.clone();
    plain.as_object_mut().expect("object").remove("roots");
    let (steps, _) = session_logged(&python, &plain, &json!([list]));
    assert_eq!(steps[0]["isError"], true, "{steps:?}");
}
