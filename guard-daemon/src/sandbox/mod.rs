//! The confined launch of an approved call.
//!
//! The security tables are data built by pure functions: [`landlock::rules`] (which paths and
//! ports) and [`seccomp::table`] (which syscalls). [`limits`] picks how memory and task limits are
//! enforced on this host. [`launch::spawn`] builds everything before fork, `clone` makes the
//! child, and the child's side (`child`) applies it in a fixed order before `execve`; [`launch::run_to_end`] waits for the
//! call and kills its whole cgroup when the timeout runs out.

mod child;
mod clone;
pub mod input;
pub mod landlock;
pub mod launch;
pub mod limits;
pub mod resolve;
pub mod seccomp;
pub mod tmp;
mod wait;
pub mod writes;

pub use launch::{Applied, LaunchOptions, Launched, Ready, SandboxError, prepare, spawn};
pub use limits::{LimitsMode, detect as detect_limits};
pub use wait::{ExitStatus, Outcome, run_to_end, wait};

/// Names the calling thread, one of the runtime's blocking pool, for what it does now (its
/// judging a call's write-opens, its removing a call's directory): the pool's threads share
/// the workers' name otherwise, and `ps -L` would show more workers than guardd runs.
pub(crate) fn name_blocking_thread() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"guardd-blocking".as_ptr(), 0, 0, 0) };
}
