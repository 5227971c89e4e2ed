//! A call's admission, before its review: its three descriptors, room (and its caller's share)
//! in the audit log, and its agent's `max_running` and `rate`. Each refusal is told to the
//! caller and published.

use std::{io, os::fd::OwnedFd};

use crate::{
    bus::{Event, What},
    call::peer::Peer,
    callers::{access::Role, agents::Admitted},
    daemon::Daemon,
    protocol::{ErrorReply, ExecReply, conn::Conn},
};

/// The caller's stdin, stdout and stderr sent with the frame; `None` when they are not three
/// (the caller has been told).
pub(super) async fn stdio(conn: &mut Conn) -> io::Result<Option<[OwnedFd; 3]>> {
    let fds = conn.take_fds();
    match <[OwnedFd; 3]>::try_from(fds) {
        Ok(stdio) => Ok(Some(stdio)),
        Err(_) => {
            let e = ErrorReply {
                error: "exec needs exactly 3 descriptors (stdin, stdout, stderr) with its frame"
                    .into(),
                field: Some("fds".into()),
                retry_after_ms: None,
            };
            conn.reply(&ExecReply::Error(e)).await.map(|()| None)
        }
    }
}

pub(super) fn busy() -> ErrorReply {
    ErrorReply::new("busy: too many calls queued; try again later")
}

/// Whether the audit log admits another call of `peer`'s: there is room for its rows, and the
/// caller has not written past its share lately (root and admins keep room when the others
/// have filled theirs, see `audit::share`); when not, the caller has been told.
pub(super) async fn admits(
    daemon: &Daemon,
    peer: &Peer,
    tool: Option<&str>,
    conn: &mut Conn,
) -> io::Result<bool> {
    let privileged =
        (daemon.access.read().unwrap_or_else(|p| p.into_inner())).permits(peer, Role::Admin);
    let Err(refused) = daemon.audit.admits_caller(peer.uid, privileged) else {
        return Ok(true);
    };
    // Fail closed: the room left is for the rows of the calls already running, and of the
    // operator's.
    let message = refused.to_string();
    let what = What::Refused {
        reason: message.clone(),
    };
    daemon.bus.publish(Event::of(None, tool, what));
    let e = ErrorReply {
        error: message,
        field: None,
        retry_after_ms: (refused.retry_after())
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    conn.reply(&ExecReply::Error(e)).await.map(|()| false)
}

/// Admits a call of `peer`'s agent within its `max_running` and `rate`: `Some` with what counts
/// it as running until the call ends (nothing without agents), `None` when it was refused and
/// the caller told, with an event. A call of `tool` the agent may not make at all is left for
/// the review to refuse and record; a resume (no tool) needs the caller to be exactly one agent.
pub(super) async fn agent(
    daemon: &Daemon,
    peer: &Peer,
    tool: Option<(&str, Option<&str>)>,
    conn: &mut Conn,
) -> std::io::Result<Option<Option<Admitted>>> {
    let policy = daemon.policy();
    let refused = match (crate::callers::agents::of(&policy, peer), tool) {
        (Ok(None), _) => return Ok(Some(None)),
        (Err(_), Some(_)) => return Ok(Some(None)),
        (Err(why), None) => ErrorReply::new(why),
        (Ok(Some(agent)), tool) => {
            let tier = |t: &str| policy.tool_info(t).map(|i| i.tier);
            if tool.is_some_and(|(t, label)| agent.refuses(t, tier(t), label).is_some()) {
                return Ok(Some(None));
            }
            match daemon.agents.admit(agent) {
                Ok(admitted) => return Ok(Some(Some(admitted))),
                Err(busy) => ErrorReply {
                    error: busy.message,
                    field: None,
                    retry_after_ms: busy.retry_after_ms,
                },
            }
        }
    };
    let what = What::Refused {
        reason: refused.error.clone(),
    };
    daemon
        .bus
        .publish(Event::of(None, tool.map(|(t, _)| t), what));
    let frame = crate::protocol::frame(&ExecReply::Error(refused));
    conn.write(&frame).await.map(|()| None)
}
