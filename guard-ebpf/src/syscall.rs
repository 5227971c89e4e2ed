//! `raw_tracepoint/sys_enter`: records which syscalls each guarded call makes, one bit per
//! syscall number in `SYSCALL_SETS`, and hands opens to [`crate::open`].
//!
//! Every syscall of every task on the host passes here, so the fast path is the current cgroup
//! id and one lookup: `SYSCALL_SETS` holds the guarded calls only (the daemon installs a zeroed
//! set with the call), so an unwatched task misses and returns. A guarded task then reads one
//! word and writes only when the bit is new, so a call's repeated syscalls dirty no cache line.

use core::intrinsics::{AtomicOrdering, atomic_or};

use aya_ebpf::{
    helpers::bpf_get_current_cgroup_id, macros::raw_tracepoint, programs::RawTracePointContext,
};
use guard_common::syscall::MAX_SYSCALL_NR;

use crate::maps::SYSCALL_SETS;

#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> i32 {
    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let Some(set) = SYSCALL_SETS.get_ptr_mut(&cgroup_id) else {
        return 0;
    };
    // sys_enter's TP_PROTO is (struct pt_regs *regs, long id).
    let nr: i64 = ctx.arg(1);
    if nr < 0 || nr >= i64::from(MAX_SYSCALL_NR) {
        return 0;
    }
    crate::open::enter(&ctx, nr, cgroup_id);
    let (word, bit) = ((nr as usize >> 6) & 7, 1u64 << (nr & 63));
    // SAFETY: `set` points at this call's value in the map, valid for the program's run; `word`
    // is below the array's length. Other CPUs update the same word of the same call, hence the
    // atomic OR.
    unsafe {
        let slot = &mut (*set)[word];
        if *slot & bit == 0 {
            // core's AtomicU64 has no fetch_or on the BPF target; the intrinsic lowers to the
            // BPF atomic OR instruction (kernel 5.12+).
            atomic_or::<u64, u64, { AtomicOrdering::Relaxed }>(slot, bit);
        }
    }
    0
}
