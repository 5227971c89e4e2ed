//! A call held for a human, from the hold to the answer: held durably with the digest of its
//! canonical form, its caller told (and waiting, or gone with `no_wait`), the operator notified;
//! then answered by an admin (`approve`, `deny`), the clock, or its caller leaving. Every answer
//! is an audit row before anyone acts on it; an approved call is taken out of the store just
//! before it runs, and only while its program is still the one held.

use std::{io, os::fd::OwnedFd, sync::Arc};

use serde_json::{Map, Value};

use super::answer::{Answer, barred, record_answer, withdraw};
use crate::{
    approval::{ApprovalError, Attached, Held, Record, Resolution, digest::CallForm, input::Shown},
    audit::Row,
    bus::What,
    call::{
        decision::Decision,
        peer::Peer,
        plan::{LaunchPlan, Stdin},
    },
    callers::access::Role,
    daemon::Daemon,
    policy::helpers::Choices,
    protocol::{
        ExecReply, ResumeMode, ResumeRequest,
        conn::Conn,
        reply::{CallDecision, Hold},
    },
};

/// A call the policy (and its approvers) left to a human.
#[derive(Debug)]
pub struct ToHold {
    pub call_id: String,
    pub decision: Decision,
    /// Why, as the audit row says it.
    pub reason: String,
    /// What the caller is told.
    pub message: String,
    pub session: Option<String>,
    /// The caller's agent, and what it said it is within it.
    pub agent: Option<String>,
    pub label: Option<String>,
    pub no_wait: bool,
    /// The arguments as sent, as admins are shown them (`Policy::shown`), and as the log keeps
    /// them (for the notifier).
    pub args: Map<String, Value>,
    pub shown: Value,
    pub redacted: Value,
    /// An argument holds a secret's value: `args` are masked, and it can only be denied.
    pub holds_secret: bool,
    pub plan: LaunchPlan,
    /// The version of the policy that decided the call, which its approval is checked against
    /// (not the one in force when it is held: a reload may come while its judges run).
    pub policy: String,
    /// The caller's working directory, as the call was decided with it.
    pub cwd: Option<std::path::PathBuf>,
    /// What an admin may answer it with (its human approver's `choices`).
    pub choices: Choices,
    /// The model's message and history the call came with, shown as its arguments are.
    pub conversation: Option<Value>,
}

/// What became of a waiting caller's call.
#[derive(Debug)]
pub enum Waited {
    /// Approved by this uid: collect it with [`collect`] once the call has a slot.
    Approved(u32),
    /// Not run; the caller has been told why, or is gone.
    Done,
}

/// Tells the caller its call does not run (the last reply).
async fn refuse(
    conn: &mut Conn,
    call_id: &str,
    decision: Decision,
    message: String,
) -> io::Result<()> {
    let reply = ExecReply::Decision(CallDecision {
        call_id: call_id.to_owned(),
        decision,
        message: Some(message),
        approved_by: None,
        terminated: false,
    });
    conn.reply(&reply).await
}

/// Holds a call, durably, tells its caller and the operator's notifier, and waits with the
/// caller for the answer (unless the caller said `no_wait`). `stdin` is the caller's stream,
/// read whole now when the tool reads it.
pub async fn hold(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    mut h: ToHold,
    conn: &mut Conn,
    stdin: &OwnedFd,
) -> io::Result<Waited> {
    let (call_id, decision) = (h.call_id.clone(), h.decision);
    // Root and admins are held within the total alone: their calls keep the reserve.
    let privileged =
        (daemon.access.read().unwrap_or_else(|p| p.into_inner())).permits(peer, Role::Admin);
    // A uid at its bound is refused before guardd reads any input for it (an outside pass's
    // F5: each of its connections kept a read going for 10 s before its refusal).
    let admitted = daemon.approvals.may_hold(peer.uid, privileged);
    let formed = match admitted {
        Ok(()) => form_of(daemon, &mut h, stdin).await,
        Err(e) => Err(e.to_string()),
    };
    let (form, input) = match formed {
        Ok(form) => form,
        Err(why) => {
            let why = format!("not held: {why}");
            record_answer(daemon, &call_id, &h.plan.tool, Answer::nobody(&why, None)).await;
            return refuse(conn, &call_id, decision, why)
                .await
                .map(|()| Waited::Done);
        }
    };
    let mut rec = record_of(peer.uid, &h, form);
    rec.held.input = input;
    let held = rec.held.clone();
    let digest = held.digest.clone();
    if let Err(e) = daemon.approvals.hold(rec, privileged) {
        // Not held, so never run: a row says why, as for every other end of a held call.
        let why = format!("not held: {e}");
        let answer = Answer::nobody(&why, Some(held.digest.clone()));
        record_answer(daemon, &call_id, &held.tool, answer).await;
        return refuse(conn, &call_id, decision, e.to_string())
            .await
            .map(|()| Waited::Done);
    }
    // A caller that does not wait is no waiter, even for a moment: a `resume` it sends as
    // soon as it hears of the hold (guard-mcp's watch) finds the call free to attach to.
    let attached = (!h.no_wait).then(|| daemon.approvals.attach(&call_id, peer.uid, false));
    let rx = match attached {
        Some(Ok(Attached::Waiting(rx))) => Some(rx),
        Some(Ok(Attached::Approved(_)) | Err(_)) | None => None,
    };
    let timeout_s = daemon.approvals.timeout.as_secs();
    let waiting = Hold {
        call_id: call_id.clone(),
        decision,
        message: h.message.clone(),
        timeout_s,
        digest,
    };
    record_held(daemon, &held, timeout_s).await;
    let told = conn.reply(&ExecReply::Pending(waiting)).await;
    // Listed to admins once its caller knows its id (a guardd stopped before that leaves a
    // caller that cannot resume it, and an answer nobody is told of).
    daemon.approvals.told(&call_id);
    let what = What::Held {
        decision,
        reason: h.message,
        uid: peer.uid,
        timeout_s,
    };
    daemon.bus.call(&call_id, &held.tool, what);
    crate::review::notifier::spawn(daemon, &held, h.redacted);
    if let Err(e) = told {
        if !h.no_wait {
            withdraw(
                daemon,
                &call_id,
                "the caller went away while waiting for approval",
            )
            .await;
        }
        return Err(e);
    }
    match rx {
        None if h.no_wait => Ok(Waited::Done),
        Some(rx) => wait(daemon, &call_id, decision, rx, conn, false).await,
        None => refuse(conn, &call_id, decision, "withdrawn".into())
            .await
            .map(|()| Waited::Done),
    }
}

/// The form of a call about to be held, with its input read from the caller's stream when its
/// tool reads it (and what admins are shown of that input); why it cannot be held otherwise.
/// An input that held a secret's value marks the call as holding one.
async fn form_of(
    daemon: &Daemon,
    h: &mut ToHold,
    stdin: &OwnedFd,
) -> Result<(CallForm, Option<Shown>), String> {
    let mut form = CallForm::new(&h.plan.tool, &h.args, &h.plan, &h.policy).map_err(|e| {
        let program = h.plan.argv.first().map(|p| p.to_string_lossy());
        format!("its program {program:?} cannot be read: {e}")
    })?;
    form.cwd.clone_from(&h.cwd);
    if h.plan.confinement.stdin != Stdin::Caller {
        return Ok((form, None));
    }
    let read = super::input::read(daemon, stdin)
        .await
        .map_err(|e| e.to_string())?;
    h.holds_secret |= read.holds_secret;
    form.input = Some(read.input);
    Ok((form, Some(read.shown)))
}

/// The record of a call about to be held.
fn record_of(uid: u32, h: &ToHold, form: CallForm) -> Record {
    let held = Held {
        call_id: h.call_id.clone(),
        tool: h.plan.tool.clone(),
        decision: h.decision,
        reason: h.reason.clone(),
        uid,
        args: h.shown.clone(),
        since: crate::audit::ts::now(),
        digest: form.digest(),
        program: form.program.path.to_string_lossy().into_owned(),
        session: h.session.clone(),
        approved_by: None,
        no_wait: h.no_wait,
        agent: h.agent.clone(),
        label: h.label.clone(),
        holds_secret: h.holds_secret,
        input: None,
        choices: h.choices,
        conversation: h.conversation.clone(),
    };
    Record {
        held,
        form,
        expires: 0,
    }
}

/// Meets a held call again (`resume`): waits for its answer as its caller, or collects it
/// when it was approved meanwhile; in `release` mode a call still held is only said to be
/// (`pending`), and in `watch` mode its answer is said and the call not run. Only the uid that
/// submitted the call may.
pub async fn resume(
    daemon: &Daemon,
    peer: &Peer,
    req: &ResumeRequest,
    conn: &mut Conn,
) -> io::Result<Waited> {
    let (call_id, mode) = (req.call_id.as_str(), req.mode);
    let block = Decision::Block;
    let held = daemon.approvals.get(call_id);
    if let Some(why) = held.as_ref().and_then(|h| not_its_agent(daemon, peer, h)) {
        return refuse(conn, call_id, block, why)
            .await
            .map(|()| Waited::Done);
    }
    // Another uid's call is refused below, as `attach` refuses it, telling nothing of it.
    if mode == ResumeMode::Release
        && let Some(h) = (held.as_ref()).filter(|h| h.approved_by.is_none() && h.uid == peer.uid)
    {
        // Not attached: a watcher of the call (guard-mcp's) keeps waiting for its answer.
        conn.reply(&ExecReply::Pending(pending(daemon, h))).await?;
        return Ok(Waited::Done);
    }
    let watching = mode == ResumeMode::Watch;
    let waited = match (daemon.approvals.attach(call_id, peer.uid, watching), held) {
        (Ok(Attached::Approved(by)), _) => Waited::Approved(by),
        (Ok(Attached::Waiting(rx)), Some(held)) => {
            conn.reply(&ExecReply::Pending(pending(daemon, &held)))
                .await?;
            // Only a caller waiting as it was held withdraws the call by leaving.
            let stays = held.no_wait || mode != ResumeMode::Wait;
            wait(daemon, call_id, held.decision, rx, conn, stays).await?
        }
        (Ok(Attached::Waiting(_)), None) => {
            let e = ApprovalError::NotHeld(call_id.to_owned());
            refuse(conn, call_id, block, e.to_string()).await?;
            Waited::Done
        }
        (Err(e), _) => {
            let message = match e {
                // Another uid's call is told apart from none: the same words.
                ApprovalError::NotHeld(_) | ApprovalError::NotYours(_) => format!(
                    "no call {call_id} is held: it was denied, expired, withdrawn or has run \
                     (guardctl show {call_id})"
                ),
                e => e.to_string(),
            };
            refuse(conn, call_id, block, message).await?;
            Waited::Done
        }
    };
    match waited {
        Waited::Approved(by) if mode == ResumeMode::Watch => {
            daemon.approvals.detach(call_id);
            conn.reply(&ExecReply::Decision(CallDecision {
                call_id: call_id.to_owned(),
                decision: Decision::Allow,
                message: Some(format!("approved: release call {call_id} to run it")),
                approved_by: Some(by),
                terminated: false,
            }))
            .await?;
            Ok(Waited::Done)
        }
        waited => Ok(waited),
    }
}

/// What a caller of held call `held` is told while it waits.
fn pending(daemon: &Daemon, held: &Held) -> Hold {
    Hold {
        call_id: held.call_id.clone(),
        decision: held.decision,
        message: "held for review".into(),
        timeout_s: daemon.approvals.timeout.as_secs(),
        digest: held.digest.clone(),
    }
}

/// Why `peer` may not resume `held`, its own uid's call: it is not the agent that made it (two
/// agents of one uid, told apart by their cgroups, are two callers).
fn not_its_agent(daemon: &Daemon, peer: &Peer, held: &Held) -> Option<String> {
    if held.uid != peer.uid {
        // The store refuses it, as for any call of another uid.
        return None;
    }
    let policy = daemon.policy();
    let now = match crate::callers::agents::of(&policy, peer) {
        Ok(agent) => agent.map(|a| a.name.as_str()),
        // The policy names agents, and this caller is none of them (or several).
        Err(why) => return Some(why),
    };
    if now == held.agent.as_deref() {
        return None;
    }
    let who = |a: Option<&str>| a.map_or("no agent".to_owned(), |a| format!("agent '{a}'"));
    Some(format!(
        "not permitted: call {} was made by {}, and only it may resume it (this caller is {})",
        held.call_id,
        who(held.agent.as_deref()),
        who(now)
    ))
}

/// Waits for the answer with the caller on `conn`. A caller that leaves withdraws its call,
/// unless it was held with `no_wait`.
async fn wait(
    daemon: &Daemon,
    call_id: &str,
    decision: Decision,
    rx: tokio::sync::oneshot::Receiver<Resolution>,
    conn: &mut Conn,
    no_wait: bool,
) -> io::Result<Waited> {
    let answer = tokio::select! {
        answer = rx => match answer {
            Ok(answer) => answer,
            // A watcher a caller displaced, the call still held: it is no answer.
            Err(_) if daemon.approvals.get(call_id).is_some() => {
                let why = format!("another caller of call {call_id} is waiting for it now");
                return refuse(conn, call_id, Decision::Block, why)
                    .await
                    .map(|()| Waited::Done);
            }
            Err(_) => Resolution::Denied { reason: "withdrawn".into() },
        },
        _ = conn.closed() => {
            if no_wait {
                daemon.approvals.detach(call_id);
            } else {
                withdraw(daemon, call_id, "the caller went away while waiting for approval").await;
            }
            return Ok(Waited::Done);
        }
    };
    match answer {
        Resolution::Approved { by } => Ok(Waited::Approved(by)),
        Resolution::Denied { reason } => {
            let message = format!("not approved: {reason}");
            refuse(conn, call_id, decision, message)
                .await
                .map(|()| Waited::Done)
        }
    }
}

/// Takes an approved call out of the store to run it, once its program is checked to be the
/// one held: its plan, and its program's SHA-256, which the launch binds to (`Ready::pin`).
/// `None` when it does not run (its caller has been told why).
pub async fn collect(
    daemon: &Daemon,
    call_id: &str,
    conn: &mut Conn,
) -> io::Result<Option<(LaunchPlan, String)>> {
    // Taken under the answers' lock: an answer (a late deny, the clock) recorded before this
    // ends the call first, and one after it finds the call gone, so no row records an answer
    // the call overtook.
    let taken = {
        let _one = daemon.approvals.answering.lock().await;
        daemon.approvals.take(call_id)
    };
    let record = match taken {
        Ok(r) => r,
        Err(e) => {
            return refuse(conn, call_id, Decision::Block, e.to_string())
                .await
                .map(|()| None);
        }
    };
    let changed = record.form.program.changed();
    if let Some(why) = changed.or_else(|| barred(daemon, &record.held, &record.form)) {
        let digest = Some(record.held.digest.clone());
        record_answer(
            daemon,
            call_id,
            &record.held.tool,
            Answer::nobody(&why, digest),
        )
        .await;
        let message = format!("not run: {why}");
        return refuse(conn, call_id, record.held.decision, message)
            .await
            .map(|()| None);
    }
    let sha256 = record.form.program.sha256.clone();
    Ok(Some((record.form.launch_plan(), sha256)))
}

/// Writes the `held` row, for the history (`guardctl events --kind held`). The hold is durable in
/// the store already, so a row that cannot be written is logged, not fatal: the answer's row,
/// which gates the run, is written whatever became of this one.
async fn record_held(daemon: &Daemon, held: &Held, timeout_s: u64) {
    let row = Row::Held {
        call_id: held.call_id.clone(),
        tool: held.tool.clone(),
        decision: held.decision,
        reason: held.reason.clone(),
        uid: held.uid,
        timeout_s,
        digest: held.digest.clone(),
    };
    if let Err(e) = daemon.audit.record(&row).await {
        tracing::error!(call = %held.call_id, "audit log unavailable for the held row: {e}");
    }
}
