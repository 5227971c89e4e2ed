//! An `exec` or `resume` request: admitted, reviewed, held for a human if the review says so,
//! then launched; the connection is the call's for its whole life.

use std::{io, sync::Arc};

use crate::{
    call::{calls::Admission, intent::Intent, peer::Peer, plan::LaunchPlan, stages::Stages},
    daemon::Daemon,
    launch::{Start, carry_out},
    protocol::{CallOptions, ErrorReply, ExecReply, ExecRequest, ResumeRequest, conn::Conn},
    review::{self, hold},
};

use super::admit;

/// Handles an `exec` request; the connection is the call's for its whole life.
pub(super) async fn exec(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    req: ExecRequest,
    mut ctx: CallOptions,
    mut conn: Conn,
) -> io::Result<()> {
    let mut stages = Stages::start();
    let intent = Intent {
        tool: req.tool,
        args: req.args,
        cwd: ctx.cwd.take(),
        caller: Some(peer.uid),
    };
    let Some(stdio) = admit::stdio(&mut conn).await? else {
        return Ok(());
    };
    if !admit::admits(daemon, peer, Some(&intent.tool), &mut conn).await? {
        return Ok(());
    }
    let label = ctx.label.as_deref();
    let Some(_agent) = admit::agent(daemon, peer, Some((&intent.tool, label)), &mut conn).await?
    else {
        return Ok(());
    };
    let Some(admission) = daemon.calls.admit(peer.uid).await else {
        return conn.reply(&ExecReply::Error(admit::busy())).await;
    };
    stages.lap("slot");
    let call_id = daemon.calls.new_id();
    let review = review::Review {
        daemon,
        peer,
        intent: &intent,
        ctx: &ctx,
        call_id: &call_id,
    };
    let next = review.run(&mut conn, &mut stages).await?;
    let (plan, admission, start) = match next {
        review::Next::Run { plan, recording } => (*plan, admission, Start::decided(recording)),
        review::Next::Done => return Ok(()),
        review::Next::Hold(h) => {
            // A call waiting for a human takes no slot: running calls are what slots bound.
            drop(admission);
            let hold::Waited::Approved(by) =
                hold::hold(daemon, peer, *h, &mut conn, &stdio[0]).await?
            else {
                return Ok(());
            };
            stages.lap("approval");
            let Some((plan, program, admission)) =
                collect(daemon, peer.uid, &call_id, &mut conn).await?
            else {
                return Ok(());
            };
            (plan, admission, Start::approved(by, program))
        }
    };
    carry_out(
        daemon,
        peer,
        &call_id,
        &plan,
        start,
        (conn, stdio, admission, stages),
    )
    .await
}

/// Handles a `resume` request: the caller of a held call comes back for it, and it runs as it
/// was held once approved.
pub(super) async fn resume(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    req: &ResumeRequest,
    mut conn: Conn,
) -> io::Result<()> {
    let call_id = req.call_id.as_str();
    let mut stages = Stages::start();
    let Some(stdio) = admit::stdio(&mut conn).await? else {
        return Ok(());
    };
    let hold::Waited::Approved(by) = hold::resume(daemon, peer, req, &mut conn).await? else {
        return Ok(());
    };
    stages.lap("approval");
    if !admit::admits(daemon, peer, None, &mut conn).await? {
        return Ok(());
    }
    // The caller coming back is the call's agent (`hold::resume`), admitted as for a new call
    // of it: within its `max_running` and `rate`; its tools, tier and labels are checked
    // again where the call is collected (`answer::barred`).
    let held = daemon.approvals.get(call_id);
    let tool = held.as_ref().map(|h| (h.tool.as_str(), h.label.as_deref()));
    let Some(_agent) = admit::agent(daemon, peer, tool, &mut conn).await? else {
        return Ok(());
    };
    let Some((plan, program, admission)) = collect(daemon, peer.uid, call_id, &mut conn).await?
    else {
        return Ok(());
    };
    let start = Start::approved(by, program);
    carry_out(
        daemon,
        peer,
        call_id,
        &plan,
        start,
        (conn, stdio, admission, stages),
    )
    .await
}

/// A slot for an approved held call, then the call itself out of the store (its plan and its
/// program's SHA-256). Busy leaves the call approved, for a later `resume`.
async fn collect<'d>(
    daemon: &'d Daemon,
    uid: u32,
    call_id: &str,
    conn: &mut Conn,
) -> io::Result<Option<(LaunchPlan, String, Admission<'d>)>> {
    let Some(admission) = daemon.calls.admit(uid).await else {
        let e = ErrorReply::new(format!(
            "busy: too many calls queued; call {call_id} stays approved: run it with \
             guard-exec --resume {call_id}"
        ));
        return conn.reply(&ExecReply::Error(e)).await.map(|()| None);
    };
    Ok(hold::collect(daemon, call_id, conn)
        .await?
        .map(|(plan, program)| (plan, program, admission)))
}
