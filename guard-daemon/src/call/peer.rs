//! Who is on the other end of a connection: the credentials the kernel recorded at connect
//! (SO_PEERCRED, SO_PEERGROUPS) and the cgroup the peer runs in.

use std::{
    fs, io,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

/// The credentials of a connected peer, with its groups.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, as the kernel recorded them at connect.
    #[serde(skip, default)]
    pub groups: Vec<u32>,
    /// The peer's cgroup v2 path (from /proc/PID/cgroup), e.g. `/guard/call-17`.
    #[serde(skip, default)]
    pub cgroup: String,
}

impl Peer {
    /// Reads the peer's credentials from a connected socket. The ids and groups are the ones
    /// the kernel recorded at connect (SO_PEERCRED, SO_PEERGROUPS), not what /proc shows later
    /// under the same pid. The cgroup has no such record: it is read from /proc and then kept
    /// only if the peer's pidfd (SO_PEERPIDFD) shows the process still there, so that the pid
    /// was not reused by another; a peer that is gone (its connection held by a child, say) is
    /// refused, since where it ran decides whether it is a confined call.
    pub fn of(stream: &impl AsFd) -> io::Result<Self> {
        let fd = stream.as_fd();
        let mut peer = Self::credentials(stream)?;
        let pidfd = peer_pidfd(fd)?;
        let cgroup = cgroup_of(peer.pid);
        let alive = match &pidfd {
            Some(pidfd) => signal0(pidfd),
            // A kernel before 6.5: no pidfd to pin the pid with; a /proc read that worked is
            // taken as it is.
            None => cgroup.is_some(),
        };
        match cgroup {
            Some(cgroup) if alive => {
                peer.cgroup = cgroup;
                Ok(peer)
            }
            _ => Err(gone(peer.pid)),
        }
    }

    /// The ids and groups the kernel recorded at connect, and nothing else: two getsockopts,
    /// what a connection is admitted on before it costs anything more (its cgroup is empty).
    pub fn credentials(stream: &impl AsFd) -> io::Result<Self> {
        let fd = stream.as_fd();
        let cred = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)?;
        Ok(Self {
            pid: cred.pid(),
            uid: cred.uid(),
            gid: cred.gid(),
            groups: peer_groups(fd)?,
            cgroup: String::new(),
        })
    }

    /// Whether the peer runs inside the cgroup subtree `root` (relative to the v2 mount, e.g.
    /// `/guard`): a confined call talking to guardd.
    pub fn inside(&self, root: &str) -> bool {
        self.cgroup == root
            || self
                .cgroup
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Whether the peer had `gid` as its group or a supplementary one at connect.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The error for a peer that exited before guardd could tell where it ran.
fn gone(pid: i32) -> io::Error {
    io::Error::other(format!(
        "peer pid {pid} exited before guardd read its cgroup; connection refused"
    ))
}

/// The cgroup v2 path of `pid`, or `None` when /proc has no such process.
fn cgroup_of(pid: i32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    Some(
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The peer's supplementary groups as the kernel recorded them at connect (SO_PEERGROUPS).
fn peer_groups(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * size_of::<u32>()) as libc::socklen_t;
        // SAFETY: the buffer holds `len` bytes; the kernel writes at most that many and sets
        // `len` to what it wrote, or to what it needs with ERANGE.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc == 0 {
            groups.truncate(len as usize / size_of::<u32>());
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        let needed = len as usize / size_of::<u32>();
        if e.raw_os_error() != Some(libc::ERANGE) || needed <= groups.len() {
            return Err(e);
        }
        groups.resize(needed, 0);
    }
}

/// A pidfd of the peer (SO_PEERPIDFD), or `None` on a kernel without it (before 6.5).
fn peer_pidfd(fd: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    let mut pidfd: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: one int is written through the pointer.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&raw mut pidfd).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOPROTOOPT) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: the kernel returned a new descriptor, owned here alone.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// Whether the process of `pidfd` still holds its pid (running, or a zombie not yet reaped).
fn signal0(pidfd: &OwnedFd) -> bool {
    // SAFETY: signal 0 checks the target only; no siginfo is passed.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener on a fresh socket path and a forked child that connects to it, then exits
    /// (`_exit`, no destructors), and is reaped before the connection is accepted.
    fn connection_of_a_gone_peer() -> std::os::unix::net::UnixStream {
        let dir = std::env::temp_dir().join(format!("guard-peer-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let addr = nix::sys::socket::UnixAddr::new(path.as_path()).expect("addr");
        // SAFETY: the child makes raw syscalls only (socket, connect, _exit) before it exits.
        match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => {
                // SAFETY: plain syscalls on values prepared before the fork.
                unsafe {
                    let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                    let rc = libc::connect(
                        fd,
                        nix::sys::socket::SockaddrLike::as_ptr(&addr),
                        nix::sys::socket::SockaddrLike::len(&addr),
                    );
                    libc::_exit(if rc == 0 { 0 } else { 1 });
                }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
        let (stream, _) = listener.accept().expect("accept");
        let _ = fs::remove_dir_all(&dir);
        stream
    }

    #[test]
    fn a_peer_that_is_gone_is_refused_not_taken_for_one_outside_the_guard() {
        // Where it ran is unknown, and its pid may be another process's by now: a confined
        // call could connect, hand the connection to a child and exit.
        let stream = connection_of_a_gone_peer();
        let e = Peer::of(&stream).expect_err("a gone peer was accepted");
        assert!(
            e.to_string()
                .contains("exited before guardd read its cgroup"),
            "{e}"
        );
    }

    #[test]
    fn a_live_peer_has_its_cgroup_and_the_groups_of_its_connect() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let peer = Peer::of(&a).expect("peer");
        assert_eq!(peer.pid, std::process::id() as i32);
        assert_eq!(peer.uid, nix::unistd::getuid().as_raw());
        let own = fs::read_to_string("/proc/self/cgroup").expect("cgroup");
        assert!(
            own.contains(&format!("0::{}", peer.cgroup)),
            "{own} vs {}",
            peer.cgroup
        );
        let mut groups: Vec<u32> = nix::unistd::getgroups()
            .expect("getgroups")
            .iter()
            .map(|g| g.as_raw())
            .collect();
        let mut seen = peer.groups.clone();
        groups.sort_unstable();
        seen.sort_unstable();
        assert_eq!(seen, groups);
    }

    #[test]
    fn a_peer_inside_the_guard_subtree_is_recognised() {
        let mut p = Peer {
            pid: 1,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            cgroup: "/guard/call-3".into(),
        };
        assert!(p.inside("/guard"));
        assert!(!p.inside("/guard-other"));
        p.cgroup = "/guard-other/call-3".into();
        assert!(!p.inside("/guard"));
    }
}
