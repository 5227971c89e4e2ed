//! The child's side of a launch: what runs between the clone and `execve`.
//!
//! The child is cloned (`clone`) into the daemon's memory, which it shares, while the launching
//! thread waits for its `execve` (or exit). The daemon is multithreaded, so the child may only make
//! async-signal-safe calls (no allocation, no locks, no panics), with every signal blocked until
//! it has reset their handlers, and changes its identity with raw syscalls: glibc's `setresuid`
//! would signal every thread of the daemon to change theirs too. Every input is prepared by
//! `launch::spawn` before the clone and reaches the child as a [`ChildCtx`] of fds, integers and
//! pointers into the daemon's memory. Each step is its own function, in the order [`run`] calls
//! them; a failing step reports `(stage, errno)` through the close-on-exec report pipe and exits
//! 127.

use std::{ffi::CStr, os::fd::RawFd};

use nix::errno::Errno;

use super::{landlock, limits::Rlimits};

/// The names of the child's steps, indexed by [`Stage`]: the parent turns a report into one.
pub(super) const STAGES: &[&str] = &[
    "cgroup",
    "limits-cgroup",
    "mounts",
    "setsid",
    "stdio",
    "close-fds",
    "signals",
    "rlimit",
    "setgroups",
    "setgid",
    "setuid",
    "no-new-privs",
    "pdeathsig",
    "cwd",
    "landlock",
    "seccomp-listener",
    "seccomp",
    "exec",
];

/// The steps of the child, in order; a failure is reported by index into [`STAGES`].
#[derive(Clone, Copy)]
#[repr(u32)]
pub(super) enum Stage {
    Cgroup,
    LimitsCgroup,
    Mounts,
    Setsid,
    Stdio,
    CloseFds,
    Signals,
    Rlimit,
    Setgroups,
    Setgid,
    Setuid,
    NoNewPrivs,
    Pdeathsig,
    Cwd,
    Landlock,
    Listener,
    Seccomp,
    Exec,
}

/// Everything the child needs, prepared before fork. Raw pointers into `CString`s and programs
/// owned by `spawn`'s frame, which the child's copy of memory keeps alive.
pub(super) struct ChildCtx<'a> {
    /// A pidfd of the daemon: in its own pid namespace the child's getppid() is 0.
    pub parent: RawFd,
    pub report: RawFd,
    /// The call's cgroup directory: the child is cloned into it (`CLONE_INTO_CGROUP`).
    pub cgroup_dir: RawFd,
    /// Its `cgroup.procs`, which the child writes itself into where that clone is unavailable.
    pub cgroup_procs: RawFd,
    pub limit_procs: Vec<RawFd>,
    pub stdio: [RawFd; 3],
    pub rlimits: Rlimits,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub cwd: &'a CStr,
    pub program: &'a CStr,
    /// The program already opened and checked (`Ready::pin`): exec'd by descriptor.
    pub program_fd: Option<RawFd>,
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
    pub landlock: &'a landlock::Prepared,
    pub proc_self: &'a CStr,
    pub filters: &'a [libc::sock_fprog],
    /// The write-opens filter (`seccomp::write_opens`) and the socket its listener goes to
    /// guardd through.
    pub watch: Option<(&'a libc::sock_fprog, RawFd)>,
    /// What the call may change, as landlock's rules found it: writable in its mount view,
    /// everything else read-only.
    pub writable: &'a [landlock::Writable],
}

/// A failed step: what the child reports before it exits.
#[derive(Clone, Copy)]
struct Failed {
    stage: Stage,
    errno: i32,
}

/// `Err` with the current errno when a libc call returned a negative value. Reading errno is a
/// load from a thread-local slot, so this is async-signal-safe.
fn check(rc: libc::c_long, stage: Stage) -> Result<(), Failed> {
    if rc < 0 {
        Err(Failed {
            stage,
            errno: Errno::last_raw(),
        })
    } else {
        Ok(())
    }
}

/// Runs in the cloned child: joins the cgroups, confines itself, and execs the tool; never
/// returns. Only async-signal-safe calls, no allocation, no panics.
pub(super) fn run(ctx: &ChildCtx, in_cgroup: bool) -> ! {
    if let Err(f) = confine(ctx, in_cgroup) {
        fail(ctx.report, f);
    }
    exec(ctx)
}

/// The steps before `execve`, in their fixed order: each one relies on those before it.
fn confine(ctx: &ChildCtx, in_cgroup: bool) -> Result<(), Failed> {
    join_cgroups(ctx, in_cgroup)?;
    mounts(ctx.writable)?;
    new_session()?;
    stdio(ctx.stdio)?;
    close_fds_at_exec()?;
    reset_signals()?;
    set_rlimits(ctx)?;
    drop_identity(ctx)?;
    no_new_privs()?;
    die_with_parent(ctx.parent)?;
    chdir(ctx.cwd)?;
    ctx.landlock
        .restrict_self(ctx.proc_self)
        .map_err(|errno| Failed {
            stage: Stage::Landlock,
            errno,
        })?;
    if let Some((filter, to)) = ctx.watch {
        watch_writes(filter, to)?;
    }
    // Seccomp last: nothing after it but execve (and write/_exit on failure).
    install_seccomp(ctx.filters)
}

/// Into the call's cgroup first (unless cloned into it), so every later fork is counted and
/// killable, then into the v1 limit cgroups through their `tasks` files: "0" there moves the
/// calling thread alone, which is the whole child, without the global lock a `cgroup.procs`
/// write takes (see [`clone_into_cgroup`]).
fn join_cgroups(ctx: &ChildCtx, in_cgroup: bool) -> Result<(), Failed> {
    if !in_cgroup {
        // SAFETY: write on an fd the parent opened, from a static one-byte buffer.
        let rc = unsafe { libc::write(ctx.cgroup_procs, b"0".as_ptr().cast(), 1) };
        check(rc as _, Stage::Cgroup)?;
    }
    for &fd in &ctx.limit_procs {
        // SAFETY: as above; iterating a Vec built before fork does not allocate.
        let rc = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        check(rc as _, Stage::LimitsCgroup)?;
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
fn set_rlimits(ctx: &ChildCtx) -> Result<(), Failed> {
    for (res, value) in [
        (libc::RLIMIT_CORE, Some(0)),
        (libc::RLIMIT_SIGPENDING, Some(SIGPENDING_MAX)),
        (libc::RLIMIT_AS, ctx.rlimits.address_space),
        (libc::RLIMIT_NPROC, ctx.rlimits.nproc),
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

/// At most this many writable paths a call (the writable parts of its mount view).
pub(super) const MAX_WRITABLE: usize = 64;

/// The call's mount view (it was cloned into a mount namespace of its own): every mount
/// read-only, and on top, at each path it may change, a copy of that path's mounts as they
/// are, writable. landlock decides what a call may open; this holds what it may change by name
/// where landlock has no say: a file's mode, times, owner or attributes (`chmod` by name, which
/// git needs in a workspace, reached every file of the call's user anywhere), and it makes
/// the host's writable places (`/tmp`, a home) read-only to the call whatever its user may do
/// there. Writes to device files (`/dev/null`) are untouched by a read-only mount.
///
/// Each writable file is found again by descriptor ([`find`]) and must be the very file its
/// landlock rule holds: found by path, as root, it could be a symlink another process of the
/// call's user put there since (a directory swapped for one, between the decision and this
/// step), and the call would get a writable copy of wherever that leads, the owner's home or
/// a directory only root could enter. Copies first (`open_tree`, recursive), then the whole
/// tree read-only (`mount_setattr`, recursive), then each copy moved over the file it was
/// taken from. Nothing propagates to the host: the tree is made private first.
/// (`mount_setattr` is 5.12's, older than the landlock ABI guard needs.)
fn mounts(writable: &[landlock::Writable]) -> Result<(), Failed> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    const MOUNT_ATTR_RDONLY: u64 = 1;
    /// `struct mount_attr`.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    // SAFETY: mount with a NUL-terminated target and null pointers where none is needed.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(rc as _, Stage::Mounts)?;
    let mut places = [-1 as RawFd; MAX_WRITABLE];
    let mut copies = [-1 as RawFd; MAX_WRITABLE];
    for (i, w) in writable.iter().take(MAX_WRITABLE).enumerate() {
        places[i] = find(w)?;
        let flags = OPEN_TREE_CLONE
            | libc::O_CLOEXEC as libc::c_uint
            | libc::AT_RECURSIVE as libc::c_uint
            | libc::AT_EMPTY_PATH as libc::c_uint;
        // SAFETY: open_tree of a descriptor (empty path); returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_open_tree, places[i], c"".as_ptr(), flags) };
        check(fd, Stage::Mounts)?;
        copies[i] = fd as RawFd;
    }
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `attr` (its size given) from this stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc, Stage::Mounts)?;
    for (&place, &copy) in places.iter().zip(&copies).take(writable.len()) {
        // SAFETY: move_mount of a detached tree onto a file, both by descriptor.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                copy,
                c"".as_ptr(),
                place,
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            )
        };
        check(rc, Stage::Mounts)?;
    }
    Ok(())
}

/// Opens `w`'s path (`O_PATH`) from `/`, one component at a time and refusing a link at each,
/// and checks that it is the file `w` was (ESTALE if not). Raw syscalls on a name copied to the
/// stack: no allocation.
fn find(w: &landlock::Writable) -> Result<RawFd, Failed> {
    let failed = |errno| Failed {
        stage: Stage::Mounts,
        errno,
    };
    // SAFETY: a NUL-terminated literal; returns a new descriptor or -1.
    let mut at = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    check(at as _, Stage::Mounts)?;
    let mut name = [0u8; 256];
    for part in w.path.to_bytes().split(|&b| b == b'/') {
        if part.is_empty() {
            continue;
        }
        let refused = if part.len() >= name.len() {
            libc::ENAMETOOLONG
        } else if part == b"." || part == b".." {
            libc::EINVAL
        } else {
            0
        };
        if refused != 0 {
            // SAFETY: `at` is this function's own descriptor.
            unsafe { libc::close(at) };
            return Err(failed(refused));
        }
        name[..part.len()].copy_from_slice(part);
        name[part.len()] = 0;
        // SAFETY: `name` is NUL-terminated on this stack; returns a new descriptor or -1.
        let next = unsafe {
            libc::openat(
                at,
                name.as_ptr().cast(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let errno = Errno::last_raw();
        // SAFETY: `at` is this function's own descriptor, replaced by `next`.
        unsafe { libc::close(at) };
        if next < 0 {
            return Err(failed(errno));
        }
        at = next;
    }
    // SAFETY: stat is plain integers, valid when zeroed; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on this function's descriptor into `st` on this stack.
    let rc = unsafe { libc::fstat(at, &mut st) };
    let link = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
    if rc < 0 || link || st.st_dev != w.dev || st.st_ino != w.ino {
        // SAFETY: as above.
        unsafe { libc::close(at) };
        return Err(failed(libc::ESTALE));
    }
    Ok(at)
}

/// No supplementary groups, then gid, then uid: setuid goes last because it drops the right to
/// change the others. Raw syscalls: they change this task only, which is the whole child, where
/// glibc's wrappers would also signal the daemon's threads (whose memory the child shares) to
/// change theirs.
fn drop_identity(ctx: &ChildCtx) -> Result<(), Failed> {
    // SAFETY: setgroups with a count of 0 reads no list.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
    check(rc, Stage::Setgroups)?;
    // SAFETY: integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_setresgid, ctx.gid, ctx.gid, ctx.gid) };
    check(rc, Stage::Setgid)?;
    // SAFETY: integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, ctx.uid, ctx.uid, ctx.uid) };
    check(rc, Stage::Setuid)
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

/// Replaces the child with the tool (the pinned open file, when there is one); reports `exec`
/// if that fails.
fn exec(ctx: &ChildCtx) -> ! {
    match ctx.program_fd {
        // SAFETY: the fd is open (close-on-exec, so it does not outlive the exec); the empty
        // path with AT_EMPTY_PATH names that file; argv and envp are NULL-terminated arrays of
        // pointers into CStrings that spawn's frame owns, all built before the clone.
        Some(fd) => unsafe {
            libc::syscall(
                libc::SYS_execveat,
                fd,
                c"".as_ptr(),
                ctx.argv.as_ptr(),
                ctx.envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
        },
        // SAFETY: program is NUL-terminated; argv and envp are NULL-terminated arrays of
        // pointers into CStrings that spawn's frame owns, all built before the clone.
        None => unsafe {
            libc::execve(ctx.program.as_ptr(), ctx.argv.as_ptr(), ctx.envp.as_ptr());
        },
    }
    fail(
        ctx.report,
        Failed {
            stage: Stage::Exec,
            errno: Errno::last_raw(),
        },
    )
}

/// Reports `(stage, errno)` to the parent and exits. Async-signal-safe.
fn fail(report: RawFd, f: Failed) -> ! {
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&(f.stage as u32).to_ne_bytes());
    msg[4..].copy_from_slice(&f.errno.to_ne_bytes());
    // SAFETY: write and _exit are async-signal-safe; msg outlives the call. A short or failed
    // write leaves the parent seeing EOF-before-8-bytes as a report anyway (got > 0) or, at
    // worst, a child that exited 127 at once.
    unsafe {
        libc::write(report, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writable place `path` is now.
    fn writable(path: &std::path::Path) -> landlock::Writable {
        use std::os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _};
        let meta = std::fs::metadata(path).expect("stat");
        landlock::Writable {
            path: std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path"),
            dev: meta.dev(),
            ino: meta.ino(),
            pin: std::fs::File::open(path).expect("open").into(),
        }
    }

    #[test]
    fn a_writable_place_is_found_only_as_it_was() {
        let dir = crate::audit::testdir::TestDir::new("child-find");
        let (a, elsewhere) = (dir.path().join("a"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(a.join("b")).expect("mkdir");
        std::fs::create_dir_all(elsewhere.join("b")).expect("mkdir");
        let real = std::fs::canonicalize(a.join("b")).expect("real path");
        let w = writable(&real);
        let fd = find(&w).unwrap_or_else(|f| panic!("errno {}", f.errno));
        // SAFETY: the descriptor find returned, ours.
        unsafe { libc::close(fd) };
        // The path re-pointed (a directory on the way swapped for a symlink): refused.
        std::fs::rename(&a, dir.path().join("old")).expect("rename");
        std::os::unix::fs::symlink(&elsewhere, &a).expect("symlink");
        assert_eq!(find(&w).map_err(|f| f.errno), Err(libc::ENOTDIR));
        // Another directory at the same path: not the one the rule holds.
        std::fs::remove_file(&a).expect("unlink");
        std::fs::rename(&elsewhere, &a).expect("rename");
        assert_eq!(find(&w).map_err(|f| f.errno), Err(libc::ESTALE));
        // The place itself a symlink to where it was: refused too.
        let w2 = writable(&real);
        std::fs::remove_dir(&real).expect("rmdir");
        std::os::unix::fs::symlink(dir.path().join("old/b"), &real).expect("symlink");
        assert_eq!(find(&w2).map_err(|f| f.errno), Err(libc::ESTALE));
    }

    #[test]
    fn stages_match_the_enum() {
        assert_eq!(STAGES.len(), Stage::Exec as usize + 1);
        assert_eq!(STAGES[Stage::Landlock as usize], "landlock");
        assert_eq!(STAGES[Stage::Seccomp as usize], "seccomp");
        assert_eq!(STAGES[Stage::Cgroup as usize], "cgroup");
    }
}
