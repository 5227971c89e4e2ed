//! What guard-exec makes of guardd's replies to a call, to its end: each reply's meaning for the
//! caller (its message and guard-exec's exit), and a held call waited for across a restart of
//! guardd.

use std::{
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use guard::{
    call::decision::Decision,
    client::{self, Client},
    protocol::{ExecReply, Request, ResumeRequest, reply::Started},
};

use crate::{
    EXIT_BLOCKED, EXIT_SOFTWARE, EXIT_TEMPFAIL, EXIT_TERMINATED, EXIT_UNAVAILABLE, EXIT_USAGE, fail,
};

/// Reads guardd's replies to the end of the call, coming back for a held call when guardd
/// restarts meanwhile; returns guard-exec's exit.
pub(crate) fn follow(
    mut client: Client,
    socket: &Path,
    no_wait: bool,
    timeouts: client::Timeouts,
) -> ExitCode {
    // The held call this caller waits for, and until when guardd may come back for it.
    let mut held: Option<(String, Instant)> = None;
    // The call's start, and its cgroup: what tells a stopped call from a running one.
    let mut started: Option<Started> = None;
    loop {
        let reply = match client.recv::<ExecReply>() {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) if held.is_some() => {
                // guardd went away while the call was held: the call is on its disk, so wait
                // for guardd to come back and resume it.
                let Some((id, until)) = &held else {
                    continue;
                };
                match reconnect(socket, id, *until, timeouts) {
                    Some(c) => {
                        client = c;
                        continue;
                    }
                    None => {
                        let message = format!(
                            "guardd went away while call {id} was held, and did not come back; \
                             the call did not run (guard-exec --resume {id} waits for it again)"
                        );
                        return fail(EXIT_UNAVAILABLE, message);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return fail(EXIT_UNAVAILABLE, e);
            }
            Ok(None) | Err(_) => {
                return fail(EXIT_UNAVAILABLE, client::lost(started.as_ref()));
            }
        };
        if let ExecReply::Started(s) = reply {
            started = Some(s);
            continue;
        }
        if let ExecReply::Pending(hold) = &reply {
            if no_wait {
                // The id on stdout, for a script to resume it with.
                println!("{}", hold.call_id);
                eprintln!(
                    "guard-exec: call {id} is held for approval ({}, {}); run it once approved \
                     with guard-exec --resume {id}",
                    hold.decision,
                    hold.digest,
                    id = hold.call_id
                );
                return ExitCode::from(EXIT_TEMPFAIL);
            }
            let wait = Duration::from_secs(hold.timeout_s.saturating_add(60));
            held = Some((hold.call_id.clone(), Instant::now() + wait));
        } else {
            // Answered: from here the call is no longer held, and a guardd that goes away
            // takes it with it.
            held = None;
        }
        if let Some(code) = answer(reply) {
            return code;
        }
    }
}

/// Connects to guardd again (it restarted) and resumes held call `call_id`, trying until
/// `until`; `None` when guardd did not come back in time.
fn reconnect(
    socket: &Path,
    call_id: &str,
    until: Instant,
    timeouts: client::Timeouts,
) -> Option<Client> {
    eprintln!("guard-exec: guardd went away; call {call_id} stays held: waiting for guardd");
    let request = Request::Resume(ResumeRequest::wait(call_id));
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(mut client) = Client::connect_with(socket, timeouts) else {
            continue;
        };
        if client.send(&request, &[0, 1, 2]).is_ok() && client.wait_taken(timeouts.reply).is_ok() {
            return Some(client);
        }
    }
    None
}

/// Divergences named on stderr at most: the rest are counted, and `guardctl show` has them.
const TOLD: usize = 8;

/// Each divergence of the call on a line of its own (what it reached for, the layer that
/// refused it, what guard did), so that an agent reading stderr knows what failed and why;
/// caller-influenced text (a path, a name) escaped as guardctl escapes it.
fn tell_divergences(receipt: Option<&guard::receipt::Receipt>, id: &str) {
    let Some(receipt) = receipt else {
        return;
    };
    for d in receipt.divergences.iter().take(TOLD) {
        eprintln!(
            "guard-exec:   {}",
            guard::client::term::printable(&d.describe())
        );
    }
    let all = usize::try_from(receipt.denied + receipt.let_through).unwrap_or(usize::MAX);
    let told = receipt.divergences.len().min(TOLD);
    if all > told {
        eprintln!("guard-exec:   and {} more (guardctl show {id})", all - told);
    }
}

/// What guard-exec does with one reply: `None` to read the next one, else its exit.
pub(crate) fn answer(reply: ExecReply) -> Option<ExitCode> {
    match reply {
        ExecReply::Decision(d) if d.decision == Decision::Allow => None,
        ExecReply::Started(_) => None,
        ExecReply::Pending(hold) => {
            // Held for a human: say so, then keep waiting for the answer.
            let id = &hold.call_id;
            eprintln!(
                "guard-exec: call {id} needs approval ({}: {}): waiting up to {} s for an admin \
                 (guardctl approve {id}; {})",
                hold.decision, hold.message, hold.timeout_s, hold.digest
            );
            None
        }
        ExecReply::Decision(d) if d.terminated => {
            let message = d.message.as_deref().unwrap_or("session terminated");
            Some(fail(
                EXIT_TERMINATED,
                format!("{message} (call {}; session terminated)", d.call_id),
            ))
        }
        ExecReply::Decision(d) => {
            let message = d.message.as_deref().unwrap_or("blocked by policy");
            // The id, even when the policy discloses no reason: its caller reads the reason
            // with `guardctl why ID`, an operator in the log (`guardctl show ID`).
            let id = &d.call_id;
            Some(fail(
                EXIT_BLOCKED,
                format!("{message} (call {id}; its reason: guardctl why {id})"),
            ))
        }
        ExecReply::Exit(exit) => {
            if let Some(why) = &exit.killed {
                eprintln!("guard-exec: guard stopped the call: {why}");
            } else if exit.stopped {
                eprintln!(
                    "guard-exec: the call did something it was not approved to do and was stopped"
                );
            } else if exit.diverged {
                let receipt = exit.receipt.as_deref();
                let shadow = receipt.is_some_and(|r| r.let_through > 0 && r.denied == 0);
                eprintln!(
                    "guard-exec: the call tried something it was not approved to do; {}",
                    if shadow {
                        "it was let through (shadow): enforced, it would have been refused"
                    } else {
                        "it was denied"
                    }
                );
            }
            if exit.diverged || exit.stopped {
                tell_divergences(exit.receipt.as_deref(), &exit.call_id);
            }
            if let Some(error) = exit.error {
                return Some(fail(EXIT_SOFTWARE, error));
            }
            // Not a success the audit log cannot show: the caller hears it instead.
            if let Some(message) = exit.unrecorded_message() {
                return Some(fail(
                    EXIT_SOFTWARE,
                    format!("{message} (call {})", exit.call_id),
                ));
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
