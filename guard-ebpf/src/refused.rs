//! Refusals by the other layers, seen at the syscall's exit (`--trace-syscalls`): a guarded
//! call's syscall that asks for an effect (a connect, a send, a bind, a namespace, a ptrace,
//! io_uring, a mount, bpf...) and fails with EPERM (seccomp, or an eBPF cgroup program) or
//! EACCES (landlock). landlock and seccomp refuse without telling anyone; this is how the
//! receipt learns that the call tried, so a call that tried something its effects do not allow
//! is `diverged`, whichever layer stopped it. Counted per call in `CALL_STATS` (no lost event
//! hides one) and reported with the syscall's number.
//!
//! File opens and execs are not here: their refusals are ordinary (a C library probes paths
//! landlock does not grant); opens are listed with their errno in the receipt's `files`.

use aya_ebpf::{bindings::pt_regs, helpers::bpf_probe_read_kernel, programs::RawTracePointContext};
use guard_common::{
    call::FLAG_TRACED,
    event::{ACTION_DENIED, KIND_REFUSED},
};

use crate::maps::{CALL_STATS, add, current_call, reserve_event};

const EPERM: i64 = 1;

/// x86_64 numbers of the syscalls that ask for an effect a policy grants or not.
///
/// Not socket(2) and socketpair(2): seccomp refuses AF_UNIX to calls without the `unix` effect
/// and C libraries try it quietly (nscd, syslog); inet sockets a call may not have are refused,
/// and reported, by the `sock_create` program.
const EFFECT_SYSCALLS: &[u64] = &[
    42,  // connect
    44,  // sendto
    46,  // sendmsg
    49,  // bind
    101, // ptrace
    165, // mount
    272, // unshare
    298, // perf_event_open
    308, // setns
    310, // process_vm_readv
    311, // process_vm_writev
    321, // bpf
    425, // io_uring_setup
];

/// Called by `sys_exit` for any task whose syscall failed with EPERM or EACCES.
#[inline(always)]
pub fn exit(ctx: &RawTracePointContext, ret: i64) {
    let Some((cgroup_id, config)) = current_call() else {
        return;
    };
    if config.flags & FLAG_TRACED == 0 {
        return;
    }
    let regs: *const pt_regs = ctx.arg(0);
    // SAFETY: the kernel's saved user registers of this task; the helper checks the address.
    let Ok(nr) = (unsafe { bpf_probe_read_kernel(&(*regs).orig_rax) }) else {
        return;
    };
    if !EFFECT_SYSCALLS.contains(&nr) {
        return;
    }
    // EPERM from connect, sendto, sendmsg and bind is the cgroup programs' refusal: already
    // reported.
    if ret == -EPERM && matches!(nr, 42 | 44 | 46 | 49) {
        return;
    }
    if let Some(stats) = CALL_STATS.get_ptr_mut(&cgroup_id) {
        // SAFETY: this call's value in the map, valid for the program's run.
        unsafe { add(&mut (*stats).refused) };
    }
    if let Some(mut entry) = reserve_event(KIND_REFUSED, ACTION_DENIED, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot whose header reserve_event initialised.
        unsafe {
            (*event).sock_type = nr as u32;
            (*event).ret = ret as i32;
        }
        entry.submit(0);
    }
}
