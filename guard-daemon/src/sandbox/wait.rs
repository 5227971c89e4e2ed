//! Following a launched call to its end: its exit, awaited on its pidfd in the runtime, and the
//! timeout that kills its whole cgroup.

use std::{
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use nix::{
    sys::wait::{WaitPidFlag, WaitStatus, waitpid},
    unistd::Pid,
};
use serde::Serialize;

use super::{
    launch::{Launched, SandboxError, io_sys},
    writes::Attempt,
};
use crate::sandbox::cgroup::Cgroup;

/// How a call's main process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExitStatus {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// The shell's convention: the exit code, or 128 + the signal.
    pub fn exit_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        }
    }
}

/// Waits for `pid` to end, without blocking the tokio runtime: on the readiness of its pidfd
/// (readable once the process has exited), or, on a kernel without pidfds, on a blocking thread.
pub async fn wait(pid: Pid, pidfd: Option<OwnedFd>) -> Result<ExitStatus, SandboxError> {
    let Some(pidfd) = pidfd else {
        return tokio::task::spawn_blocking(move || reap(pid, WaitPidFlag::empty()))
            .await
            .unwrap_or(Err(SandboxError::Sys {
                op: "waitpid task",
                source: nix::Error::EIO,
            }))
            .and_then(|status| {
                status.ok_or(SandboxError::Sys {
                    op: "waitpid",
                    source: nix::Error::ECHILD,
                })
            });
    };
    // SAFETY: the OwnedFd keeps the pidfd open, unchanged, until it is dropped with the AsyncFd
    // that owns it.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| io_sys("register pidfd")(e.into()))?;
    loop {
        let mut ready = fd.readable().await.map_err(io_sys("pidfd readiness"))?;
        match reap(pid, WaitPidFlag::WNOHANG)? {
            Some(status) => return Ok(status),
            // Readable before the exit was reapable (a stopped child): wait again.
            None => ready.clear_ready(),
        }
    }
}

/// One `waitpid` on `pid`: its exit status once it has ended (`None` while it runs, with
/// `WNOHANG`).
fn reap(pid: Pid, flags: WaitPidFlag) -> Result<Option<ExitStatus>, SandboxError> {
    loop {
        return match waitpid(pid, Some(flags)) {
            Ok(WaitStatus::Exited(_, code)) => Ok(Some(ExitStatus {
                code: Some(code),
                signal: None,
            })),
            Ok(WaitStatus::Signaled(_, sig, _)) => Ok(Some(ExitStatus {
                code: None,
                signal: Some(sig as i32),
            })),
            Ok(WaitStatus::StillAlive) => Ok(None),
            Ok(_) | Err(nix::Error::EINTR) => continue,
            Err(e) => Err(SandboxError::Sys {
                op: "waitpid",
                source: e,
            }),
        };
    }
}

/// The end of a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Outcome {
    /// The exit code, or 128 + signal.
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    #[serde(with = "crate::call::plan::secs")]
    pub duration: Duration,
}

/// How long a call's write-opens judge may take to see that the call is gone, once its
/// processes are: it sees at once unless a name it was judging led into a stalled file system.
const JUDGE_GONE: Duration = Duration::from_secs(2);

/// Waits for the call to end; when `timeout` runs out first, kills its whole cgroup. Either way,
/// whatever the tool left running in its cgroup is killed: the call is over when its main
/// process is. Meanwhile its write-opens and execs are judged (`writes`), each one outside its
/// rules handed to `attempted` as it happens. The v1 limit cgroups are removed on return.
pub async fn run_to_end(
    mut launched: Launched,
    cgroup: &Cgroup,
    timeout: Duration,
    attempted: impl Fn(Attempt),
) -> Result<Outcome, SandboxError> {
    // Nothing judged (a call in shadow): nothing will come.
    let mut attempts = launched
        .attempts
        .take()
        .unwrap_or_else(|| tokio::sync::mpsc::unbounded_channel().1);
    let (status, timed_out) = {
        let ended = end(&launched, cgroup, timeout);
        tokio::pin!(ended);
        loop {
            tokio::select! {
                Some((attempt, recorded)) = attempts.recv() => {
                    attempted(attempt);
                    let _ = recorded.send(());
                }
                ended = &mut ended => break ended?,
            }
        }
    };
    let duration = launched.started.elapsed();
    // Empty, it stays so: only the call's own processes could start one in it.
    let mut left = !cgroup.pids()?.is_empty();
    if left {
        cgroup.kill()?;
        // Give cgroup.kill time to finish (it is asynchronous) so the caller finds the cgroup
        // empty.
        let deadline = Instant::now() + Duration::from_secs(5);
        while left && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
            left = !cgroup.pids()?.is_empty();
        }
    }
    // The judge ends once no process is left to stop; what it judged last comes before that.
    let judged = tokio::time::Instant::now() + JUDGE_GONE;
    while let Ok(Some((attempt, recorded))) = tokio::time::timeout_at(judged, attempts.recv()).await
    {
        attempted(attempt);
        let _ = recorded.send(());
    }
    if left {
        // Removing the v1 limit directories waits for what is still in them: off the runtime,
        // which may have a single worker thread that every caller shares.
        tokio::task::spawn_blocking(move || drop(launched));
    } else {
        drop(launched);
    }
    Ok(Outcome {
        exit_code: status.exit_code(),
        signal: status.signal,
        timed_out,
        duration,
    })
}

/// The main process's end, and whether `timeout` ran out first (its cgroup then killed).
async fn end(
    launched: &Launched,
    cgroup: &Cgroup,
    timeout: Duration,
) -> Result<(ExitStatus, bool), SandboxError> {
    let pidfd = launched.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
    let waiting = wait(launched.pid, pidfd);
    tokio::pin!(waiting);
    match tokio::time::timeout(timeout, &mut waiting).await {
        Ok(status) => Ok((status?, false)),
        Err(_) => {
            cgroup.kill()?;
            Ok((waiting.await?, true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_follows_the_shell() {
        assert_eq!(
            ExitStatus {
                code: Some(3),
                signal: None
            }
            .exit_code(),
            3
        );
        assert_eq!(
            ExitStatus {
                code: None,
                signal: Some(9)
            }
            .exit_code(),
            137
        );
    }
}
