//! guard-mcp driven by the official MCP Python SDK (`mcp` from PyPI, in setup's venv), over
//! stdio, against a real guardd: the tools and their schemas come from the policy, an allowed
//! call returns its output, a blocked one and a diverging one are error results, a reload is a
//! `tools/list_changed`, a held call reports progress and is withdrawn when cancelled, a running
//! one is killed when cancelled, and without guardd nothing runs.

use std::path::Path;

use serde_json::{Value, json};

use super::support::{self, Guardd, ToolDir, output};

/// `echo` is checked by pattern and length; `net` may send only to 127.0.0.1:9 (anything else is
/// a divergence, and the call is killed); `mail` is held for a human.
pub(super) fn policy(tool: &Path) -> String {
    let tool = tool.display();
    format!(
        r#"
[tools.echo]
tier = "low"
description = "Print its words"
command = ["/bin/echo", "{{words}}"]
[tools.echo.args.words]
type = "string"
pattern = '[a-z ]+'
max_len = 100

[tools.net]
tier = "low"
description = "Send a datagram"
command = ["{tool}", "sendto", "{{addr}}"]
[tools.net.args.addr]
type = "string"
[tools.net.effects]
connect = ["127.0.0.1:9"]

[tools.mail]
tier = "high"
irreversible = true
command = ["/bin/echo", "{{to}}"]
[tools.mail.args.to]
type = "string"
[tools.mail.args.mode]
type = "enum"
values = ["plain", "html"]
required = false

[tools.slow]
tier = "low"
command = ["{tool}", "sleep", "60"]

[tools.forbidden]
tier = "critical"
command = ["/bin/true"]
"#
    )
}

/// Runs the session script with `plan` on guard-mcp at `socket`.
pub(super) fn session(python: &Path, socket: &Path, plan: &Value) -> Vec<Value> {
    let server = json!({"command": support::bin("guard-mcp"), "args": ["--socket", socket]});
    session_with(python, &server, plan)
}

/// [`session`] with guard-mcp keeping a held call's request open until it is answered
/// (`--held wait`), as before the release tool.
pub(super) fn session_waiting(python: &Path, socket: &Path, plan: &Value) -> Vec<Value> {
    let args = json!(["--socket", socket, "--held", "wait"]);
    let server = json!({"command": support::bin("guard-mcp"), "args": args});
    session_with(python, &server, plan)
}

/// Runs the session script with `plan` on `server` (`{command, args, env}`); returns one JSON
/// value per step.
pub(super) fn session_with(python: &Path, server: &Value, plan: &Value) -> Vec<Value> {
    session_logged(python, server, plan).0
}

/// [`session_with`], and what the session wrote on stderr (the server's log: the SDK gives the
/// server the client's stderr, here a pipe).
pub(super) fn session_logged(python: &Path, server: &Value, plan: &Value) -> (Vec<Value>, Vec<u8>) {
    let mut cmd = std::process::Command::new(python);
    cmd.arg(support::workspace().join("tests/python/mcp_session.py"))
        .arg(server.to_string())
        .arg(plan.to_string());
    // The client starts guard-mcp in its own directory, which picks the calls' workspace: the
    // server's `cwd` (this test's), else the default policy's workspace.
    match server["cwd"].as_str() {
        Some(cwd) => cmd.current_dir(cwd),
        None => cmd.current_dir(support::default_workspace()),
    };
    steps_of(cmd)
}

/// Runs `cmd`, a session script, which must succeed: one JSON value a step it printed, and
/// what it wrote on stderr.
pub(super) fn steps_of(cmd: std::process::Command) -> (Vec<Value>, Vec<u8>) {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "the MCP session failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let steps = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line per step"))
        .collect();
    (steps, out.stderr)
}

#[test]
fn mcp_sdk_lists_schemas_runs_an_allowed_call_and_reports_block_and_kill() {
    if !support::privileged("mcp_sdk_lists_schemas_runs_an_allowed_call_and_reports_block_and_kill")
    {
        return;
    }
    let Some(python) = support::python("mcp_sdk_lists_schemas") else {
        return;
    };
    let tools = ToolDir::new("mcp");
    let guardd = Guardd::start(&policy(&tools.tool));
    let plan = json!([
        {"list": true},
        {"call": "echo", "arguments": {"words": "hello there"}},
        {"call": "echo", "arguments": {"words": "Hello; rm -rf /"}},
        {"call": "forbidden", "arguments": {}},
        {"call": "net", "arguments": {"addr": "127.0.0.1:10"}},
    ]);
    let steps = session(&python, &guardd.socket, &plan);
    assert_eq!(steps.len(), 5, "{steps:?}");

    // The list: the policy's runnable tools within the ceiling, with schemas and annotations.
    let listed = steps[0]["tools"].as_array().expect("tools");
    let names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    // And guard-mcp's own release tool, for held calls (`mcp_release`).
    assert_eq!(
        names,
        [
            "echo",
            "mail",
            "net",
            "slow",
            "retrieve_quarantined_tool_response"
        ],
        "{listed:?}"
    );
    let echo = &listed[0];
    assert_eq!(echo["inputSchema"]["required"], json!(["words"]));
    assert_eq!(echo["inputSchema"]["additionalProperties"], false);
    let words = &echo["inputSchema"]["properties"]["words"];
    assert_eq!(
        (&words["type"], &words["pattern"], &words["maxLength"]),
        (&json!("string"), &json!("^(?:[a-z ]+)$"), &json!(100))
    );
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    let mail = &listed[1];
    assert_eq!(
        mail["inputSchema"]["properties"]["mode"]["enum"],
        json!(["plain", "html"])
    );
    assert_eq!(mail["inputSchema"]["required"], json!(["to"]));
    assert_eq!(mail["annotations"]["destructiveHint"], true);
    assert_eq!(listed[2]["annotations"]["openWorldHint"], true);

    // Allowed: its output, exit 0 and the receipt.
    let ok = &steps[1];
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["texts"][0], "hello there\n");
    assert_eq!(ok["structured"]["exit_code"], 0);
    assert_eq!(ok["structured"]["receipt"]["execs"], json!(["/bin/echo"]));
    let call_id = ok["structured"]["call_id"].as_str().expect("call id");

    // Blocked by the policy (a well-typed value its pattern refuses): an error result with the
    // generic message. A tool the ceiling blocks is not offered: calling it is calling an
    // unknown tool, an invalid parameter that never reaches guardd.
    let blocked = &steps[2];
    assert_eq!(blocked["isError"], true, "{blocked}");
    assert_eq!(blocked["structured"]["decision"], "block");
    let text = blocked["texts"][0].as_str().expect("text");
    assert!(text.contains("blocked by policy"), "{text}");
    assert_eq!(steps[3]["error"]["code"], -32602, "{}", steps[3]);

    // Diverged: a datagram elsewhere than approved; guard killed the call and says so.
    let killed = &steps[4];
    assert_eq!(killed["isError"], true, "{killed}");
    assert_eq!(killed["structured"]["stopped"], true);
    assert_eq!(killed["structured"]["diverged"], true);
    assert_eq!(killed["structured"]["exit_code"], 137);
    let text = killed["texts"].as_array().expect("texts");
    assert!(
        text.iter()
            .any(|t| t.as_str().is_some_and(|t| t.contains("was killed"))),
        "{text:?}"
    );

    // Each call went through guardd like any other: a decision row apiece, a finished row for
    // the two that ran.
    let rows = guardd.audit_rows();
    let decisions = rows.iter().filter(|r| r["kind"] == "decision").count();
    assert_eq!(decisions, 3, "{rows:?}");
    let finished: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert_eq!(finished.len(), 2, "{rows:?}");
    assert_eq!(finished[0]["call_id"], call_id);
    assert_eq!(finished[1]["effects_observed"]["verdict"], "diverged");
}

#[test]
fn mcp_reload_is_a_list_changed_and_a_held_call_is_withdrawn_on_cancel() {
    if !support::privileged("mcp_reload_is_a_list_changed_and_a_held_call_is_withdrawn_on_cancel") {
        return;
    }
    let Some(python) = support::python("mcp_reload_is_a_list_changed") else {
        return;
    };
    let tools = ToolDir::new("mcp");
    let guardd = Guardd::start(&policy(&tools.tool));
    let edited = guardd.dir.join("edited.toml");
    let more = "\n[tools.added]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n";
    std::fs::write(&edited, policy(&tools.tool) + more).expect("write policy");
    let reload = format!(
        "cp {} {} && {} --socket {} reload",
        edited.display(),
        guardd.dir.join("policy.toml").display(),
        support::bin("guardctl").display(),
        guardd.socket.display()
    );
    // The call right after the reload: guard-mcp checks its arguments against the list its feed
    // keeps (asking guardd again for one it refuses), and the tool the reload added runs.
    let plan = json!([
        {"list": true},
        {"run": ["sh", "-c", reload]},
        {"call": "added", "arguments": {}},
        {"await_list_changed": 20},
        {"list": true},
        {"call": "mail", "arguments": {"to": "x"}, "cancel_after_progress": true},
        {"call": "slow", "arguments": {}, "cancel_after": 2},
    ]);
    let mut steps = session_waiting(&python, &guardd.socket, &plan);
    assert_eq!(steps[1]["code"], 0, "{steps:?}");
    let added = steps.remove(2);
    assert_eq!(added["isError"], false, "{added}");
    assert_eq!(added["structured"]["exit_code"], 0, "{added}");
    assert_eq!(steps[2]["list_changed"], true, "{steps:?}");
    let names: Vec<&str> = steps[3]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"added"), "{names:?}");

    // Held: progress while it waits, naming the call; cancelled, nothing waits any more.
    let progress = &steps[4]["progress"][0];
    let message = progress["message"].as_str().expect("progress message");
    assert!(message.contains("guardctl approve"), "{message}");
    assert_eq!(progress["total"], 300.0);
    let rows = guardd.audit_rows();
    let held = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["decision"]["decision"] == "escalate")
        .expect("an escalate decision row");
    let approvals: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "approval").collect();
    assert!(
        approvals
            .iter()
            .all(|r| r["call_id"] == held["call_id"] && r["approved"] != true),
        "{approvals:?}"
    );
    let id = held["call_id"].as_str().expect("id").to_owned();
    eventually("the cancelled held call is withdrawn", || {
        let out = output(guardd.ctl(&["pending", "--json"]));
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&id)
    });
    assert!(
        !guardd
            .audit_rows()
            .iter()
            .any(|r| r["kind"] == "finished" && r["call_id"] == held["call_id"]),
        "the cancelled call ran"
    );

    // Running: cancelled two seconds into its minute of sleep, it is killed rather than left to
    // finish: its finished row, written once guardd has killed it, says how it ended.
    let finished = |rows: Vec<Value>| {
        rows.into_iter()
            .find(|r| r["kind"] == "finished" && r["tool"] == "slow")
    };
    eventually("the cancelled running call is stopped", || {
        finished(guardd.audit_rows()).is_some()
    });
    let slow = finished(guardd.audit_rows()).expect("finished row");
    assert_eq!(
        (&slow["exit"]["signal"], &slow["exit"]["timed_out"]),
        (&json!(9), &json!(false)),
        "{slow}"
    );
}

/// Waits (up to 20 s) until `done`; fails naming `what` otherwise.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn mcp_without_guardd_lists_nothing_and_every_call_is_an_error() {
    let Some(python) = support::python("mcp_without_guardd") else {
        return;
    };
    let dir = support::TempDir::new("mcp-nod");
    let socket = dir.join("none.sock");
    let plan = json!([
        {"list": true},
        {"call": "echo", "arguments": {"words": "hi"}},
    ]);
    let steps = session(&python, &socket, &plan);
    assert_eq!(steps[0]["tools"], json!([]));
    assert_eq!(steps[1]["isError"], true);
    let text = steps[1]["texts"][0].as_str().expect("text");
    assert!(
        text.contains("guardd unreachable") && text.contains("did not run"),
        "{text}"
    );
}

#[test]
fn mcp_call_to_a_guardd_that_does_not_take_it_is_a_busy_error() {
    let Some(python) = support::python("mcp_call_to_a_guardd_that_does_not_take_it") else {
        return;
    };
    // Its listen queue full (the connect would wait, off the server's thread), or with room
    // but never accepted (the call sent, never taken).
    for (full, said) in [
        (true, "listen queue stayed full"),
        (false, "did not take the call"),
    ] {
        let stuck = super::fair::Stuck::new(full);
        let server = json!({
            "command": support::bin("guard-mcp"),
            "args": ["--socket", stuck.socket],
            "env": {"GUARD_CONNECT_TIMEOUT": "1", "GUARD_REPLY_TIMEOUT": "1"},
        });
        let plan = json!([{"call": "echo", "arguments": {"words": "hi"}}, {"list": true}]);
        let steps = session_with(&python, &server, &plan);
        assert_eq!(steps[0]["isError"], true, "{steps:?}");
        // The server goes on: it answers the next request (no tools from a guardd that
        // answers nothing).
        assert_eq!(steps[1]["tools"], json!([]), "{steps:?}");
        let text = steps[0]["texts"][0].as_str().expect("text");
        assert!(
            text.contains(said) && text.contains("busy") && text.contains("did not run"),
            "full={full}: {text}"
        );
    }
}

/// A request longer than a quarter of the socket's buffer is sent from a thread of its own (it
/// could wait for guardd to read it): it arrives whole, and the call runs with it.
#[test]
fn mcp_a_long_argument_reaches_the_tool_whole() {
    if !support::privileged("mcp_a_long_argument_reaches_the_tool_whole") {
        return;
    }
    let Some(python) = support::python("mcp_a_long_argument") else {
        return;
    };
    let guardd = Guardd::start(
        "[tools.say]\ntier = \"low\"\ncommand = [\"/bin/echo\", \"{text}\"]\n\
         [tools.say.args.text]\ntype = \"string\"\nmax_len = 400000\n",
    );
    let buffer: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_default")
        .expect("wmem_default")
        .trim()
        .parse()
        .expect("a number");
    // Past a quarter of the buffer, within what one argument of an exec may be (128 KiB).
    let text: String = "abcdefgh".repeat(buffer / 32 + 128);
    if text.len() >= 128 << 10 {
        let why = format!("wmem_default {buffer} leaves no argument long enough");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}, and tests may not skip under CI=true");
        }
        eprintln!("skipping: {why}");
        return;
    }
    assert!(
        text.len() < 128 << 10,
        "wmem_default {buffer}: no such argument"
    );
    let plan = json!([{"call": "say", "arguments": {"text": text}}]);
    let steps = session(&python, &guardd.socket, &plan);
    assert_eq!(steps[0]["isError"], false, "{:?}", steps[0]["texts"]);
    assert_eq!(steps[0]["structured"]["exit_code"], 0);
    let out = steps[0]["texts"][0].as_str().expect("its output");
    assert_eq!(out.trim_end(), text);
}

/// guard-mcp started on pipes, or on socket pairs: it, and its client's ends (to it, from it).
fn mcp_on(
    sockets: bool,
) -> (
    std::process::Child,
    Box<dyn std::io::Write + Send>,
    Box<dyn std::io::Read + Send>,
) {
    use std::{os::unix::net::UnixStream, process::Stdio};
    let mut cmd = std::process::Command::new(support::bin("guard-mcp"));
    cmd.args(["--socket", "/nonexistent/guard.sock"])
        .stderr(Stdio::null());
    if sockets {
        let (ours_in, theirs_in) = UnixStream::pair().expect("socketpair");
        let (ours_out, theirs_out) = UnixStream::pair().expect("socketpair");
        cmd.stdin(std::os::fd::OwnedFd::from(theirs_in))
            .stdout(std::os::fd::OwnedFd::from(theirs_out));
        let server = cmd.spawn().expect("guard-mcp");
        return (server, Box::new(ours_in), Box::new(ours_out));
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut server = cmd.spawn().expect("guard-mcp");
    let to_server = server.stdin.take().expect("stdin");
    let from_server = server.stdout.take().expect("stdout");
    (server, Box::new(to_server), Box::new(from_server))
}

/// [`mcp_on`], and the MCP session initialized (its answer read).
fn mcp_initialized(
    sockets: bool,
) -> (
    std::process::Child,
    Box<dyn std::io::Write + Send>,
    std::io::BufReader<Box<dyn std::io::Read + Send>>,
) {
    use std::io::{BufRead as _, Write as _};
    let (server, mut to_server, from_server) = mcp_on(sockets);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    writeln!(to_server, "{initialize}").expect("initialize");
    let mut reader = std::io::BufReader::new(from_server);
    let mut line = String::new();
    reader.read_line(&mut line).expect("its answer");
    assert!(line.contains("\"serverInfo\""), "sockets={sockets}: {line}");
    (server, to_server, reader)
}

/// guard-mcp reads and writes its client's stdio from the runtime's own thread, on descriptors
/// of its own, whether the client made pipes (the Python SDK) or socket pairs (Node's
/// `child_process`, under the TypeScript SDK): its pipes reopened non-blocking, its sockets
/// copied (and read without waiting), while its standard streams keep their flags (a process
/// sharing them sees them as they were).
#[test]
fn mcp_stdio_is_read_without_a_thread_of_its_own() {
    for sockets in [false, true] {
        let (mut server, to_server, _from_server) = mcp_initialized(sockets);
        let fd_dir = format!("/proc/{}/fd", server.id());
        let flags = |fd: &str| {
            let info = std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", server.id()))
                .expect("fdinfo");
            let octal = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .expect("flags");
            i32::from_str_radix(octal.trim(), 8).expect("octal flags")
        };
        let file_of = |fd: &str| std::fs::read_link(format!("{fd_dir}/{fd}")).expect("fd link");
        for (standard, stream) in [("0", "stdin"), ("1", "stdout")] {
            let file = file_of(standard);
            let kind = if sockets { "socket:" } else { "pipe:" };
            assert!(file.to_string_lossy().starts_with(kind), "{file:?}");
            assert_eq!(flags(standard) & libc::O_NONBLOCK, 0, "{stream} itself");
            // Pipes are reopened non-blocking; sockets are copied, read without waiting.
            let own = std::fs::read_dir(&fd_dir)
                .expect("fds")
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|fd| fd != standard && file_of(fd) == file)
                .any(|fd| sockets || flags(&fd) & libc::O_NONBLOCK != 0);
            assert!(own, "no descriptor of its own on {stream} ({file:?})");
        }
        // One thread: none waits on the client's stdin or stdout for the runtime.
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.id())).expect("status");
        let threads = status.lines().find_map(|l| l.strip_prefix("Threads:"));
        assert_eq!(threads.map(str::trim), Some("1"), "sockets={sockets}");
        drop(to_server);
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// The CPU time a process has used so far, in clock ticks (`utime` + `stime`).
fn cpu_ticks(pid: u32) -> u64 {
    let ticks = |n| support::stat_field(pid, n).parse::<u64>().expect("ticks");
    ticks(14) + ticks(15)
}

/// A client that stops reading costs guard-mcp no CPU: its answers wait for room in the
/// client's pipe or socket (the socket's copy polled for it), and none is lost once it reads
/// again.
#[test]
fn mcp_a_client_that_stops_reading_costs_it_no_cpu() {
    use std::io::{BufRead as _, Write as _};
    // Far more answers than a pipe's or a socket's buffer holds.
    const PINGS: usize = 20_000;
    for sockets in [false, true] {
        let (mut server, mut to_server, mut reader) = mcp_initialized(sockets);
        let mut line = String::new();
        let writer = std::thread::spawn(move || {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let mut all = format!("{initialized}\n");
            for id in 1..=PINGS {
                all.push_str(&format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n"
                ));
            }
            // Blocks once guard-mcp, its answers unread, stops reading; done when it reads.
            to_server.write_all(all.as_bytes()).expect("pings");
            to_server
        });
        // Until its answers fill what the client's end holds (three still tenths of a second in
        // a row: on a loaded host one still tenth can be a wait for a CPU, not the stall), and
        // then a second unread.
        let mut before = cpu_ticks(server.id());
        let mut still = 0;
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = cpu_ticks(server.id());
            still = if now == before { still + 1 } else { 0 };
            before = now;
            if still == 3 {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
        let spent = cpu_ticks(server.id()) - before;
        // A server retrying its write spends the whole second (100 ticks; 93 were seen), half
        // of it on a CPU it shares: 30 is far from both that and a server at rest.
        assert!(
            spent <= 30,
            "sockets={sockets}: {spent} ticks in a second unread"
        );
        let mut pongs = 0;
        while pongs < PINGS {
            line.clear();
            reader.read_line(&mut line).expect("an answer");
            assert!(line.contains("\"result\":{}"), "sockets={sockets}: {line}");
            pongs += 1;
        }
        drop(writer.join().expect("writer"));
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// A socket that carries records, not a stream, would have its messages cut by reads: guard-mcp
/// does not start on one, and says why.
#[test]
fn mcp_on_a_record_socket_refuses_to_start() {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair");
    let mut cmd = std::process::Command::new(support::bin("guard-mcp"));
    cmd.args(["--socket", "/nonexistent/guard.sock"])
        .stdin(theirs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let server = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("guard-mcp")
    };
    let out = server.wait_with_output().expect("wait");
    drop(ours);
    assert!(!out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("stdin is a SeqPacket socket"), "{said}");
}

/// The server named `guard` in each MCP recipe of the book (docs/book/src/agents/mcp.md), as written but for the
/// binary's directory and the socket.
#[test]
fn integrations_md_mcp_recipes_work_as_written() {
    if !support::privileged("integrations_md_mcp_recipes_work_as_written") {
        return;
    }
    let Some(python) = support::python("integrations_md_mcp_recipes_work_as_written") else {
        return;
    };
    let default = support::workspace().join("policies/default.toml");
    support::default_workspace();
    let guardd = Guardd::start(&std::fs::read_to_string(default).expect("default policy"));
    for recipe in [
        "claude-code-mcp",
        "codex",
        "claude-desktop",
        "cursor",
        "vscode",
    ] {
        let text = support::doc_block("docs/book/src/agents/mcp.md", recipe);
        let server = if recipe == "codex" {
            let config: toml::Table = toml::from_str(&text).expect("codex TOML");
            serde_json::to_value(&config["mcp_servers"]["guard"]).expect("as JSON")
        } else {
            let config: Value = serde_json::from_str(&text).expect("recipe JSON");
            let servers = config.get("mcpServers").or(config.get("servers"));
            servers.expect("servers")["guard"].clone()
        };
        let server = as_tested(server, &guardd.socket);
        let plan = json!([{"list": true}, {"call": "list_dir", "arguments": {"dir": "."}}]);
        let steps = session_with(&python, &server, &plan);
        let names: Vec<&str> = steps[0]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(
            names.contains(&"shell") && names.contains(&"read_file"),
            "{recipe}: {names:?}"
        );
        assert_eq!(steps[1]["isError"], false, "{recipe}: {}", steps[1]);
        assert_eq!(steps[1]["structured"]["exit_code"], 0, "{recipe}");
    }
}

/// A recipe's server with the test's binary and socket in place of the installed ones.
fn as_tested(mut server: Value, socket: &Path) -> Value {
    let command = server["command"].as_str().expect("command").to_owned();
    assert!(command.ends_with("guard-mcp"), "{command}");
    server["command"] = json!(support::bin("guard-mcp"));
    let env = server["env"].as_object_mut().expect("env");
    assert_eq!(env["GUARD_SOCKET"], "/run/guard/guard.sock");
    env.insert("GUARD_SOCKET".into(), json!(socket));
    server
}

/// The annotations never understate what a tool may do: clients skip their user's confirmation
/// on a `readOnlyHint` tool. A tool that may write (and so remove and truncate) is destructive,
/// and one that may connect is not read-only (what it sends may change the world elsewhere).
#[test]
fn mcp_annotations_do_not_call_a_writing_or_connecting_tool_read_only() {
    if !support::privileged("mcp_annotations_do_not_call_a_writing_or_connecting_tool_read_only") {
        return;
    }
    let Some(python) = support::python("mcp_annotations") else {
        return;
    };
    let dir = support::TempDir::new("mcp-ann");
    let guardd = Guardd::start(&format!(
        r#"
[tools.look]
tier = "low"
command = ["/bin/true"]

[tools.post]
tier = "low"
command = ["/bin/true"]
[tools.post.effects]
connect = ["127.0.0.1:9"]

[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{{command}}"]
[tools.shell.args.command]
type = "string"
[tools.shell.effects]
write = ["{}"]
"#,
        dir.0.display()
    ));
    let steps = session(&python, &guardd.socket, &json!([{"list": true}]));
    let listed = steps[0]["tools"].as_array().expect("tools");
    let hints = |name: &str| {
        let tool = listed
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"));
        let a = &tool["annotations"];
        (a["readOnlyHint"].clone(), a["destructiveHint"].clone())
    };
    assert_eq!(hints("look"), (json!(true), json!(false)));
    assert_eq!(hints("post"), (json!(false), json!(true)));
    assert_eq!(hints("shell"), (json!(false), json!(true)));
}

/// Issue 49, point 11: a tool with `unix = true` and no write effect was listed
/// `readOnlyHint: true, destructiveHint: false`, and through it a service behind a Unix socket
/// made a file. Neither it nor a tool run as root, one in shadow or one above LOW is read-only
/// to a client; the one that only reads stays so. The session is the official Python SDK's.
#[test]
fn mcp_annotations_do_not_call_a_socket_root_shadow_or_medium_tool_read_only() {
    if !support::privileged(
        "mcp_annotations_do_not_call_a_socket_root_shadow_or_medium_tool_read_only",
    ) {
        return;
    }
    let Some(python) = support::python("mcp_annotations_unix") else {
        return;
    };
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = ToolDir::new("guard-mcp-ann");
    // A local service: each line a client sends makes a file, as a service run by root would.
    let socket = dir.dir.join("svc.sock");
    let made = dir.dir.join("made-by-the-service");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let target = made.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            if std::io::BufReader::new(&conn)
                .read_line(&mut line)
                .is_ok_and(|n| n > 0)
            {
                let _ = std::fs::write(&target, line);
            }
        }
    });
    let guardd = Guardd::start(&format!(
        r#"
[tools.look]
tier = "low"
command = ["/bin/true"]

[tools.sock]
tier = "low"
command = ["{tool}", "unix-connect", "{{socket}}"]
[tools.sock.args.socket]
type = "string"
[tools.sock.effects]
unix = true

[tools.rooted]
tier = "low"
run_as = "root"
command = ["/bin/true"]

[tools.seen]
tier = "low"
enforce = "shadow"
command = ["/bin/true"]

[tools.middle]
tier = "medium"
command = ["/bin/true"]
"#,
        tool = dir.tool.display()
    ));
    let call = json!({"call": "sock", "arguments": {"socket": socket}});
    let steps = session(&python, &guardd.socket, &json!([{"list": true}, call]));
    let listed = steps[0]["tools"].as_array().expect("tools");
    let hints = |name: &str| {
        let tool = listed
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"));
        let a = &tool["annotations"];
        let hint = |k: &str| a[k].as_bool();
        (
            hint("readOnlyHint"),
            hint("destructiveHint"),
            hint("openWorldHint"),
        )
    };
    // The control: a LOW tool with no effect only reads.
    assert_eq!(hints("look"), (Some(true), Some(false), Some(false)));
    // The services behind Unix sockets are a world of their own.
    assert_eq!(hints("sock"), (Some(false), Some(true), Some(true)));
    for name in ["rooted", "seen", "middle"] {
        assert_eq!(
            hints(name),
            (Some(false), Some(true), Some(false)),
            "{name}"
        );
    }
    // What the hint would have let a client run unconfirmed changed the world.
    assert_eq!(steps[1]["isError"], false, "{}", steps[1]);
    assert!(made.exists(), "the service made no file: {}", steps[1]);
}

/// A call held when guardd restarts stays held on guardd's disk: guard-mcp comes back for it
/// (`resume`), as guard-exec does, rather than telling the client it was stopped while the admin
/// still sees it waiting; approved after the restart, it runs and the client gets its output.
/// It is listed to the admin only once its caller (guard-mcp) has been told it is held: a restart at
/// that moment (the test's own, at the listing) finds guard-mcp knowing the call's id, and it
/// resumes it (this failed under load when the listing came first).
#[test]
fn mcp_held_call_survives_a_guardd_restart() {
    if !support::privileged("mcp_held_call_survives_a_guardd_restart") {
        return;
    }
    let Some(python) = support::python("mcp_held_restart") else {
        return;
    };
    let mut guardd = Guardd::start(super::mcp_release::POLICY);
    let socket = guardd.socket.clone();
    let session = std::thread::spawn(move || {
        let plan = json!([{"call": "mail", "arguments": {"to": "bob"}}]);
        session_waiting(&python, &socket, &plan)
    });
    let id = super::approval::held(&guardd, 1)[0]["call_id"]
        .as_str()
        .expect("id")
        .to_owned();
    guardd.restart();
    let approved = output(guardd.ctl(&["approve", &id]));
    assert!(approved.status.success(), "{approved:?}");
    let steps = session.join().expect("the session");
    let call = &steps[0];
    assert_eq!(call["isError"], false, "{call}");
    assert!(
        call["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("mailed bob")),
        "{call}"
    );
    assert_eq!(call["structured"]["call_id"], id.as_str(), "{call}");
    // The approved call runs its program by descriptor; its receipt names the program, not
    // the descriptor's `/dev/fd/N` (which `policy suggest` then proposed).
    assert_eq!(
        call["structured"]["receipt"]["execs"],
        json!(["/bin/echo"]),
        "{call}"
    );
}
