//! The output of a call given a secret: its stdout and stderr are pipes of guardd's, copied
//! to the caller's descriptors with every secret's value masked (`policy::secrets::mask`), so
//! neither the agent nor anything it records sees the value a tool printed. Its stdin, when
//! the caller's descriptor would be passed as it is, is `/dev/null`: a descriptor the caller
//! passes may be writable (a socket, a terminal), and what a tool wrote there would reach the
//! caller unmasked.
//!
//! Each stream is copied by a thread of its own (the caller's descriptor may be a file or a
//! terminal, which no event loop can wait on; and a caller that never reads must hold no
//! thread that other work of guardd's waits for). The copies end when the call's last process
//! closes its end (the call's end kills whatever is left) and are awaited before the caller
//! hears of the end, so no output comes after the exit; a caller that stops reading holds its
//! copy [`DRAIN`] past the call's end at most, and loses what was left.

use std::{
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    poll::{PollFd, PollFlags, PollTimeout, poll},
};
use tokio::sync::oneshot;

use crate::{
    call::plan::Stdin,
    policy::secrets::mask::{Masker, Masks},
    sandbox::{SandboxError, io_sys},
};

/// How long the call's end waits for its output to reach its caller.
const DRAIN: Duration = Duration::from_secs(2);

/// How often a copy waiting for its caller to read looks whether the call has ended.
const LOOK_MS: u16 = 100;

/// The copies of a call's stdout and stderr.
#[derive(Debug)]
pub struct Masked {
    copies: Vec<oneshot::Receiver<Vec<String>>>,
    /// Set at the call's end: from then a caller that does not read has [`DRAIN`].
    ended: Arc<AtomicBool>,
}

/// The call's stdio: `stdio` as it came without `masks`, else with stdout and stderr replaced
/// by pipes whose copies [`Masked`] follows, and a passed stdin by `/dev/null`.
pub fn attach(
    masks: Option<Arc<Masks>>,
    stdin: &Stdin,
    stdio: [OwnedFd; 3],
) -> Result<([OwnedFd; 3], Option<Masked>), SandboxError> {
    let Some(masks) = masks else {
        return Ok((stdio, None));
    };
    let [caller_in, stdout, stderr] = stdio;
    let stdin = match stdin {
        Stdin::Passed => {
            OwnedFd::from(std::fs::File::open("/dev/null").map_err(io_sys("/dev/null"))?)
        }
        _ => caller_in,
    };
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|source| SandboxError::Sys {
            op: "pipe2 (output)",
            source,
        })
    };
    let ((out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?);
    let ended = Arc::new(AtomicBool::new(false));
    let mut copies = Vec::new();
    for (read, caller) in [(out_r, stdout), (err_r, stderr)] {
        let (tx, rx) = oneshot::channel();
        let (masks, ended) = (masks.clone(), ended.clone());
        std::thread::Builder::new()
            .name("guardd-output".into())
            .spawn(move || {
                let _ = tx.send(copy(&read, &caller, &masks, &ended));
            })
            .map_err(io_sys("output thread"))?;
        copies.push(rx);
    }
    Ok(([stdin, out_w, err_w], Some(Masked { copies, ended })))
}

impl Masked {
    /// Waits (a bounded time) for both copies to end; the names of the secrets they masked.
    pub async fn finish(self) -> Vec<String> {
        self.ended.store(true, Ordering::Release);
        let mut found: Vec<String> = Vec::new();
        for copy in self.copies {
            match tokio::time::timeout(DRAIN + DRAIN, copy).await {
                Ok(Ok(names)) => {
                    for n in names {
                        if !found.contains(&n) {
                            found.push(n);
                        }
                    }
                }
                Ok(Err(_)) => tracing::warn!("a call's output copy ended without a word"),
                Err(_) => tracing::warn!("a call's output still open after its end"),
            }
        }
        found
    }
}

/// Copies `from` to `to` masked until `from` ends or `to` fails or stays full past the call's
/// end (the tool's next write then fails as it would have). Returns the secrets masked.
fn copy(from: &OwnedFd, to: &OwnedFd, masks: &Masks, ended: &AtomicBool) -> Vec<String> {
    let mut masker = Masker::new(masks);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        out.clear();
        match nix::unistd::read(from, &mut buf) {
            Ok(0) => break,
            Ok(n) => masker.push(&buf[..n], &mut out),
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
        if write_all(to.as_fd(), &out, ended).is_err() {
            return masker.found().map(str::to_owned).collect();
        }
    }
    out.clear();
    masker.finish(&mut out);
    let _ = write_all(to.as_fd(), &out, ended);
    masker.found().map(str::to_owned).collect()
}

/// At most this much is written at once once the caller's descriptor says it has room: a pipe
/// that polls writable takes `PIPE_BUF` bytes without blocking, whether or not its owner made
/// it non-blocking (which guardd may not change: the caller shares that file).
const CHUNK: usize = libc::PIPE_BUF;

/// Writes all of `bytes` as the caller's descriptor makes room, but not past [`DRAIN`] after
/// `ended`: a caller that stops reading holds no thread of guardd's for longer.
fn write_all(fd: BorrowedFd, bytes: &[u8], ended: &AtomicBool) -> Result<(), Errno> {
    let mut deadline: Option<Instant> = None;
    for mut chunk in bytes.chunks(CHUNK) {
        while !chunk.is_empty() {
            let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
            match poll(&mut fds, PollTimeout::from(LOOK_MS)) {
                Ok(0) | Err(Errno::EINTR) => {
                    if ended.load(Ordering::Acquire) {
                        let at = *deadline.get_or_insert_with(|| Instant::now() + DRAIN);
                        if Instant::now() >= at {
                            return Err(Errno::ETIMEDOUT);
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            match nix::unistd::write(fd, chunk) {
                Ok(n) => chunk = &chunk[n..],
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_that_never_reads_holds_a_copy_no_longer_than_the_drain_after_the_end() {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        // Full: the caller's end is never read.
        nix::fcntl::fcntl(
            &write,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .expect("nonblock");
        while nix::unistd::write(&write, &[0u8; 4096]).is_ok() {}
        nix::fcntl::fcntl(
            &write,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
        )
        .expect("blocking again");
        let ended = AtomicBool::new(true);
        let started = Instant::now();
        let e = write_all(write.as_fd(), &[1u8; 10_000], &ended).expect_err("gives up");
        assert_eq!(e, Errno::ETIMEDOUT);
        let waited = started.elapsed();
        assert!(waited >= DRAIN && waited < DRAIN * 2, "{waited:?}");
        drop(read);
    }
}
