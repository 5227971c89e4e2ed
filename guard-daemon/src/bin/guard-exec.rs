//! guard-exec: run a tool through guardd. The tool runs confined, on the caller's own stdin,
//! stdout and stderr, and guard-exec exits with the tool's exit code. `guard-exec hook AGENT`
//! answers an agent's tool hook instead (see `hook`).
use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use clap::Parser;
use guard::{
    client::{self, Client},
    policy::StdinSpec,
    protocol::{
        CallOptions, CallerStdin, ExecReply, ExecRequest, ExecWith, MAX_FRAME, Reply, Request,
        ResumeMode, ResumeRequest, ToolsRequest, context::AgentContext,
    },
};
use serde_json::{Map, Value};

#[path = "guard-exec/hook.rs"]
mod hook;
#[path = "guard-exec/replies.rs"]
mod replies;

const EXIT_USAGE: u8 = 64;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_SOFTWARE: u8 = 70;
const EXIT_BLOCKED: u8 = 126;
const EXIT_TEMPFAIL: u8 = 75;
const EXIT_TERMINATED: u8 = 77;

#[derive(Parser)]
#[command(
    name = "guard-exec",
    version,
    about = "Run a tool through guardd, confined to what its policy approves",
    after_help = "ARGUMENTS:\n  NAME=VALUE    a string argument\n  NAME:=JSON    a typed argument (number, boolean, array, object)\n  \
the tool's input argument (stdin = { arg = NAME } in its policy), when not given, is read from\n  \
stdin when stdin is a pipe or a file\n\n\
EXIT STATUS:\n  the tool's own   when it ran (128+N when killed by signal N; 137 when guard stopped it)\n  \
126              blocked by policy, held for approval and not approved, or a caller guardd does not serve\n  \
77               an approver terminated the caller's session (--session): its calls are blocked until an admin clears it\n  \
75               guardd is busy (too many calls queued, this uid's connections at their limit, no place in its \
listen queue within --connect-timeout, the call not taken within --reply-timeout), or admits no call until its \
audit log has room again: the tool did not run, try later; or the call is held and --no-wait was given (its id is on stdout)\n  \
69               guardd is unreachable: the tool did not run\n  \
70               guardd could not carry out an approved call\n  \
64               bad usage or a request guardd rejected\n\n\
DOCUMENTATION:\n  guard's book (the policy language, agents, operating, the protocol): \
/usr/local/share/doc/guard/index.html,\n  or share/doc/guard under the prefix guard was installed to; \
in a checkout, docs/book (cargo xtask docs builds it)"
)]
struct Cli {
    /// guardd's socket.
    #[arg(long, env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    /// Seconds to wait for a place in guardd's listen queue; past them guard-exec exits 75
    /// (busy) and the tool did not run.
    #[arg(long, env = "GUARD_CONNECT_TIMEOUT", value_name = "SECONDS",
          value_parser = client::seconds, default_value = "10")]
    connect_timeout: Duration,
    /// Seconds guardd may take to take the call (read its request); past them guard-exec exits
    /// 75 (busy) and the tool did not run. Once guardd has it, guard-exec waits as long as the
    /// call's review, a human's approval and the call itself take, which guardd bounds.
    #[arg(long, env = "GUARD_REPLY_TIMEOUT", value_name = "SECONDS",
          value_parser = client::seconds, default_value = "30")]
    reply_timeout: Duration,
    /// Arguments as a JSON object ("-" reads it from stdin).
    #[arg(long, conflicts_with = "args_file")]
    args: Option<String>,
    /// Arguments as a JSON object in a file.
    #[arg(long)]
    args_file: Option<PathBuf>,
    /// A call held for approval does not wait: print its id and exit 75; run it later with
    /// --resume ID.
    #[arg(long)]
    no_wait: bool,
    /// Wait for the held call ID and run it as it was held (any tool and arguments given now
    /// are not used); with --no-wait, run it only if it was approved, else exit 75 and leave
    /// it held.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// The caller's session (an agent's conversation): an approver may terminate it.
    #[arg(long, env = "GUARD_SESSION")]
    session: Option<String>,
    /// What the agent is working on, for the policy's judges.
    #[arg(long, env = "GUARD_TASK")]
    task: Option<String>,
    /// What the caller is within its agent (a subagent, a role): recorded on the call, and it
    /// may only narrow what the agent may call (`[agents.NAME.labels.LABEL]`).
    #[arg(long, env = "GUARD_LABEL")]
    label: Option<String>,
    /// The model's message that came with the call, for its judges and approvers (and the
    /// admin who answers it).
    #[arg(long)]
    message: Option<String>,
    /// The tool to run, as named in the policy.
    #[arg(
        required_unless_present = "resume",
        add = clap_complete::engine::ArgValueCompleter::new(guard::client::cli::tool_names)
    )]
    tool: Option<String>,
    /// NAME=VALUE or NAME:=JSON.
    pairs: Vec<String>,
}

/// The man page's word on the hook mode, which its own parser handles before this one.
const MAN: guard::client::cli::Page = guard::client::cli::Page {
    sections: &[(
        "HOOKS",
        "guard-exec hook claude-code [--socket SOCKET] [--shell-tool NAME] [--mcp-server NAME] \
[--allow GLOB]... [--ask GLOB]... [--timeout SECONDS]

Answers Claude Code's PreToolUse hook from guardd's policy: the hook's JSON on stdin, the \
answer on stdout, exit 0 whatever the answer (Claude Code reads a denial only from a hook that \
succeeded). A Bash call is checked as the policy's shell tool (--shell-tool, default shell) \
and, allowed, rewritten to run its command through guard-exec, confined; one the policy blocks \
is denied. Calls of guard-mcp's tools (mcp__guard__NAME; --mcp-server names the server, \
default guard) that guardd lists are allowed. A Claude Code tool named like a policy tool is \
allowed only when the policy allows it. --allow and --ask (globs, repeatable) name Claude Code \
tools to allow, or to ask the user about, without guard; every other call is denied, and so \
is every call when guardd at --socket (GUARD_SOCKET) is unreachable or has not answered \
within --timeout seconds (30; keep it below the hook's timeout in Claude Code's settings, or a \
hook that times out lets the call through).

It exits 2, Claude Code's block, on bad flags or a crash. guard-exec hook claude-code --help \
lists the flags; guard's book (share/doc/guard under the install prefix, \
/usr/local/share/doc/guard by default) has the .claude/settings.json that installs it, on its \
page on Claude Code's Bash.",
    )],
    environment: &[],
};

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("guard-exec: {message}");
    ExitCode::from(code)
}

fn arguments(cli: &Cli) -> Result<Map<String, Value>, String> {
    let text = match (&cli.args, &cli.args_file) {
        (Some(a), _) if a == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("reading --args from stdin: {e}"))?;
            Some(s)
        }
        (Some(a), _) => Some(a.clone()),
        (None, Some(f)) => {
            Some(fs::read_to_string(f).map_err(|e| format!("--args-file {}: {e}", f.display()))?)
        }
        (None, None) => None,
    };
    let mut args = match text {
        Some(t) => match serde_json::from_str(&t) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("--args must be a JSON object".into()),
            Err(e) => return Err(format!("--args: {e}")),
        },
        None => Map::new(),
    };
    for pair in &cli.pairs {
        if let Some((name, json)) = pair.split_once(":=") {
            let value =
                serde_json::from_str(json).map_err(|e| format!("{name}:= takes JSON: {e}"))?;
            args.insert(name.to_owned(), value);
        } else if let Some((name, value)) = pair.split_once('=') {
            args.insert(name.to_owned(), Value::String(value.to_owned()));
        } else {
            return Err(format!("`{pair}` is not NAME=VALUE or NAME:=JSON"));
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    // `guard-exec hook ...` is the hook mode; anything else runs a tool as it always did.
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.peek().is_some_and(|a| a == "hook") {
        return hook::main(argv.skip(1));
    }
    guard::client::cli::generate_with(<Cli as clap::CommandFactory>::command, &MAN);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let mut args = match arguments(&cli) {
        Ok(a) => a,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let socket = client::socket_path(cli.socket.clone());
    let timeouts = client::Timeouts {
        connect: cli.connect_timeout,
        reply: cli.reply_timeout,
    };
    // Fail closed: no guardd, no tool.
    let mut client = match Client::connect_with(&socket, timeouts) {
        Ok(c) => c,
        Err(e) => return unreachable(&socket, &e),
    };
    if let Err(e) = input_from_stdin(&cli, &mut client, &mut args) {
        return fail(EXIT_USAGE, e);
    }
    let request = request(&cli, args);
    // The tool gets these very descriptors: whatever flags it sets on them are put back.
    let stdio = client::StdioFlags::save(&[0, 1, 2]);
    if let Some(code) = submit(&mut client, &request, cli.reply_timeout) {
        return code;
    }
    let code = replies::follow(client, &socket, cli.no_wait, timeouts);
    stdio.restore();
    code
}

/// Why there is no connection to guardd, and the exit that says it: busy (75) when its listen
/// queue stayed full, else unreachable (69).
fn unreachable(socket: &Path, e: &std::io::Error) -> ExitCode {
    if client::busy(e) {
        return fail(
            EXIT_TEMPFAIL,
            format!("{e}; the tool did not run, try again later"),
        );
    }
    // Its socket is there, and not ours to use: say so, not that guardd is away.
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        " (you are not in the socket's group: ask an admin to let you submit calls)"
    } else {
        ""
    };
    let message = format!(
        "guardd unreachable at {}: {e}{hint}; the tool did not run",
        socket.display()
    );
    fail(EXIT_UNAVAILABLE, message)
}

/// Sends the call with guard-exec's stdio and waits until guardd has taken it; `Some` exit
/// when it did not (nothing ran).
fn submit(client: &mut Client, request: &Request, within: Duration) -> Option<ExitCode> {
    if let Err(e) = client.send(request, &[0, 1, 2]) {
        // guardd refused the connection at the door, and said why before it closed it.
        if let Some(said) = client.said::<ExecReply>() {
            return replies::answer(said);
        }
        let message = format!("sending to guardd: {e}; the tool did not run");
        return Some(fail(EXIT_UNAVAILABLE, message));
    }
    match client.wait_taken(within) {
        Ok(()) => None,
        Err(e) if client::busy(&e) => Some(fail(
            EXIT_TEMPFAIL,
            format!("{e}; the tool did not run, try again later"),
        )),
        Err(e) => Some(fail(EXIT_UNAVAILABLE, format!("guardd: {e}"))),
    }
}

/// A tool's input argument (`stdin = { arg = "NAME" }` in its policy) that the command line
/// does not give is read from guard-exec's stdin, to its end, when that is a pipe or a file:
/// `printf 'x' | guard-exec write_file path=notes.md` pipes into the tool as into any program.
/// A terminal or /dev/null holds no input of the call's, so the argument stays missing and
/// guardd refuses the call (rather than run it on an empty input). The tool's listing, on the
/// connection the call then takes, says which argument that is: only a piped guard-exec asks.
fn input_from_stdin(
    cli: &Cli,
    client: &mut Client,
    args: &mut Map<String, Value>,
) -> Result<(), String> {
    use nix::sys::stat::{SFlag, fstat};
    let (Some(tool), None) = (&cli.tool, &cli.resume) else {
        return Ok(());
    };
    let piped = fstat(std::io::stdin()).is_ok_and(|st| {
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        [SFlag::S_IFIFO, SFlag::S_IFREG, SFlag::S_IFSOCK].contains(&kind)
    });
    if !piped || cli.args.as_deref() == Some("-") {
        return Ok(());
    }
    // guardd's refusal, if it refuses, is the exec's to report.
    let Ok(Reply::Tools(list)) = client.request(&Request::Tools(ToolsRequest::default())) else {
        return Ok(());
    };
    let input = list
        .tools
        .into_iter()
        .find(|t| t.name == *tool)
        .and_then(|t| match t.stdin {
            Some(StdinSpec::Arg(name)) => Some(name),
            _ => None,
        });
    let Some(name) = input.filter(|n| !args.contains_key(n)) else {
        return Ok(());
    };
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_FRAME as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {name} from stdin: {e}"))?;
    if bytes.len() > MAX_FRAME {
        return Err(format!(
            "{name} from stdin: longer than the {MAX_FRAME} bytes a call may carry"
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{name} from stdin: not UTF-8 text (it is a string argument)"))?;
    args.insert(name, Value::String(text));
    Ok(())
}

/// The request for this command line: `resume`, or `exec` with its options.
fn request(cli: &Cli, args: Map<String, Value>) -> Request {
    match &cli.resume {
        Some(call_id) => {
            if cli.tool.is_some() {
                eprintln!(
                    "guard-exec: --resume {call_id}: the call runs as it was held; the tool and \
                     arguments given now are not used"
                );
            }
            // With --no-wait, a release: it runs if approved, else stays held (exit 75).
            let mode = if cli.no_wait {
                ResumeMode::Release
            } else {
                ResumeMode::Wait
            };
            Request::Resume(ResumeRequest {
                call_id: call_id.clone(),
                mode,
            })
        }
        None => Request::ExecWith(ExecWith {
            call: ExecRequest {
                tool: cli.tool.clone().unwrap_or_default(),
                args,
            },
            options: CallOptions {
                session: cli.session.clone(),
                task: cli.task.clone(),
                label: cli.label.clone(),
                no_wait: cli.no_wait,
                // Where the caller is: it picks the call's workspace, and `{cwd}` is it.
                cwd: std::env::current_dir().ok(),
                stdin: CallerStdin::Stream,
                context: AgentContext {
                    message: cli.message.clone(),
                    history: Vec::new(),
                },
            },
        }),
    }
}
