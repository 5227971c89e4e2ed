//! One `exec` request, from decision to receipt: decide, record the decision durably, then, for
//! an allowed call, bind the kernel to it (cgroup, destinations), launch it confined, follow it
//! to its end, and record what it did.

use std::{
    collections::HashMap,
    io,
    net::IpAddr,
    os::fd::OwnedFd,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use guard_common::{
    call::{CallConfig, FLAG_ENFORCE_EXEC, FLAG_KILL_ON_DIVERGENCE, FLAG_NET},
    net::PROTO_TCP,
};
use serde_json::{Map, Value, json};
use tokio::sync::SemaphorePermit;

use crate::{
    access::Peer,
    approval::{Held, Resolution},
    cgroup::Cgroup,
    conn::Conn,
    daemon::{Daemon, Running},
    decision::Decision,
    events::{BusEvent, Receipt, Tracked},
    intent::Intent,
    monitor::{Destination, Watch},
    plan::{Endpoint, LaunchPlan, OnDivergence},
    protocol::{self, ProtocolError},
    sandbox,
    stages::Stages,
};

/// Why an allowed call could not be carried through.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cgroup: {0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("kernel: {0}")]
    Monitor(#[from] crate::monitor::MonitorError),
    #[error("starting the call's DNS responder: {0}")]
    Dns(std::io::Error),
    #[error("resolving {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("launch: {0}")]
    Sandbox(#[from] sandbox::SandboxError),
}

pub(crate) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Handles an `exec` request; the connection is the call's for its whole life.
pub async fn exec(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    intent: Intent,
    mut conn: Conn,
) -> io::Result<()> {
    let mut stages = Stages::start();
    let fds = conn.take_fds();
    let Ok(stdio) = <[OwnedFd; 3]>::try_from(fds) else {
        let e = ProtocolError {
            message: "exec needs exactly 3 descriptors (stdin, stdout, stderr) with its frame"
                .into(),
            field: Some("fds".into()),
        };
        return conn.write(&protocol::error_frame(&e)).await;
    };
    if !daemon.audit.admits() {
        // Fail closed: the room left is for the rows of the calls already running.
        let message = "not admitted: the audit log's file system is full, and the room kept for \
                       running calls' rows is in use; guard admits calls again once it can \
                       reserve that room";
        daemon.bus.publish(BusEvent::new(
            "refused",
            None,
            Some(&intent.tool),
            json!({ "reason": message }),
        ));
        let e = ProtocolError {
            message: message.into(),
            field: None,
        };
        return conn.write(&protocol::error_frame(&e)).await;
    }
    let Some(_slot) = slot(daemon).await else {
        let e = ProtocolError {
            message: "busy: too many calls queued; try again later".into(),
            field: None,
        };
        return conn.write(&protocol::error_frame(&e)).await;
    };
    stages.lap("slot");

    let call_id = daemon.new_call_id();
    let policy = daemon.policy();
    let mut verdict = policy.decide(&intent);
    verdict.row.set_audit_entry_id(call_id.clone());
    let enforced = daemon.enforced();
    let row = json!({
        "kind": "decision",
        "call_id": call_id,
        "peer": peer,
        "tool": intent.tool,
        "args": verdict.redacted_args,
        "decision": verdict.row,
        "enforced": enforced,
    });
    stages.lap("decide");
    if let Err(e) = daemon.audit.append(object(row)).await {
        // Fail closed: a call whose decision cannot be recorded does not run.
        tracing::error!(call = %call_id, "audit log unavailable, blocking: {e}");
        let reply = json!({ "call_id": call_id, "decision": Decision::Block, "message": "blocked: the audit log is unavailable" });
        return conn.write(&protocol::frame("decision", reply)).await;
    }
    stages.lap("audit_decision");
    let decision = verdict.row.decision;
    daemon.bus.publish(BusEvent::new(
        "decision",
        Some(&call_id),
        Some(&intent.tool),
        json!({ "decision": decision, "reason": verdict.row.reason, "uid": peer.uid }),
    ));
    let message = policy.caller_message(&verdict);
    let (plan, approved_by) = match (decision, verdict.plan) {
        (Decision::Allow, Some(plan)) => (plan, None),
        (Decision::Escalate | Decision::Quarantine, Some(plan)) => {
            let held = Held {
                call_id: call_id.clone(),
                tool: intent.tool.clone(),
                decision,
                reason: verdict.row.reason.clone(),
                uid: peer.uid,
                args: verdict.redacted_args.clone(),
                since: crate::audit::ts::now(),
            };
            let answer = hold(daemon, held, &message, &mut conn).await?;
            stages.lap("approval");
            match answer {
                Some(by) => (plan, Some(by)),
                None => return Ok(()),
            }
        }
        _ => {
            let reply = json!({ "call_id": call_id, "decision": decision, "message": message });
            return conn.write(&protocol::frame("decision", reply)).await;
        }
    };
    let mut reply = json!({ "call_id": call_id, "decision": Decision::Allow });
    if let Some(by) = approved_by {
        reply["approved_by"] = by.into();
    }
    conn.write(&protocol::frame("decision", reply)).await?;
    stages.lap("reply_decision");

    let started = Instant::now();
    let result = run(daemon, &call_id, peer, &plan, stdio, &mut conn, &mut stages).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1e3;
    let (exit, sandbox_applied, receipt, error) = match result {
        Ok((outcome, applied, receipt)) => (Some(outcome), Some(applied), receipt, None),
        Err((e, receipt)) => (None, None, receipt, Some(e.to_string())),
    };
    let diverged = receipt.as_ref().is_some_and(|r| r.verdict == "diverged");
    let stopped = receipt.as_ref().is_some_and(|r| r.stopped);
    // A call guard stopped ends as SIGKILL for its caller, whichever signal reached its first
    // process first (seccomp's SIGSYS, or cgroup.kill's SIGKILL); the row keeps the real one.
    let code = exit.as_ref().map(|o| {
        if stopped {
            128 + libc::SIGKILL
        } else {
            o.exit_code
        }
    });
    let row = json!({
        "kind": "finished",
        "call_id": call_id,
        "tool": plan.tool,
        "sandbox": sandbox_applied,
        "effects_observed": receipt,
        "exit": exit,
        "error": error,
        "duration_ms": duration_ms,
        "timings_us": stages,
        "enforced": enforced,
    });
    stages.skip();
    if let Err(e) = daemon.audit.append(object(row)).await {
        tracing::error!(call = %call_id, "audit log unavailable for the finished row: {e}");
    }
    stages.lap("audit_finished");
    tracing::debug!(call = %call_id, total_us = stages.total().as_micros() as u64, "stages: {stages}");
    daemon.bus.publish(BusEvent::new(
        "exit",
        Some(&call_id),
        Some(&plan.tool),
        json!({ "code": code, "diverged": diverged, "error": error, "duration_ms": duration_ms }),
    ));
    let reply = json!({
        "call_id": call_id,
        "code": code,
        "diverged": diverged,
        "stopped": stopped,
        "error": error,
    });
    // The caller may be gone (that is how a call gets cancelled): nothing left to tell it.
    let _ = conn.write(&protocol::frame("exit", reply)).await;
    Ok(())
}

/// Holds a call for an admin's answer, telling its caller it waits, and records the answer
/// before acting on it. Returns the approver's uid, or `None` when the call does not run (the
/// caller has been told why, or is gone).
async fn hold(
    daemon: &Daemon,
    held: Held,
    message: &str,
    conn: &mut Conn,
) -> io::Result<Option<u32>> {
    let (call_id, tool, decision, uid) = (
        held.call_id.clone(),
        held.tool.clone(),
        held.decision,
        held.uid,
    );
    let refusal = |message: String| {
        let reply = json!({ "call_id": call_id, "decision": decision, "message": message });
        protocol::frame("decision", reply)
    };
    let rx = match daemon.approvals.hold(held) {
        Ok(rx) => rx,
        Err(e) => return conn.write(&refusal(e.to_string())).await.map(|()| None),
    };
    let waiting = json!({
        "call_id": call_id,
        "decision": decision,
        "message": message,
        "timeout_s": daemon.approvals.timeout.as_secs(),
    });
    if let Err(e) = conn.write(&protocol::frame("pending", waiting)).await {
        daemon.approvals.withdraw(&call_id);
        return Err(e);
    }
    let event = json!({
        "decision": decision,
        "reason": message,
        "uid": uid,
        "timeout_s": daemon.approvals.timeout.as_secs(),
    });
    daemon
        .bus
        .publish(BusEvent::new("held", Some(&call_id), Some(&tool), event));

    let answer = tokio::select! {
        answer = rx => answer.ok(),
        () = tokio::time::sleep(daemon.approvals.timeout) => None,
        _ = conn.closed() => {
            daemon.approvals.withdraw(&call_id);
            let reason = "the caller went away while waiting for approval";
            record_approval(daemon, &call_id, &tool, None, Some(reason)).await;
            return Ok(None);
        }
    };
    daemon.approvals.withdraw(&call_id);
    // (who answered, why not); no reason means approved.
    let (by, refused) = match answer {
        Some(Resolution::Approved { by }) => (Some(by), None),
        Some(Resolution::Denied { by, reason }) => (
            Some(by),
            Some(reason.unwrap_or_else(|| "denied by an admin".into())),
        ),
        None => (
            None,
            Some(format!(
                "no admin answered within {} s",
                daemon.approvals.timeout.as_secs()
            )),
        ),
    };
    if !record_approval(daemon, &call_id, &tool, by, refused.as_deref()).await {
        let message = "not run: the audit log is unavailable".to_owned();
        return conn.write(&refusal(message)).await.map(|()| None);
    }
    match refused {
        None => Ok(by),
        Some(reason) => {
            let message = format!("not approved: {reason}");
            conn.write(&refusal(message)).await.map(|()| None)
        }
    }
}

/// Writes an approval row (approved when there is no `reason`), durably; false when it could
/// not be written, and then the call must not run.
async fn record_approval(
    daemon: &Daemon,
    call_id: &str,
    tool: &str,
    by: Option<u32>,
    reason: Option<&str>,
) -> bool {
    let approved = reason.is_none();
    let row = json!({
        "kind": "approval",
        "call_id": call_id,
        "tool": tool,
        "approved": approved,
        "by": by,
        "reason": reason,
    });
    let event = json!({ "approved": approved, "by": by, "reason": reason });
    daemon
        .bus
        .publish(BusEvent::new("approval", Some(call_id), Some(tool), event));
    match daemon.audit.append(object(row)).await {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(call = %call_id, "audit log unavailable for the approval row: {e}");
            false
        }
    }
}

/// A slot to run in, waiting in a bounded queue; `None` when the queue is full.
async fn slot(daemon: &Daemon) -> Option<SemaphorePermit<'_>> {
    if let Ok(permit) = daemon.slots.try_acquire() {
        return Some(permit);
    }
    if daemon.queued.fetch_add(1, Ordering::SeqCst) >= daemon.options.max_queue as u64 {
        daemon.queued.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    let permit = daemon.slots.acquire().await.ok();
    daemon.queued.fetch_sub(1, Ordering::SeqCst);
    permit
}

type Ran = (sandbox::Outcome, sandbox::Applied, Option<Receipt>);

/// Launches an allowed call and follows it to its end. The cgroup and the kernel's knowledge of
/// the call are removed whatever happens.
async fn run(
    daemon: &Daemon,
    call_id: &str,
    peer: &Peer,
    plan: &LaunchPlan,
    stdio: [OwnedFd; 3],
    conn: &mut Conn,
    stages: &mut Stages,
) -> Result<Ran, (CallError, Option<Receipt>)> {
    let cgroup = Cgroup::create(daemon.root.path(), &format!("call-{call_id}"))
        .map_err(|e| (e.into(), None))?;
    let id = cgroup.id();
    stages.lap("cgroup");
    let (dests, names) = match resolve(&plan.effects.connect).await {
        Ok(d) => d,
        Err(e) => return Err((e, None)),
    };
    // A call that names hosts gets a resolver that answers those names only.
    let responder = if names.is_empty() {
        None
    } else {
        match crate::dns::Responder::start(names).await {
            Ok(r) => Some(r),
            Err(e) => return Err((CallError::Dns(e), None)),
        }
    };
    let dns_port = responder.as_ref().map_or(0, |r| r.port());
    stages.lap("resolve");
    let kill = plan.effects.on_divergence == OnDivergence::Kill;
    let mut flags = FLAG_ENFORCE_EXEC;
    if kill {
        flags |= FLAG_KILL_ON_DIVERGENCE;
    }
    if !plan.effects.connect.is_empty() {
        // Only a call that connects may create inet sockets at all.
        flags |= FLAG_NET;
    }
    let execs = plan
        .argv
        .first()
        .map(PathBuf::from)
        .into_iter()
        .chain(plan.effects.exec.iter().cloned())
        .collect();
    let watch = Watch {
        config: CallConfig {
            flags,
            dns_port,
            _pad: 0,
        },
        destinations: dests,
        execs,
        writes: plan.effects.write.clone(),
    };
    let tracked = Tracked {
        call_id: call_id.to_owned(),
        tool: plan.tool.clone(),
        cgroup: cgroup.path().to_owned(),
        kill_on_divergence: kill,
        files: daemon.options.trace_syscalls,
    };
    daemon.tracker.track(id, tracked);
    let result = async {
        daemon.with_monitor(|m| m.watch(id, &watch)).transpose()?;
        stages.lap("watch");
        let launched = sandbox::spawn(plan, &cgroup, stdio, &daemon.launch)?;
        stages.absorb(&launched.stages);
        let applied = launched.applied.clone();
        let pid = launched.pid.as_raw() as u32;
        daemon.running.lock().unwrap_or_else(|p| p.into_inner()).insert(
            call_id.to_owned(),
            Running {
                call_id: call_id.to_owned(),
                tool: plan.tool.clone(),
                pid,
                peer_uid: peer.uid,
                started: crate::audit::ts::now(),
            },
        );
        // The program, not its arguments: those may carry what the audit row redacts.
        let program = plan.argv.first().map(|p| p.to_string_lossy().into_owned());
        let launched_event = json!({ "pid": pid, "program": program, "args": plan.argv.len().saturating_sub(1), "uid": peer.uid });
        daemon.bus.publish(BusEvent::new("launch", Some(call_id), Some(&plan.tool), launched_event));
        let run = sandbox::run_to_end(launched, &cgroup, plan.confinement.timeout);
        tokio::pin!(run);
        let outcome = tokio::select! {
            outcome = &mut run => outcome?,
            _ = conn.closed() => {
                // The caller went away (guard-exec killed): the call goes with it.
                tracing::info!(call = %call_id, "caller disconnected: killing the call");
                let _ = cgroup.kill();
                daemon.bus.publish(BusEvent::new("kill", Some(call_id), Some(&plan.tool), json!({ "reason": "caller disconnected" })));
                run.await?
            }
        };
        stages.lap("run");
        Ok::<_, CallError>((outcome, applied))
    }
    .await;
    daemon
        .running
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(call_id);
    daemon.flush_events().await;
    stages.lap("flush_events");
    // The kernel's counts of the call, read before unwatch forgets them.
    let trace = daemon.options.trace_syscalls;
    let counts = daemon.with_monitor(|m| {
        let syscalls = if trace { m.syscalls(id)? } else { Vec::new() };
        Ok::<_, crate::monitor::MonitorError>((m.forks(id)?, syscalls, m.stats(id)?))
    });
    if let Some(Ok((_, _, stats))) = &counts {
        daemon.tracker.counted(id, *stats, &daemon.bus);
    }
    if let Some(responder) = responder {
        daemon.tracker.asked(id, responder.finish(), &daemon.bus);
    }
    let mut receipt = daemon.tracker.finish(id);
    if let Some(r) = receipt.as_mut() {
        match counts {
            Some(Ok((forks, syscalls, _))) => {
                r.processes += forks;
                r.syscalls = crate::events::syscall_names(&syscalls);
            }
            Some(Err(e)) => {
                // What the kernel counted cannot be vouched for: fail closed.
                tracing::warn!(call = %call_id, "reading the call's counts: {e}");
                r.verdict = "diverged";
            }
            None => {}
        }
    }
    stages.lap("receipt");
    if let Some(Err(e)) = daemon.with_monitor(|m| m.unwatch(id)) {
        tracing::warn!(call = %call_id, "forgetting the call in the kernel: {e}");
    }
    stages.lap("unwatch");
    if let Err(e) = cgroup.remove() {
        tracing::warn!(call = %call_id, "removing the call's cgroup: {e}");
    }
    stages.lap("cgroup_remove");
    match result {
        Ok((outcome, applied)) => Ok((outcome, applied, receipt)),
        Err(e) => Err((e, receipt)),
    }
}

/// The kernel's allow-list for a call's connect effects: each host resolved now, just before
/// launch, so the call reaches exactly the addresses guardd saw; and the names resolved, which
/// the call's DNS responder answers (see `dns`). No nameserver is a destination of the call.
async fn resolve(
    endpoints: &[Endpoint],
) -> Result<(Vec<Destination>, HashMap<String, Vec<IpAddr>>), CallError> {
    let mut dests = Vec::new();
    let mut names = HashMap::new();
    for ep in endpoints {
        let addrs: Vec<IpAddr> = match ep.host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let addrs: Vec<IpAddr> = tokio::net::lookup_host((ep.host.as_str(), ep.port))
                    .await
                    .map_err(|e| CallError::Resolve {
                        host: ep.host.clone(),
                        reason: e.to_string(),
                    })?
                    .map(|sa| sa.ip())
                    .collect();
                names
                    .entry(ep.host.clone())
                    .or_insert_with(Vec::new)
                    .extend(addrs.iter().copied());
                addrs
            }
        };
        dests.extend(addrs.into_iter().map(|addr| Destination {
            addr,
            port: ep.port,
            proto: PROTO_TCP,
        }));
    }
    dests.sort_by_key(|d| (d.addr, d.port, d.proto));
    dests.dedup();
    Ok((dests, names))
}
