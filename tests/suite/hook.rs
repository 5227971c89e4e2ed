//! The Claude Code hook (`guard-exec hook claude-code`), fed the PreToolUse JSON Claude Code
//! documents for a Bash call: its answer's command, run as Claude Code runs Bash commands, runs
//! under guard (a decision row, a finished row with the receipt), and an effect the policy does
//! not allow (a write outside the workspace, into a directory anyone may write) is stopped.

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

use serde_json::{Value, json};

use super::support::{self, Guardd, TempDir, output};

/// The default policy's `shell` tool, on a test workspace, plus a rule that blocks curl.
fn policy(workspace: &Path) -> String {
    let ws = workspace.display();
    format!(
        r#"
[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{{command}}"]
cwd = "{ws}"
env = {{ HOME = "{ws}", PATH = "/usr/local/bin:/usr/bin:/bin" }}
allow_syscalls = ["chmod", "fchmodat", "fchmodat2"]
[tools.shell.args.command]
type = "string"
max_len = 100000
[tools.shell.effects]
read = ["{ws}", "/usr", "/etc", "/dev/null", "/dev/urandom"]
write = ["{ws}", "/dev/null"]
exec = ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
on_divergence = "deny"

[[rules]]
id = "no-curl"
tools = ["shell"]
arg = "command"
regex = '.*\bcurl\b.*'
action = "block"
"#
    )
}

/// A directory anyone may write: only guard can keep a call out of it.
fn open_dir(prefix: &str) -> TempDir {
    let dir = TempDir::new(prefix);
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

/// Runs the hook on `input`; returns its answer.
fn hook(guardd: &Guardd, input: &Value) -> Value {
    let mut cmd = Command::new(support::bin("guard-exec"));
    cmd.args(["hook", "claude-code", "--socket"])
        .arg(&guardd.socket)
        .args(["--allow", "Read"]);
    run_with_stdin(cmd, input)
}

/// The input Claude Code documents for a Bash PreToolUse hook.
fn bash_input(cwd: &Path, command: &str) -> Value {
    json!({
        "session_id": "abc123",
        "transcript_path": "/home/user/.claude/projects/example/00893aaf.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Write a file and print it"},
        "tool_use_id": "toolu_01ABC123"
    })
}

#[test]
fn hook_runs_claude_codes_bash_command_confined_under_guard() {
    if !support::privileged("hook_runs_claude_codes_bash_command_confined_under_guard") {
        return;
    }
    let workspace = open_dir("hook-ws");
    let elsewhere = open_dir("hook-out");
    let guardd = Guardd::start(&policy(&workspace.0));
    let made = workspace.join("made.txt");
    let leaked = elsewhere.join("leaked.txt");
    let command = format!(
        "echo made > {}; echo leak > {}; cat made.txt",
        made.display(),
        leaked.display()
    );
    let answer = hook(&guardd, &bash_input(&workspace.0, &command));
    let out = &answer["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    assert_eq!(out["permissionDecision"], "allow", "{answer}");
    assert_eq!(
        out["updatedInput"]["description"],
        "Write a file and print it"
    );
    let rewritten = out["updatedInput"]["command"].as_str().expect("command");
    assert!(rewritten.contains("guard-exec"), "{rewritten}");

    // Run as Claude Code runs a Bash command.
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", rewritten]).current_dir(&workspace.0);
    let ran = output(bash);
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "made\n",
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(made.exists(), "the workspace write did not happen");
    assert!(
        !leaked.exists(),
        "a write outside the workspace got through"
    );
    // The call's mount view is read-only there (landlock would say Permission denied).
    assert!(
        String::from_utf8_lossy(&ran.stderr).contains("Read-only file system"),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );

    // It ran under guard: its decision and its finished row with the receipt.
    let rows = guardd.audit_rows();
    let decision = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["tool"] == "shell")
        .unwrap_or_else(|| panic!("no decision row for shell: {rows:?}"));
    assert_eq!(decision["decision"]["decision"], "allow");
    let finished = rows
        .iter()
        .find(|r| r["kind"] == "finished" && r["call_id"] == decision["call_id"])
        .expect("a finished row");
    let execs = &finished["effects_observed"]["execs"];
    assert!(
        execs.as_array().is_some_and(|e| e
            .iter()
            .any(|x| x.as_str().is_some_and(|x| x.ends_with("/sh")))),
        "{finished}"
    );
    // The refused write is on the receipt: the call tried what it was not approved for.
    let seen = &finished["effects_observed"];
    assert_eq!(seen["verdict"], "diverged", "{finished}");
    assert_eq!(seen["divergences"][0]["effect"], "write_open", "{finished}");
    assert_eq!(
        seen["divergences"][0]["path"],
        leaked.display().to_string(),
        "{finished}"
    );
    assert_eq!(seen["divergences"][0]["action"], "deny", "{finished}");
}

#[test]
fn hook_denies_what_the_policy_blocks_and_tools_it_does_not_know() {
    if !support::privileged("hook_denies_what_the_policy_blocks_and_tools_it_does_not_know") {
        return;
    }
    let workspace = open_dir("hook-ws");
    let guardd = Guardd::start(&policy(&workspace.0));
    let curl = hook(
        &guardd,
        &bash_input(&workspace.0, "curl https://example.com"),
    );
    assert_eq!(curl["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(curl["hookSpecificOutput"].get("updatedInput").is_none());

    let mut write = bash_input(&workspace.0, "");
    write["tool_name"] = json!("Write");
    write["tool_input"] = json!({"file_path": "/etc/passwd", "content": "x"});
    let answer = hook(&guardd, &write);
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
    let mut read = write.clone();
    read["tool_name"] = json!("Read");
    let answer = hook(&guardd, &read);
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "allow");

    // No guardd: denied, never let through.
    let socket = guardd.socket.clone();
    drop(guardd);
    let mut gone = Command::new(support::bin("guard-exec"));
    gone.args(["hook", "claude-code", "--socket"]).arg(&socket);
    let ls = bash_input(&workspace.0, "ls");
    let answer = run_with_stdin(gone, &ls);
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny");
}

/// Starts a hook command with `input` written to its stdin (then closed) and its stdout piped.
fn spawn_with_input(cmd: &mut Command, input: &Value) -> std::process::Child {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // A hook that exits before reading its input (a flag it refuses) closes the pipe first.
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes());
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write: {e}");
    }
    child
}

/// Runs a hook command with `input` on its stdin; it must exit 0 with a JSON answer.
fn run_with_stdin(mut cmd: Command, input: &Value) -> Value {
    let child = spawn_with_input(cmd.stderr(std::process::Stdio::piped()), input);
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the hook answers JSON")
}

/// The hook of the book's `.claude/settings.json` (docs/book/src/agents/claude-code.md), as written but for the socket and
/// with the binaries on PATH, on guardd with the default policy.
#[test]
fn integrations_md_hook_recipe_works_as_written() {
    if !support::privileged("integrations_md_hook_recipe_works_as_written") {
        return;
    }
    let settings: Value = serde_json::from_str(&support::doc_block(
        "docs/book/src/agents/claude-code.md",
        "claude-code-hook",
    ))
    .expect("settings JSON");
    let entry = &settings["hooks"]["PreToolUse"][0];
    assert_eq!(entry["matcher"], "*");
    let written = entry["hooks"][0]["command"].as_str().expect("command");
    let workspace = support::default_workspace();
    let default = support::workspace().join("policies/default.toml");
    let guardd = Guardd::start(&std::fs::read_to_string(default).expect("default policy"));
    let command = written.replace(
        "/run/guard/guard.sock",
        &guardd.socket.display().to_string(),
    );
    let bin_dir = support::bin("guard-exec")
        .parent()
        .expect("bin dir")
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let recipe = |input: &Value| {
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", &command]).env("PATH", &path);
        run_with_stdin(sh, input)
    };
    // git and `chmod +x`, as agents' shells run them, in a directory of the workspace: the
    // command runs where Claude Code's shell is (its cwd, no `cd`), as the workspace's owner.
    let scratch = workspace.join(format!("hook-git-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let nobody = Some(support::NOBODY);
    std::os::unix::fs::chown(&scratch, nobody, nobody).expect("chown");
    let answer = recipe(&bash_input(
        &scratch,
        "git init -q && git config user.name agent && echo 'echo hi' > run.sh \
         && chmod +x run.sh && test -x run.sh && git add run.sh && git status --short \
         && pwd && id -u",
    ));
    let out = &answer["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow", "{answer}");
    let rewritten = out["updatedInput"]["command"].as_str().expect("command");
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", rewritten]).current_dir(&scratch);
    let ran = output(bash);
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        format!("A  run.sh\n{}\n{}\n", scratch.display(), support::NOBODY),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let made = std::fs::metadata(scratch.join("run.sh")).expect("run.sh");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), support::NOBODY);
    let _ = std::fs::remove_dir_all(&scratch);
    let rows = guardd.audit_rows();
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "finished" && r["tool"] == "shell"),
        "{rows:?}"
    );
    // Claude Code's file tools: the policy decides, by what its shell tool may do here.
    let file_tool = |tool: &str, input: Value| {
        let mut call = bash_input(workspace, "");
        call["tool_name"] = json!(tool);
        call["tool_input"] = input;
        let answer = recipe(&call);
        let out = &answer["hookSpecificOutput"];
        (
            out["permissionDecision"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            out["permissionDecisionReason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let decision = |tool: &str, input: Value| file_tool(tool, input).0;
    let readme = "/srv/agent/workspace/README.md";
    assert_eq!(decision("Read", json!({"file_path": readme})), "allow");
    assert_eq!(decision("Read", json!({"file_path": "README.md"})), "allow");
    assert_eq!(
        decision(
            "Edit",
            json!({"file_path": readme, "old_string": "a", "new_string": "b"})
        ),
        "allow"
    );
    assert_eq!(decision("Glob", json!({"pattern": "**/*.md"})), "allow");
    assert_eq!(decision("Grep", json!({"pattern": "TODO"})), "allow");
    // /etc/shadow is in /etc, which the shell reads, but not its user's to read.
    let (shadow, why) = file_tool("Read", json!({"file_path": "/etc/shadow"}));
    assert_eq!(shadow, "deny", "{why}");
    assert!(
        why.contains("/etc/shadow is not readable by nobody"),
        "{why}"
    );
    let (home, why) = file_tool("Read", json!({"file_path": "/root/.bashrc"}));
    assert_eq!(home, "deny", "{why}");
    assert!(
        why.contains("outside what the policy's `shell` tool may read"),
        "{why}"
    );
    assert_eq!(
        decision("Write", json!({"file_path": "/etc/x", "content": "x"})),
        "deny"
    );
    assert_eq!(decision("Glob", json!({"pattern": "/root/**"})), "deny");
    assert_eq!(
        decision("Grep", json!({"pattern": "x", "path": "/root"})),
        "deny"
    );
    assert_eq!(
        decision(
            "WebFetch",
            json!({"url": "https://example.com", "prompt": "x"})
        ),
        "deny"
    );
}

/// Claude Code names an MCP tool `mcp__<server>__<tool>`, and a server's name may itself hold
/// `__` (`guard__x`, or `guard..x` normalised): only a tool guard-mcp lists, that is one guardd
/// lists, is guard's and allowed to go on to guard-mcp; another server's tool is denied.
#[test]
fn hook_allows_only_guard_mcps_own_tools_under_its_prefix() {
    if !support::privileged("hook_allows_only_guard_mcps_own_tools_under_its_prefix") {
        return;
    }
    let workspace = open_dir("hook-ws");
    let guardd = Guardd::start(&policy(&workspace.0));
    let decide = |tool: &str| {
        let mut input = bash_input(&workspace.0, "");
        input["tool_name"] = json!(tool);
        input["tool_input"] = json!({"command": "id"});
        hook(&guardd, &input)["hookSpecificOutput"]["permissionDecision"].clone()
    };
    assert_eq!(decide("mcp__guard__shell"), "allow");
    // Another MCP server, named `guard__evil` (or `guard..evil`), and its `run` tool.
    assert_eq!(decide("mcp__guard__evil__run"), "deny");
    assert_eq!(decide("mcp__guard__nosuch"), "deny");
    assert_eq!(decide("mcp__guard__"), "deny");
}

/// A Claude Code tool named like a policy tool is decided by the policy, but runs inside Claude
/// Code: a call the policy holds for an admin (quarantine: a secret on its way out; escalate)
/// must not become a question to Claude Code's user, who is not guard's admin. It is denied.
#[test]
fn hook_denies_what_the_policy_holds_for_an_admin() {
    if !support::privileged("hook_denies_what_the_policy_holds_for_an_admin") {
        return;
    }
    let workspace = open_dir("hook-ws");
    let guardd = Guardd::start(&format!(
        r#"{}
[tools.WebFetch]
tier = "low"
command = ["/bin/true"]
[tools.WebFetch.args.url]
type = "string"
[tools.WebFetch.args.prompt]
type = "string"

[tools.Deploy]
tier = "high"
irreversible = true
command = ["/bin/true"]

[[rules]]
id = "dlp"
tools = ["WebFetch"]
detect = ["aws_access_key"]
action = "quarantine"
"#,
        policy(&workspace.0)
    ));
    let decide = |tool: &str, tool_input: Value| {
        let mut input = bash_input(&workspace.0, "");
        input["tool_name"] = json!(tool);
        input["tool_input"] = tool_input;
        hook(&guardd, &input)["hookSpecificOutput"]["permissionDecision"].clone()
    };
    let fetch = |url: &str| json!({"url": url, "prompt": "summarise"});
    assert_eq!(decide("WebFetch", fetch("https://docs.rs/")), "allow");
    assert_eq!(
        decide(
            "WebFetch",
            fetch("https://x.example/?k=AKIAIOSFODNN7EXAMPLE")
        ),
        "deny"
    );
    assert_eq!(decide("Deploy", json!({})), "deny");
}

/// Claude Code lets a tool call through when its hook times out or exits with anything but 0
/// or 2 (unless the hook is configured `onFailure: "block"`): the hook answers a denial within
/// its own `--timeout` when guardd does not answer (here: stopped), exits 2 when its flags are
/// wrong, and the recipe asks Claude Code to block on any failure of the hook.
#[test]
fn hook_fails_closed_when_guardd_hangs_or_it_cannot_run() {
    if !support::privileged("hook_fails_closed_when_guardd_hangs_or_it_cannot_run") {
        return;
    }
    let workspace = open_dir("hook-ws");
    let guardd = Guardd::start(&policy(&workspace.0));
    let input = bash_input(&workspace.0, "echo hi");

    let mut bad = Command::new(support::bin("guard-exec"));
    bad.args(["hook", "claude-code", "--no-such-flag"]);
    let (status, _) = run_bounded(bad, &input);
    assert_eq!(status.code(), Some(2), "Claude Code's blocking exit code");

    let pid = guardd.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid; it is continued below.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut hung = Command::new(support::bin("guard-exec"));
    hung.args(["hook", "claude-code", "--timeout", "2", "--socket"])
        .arg(&guardd.socket);
    let (status, stdout) = run_bounded(hung, &input);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(status.success(), "{status}");
    let answer: Value = serde_json::from_slice(&stdout).expect("the hook answers JSON");
    let out = &answer["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "deny", "{answer}");
    assert!(out.get("updatedInput").is_none(), "{answer}");

    let settings: Value = serde_json::from_str(&support::doc_block(
        "docs/book/src/agents/claude-code.md",
        "claude-code-hook",
    ))
    .expect("settings JSON");
    assert_eq!(
        settings["hooks"]["PreToolUse"][0]["hooks"][0]["onFailure"],
        "block"
    );
}

/// Runs a hook command with `input` on its stdin; fails the test if it has not ended within a
/// minute (a hook that hangs is let through by Claude Code).
fn run_bounded(mut cmd: Command, input: &Value) -> (std::process::ExitStatus, Vec<u8>) {
    use std::io::Read as _;
    let mut child = spawn_with_input(cmd.stderr(std::process::Stdio::null()), input);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the hook did not answer within a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut stdout)
        .expect("read");
    (status, stdout)
}

/// The book's advice (docs/book/src/agents/claude-code.md) for what outlives a shell call: a workspace with group
/// `guard-tool`, mode 1775, and `.git` and `.claude` owned by the user: the Bash command, run
/// confined, writes new files but cannot plant a git hook, edit git's config or Claude Code's
/// settings, nor move them aside to put its own in their place.
#[test]
fn hook_shell_cannot_touch_the_users_git_and_claude_files_in_a_sticky_workspace() {
    if !support::privileged(
        "hook_shell_cannot_touch_the_users_git_and_claude_files_in_a_sticky_workspace",
    ) {
        return;
    }
    let workspace = TempDir::new("hook-sticky");
    let ws = &workspace.0;
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
    std::fs::create_dir_all(ws.join(".claude")).expect("mkdir");
    std::fs::write(ws.join(".git/config"), "[core]\n").expect("write");
    std::fs::write(ws.join(".claude/settings.json"), "{}\n").expect("write");
    let chgrp = output({
        let mut c = Command::new("chgrp");
        c.arg("guard-tool").arg(ws);
        c
    });
    assert!(chgrp.status.success(), "{chgrp:?}");
    std::fs::set_permissions(ws, std::fs::Permissions::from_mode(0o1775)).expect("chmod");
    let guardd = Guardd::start(&policy(ws));
    let command = "echo new > new.txt; echo x > .git/hooks/pre-commit; \
                   echo '[core] fsmonitor = x' >> .git/config; echo '{\"hooks\":1}' > .claude/settings.json; \
                   mv .git .git-old; mv .claude .claude-old; true";
    let answer = hook(&guardd, &bash_input(ws, command));
    let rewritten = answer["hookSpecificOutput"]["updatedInput"]["command"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", &rewritten]);
    let ran = output(bash);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("new.txt")).ok().as_deref(),
        Some("new\n")
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).expect("config"),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".claude/settings.json")).expect("settings"),
        "{}\n"
    );
    assert!(!ws.join(".git-old").exists() && !ws.join(".claude-old").exists());
}

/// The policy in shadow, as an operator tries it under Claude Code before enforcing it: the
/// hook lets a command the rules block go through guard, which runs it and records what
/// enforcing would have refused, the command's write outside the workspace included.
#[test]
fn hook_in_shadow_lets_claude_code_run_what_enforcing_refuses_and_records_it() {
    if !support::privileged(
        "hook_in_shadow_lets_claude_code_run_what_enforcing_refuses_and_records_it",
    ) {
        return;
    }
    let workspace = open_dir("hook-ws");
    let elsewhere = open_dir("hook-out");
    let shadow = format!("[settings]\nenforce = \"shadow\"\n{}", policy(&workspace.0));
    let guardd = Guardd::start(&shadow);
    let leaked = elsewhere.join("leaked.txt");
    // `curl` in it: the rule blocks it when enforced.
    let command = format!("echo curl > {}; echo done", leaked.display());
    let answer = hook(&guardd, &bash_input(&workspace.0, &command));
    let out = &answer["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow", "{answer}");
    let rewritten = out["updatedInput"]["command"].as_str().expect("command");
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", rewritten]).current_dir(&workspace.0);
    let ran = output(bash);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "done\n", "{ran:?}");
    assert_eq!(std::fs::read_to_string(&leaked).expect("written"), "curl\n");

    let rows = guardd.audit_rows();
    let decision = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["tool"] == "shell")
        .unwrap_or_else(|| panic!("no decision row for shell: {rows:?}"));
    let d = &decision["decision"];
    assert_eq!(
        (
            &d["decision"],
            &d["check_name"],
            &d["metadata"]["would_block"]
        ),
        (&json!("allow"), &json!("rule:no-curl"), &json!("block")),
        "{decision}"
    );
    let finished = rows
        .iter()
        .find(|r| r["kind"] == "finished" && r["call_id"] == decision["call_id"])
        .expect("a finished row");
    assert_eq!(finished["enforce"], "shadow", "{finished}");
    let divergences = finished["effects_observed"]["divergences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        divergences.iter().any(|d| d["effect"] == "open"
            && d["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("leaked.txt"))
            && d["action"] == "allowed"
            && d["would"] == "deny"),
        "{finished}"
    );
}
