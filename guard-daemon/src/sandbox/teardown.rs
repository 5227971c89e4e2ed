//! A call's mount namespace, held past the call's end so that tearing it down is off its path.
//!
//! The tool is the last process in its mount namespace (`clone`, `child::mounts`), so its exit
//! would drop the namespace from within `exit(2)`: every mount in it unmounted, then an RCU
//! grace period waited for before they are freed (`namespace_unlock`), all before its parent
//! can reap it and the caller hear of its end. The namespace holds a copy of the host's whole
//! mount table, so that cost grows with the host's mounts. From a kill to the reap of a process
//! in new mount, pid and IPC namespaces, at the median: 70-100 µs with this VM's 26 mounts,
//! 117-149 µs with 126 and 260 µs with 326 (a host with container or snap mounts); with the
//! namespace held, 55, 55-96 and 102 µs. With 2,000 mounts, a shell call's exit to its reap
//! took 1.36 ms, and 0.24 ms held. A reference taken through the child's pidfd right after its
//! `execve` (`PIDFD_GET_MNT_NAMESPACE`) keeps the namespace alive past the exit; once the call
//! is over it goes to one thread of guardd, which drops such references in turn, where the
//! grace period holds up no caller.
//!
//! The reference is guardd's alone (close-on-exec), and no process is left in the namespace:
//! nothing of the call reaches it, and its mounts (read-only, or copies of what the call could
//! change) are only kept a little longer. The call's temporary directory is one of those
//! copies; its removal from the host at the call's end detaches it there. Where the kernel
//! lacks the ioctl (before 6.11), or the tool has exited already, nothing is held and the exit
//! tears the namespace down as before. At most [`QUEUED`] references wait for the thread: past
//! that, one is dropped where its call ends.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
};

/// `PIDFD_GET_MNT_NAMESPACE`: `_IO(PIDFS_IOCTL_MAGIC, 3)`, the magic being 0xFF.
const PIDFD_GET_MNT_NAMESPACE: libc::c_ulong = 0xFF03;

/// The teardown thread's name, as `ps -L` shows it.
const THREAD: &str = "guardd-teardown";

/// A reference to a call's mount namespace; dropped, it goes to the teardown thread.
#[derive(Debug)]
pub(super) struct MountNs(Option<OwnedFd>);

impl MountNs {
    /// The mount namespace of the process behind `pidfd`, while that process lives.
    pub(super) fn of(pidfd: &OwnedFd) -> Option<Self> {
        // SAFETY: an ioctl without argument on a pidfd this borrows; a new fd or -1.
        let raw = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_MNT_NAMESPACE as _, 0) };
        // SAFETY: a non-negative result is a new fd that nothing else owns.
        (raw >= 0).then(|| Self(Some(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })))
    }
}

/// How many references may wait for the teardown thread. A teardown can stall in the kernel
/// (the last reference to a hung network file system, say): the references behind it, and the
/// kernel memory each namespace keeps (about 0.85 MB with 2,000 host mounts), stay bounded, and
/// past the bound a reference is dropped where its call ends, as the tool's exit would have.
const QUEUED: usize = 1024;

impl Drop for MountNs {
    fn drop(&mut self) {
        // Where the thread could not be started, the namespace goes here.
        if let (Some(fd), Some(queue)) = (self.0.take(), queue()) {
            hand_over(queue, fd);
        }
    }
}

/// Queues `fd` for the teardown thread, or drops it here when the queue is full (or the
/// thread gone); says so once.
fn hand_over(queue: &mpsc::SyncSender<OwnedFd>, fd: OwnedFd) {
    static SAID: AtomicBool = AtomicBool::new(false);
    let fd = match queue.try_send(fd) {
        Ok(()) => return,
        Err(mpsc::TrySendError::Full(fd) | mpsc::TrySendError::Disconnected(fd)) => fd,
    };
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "{THREAD}: {QUEUED} mount namespaces wait for their teardown (one stalled in the \
             kernel?): calls' namespaces now go at their end, on their own path"
        );
    }
    drop(fd);
}

/// The teardown thread's queue; the thread starts with the first call that ends.
fn queue() -> Option<&'static mpsc::SyncSender<OwnedFd>> {
    static QUEUE: OnceLock<Option<mpsc::SyncSender<OwnedFd>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<OwnedFd>(QUEUED);
            let thread = std::thread::Builder::new()
                .name(THREAD.into())
                .spawn(move || {
                    super::batch_policy(THREAD);
                    rx.into_iter().for_each(drop);
                });
            match thread {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(
                        "{THREAD}: not started, calls' mount views go at their exit: {e}"
                    );
                    None
                }
            }
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// The namespace an nsfs link or fd names (`mnt:[4026532177]`).
    fn ns_link(path: &str) -> Option<String> {
        std::fs::read_link(path)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    #[test]
    fn past_the_queue_s_bound_a_reference_is_dropped_where_its_call_ends() {
        // A queue of one that nothing drains: a stalled teardown thread.
        let (queue, stalled) = mpsc::sync_channel::<OwnedFd>(1);
        let dir = crate::audit::testdir::TestDir::new("teardown");
        let open = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "").expect("write");
            let fd = OwnedFd::from(std::fs::File::open(&path).expect("open"));
            (format!("/proc/self/fd/{}", fd.as_raw_fd()), path, fd)
        };
        // Whether the descriptor's number still names that file (another test's open may take
        // the number once it is free).
        let held =
            |link: &str, path: &std::path::Path| std::fs::read_link(link).is_ok_and(|p| p == path);
        let (first_link, first_path, first) = open("first");
        let (second_link, second_path, second) = open("second");
        hand_over(&queue, first);
        assert!(held(&first_link, &first_path), "queued: still open");
        hand_over(&queue, second);
        assert!(
            !held(&second_link, &second_path),
            "the queue is full: closed at once"
        );
        drop(stalled);
    }

    #[test]
    fn a_call_s_mount_namespace_outlives_its_process_and_goes_on_the_teardown_thread() {
        if !crate::sandbox::privileged() {
            return;
        }
        let mut child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "30"])
            .spawn()
            .expect("unshare");
        let pid = child.id() as libc::pid_t;
        let ours = ns_link("/proc/self/ns/mnt");
        // The namespace is the child's once unshare has exec'd sleep in it.
        let deadline = Instant::now() + Duration::from_secs(10);
        let theirs = loop {
            let link = ns_link(&format!("/proc/{pid}/ns/mnt"));
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm == "sleep\n" && link != ours {
                break link.expect("the child's namespace");
            }
            assert!(Instant::now() < deadline, "unshare did not exec sleep");
            std::thread::sleep(Duration::from_millis(5));
        };
        // SAFETY: pidfd_open on our own child; the result is checked.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(raw >= 0, "pidfd_open");
        // SAFETY: a new fd nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let held = MountNs::of(&pidfd).expect("the child's mount namespace");
        let fd = held.0.as_ref().expect("held").as_raw_fd();
        let link = format!("/proc/self/fd/{fd}");
        assert_eq!(ns_link(&link).as_deref(), Some(theirs.as_str()));
        // Not handed to a tool launched meanwhile.
        // SAFETY: F_GETFD on an fd this test holds.
        let fd_flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0);

        child.kill().expect("kill");
        child.wait().expect("reaped");
        // The process is gone, the namespace it was in is still held.
        assert_eq!(ns_link(&link).as_deref(), Some(theirs.as_str()));
        assert!(MountNs::of(&pidfd).is_none(), "a reaped process has none");

        drop(held);
        // The teardown thread closes the reference (and runs as a batch thread).
        let deadline = Instant::now() + Duration::from_secs(10);
        while ns_link(&link).as_deref() == Some(theirs.as_str()) {
            assert!(Instant::now() < deadline, "the reference was never dropped");
            std::thread::sleep(Duration::from_millis(5));
        }
        let policies = crate::sandbox::thread_policies(THREAD);
        assert_eq!(policies, [libc::SCHED_BATCH], "the teardown thread");
    }
}
