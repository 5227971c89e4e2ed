//! The launch of an approved call: once its decision row is on disk, bind the kernel to it
//! (cgroup, destinations, its resolver), launch it confined, follow it to its end, and record
//! what it did.

mod output;
mod secrecy;

use std::{io, os::fd::OwnedFd, sync::Arc, time::Instant};

use crate::{
    audit::{Finished, Row},
    bus::What,
    call::{
        calls::{Admission, Running},
        decision::Decision,
        peer::Peer,
        plan::{LaunchPlan, OnDivergence},
        stages::Stages,
    },
    daemon::Daemon,
    monitor::{Watch, dns::Responder},
    protocol::{
        self, ExecReply,
        conn::Conn,
        reply::{CallDecision, Exit, Started},
    },
    receipt::{Receipt, ReceiptFor, Verdict},
    review::{self, Recording},
    sandbox::{self, SandboxError, cgroup::Cgroup},
};

/// Why an allowed call could not be carried through.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the call's temporary directory: {0}")]
    Tmp(io::Error),
    #[error("cgroup: {0}")]
    Cgroup(#[from] crate::sandbox::cgroup::CgroupError),
    #[error("kernel: {0}")]
    Monitor(#[from] crate::monitor::MonitorError),
    #[error(transparent)]
    Watch(#[from] crate::monitor::WatchError),
    #[error("launch: {0}")]
    Sandbox(#[from] sandbox::SandboxError),
    #[error("the decision could not be recorded")]
    NotRecorded,
    #[error("the caller went away before the call started: {0}")]
    Caller(io::Error),
    #[error("its secrets: {0}")]
    Secret(String),
}

/// What an approved call's start waits for, and what its caller is told then.
pub struct Start {
    /// The admin who approved a held call.
    approved_by: Option<u32>,
    /// The decision row, when it is still being written (see `review`).
    recording: Option<Recording>,
    /// The SHA-256 of the program an approval bound the call to: the launch runs that file.
    program: Option<String>,
}

impl Start {
    /// A call the review let run, its decision row still `recording` or already written.
    pub fn decided(recording: Option<Recording>) -> Self {
        Self {
            approved_by: None,
            recording,
            program: None,
        }
    }

    /// A held call admin `by` approved, bound to the program of SHA-256 `program` it was held
    /// with.
    pub fn approved(by: u32, program: String) -> Self {
        Self {
            approved_by: Some(by),
            recording: None,
            program: Some(program),
        }
    }
}

/// Runs an approved call and records its end.
pub async fn carry_out(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    call_id: &str,
    plan: &LaunchPlan,
    start: Start,
    (mut conn, stdio, mut admission, mut stages): (Conn, [OwnedFd; 3], Admission<'_>, Stages),
) -> io::Result<()> {
    let mut call = Call {
        daemon,
        id: call_id,
        peer,
        plan,
        conn: &mut conn,
        stages: &mut stages,
        admission: &mut admission,
        start: Some(start),
        launch: None,
        killed: None,
    };
    let started = Instant::now();
    let mut result = call.run(stdio).await;
    if let Err((e, receipt)) = result {
        // A step that failed before the start still waits for the decision row: the caller
        // hears "allow" (then the error) only for a decision that is on disk.
        result = match call.confirm().await {
            Ok(()) => Err((e, receipt)),
            Err(CallError::NotRecorded) => return not_recorded(call_id, call.conn).await,
            Err(other) => Err((other, receipt)),
        };
    }
    let duration_ms = started.elapsed().as_secs_f64() * 1e3;
    finish(&mut call, result, duration_ms).await;
    Ok(())
}

/// Refuses a call whose decision row could not be written: it did not start.
async fn not_recorded(call_id: &str, conn: &mut Conn) -> io::Result<()> {
    review::not_recorded(call_id, conn).await.map(|_| ())
}

/// Records how an approved call ended and tells its caller.
async fn finish(
    call: &mut Call<'_, '_>,
    result: Result<Ran, (CallError, Option<Receipt>)>,
    duration_ms: f64,
) {
    let (daemon, call_id, plan) = (call.daemon, call.id, call.plan);
    let stages = &mut *call.stages;
    let (exit, sandbox_applied, receipt, error) = match result {
        Ok((outcome, applied, receipt)) => (Some(outcome), Some(applied), receipt, None),
        Err((e, receipt)) => (None, None, receipt, Some(e.to_string())),
    };
    let diverged = receipt
        .as_ref()
        .is_some_and(|r| r.verdict == Verdict::Diverged);
    let killed = call.killed.clone();
    let stopped = receipt.as_ref().is_some_and(|r| r.stopped) || killed.is_some();
    // A call guard stopped ends as SIGKILL for its caller, whichever signal reached its first
    // process first (seccomp's SIGSYS, or cgroup.kill's SIGKILL); the row keeps the real one.
    let code = exit.as_ref().map(|o| {
        if stopped {
            128 + libc::SIGKILL
        } else {
            o.exit_code
        }
    });
    stages.skip();
    let row = Row::Finished(Box::new(Finished {
        call_id: call_id.to_owned(),
        tool: plan.tool.clone(),
        sandbox: sandbox_applied,
        effects_observed: receipt.clone(),
        exit,
        error: error.clone(),
        duration_ms,
        timings_us: stages.clone(),
        enforced: daemon.enforced(),
        enforce: (!plan.enforce.enforced()).then_some(plan.enforce),
        launch: call.launch.take(),
        killed: call.killed.take(),
        interrupted: None,
    }));
    let unrecorded = daemon.audit.record(&row).await.err().map(|e| {
        tracing::error!(call = %call_id, "audit log unavailable for the finished row: {e}");
        e.to_string()
    });
    stages.lap("audit_finished");
    tracing::debug!(call = %call_id, total_us = stages.total().as_micros() as u64, "stages: {stages}");
    let what = What::Exit {
        code,
        diverged,
        divergence: receipt
            .as_ref()
            .and_then(|r| r.divergences.first().cloned().map(Box::new)),
        error: error.clone(),
        duration_ms,
    };
    daemon.bus.call_in(call_id, &plan.tool, plan.enforce, what);
    let exit = Exit {
        call_id: call_id.to_owned(),
        code,
        diverged,
        stopped,
        killed,
        error,
        receipt: receipt.map(Box::new),
        unrecorded,
    };
    // The caller may be gone (that is how a call gets cancelled): nothing left to tell it.
    let _ = call.conn.reply(&ExecReply::Exit(exit)).await;
}

type Ran = (sandbox::Outcome, sandbox::Applied, Option<Receipt>);

/// A call's [`sandbox::Files`], being made on a blocking thread.
type Preparing = tokio::task::JoinHandle<Result<sandbox::Files, SandboxError>>;

/// An approved call on its way through the kernel: what it needs at every step.
struct Call<'a, 'd> {
    daemon: &'a Daemon,
    id: &'a str,
    peer: &'a Peer,
    plan: &'a LaunchPlan,
    conn: &'a mut Conn,
    stages: &'a mut Stages,
    admission: &'a mut Admission<'d>,
    /// Until the call is confirmed (`confirm`): what its start waits for.
    start: Option<Start>,
    /// Its start, and why guardd killed it (other than for a divergence), for its row.
    launch: Option<crate::audit::Launch>,
    killed: Option<String>,
}

impl Call<'_, '_> {
    /// Waits for the decision row if it is still being written, then tells the caller the call
    /// is allowed; it acts once. Nothing of the call runs before the row is on disk: it starts
    /// after this returned Ok, or at the gate the row's writer opens (`start`).
    async fn confirm(&mut self) -> Result<(), CallError> {
        let Some(start) = self.start.take() else {
            return Ok(());
        };
        if let Some(recording) = start.recording {
            if !recording.written(self.daemon).await {
                return Err(CallError::NotRecorded);
            }
            self.stages.lap("audit_decision");
        }
        let allowed = CallDecision {
            call_id: self.id.to_owned(),
            decision: Decision::Allow,
            message: None,
            approved_by: start.approved_by,
            terminated: false,
        };
        self.conn
            .reply(&ExecReply::Decision(allowed))
            .await
            .map_err(CallError::Caller)?;
        self.stages.lap("reply_decision");
        Ok(())
    }

    /// Launches the call and follows it to its end. The cgroup and the kernel's knowledge of
    /// the call are removed whatever happens.
    async fn run(&mut self, stdio: [OwnedFd; 3]) -> Result<Ran, (CallError, Option<Receipt>)> {
        let daemon = self.daemon;
        let user =
            sandbox::resolve_user(self.plan, &daemon.launch).map_err(|e| (e.into(), None))?;
        self.stages.lap("user");
        // Before the kernel takes the call's write identities and landlock its rules: the
        // directory must exist.
        let tmp = sandbox::tmp::CallTmp::create(self.plan, &user)
            .map_err(|e| (CallError::Tmp(e), None))?;
        self.stages.lap("tmp");
        // The launch's file-system part, the longest, on a thread of its own meanwhile.
        let files = {
            let (plan, opts) = (self.plan.clone(), daemon.launch.clone());
            tokio::task::spawn_blocking(move || sandbox::Files::of(&plan, user, &opts))
        };
        let cgroup = Cgroup::create(daemon.root.path(), &format!("call-{}", self.id))
            .map_err(|e| (e.into(), None))?;
        let id = cgroup.id();
        self.stages.lap("cgroup");
        let (watch, responder) = self.watch().await.map_err(|e| (e, None))?;
        let shadow = self.plan.enforce == crate::call::plan::Enforce::Shadow;
        // A call given a secret prints through guardd, which masks the values; the masks and
        // the values it is given come from one policy, read once.
        let policy = daemon.policy();
        let secrecy = secrecy::Secrecy::of(self.plan, &policy);
        daemon.receipts.begin(
            id,
            ReceiptFor {
                call_id: self.id.to_owned(),
                tool: self.plan.tool.clone(),
                cgroup: cgroup.path().to_owned(),
                kill_on_divergence: self.plan.effects.on_divergence == OnDivergence::Kill,
                files: daemon.options.trace_syscalls || shadow,
                shadow,
                masks: secrecy.masks(),
                pinned: (self.start.as_ref())
                    .and_then(|s| s.program.as_ref())
                    .and_then(|_| self.plan.argv.first())
                    .map(|p| p.to_string_lossy().into_owned()),
            },
        );
        let (stdio, masked) = secrecy
            .attach(self.plan, stdio)
            .map_err(|e| (e.into(), None))?;
        let result = self.launch(&cgroup, &watch, files, stdio, &policy).await;
        let masked = match masked {
            Some(m) => m.finish().await,
            None => Vec::new(),
        };
        daemon.flush_events().await;
        self.stages.lap("flush_events");
        let mut receipt = self.receipt(id, responder).await;
        secrecy.seal(receipt.as_mut(), masked);
        self.stages.lap("receipt");
        if let Some(Err(e)) = daemon.with_monitor(|m| m.unwatch(id)) {
            tracing::warn!(call = %self.id, "forgetting the call in the kernel: {e}");
        }
        self.stages.lap("unwatch");
        if let Err(e) = cgroup.remove_async().await {
            tracing::warn!(call = %self.id, "removing the call's cgroup: {e}");
        }
        self.stages.lap("cgroup_remove");
        tmp.remove().await;
        self.stages.lap("tmp_remove");
        match result {
            Ok((outcome, applied)) => Ok((outcome, applied, receipt)),
            Err(e) => Err((e, receipt)),
        }
    }

    /// What the kernel holds the call to, and its resolver.
    async fn watch(&mut self) -> Result<(Watch, Option<Responder>), CallError> {
        let watched = crate::monitor::watch_of(self.plan).await?;
        self.stages.lap("resolve");
        Ok(watched)
    }

    /// Binds the kernel to the call, launches it confined and waits for its end (or its
    /// caller's going away, which kills it).
    async fn launch(
        &mut self,
        cgroup: &Cgroup,
        watch: &Watch,
        files: Preparing,
        stdio: [OwnedFd; 3],
        policy: &crate::policy::Policy,
    ) -> Result<(sandbox::Outcome, sandbox::Applied), CallError> {
        let (daemon, plan) = (self.daemon, self.plan);
        daemon
            .with_monitor(|m| m.watch(cgroup.id(), watch))
            .transpose()?;
        self.stages.lap("watch");
        let rendered =
            crate::policy::secrets::rendered(plan, policy.secrets()).map_err(CallError::Secret)?;
        let bound = sandbox::Bound::of(rendered.as_ref().unwrap_or(plan), cgroup, &daemon.launch)?;
        self.stages.absorb(bound.stages());
        let files = files.await.map_err(|e| {
            // Cancelled: the runtime is stopping (guardd's end), which ends the call too.
            if e.is_cancelled() {
                tracing::debug!(call = %self.id, "preparing the call's files: {e}");
            } else {
                tracing::error!(call = %self.id, "preparing the call's files: {e}");
            }
            CallError::Sandbox(SandboxError::Sys {
                op: "preparing the call's files",
                source: nix::Error::EIO,
            })
        })??;
        // What the worker waited for the files part, beyond the rest it made meanwhile.
        self.stages.lap("landlock");
        let mut ready = sandbox::Ready::of(files, bound, &daemon.launch);
        if let Some(sha256) = self.start.as_ref().and_then(|s| s.program.as_deref()) {
            ready = ready.pin(sha256)?;
            self.stages.lap("pin");
        }
        let absent = ready.absent();
        // Kept to the call's end, which stops the writer of an input the tool did not read.
        let (stdio, _input) = sandbox::input::attach(&plan.confinement.stdin, stdio)?;
        let launched = self.start(ready, stdio, cgroup).await?;
        self.started(&launched, cgroup).await;
        let applied = launched.applied.clone();
        let pid = launched.pid.as_raw() as u32;
        let launch = crate::audit::Launch::of(&plan.argv, pid, self.peer.uid);
        self.admission.running(Running {
            call_id: self.id.to_owned(),
            tool: plan.tool.clone(),
            pid,
            peer_uid: self.peer.uid,
            started: launch.ts.clone(),
        });
        (daemon.bus).call_in(self.id, &plan.tool, plan.enforce, launch.event());
        self.launch = Some(launch);
        let attempted = |a| daemon.receipts.attempted(cgroup.id(), a, &daemon.bus);
        let run = sandbox::run_to_end(launched, cgroup, plan.confinement.timeout, attempted);
        tokio::pin!(run);
        let outcome = tokio::select! {
            outcome = &mut run => outcome?,
            _ = self.conn.closed() => {
                // The caller went away (guard-exec killed): the call goes with it.
                tracing::info!(call = %self.id, "caller disconnected: killing the call");
                let _ = cgroup.kill();
                self.killed = Some("caller disconnected".into());
                run.await?
            }
        };
        // What it made that programs outside guard may run: seen now, on its receipt.
        daemon
            .receipts
            .planted(cgroup.id(), absent.settle(self.id).await, &daemon.bus);
        if outcome.timed_out {
            let secs = plan.confinement.timeout.as_secs();
            self.killed = Some(format!("timed out after {secs} s"));
        }
        if let Some(reason) = self.killed.clone() {
            (daemon.bus).call_in(self.id, &plan.tool, plan.enforce, What::Kill { reason });
        }
        self.stages.lap("run");
        Ok((outcome, applied))
    }

    /// Starts the call: at its decision row's gate while the row is still being written (the
    /// child confines itself meanwhile, and execs once the row is on disk), else once the row
    /// is. Its caller hears that it is allowed ([`Call::confirm`]) only then: a caller gone by
    /// then takes the call with it.
    async fn start(
        &mut self,
        ready: sandbox::Ready,
        stdio: [OwnedFd; 3],
        cgroup: &Cgroup,
    ) -> Result<sandbox::Launched, CallError> {
        let gate = self.start.as_ref().and_then(|s| s.recording.as_ref());
        // A caller gone already cancelled the call: `confirm` finds it so before anything runs.
        let gate = gate.filter(|_| !self.conn.hung_up());
        let launched = match gate.map(Recording::gate) {
            Some(gate) => match ready.start_at(stdio, &gate)? {
                sandbox::Gated::Started(launched) => *launched,
                // The row was refused, or is slow: whether it is written decides.
                sandbox::Gated::Closed(ready, stdio) => {
                    self.confirm().await?;
                    ready.start(stdio)?
                }
            },
            None => {
                self.confirm().await?;
                ready.start(stdio)?
            }
        };
        self.stages.absorb(&launched.stages);
        if let Err(e) = self.confirm().await {
            // Its caller hung up while the call's process confined itself: the call goes with
            // it (and is followed to its end as any call killed, so that it is reaped).
            tracing::info!(call = %self.id, "{e}: killing the call");
            let _ = cgroup.kill();
            self.killed = Some(match e {
                CallError::Caller(_) => "caller disconnected".into(),
                other => other.to_string(),
            });
        }
        Ok(launched)
    }

    /// Tells the caller the call started, and where its processes are. A caller that cannot
    /// hear it is gone, which the wait for the call's end finds.
    async fn started(&mut self, launched: &sandbox::Launched, cgroup: &Cgroup) {
        let started = Started {
            call_id: self.id.to_owned(),
            pid: launched.pid.as_raw() as u32,
            cgroup: cgroup.path().to_owned(),
        };
        let frame = protocol::frame(&ExecReply::Started(started));
        if let Err(e) = self.conn.write(&frame).await {
            tracing::debug!(call = %self.id, "telling the caller the call started: {e}");
        }
    }

    /// The call's receipt, with what the kernel counted and the names it asked folded in; read
    /// before unwatch forgets them, once the call has ended.
    async fn receipt(&self, id: u64, responder: Option<Responder>) -> Option<Receipt> {
        let daemon = self.daemon;
        let trace = daemon.options.trace_syscalls
            || self.plan.enforce == crate::call::plan::Enforce::Shadow;
        let counts = daemon.with_monitor(|m| {
            let syscalls = if trace { m.syscalls(id)? } else { Vec::new() };
            Ok::<_, crate::monitor::MonitorError>((m.forks(id)?, syscalls, m.stats(id)?))
        });
        if let Some(Ok((_, _, stats))) = &counts {
            daemon.receipts.counted(id, *stats, &daemon.bus);
        }
        daemon.receipts.answered(id, responder, &daemon.bus).await;
        let mut receipt = daemon.receipts.finish(id)?;
        match counts {
            Some(Ok((forks, syscalls, _))) => {
                receipt.processes += forks;
                receipt.syscalls = crate::receipt::syscall_names(&syscalls);
            }
            Some(Err(e)) => {
                // What the kernel counted cannot be vouched for: fail closed.
                tracing::warn!(call = %self.id, "reading the call's counts: {e}");
                receipt.verdict = Verdict::Diverged;
            }
            None => {}
        }
        Some(receipt)
    }
}
