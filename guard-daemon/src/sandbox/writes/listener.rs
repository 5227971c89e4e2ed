//! The seccomp listener of a call, from guardd's side: wait for a notification, take it, check
//! that it is still pending, answer "go on", and read a string from the waiting thread.

use std::{
    io,
    os::fd::{AsRawFd as _, OwnedFd},
};

/// One stopped syscall: which, with which arguments, by which thread (as guardd's pid
/// namespace numbers it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Notification {
    pub id: u64,
    pub pid: i32,
    pub nr: i64,
    pub args: [u64; 6],
}

/// What waiting on the listener gave.
pub(super) enum Next {
    Notification(Notification),
    /// Nothing to take after all (the thread was killed meanwhile): wait again.
    Gone,
    /// No process of the call is left: nothing more will come.
    Hangup,
}

/// A call's seccomp listener (`SECCOMP_FILTER_FLAG_NEW_LISTENER`).
pub(super) struct Listener {
    fd: OwnedFd,
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the thread that stopped and the one that
/// answers hand over as a synchronous pair, on one CPU, instead of each waking the other
/// through the scheduler.
const SYNC_WAKE_UP: u64 = 1;

impl Listener {
    pub fn new(fd: OwnedFd) -> Self {
        // SAFETY: SET_FLAGS takes its flags by value. An older kernel refuses (EINVAL): the
        // hand-over is then only slower.
        unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SYNC_WAKE_UP,
            )
        };
        Self { fd }
    }

    /// Blocks until a notification is pending or the call is gone, then takes it.
    /// (`SECCOMP_IOCTL_NOTIF_RECV` itself would wait on, past the call's end.)
    pub fn next(&self) -> io::Result<Next> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: poll on one pollfd on this stack.
            let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
            if rc >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if pfd.revents & libc::POLLIN == 0 {
            return Ok(Next::Hangup);
        }
        // SAFETY: the kernel requires a zeroed buffer; seccomp_notif is plain integers.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV writes one seccomp_notif into `n`, which outlives the call.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT | libc::EINTR) => Ok(Next::Gone),
                _ => Err(e),
            };
        }
        Ok(Next::Notification(Notification {
            id: n.id,
            pid: n.pid as i32,
            nr: i64::from(n.data.nr),
            args: n.data.args,
        }))
    }

    /// Whether notification `id` still waits: its thread was neither killed nor interrupted,
    /// so the pid it carried still names that thread.
    pub fn pending(&self, id: u64) -> bool {
        // SAFETY: ID_VALID reads one u64 from this stack.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            )
        };
        rc == 0
    }

    /// Lets the kernel carry on with the syscall, as if no filter had stopped it: the checks
    /// after seccomp (landlock, the mount view, permissions) decide it. A thread that is gone
    /// meanwhile is no error.
    pub fn go_on(&self, id: u64) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        })
    }

    /// Answers notification `id` in the kernel's stead: its syscall returns 0, or fails with
    /// `errno`. A thread that is gone meanwhile is no error.
    pub fn answer(&self, id: u64, errno: nix::errno::Errno) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: if errno as i32 == 0 {
                0
            } else {
                -(errno as i32)
            },
            flags: 0,
        })
    }

    /// Sends `resp`; a notification whose thread is gone (ENOENT) is no error.
    fn send(&self, resp: libc::seccomp_notif_resp) -> io::Result<()> {
        // SAFETY: SEND reads one seccomp_notif_resp from this stack.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &resp as *const libc::seccomp_notif_resp,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The NUL-terminated string at `addr` in `pid`'s memory, up to `max` bytes; `None` when it
/// cannot be read (a bad pointer, which fails the syscall too) or has no NUL within `max`.
pub(super) fn read_cstr(pid: i32, addr: u64, max: usize) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        // Page by page: a read across into an unmapped page fails whole.
        let chunk = ((PAGE - at % PAGE) as usize).min(max - out.len());
        let mut buf = vec![0u8; chunk];
        let n = read_mem(pid, at, &mut buf)?;
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        if n < chunk {
            return None;
        }
        at += n as u64;
    }
    None
}

/// Reads `buf.len()` bytes at `addr` of `pid`'s memory; how many it read.
pub(super) fn read_mem(pid: i32, addr: u64, buf: &mut [u8]) -> Option<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, which outlives the call; the remote one is only
    // read by the kernel, in the other process.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    usize::try_from(n).ok()
}
