//! `tp_btf/sched_process_exec`: every exec of a guarded process is reported, and, for a call that
//! enforces its exec allow-list, an image that is not an approved file (or beneath an approved
//! directory) is killed before it runs an instruction: the tracepoint fires in the exec'ing task
//! after the new image is loaded and before the return to user space, and SIGKILL is delivered on
//! that return.
//!
//! The program is judged by identity: the device and inode of `linux_binprm->file` (for a `#!`
//! script, the interpreter that will run; for `ld.so PROGRAM`, ld.so itself), and of its dentry
//! ancestors for approved directories. See `guard_common::exec`. Member offsets come from the
//! running kernel's BTF, set by the loader in [`LAYOUT`].

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes, generated::bpf_send_signal},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use guard_common::{
    call::FLAG_ENFORCE_EXEC,
    event::{ACTION_ALLOWED, ACTION_KILLED, KIND_EXEC},
    exec::{EXEC_DIR, ExecKey, Layout, MAX_DEPTH},
};

use crate::maps::{EXEC_ALLOW, current_call, reserve_event};

/// Offsets of the kernel members read here; set by the loader from BTF. All zero (never loaded
/// that way) reads garbage, which fails a probe read or matches nothing: a kill either way.
#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout {
    bprm_file: 0,
    bprm_filename: 0,
    file_inode: 0,
    file_dentry: 0,
    inode_ino: 0,
    inode_sb: 0,
    sb_dev: 0,
    dentry_parent: 0,
    dentry_inode: 0,
    _pad: 0,
};

const SIGKILL: u32 = 9;

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> u32 {
    let Some((cgroup_id, config)) = current_call() else {
        return 0;
    };
    // SAFETY: a global the loader rewrites; volatile so the compiler does not fold the zeros.
    let layout = unsafe { core::ptr::read_volatile(&LAYOUT) };
    // The tracepoint's arguments: (struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm).
    let bprm: *const u8 = ctx.arg(2);

    let enforce = config.flags & FLAG_ENFORCE_EXEC != 0;
    // A walk that cannot be read to its end approves nothing.
    let allowed = !enforce || approved(bprm, &layout, cgroup_id).unwrap_or(false);
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

/// Reads the pointer at `base + offset` in kernel memory.
#[inline(always)]
fn read_ptr(base: *const u8, offset: u32) -> Result<*const u8, i32> {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error, not a fault.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const *const u8) }
}

/// Reads a `T` at `base + offset` in kernel memory.
#[inline(always)]
fn read<T>(base: *const u8, offset: u32) -> Result<T, i32> {
    // SAFETY: as in `read_ptr`.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const T) }
}

/// Whether the file `bprm` executes is approved for the call: itself, or one of its directories
/// up to `MAX_DEPTH` levels. `Err` when a read fails, or the walk is deeper than that.
#[inline(always)]
fn approved(bprm: *const u8, l: &Layout, cgroup_id: u64) -> Result<bool, i32> {
    let file = read_ptr(bprm, l.bprm_file)?;
    let inode = read_ptr(file, l.file_inode)?;
    let sb = read_ptr(inode, l.inode_sb)?;
    let dev: u32 = read(sb, l.sb_dev)?;
    let key = |ino: u64| ExecKey {
        cgroup_id,
        ino,
        dev,
        _pad: 0,
    };
    // SAFETY: only presence is tested.
    if unsafe { EXEC_ALLOW.get(&key(read(inode, l.inode_ino)?)) }.is_some() {
        return Ok(true);
    }
    // Directories of the same file system: a dentry's parent shares its super block.
    let mut dentry = read_ptr(file, l.file_dentry)?;
    for _ in 0..MAX_DEPTH {
        let parent = read_ptr(dentry, l.dentry_parent)?;
        if parent == dentry {
            // The root of the file system (or of a mount beneath an approved directory).
            return Ok(false);
        }
        let dir = read_ptr(parent, l.dentry_inode)?;
        // SAFETY: the value is copied out at once.
        if let Some(kind) = unsafe { EXEC_ALLOW.get(&key(read(dir, l.inode_ino)?)) }
            && *kind == EXEC_DIR
        {
            return Ok(true);
        }
        dentry = parent;
    }
    Err(-1)
}
