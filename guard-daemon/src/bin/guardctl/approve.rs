//! The admin's requests: `guardctl pending`, `approve` and `deny` answer the calls the policy
//! held for a human (escalate, quarantine); `guardctl reload` puts an edited policy in force.

use std::{path::PathBuf, process::ExitCode};

use guard::{
    client::{self, Client},
    protocol::{ApproveRequest, DenyRequest, PendingRequest, ReloadRequest, Reply, Request},
};

use crate::print_json;

/// Sends one admin request and returns what comes back; an error is printed, with its exit.
fn ask(socket: Option<PathBuf>, request: &Request) -> Result<Reply, ExitCode> {
    let socket = client::socket_path(socket);
    let mut client = Client::connect(&socket).map_err(|e| {
        eprintln!("guardctl: guardd unreachable at {}: {e}", socket.display());
        ExitCode::from(69)
    })?;
    client.request(request).map_err(|e| {
        eprintln!("guardctl: {e}");
        ExitCode::FAILURE
    })
}

/// A reply other than the one the request expects.
fn unexpected(reply: &Reply) -> ExitCode {
    eprintln!("guardctl: {}", client::unexpected(reply));
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
        println!(
            "{:<16} {:<16} {:<10} uid {:<6} since {}\n  {}\n  args {}",
            call.call_id, call.tool, call.decision, call.uid, call.since, call.reason, call.args
        );
    }
    if calls.is_empty() && !as_json {
        println!("no call is waiting for approval");
    }
    ExitCode::SUCCESS
}

/// Approves (`deny` is `None`) or denies a held call.
pub fn resolve(
    socket: Option<PathBuf>,
    call_id: &str,
    deny: Option<Option<String>>,
    as_json: bool,
) -> ExitCode {
    let call_id = call_id.to_owned();
    let request = match deny {
        None => Request::Approve(ApproveRequest { call_id }),
        Some(reason) => Request::Deny(DenyRequest { call_id, reason }),
    };
    match ask(socket, &request) {
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
            println!("{} {done}", resolved.call_id);
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
            println!("reloaded {path}: {} tools", reloaded.tools);
            ExitCode::SUCCESS
        }
        Ok(other) => unexpected(&other),
        Err(code) => code,
    }
}
