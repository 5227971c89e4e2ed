//! The answers to a held call: an admin's (`approve`, `deny`), the clock's, or its caller's
//! leaving. Each is an audit row before anyone acts on it.

use std::{sync::Arc, time::Duration};

use serde_json::Value;

use crate::{
    approval::{ApprovalError, Held, digest::CallForm},
    audit::Row,
    bus::What,
    call::{decision::Decision, intent::Intent},
    daemon::Daemon,
    policy::helpers::Choices,
};

/// An answer, as its audit row records it.
#[derive(Debug, Default)]
pub struct Answer {
    pub approved: bool,
    pub by: Option<u32>,
    pub reason: Option<String>,
    pub digest: Option<String>,
    pub approver: Option<String>,
    pub outcome: Option<String>,
    pub modified_args: Option<Value>,
}

impl Answer {
    /// Nobody's refusal (the clock, a caller leaving, a changed program).
    pub fn nobody(reason: &str, digest: Option<String>) -> Self {
        Self {
            reason: Some(reason.to_owned()),
            digest,
            ..Self::default()
        }
    }
}

/// Writes an approval row, durably, and publishes it; false when it could not be written, and
/// then nothing may act on the answer.
pub async fn record_answer(daemon: &Daemon, call_id: &str, tool: &str, a: Answer) -> bool {
    let what = What::Approval {
        approved: a.approved,
        by: a.by,
        reason: a.reason.clone(),
        approver: a.approver.clone().map(|who| match &a.outcome {
            Some(o) => format!("{who} ({o})"),
            None => who,
        }),
    };
    daemon.bus.call(call_id, tool, what);
    let row = Row::Approval {
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        approved: a.approved,
        by: a.by,
        reason: a.reason,
        digest: a.digest,
        approver: a.approver,
        outcome: a.outcome,
        modified_args: a.modified_args,
    };
    match daemon.audit.record(&row).await {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(call = %call_id, "audit log unavailable for the approval row: {e}");
            false
        }
    }
}

/// Why an admin's answer to a held call was not taken; the call stays as it was.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The store of held calls refused it: no such call, another digest, the admin's own call.
    #[error(transparent)]
    Refused(#[from] ApprovalError),
    /// The policy in force since the hold would not let the call run as it was held.
    #[error("call {call_id} is not approved: {why}: deny it, and have its caller submit it again")]
    Barred { call_id: String, why: String },
    #[error("not answered: the audit log is unavailable")]
    Unrecorded,
    /// `deny --terminate` of a call made in no session and by no agent.
    #[error(
        "call {call_id} was made in no session and by no agent: there is nothing to \
         terminate; deny it without --terminate"
    )]
    NothingToTerminate { call_id: String },
    /// The held call's human approver does not offer this choice (its `choices`).
    #[error(
        "call {call_id} is not answered: its approver's choices do not include '{choice}' \
         (the policy's human approver, choices)"
    )]
    NotAChoice { call_id: String, choice: String },
}

impl AnswerError {
    /// The field of the admin's request the error is about, if it is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Refused(ApprovalError::Digest { .. }) => Some("digest"),
            Self::Refused(
                ApprovalError::Full(_)
                | ApprovalError::PerUid { .. }
                | ApprovalError::Reserved { .. }
                | ApprovalError::TooLarge { .. }
                | ApprovalError::Store(_),
            )
            | Self::Unrecorded => None,
            Self::Refused(_)
            | Self::Barred { .. }
            | Self::NotAChoice { .. }
            | Self::NothingToTerminate { .. } => Some("call_id"),
        }
    }
}

/// What an admin answers a held call with: inspect_ai's human choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAnswer {
    Approve,
    /// Reject; with `terminate`, the caller's session and agent are blocked too.
    Deny {
        reason: Option<String>,
        terminate: bool,
    },
}

impl AdminAnswer {
    /// The choice it is, when the held call's approver may not offer it.
    fn outside(&self, choices: Choices) -> Option<&'static str> {
        match self {
            Self::Approve if !choices.approve => Some("approve"),
            Self::Deny {
                terminate: true, ..
            } if !choices.terminate => Some("terminate"),
            _ => None,
        }
    }
}

/// An admin's answer to held call `call_id`, bound to `digest` when given. Recorded before the
/// call learns it.
pub async fn answer(
    daemon: &Daemon,
    call_id: &str,
    by: u32,
    given: AdminAnswer,
    digest: Option<&str>,
) -> Result<Held, AnswerError> {
    let _one = daemon.approvals.answering.lock().await;
    let allow_self = daemon.policy().settings().allow_self_approval;
    let approve_by = (given == AdminAnswer::Approve).then_some(by);
    let held = (daemon.approvals).check(call_id, approve_by, digest, allow_self)?;
    // The choices it was held with, and those of the policy in force now (a reload since
    // may have narrowed them).
    let now = Choices::of(&daemon.policy().approvers_of(&held.tool));
    if let Some(choice) = given.outside(held.choices.and(now)) {
        let (call_id, choice) = (call_id.to_owned(), choice.to_owned());
        return Err(AnswerError::NotAChoice { call_id, choice });
    }
    let (deny, terminate) = match given {
        AdminAnswer::Approve => (None, false),
        AdminAnswer::Deny { reason, terminate } => (Some(reason), terminate),
    };
    if terminate
        && super::terminate::sessions_of(&held)
            .iter()
            .all(Option::is_none)
    {
        let call_id = call_id.to_owned();
        return Err(AnswerError::NothingToTerminate { call_id });
    }
    if approve_by.is_some()
        && let Some(why) = (daemon.approvals.form(call_id)).and_then(|f| barred(daemon, &held, &f))
    {
        let call_id = call_id.to_owned();
        return Err(AnswerError::Barred { call_id, why });
    }
    let reason = deny.map(|r| r.unwrap_or_else(|| "denied by an admin".into()));
    let a = Answer {
        approved: reason.is_none(),
        by: Some(by),
        reason: reason.clone(),
        digest: Some(held.digest.clone()),
        // inspect_ai's name for the answer, where a plain approve or deny does not say it.
        outcome: terminate.then(|| "terminate".to_owned()),
        ..Answer::default()
    };
    if !record_answer(daemon, call_id, &held.tool, a).await {
        return Err(AnswerError::Unrecorded);
    }
    if terminate {
        super::terminate::held(daemon, &held, by).await;
    }
    match reason {
        None => daemon.approvals.approve(call_id, by)?,
        Some(r) => daemon.approvals.end(call_id, &r).map(|_| ())?,
    }
    Ok(held)
}

/// Ends a held call unrun for `reason` (nobody's answer), after its row.
pub async fn withdraw(daemon: &Daemon, call_id: &str, reason: &str) {
    end_unrun(daemon, call_id, reason, false).await;
}

/// Ends a held call unrun for `reason`, after its row; with `expired`, only if its wait has
/// run out (an answer may have come in since it was seen expired).
async fn end_unrun(daemon: &Daemon, call_id: &str, reason: &str, expired: bool) {
    let _one = daemon.approvals.answering.lock().await;
    let Some(held) = daemon.approvals.get(call_id) else {
        return;
    };
    let now = crate::approval::now_ms();
    if expired
        && !daemon
            .approvals
            .expired(now)
            .iter()
            .any(|h| h.call_id == call_id)
    {
        return;
    }
    let digest = Some(held.digest.clone());
    if record_answer(daemon, call_id, &held.tool, Answer::nobody(reason, digest)).await {
        let _ = daemon.approvals.end(call_id, reason);
    }
}

/// Ends the held calls whose wait ran out, every quarter of a second, for as long as guardd
/// runs: one never answered is denied, one approved but never collected is dropped.
pub fn spawn_sweeper(daemon: &Arc<Daemon>) {
    let daemon = Arc::clone(daemon);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let timeout_s = daemon.approvals.timeout.as_secs();
            for held in daemon.approvals.expired(crate::approval::now_ms()) {
                let reason = if held.approved_by.is_some() {
                    format!("approved, but its caller did not come back within {timeout_s} s")
                } else {
                    format!("no admin answered within {timeout_s} s")
                };
                end_unrun(&daemon, &held.call_id, &reason, true).await;
            }
        }
    });
}

/// Why a held call may not run now, if it may not: its session was terminated since it was
/// held (no call of a terminated session runs until an admin clears it), or the policy
/// changed since it was held, and under the one in force now its arguments are blocked or get
/// another plan. An approval is of the call as the policy it was held under decided it; a
/// policy put in force since must not be bypassed by a plan it no longer grants.
pub(super) fn barred(daemon: &Daemon, held: &Held, form: &CallForm) -> Option<String> {
    if held.holds_secret {
        return Some(
            "an argument or its input held a secret's value, and nothing runs with one (it is \
             kept masked)"
                .to_owned(),
        );
    }
    if let Some(t) = held
        .session
        .as_deref()
        .and_then(|s| daemon.sessions.blocks(held.uid, s))
    {
        return Some(format!(
            "its session '{}' was terminated by {} (call {}); an admin clears it with \
             guardctl sessions --clear",
            t.session, t.by, t.call_id
        ));
    }
    if let Some(why) = agent_bars(daemon, held) {
        return Some(why);
    }
    let mut intent = Intent::new(&form.tool, form.args.clone());
    intent.cwd.clone_from(&form.cwd);
    intent.caller = Some(held.uid);
    let policy = daemon.policy_for(&intent);
    if policy.version() == form.policy {
        return None;
    }
    let verdict = policy.decide(&intent);
    match verdict.plan {
        Some(plan) if verdict.row.decision != Decision::Block && plan == form.decided_plan() => {
            None
        }
        _ => Some(format!(
            "the policy changed since the call was held ({} then, {} now), and no longer \
             grants it as held",
            form.policy,
            policy.version()
        )),
    }
}

/// Why the agent that made a held call may not have it run now: it was terminated since (a
/// call that named no session is its agent's all the same), it is gone from the policy, or
/// the policy in force no longer lets it make the call (its tools, tier or labels).
fn agent_bars(daemon: &Daemon, held: &Held) -> Option<String> {
    let name = held.agent.as_deref()?;
    let session = crate::callers::agents::session(name);
    if let Some(t) = daemon.sessions.blocks_everyone(&session) {
        return Some(format!(
            "its agent '{name}' was terminated by {} (call {}); an admin clears it with \
             guardctl sessions --clear {session}",
            t.by, t.call_id
        ));
    }
    let policy = daemon.policy();
    let Some(agent) = policy.agents().iter().find(|a| a.name == name) else {
        return Some(format!("its agent '{name}' is no longer in the policy"));
    };
    let tier = policy.tool_info(&held.tool).map(|t| t.tier);
    agent
        .refuses(&held.tool, tier, held.label.as_deref())
        .map(|why| format!("its agent may not make it now: {why}"))
}
