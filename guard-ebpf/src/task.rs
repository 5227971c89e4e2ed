//! `task/task_newtask`: counts the processes each guarded call starts, so its receipt covers the
//! whole tree. Not a syscall tracepoint: it fires only when a task is created, and an unwatched
//! parent pays one map lookup.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    helpers::bpf_get_current_cgroup_id, macros::tracepoint, programs::TracePointContext,
};

use crate::maps::FORKS;

/// Offset of the `clone_flags` field in the tracepoint record; set by the loader from tracefs.
#[unsafe(no_mangle)]
static CLONE_FLAGS_OFFSET: u32 = 32;

const CLONE_THREAD: u64 = 0x0001_0000;

#[tracepoint(category = "task", name = "task_newtask")]
pub fn task_newtask(ctx: TracePointContext) -> u32 {
    // The tracepoint fires in the parent, still in its cgroup: the call's.
    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let Some(count) = FORKS.get_ptr_mut(&cgroup_id) else {
        return 0;
    };
    // SAFETY: a global the loader may rewrite; volatile so the compiler does not fold the default.
    let offset = unsafe { core::ptr::read_volatile(&CLONE_FLAGS_OFFSET) } as usize;
    // SAFETY: the field lies within the record, as tracefs describes it.
    let flags = unsafe { ctx.read_at::<u64>(offset) }.unwrap_or(0);
    if flags & CLONE_THREAD != 0 {
        return 0;
    }
    // SAFETY: `count` points at this call's value in the map; other CPUs add to it too.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(count, 1) };
    0
}
