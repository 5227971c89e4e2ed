//! The confined launch of an approved call.
//!
//! The security tables are data built by pure functions: [`landlock::rules`] (which paths and
//! ports) and [`seccomp::table`] (which syscalls). [`limits`] picks how memory and task limits are
//! enforced on this host. [`launch::spawn`] builds everything before fork, `clone` makes the
//! child, and the child's side (`child`) applies it in a fixed order before `execve`;
//! [`wait::run_to_end`] waits for the call and kills its whole cgroup when the timeout runs out,
//! and `teardown` drops the call's mount view once it is over, off the call's path.

pub mod caps;
pub mod cgroup;
mod child;
mod clone;
mod gitlinks;
pub mod input;
pub mod landlock;
pub mod launch;
pub mod limits;
pub mod protected;
pub mod resolve;
pub mod seccomp;
pub mod sysname;
mod teardown;
pub mod tmp;
mod wait;
pub mod writes;

pub use launch::{
    Applied, Bound, Files, Gated, LaunchOptions, Launched, Ready, SandboxError, io_sys, prepare,
    resolve_user, spawn,
};
pub use limits::{LimitsMode, detect as detect_limits};
pub use wait::{ExitStatus, Outcome, run_to_end, wait};

/// Names the calling thread, one of the runtime's blocking pool, for what it does now (its
/// judging a call's write-opens, its removing a call's directory): the pool's threads share
/// the workers' name otherwise, and `ps -L` would show more workers than guardd runs.
pub(crate) fn name_blocking_thread() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"guardd-blocking".as_ptr(), 0, 0, 0) };
}

/// Runs `work` on a blocking thread of the runtime when there is one (a removal that may wait
/// on the kernel, off the workers every caller shares), else here.
pub(crate) fn off_the_runtime(work: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(move || {
            name_blocking_thread();
            work();
        })),
        Err(_) => work(),
    }
}

/// Puts this thread in `SCHED_BATCH`, whose woken threads never preempt the running one: for
/// guardd's threads that work behind a call (the audit writer, the mount views' teardown), so
/// that their wake-up does not take the CPU of a worker on a call's path. Under load they
/// still get their fair share. A hint only: a refusal is logged and changes nothing else; an
/// operator's choice (a real-time policy, say) is left alone.
pub(crate) fn batch_policy(thread: &str) {
    // SAFETY: sched_getscheduler takes an integer; 0 is the calling thread.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return;
    }
    // SAFETY: a plain C struct (more fields on musl), valid zeroed: priority 0, as batch needs.
    let param: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: sched_setscheduler reads `param` for this thread (0); its nice value is kept.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!("{thread}: not a batch thread: {e}");
    }
}

/// Whether a unit test that needs root runs: as root it does; otherwise it is skipped, said so,
/// except under `CI=true`, where a privileged test may not skip.
#[cfg(test)]
pub(crate) fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "privileged tests may not skip under CI=true"
    );
    eprintln!("skipping: needs root");
    false
}

/// The scheduling policies of this process's threads named `name`, for the tests of guardd's
/// background threads.
#[cfg(test)]
pub(crate) fn thread_policies(name: &str) -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        // SAFETY: sched_getscheduler takes a thread id.
        .map(|tid: libc::pid_t| unsafe { libc::sched_getscheduler(tid) })
        .collect()
}

/// Runs `f` with the file-system identity of `uid` and `gid` and no supplementary groups, on
/// this thread alone (raw syscalls: credentials are per thread in the kernel, and glibc would
/// change every thread's), then puts the thread's own back. What `f` looks up or removes is
/// then what that user could.
pub(crate) fn as_user<T>(uid: u32, gid: u32, f: impl FnOnce() -> T) -> T {
    let mut groups = [0 as libc::gid_t; 64];
    // SAFETY: getgroups writes at most `groups.len()` ids into the array.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, groups.len(), groups.as_mut_ptr()) };
    // SAFETY: integer arguments; setgroups with 0 reads no list. setfsuid/setfsgid return the
    // previous id.
    let (old_gid, old_uid) = unsafe {
        libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>());
        let g = libc::syscall(libc::SYS_setfsgid, gid);
        let u = libc::syscall(libc::SYS_setfsuid, uid);
        (g, u)
    };
    let out = f();
    // SAFETY: as above; the list is the one read back at the start (its first `n` ids).
    unsafe {
        libc::syscall(libc::SYS_setfsuid, old_uid);
        libc::syscall(libc::SYS_setfsgid, old_gid);
        if n >= 0 {
            libc::syscall(libc::SYS_setgroups, n, groups.as_ptr());
        }
    }
    out
}
