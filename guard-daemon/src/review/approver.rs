//! Approvers by tool glob (inspect_ai's approval policies): for a call the policy escalates,
//! the `[[approvers]]` whose globs match its tool answer in policy order. The first answers;
//! `escalate` hands the call to the next, and after the last (or at `human`) a human answers
//! it (the call is held). `approve` runs it, `reject` refuses it, `terminate` refuses it and
//! blocks the caller's session until an admin clears it, `modify` runs it with the approver's
//! arguments once the policy has decided them again. A command approver that fails in any way
//! rejects. Every answer is an `approval` audit row before it is acted on.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    audit::Row,
    call::{decision::Decision, intent::Intent, peer::Peer, plan::LaunchPlan},
    daemon::Daemon,
    policy::{
        Policy,
        helpers::{Approver, ApproverKind, Choices, Helper, Outcome},
    },
    protocol::CallOptions,
    review::{
        answer::{Answer, record_answer},
        confined,
        judge::{self, ProposedCall, Subject},
    },
};

/// What a command approver is given on stdin.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApproverInput {
    pub call_id: String,
    /// Why the policy escalated the call.
    pub message: String,
    pub call: ProposedCall,
    pub session: Option<String>,
    pub task: Option<String>,
    /// The model's message with the call and the conversation before it (inspect_ai's
    /// approvers get both), each secret masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
}

/// A command approver's answer (inspect_ai's Approval).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub decision: Outcome,
    #[serde(default)]
    pub modified: Option<ModifiedCall>,
    #[serde(default)]
    pub explanation: Option<String>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// The call as an approver's `modify` changed it: the same tool, other arguments.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModifiedCall {
    #[serde(default)]
    pub tool: Option<String>,
    pub arguments: Map<String, Value>,
}

/// Where the approvers left a call.
#[derive(Debug)]
pub enum Approved {
    /// Run this plan.
    Run(Box<LaunchPlan>),
    /// A human answers it, within these choices: hold it.
    Human(Choices),
    /// Refused; tell the caller this (and that its session is terminated).
    Refused { message: String, terminated: bool },
}

/// The escalated call the approvers answer.
pub struct Escalated<'a> {
    pub peer: &'a Peer,
    pub intent: &'a Intent,
    pub ctx: &'a CallOptions,
    pub reason: &'a str,
    pub subject: Subject,
}

/// Sends an escalated call through its approvers.
pub async fn approvers(daemon: &Daemon, policy: &Policy, e: &Escalated<'_>) -> Approved {
    for approver in policy.approvers_of(&e.intent.tool) {
        let (outcome, explanation, modified) = match ask(daemon, policy, approver, e).await {
            Asked::Human(c) => return Approved::Human(c),
            Asked::Answer(o, x, m) => (o, x, m),
        };
        let redacted = modified.as_ref().map(|m| {
            let intent = Intent {
                args: m.clone(),
                ..e.intent.clone()
            };
            policy.decide(&intent).redacted_args
        });
        let answer = Answer {
            approved: matches!(outcome, Outcome::Approve | Outcome::Modify),
            reason: explanation.clone(),
            approver: Some(approver.name()),
            outcome: Some(outcome.as_str().to_owned()),
            modified_args: redacted,
            ..Answer::default()
        };
        let call_id = &e.subject.call_id;
        if !record_answer(daemon, call_id, &e.intent.tool, answer).await {
            return refused("not run: the audit log is unavailable".into(), false);
        }
        let why = || {
            let who = approver.name();
            match (&explanation, policy.settings().disclose_reasons) {
                (Some(x), true) => format!("not approved by {who}: {x}"),
                (None, true) => format!("not approved by {who}"),
                (_, false) => "not approved".to_owned(),
            }
        };
        match outcome {
            Outcome::Approve => return Approved::Run(Box::new(e.subject.plan.clone())),
            Outcome::Escalate => {}
            Outcome::Reject => return refused(why(), false),
            Outcome::Terminate => return terminate(daemon, e, &approver.name(), why()).await,
            Outcome::Modify => {
                let args = modified.unwrap_or_default();
                return modify(daemon, policy, e, args).await;
            }
        }
    }
    Approved::Human(Choices::default())
}

fn refused(message: String, terminated: bool) -> Approved {
    Approved::Refused {
        message,
        terminated,
    }
}

/// What one approver said.
enum Asked {
    Human(Choices),
    Answer(Outcome, Option<String>, Option<Map<String, Value>>),
}

async fn ask(daemon: &Daemon, policy: &Policy, approver: &Approver, e: &Escalated<'_>) -> Asked {
    match &approver.kind {
        ApproverKind::Human(c) => Asked::Human(*c),
        ApproverKind::Auto(o) => Asked::Answer(*o, None, None),
        ApproverKind::Judge(name) => match policy.judge(name) {
            Some(j) => {
                let v = judge::judge(daemon, j, &e.subject).await;
                let outcome = if v.allowed {
                    Outcome::Approve
                } else {
                    Outcome::Reject
                };
                Asked::Answer(outcome, v.reason.or(v.reasoning), None)
            }
            None => Asked::Answer(Outcome::Reject, Some(format!("no judge '{name}'")), None),
        },
        ApproverKind::Command(helper) => match command(daemon, helper, e).await {
            Ok(a) => Asked::Answer(a.decision, a.explanation, a.modified.map(|m| m.arguments)),
            Err(why) => Asked::Answer(
                Outcome::Reject,
                Some(format!("the approver failed: {why}")),
                None,
            ),
        },
    }
}

/// Runs a command approver, confined, and reads its answer strictly.
async fn command(
    daemon: &Daemon,
    helper: &Helper,
    e: &Escalated<'_>,
) -> Result<ApprovalAnswer, String> {
    let input = ApproverInput {
        call_id: e.subject.call_id.clone(),
        message: e.reason.to_owned(),
        call: e.subject.call.clone(),
        session: e.ctx.session.clone(),
        task: e.ctx.task.clone(),
        conversation: e.subject.conversation.clone(),
    };
    let input = serde_json::to_vec(&input).map_err(|x| x.to_string())?;
    let plan = helper.plan("approver", &[], &[]);
    let id = format!("{}-approver", e.subject.call_id);
    let ran = confined::run(daemon, &id, &plan, input)
        .await
        .map_err(|x| format!("could not run: {x}"))?;
    if let Some(why) = confined::failure(&ran, helper.timeout) {
        return Err(why);
    }
    let text = String::from_utf8_lossy(&ran.stdout);
    let answer: ApprovalAnswer = serde_json::from_str(text.trim()).map_err(|x| {
        let shown: String = text.chars().take(120).collect();
        format!("its output is no Approval ({x}): {shown:?}")
    })?;
    match (&answer.decision, &answer.modified) {
        (Outcome::Modify, None) => Err("modify without the modified call".into()),
        (_, Some(m)) if m.tool.as_ref().is_some_and(|t| *t != e.intent.tool) => {
            Err("an approver may not change the tool".into())
        }
        _ => Ok(answer),
    }
}

/// Blocks the caller's session, and its agent's calls if it has one, durably and after its
/// row, and refuses the call.
async fn terminate(daemon: &Daemon, e: &Escalated<'_>, by: &str, message: String) -> Approved {
    // The caller's session under its uid, and its agent, which is who it is whatever
    // session it names: both blocked.
    let policy = daemon.policy();
    let agent = crate::callers::agents::of(&policy, e.peer)
        .ok()
        .flatten()
        .map(|a| crate::callers::agents::session(&a.name));
    let blocked = [
        e.ctx.session.clone().map(|s| (s, Some(e.peer.uid))),
        agent.map(|a| (a, None)),
    ];
    if blocked.iter().all(Option::is_none) {
        // Nothing to block beyond this call: the caller named no session, and has no agent.
        return refused(format!("{message} (no session to terminate)"), true);
    }
    for (session, uid) in blocked.into_iter().flatten() {
        super::terminate::block(daemon, &e.subject.call_id, (by, None), session, uid).await;
    }
    refused(message, true)
}

/// The approver's arguments, decided again by the policy and recorded as a decision row of
/// the same call, then judged by the tool's judges: run when the policy allows them (or
/// escalates them again, which this approver has now answered) and no judge rejects them,
/// refused otherwise.
async fn modify(
    daemon: &Daemon,
    policy: &Policy,
    e: &Escalated<'_>,
    args: Map<String, Value>,
) -> Approved {
    // The same caller, in the same place, with the approver's arguments.
    let intent = Intent {
        args,
        ..e.intent.clone()
    };
    let mut verdict = policy.decide(&intent);
    let call_id = &e.subject.call_id;
    verdict.row.set_audit_entry_id(call_id.clone());
    let row = Row::Decision {
        call_id: call_id.clone(),
        peer: e.peer.clone(),
        tool: intent.tool.clone(),
        args: verdict.redacted_args.clone(),
        decision: Box::new(verdict.row.clone()),
        enforced: daemon.enforced(),
        policy: Some(policy.version().to_owned()),
        conversation: None,
    };
    if daemon.audit.record(&row).await.is_err() {
        return refused("not run: the audit log is unavailable".into(), false);
    }
    let message = policy.caller_message(&verdict);
    let plan = match (verdict.row.decision, verdict.plan) {
        (Decision::Allow | Decision::Escalate, Some(plan)) => plan,
        _ => return refused(message, false),
    };
    // The changed call is a call the tool's judges have not seen: they judge it as they
    // judged the one sent, or an approver's arguments would pass every judge unseen.
    let subject = Subject {
        call: ProposedCall::shown(policy, &intent.tool, &intent.args, &plan),
        plan: plan.clone(),
        ..e.subject.clone()
    };
    for j in policy.judges_of(&intent.tool) {
        let v = judge::judge(daemon, j, &subject).await;
        if v.allowed {
            continue;
        }
        if !policy.settings().disclose_reasons {
            return refused("blocked by policy".into(), false);
        }
        let why = v.reason.unwrap_or_default();
        return refused(
            match v.reasoning.filter(|r| !r.is_empty()) {
                Some(r) => format!("{why}: {r}"),
                None => why,
            },
            false,
        );
    }
    Approved::Run(Box::new(plan))
}
