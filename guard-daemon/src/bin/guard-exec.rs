//! guard-exec: run a tool through guardd. The tool runs confined, on the caller's own stdin,
//! stdout and stderr, and guard-exec exits with the tool's exit code.
use std::{fs, io::Read as _, path::PathBuf, process::ExitCode};

use clap::Parser;
use guard::client::{self, Client};
use serde_json::{Map, Value, json};

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
            return fail(
                EXIT_UNAVAILABLE,
                format!(
                    "guardd unreachable at {}: {e}; the tool did not run",
                    socket.display()
                ),
            );
        }
    };
    if let Err(e) = client.send(
        "exec",
        json!({ "tool": cli.tool, "args": args }),
        &[0, 1, 2],
    ) {
        return fail(
            EXIT_UNAVAILABLE,
            format!("sending to guardd: {e}; the tool did not run"),
        );
    }
    loop {
        let reply = match client.recv() {
            Ok(Some(r)) => r,
            Ok(None) => {
                return fail(
                    EXIT_UNAVAILABLE,
                    "guardd closed the connection; the call, if it ran, was stopped",
                );
            }
            Err(e) => return fail(EXIT_UNAVAILABLE, e),
        };
        match reply["type"].as_str() {
            Some("decision") if reply["decision"] == "allow" => continue,
            Some("pending") => {
                // Held for a human: say so once, then keep waiting for the answer.
                let id = reply["call_id"].as_str().unwrap_or("?");
                eprintln!(
                    "guard-exec: call {id} needs approval ({}): waiting up to {} s for an admin \
                     (guardctl approve {id})",
                    reply["decision"].as_str().unwrap_or("escalate"),
                    reply["timeout_s"]
                );
                continue;
            }
            Some("decision") => {
                let message = reply["message"].as_str().unwrap_or("blocked by policy");
                // The id, even when the policy discloses no reason: an operator can look it up
                // (`guardctl show ID`).
                return match reply["call_id"].as_str() {
                    Some(id) => fail(EXIT_BLOCKED, format!("{message} (call {id})")),
                    None => fail(EXIT_BLOCKED, message),
                };
            }
            Some("exit") => {
                if reply["stopped"] == true {
                    eprintln!(
                        "guard-exec: the call did something it was not approved to do and was stopped"
                    );
                } else if reply["diverged"] == true {
                    eprintln!(
                        "guard-exec: the call tried something it was not approved to do; it was denied"
                    );
                }
                if let Some(error) = reply["error"].as_str() {
                    return fail(EXIT_SOFTWARE, error);
                }
                let code = reply["code"].as_i64().unwrap_or(i64::from(EXIT_SOFTWARE));
                return ExitCode::from(u8::try_from(code).unwrap_or(EXIT_SOFTWARE));
            }
            Some("error") => {
                let error = reply["error"].as_str().unwrap_or("rejected");
                // guardd's refusals of the caller itself, and its "not now"s, apart from a
                // request it could not read.
                let code = if error.starts_with("not permitted") {
                    EXIT_BLOCKED
                } else if error.starts_with("busy") || error.starts_with("not admitted") {
                    EXIT_TEMPFAIL
                } else {
                    EXIT_USAGE
                };
                return fail(code, error);
            }
            _ => {
                return fail(
                    EXIT_SOFTWARE,
                    format!("unexpected reply from guardd: {reply}"),
                );
            }
        }
    }
}
