//! `guard-exec hook AGENT`: guard as an agent's tool hook. Only Claude Code's `PreToolUse` so
//! far (see `guard::client::hook`): the hook JSON on stdin, the answer on stdout, exit 0 whatever the
//! answer (a denial is an answer, and Claude Code reads it only from a successful hook).
//! Claude Code lets the call through when its hook times out or exits with anything but 0 or 2,
//! so the hook never does: it answers a denial when guardd has not answered within
//! `--timeout`, and exits 2 (Claude Code's "block") on bad flags or a panic.
use std::{
    io::{Read as _, Write as _},
    path::PathBuf,
    process::ExitCode,
    sync::Mutex,
    time::Duration,
};

use clap::{Parser, Subcommand};
use guard::{
    client::{
        self, Client,
        hook::{self, Answer, Options, PreToolUse},
    },
    protocol::{CheckRequest, Reply, Request, ToolsRequest, reply::Checked},
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
    /// Claude Code tools to allow without guard (a glob; repeatable), e.g. TodoWrite; its file
    /// tools (Read, Edit...) are the policy's to decide whatever this says.
    #[arg(long)]
    allow: Vec<String>,
    /// Claude Code tools to ask the user about (a glob; repeatable).
    #[arg(long)]
    ask: Vec<String>,
    /// Seconds to wait for guardd before denying the call; keep it below the hook's timeout
    /// in Claude Code's settings (a hook that times out lets the call through).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
}

/// Whether an answer was printed: the first one stands (the call's, or the timeout's).
static ANSWERED: Mutex<bool> = Mutex::new(false);

/// Prints `answer` unless one was printed already; false when it could not be printed.
fn emit(answer: &Answer) -> bool {
    let mut answered = ANSWERED.lock().unwrap_or_else(|p| p.into_inner());
    if *answered {
        return true;
    }
    *answered = true;
    let Ok(line) = serde_json::to_string(answer) else {
        return false;
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
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

    fn check(
        &mut self,
        tool: &str,
        args: &Map<String, Value>,
        cwd: Option<&std::path::Path>,
    ) -> Result<Checked, String> {
        let request = Request::Check(CheckRequest {
            tool: tool.to_owned(),
            args: args.clone(),
            cwd: cwd.map(std::path::Path::to_path_buf),
        });
        match self.request(&request)? {
            Reply::Decision(checked) => Ok(*checked),
            other => Err(client::unexpected(&other).to_string()),
        }
    }
}

/// Runs `guard-exec hook ...` (argv without `guard-exec hook`).
pub fn main(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    // Exit 2 is Claude Code's "block"; a panic's exit code would let the call through.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("guard: {info}");
        std::process::exit(2);
    }));
    let cli = match HookCli::try_parse_from(std::iter::once("guard-exec hook".into()).chain(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let Agent::ClaudeCode(opts) = cli.agent;
    let timeout = Duration::from_secs(opts.timeout);
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        let answer = Answer::deny(format!(
            "guard: guardd did not answer within {} s; nothing runs without its decision",
            timeout.as_secs()
        ));
        std::process::exit(if emit(&answer) { 0 } else { 2 });
    });
    let answer = claude_code(&opts);
    if emit(&answer) {
        ExitCode::SUCCESS
    } else {
        eprintln!("guard: could not print the hook's answer");
        ExitCode::from(2)
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
