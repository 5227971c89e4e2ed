//! guardctl: the operator's command line for guard.
mod approve;
mod ask;
mod audit;
mod history;
mod live;
mod policy;
mod project;
mod show;
mod suggest;
mod term;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use guard::protocol::DenyRequest;

#[derive(Parser)]
#[command(
    name = "guardctl",
    version,
    about = "Inspect and operate guard",
    after_help = guard::client::cli::BOOK_HELP
)]
struct Cli {
    /// guardd's socket (for status and events).
    #[arg(long, global = true, env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Decide one tool call against a policy without running anything.
    Check {
        /// Policy file or directory [default: /etc/guard/policy.toml, else /etc/guard/policies/]
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The tool's name.
        #[arg(add = clap_complete::engine::ArgValueCompleter::new(guard::client::cli::tool_names))]
        tool: String,
        /// The call's arguments as a JSON object.
        #[arg(long)]
        args: Option<String>,
        /// The caller's working directory, which picks the workspace [default: the current one]
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Print the decision row (and plan, if any) as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Why a call of yours was refused or held (its reason, which the agent was not told):
    /// guardd keeps the last 1024 such calls; an admin may ask of anyone's.
    Why {
        /// The call's id (guard-exec and guard-mcp name it).
        call_id: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// guardd's state: layers, policy, running calls.
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Enforcement events: live with --follow (admins), else recent history from the audit log.
    Events {
        /// Tail live events.
        #[arg(long, short)]
        follow: bool,
        /// One JSON object per line, for jq.
        #[arg(long)]
        json: bool,
        /// Only events of this kind, live or in history (`refused`, a call the full audit log
        /// did not admit, and `lagged` are live only).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(guard::bus::KINDS))]
        kind: Option<String>,
        /// Only tools matching this glob.
        #[arg(long, add = clap_complete::engine::ArgValueCompleter::new(guard::client::cli::tool_names))]
        tool: Option<String>,
        /// Only decisions (and holds) of this kind.
        #[arg(long, value_parser = ["allow", "escalate", "quarantine", "block"])]
        decision: Option<String>,
        /// Only events newer than this (e.g. 90s, 15m, 2h, 1d); history only.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// Only this call.
        #[arg(long)]
        call: Option<String>,
        /// The audit log to read history from [default: the one guardd writes, else /var/lib/guard/audit.jsonl]
        #[arg(long)]
        audit: Option<PathBuf>,
    },
    /// Recent calls from the audit log, or the running ones.
    Calls {
        /// Only the calls running now (asks guardd).
        #[arg(long)]
        running: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// The audit log [default: the one guardd writes, else /var/lib/guard/audit.jsonl]
        #[arg(long)]
        audit: Option<PathBuf>,
    },
    /// The calls waiting for an admin's approval (escalate, quarantine); admins only.
    Pending {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Let a held call run, exactly as held; admins only. Shows the call and the digest the
    /// approval binds to.
    Approve {
        /// The call's id (as `pending` shows it).
        call_id: String,
        /// Approve only if the held call has this digest (as `pending` shows it); by default,
        /// the digest of the call as it is shown now.
        #[arg(long)]
        digest: Option<String>,
        /// guardd's answer as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The sessions an approver terminated, whose calls are blocked; admins only.
    Sessions {
        /// Let this session submit calls again.
        #[arg(long, value_name = "SESSION")]
        clear: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The policy's agents, in the order they are tried, with the calls each made, had
    /// blocked and has running since guardd started; admins only.
    Agents {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Refuse a held call; admins only. The caller gets 126 and the reason.
    Deny {
        call_id: String,
        /// Told to the caller and written to the audit log.
        #[arg(long)]
        reason: Option<String>,
        /// Terminate the caller's session and its agent's too: their later calls are blocked
        /// until `guardctl sessions --clear` (inspect_ai's `terminate` choice).
        #[arg(long)]
        terminate: bool,
        /// guardd's answer as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Load guardd's policy file again (admins only); a bad file changes nothing and its errors
    /// are printed. `kill -HUP` does the same.
    Reload {
        /// guardd's answer as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// One call from the audit log: its decision, caller, program, sandbox, receipt (effects
    /// and divergences) and review.
    Show {
        /// The call's id (as guard-exec, `calls` and `events` show it).
        call_id: String,
        /// One JSON object (pretty-printed) instead of lines for people.
        #[arg(long)]
        json: bool,
        /// The audit log [default: the one guardd writes, else /var/lib/guard/audit.jsonl]
        #[arg(long)]
        audit: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Check a policy file or directory, printing every error.
    Check {
        /// The policy [default: /etc/guard/policy.toml, else /etc/guard/policies/]
        path: Option<PathBuf>,
        /// Also merge the project policy (`.guard/policy.toml`) of the workspace that holds
        /// DIR, and show the merged result or every error of that file.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// One JSON object: `valid`, and the counts or every error.
        #[arg(long)]
        json: bool,
    },
    /// The narrowest effects that would have let every call seen conform, per tool, from the
    /// receipts in the audit log (files only where guardd ran with --trace-syscalls). Never
    /// `/`, a top-level directory, a home or guard's own places: what calls used there is
    /// said in a comment, not proposed.
    Suggest {
        /// Only the tools this glob names.
        #[arg(long, default_value = "*")]
        tool: String,
        /// Only calls newer than this (e.g. 90s, 15m, 2h, 1d).
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// The audit log [default: the one guardd writes, else /var/lib/guard/audit.jsonl]
        #[arg(long)]
        audit: Option<PathBuf>,
        /// Only what changes against this policy file or directory (`-` what no call needed,
        /// `+` what calls needed that it does not name).
        #[arg(long, value_name = "POLICY")]
        diff: Option<PathBuf>,
    },
}

/// `guardctl policy ...`.
fn policy_command(command: PolicyCommand, socket: Option<PathBuf>) -> ExitCode {
    match command {
        PolicyCommand::Check {
            path,
            workspace,
            json,
        } => project::policy_check(path, workspace, json),
        PolicyCommand::Suggest {
            tool,
            since,
            audit,
            diff,
        } => {
            let audit = ask::audit_path(socket.clone(), audit);
            let fence = suggest::Fence::new(&audit, &guard::client::socket_path(socket));
            suggest::run(&audit, &tool, since, diff.as_deref(), &fence)
        }
    }
}

/// `90s`, `15m`, `2h`, `1d`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 90s, 15m, 2h or 1d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}`: use s, m, h or d"
            ));
        }
    };
    Ok(Duration::from_secs(secs))
}

/// Prints `value` as one JSON line.
fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("guardctl: {e}"),
    }
}

/// `guardctl events | head`: a closed pipe ends guardctl quietly, as it does any filter, rather
/// than a panic in println! (exit 101).
fn quiet_on_a_closed_pipe() {
    // SAFETY: resetting one signal's disposition, before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// `guardctl check`: exits as guard-exec would end, 0 allowed, 75 held for a human, 126
/// blocked.
fn check(
    p: Option<PathBuf>,
    tool: &str,
    args: Option<&str>,
    cwd: Option<PathBuf>,
    json: bool,
) -> ExitCode {
    let p = p.unwrap_or_else(policy::default_policy_path);
    match policy::check_call(&p, tool, args, cwd, json) {
        Ok(guard::call::decision::Decision::Allow) => ExitCode::SUCCESS,
        Ok(guard::call::decision::Decision::Block) => ExitCode::from(126),
        Ok(_) => ExitCode::from(75),
        Err(e) => {
            term::say_err_lines!("guardctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    quiet_on_a_closed_pipe();
    let page = guard::client::cli::Page {
        sections: &[],
        environment: &[(
            "NO_COLOR",
            "when set, events are not coloured, even on a terminal",
        )],
    };
    guard::client::cli::generate_with(<Cli as clap::CommandFactory>::command, &page);
    let cli = Cli::parse();
    match cli.command {
        Command::Policy { command } => policy_command(command, cli.socket),
        Command::Check {
            policy: p,
            tool,
            args,
            cwd,
            json,
        } => check(p, &tool, args.as_deref(), cwd, json),
        Command::Audit { command } => audit::run(command, cli.socket),
        Command::Why { call_id, json } => ask::why(cli.socket, &call_id, json),
        Command::Status { json } => live::status(cli.socket, json),
        Command::Events {
            follow,
            json,
            kind,
            tool,
            decision,
            since,
            call,
            audit,
        } => {
            let filter = live::Filter {
                kind,
                tool,
                decision,
                call,
                since,
            };
            let audit = ask::audit_path(cli.socket.clone(), audit);
            live::events(cli.socket, &audit, follow, json, filter)
        }
        Command::Calls {
            running,
            json,
            audit,
        } => {
            let audit = ask::audit_path(cli.socket.clone(), audit);
            history::calls(cli.socket, &audit, running, json)
        }
        Command::Show {
            call_id,
            json,
            audit,
        } => show::show(&ask::audit_path(cli.socket, audit), &call_id, json),
        Command::Pending { json } => approve::pending(cli.socket, json),
        Command::Reload { json } => approve::reload(cli.socket, json),
        Command::Approve {
            call_id,
            digest,
            json,
        } => approve::approve(cli.socket, &call_id, digest, json),
        Command::Sessions { clear, json } => approve::sessions(cli.socket, clear, json),
        Command::Agents { json } => approve::agents(cli.socket, json),
        Command::Deny {
            call_id,
            reason,
            terminate,
            json,
        } => approve::deny(
            cli.socket,
            DenyRequest {
                call_id,
                reason,
                terminate,
            },
            json,
        ),
    }
}
