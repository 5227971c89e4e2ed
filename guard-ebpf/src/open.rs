//! Opens of guarded calls, for their receipts: each open(2), creat(2), openat(2) and openat2(2)
//! is reported with the path as requested, its flags and its result. Part of the syscall
//! tracing (`--trace-syscalls`): it rides on `sys_enter` and adds the raw `sys_exit`.
//!
//! The path is read at entry, when the kernel reads it too, and kept by thread until the exit,
//! where the result is known. The path is for the receipt only. What is judged is the file the
//! open returned: at exit, a successful write-open's new descriptor is looked up in the task's
//! file table and its identity (device, inode, name in its directory, ancestors) compared with
//! the call's write effects ([`crate::ident`]). So a relative path, a path longer than the
//! buffer or one on a page not yet faulted in, and a process that exits at once, are judged like
//! any other; a write outside is counted in `CALL_STATS` (which no lost event can hide) and, for a
//! call that kills on divergence, the task is killed before its first write.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
        bpf_probe_read_kernel_buf, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        generated::bpf_send_signal,
    },
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use guard_common::{
    call::FLAG_KILL_ON_DIVERGENCE,
    event::{ACTION_ALLOWED, ACTION_KILLED, ACTION_OUTSIDE, KIND_OPEN},
};

use crate::{
    ident::{approved, layout, read, read_ptr},
    maps::{CALL_STATS, CALLS, OPEN_SCRATCH, OPENS, WRITE_ALLOW, add, reserve_event},
};

const O_ACCMODE: u32 = 0o3;
const O_CREAT: u32 = 0o100;
const O_TRUNC: u32 = 0o1000;
const O_PATH: u32 = 0o10000000;
const SIGKILL: u32 = 9;
const EPERM: i64 = 1;
const EACCES: i64 = 13;

// x86_64 syscall numbers.
const SYS_OPEN: i64 = 2;
const SYS_CREAT: i64 = 85;
const SYS_OPENAT: i64 = 257;
const SYS_OPENAT2: i64 = 437;

const AT_FDCWD: i32 = -100;
/// What creat(2) means: `O_CREAT | O_WRONLY | O_TRUNC`.
const CREAT_FLAGS: u32 = 0o100 | 0o1 | 0o1000;

/// Called by `sys_enter` for a guarded task: stashes an open's path and flags until its exit.
#[inline(always)]
pub fn enter(ctx: &RawTracePointContext, nr: i64, cgroup_id: u64) {
    if !matches!(nr, SYS_OPEN | SYS_CREAT | SYS_OPENAT | SYS_OPENAT2) {
        return;
    }
    // sys_enter's TP_PROTO is (struct pt_regs *regs, long id); the syscall's arguments are in
    // rdi, rsi, rdx.
    let regs: *const pt_regs = ctx.arg(0);
    // SAFETY: `regs` is the kernel's saved user registers of this task; the helper checks.
    let (di, si, dx) = unsafe {
        (
            bpf_probe_read_kernel(&(*regs).rdi).unwrap_or(0),
            bpf_probe_read_kernel(&(*regs).rsi).unwrap_or(0),
            bpf_probe_read_kernel(&(*regs).rdx).unwrap_or(0),
        )
    };
    let (dirfd, path, flags) = match nr {
        SYS_OPEN => (AT_FDCWD, di, si as u32),
        SYS_CREAT => (AT_FDCWD, di, CREAT_FLAGS),
        SYS_OPENAT => (di as i32, si, dx as u32),
        // openat2's third argument points at a struct open_how whose first field is the flags.
        // SAFETY: a user pointer, read through the helper.
        _ => (di as i32, si, unsafe {
            bpf_probe_read_user(dx as *const u64).unwrap_or(0) as u32
        }),
    };
    let Some(stash) = OPEN_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's scratch slot; the string helper bounds the copy by the buffer's size.
    unsafe {
        let stash = &mut *stash;
        stash.cgroup_id = cgroup_id;
        stash.flags = flags;
        stash.dirfd = dirfd;
        stash.path[0] = 0;
        let _ = bpf_probe_read_user_str_bytes(path as *const u8, &mut stash.path);
        let _ = OPENS.insert(&bpf_get_current_pid_tgid(), stash, 0);
    }
}

#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> i32 {
    // sys_exit's TP_PROTO is (struct pt_regs *regs, long ret).
    let ret: i64 = ctx.arg(1);
    // Every syscall exit on the host passes here: a refusal is rare, an open in flight is a
    // guarded thread's; anything else returns after one compare and one lookup.
    if ret == -EPERM || ret == -EACCES {
        crate::refused::exit(&ctx, ret);
    }
    let thread = bpf_get_current_pid_tgid();
    let Some(stash) = OPENS.get_ptr(&thread) else {
        return 0;
    };
    // SAFETY: `stash` points at this thread's value in the map, valid for the program's run.
    let stash = unsafe { &*stash };
    let flags = stash.flags;
    let writes =
        flags & O_PATH == 0 && (flags & O_ACCMODE != 0 || flags & (O_CREAT | O_TRUNC) != 0);
    let mut action = ACTION_ALLOWED;
    if writes && ret >= 0 && !write_approved(stash.cgroup_id, ret) {
        action = ACTION_OUTSIDE;
        if let Some(stats) = CALL_STATS.get_ptr_mut(&stash.cgroup_id) {
            // SAFETY: this call's value in the map, valid for the program's run.
            unsafe { add(&mut (*stats).writes_outside) };
        }
        // SAFETY: the value is copied out at once.
        let kill = unsafe { CALLS.get(&stash.cgroup_id) }
            .is_some_and(|c| c.flags & FLAG_KILL_ON_DIVERGENCE != 0);
        if kill {
            // SAFETY: signals the current task, the one that opened the file; it dies before
            // it returns to user space, so before its first write.
            unsafe { bpf_send_signal(SIGKILL) };
            action = ACTION_KILLED;
        }
    }
    if let Some(mut entry) = reserve_event(KIND_OPEN, action, stash.cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot whose header reserve_event initialised; both paths are
        // PATH_LEN bytes.
        unsafe {
            (*event).open_flags = flags;
            (*event).ret = ret as i32;
            (*event).dirfd = stash.dirfd;
            let _ = bpf_probe_read_kernel_buf(stash.path.as_ptr(), &mut (*event).path);
        }
        entry.submit(0);
    }
    let _ = OPENS.remove(&thread);
    0
}

/// Whether the file behind the current task's descriptor `fd` is one the call may write. A read
/// that fails approves nothing.
#[inline(always)]
fn write_approved(cgroup_id: u64, fd: i64) -> bool {
    let l = layout();
    let file = (|| {
        // SAFETY: a helper without arguments; the pointer is only read through probe helpers.
        let task = unsafe { bpf_get_current_task() } as *const u8;
        let files = read_ptr(task, l.task_files)?;
        let fdt = read_ptr(files, l.files_fdt)?;
        let max: u32 = read(fdt, l.fdt_max_fds)?;
        if fd < 0 || fd >= i64::from(max) {
            return Err(-1);
        }
        let array = read_ptr(fdt, l.fdt_fd)?;
        read_ptr(array, (fd as u32).wrapping_mul(8))
    })();
    // SAFETY: the value is copied out at once.
    let Some(name_key) = (unsafe { CALLS.get(&cgroup_id) }).map(|c| c.name_key) else {
        return false;
    };
    file.and_then(|file| approved(&WRITE_ALLOW, file, &l, cgroup_id, Some(name_key)))
        .unwrap_or(false)
}
