//! `tp_btf/sched_process_exec`: every exec of a guarded process is reported, and, for a call that
//! enforces its exec allow-list, an image that is not an approved file (or beneath an approved
//! directory) is killed before it runs an instruction: the tracepoint fires in the exec'ing task
//! after the new image is loaded and before the return to user space, and SIGKILL is delivered on
//! that return.
//!
//! The program is judged by identity: the device and inode of `linux_binprm->file` (for a `#!`
//! script, the interpreter that will run; for `ld.so PROGRAM`, ld.so itself), and of its dentry
//! ancestors for approved directories. See `guard_common::file` and [`crate::ident`].

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel_str_bytes, generated::bpf_send_signal},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use guard_common::{
    call::{FLAG_ENFORCE_EXEC, FLAG_SHADOW},
    event::{ACTION_ALLOWED, ACTION_KILLED, ACTION_SHADOWED, KIND_EXEC},
};

use crate::{
    ident::{approved, layout, read_ptr},
    maps::{EXEC_ALLOW, current_call, reserve_event},
};

const SIGKILL: u32 = 9;

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> u32 {
    let Some((cgroup_id, config)) = current_call() else {
        return 0;
    };
    let layout = layout();
    // The tracepoint's arguments: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm).
    let bprm: *const u8 = ctx.arg(2);

    let enforce = config.flags & FLAG_ENFORCE_EXEC != 0;
    let shadow = config.flags & FLAG_SHADOW != 0;
    // A walk that cannot be read to its end approves nothing.
    let allowed = !enforce
        || read_ptr(bprm, layout.bprm_file)
            .and_then(|file| approved(&EXEC_ALLOW, file, &layout, cgroup_id, None))
            .unwrap_or(false);
    let action = if allowed {
        ACTION_ALLOWED
    } else if shadow {
        ACTION_SHADOWED
    } else {
        // SAFETY: signals the current task, which is the one executing the unapproved image.
        unsafe { bpf_send_signal(SIGKILL) };
        ACTION_KILLED
    };
    if let Some(mut entry) = reserve_event(KIND_EXEC, action, cgroup_id) {
        let event = entry.as_mut_ptr();
        // The name as passed to execve, for the receipt only: it decides nothing.
        // SAFETY: a reserved slot; `filename` is a kernel string the helper reads bounded by
        // the destination's size.
        unsafe {
            if let Ok(name) = read_ptr(bprm, layout.bprm_filename) {
                let _ = bpf_probe_read_kernel_str_bytes(name, &mut (*event).path);
            }
        }
        entry.submit(0);
    }
    0
}
