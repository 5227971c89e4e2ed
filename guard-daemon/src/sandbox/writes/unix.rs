//! A call's connects to Unix sockets, made by guardd for it. A call in a network namespace of
//! its own may create Unix stream sockets (Python's `multiprocessing.Manager` and forkserver, a
//! test server on a socket file, node's `net` on a path): it needs them, and on this kernel
//! nothing tells one socket path from another at connect (no LSM hook loads here, landlock does
//! not judge a connect). So each `connect` of such a call stops in its seccomp filter, and for a
//! Unix socket guardd itself connects the call's socket (taken with `pidfd_getfd`) and answers
//! with the result; the call's own `connect` never runs. Letting the kernel go on after a
//! check would be no check: another thread of the call could rewrite the address in between.
//!
//! - A pathname socket is found as the thread would find it ([`Walker`], in the call's mount
//!   view), and connected through the descriptor of what was found, only where the call's rules
//!   let it make sockets (its write effects, its `/tmp` and `/dev/shm`): a socket the call or
//!   the project made. Anywhere else (a service's socket, guardd's own) is refused (EACCES)
//!   and a divergence, but the name-service sockets the C library tries on its own, refused as
//!   absent and not reported.
//! - An abstract socket is connected in the call's network namespace, whose abstract names are
//!   its own.
//! - guardd connects with the call's uid and gid as its thread's effective ids, so the peer's
//!   `SO_PEERCRED` names the call's user, not root (its pid is guardd's, though).
//! - A connect to a peer whose backlog is full waits at most 5 s ([`BACKLOG_WAIT`]), and the
//!   call's other stopped syscalls with it: ETIMEDOUT, where the call's own would wait on.
//!
//! Any other socket's connect goes on in the kernel, where the cgroup programs judge it; and
//! there, a Unix connect that is not guardd's own is refused ([`super::backstop`]): a
//! descriptor the call swaps between guardd's look and the kernel's connect reaches nothing.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use ::landlock::AccessFs;
use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

use super::{
    Attempt, AttemptKind, WriteRules,
    listener::{Listener, Notification, read_mem},
    walk::{Found, Lost, Root, Walker, shown},
};

/// The directories of the sockets the C library's name services try by themselves: nscd's,
/// systemd's user database. A socket found there is refused as absent (the lookup goes on
/// without it), never an attempt.
const NAME_SERVICES: &[&str] = &["/run/systemd/userdb", "/var/run/nscd", "/run/nscd"];

/// `sizeof(struct sockaddr_un)`.
const SOCKADDR_UN: usize = 110;

/// What guardd answers a stopped `connect`.
pub(super) enum Answer {
    /// Not a Unix socket: the kernel goes on, and its cgroup programs judge.
    GoOn,
    /// Done by guardd: 0, or the errno the call's `connect` returns.
    Done(Errno, Option<Attempt>),
}

/// The connect `n` asks for, done for the call when its socket is a Unix one; `slash` is the
/// call's root.
pub(super) fn connect(
    listener: &Listener,
    rules: &WriteRules,
    slash: Option<&Root>,
    n: &Notification,
) -> Answer {
    let Some(socket) = socket_of(n.pid, n.args[0] as i32) else {
        // No such descriptor, or the thread is gone.
        return Answer::Done(Errno::EBADF, None);
    };
    match domain(&socket) {
        Some(libc::AF_UNIX) => {}
        Some(_) => return Answer::GoOn,
        None => return Answer::Done(Errno::ENOTSOCK, None),
    }
    let len = usize::try_from(n.args[2]).unwrap_or(usize::MAX);
    if !(3..=SOCKADDR_UN).contains(&len) {
        return Answer::Done(Errno::EINVAL, None);
    }
    let mut addr = vec![0u8; len];
    if read_mem(n.pid, n.args[1], &mut addr) != Some(len) {
        return Answer::Done(Errno::EFAULT, None);
    }
    // The pid names the thread that asked only while its syscall waits.
    if !listener.pending(n.id) {
        return Answer::Done(Errno::EINTR, None);
    }
    if u16::from_ne_bytes([addr[0], addr[1]]) != libc::AF_UNIX as u16 {
        return Answer::Done(Errno::EINVAL, None);
    }
    if addr[2] == 0 {
        return Answer::Done(abstract_connect(n.pid, rules.user, &socket, &addr), None);
    }
    let path = &addr[2..];
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    pathname(rules, slash, n, &socket, path)
}

/// A connect to the socket file `name`, judged and done; `socket` is the call's socket.
fn pathname(
    rules: &WriteRules,
    slash: Option<&Root>,
    n: &Notification,
    socket: &OwnedFd,
    name: &[u8],
) -> Answer {
    let shown_name = || String::from_utf8_lossy(name).into_owned();
    let refused = |path: String| {
        let dir = std::path::Path::new(&path).parent();
        if NAME_SERVICES
            .iter()
            .any(|d| dir == Some(std::path::Path::new(d)))
        {
            return Answer::Done(Errno::ENOENT, None);
        }
        let attempt = Attempt {
            pid: n.pid,
            path,
            flags: 0,
            kind: AttemptKind::UnixConnect,
        };
        Answer::Done(Errno::EACCES, Some(attempt))
    };
    let Some(root) = slash else {
        return refused(shown_name());
    };
    let start = (!name.starts_with(b"/"))
        .then(|| super::dir_of(n.pid, libc::AT_FDCWD))
        .flatten();
    let walker = Walker { pid: n.pid, root };
    let (fd, stat, chain) = match walker.find(start, name, false) {
        Ok(Found::File { fd, stat, chain }) => (fd, stat, chain),
        Ok(Found::New { .. }) | Err(Lost::Fails) => return Answer::Done(Errno::ENOENT, None),
        Err(Lost::Unfollowed) => return refused(shown_name()),
    };
    if !rules.grant(&chain, AccessFs::MakeSock.into()) {
        return refused(shown(&fd, None));
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Answer::Done(Errno::ECONNREFUSED, None);
    }
    // The socket found, by its descriptor: no name is looked up again.
    let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    addr.extend_from_slice(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes());
    let done = as_caller(rules.user, || connect_raw(socket, &addr));
    Answer::Done(done.err().unwrap_or(Errno::from_raw(0)), None)
}

/// How long guardd waits for a peer whose backlog is full before it answers ETIMEDOUT: a call's
/// blocking connect waits, but guardd's thread is not held by a peer that never accepts.
const BACKLOG_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// connect(2) of `socket` to the sockaddr_un `addr`. On the call's blocking socket, guardd's
/// own connect does not block: the description is non-blocking meanwhile, and a full backlog
/// is tried again until [`BACKLOG_WAIT`].
fn connect_raw(socket: &OwnedFd, addr: &[u8]) -> Result<(), Errno> {
    use nix::fcntl::{FcntlArg, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(socket, FcntlArg::F_GETFL)?);
    let blocking = !flags.contains(OFlag::O_NONBLOCK);
    if blocking {
        fcntl(socket, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    }
    let deadline = std::time::Instant::now() + BACKLOG_WAIT;
    let done = loop {
        // SAFETY: `addr` holds a sockaddr_un of `addr.len()` bytes, which the kernel checks as
        // it would the call's own; the socket is borrowed for the call.
        let rc = unsafe {
            libc::connect(
                socket.as_raw_fd(),
                addr.as_ptr().cast(),
                addr.len() as libc::socklen_t,
            )
        };
        match (rc, Errno::last()) {
            (0, _) => break Ok(()),
            (_, Errno::EAGAIN) if blocking && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            (_, Errno::EAGAIN) if blocking => break Err(Errno::ETIMEDOUT),
            (_, e) => break Err(e),
        }
    };
    if blocking {
        fcntl(socket, FcntlArg::F_SETFL(flags))?;
    }
    done
}

/// A connect to the abstract address `addr` (as the call gave it), in the network namespace of
/// the call's thread `pid`, whose abstract names are the call's own.
fn abstract_connect(pid: i32, user: (u32, u32), socket: &OwnedFd, addr: &[u8]) -> Errno {
    let open =
        |path: &str| nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty());
    let (Ok(theirs), Ok(ours)) = (
        open(&format!("/proc/{pid}/ns/net")),
        open("/proc/thread-self/ns/net"),
    ) else {
        return Errno::ECONNREFUSED;
    };
    if nix::sched::setns(&theirs, nix::sched::CloneFlags::CLONE_NEWNET).is_err() {
        return Errno::ECONNREFUSED;
    }
    let done = as_caller(user, || connect_raw(socket, addr));
    if let Err(e) = nix::sched::setns(&ours, nix::sched::CloneFlags::CLONE_NEWNET) {
        // This thread serves no one else until it is back in guardd's namespace.
        tracing::error!("a call's listener could not return to guardd's network namespace: {e}");
        std::process::abort();
    }
    done.err().unwrap_or(Errno::from_raw(0))
}

/// Runs `f` with `user`'s uid and gid as this thread's effective ids (and so its file-system
/// ids), then gives guardd's back: a peer reads the call's user in `SO_PEERCRED`, and the
/// socket file's permissions are the call's. Per thread: the raw syscalls, not libc's, which
/// change every thread's ids.
fn as_caller<T>(user: (u32, u32), f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let (uid, gid) = user;
    // SAFETY: integer arguments; -1 keeps an id as it is.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: as above.
    let set = unsafe {
        libc::syscall(libc::SYS_setresgid, -1, gid, -1) == 0
            && libc::syscall(libc::SYS_setresuid, -1, uid, -1) == 0
    };
    let out = if set { f() } else { Err(Errno::EACCES) };
    // SAFETY: as above; guardd's real and saved ids are root's, so it may take them back.
    let back = unsafe {
        libc::syscall(libc::SYS_setresuid, -1, euid, -1) == 0
            && libc::syscall(libc::SYS_setresgid, -1, egid, -1) == 0
    };
    if !back {
        tracing::error!("a call's listener could not take back guardd's ids");
        std::process::abort();
    }
    // The effective ids set the file-system ids too: the listener judges as the call's user.
    // SAFETY: integer arguments.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
    }
    out
}

/// `PIDFD_THREAD` (Linux 6.9): a pidfd of a thread, not only of a thread group's leader.
const PIDFD_THREAD: libc::c_int = libc::O_EXCL;

/// The call's socket `fd` of thread `tid`, as a descriptor of guardd's: by a pidfd of the
/// thread itself, or, on a kernel without `PIDFD_THREAD`, of its thread group, checked to be the
/// same file the thread holds. (A pidfd of a thread that leads no group fails without the
/// flag: an outside pass's second thread connected unjudged.)
fn socket_of(tid: i32, fd: i32) -> Option<OwnedFd> {
    // SAFETY: integer arguments; each returns a new descriptor or -1.
    let mut pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) };
    let by_group = pidfd < 0;
    if by_group {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        let tgid: i32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: as above.
        pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
    }
    if pidfd < 0 {
        return None;
    }
    // SAFETY: a descriptor just opened, owned here.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: as above.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    // SAFETY: as above.
    let got = (got >= 0).then(|| unsafe { OwnedFd::from_raw_fd(got as i32) })?;
    if by_group {
        // The thread's own table may differ from its group leader's: the same socket, or none.
        use std::os::unix::fs::MetadataExt as _;
        let theirs = std::fs::metadata(format!("/proc/{tid}/fd/{fd}")).ok()?;
        let ours = nix::sys::stat::fstat(&got).ok()?;
        if (theirs.dev(), theirs.ino()) != (ours.st_dev, ours.st_ino) {
            return None;
        }
    }
    Some(got)
}

/// The address family of `socket`, or `None` when it is no socket.
fn domain(socket: &OwnedFd) -> Option<i32> {
    let mut family: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_DOMAIN writes one c_int through the pointers, which point at locals.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut family as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(family)
}
