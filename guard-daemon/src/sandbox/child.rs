//! The child's side of a launch: what runs between the clone and `execve`.
//!
//! The child is cloned as `posix_spawn` does it, with `CLONE_VM | CLONE_VFORK`: it runs on its
//! own small stack in the daemon's memory while the launching thread waits for its `execve` (or
//! exit), so no page table is copied and no copy-on-write fault follows in the daemon. It is
//! also cloned into a pid namespace and an IPC namespace of its own (see [`CALL_NAMESPACES`]).
//! The
//! daemon is multithreaded and its memory is shared, so the child may only make
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
    "seccomp",
    "exec",
];

/// The steps of the child, in order; a failure is reported by index into [`STAGES`].
#[derive(Clone, Copy)]
#[repr(u32)]
pub(super) enum Stage {
    Cgroup,
    LimitsCgroup,
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
    Seccomp,
    Exec,
}

/// The namespaces each call gets. Calls run side by side as one user, and so do judges and
/// approvers, so DAC alone would let one reach the others: lower their limits (`prlimit`) or
/// priority (`setpriority`, `sched_setattr`, `ioprio_set`, each also by user), move their pages,
/// compare their descriptors; and System V IPC objects and POSIX message queues of that user
/// are shared by every call and outlive the one that made them, a channel from a call that may
/// read a secret to one that may send it, which neither landlock nor seccomp's deny list sees.
/// In its own pid namespace a call can name no process but its own (the tool is its pid 1:
/// when it exits, the rest of its tree is killed, as the end of a call does anyway), and the
/// IPC namespace goes away with it.
const CALL_NAMESPACES: libc::c_int = libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// Everything the child needs, prepared before fork. Raw pointers into `CString`s and programs
/// owned by `spawn`'s frame, which the child's copy of memory keeps alive.
pub(super) struct ChildCtx<'a> {
    /// A pidfd of the daemon: in its own pid namespace the child's getppid() is 0.
    pub parent: RawFd,
    pub report: RawFd,
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

/// The child's stack: the bottom page is a guard, so an overflow faults instead of writing over
/// the daemon's memory.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

/// The child's stack size: its deepest path (landlock's rule, seccomp) uses a few KiB.
const STACK_BYTES: usize = 256 * 1024;

impl Stack {
    fn new() -> Result<Self, Errno> {
        let page = 4096;
        let len = STACK_BYTES + page;
        // SAFETY: an anonymous private mapping at an address the kernel picks; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let stack = Self { base, len };
        // SAFETY: the first page of the mapping made above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(Errno::last());
        }
        Ok(stack)
    }

    /// The highest address: the stack grows down from it.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is where a downward stack starts.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child that used it has exec'd or exited (the
        // clone waited for that), so nothing runs on it.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Clones the child, which runs [`run`] on `ctx`, and returns once it has exec'd the tool or
/// exited (`CLONE_VFORK`). Every signal is blocked across the clone, so that none runs one of
/// the daemon's handlers on the child's stack before the child has reset them.
pub(super) fn spawn(ctx: &ChildCtx) -> Result<libc::pid_t, Errno> {
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&ChildCtx` passed to clone below, alive in the daemon's memory
        // (shared with the child) until the clone returns, which is after the child's execve.
        let ctx = unsafe { &*arg.cast::<ChildCtx>() };
        run(ctx)
    }
    let stack = Stack::new()?;
    // SAFETY: sigset_t is a plain bit array, valid when zeroed; sigfillset initialises it.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a valid sigset_t on this stack.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: reads `all`, writes `old`, both on this stack.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) };
    // SAFETY: the child runs `entry` on its own stack (`stack`, alive until after the clone
    // returns), shares the daemon's memory but not its fd table or signal handlers, and only
    // makes async-signal-safe calls on `ctx` before execve or _exit; CLONE_VFORK suspends this
    // thread until then, so `ctx` and `stack` outlive its use of them.
    let pid = unsafe {
        libc::clone(
            entry,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | CALL_NAMESPACES | libc::SIGCHLD,
            std::ptr::from_ref(ctx).cast_mut().cast(),
        )
    };
    let errno = Errno::last();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop(stack);
    if pid < 0 { Err(errno) } else { Ok(pid) }
}

/// Runs in the cloned child: joins the cgroups, confines itself, and execs the tool; never
/// returns. Only async-signal-safe calls, no allocation, no panics.
pub(super) fn run(ctx: &ChildCtx) -> ! {
    if let Err(f) = confine(ctx) {
        fail(ctx.report, f);
    }
    exec(ctx)
}

/// The steps before `execve`, in their fixed order: each one relies on those before it.
fn confine(ctx: &ChildCtx) -> Result<(), Failed> {
    join_cgroups(ctx)?;
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
    // Seccomp last: nothing after it but execve (and write/_exit on failure).
    install_seccomp(ctx.filters)
}

/// Into the call's cgroup first, so every later fork is counted and killable, then into the v1
/// limit cgroups.
fn join_cgroups(ctx: &ChildCtx) -> Result<(), Failed> {
    // SAFETY: write on an fd the parent opened, from a static one-byte buffer.
    let rc = unsafe { libc::write(ctx.cgroup_procs, b"0".as_ptr().cast(), 1) };
    check(rc as _, Stage::Cgroup)?;
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

/// Rlimits (rlimit mode only), while still privileged to raise the hard limit.
fn set_rlimits(ctx: &ChildCtx) -> Result<(), Failed> {
    for (res, value) in [
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

    #[test]
    fn stages_match_the_enum() {
        assert_eq!(STAGES.len(), Stage::Exec as usize + 1);
        assert_eq!(STAGES[Stage::Landlock as usize], "landlock");
        assert_eq!(STAGES[Stage::Seccomp as usize], "seccomp");
        assert_eq!(STAGES[Stage::Cgroup as usize], "cgroup");
    }
}
