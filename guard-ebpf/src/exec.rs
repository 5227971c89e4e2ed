//! `sched/sched_process_exec`: every exec of a guarded process is reported, and, for a call that
//! enforces its exec allow-list, an image not on it is killed before it runs an instruction:
//! the tracepoint fires in the exec'ing task after the new image is loaded and before the return
//! to user space, and SIGKILL is delivered on that return.
//!
//! Read from the tracepoint's raw record; the offset of its `filename` field comes from tracefs's
//! format file at load time, not from a constant, so a kernel with another layout still works.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_probe_read_kernel_str_bytes, generated::bpf_send_signal},
    macros::tracepoint,
    programs::TracePointContext,
};
use guard_common::{
    call::FLAG_ENFORCE_EXEC,
    event::{ACTION_ALLOWED, ACTION_KILLED, KIND_EXEC},
    exec::{ExecKey, path_allowed},
};

use crate::maps::{EXEC_ALLOW, SCRATCH, current_call, reserve_event};

/// Offset of the `__data_loc char[] filename` field in the tracepoint record; set by the loader.
#[unsafe(no_mangle)]
static FILENAME_LOC_OFFSET: u32 = 8;

const SIGKILL: u32 = 9;

#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn sched_process_exec(ctx: TracePointContext) -> u32 {
    let Some((cgroup_id, config)) = current_call() else {
        return 0;
    };
    let Some(path) = SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: a global the loader may rewrite; volatile so the compiler does not fold the default.
    let loc_offset = unsafe { core::ptr::read_volatile(&FILENAME_LOC_OFFSET) };
    // SAFETY: the offset lies within the record, as tracefs describes it.
    let loc = unsafe { ctx.read_at::<u32>(loc_offset as usize) }.unwrap_or(0);
    // A __data_loc word holds the string's offset from the record start in its low 16 bits.
    let name_offset = (loc & 0xffff) as usize;
    // SAFETY: `path` is this CPU's scratch slot; the source lies in the tracepoint record and
    // the helper bounds the copy by the destination's size.
    let path = unsafe {
        let path = &mut *path;
        path[0] = 0;
        let src = (ctx.as_ptr() as *const u8).add(name_offset);
        let _ = bpf_probe_read_kernel_str_bytes(src, path);
        &*path
    };

    let enforce = config.flags & FLAG_ENFORCE_EXEC != 0;
    let approved = |hash| {
        // SAFETY: only presence is tested.
        unsafe { EXEC_ALLOW.get(&ExecKey { cgroup_id, hash }) }.is_some()
    };
    let allowed = !enforce || path_allowed(path, approved);
    if !allowed {
        // SAFETY: signals the current task, which is the one executing the unapproved image.
        unsafe { bpf_send_signal(SIGKILL) };
    }

    let action = if allowed {
        ACTION_ALLOWED
    } else {
        ACTION_KILLED
    };
    if let Some(mut entry) = reserve_event(KIND_EXEC, action, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot; both buffers are PATH_LEN bytes.
        unsafe { (*event).path = *path };
        entry.submit(0);
    }
    0
}
