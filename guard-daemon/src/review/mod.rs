//! From a call's intent to what happens to it: the policy's decision (recorded durably before
//! anything else happens), then, for a call that may run, its judges, and for an escalated one
//! its approvers, until it runs, is held for a human, or is refused.
//!
//! A call the policy allows outright, with no judge to run first, leaves here with its decision
//! row still on its way to disk (a [`Recording`]): the launch is prepared meanwhile, and the call
//! starts, and its caller hears "allow", only once the row is written (`launch::Call::launch`).

pub mod answer;
pub mod approver;
pub mod confined;
pub mod hold;
pub mod input;
pub mod judge;
pub mod notifier;
mod terminate;

use std::{io, sync::Arc};

use crate::{
    audit::{Durable, Row},
    bus::What,
    call::{
        decision::{Decision, Stage},
        intent::Intent,
        peer::Peer,
        plan::{Enforce, LaunchPlan, Stdin},
        stages::Stages,
    },
    daemon::Daemon,
    policy::{Policy, Verdict, helpers::Choices},
    protocol::{CallOptions, CallerStdin, ExecReply, conn::Conn, reply::CallDecision},
    review::hold::ToHold,
};
use approver::{Approved, Escalated};
use judge::{ProposedCall, Subject};

/// The `check_name` of a call refused because its tool reads the caller's stdin and the
/// caller has none to give.
pub const STDIN_CHECK: &str = "stdin";

/// What comes after the review.
#[derive(Debug)]
pub enum Next {
    /// Run this plan, once its decision row, if still `recording`, is written.
    Run {
        plan: Box<LaunchPlan>,
        recording: Option<Recording>,
    },
    /// Hold it for a human.
    Hold(Box<ToHold>),
    /// Nothing runs; the caller has been told why, or is gone.
    Done,
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

/// A decision row on its way to disk: the call it allows may be prepared meanwhile, but it does
/// not start, and its caller hears nothing, until [`Recording::written`] says the row is there.
#[derive(Debug)]
pub struct Recording {
    durable: Durable,
    gate: crate::call::gate::Gate,
    call_id: String,
    tool: String,
    enforce: Enforce,
    what: What,
}

impl Recording {
    /// The gate the writer opens once the row is on disk (`call::gate`).
    pub fn gate(&self) -> crate::call::gate::Gate {
        self.gate.clone()
    }

    /// Waits for the row and publishes the decision; false when it could not be written, and
    /// then the call must not run.
    pub async fn written(self, daemon: &Daemon) -> bool {
        match self.durable.written().await {
            Ok(_) => {
                (daemon.bus).call_in(&self.call_id, &self.tool, self.enforce, self.what);
                true
            }
            Err(e) => {
                tracing::error!(call = %self.call_id, "audit log unavailable, blocking: {e}");
                false
            }
        }
    }
}

/// Where a call's decision row is.
enum Recorded {
    /// On disk.
    Written,
    /// Still being written: the call runs once it is (see [`Recording`]).
    Writing(Next),
    /// Not written: the call does not run.
    Failed,
}

/// Refuses a call whose decision could not be recorded (fail closed).
pub async fn not_recorded(call_id: &str, conn: &mut Conn) -> io::Result<Next> {
    let message = "blocked: the audit log is unavailable".to_owned();
    let reply = refusal(call_id, Decision::Block, message, false);
    conn.reply(&reply).await.map(|()| Next::Done)
}

/// One call under review.
pub struct Review<'a> {
    pub daemon: &'a Arc<Daemon>,
    pub peer: &'a Peer,
    pub intent: &'a Intent,
    /// What the caller of `exec` brought besides the call (its `cwd` is the intent's).
    pub ctx: &'a CallOptions,
    pub call_id: &'a str,
}

impl Review<'_> {
    /// Decides the call, records the decision durably, and sends it through the judges and
    /// approvers the policy names for it.
    pub async fn run(&self, conn: &mut Conn, stages: &mut Stages) -> io::Result<Next> {
        let (daemon, call_id) = (self.daemon, self.call_id);
        let policy = daemon.policy_for(self.intent);
        let verdict = self.decide(&policy);
        stages.lap("decide");
        match self.record(&policy, &verdict).await {
            Recorded::Written => {}
            Recorded::Writing(next) => return Ok(next),
            Recorded::Failed => return not_recorded(call_id, conn).await,
        }
        stages.lap("audit_decision");
        let decision = verdict.row.decision;
        (self.daemon.reasons).keep(call_id, &self.intent.tool, self.peer.uid, &verdict.row);
        let message = policy.caller_message(&verdict);
        let Some(plan) = verdict.plan.clone() else {
            self.blocked(decision);
            let terminated = verdict.row.check_name == "session";
            let reply = refusal(call_id, decision, message, terminated);
            return conn.reply(&reply).await.map(|()| Next::Done);
        };
        let subject = self.subject(&policy, &plan);
        if let Some(why) = self.judged(&policy, &subject, stages).await {
            self.blocked(Decision::Block);
            let reply = refusal(call_id, Decision::Block, why, false);
            return conn.reply(&reply).await.map(|()| Next::Done);
        }
        if decision == Decision::Allow {
            return self.unless_reloaded(&policy, Box::new(plan), conn).await;
        }
        let mut choices = Choices::default();
        if decision == Decision::Escalate {
            let escalated = Escalated {
                peer: self.peer,
                intent: self.intent,
                ctx: self.ctx,
                reason: &verdict.row.reason,
                subject,
            };
            match approver::approvers(daemon, &policy, &escalated).await {
                Approved::Run(plan) => return self.unless_reloaded(&policy, plan, conn).await,
                Approved::Human(c) => choices = c,
                Approved::Refused {
                    message,
                    terminated,
                } => {
                    self.blocked(Decision::Block);
                    let reply = refusal(call_id, decision, message, terminated);
                    return conn.reply(&reply).await.map(|()| Next::Done);
                }
            }
        }
        let mut held = self.to_hold(&policy, verdict, plan, message);
        // A quarantined call meets no approver, but the first one that would refuse it still
        // binds what its admin may answer.
        let approvers = policy.approvers_of(&self.intent.tool);
        held.choices = choices.and(Choices::of(&approvers));
        Ok(Next::Hold(Box::new(held)))
    }

    /// The call to hold for a human, as `policy` decided it (`verdict`, `plan`); its caller is
    /// told `message`.
    fn to_hold(
        &self,
        policy: &Policy,
        verdict: Verdict,
        plan: LaunchPlan,
        message: String,
    ) -> ToHold {
        // A secret's value in the arguments is kept nowhere, the store included: such a call
        // is held masked, and can only be denied.
        let holds_secret = verdict.row.metadata.stage == Some(Stage::Secret);
        let shown = policy.shown_args(&self.intent.args);
        ToHold {
            call_id: self.call_id.to_owned(),
            decision: verdict.row.decision,
            reason: verdict.row.reason,
            message,
            session: self.ctx.session.clone(),
            agent: verdict.row.metadata.agent,
            label: self.ctx.label.clone(),
            no_wait: self.ctx.no_wait,
            args: if holds_secret {
                shown.clone()
            } else {
                self.intent.args.clone()
            },
            shown: serde_json::Value::Object(shown),
            redacted: verdict.redacted_args,
            holds_secret,
            plan: if holds_secret {
                policy.shown_serde(plan)
            } else {
                plan
            },
            policy: policy.version().to_owned(),
            cwd: self.intent.cwd.clone(),
            choices: Choices::default(),
            conversation: (!self.ctx.context.is_empty())
                .then(|| policy.shown(self.ctx.context.as_json())),
        }
    }

    /// Runs `plan`, decided under `policy`, unless a reload put another policy in force while
    /// its judges or approvers ran: what they passed is a call that policy decided, and the
    /// one in force now may block it, give it another plan, or name other judges. Then a
    /// decision row of the same call records the refusal and its caller is told to submit it
    /// again (a held call is asked again when it is approved: `answer::barred`).
    async fn unless_reloaded(
        &self,
        policy: &Policy,
        plan: Box<LaunchPlan>,
        conn: &mut Conn,
    ) -> io::Result<Next> {
        let now = self.daemon.policy_for(self.intent);
        if now.version() == policy.version() {
            return Ok(Next::Run {
                plan,
                recording: None,
            });
        }
        let reason = format!(
            "the policy changed while the call was reviewed ({} then, {} now); submit it again",
            policy.version(),
            now.version()
        );
        let mut verdict = self.decide(&now);
        verdict.row.decision = Decision::Block;
        verdict.row.check_name = "reload".into();
        verdict.row.reason.clone_from(&reason);
        let recorded = match self.submit(&now, &verdict).await {
            Some(recording) => recording.written(self.daemon).await,
            None => false,
        };
        if !recorded {
            return not_recorded(self.call_id, conn).await;
        }
        let message = if now.settings().disclose_reasons {
            format!("not run: {reason}")
        } else {
            "blocked by policy".to_owned()
        };
        let reply = refusal(self.call_id, Decision::Block, message, false);
        conn.reply(&reply).await.map(|()| Next::Done)
    }

    /// The policy's verdict; a terminated session's calls are blocked whatever it says, and
    /// a call of a tool without a command is blocked saying so (an `exec` of it would have
    /// nothing to run; a `check` of it is decided as the policy says).
    fn decide(&self, policy: &Policy) -> Verdict {
        let mut verdict = policy.decide(self.intent);
        verdict.row.set_audit_entry_id(self.call_id.to_owned());
        if verdict.plan.is_none() && verdict.row.decision != Decision::Block {
            verdict.row.decision = Decision::Block;
            verdict.row.check_name = crate::policy::NO_COMMAND.into();
            verdict.row.reason = format!(
                "tool '{}' has no command in the policy: it can be checked (guardctl check, \
                 a hook) but not run; give it a command to run it",
                self.intent.tool
            );
        }
        let session = self.ctx.session.as_deref();
        if let Some(t) = session.and_then(|s| self.daemon.sessions.blocks(self.peer.uid, s)) {
            verdict.row.decision = Decision::Block;
            verdict.row.check_name = "session".into();
            verdict.row.reason = format!(
                "session '{}' was terminated by {} (call {}); an admin clears it with \
                 guardctl sessions --clear",
                t.session, t.by, t.call_id
            );
            verdict.plan = None;
        }
        let reads_caller = |p: &LaunchPlan| p.confinement.stdin == Stdin::Caller;
        if self.ctx.stdin == CallerStdin::None && verdict.plan.as_ref().is_some_and(reads_caller) {
            // Fail closed: the tool would read an empty stdin it did not ask for.
            verdict.row.decision = Decision::Block;
            verdict.row.check_name = STDIN_CHECK.into();
            verdict.row.reason = format!(
                "tool '{}' reads its caller's stdin (stdin = \"caller\" in the policy), and \
                 this exec has none to give (\"stdin\": \"none\"); nothing ran",
                self.intent.tool
            );
            verdict.plan = None;
        }
        self.agent_rules(policy, &mut verdict);
        self.daemon.probes.rule(self.peer.uid, &mut verdict);
        verdict
    }

    /// The caller's agent, named on the row (`agents::rule`); a terminated agent's calls are
    /// blocked whatever the policy says.
    fn agent_rules(&self, policy: &Policy, verdict: &mut Verdict) {
        let label = self.ctx.label.as_deref();
        let Some(agent) =
            crate::callers::agents::rule(policy, self.peer, &self.intent.tool, label, verdict)
        else {
            return;
        };
        let session = crate::callers::agents::session(&agent.name);
        if let Some(t) = self.daemon.sessions.blocks_everyone(&session) {
            verdict.row.decision = Decision::Block;
            verdict.row.check_name = "session".into();
            verdict.row.reason = format!(
                "agent '{}' was terminated by {} (call {}); an admin clears it with \
                 guardctl sessions --clear {session}",
                agent.name, t.by, t.call_id
            );
            verdict.plan = None;
        }
        if verdict.row.decision == Decision::Block {
            self.daemon.agents.blocked(&agent.name);
        }
    }

    /// Records the decision: a plain allowed call (no judge to run first) leaves to be prepared
    /// while its row is being written; every other waits here for the row.
    async fn record(&self, policy: &Policy, verdict: &Verdict) -> Recorded {
        let Some(recording) = self.submit(policy, verdict).await else {
            return Recorded::Failed;
        };
        let plain = verdict.row.decision == Decision::Allow
            && policy.judges_of(&self.intent.tool).is_empty();
        if let (true, Some(plan)) = (plain, &verdict.plan) {
            return Recorded::Writing(Next::Run {
                plan: Box::new(plan.clone()),
                recording: Some(recording),
            });
        }
        if recording.written(self.daemon).await {
            Recorded::Written
        } else {
            Recorded::Failed
        }
    }

    /// Queues the decision row of `policy`'s verdict; `None` when it could not even be queued.
    async fn submit(&self, policy: &Policy, verdict: &Verdict) -> Option<Recording> {
        let row = Row::Decision {
            call_id: self.call_id.to_owned(),
            peer: self.peer.clone(),
            tool: self.intent.tool.clone(),
            args: verdict.redacted_args.clone(),
            decision: Box::new(verdict.row.clone()),
            enforced: self.daemon.enforced(),
            policy: Some(policy.version().to_owned()),
            conversation: (!self.ctx.context.is_empty())
                .then(|| policy.logged(&self.intent.tool, &self.ctx.context.as_json())),
        };
        match self.daemon.audit.submit(&row).await {
            Ok((durable, gate)) => Some(Recording {
                durable,
                gate,
                call_id: self.call_id.to_owned(),
                tool: self.intent.tool.clone(),
                enforce: verdict.row.metadata.enforce.unwrap_or_default(),
                what: What::Decision {
                    decision: verdict.row.decision,
                    reason: verdict.row.reason.clone(),
                    uid: self.peer.uid,
                    agent: verdict.row.metadata.agent.clone(),
                    would_block: verdict.row.metadata.would_block,
                },
            }),
            Err(e) => {
                tracing::error!(call = %self.call_id, "audit log unavailable, blocking: {e}");
                None
            }
        }
    }

    /// Remembers a block for the judges' `policy_violations`.
    fn blocked(&self, decision: Decision) {
        if decision == Decision::Block {
            let session = self.ctx.session.as_deref();
            (self.daemon.violations).blocked(self.peer, session, &self.intent.tool);
        }
    }

    /// The call as its judges and approvers see it.
    fn subject(&self, policy: &Policy, plan: &LaunchPlan) -> Subject {
        Subject {
            call_id: self.call_id.to_owned(),
            task: self.ctx.task.clone(),
            call: ProposedCall::shown(policy, &self.intent.tool, &self.intent.args, plan),
            conversation: (!self.ctx.context.is_empty())
                .then(|| policy.shown(self.ctx.context.as_json())),
            plan: plan.clone(),
            available_tools: policy.tools().map(str::to_owned).collect(),
            policy_violations: (self.daemon.violations)
                .recent(self.peer, self.ctx.session.as_deref()),
        }
    }

    /// Runs the tool's judges in order; the message for the caller when one rejects. The
    /// judge's reasoning reaches the caller only when reasons are disclosed.
    async fn judged(
        &self,
        policy: &Policy,
        subject: &Subject,
        stages: &mut Stages,
    ) -> Option<String> {
        for j in policy.judges_of(&self.intent.tool) {
            let v = judge::judge(self.daemon, j, subject).await;
            stages.lap("judge");
            if v.allowed {
                continue;
            }
            let why = v.reason.unwrap_or_default();
            let why = match v.reasoning.filter(|r| !r.is_empty()) {
                Some(r) => format!("{why}: {r}"),
                None => why,
            };
            // The call's own uid reads it (`guardctl why`); the agent only when disclosed.
            let (tool, uid) = (&self.intent.tool, self.peer.uid);
            (self.daemon.reasons).judged(self.call_id, tool, uid, &j.name, why.clone());
            if !policy.settings().disclose_reasons {
                return Some("blocked by policy".to_owned());
            }
            return Some(why);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    /// The refusals the caller hears whatever the policy discloses name these checks.
    #[test]
    fn the_told_checks_are_the_review_s_and_the_agents() {
        let told = crate::policy::TOLD;
        assert!(told.contains(&super::STDIN_CHECK));
        assert!(told.contains(&crate::callers::agents::CHECK));
    }
}
