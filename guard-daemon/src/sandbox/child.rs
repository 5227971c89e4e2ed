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
//! 127. The order is [`confine`]'s, over the [`Steps`] trait: the kernel's ([`Kernel`]) in the
//! child, a recording double in the unit tests, which hold it to the order and to stopping at
//! the first step that fails.

use std::{ffi::CStr, os::fd::RawFd};

use nix::errno::Errno;

use super::{landlock, limits::Rlimits};

mod kernel;
mod mounts;

use kernel::Kernel;
pub(super) use mounts::MAX_WRITABLE;

/// The names of the child's steps, indexed by [`Stage`]: the parent turns a report into one.
pub(super) const STAGES: &[&str] = &[
    "cgroup",
    "limits-cgroup",
    "mounts",
    "loopback",
    "setsid",
    "stdio",
    "close-fds",
    "signals",
    "rlimit",
    "setgroups",
    "setgid",
    "setuid",
    "capabilities",
    "no-new-privs",
    "pdeathsig",
    "cwd",
    "landlock",
    "seccomp-listener",
    "seccomp",
    "decision",
    "exec",
];

/// The steps of the child, in order; a failure is reported by index into [`STAGES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Stage {
    Cgroup,
    LimitsCgroup,
    Mounts,
    Loopback,
    Setsid,
    Stdio,
    CloseFds,
    Signals,
    Rlimit,
    Setgroups,
    Setgid,
    Setuid,
    Capabilities,
    NoNewPrivs,
    Pdeathsig,
    Cwd,
    Landlock,
    Listener,
    Seccomp,
    Decision,
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
    /// For a tool run as root, the capabilities it keeps (`caps`); `None` for any other user,
    /// whose setuid left it none.
    pub capabilities: Option<u64>,
    pub cwd: &'a CStr,
    pub program: &'a CStr,
    /// The program already opened and checked (`Ready::pin`): exec'd by descriptor.
    pub program_fd: Option<RawFd>,
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
    pub landlock: &'a landlock::Prepared,
    /// The call's own `/proc` (mounted in its mount view, for its pid namespace).
    pub proc_self: &'a CStr,
    /// The call runs in a network namespace of its own, loopback only: its `lo` is brought up,
    /// and its whole `/proc` is readable (its `net/` is its own).
    pub own_network: bool,
    /// Its own temporary directory, among `writable`: its `/tmp`, and its `.shm` its
    /// `/dev/shm`, in its mount view.
    pub tmp: Option<&'a landlock::Writable>,
    pub filters: &'a [libc::sock_fprog],
    /// The write-opens filter (`seccomp::write_opens`) and the socket its listener goes to
    /// guardd through.
    pub watch: Option<(&'a libc::sock_fprog, RawFd)>,
    /// What the call may change, as landlock's rules found it: writable in its mount view,
    /// everything else read-only.
    pub writable: &'a [landlock::Writable],
    /// The protected paths beneath those: read-only in its mount view all the same.
    pub protected: &'a [crate::sandbox::protected::Kept],
    /// Whether the mount view is read-only but for `writable`; without it (a call in shadow)
    /// only the protected paths are.
    pub view: bool,
    /// The gate of the call's decision row, still being written when the child was cloned, and
    /// how long the child waits there: it execs once the gate opens (`call::gate`).
    pub decision: Option<(&'a std::sync::atomic::AtomicU32, libc::timespec)>,
}

/// A failed step: what the child reports before it exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Failed {
    stage: Stage,
    errno: i32,
}

/// `Err` with the current errno when a libc call returned a negative value. Reading errno is a
/// load from a thread-local slot, so this is async-signal-safe.
pub(super) fn check(rc: libc::c_long, stage: Stage) -> Result<(), Failed> {
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
    if let Err(f) = confine(&mut Kernel, ctx, in_cgroup) {
        fail(ctx.report, f);
    }
    exec(ctx)
}

/// The steps before `execve`, one call each: what [`confine`] orders.
pub(super) trait Steps {
    /// Into the call's cgroup, where the clone could not put the child.
    fn join_cgroup(&mut self, procs: RawFd) -> Result<(), Failed>;
    /// Into the v1 limit cgroups.
    fn join_limit_cgroups(&mut self, procs: &[RawFd]) -> Result<(), Failed>;
    /// The mount view: read-only but for what the call may change (all of it with `view`), its
    /// own `/proc`, and its temporary directory as `/tmp` and `/dev/shm`.
    fn mounts(&mut self, ctx: &ChildCtx) -> Result<(), Failed>;
    /// Its network namespace's loopback, up.
    fn loopback(&mut self) -> Result<(), Failed>;
    fn new_session(&mut self) -> Result<(), Failed>;
    fn stdio(&mut self, fds: [RawFd; 3]) -> Result<(), Failed>;
    fn close_fds_at_exec(&mut self) -> Result<(), Failed>;
    fn reset_signals(&mut self) -> Result<(), Failed>;
    fn set_rlimits(&mut self, rlimits: &Rlimits) -> Result<(), Failed>;
    fn setgroups(&mut self) -> Result<(), Failed>;
    fn setgid(&mut self, gid: libc::gid_t) -> Result<(), Failed>;
    fn setuid(&mut self, uid: libc::uid_t) -> Result<(), Failed>;
    /// A root tool's capabilities: `keep` and no others, now and after the exec.
    fn keep_capabilities(&mut self, keep: u64) -> Result<(), Failed>;
    fn no_new_privs(&mut self) -> Result<(), Failed>;
    fn die_with_parent(&mut self, parent: RawFd) -> Result<(), Failed>;
    fn chdir(&mut self, cwd: &CStr) -> Result<(), Failed>;
    fn landlock(
        &mut self,
        prepared: &landlock::Prepared,
        proc_self: &CStr,
        whole_proc: bool,
        shm: Option<landlock::Access>,
    ) -> Result<(), Failed>;
    fn watch_writes(&mut self, filter: &libc::sock_fprog, to: RawFd) -> Result<(), Failed>;
    fn install_seccomp(&mut self, filters: &[libc::sock_fprog]) -> Result<(), Failed>;
    /// Waits until the call's decision row is on disk, or until `deadline`.
    fn await_decision(
        &mut self,
        gate: &std::sync::atomic::AtomicU32,
        deadline: &libc::timespec,
    ) -> Result<(), Failed>;
}

/// How long after its clone a child may wait at its call's gate before it gives up (and guardd
/// waits for the decision row on its own, then starts the call again): its launching thread
/// waits with it. Its confinement takes about half of it.
pub(super) const DECISION_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// The steps before `execve`, in their fixed order: each one relies on those before it. Into
/// the cgroups first, so every later fork is counted and killable; the identity dropped before
/// no_new_privs and the parent-death signal (setuid clears it), and with it a root tool's
/// capabilities but those it keeps; the working directory entered as the tool's user, so with
/// its permissions; landlock, then the filters; last the wait for the decision row, so that
/// the whole confinement overlaps its `fdatasync`, and nothing of the tool runs before it.
pub(super) fn confine(
    steps: &mut impl Steps,
    ctx: &ChildCtx,
    in_cgroup: bool,
) -> Result<(), Failed> {
    if !in_cgroup {
        steps.join_cgroup(ctx.cgroup_procs)?;
    }
    steps.join_limit_cgroups(&ctx.limit_procs)?;
    steps.mounts(ctx)?;
    if ctx.own_network {
        steps.loopback()?;
    }
    steps.new_session()?;
    steps.stdio(ctx.stdio)?;
    steps.close_fds_at_exec()?;
    steps.reset_signals()?;
    steps.set_rlimits(&ctx.rlimits)?;
    // setuid last of the three: it drops the right to change the others.
    steps.setgroups()?;
    steps.setgid(ctx.gid)?;
    steps.setuid(ctx.uid)?;
    if let Some(keep) = ctx.capabilities {
        steps.keep_capabilities(keep)?;
    }
    steps.no_new_privs()?;
    steps.die_with_parent(ctx.parent)?;
    steps.chdir(ctx.cwd)?;
    let shm = ctx.tmp.map(|t| t.access);
    steps.landlock(ctx.landlock, ctx.proc_self, ctx.own_network, shm)?;
    if let Some((filter, to)) = ctx.watch {
        steps.watch_writes(filter, to)?;
    }
    steps.install_seccomp(ctx.filters)?;
    match &ctx.decision {
        Some((gate, deadline)) => steps.await_decision(gate, deadline),
        None => Ok(()),
    }
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
mod tests;
