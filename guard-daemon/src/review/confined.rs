//! Programs guard runs for itself, confined like any call: a judge, an approver command, a
//! notifier. Each gets a plan of its own (its command; effects the policy gives it, and none
//! else: no network unless it names a destination), its own cgroup watched by the kernel
//! programs, the unprivileged user, a timeout; guard writes its stdin and reads its stdout.

use std::{
    io::{Read as _, Write as _},
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use crate::{
    call::plan::LaunchPlan,
    daemon::Daemon,
    monitor::watch_of,
    receipt::{Receipt, ReceiptFor},
    sandbox::{self, Outcome, cgroup::Cgroup},
};

/// Why a helper could not be run: it gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("cgroup: {0}")]
    Cgroup(#[from] crate::sandbox::cgroup::CgroupError),
    #[error("kernel: {0}")]
    Monitor(#[from] crate::monitor::MonitorError),
    #[error(transparent)]
    Watch(#[from] crate::monitor::WatchError),
    #[error("launch: {0}")]
    Sandbox(#[from] sandbox::SandboxError),
}

/// The most of a helper's stdout (and of its stderr) guard reads: the rest is dropped, and an
/// answer that needs more is malformed.
pub const MAX_OUTPUT: usize = 1 << 20;

/// How a helper ended.
#[derive(Debug)]
pub struct Ran {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    /// Its stdout went on past [`MAX_OUTPUT`]: what was kept is not its whole answer.
    pub stdout_truncated: bool,
    /// The start of its stderr, for the reason a failing helper gives.
    pub stderr: Vec<u8>,
    /// What the kernel saw it do.
    pub receipt: Option<Receipt>,
    pub duration: Duration,
}

/// Runs `plan` confined, `input` on its stdin, until it ends or its plan's timeout runs out.
/// `id` names it in cgroups and receipts (`CALL-judge-NAME`).
pub async fn run(
    daemon: &Daemon,
    id: &str,
    plan: &LaunchPlan,
    input: Vec<u8>,
) -> Result<Ran, HelperError> {
    let started = Instant::now();
    let cgroup = Cgroup::create(daemon.root.path(), &format!("helper-{id}"))?;
    let cg = cgroup.id();
    let result = run_in(daemon, id, plan, input, &cgroup).await;
    daemon.flush_events().await;
    let receipt = daemon.receipts.finish(cg);
    if let Some(Err(e)) = daemon.with_monitor(|m| m.unwatch(cg)) {
        tracing::warn!(helper = %id, "forgetting the helper in the kernel: {e}");
    }
    if let Err(e) = cgroup.remove_async().await {
        tracing::warn!(helper = %id, "removing the helper's cgroup: {e}");
    }
    let (outcome, (stdout, stdout_truncated), (stderr, _)) = result?;
    Ok(Ran {
        outcome,
        stdout,
        stdout_truncated,
        stderr,
        receipt,
        duration: started.elapsed(),
    })
}

type Output = (Outcome, (Vec<u8>, bool), (Vec<u8>, bool));

async fn run_in(
    daemon: &Daemon,
    id: &str,
    plan: &LaunchPlan,
    input: Vec<u8>,
    cgroup: &Cgroup,
) -> Result<Output, HelperError> {
    let (watch, responder) = watch_of(plan).await?;
    daemon.receipts.begin(
        cgroup.id(),
        ReceiptFor {
            call_id: id.to_owned(),
            tool: plan.tool.clone(),
            cgroup: cgroup.path().to_owned(),
            kill_on_divergence: true,
            files: daemon.options.trace_syscalls,
            shadow: false,
            masks: None,
            pinned: None,
        },
    );
    daemon
        .with_monitor(|m| m.watch(cgroup.id(), &watch))
        .transpose()?;
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from);
    let pipes = pipe()
        .and_then(|i| pipe().map(|o| (i, o)))
        .and_then(|(i, o)| pipe().map(|e| (i, o, e)));
    let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = pipes.map_err(|e| {
        HelperError::Sandbox(sandbox::SandboxError::Sys {
            op: "pipe2",
            source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })
    })?;
    let launched = sandbox::spawn(plan, cgroup, [in_r, out_w, err_w], &daemon.launch)?;
    let writer = tokio::task::spawn_blocking(move || feed(in_w, &input));
    let out = tokio::task::spawn_blocking(move || drain(out_r));
    let err = tokio::task::spawn_blocking(move || drain(err_r));
    let attempted = |a| daemon.receipts.attempted(cgroup.id(), a, &daemon.bus);
    let outcome =
        sandbox::run_to_end(launched, cgroup, plan.confinement.timeout, attempted).await?;
    // The helper and everything it started are gone: the pipes are at their ends.
    let _ = writer.await;
    // A reader that failed kept nothing whole: count it as cut short.
    let stdout = out.await.unwrap_or((Vec::new(), true));
    let stderr = err.await.unwrap_or((Vec::new(), true));
    // The helper has ended: its responder judges what it left queued.
    daemon
        .receipts
        .answered(cgroup.id(), responder, &daemon.bus)
        .await;
    Ok((outcome, stdout, stderr))
}

/// Writes the helper's input and closes its stdin (a helper that does not read it gets what
/// fits in the pipe, and then its stdin closed: EPIPE here, never a hang).
fn feed(fd: OwnedFd, input: &[u8]) {
    let mut f = std::fs::File::from(fd);
    let _ = f.write_all(input);
}

/// Reads up to [`MAX_OUTPUT`] bytes, then drains the rest unread, to EOF; true when there
/// was more.
fn drain(fd: OwnedFd) -> (Vec<u8>, bool) {
    let mut f = std::fs::File::from(fd);
    let mut kept = Vec::new();
    let _ = (&mut f).take(MAX_OUTPUT as u64).read_to_end(&mut kept);
    let rest = std::io::copy(&mut f, &mut std::io::sink()).unwrap_or(0);
    (kept, rest > 0)
}

/// Why a helper's run does not count as an answer, if it does not: it timed out, was stopped
/// for a divergence, exited non-zero (with the start of its stderr), or printed more than
/// guard reads (the part kept is no answer: its last line need not be the helper's).
pub fn failure(ran: &Ran, timeout: Duration) -> Option<String> {
    if ran.outcome.timed_out {
        return Some(format!("timed out after {} s", timeout.as_secs_f64()));
    }
    if ran.receipt.as_ref().is_some_and(|r| r.stopped) {
        return Some("stopped: it did something it was not allowed to".into());
    }
    if ran.outcome.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let first = stderr
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        let said = if first.is_empty() {
            String::new()
        } else {
            format!(": {first}")
        };
        return Some(format!("exited {}{said}", ran.outcome.exit_code));
    }
    if ran.stdout_truncated {
        return Some(format!(
            "its output is longer than the {MAX_OUTPUT} bytes guard reads"
        ));
    }
    None
}
