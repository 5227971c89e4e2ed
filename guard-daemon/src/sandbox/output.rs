//! The output of a call given a secret: its stdout and stderr are pipes of guardd's, copied
//! to the caller's descriptors with every secret's value masked (`policy::secrets::mask`), so
//! neither the agent nor anything it records sees the value a tool printed. Each stream is
//! copied by a blocking thread of the runtime: the caller's descriptor may be a file or a
//! terminal, which no event loop can wait on. The copies end when the call's last process
//! closes its end (the call's end kills whatever is left), and are awaited before its caller
//! hears of its end, so no output comes after the exit.

use std::{
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
    sync::Arc,
    time::Duration,
};

use nix::{
    errno::Errno,
    poll::{PollFd, PollFlags, PollTimeout, poll},
};
use tokio::task::JoinHandle;

use super::launch::SandboxError;
use crate::policy::secrets::mask::{Masker, Masks};

/// How long output may wait for the rest of what could be a value before it is let through
/// (the part that could still be one stays held).
const IDLE_MS: u8 = 30;

/// How long the call's end waits for its output to drain once its processes are gone.
const DRAIN: Duration = Duration::from_secs(2);

/// The copies of a call's stdout and stderr.
#[derive(Debug)]
pub struct Masked(Vec<JoinHandle<Vec<String>>>);

/// The call's stdio: `stdio` as it came without `masks`, else with stdout and stderr replaced
/// by pipes whose copies [`Masked`] follows. Must be called within the runtime.
pub fn attach(
    masks: Option<Arc<Masks>>,
    stdio: [OwnedFd; 3],
) -> Result<([OwnedFd; 3], Option<Masked>), SandboxError> {
    let Some(masks) = masks else {
        return Ok((stdio, None));
    };
    let [stdin, stdout, stderr] = stdio;
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|source| SandboxError::Sys {
            op: "pipe2 (output)",
            source,
        })
    };
    let ((out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?);
    let spawn = |read: OwnedFd, caller: OwnedFd| {
        let masks = masks.clone();
        tokio::task::spawn_blocking(move || copy(&read, &caller, &masks))
    };
    let copies = vec![spawn(out_r, stdout), spawn(err_r, stderr)];
    Ok(([stdin, out_w, err_w], Some(Masked(copies))))
}

impl Masked {
    /// Waits (a bounded time) for both copies to end; the names of the secrets they masked.
    pub async fn finish(self) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for copy in self.0 {
            match tokio::time::timeout(DRAIN, copy).await {
                Ok(Ok(names)) => {
                    for n in names {
                        if !found.contains(&n) {
                            found.push(n);
                        }
                    }
                }
                Ok(Err(e)) => tracing::warn!("copying a call's output: {e}"),
                Err(_) => tracing::warn!("a call's output still open {DRAIN:?} after its end"),
            }
        }
        found
    }
}

/// Copies `from` to `to` masked until `from` ends or `to` fails (the caller went away: the
/// tool's next write then fails as it would have). Returns the secrets masked.
fn copy(from: &OwnedFd, to: &OwnedFd, masks: &Masks) -> Vec<String> {
    let mut masker = Masker::new(masks);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        out.clear();
        let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(IDLE_MS)) {
            // Quiet: what cannot be the start of a value goes out (a prompt, a partial line).
            Ok(0) => masker.flush_idle(&mut out),
            Ok(_) => match nix::unistd::read(from, &mut buf) {
                Ok(0) => break,
                Ok(n) => masker.push(&buf[..n], &mut out),
                Err(Errno::EINTR | Errno::EAGAIN) => continue,
                Err(_) => break,
            },
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
        if write_all(to.as_fd(), &out).is_err() {
            return masker.found().map(str::to_owned).collect();
        }
    }
    out.clear();
    masker.finish(&mut out);
    let _ = write_all(to.as_fd(), &out);
    masker.found().map(str::to_owned).collect()
}

/// Writes all of `bytes`, waiting for room on a descriptor its owner made non-blocking.
fn write_all(fd: BorrowedFd, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
                poll(&mut fds, PollTimeout::NONE)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
