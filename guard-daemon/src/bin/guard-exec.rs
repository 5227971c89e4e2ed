//! guard-exec: run a tool through guardd. The tool runs confined, on the caller's own stdin,
//! stdout and stderr, and guard-exec exits with the tool's exit code. `guard-exec hook AGENT`
//! answers an agent's tool hook instead (see `hook`).
use std::{fs, io::Read as _, path::PathBuf, process::ExitCode};

use clap::Parser;
use guard::{
    client::{self, Client},
    decision::Decision,
    protocol::{ExecReply, ExecRequest, Request},
};
use serde_json::{Map, Value};

#[path = "guard-exec/hook.rs"]
mod hook;

const EXIT_USAGE: u8 = 64;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_SOFTWARE: u8 = 70;
const EXIT_BLOCKED: u8 = 126;
const EXIT_TEMPFAIL: u8 = 75;

#[derive(Parser)]
#[command(
    name = "guard-exec",
    version,
    about = "Run a tool through guardd, confined to what its policy approves",
    after_help = "ARGUMENTS:\n  NAME=VALUE    a string argument\n  NAME:=JSON    a typed argument (number, boolean, array, object)\n\n\
EXIT STATUS:\n  the tool's own   when it ran (128+N when killed by signal N; 137 when guard stopped it)\n  \
126              blocked by policy, held for approval and not approved, or a caller guardd does not serve\n  \
75               guardd is busy, or admits no call until its audit log has room again: try later\n  \
69               guardd is unreachable: the tool did not run\n  \
70               guardd could not carry out an approved call\n  \
64               bad usage or a request guardd rejected"
)]
struct Cli {
    /// guardd's socket.
    #[arg(long, env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    /// Arguments as a JSON object ("-" reads it from stdin).
    #[arg(long, conflicts_with = "args_file")]
    args: Option<String>,
    /// Arguments as a JSON object in a file.
    #[arg(long)]
    args_file: Option<PathBuf>,
    /// The tool to run, as named in the policy.
    tool: String,
    /// NAME=VALUE or NAME:=JSON.
    pairs: Vec<String>,
}

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
    guard::cli::generate_if_asked(<Cli as clap::CommandFactory>::command);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let args = match arguments(&cli) {
        Ok(a) => a,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let socket = client::socket_path(cli.socket.clone());
    // Fail closed: no guardd, no tool.
    let mut client = match Client::connect(&socket) {
        Ok(c) => c,
        Err(e) => {
            let message = format!(
                "guardd unreachable at {}: {e}; the tool did not run",
                socket.display()
            );
            return fail(EXIT_UNAVAILABLE, message);
        }
    };
    let request = Request::Exec(ExecRequest {
        tool: cli.tool,
        args,
    });
    if let Err(e) = client.send(&request, &[0, 1, 2]) {
        let message = format!("sending to guardd: {e}; the tool did not run");
        return fail(EXIT_UNAVAILABLE, message);
    }
    loop {
        let reply = match client.recv::<ExecReply>() {
            Ok(Some(r)) => r,
            Ok(None) => {
                return fail(
                    EXIT_UNAVAILABLE,
                    "guardd closed the connection; the call, if it ran, was stopped",
                );
            }
            Err(e) => return fail(EXIT_UNAVAILABLE, e),
        };
        if let Some(code) = answer(reply) {
            return code;
        }
    }
}

/// What guard-exec does with one reply: `None` to read the next one, else its exit.
fn answer(reply: ExecReply) -> Option<ExitCode> {
    match reply {
        ExecReply::Decision(d) if d.decision == Decision::Allow => None,
        ExecReply::Pending(hold) => {
            // Held for a human: say so once, then keep waiting for the answer.
            let id = &hold.call_id;
            eprintln!(
                "guard-exec: call {id} needs approval ({}): waiting up to {} s for an admin \
                 (guardctl approve {id})",
                hold.decision, hold.timeout_s
            );
            None
        }
        ExecReply::Decision(d) => {
            let message = d.message.as_deref().unwrap_or("blocked by policy");
            // The id, even when the policy discloses no reason: an operator can look it up
            // (`guardctl show ID`).
            Some(fail(
                EXIT_BLOCKED,
                format!("{message} (call {})", d.call_id),
            ))
        }
        ExecReply::Exit(exit) => {
            if exit.stopped {
                eprintln!(
                    "guard-exec: the call did something it was not approved to do and was stopped"
                );
            } else if exit.diverged {
                eprintln!(
                    "guard-exec: the call tried something it was not approved to do; it was denied"
                );
            }
            if let Some(error) = exit.error {
                return Some(fail(EXIT_SOFTWARE, error));
            }
            let code = exit.code.and_then(|c| u8::try_from(c).ok());
            Some(ExitCode::from(code.unwrap_or(EXIT_SOFTWARE)))
        }
        ExecReply::Error(e) => {
            // guardd's refusals of the caller itself, and its "not now"s, apart from a request
            // it could not read.
            let code = if e.error.starts_with("not permitted") {
                EXIT_BLOCKED
            } else if e.error.starts_with("busy") || e.error.starts_with("not admitted") {
                EXIT_TEMPFAIL
            } else {
                EXIT_USAGE
            };
            Some(fail(code, e.error))
        }
    }
}
