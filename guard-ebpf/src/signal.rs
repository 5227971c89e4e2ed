//! `signal/signal_generate`: a process of a guarded call that seccomp killed for a syscall
//! outside its filter (strict mode's allow-set, the x32 twins) is reported at once, so the
//! daemon can take the rest of the tree with it: seccomp kills one process, the call is a tree.
//!
//! Not a syscall tracepoint: it fires when a signal is generated, and costs an unwatched sender
//! one map lookup. seccomp's kill raises SIGSYS with `si_code == SYS_SECCOMP` in the offending
//! task itself, so the current task is the one to report.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use guard_common::event::{ACTION_KILLED, KIND_SECCOMP};

use crate::maps::{current_call, reserve_event};

/// Offsets of the `sig` and `code` fields in the tracepoint record; set by the loader.
#[unsafe(no_mangle)]
static SIGNAL_SIG_OFFSET: u32 = 8;
#[unsafe(no_mangle)]
static SIGNAL_CODE_OFFSET: u32 = 16;

const SIGSYS: i32 = 31;
const SYS_SECCOMP: i32 = 1;

#[tracepoint(category = "signal", name = "signal_generate")]
pub fn signal_generate(ctx: TracePointContext) -> u32 {
    let Some((cgroup_id, _)) = current_call() else {
        return 0;
    };
    // SAFETY: globals the loader may rewrite; volatile so the compiler does not fold them.
    let (sig_at, code_at) = unsafe {
        (
            core::ptr::read_volatile(&SIGNAL_SIG_OFFSET) as usize,
            core::ptr::read_volatile(&SIGNAL_CODE_OFFSET) as usize,
        )
    };
    // SAFETY: both fields lie within the record, as tracefs describes it.
    let (sig, code) = unsafe {
        (
            ctx.read_at::<i32>(sig_at).unwrap_or(0),
            ctx.read_at::<i32>(code_at).unwrap_or(0),
        )
    };
    if sig == SIGSYS && code == SYS_SECCOMP {
        if let Some(entry) = reserve_event(KIND_SECCOMP, ACTION_KILLED, cgroup_id) {
            entry.submit(0);
        }
    }
    0
}
