//! `guard-exec hook AGENT`: guard as an agent's tool hook. Only Claude Code's `PreToolUse` so
//! far (see `guard::hook`): the hook JSON on stdin, the answer on stdout, exit 0 whatever the
//! answer (a denial is an answer, and Claude Code reads it only from a successful hook).
use std::{io::Read as _, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use guard::{
    client::{self, Client},
    decision::Decision,
    hook::{self, Answer, Options, PreToolUse},
    protocol::{CheckRequest, Reply, Request, ToolsRequest},
};
use serde_json::{Map, Value};

#[derive(Parser)]
#[command(
    name = "guard-exec hook",
    about = "Answer an agent's tool hook from guardd's policy"
)]
struct HookCli {
    #[command(subcommand)]
    agent: Agent,
}

#[derive(Subcommand)]
enum Agent {
    /// Claude Code's PreToolUse hook: Bash runs confined as the policy's shell tool.
    ClaudeCode(ClaudeCode),
}

#[derive(clap::Args)]
struct ClaudeCode {
    /// guardd's socket.
    #[arg(long, env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    /// The policy tool Bash commands run as.
    #[arg(long, default_value = "shell")]
    shell_tool: String,
    /// The name guard-mcp has in Claude Code's MCP configuration.
    #[arg(long, default_value = "guard")]
    mcp_server: String,
    /// Claude Code tools to allow without guard (a glob; repeatable), e.g. Read.
    #[arg(long)]
    allow: Vec<String>,
    /// Claude Code tools to ask the user about (a glob; repeatable).
    #[arg(long)]
    ask: Vec<String>,
}

/// guardd, as the hook asks it.
struct Socket(PathBuf);

impl Socket {
    fn request(&self, request: &Request) -> Result<Reply, String> {
        let unreachable = |e: std::io::Error| format!("guardd at {}: {e}", self.0.display());
        Client::connect(&self.0)
            .and_then(|mut c| c.request(request))
            .map_err(unreachable)
    }
}

impl hook::Guardd for Socket {
    fn tools(&mut self) -> Result<Vec<String>, String> {
        match self.request(&Request::Tools(ToolsRequest::default()))? {
            Reply::Tools(list) => Ok(list.tools.into_iter().map(|t| t.name).collect()),
            other => Err(client::unexpected(&other).to_string()),
        }
    }

    fn check(&mut self, tool: &str, args: &Map<String, Value>) -> Result<Decision, String> {
        let request = Request::Check(CheckRequest {
            tool: tool.to_owned(),
            args: args.clone(),
        });
        match self.request(&request)? {
            Reply::Decision(checked) => Ok(checked.decision.decision),
            other => Err(client::unexpected(&other).to_string()),
        }
    }
}

/// Runs `guard-exec hook ...` (argv without `guard-exec hook`).
pub fn main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = match HookCli::try_parse_from(std::iter::once("guard-exec hook".into()).chain(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 64 } else { 0 });
        }
    };
    let Agent::ClaudeCode(opts) = cli.agent;
    let answer = claude_code(&opts);
    match serde_json::to_string(&answer) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        // Exit 2 is Claude Code's "block" for a hook that has no JSON to give.
        Err(e) => {
            eprintln!("guard: {e}");
            ExitCode::from(2)
        }
    }
}

fn claude_code(opts: &ClaudeCode) -> Answer {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        return Answer::deny(format!("guard: reading the hook input: {e}"));
    }
    let input: PreToolUse = match serde_json::from_str(&text) {
        Ok(i) => i,
        Err(e) => {
            return Answer::deny(format!("guard: the hook input is not PreToolUse JSON: {e}"));
        }
    };
    let socket = client::socket_path(opts.socket.clone());
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "guard-exec".to_owned());
    let options = Options {
        shell_tool: opts.shell_tool.clone(),
        mcp_server: opts.mcp_server.clone(),
        allow: opts.allow.clone(),
        ask: opts.ask.clone(),
        guard_exec: format!(
            "{} --socket {}",
            hook::quote(&exe),
            hook::quote(&socket.to_string_lossy())
        ),
    };
    hook::answer(&input, &options, &mut Socket(socket))
}
