//! The admin's requests: `guardctl pending`, `approve` and `deny` answer the calls the policy
//! held for a human (escalate, quarantine); `guardctl reload` puts an edited policy in force.

use std::{path::PathBuf, process::ExitCode};

use guard::client::{self, Client};
use serde_json::{Value, json};

/// Sends one admin request and prints what comes back; exit 0 only for a success.
fn ask(socket: Option<PathBuf>, kind: &str, body: Value) -> Result<Value, ExitCode> {
    let socket = client::socket_path(socket);
    let mut client = Client::connect(&socket).map_err(|e| {
        eprintln!("guardctl: guardd unreachable at {}: {e}", socket.display());
        ExitCode::from(69)
    })?;
    client.request(kind, body).map_err(|e| {
        eprintln!("guardctl: {e}");
        ExitCode::FAILURE
    })
}

/// Lists the held calls.
pub fn pending(socket: Option<PathBuf>, as_json: bool) -> ExitCode {
    let reply = match ask(socket, "pending", json!({})) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let calls = reply["calls"].as_array().cloned().unwrap_or_default();
    for call in &calls {
        if as_json {
            println!("{call}");
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
        println!(
            "{:<16} {:<16} {:<10} uid {:<6} since {}\n  {}\n  args {}",
            text(&call["call_id"]),
            text(&call["tool"]),
            text(&call["decision"]),
            call["uid"],
            text(&call["since"]),
            text(&call["reason"]),
            call["args"]
        );
    }
    if calls.is_empty() && !as_json {
        println!("no call is waiting for approval");
    }
    ExitCode::SUCCESS
}

/// Approves (`reason` is `None`) or denies a held call.
pub fn resolve(
    socket: Option<PathBuf>,
    call_id: &str,
    deny: Option<Option<String>>,
    as_json: bool,
) -> ExitCode {
    let (kind, body) = match deny {
        None => ("approve", json!({ "call_id": call_id })),
        Some(reason) => ("deny", json!({ "call_id": call_id, "reason": reason })),
    };
    match ask(socket, kind, body) {
        Ok(reply) if as_json => {
            println!("{}", without_envelope(reply));
            ExitCode::SUCCESS
        }
        Ok(_) => {
            let done = if kind == "approve" {
                "approved"
            } else {
                "denied"
            };
            println!("{call_id} {done}");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Asks guardd to load its policy file again.
pub fn reload(socket: Option<PathBuf>, as_json: bool) -> ExitCode {
    match ask(socket, "reload", json!({})) {
        Ok(reply) if as_json => {
            println!("{}", without_envelope(reply));
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            let path = reply["policy"].as_str().unwrap_or("?");
            println!("reloaded {path}: {} tools", reply["tools"]);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// A reply frame as data: without the protocol's version and type.
fn without_envelope(mut reply: Value) -> Value {
    if let Some(map) = reply.as_object_mut() {
        map.remove("v");
        map.remove("type");
    }
    reply
}
