//! Asking guardd: connecting, saying why a request failed, its status, and the audit log it
//! writes.

use std::{path::Path, process::ExitCode};

use guard::{
    client::{self, Client},
    protocol::{Reply, Request, StatusRequest, WhyRequest, reply::Status},
};

/// Connects or explains, in one line, why not: 75 when guardd is there and busy, 69 when it
/// is not there.
pub fn connect(socket: &Path) -> Result<Client, ExitCode> {
    Client::connect(socket).map_err(|e| {
        if client::busy(&e) {
            crate::term::say_err!("guardctl: {e}; try again later");
            return ExitCode::from(75);
        }
        crate::term::say_err!("guardctl: guardd unreachable at {}: {e}", socket.display());
        ExitCode::from(69)
    })
}

/// The exit for a request that failed, after saying why: 75 for a guardd that is busy (it
/// refused the connection for now, or did not answer within the reply timeout), else 1.
pub fn failed(e: &std::io::Error) -> ExitCode {
    crate::term::say_err!("guardctl: {e}");
    if client::busy(e) {
        ExitCode::from(75)
    } else {
        ExitCode::FAILURE
    }
}

/// guardd's status, or the exit code after saying why not.
pub fn ask_status(socket: &Path) -> Result<Status, ExitCode> {
    let mut client = connect(socket)?;
    match client.request(&Request::Status(StatusRequest {})) {
        Ok(Reply::Status(status)) => Ok(*status),
        Ok(other) => {
            crate::term::say_err!("guardctl: {}", client::unexpected(&other));
            Err(ExitCode::FAILURE)
        }
        Err(e) => Err(failed(&e)),
    }
}

/// The audit log to read: `given`, else the one the running guardd writes (its status says),
/// else the default path, saying so: history from a log guardd does not write would mislead.
pub fn audit_path(
    socket: Option<std::path::PathBuf>,
    given: Option<std::path::PathBuf>,
) -> std::path::PathBuf {
    if let Some(path) = given {
        return path;
    }
    let socket = client::socket_path(socket);
    let asked = Client::connect(&socket)
        .ok()
        .and_then(|mut c| c.request(&Request::Status(StatusRequest {})).ok())
        .and_then(|reply| match reply {
            Reply::Status(s) => Some(s.audit.path),
            _ => None,
        });
    asked.unwrap_or_else(|| {
        crate::term::say_err!(
            "guardctl: guardd unreachable at {}; reading {} (--audit to choose)",
            socket.display(),
            guard::audit::DEFAULT_PATH
        );
        guard::audit::DEFAULT_PATH.into()
    })
}

/// `guardctl why ID`: a recent call's reason, for its own caller.
pub fn why(socket: Option<std::path::PathBuf>, call_id: &str, as_json: bool) -> ExitCode {
    let socket = client::socket_path(socket);
    let mut client = match connect(&socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let request = Request::Why(WhyRequest {
        call_id: call_id.to_owned(),
    });
    match client.request(&request) {
        Ok(Reply::Why(why)) if as_json => {
            crate::print_json(&why);
            ExitCode::SUCCESS
        }
        Ok(Reply::Why(why)) => {
            let by = if why.check.is_empty() {
                String::new()
            } else {
                format!(" by {}", why.check)
            };
            crate::term::say!(
                "call {} ({}): {}{by}: {}",
                why.call_id,
                why.tool,
                why.decision,
                why.reason
            );
            ExitCode::SUCCESS
        }
        Ok(Reply::Error(e)) => {
            crate::term::say_err_lines!("guardctl: {}", e.error);
            ExitCode::FAILURE
        }
        Ok(other) => {
            crate::term::say_err!("guardctl: {}", client::unexpected(&other));
            ExitCode::FAILURE
        }
        Err(e) => failed(&e),
    }
}
