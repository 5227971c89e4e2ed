//! Claude Code's `PreToolUse` hook (`guard-exec hook claude-code`): Claude Code hands the hook
//! each tool call it is about to make, as JSON on stdin, and takes its answer on stdout. A Bash
//! call is not merely gated: it is allowed with `updatedInput` whose command runs the original
//! one through guard-exec as the policy's shell tool, so the command itself runs confined, and
//! a subagent or an obfuscated command meets the same kernel checks. Other tools are decided by
//! the policy when it names them, passed to guard-mcp when they are guard's own MCP tools, and
//! allowed or asked only where the hook's flags say so; anything else is denied.

mod files;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use files::Access;

use crate::{call::decision::Decision, policy::glob_match, protocol::reply::Checked};

/// What Claude Code sends (the fields guard reads; the others are ignored, so that a newer
/// Claude Code with more fields still gets an answer).
#[derive(Clone, Debug, Deserialize)]
pub struct PreToolUse {
    pub hook_event_name: String,
    pub tool_name: String,
    #[serde(default)]
    pub tool_input: Map<String, Value>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// The hook's answer: `{"hookSpecificOutput": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    #[serde(rename = "hookSpecificOutput")]
    pub output: HookOutput,
}

/// The `PreToolUse` part of the answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookOutput {
    /// Always `PreToolUse`.
    pub hook_event_name: &'static str,
    pub permission_decision: Permission,
    pub permission_decision_reason: String,
    /// The tool input Claude Code runs instead of its own (Bash: the command through guard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Map<String, Value>>,
}

/// Claude Code's permission decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Allow,
    Deny,
    Ask,
}

impl Answer {
    fn new(permission: Permission, reason: impl Into<String>) -> Self {
        Self {
            output: HookOutput {
                hook_event_name: "PreToolUse",
                permission_decision: permission,
                permission_decision_reason: reason.into(),
                updated_input: None,
            },
        }
    }

    /// Refuses the call; Claude sees `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::new(Permission::Deny, reason)
    }
}

/// How the hook maps Claude Code's tools.
#[derive(Clone, Debug)]
pub struct Options {
    /// The policy tool Bash commands run as (`shell`).
    pub shell_tool: String,
    /// The MCP server name guard-mcp is configured under: `mcp__<it>__*` are guard's tools.
    pub mcp_server: String,
    /// Claude Code tools allowed without guard (globs), e.g. `Read`, `Grep`.
    pub allow: Vec<String>,
    /// Claude Code tools the user is asked about (globs).
    pub ask: Vec<String>,
    /// The command line that runs a tool through guardd, as shell words already quoted
    /// (`/usr/local/bin/guard-exec --socket /run/guard/guard.sock`).
    pub guard_exec: String,
}

/// What the hook needs of guardd.
pub trait Guardd {
    /// The names of the tools the caller may call.
    fn tools(&mut self) -> Result<Vec<String>, String>;
    /// The policy's decision on a call from `cwd`, and its plan.
    fn check(
        &mut self,
        tool: &str,
        args: &Map<String, Value>,
        cwd: Option<&Path>,
    ) -> Result<Checked, String>;
}

/// The answer to one hook call. Every failure (no guardd, an input not understood) is a
/// denial that says why: a hook that errs must not let the call through.
pub fn answer(input: &PreToolUse, opts: &Options, guardd: &mut impl Guardd) -> Answer {
    if input.hook_event_name != "PreToolUse" {
        return Answer::deny(format!(
            "guard: this hook answers PreToolUse, not {}",
            input.hook_event_name
        ));
    }
    let name = input.tool_name.as_str();
    if name == "Bash" {
        return bash(input, opts, guardd);
    }
    let tools = match guardd.tools() {
        Ok(t) => t,
        Err(e) => return Answer::deny(format!("guard: {e}; nothing runs without guardd")),
    };
    // A server's name may hold `__` itself (`guard__x`, or `guard..x` as Claude Code
    // normalises it): a tool is guard-mcp's only when guard-mcp lists it, which is when guardd
    // lists it. guard-mcp then sends the call to guardd, which decides, records and confines
    // it. Any other tool under the prefix is some other server's, mapped like the rest below.
    if let Some(tool) = name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.strip_prefix(opts.mcp_server.as_str()))
        .and_then(|rest| rest.strip_prefix("__"))
        .filter(|tool| tools.iter().any(|t| t == tool))
    {
        return Answer::new(
            Permission::Allow,
            format!("guard: {tool} runs through guard-mcp, decided by guardd"),
        );
    }
    if tools.iter().any(|t| t == name) {
        let cwd = input.cwd.as_deref().map(Path::new);
        return match decision(guardd.check(name, &input.tool_input, cwd)) {
            Ok(Decision::Allow) => Answer::new(Permission::Allow, "guard: allowed by policy"),
            // Claude Code would run the tool itself once its user said yes: the user is not
            // guard's admin, and the call would never be held. Only guardd can hold a call.
            Ok(Decision::Escalate | Decision::Quarantine) => Answer::deny(format!(
                "guard: the policy holds this call for an admin; call it as \
                 mcp__{}__{name} (guard-mcp), where guardd holds it",
                opts.mcp_server
            )),
            Ok(Decision::Block) => Answer::deny("guard: blocked by policy"),
            Err(e) => Answer::deny(format!("guard: {e}")),
        };
    }
    // Claude Code's file tools are the policy's to decide, whatever --allow says.
    if let Some(answer) = files::answer(input, opts, guardd) {
        return answer;
    }
    if opts.allow.iter().any(|g| glob_match(g, name)) {
        return Answer::new(Permission::Allow, "guard: allowed by the hook's --allow");
    }
    if opts.ask.iter().any(|g| glob_match(g, name)) {
        return Answer::new(Permission::Ask, "guard: the hook's --ask wants a human");
    }
    Answer::deny(format!(
        "guard: {name} is not a tool guard's policy lets this agent use"
    ))
}

/// Bash: the command, as the policy's shell tool, through guard-exec.
fn bash(input: &PreToolUse, opts: &Options, guardd: &mut impl Guardd) -> Answer {
    let Some(command) = input.tool_input.get("command").and_then(Value::as_str) else {
        return Answer::deny("guard: a Bash call without a `command` string");
    };
    let mut args = Map::new();
    args.insert("command".into(), Value::String(command.to_owned()));
    let cwd = input.cwd.as_deref().map(Path::new);
    match decision(guardd.check(&opts.shell_tool, &args, cwd)) {
        // A held call is held by guardd when it runs: guard-exec waits for the admin.
        Ok(Decision::Allow | Decision::Escalate | Decision::Quarantine) => {}
        Ok(Decision::Block) => return Answer::deny("guard: blocked by policy"),
        Err(e) => return Answer::deny(format!("guard: {e}; nothing runs without guardd")),
    }
    let json = Value::Object(args).to_string();
    let mut updated = input.tool_input.clone();
    updated.insert(
        "command".into(),
        Value::String(format!(
            "{} --args {} {}",
            opts.guard_exec,
            quote(&json),
            quote(&opts.shell_tool)
        )),
    );
    let mut answer = Answer::new(
        Permission::Allow,
        format!(
            "guard: runs confined as the policy's `{}` tool",
            opts.shell_tool
        ),
    );
    answer.output.updated_input = Some(updated);
    answer
}

/// The decision of a check.
fn decision(checked: Result<Checked, String>) -> Result<Decision, String> {
    checked.map(|c| c.decision.decision)
}

/// `s` as one word of a POSIX shell: single-quoted, each `'` as `'\''`.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{
        decision::{DecisionRow, RowMetadata},
        plan::{Confinement, Effects, LaunchPlan},
    };

    /// guardd as the tests want it: a decision for every check, and for an allowed one a plan
    /// that reads `/w` and `/usr` and writes `/w/out`.
    struct Fake(Result<Decision, String>);

    impl Guardd for Fake {
        fn tools(&mut self) -> Result<Vec<String>, String> {
            self.0.clone().map(|_| vec!["read_file".to_owned()])
        }
        fn check(
            &mut self,
            _: &str,
            _: &Map<String, Value>,
            _: Option<&Path>,
        ) -> Result<Checked, String> {
            let decision = self.0.clone()?;
            let plan = (decision == Decision::Allow).then(|| LaunchPlan {
                tool: "shell".into(),
                argv: vec!["/bin/sh".into()],
                effects: Effects {
                    read: vec!["/w".into(), "/usr".into()],
                    write: vec!["/w/out".into()],
                    ..Effects::default()
                },
                confinement: Confinement::default(),
                enforce: Default::default(),
            });
            Ok(Checked {
                decision: DecisionRow {
                    check_name: "t".into(),
                    decision,
                    reason: String::new(),
                    metadata: RowMetadata::default(),
                },
                plan,
            })
        }
    }

    fn input(tool: &str, tool_input: Value) -> PreToolUse {
        serde_json::from_value(serde_json::json!({
            "session_id": "s", "transcript_path": "/t", "cwd": "/w", "permission_mode": "default",
            "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input,
            "tool_use_id": "toolu_1"
        }))
        .unwrap()
    }

    fn opts() -> Options {
        Options {
            shell_tool: "shell".into(),
            mcp_server: "guard".into(),
            allow: vec!["Gr*".into(), "Read".into()],
            ask: vec!["Web*".into()],
            guard_exec: "/g/guard-exec".into(),
        }
    }

    #[test]
    fn bash_runs_through_guard_exec_and_the_rest_is_mapped_or_denied() {
        let cmd = serde_json::json!({"command": "echo 'it''s' > x", "description": "d"});
        let a = answer(&input("Bash", cmd), &opts(), &mut Fake(Ok(Decision::Allow)));
        assert_eq!(a.output.permission_decision, Permission::Allow);
        let updated = a.output.updated_input.unwrap();
        assert_eq!(updated["description"], "d");
        let line = updated["command"].as_str().unwrap();
        assert!(line.starts_with("/g/guard-exec --args '"), "{line}");
        assert!(line.ends_with(" 'shell'"), "{line}");
        let blocked = Fake(Ok(Decision::Block));
        let a = answer(&input("Bash", cmd_of("rm")), &opts(), &mut { blocked });
        assert_eq!(a.output.permission_decision, Permission::Deny);
        let gone = Fake(Err("guardd unreachable".into()));
        let a = answer(&input("Bash", cmd_of("ls")), &opts(), &mut { gone });
        assert_eq!(a.output.permission_decision, Permission::Deny);

        let mut ok = Fake(Ok(Decision::Allow));
        let decide = |tool: &str, ok: &mut Fake| {
            answer(&input(tool, serde_json::json!({})), &opts(), ok)
                .output
                .permission_decision
        };
        assert_eq!(decide("mcp__guard__read_file", &mut ok), Permission::Allow);
        assert_eq!(decide("read_file", &mut ok), Permission::Allow);
        assert_eq!(decide("WebFetch", &mut ok), Permission::Ask);
        assert_eq!(decide("TodoWrite", &mut ok), Permission::Deny);
        assert_eq!(decide("mcp__other__x", &mut ok), Permission::Deny);
        assert_eq!(
            decide("mcp__guard__x__read_file", &mut ok),
            Permission::Deny
        );
        let mut held = Fake(Ok(Decision::Escalate));
        assert_eq!(decide("read_file", &mut held), Permission::Deny);
    }

    #[test]
    fn file_tools_are_decided_by_the_shell_tool_s_effects_whatever_allow_says() {
        let decide = |tool: &str, v: Value, guardd: &mut Fake| {
            let a = answer(&input(tool, v), &opts(), guardd);
            (
                a.output.permission_decision,
                a.output.permission_decision_reason,
            )
        };
        let mut ok = Fake(Ok(Decision::Allow));
        let read = |p: &str| serde_json::json!({ "file_path": p });
        // `--allow Read` and `--allow Gr*` allow nothing on their own.
        assert_eq!(
            decide("Read", read("/w/a.rs"), &mut ok).0,
            Permission::Allow
        );
        assert_eq!(decide("Read", read("a.rs"), &mut ok).0, Permission::Allow);
        assert_eq!(decide("Read", read("/usr/x"), &mut ok).0, Permission::Allow);
        let (p, why) = decide("Read", read("/etc/shadow"), &mut ok);
        assert_eq!(p, Permission::Deny);
        assert!(why.contains("/etc/shadow is outside"), "{why}");
        assert_eq!(
            decide("Read", read("/w/../etc/x"), &mut ok).0,
            Permission::Deny
        );
        // Writes: within the write effects only; what may be written may be read.
        assert_eq!(
            decide("Edit", read("/w/out/f"), &mut ok).0,
            Permission::Allow
        );
        assert_eq!(
            decide("Write", read("/w/a.rs"), &mut ok).0,
            Permission::Deny
        );
        assert_eq!(
            decide("MultiEdit", read("/usr/x"), &mut ok).0,
            Permission::Deny
        );
        assert_eq!(
            decide("Read", read("/w/out/f"), &mut ok).0,
            Permission::Allow
        );
        let nb = serde_json::json!({"notebook_path": "/w/out/n.ipynb", "new_source": "x"});
        assert_eq!(decide("NotebookEdit", nb, &mut ok).0, Permission::Allow);
        // Glob and Grep: their path, else the cwd; Glob from where its pattern starts.
        let grep = serde_json::json!({"pattern": "/etc/passwd"});
        assert_eq!(decide("Grep", grep, &mut ok).0, Permission::Allow);
        let grep = serde_json::json!({"pattern": "x", "path": "/etc"});
        assert_eq!(decide("Grep", grep, &mut ok).0, Permission::Deny);
        let glob = serde_json::json!({"pattern": "/etc/**"});
        assert_eq!(decide("Glob", glob, &mut ok).0, Permission::Deny);
        let glob = serde_json::json!({"pattern": "src/**/*.rs"});
        assert_eq!(decide("Glob", glob, &mut ok).0, Permission::Allow);
        // No path, a blocked shell tool, no guardd: denied.
        assert_eq!(
            decide("Read", serde_json::json!({}), &mut ok).0,
            Permission::Deny
        );
        let mut blocked = Fake(Ok(Decision::Block));
        assert_eq!(
            decide("Read", read("/w/a"), &mut blocked).0,
            Permission::Deny
        );
        let mut gone = Fake(Err("unreachable".into()));
        assert_eq!(decide("Read", read("/w/a"), &mut gone).0, Permission::Deny);
        // --ask still asks about what the policy allows, and never about what it denies.
        let mut asking = opts();
        asking.ask = vec!["Edit".into()];
        let edit = |p: &str| input("Edit", serde_json::json!({ "file_path": p }));
        let a = answer(&edit("/w/out/f"), &asking, &mut ok);
        assert_eq!(a.output.permission_decision, Permission::Ask);
        let a = answer(&edit("/etc/passwd"), &asking, &mut ok);
        assert_eq!(a.output.permission_decision, Permission::Deny);
    }

    fn cmd_of(c: &str) -> Value {
        serde_json::json!({ "command": c })
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
    }
}
