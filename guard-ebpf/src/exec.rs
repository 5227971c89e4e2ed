//! `sched/sched_process_exec`: reports every exec of a guarded process.
//!
//! Read from the tracepoint's raw record; the offset of its `filename` field comes from tracefs's
//! format file at load time, not from a constant, so a kernel with another layout still works.

use aya_ebpf::{
    EbpfContext, helpers::bpf_probe_read_kernel_str_bytes, macros::tracepoint,
    programs::TracePointContext,
};
use guard_common::event::{ACTION_ALLOWED, KIND_EXEC};

use crate::maps::{current_call, reserve_event};

/// Offset of the `__data_loc char[] filename` field in the tracepoint record; set by the loader.
#[unsafe(no_mangle)]
static FILENAME_LOC_OFFSET: u32 = 8;

#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn sched_process_exec(ctx: TracePointContext) -> u32 {
    let Some((cgroup_id, _)) = current_call() else {
        return 0;
    };
    // SAFETY: a global the loader may rewrite; volatile so the compiler does not fold the default.
    let loc_offset = unsafe { core::ptr::read_volatile(&FILENAME_LOC_OFFSET) };
    // SAFETY: the offset lies within the record, as tracefs describes it.
    let Ok(loc) = (unsafe { ctx.read_at::<u32>(loc_offset as usize) }) else {
        return 0;
    };
    // A __data_loc word holds the string's offset from the record start in its low 16 bits.
    let name_offset = (loc & 0xffff) as usize;
    if let Some(mut entry) = reserve_event(KIND_EXEC, ACTION_ALLOWED, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: the source is inside the tracepoint record; the helper bounds the copy.
        unsafe {
            let src = (ctx.as_ptr() as *const u8).add(name_offset);
            let _ = bpf_probe_read_kernel_str_bytes(src, &mut (*event).path);
        }
        entry.submit(0);
    }
    0
}
