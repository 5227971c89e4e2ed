//! The requests that get one reply and leave the connection open for the next, and who may
//! make each.

use std::io;

use crate::{
    audit::Row,
    call::{
        decision::{Decision, RowMetadata},
        intent::Intent,
        peer::Peer,
    },
    callers::access::Role,
    daemon::Daemon,
    policy::Verdict,
    protocol::{
        self, ErrorReply, ProtocolError, Reply, Request,
        conn::Conn,
        reply::{
            AuditStatus, Checked, Cleared, PendingCalls, PolicyStatus, Reloaded, Resolved,
            SessionList, Status,
        },
    },
    review,
    review::answer::AdminAnswer,
};

use super::listing;

/// Whether the peer may make this request: exec, check and status need a client, the rest an
/// admin.
pub(super) fn permitted(
    daemon: &Daemon,
    peer: &Peer,
    request: &Request,
) -> Result<(), ProtocolError> {
    let role = match request {
        Request::Subscribe(_)
        | Request::Pending(_)
        | Request::Approve(_)
        | Request::Deny(_)
        | Request::Reload(_)
        | Request::Sessions(_)
        | Request::Agents(_)
        | Request::ClearSession(_) => Role::Admin,
        Request::Exec(_)
        | Request::ExecWith(_)
        | Request::Resume(_)
        | Request::Check(_)
        | Request::Status(_)
        | Request::Why(_)
        | Request::Tools(_) => Role::Client,
    };
    let access = daemon.access.read().unwrap_or_else(|p| p.into_inner());
    if access.permits(peer, role) {
        return Ok(());
    }
    let who = if role == Role::Admin {
        "an admin"
    } else {
        "a client"
    };
    Err(ProtocolError {
        message: format!(
            "not permitted: uid {} is not {who} of this guardd",
            peer.uid
        ),
        field: None,
    })
}

/// Answers a request that gets one reply and leaves the connection open for the next.
pub(super) async fn answer(
    daemon: &Daemon,
    peer: &Peer,
    request: Request,
    conn: &mut Conn,
) -> io::Result<()> {
    let reply = match request {
        Request::Check(req) => {
            let intent = Intent {
                tool: req.tool,
                args: req.args,
                cwd: req.cwd,
                caller: Some(peer.uid),
            };
            match check(daemon, peer, &intent).await {
                Ok(checked) => Reply::Decision(Box::new(checked)),
                Err(e) => Reply::Error(e),
            }
        }
        Request::Status(_) => Reply::Status(Box::new(status(daemon))),
        Request::Tools(_) => listing::tools(daemon, peer),
        Request::Pending(_) => Reply::Pending(PendingCalls {
            calls: daemon.approvals.list(),
        }),
        Request::Approve(req) => {
            let digest = req.digest.as_deref();
            let answer = AdminAnswer::Approve;
            return resolve(daemon, conn, &req.call_id, peer.uid, answer, digest).await;
        }
        Request::Deny(req) => {
            let answer = AdminAnswer::Deny {
                reason: req.reason,
                terminate: req.terminate,
            };
            return resolve(daemon, conn, &req.call_id, peer.uid, answer, None).await;
        }
        Request::Sessions(_) => Reply::Sessions(SessionList {
            sessions: daemon.sessions.list(),
        }),
        Request::Agents(_) => listing::agents(daemon),
        Request::Why(req) => why(daemon, peer, &req.call_id),
        Request::ClearSession(req) => clear_session(daemon, peer, req.session).await,
        Request::Reload(_) => match daemon.reload(Some(peer.uid)).await {
            Ok(tools) => Reply::Reloaded(Reloaded {
                policy: daemon.options.policy.clone(),
                tools,
            }),
            Err(e) => Reply::Error(ErrorReply::new(e.to_string())),
        },
        // Each keeps the connection: see `handle`.
        Request::Exec(_) | Request::ExecWith(_) | Request::Resume(_) | Request::Subscribe(_) => {
            Reply::Error(ErrorReply::new(
                "exec, resume and subscribe take the connection",
            ))
        }
    };
    conn.reply(&reply).await
}

/// Decides `intent` without running it, as an exec of it would be decided, and records the
/// decision: a check decides what a hook lets its agent do itself (Claude Code's Write), and
/// every probe of a secret is a row, within the caller's share of the log (`audit::share`).
/// The caller hears what an exec's caller would.
async fn check(daemon: &Daemon, peer: &Peer, intent: &Intent) -> Result<Checked, ErrorReply> {
    // Its row counts in the caller's share of the log, as a call's do.
    let privileged =
        (daemon.access.read().unwrap_or_else(|p| p.into_inner())).permits(peer, Role::Admin);
    if let Err(refused) = daemon.audit.admits_caller(peer.uid, privileged) {
        return Err(ErrorReply {
            error: refused.to_string(),
            field: None,
            retry_after_ms: (refused.retry_after())
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        });
    }
    let policy = daemon.policy_for(intent);
    let mut verdict = policy.decide(intent);
    // What the caller's agent says, as an exec of the same call would hear it.
    crate::callers::agents::rule(&policy, peer, &intent.tool, None, &mut verdict);
    daemon.probes.rule(peer.uid, &mut verdict);
    let row = Row::Checked {
        peer: peer.clone(),
        tool: intent.tool.clone(),
        args: verdict.redacted_args.clone(),
        decision: Box::new(verdict.row.clone()),
        policy: Some(policy.version().to_owned()),
    };
    if let Err(e) = daemon.audit.record(&row).await {
        tracing::error!("audit log unavailable for a check: {e}");
        return Err(ErrorReply::new("not checked: the audit log is unavailable"));
    }
    let message = policy.caller_message(&verdict);
    Ok(for_caller(verdict, message))
}

/// `verdict` as its caller may see it, saying `message` (`Policy::caller_message`): a
/// quarantine as every quarantine is, whatever matched (a rule, a detector, a secret's value),
/// with neither the argument nor the rule nor a plan.
fn for_caller(verdict: Verdict, message: String) -> Checked {
    let mut decision = verdict.row;
    decision.reason = message;
    if decision.decision != Decision::Quarantine {
        return Checked {
            decision,
            plan: verdict.plan,
        };
    }
    decision.check_name = "quarantine".to_owned();
    let meta = &mut decision.metadata;
    *meta = RowMetadata {
        tool: meta.tool.take(),
        tier: meta.tier,
        agent: meta.agent.take(),
        ..Default::default()
    };
    Checked {
        decision,
        plan: None,
    }
}

/// An admin's answer to a held call (`deny` none: approve), recorded, then handed to the call.
async fn resolve(
    daemon: &Daemon,
    conn: &mut Conn,
    call_id: &str,
    by: u32,
    answer: AdminAnswer,
    digest: Option<&str>,
) -> io::Result<()> {
    let approved = answer == AdminAnswer::Approve;
    match review::answer::answer(daemon, call_id, by, answer, digest).await {
        Ok(held) => {
            let resolved = Resolved {
                call_id: call_id.to_owned(),
                approved,
                digest: held.digest,
            };
            conn.reply(&Reply::Resolved(resolved)).await
        }
        Err(e) => {
            let e = ProtocolError {
                message: e.to_string(),
                field: e.field().map(Into::into),
            };
            conn.write(&protocol::error_frame(&e)).await
        }
    }
}

/// Why a recent call of the caller's (an admin: anyone's) did not run as asked.
fn why(daemon: &Daemon, peer: &Peer, call_id: &str) -> Reply {
    let admin =
        (daemon.access.read().unwrap_or_else(|p| p.into_inner())).permits(peer, Role::Admin);
    match daemon.reasons.of(call_id, peer.uid, admin) {
        Some(why) => Reply::Why(why),
        None => Reply::Error(ErrorReply {
            error: format!(
                "no recent call {call_id} of uid {} was refused or held: it ran, it is older \
                 than guardd's last {} such calls or its restart, or it is another uid's (an \
                 admin reads every call in the audit log: guardctl show {call_id})",
                peer.uid, 1024
            ),
            field: Some("call_id".into()),
            retry_after_ms: None,
        }),
    }
}

/// Lets a terminated session submit calls again, after its row.
async fn clear_session(daemon: &Daemon, peer: &Peer, session: String) -> Reply {
    if daemon.sessions.get(&session).is_none() {
        return Reply::Error(ErrorReply {
            error: format!("session '{session}' is not terminated"),
            field: Some("session".into()),
            retry_after_ms: None,
        });
    }
    let row = Row::Session {
        session: session.clone(),
        terminated: false,
        call_id: None,
        by: Some(peer.uid),
    };
    if let Err(e) = daemon.audit.record(&row).await {
        return Reply::Error(ErrorReply::new(format!(
            "not cleared: the audit log is unavailable: {e}"
        )));
    }
    match daemon.sessions.clear(&session) {
        Ok(_) => Reply::Cleared(Cleared { session }),
        Err(e) => Reply::Error(ErrorReply::new(format!("not cleared: {e}"))),
    }
}

/// The daemon's state for `guardctl status`.
pub(super) fn status(daemon: &Daemon) -> Status {
    let policy = daemon.policy();
    Status {
        pid: std::process::id(),
        uptime_s: daemon.started.elapsed().as_secs(),
        enforced: daemon.enforced(),
        policy: PolicyStatus {
            path: daemon.options.policy.clone(),
            tools: policy.tools().count(),
            version: policy.version().to_owned(),
            shadow: policy
                .shadow_tools()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        },
        audit: AuditStatus {
            path: daemon.options.audit.clone(),
            admitting: daemon.audit.admits(),
        },
        layers: daemon.layers.clone(),
        limits: daemon.launch.limits.to_string(),
        running: daemon.calls.running(),
        queued: daemon.calls.queued(),
        dropped_events: daemon.dropped_events(),
        export: daemon.export.get().map(crate::export::Export::status),
        // The server's own, which `handle` fills in.
        connections: Default::default(),
    }
}
