//! Terminating a caller's session: its later calls, and its agent's, blocked durably (after
//! a `session` row) until an admin clears it. An approver's `terminate` and an admin's
//! `deny --terminate` both end here.

use crate::{
    approval::{Held, sessions::Terminated},
    audit::Row,
    daemon::Daemon,
};

/// Blocks the session a held call was made in (under its caller's uid), and its agent's, as
/// an admin's `deny --terminate` asks (inspect_ai's human `terminate`).
pub(super) async fn held(daemon: &Daemon, held: &Held, admin: u32) {
    let by = format!("uid {admin}");
    for (session, uid) in sessions_of(held).into_iter().flatten() {
        block(daemon, &held.call_id, (&by, Some(admin)), session, uid).await;
    }
}

/// The sessions terminating held call `held` blocks: its caller's session under its uid, and
/// its agent's.
pub(super) fn sessions_of(held: &Held) -> [Option<(String, Option<u32>)>; 2] {
    let agent = held.agent.as_deref().map(crate::callers::agents::session);
    [
        held.session.clone().map(|s| (s, Some(held.uid))),
        agent.map(|a| (a, None)),
    ]
}

/// Records `session` (of `uid`, or of every uid) terminated, after its row; `by` says who
/// (an approver's name, or an admin's as `uid N` with the uid, which the row keeps).
pub(super) async fn block(
    daemon: &Daemon,
    call_id: &str,
    (by, admin): (&str, Option<u32>),
    session: String,
    uid: Option<u32>,
) {
    let row = Row::Session {
        session: session.clone(),
        terminated: true,
        call_id: Some(call_id.to_owned()),
        by: admin,
    };
    if let Err(x) = daemon.audit.record(&row).await {
        tracing::error!(call = %call_id, "audit log unavailable for the session row: {x}");
    }
    let t = Terminated {
        session,
        uid,
        call_id: call_id.to_owned(),
        by: by.to_owned(),
        since: crate::audit::ts::now(),
    };
    if let Err(x) = daemon.sessions.terminate(t) {
        tracing::error!(call = %call_id, "keeping the terminated session: {x}");
    }
}
