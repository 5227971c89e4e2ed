//! From a call's intent to what happens to it: the policy's decision (recorded durably before
//! anything else), then, for a call that may run, its judges, and for an escalated one its
//! approvers, until it runs, is held for a human, or is refused.

use std::{io, sync::Arc};

use crate::{
    access::Peer,
    audit::Row,
    bus::What,
    conn::Conn,
    daemon::Daemon,
    decision::Decision,
    hold::ToHold,
    intent::Intent,
    plan::LaunchPlan,
    protocol::{self, ExecReply, reply::CallDecision},
    stages::Stages,
};

/// What the caller of `exec` brings besides the call itself.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    /// The caller's session, which an approver may terminate.
    pub session: Option<String>,
    /// What the agent is working on, for the judges.
    pub task: Option<String>,
    /// A held call does not wait with its caller.
    pub no_wait: bool,
}

/// What comes after the review.
#[derive(Debug)]
pub enum Next {
    /// Run this plan (approved by this admin, when a human approved it).
    Run(Box<LaunchPlan>),
    /// Hold it for a human.
    Hold(Box<ToHold>),
    /// Nothing runs; the caller has been told why, or is gone.
    Done,
}

/// Writes one reply to the caller.
async fn send(conn: &mut Conn, reply: ExecReply) -> io::Result<()> {
    conn.write(&protocol::frame(&reply)).await
}

/// A refusal to tell the caller.
pub fn refusal(call_id: &str, decision: Decision, message: String, terminated: bool) -> ExecReply {
    ExecReply::Decision(CallDecision {
        call_id: call_id.to_owned(),
        decision,
        message: Some(message),
        approved_by: None,
        terminated,
    })
}

/// Decides the call, records the decision durably, and sends it through the judges and
/// approvers the policy names for it.
pub async fn review(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    intent: &Intent,
    ctx: &CallContext,
    call_id: &str,
    conn: &mut Conn,
    stages: &mut Stages,
) -> io::Result<Next> {
    let policy = daemon.policy();
    let mut verdict = policy.decide(intent);
    verdict.row.set_audit_entry_id(call_id.to_owned());
    if let Some(t) = ctx.session.as_deref().and_then(|s| daemon.sessions.get(s)) {
        // A terminated session's calls are blocked whatever the policy says of them.
        verdict.row.decision = Decision::Block;
        verdict.row.check_name = "session".into();
        verdict.row.reason = format!(
            "session '{}' was terminated by {} (call {}); an admin clears it with \
             guardctl sessions clear",
            t.session, t.by, t.call_id
        );
        verdict.plan = None;
    }
    let decision = verdict.row.decision;
    let row = Row::Decision {
        call_id: call_id.to_owned(),
        peer: peer.clone(),
        tool: intent.tool.clone(),
        args: verdict.redacted_args.clone(),
        decision: Box::new(verdict.row.clone()),
        enforced: daemon.enforced(),
    };
    stages.lap("decide");
    if let Err(e) = daemon.audit.record(&row).await {
        // Fail closed: a call whose decision cannot be recorded does not run.
        tracing::error!(call = %call_id, "audit log unavailable, blocking: {e}");
        let message = "blocked: the audit log is unavailable".to_owned();
        return send(conn, refusal(call_id, Decision::Block, message, false))
            .await
            .map(|()| Next::Done);
    }
    stages.lap("audit_decision");
    let what = What::Decision {
        decision,
        reason: verdict.row.reason.clone(),
        uid: peer.uid,
    };
    daemon.bus.call(call_id, &intent.tool, what);
    let message = policy.caller_message(&verdict);
    let terminated = verdict.row.check_name == "session";
    match (decision, verdict.plan) {
        (Decision::Allow, Some(plan)) => Ok(Next::Run(Box::new(plan))),
        (Decision::Escalate | Decision::Quarantine, Some(plan)) => {
            // A quarantined call's caller hears nothing of why: the reason is the audit row's.
            let message = if decision == Decision::Quarantine {
                "held for review".to_owned()
            } else {
                message
            };
            Ok(Next::Hold(Box::new(ToHold {
                call_id: call_id.to_owned(),
                decision,
                reason: verdict.row.reason.clone(),
                message,
                session: ctx.session.clone(),
                no_wait: ctx.no_wait,
                args: intent.args.clone(),
                redacted: verdict.redacted_args,
                plan,
            })))
        }
        _ => {
            if decision == Decision::Block {
                daemon
                    .violations
                    .blocked(peer, ctx.session.as_deref(), &intent.tool);
            }
            send(conn, refusal(call_id, decision, message, terminated))
                .await
                .map(|()| Next::Done)
        }
    }
}
