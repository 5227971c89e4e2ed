//! The admin's requests: `guardctl pending`, `approve` and `deny` answer the calls the policy
//! held for a human (escalate, quarantine); `guardctl reload` puts an edited policy in force.

use std::{path::PathBuf, process::ExitCode};

use guard::{
    client,
    protocol::{
        AgentsRequest, ApproveRequest, ClearSessionRequest, DenyRequest, PendingRequest,
        ReloadRequest, Reply, Request, SessionsRequest,
    },
};

use crate::{
    print_json,
    term::{say, say_err},
};

/// Sends one admin request and returns what comes back; an error is printed, with its exit.
fn ask(socket: Option<PathBuf>, request: &Request) -> Result<Reply, ExitCode> {
    let socket = client::socket_path(socket);
    let mut client = crate::ask::connect(&socket)?;
    client.request(request).map_err(|e| crate::ask::failed(&e))
}

/// A reply other than the one the request expects.
fn unexpected(reply: &Reply) -> ExitCode {
    say_err!("guardctl: {}", client::unexpected(reply));
    ExitCode::FAILURE
}

/// Lists the held calls.
pub fn pending(socket: Option<PathBuf>, as_json: bool) -> ExitCode {
    let calls = match ask(socket, &Request::Pending(PendingRequest {})) {
        Ok(Reply::Pending(p)) => p.calls,
        Ok(other) => return unexpected(&other),
        Err(code) => return code,
    };
    for call in &calls {
        if as_json {
            print_json(call);
            continue;
        }
        let state = match call.approved_by {
            Some(by) => format!("approved by uid {by}, waiting for its caller"),
            None => "waiting for an answer".to_owned(),
        };
        // Each line escaped on its own: a line break of the call's is shown, not made.
        say!(
            "{:<16} {:<16} {:<10} uid {:<6} since {}",
            call.call_id,
            call.tool,
            call.decision.as_str(),
            call.uid,
            call.since
        );
        say!("  {}", call.reason);
        say!("  program {}", call.program);
        say!("  args {}", call.args);
        if let Some(input) = &call.input {
            say_input(input);
        }
        if let Some(c) = &call.conversation {
            say_conversation(c);
        }
        say!("  {} ({state})", call.digest);
    }
    if calls.is_empty() && !as_json {
        say!("no call is waiting for approval");
    }
    ExitCode::SUCCESS
}

/// What the agent said with a held call: its message, then its history, each on a line of its
/// own, escaped.
fn say_conversation(c: &serde_json::Value) {
    if let Some(m) = c["message"].as_str() {
        say!("  message {m}");
    }
    for turn in c["history"].as_array().into_iter().flatten() {
        let (role, content) = (turn["role"].as_str(), turn["content"].as_str());
        say!(
            "  history {}: {}",
            role.unwrap_or("?"),
            content.unwrap_or_default()
        );
    }
}

/// The input a held call's tool will read (`stdin = "caller"`, read when it was held): its
/// size and digest, then its text, escaped (a line break shows as `\u{a}`, on one line).
fn say_input(input: &guard::approval::input::Shown) {
    let part = if input.truncated {
        format!(", the first {} shown", input.text.len())
    } else {
        String::new()
    };
    say!("  input {} bytes{part}, {}", input.bytes, input.sha256);
    say!("    {}", input.text);
}

/// Approves a held call, bound to `digest`, or else to the digest of the call as it is
/// shown now (printed first, with what the call runs).
pub fn approve(
    socket: Option<PathBuf>,
    call_id: &str,
    digest: Option<String>,
    as_json: bool,
) -> ExitCode {
    let digest = match digest {
        Some(d) => d,
        None => {
            let calls = match ask(socket.clone(), &Request::Pending(PendingRequest {})) {
                Ok(Reply::Pending(p)) => p.calls,
                Ok(other) => return unexpected(&other),
                Err(code) => return code,
            };
            let Some(call) = calls.into_iter().find(|c| c.call_id == call_id) else {
                say_err!("guardctl: no call {call_id} is waiting for approval");
                return ExitCode::FAILURE;
            };
            if !as_json {
                say!(
                    "approving {} ({}, uid {}): program {}, args {}",
                    call.call_id,
                    call.tool,
                    call.uid,
                    call.program,
                    call.args
                );
                if let Some(input) = &call.input {
                    say_input(input);
                }
                say!("  {}", call.digest);
            }
            call.digest
        }
    };
    let request = Request::Approve(ApproveRequest {
        call_id: call_id.to_owned(),
        digest: Some(digest),
    });
    answered(ask(socket, &request), as_json)
}

/// Lists the terminated sessions, or clears one.
pub fn sessions(socket: Option<PathBuf>, clear: Option<String>, as_json: bool) -> ExitCode {
    if let Some(session) = clear {
        return match ask(
            socket,
            &Request::ClearSession(ClearSessionRequest { session }),
        ) {
            Ok(Reply::Cleared(c)) if as_json => {
                print_json(&c);
                ExitCode::SUCCESS
            }
            Ok(Reply::Cleared(c)) => {
                say!("session {} may submit calls again", c.session);
                ExitCode::SUCCESS
            }
            Ok(other) => unexpected(&other),
            Err(code) => code,
        };
    }
    let list = match ask(socket, &Request::Sessions(SessionsRequest {})) {
        Ok(Reply::Sessions(s)) => s.sessions,
        Ok(other) => return unexpected(&other),
        Err(code) => return code,
    };
    for t in &list {
        if as_json {
            print_json(t);
        } else {
            let whose = t.uid.map_or("every uid".to_owned(), |u| format!("uid {u}"));
            say!(
                "{:<24} {whose:<10} terminated by {} (call {}) since {}",
                t.session,
                t.by,
                t.call_id,
                t.since
            );
        }
    }
    if list.is_empty() && !as_json {
        say!("no session is terminated");
    }
    ExitCode::SUCCESS
}

/// Lists the policy's agents and their counts.
pub fn agents(socket: Option<PathBuf>, as_json: bool) -> ExitCode {
    let list = match ask(socket, &Request::Agents(AgentsRequest {})) {
        Ok(Reply::Agents(a)) => a.agents,
        Ok(other) => return unexpected(&other),
        Err(code) => return code,
    };
    for a in &list {
        if as_json {
            print_json(a);
        } else {
            let c = &a.counts;
            let all = || "every".to_owned();
            let bounds = [
                a.max_tier
                    .map_or_else(all, |t| format!("{t:?}").to_lowercase()),
                a.max_running.map_or_else(all, |n| n.to_string()),
                a.rate.clone().unwrap_or_else(all),
            ];
            let tools = if a.tools.is_empty() {
                "every tool".to_owned()
            } else {
                a.tools.join(", ")
            };
            say!(
                "{:<16} calls {:<6} blocked {:<6} running {:<4} uids [{}] cgroups [{}] tools \
                 [{tools}] max_tier {} max_running {} rate {}",
                a.name,
                c.calls,
                c.blocked,
                c.running,
                a.uids.join(", "),
                a.cgroups.join(", "),
                bounds[0],
                bounds[1],
                bounds[2]
            );
        }
    }
    if list.is_empty() && !as_json {
        say!("the policy names no agent: every permitted caller is served as itself");
    }
    ExitCode::SUCCESS
}

/// Denies a held call.
pub fn deny(socket: Option<PathBuf>, request: DenyRequest, as_json: bool) -> ExitCode {
    answered(ask(socket, &Request::Deny(request)), as_json)
}

/// Prints guardd's answer to `approve` or `deny`.
fn answered(reply: Result<Reply, ExitCode>, as_json: bool) -> ExitCode {
    match reply {
        Ok(Reply::Resolved(resolved)) if as_json => {
            print_json(&resolved);
            ExitCode::SUCCESS
        }
        Ok(Reply::Resolved(resolved)) => {
            let done = if resolved.approved {
                "approved"
            } else {
                "denied"
            };
            say!("{} {done} ({})", resolved.call_id, resolved.digest);
            ExitCode::SUCCESS
        }
        Ok(other) => unexpected(&other),
        Err(code) => code,
    }
}

/// Asks guardd to load its policy file again.
pub fn reload(socket: Option<PathBuf>, as_json: bool) -> ExitCode {
    match ask(socket, &Request::Reload(ReloadRequest {})) {
        Ok(Reply::Reloaded(reloaded)) if as_json => {
            print_json(&reloaded);
            ExitCode::SUCCESS
        }
        Ok(Reply::Reloaded(reloaded)) => {
            let path = reloaded.policy.display();
            say!("reloaded {path}: {} tools", reloaded.tools);
            ExitCode::SUCCESS
        }
        Ok(other) => unexpected(&other),
        Err(code) => code,
    }
}
