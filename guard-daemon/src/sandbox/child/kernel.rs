//! The child's steps as the kernel makes them: raw syscalls on what was prepared before the
//! clone, each async-signal-safe (no allocation, no locks, no panics).

use std::{ffi::CStr, os::fd::RawFd};

use nix::errno::Errno;

use super::{ChildCtx, Failed, Stage, Steps, check, landlock, mounts::mounts};
use crate::sandbox::limits::Rlimits;

/// The steps as the kernel makes them, in the child: raw syscalls only.
pub(super) struct Kernel;

impl Steps for Kernel {
    fn join_cgroup(&mut self, procs: RawFd) -> Result<(), Failed> {
        join_cgroup(procs, Stage::Cgroup)
    }
    fn join_limit_cgroups(&mut self, procs: &[RawFd]) -> Result<(), Failed> {
        procs
            .iter()
            .try_for_each(|&fd| join_cgroup(fd, Stage::LimitsCgroup))
    }
    fn mounts(&mut self, ctx: &ChildCtx) -> Result<(), Failed> {
        mounts(ctx.writable, ctx.protected, ctx.view, ctx.tmp)
    }
    fn loopback(&mut self) -> Result<(), Failed> {
        loopback_up()
    }
    fn new_session(&mut self) -> Result<(), Failed> {
        new_session()
    }
    fn stdio(&mut self, fds: [RawFd; 3]) -> Result<(), Failed> {
        stdio(fds)
    }
    fn close_fds_at_exec(&mut self) -> Result<(), Failed> {
        close_fds_at_exec()
    }
    fn reset_signals(&mut self) -> Result<(), Failed> {
        reset_signals()
    }
    fn set_rlimits(&mut self, rlimits: &Rlimits) -> Result<(), Failed> {
        set_rlimits(rlimits)
    }
    fn setgroups(&mut self) -> Result<(), Failed> {
        // SAFETY: setgroups with a count of 0 reads no list.
        let rc = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
        check(rc, Stage::Setgroups)
    }
    fn setgid(&mut self, gid: libc::gid_t) -> Result<(), Failed> {
        // SAFETY: integer arguments.
        let rc = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
        check(rc, Stage::Setgid)
    }
    fn setuid(&mut self, uid: libc::uid_t) -> Result<(), Failed> {
        // SAFETY: integer arguments.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
        check(rc, Stage::Setuid)
    }
    fn keep_capabilities(&mut self, keep: u64) -> Result<(), Failed> {
        keep_capabilities(keep)
    }
    fn no_new_privs(&mut self) -> Result<(), Failed> {
        no_new_privs()
    }
    fn die_with_parent(&mut self, parent: RawFd) -> Result<(), Failed> {
        die_with_parent(parent)
    }
    fn chdir(&mut self, cwd: &CStr) -> Result<(), Failed> {
        chdir(cwd)
    }
    fn landlock(
        &mut self,
        prepared: &landlock::Prepared,
        proc_self: &CStr,
        whole_proc: bool,
        shm: Option<landlock::Access>,
    ) -> Result<(), Failed> {
        prepared
            .restrict_self(proc_self, whole_proc, shm)
            .map_err(|errno| Failed {
                stage: Stage::Landlock,
                errno,
            })
    }
    fn watch_writes(&mut self, filter: &libc::sock_fprog, to: RawFd) -> Result<(), Failed> {
        watch_writes(filter, to)
    }
    fn install_seccomp(&mut self, filters: &[libc::sock_fprog]) -> Result<(), Failed> {
        install_seccomp(filters)
    }
    fn await_decision(
        &mut self,
        gate: &std::sync::atomic::AtomicU32,
        deadline: &libc::timespec,
    ) -> Result<(), Failed> {
        crate::call::gate::wait(gate, deadline).map_err(|errno| Failed {
            stage: Stage::Decision,
            errno,
        })
    }
}

/// Into a cgroup through its `cgroup.procs` (the call's, where the clone could not put the
/// child) or a v1 limit cgroup's `tasks`: "0" there moves the calling thread alone, which is the
/// whole child, without the global lock a `cgroup.procs` write takes (see `clone`).
fn join_cgroup(procs: RawFd, stage: Stage) -> Result<(), Failed> {
    // SAFETY: write on an fd the parent opened, from a static one-byte buffer.
    let rc = unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) };
    check(rc as _, stage)
}

/// Brings up `lo` in the call's own network namespace (a new one has it down): what the call
/// serves there, it reaches there, and nothing else is there to reach.
fn loopback_up() -> Result<(), Failed> {
    // SAFETY: a datagram socket for the interface ioctls; returns a descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(fd as _, Stage::Loopback)?;
    // SAFETY: ifreq is plain bytes and integers, valid when zeroed.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name[..2].copy_from_slice(&[b'l' as libc::c_char, b'o' as libc::c_char]);
    // SAFETY: SIOCGIFFLAGS fills the flags of the interface named in `req`, on this stack.
    let mut rc = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) };
    if rc == 0 {
        // SAFETY: the union's flags member, which SIOCGIFFLAGS just set.
        unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: SIOCSIFFLAGS reads `req`, on this stack.
        rc = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) };
    }
    let errno = Errno::last_raw();
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(Failed {
            stage: Stage::Loopback,
            errno,
        });
    }
    Ok(())
}

/// A session of its own: no controlling terminal, and its own process group.
fn new_session() -> Result<(), Failed> {
    // SAFETY: setsid takes no arguments and is async-signal-safe.
    check(unsafe { libc::setsid() } as _, Stage::Setsid)
}

/// stdio: first to fds >= 10 (so dup2 cannot clobber a source that is itself 0..2, and a source
/// already at its target still loses close-on-exec), then onto 0, 1, 2.
fn stdio(fds: [RawFd; 3]) -> Result<(), Failed> {
    let mut high = [0; 3];
    for (i, &fd) in fds.iter().enumerate() {
        // SAFETY: fcntl on an fd the parent opened; F_DUPFD_CLOEXEC only creates a new fd.
        high[i] = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        check(high[i] as _, Stage::Stdio)?;
    }
    for (i, &fd) in high.iter().enumerate() {
        // SAFETY: dup2 from an fd made just above onto 0..2, whose old files nothing here uses.
        let rc = unsafe { libc::dup2(fd, i as libc::c_int) };
        check(rc as _, Stage::Stdio)?;
    }
    Ok(())
}

/// Every fd above stdio is closed at exec; the report pipe must stay open until then.
fn close_fds_at_exec() -> Result<(), Failed> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on fds; integer arguments.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    check(rc, Stage::CloseFds)
}

/// Default dispositions, then an empty signal mask: the Rust runtime ignores SIGPIPE (and an
/// ignored signal stays ignored across exec), and the daemon's handlers must not run here, on
/// the child's stack, once the signals blocked across the clone are let through.
fn reset_signals() -> Result<(), Failed> {
    // SAFETY: sigaction is a plain C struct, valid when zeroed (no flags, empty mask).
    let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    dfl.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=64 {
        // SIGKILL, SIGSTOP and libc's internal signals refuse; nothing to reset there.
        // SAFETY: sigaction reads `dfl` from this stack and writes nothing (null old action).
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
    }
    // SAFETY: sigset_t is a plain bit array, valid when zeroed; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid sigset_t on this stack.
    unsafe { libc::sigemptyset(&mut set) };
    // SAFETY: pthread_sigmask reads `set` and writes nothing (null old set); async-signal-safe.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
    check(rc as _, Stage::Signals)
}

/// Signals queued to a call's processes count among its user's pending signals, and each queue
/// is checked against the receiving process's limit: this one keeps a call from filling its
/// user's budget (a call as a workspace's owner would starve the owner's own processes), and is
/// far above what any tool queues.
const SIGPENDING_MAX: u64 = 4096;

/// Rlimits: no core dumps and a bound on queued signals, in every mode, and the limits of
/// rlimit mode, while still privileged to raise a hard limit.
///
/// A core dump is a file written for the call that no syscall of it opens: the kernel creates
/// it beside the crash (landlock still judges that), or, with a `|helper` core_pattern
/// (systemd-coredump, apport), a root helper stores the call's memory (what it read) wherever
/// it keeps dumps, outside every effect. A hard limit of 0 cannot be raised by the tool's user;
/// the kernel writes no core file under it, and systemd-coredump stores nothing below a page
/// (a pipe helper is started whatever the limit, and decides for itself).
fn set_rlimits(rlimits: &Rlimits) -> Result<(), Failed> {
    for (res, value) in [
        (libc::RLIMIT_CORE, Some(0)),
        (libc::RLIMIT_SIGPENDING, Some(SIGPENDING_MAX)),
        (libc::RLIMIT_AS, rlimits.address_space),
        (libc::RLIMIT_NPROC, rlimits.nproc),
    ] {
        if let Some(v) = value {
            let lim = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            // SAFETY: setrlimit reads `lim` from this stack.
            check(unsafe { libc::setrlimit(res, &lim) } as _, Stage::Rlimit)?;
        }
    }
    Ok(())
}

/// `capset(2)`'s header and one of its two halves (capabilities 0-31, 32-63).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64 capabilities, in two [`CapData`].
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// A root tool's capabilities, `keep` and no others (see `caps`). The bounding set first, while
/// `CAP_SETPCAP` is still there to drop from it: an exec as uid 0 gets all of it, and it can
/// never grow again. Then the ambient set, which an exec would keep, and the thread's own sets
/// (none inheritable: the bounding set alone is what an exec as root gets). A capability
/// guardd lacks itself cannot be kept: `capset` refuses it (EPERM), and the call does not run.
fn keep_capabilities(keep: u64) -> Result<(), Failed> {
    for cap in 0..64 {
        if keep & 1 << cap != 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc < 0 {
            // Past the kernel's last capability.
            if Errno::last_raw() == libc::EINVAL {
                break;
            }
            return check(rc as _, Stage::Capabilities);
        }
    }
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    check(rc as _, Stage::Capabilities)?;
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let half = |bits: u32| CapData {
        effective: bits,
        permitted: bits,
        inheritable: 0,
    };
    let data = [half(keep as u32), half((keep >> 32) as u32)];
    // SAFETY: capset reads the header and two data structs from this stack.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    check(rc, Stage::Capabilities)
}

/// No privilege gain through exec (setuid binaries, file capabilities); required for
/// unprivileged landlock and seccomp.
fn no_new_privs() -> Result<(), Failed> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    check(rc as _, Stage::NoNewPrivs)
}

/// Die with the guard. After setuid, which clears it; then check that the daemon did not exit
/// before it was set (the child would have been reparented, and the signal never comes): its
/// pidfd is readable once it has.
fn die_with_parent(parent: RawFd) -> Result<(), Failed> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    check(rc as _, Stage::Pdeathsig)?;
    let mut pfd = libc::pollfd {
        fd: parent,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd on this stack, without waiting; async-signal-safe.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    check(rc as _, Stage::Pdeathsig)?;
    if pfd.revents != 0 {
        return Err(Failed {
            stage: Stage::Pdeathsig,
            errno: libc::ESRCH,
        });
    }
    Ok(())
}

/// The working directory, entered as the tool's user so its permissions are the tool's.
fn chdir(cwd: &CStr) -> Result<(), Failed> {
    // SAFETY: cwd is NUL-terminated and was built before fork.
    check(unsafe { libc::chdir(cwd.as_ptr()) } as _, Stage::Cwd)
}

/// Installs the write-opens filter with a listener, and hands the listener to guardd over `to`
/// (`SCM_RIGHTS`): the message waits in the socket, so nothing here waits for guardd. Before the
/// plan's own filter, which need not let `sendmsg` through; the listener is close-on-exec, and
/// closed here, so the tool never holds it.
fn watch_writes(filter: &libc::sock_fprog, to: RawFd) -> Result<(), Failed> {
    // SAFETY: filter points at a sock_fprog compiled before the clone (see install_seccomp).
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
            filter as *const libc::sock_fprog,
        )
    };
    check(listener, Stage::Listener)?;
    let listener = listener as RawFd;
    /// Room for one descriptor's control message, aligned as `cmsghdr` is.
    #[repr(C, align(8))]
    struct Control([u8; 24]);
    let mut control = Control([0; 24]);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain data, valid when zeroed; the pointers set below outlive sendmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1 as _;
    msg.msg_control = control.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
    // SAFETY: msg_control has room for one cmsghdr and an int (CMSG_SPACE(4) = 24 bytes);
    // CMSG_FIRSTHDR points into it, and the writes stay within.
    let rc = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), listener);
        libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL)
    };
    let sent = check(rc as _, Stage::Listener);
    // SAFETY: the listener is this child's own descriptor; guardd holds its copy now.
    unsafe { libc::close(listener) };
    sent
}

/// Installs the compiled filter (one program; a list, so that a table that ever needs more
/// stacks them in order).
fn install_seccomp(filters: &[libc::sock_fprog]) -> Result<(), Failed> {
    for prog in filters {
        // SAFETY: prog points at a sock_fprog whose program was compiled before fork and is
        // still owned by the parent's frame, copied into this address space.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                prog as *const libc::sock_fprog,
            )
        };
        check(rc, Stage::Seccomp)?;
    }
    Ok(())
}
