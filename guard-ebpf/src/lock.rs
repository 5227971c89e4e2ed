//! `tp_btf/posix_lock_inode`, `tp_btf/flock_lock_inode`: a record lock (`fcntl` POSIX or OFD,
//! `flock`) a guarded call takes on a file outside its write effects kills the task that took
//! it, and is reported.
//!
//! Every call may read the shared libraries and `/etc/ld.so.cache`, and locks on a file are
//! seen by whoever opens it: one call locking chosen byte ranges of such a file and another
//! testing them would be a channel between calls (a call that may read a secret handing it to
//! one that may send it), and `/proc/locks` shows them to every local user. A lock on a file
//! the call may write is the tool's own business (git, sqlite, pip and cargo lock what they
//! write). The tracepoints fire at the end of the lock operation, in the task that asked for
//! it, before it returns to user space: SIGKILL is delivered on that return, so the task never
//! learns whether its lock was granted or conflicted (a test of another's lock tells it
//! nothing), and the lock it may hold goes when the dying task's files close. `F_GETLK`, which
//! tests without locking, is refused by the call's seccomp filter.
//!
//! Judged by identity, as the open observer judges a write (see [`crate::ident`]): the locked
//! file's device and inode, or its name in an approved directory, or one of its directories.

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel_str_bytes, generated::bpf_send_signal},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use guard_common::{
    call::FLAG_SHADOW,
    event::{ACTION_KILLED, ACTION_SHADOWED, KIND_LOCK, LOCK_FLOCK, LOCK_OFD, LOCK_POSIX},
};

use crate::{
    ident::{approved, layout, read, read_ptr},
    maps::{WRITE_ALLOW, current_call, reserve_event},
};

const SIGKILL: u32 = 9;
/// The file type bits of `i_mode`, and those of character and block devices.
const S_IFMT: u16 = 0o170_000;
const S_IFCHR: u16 = 0o020_000;
const S_IFBLK: u16 = 0o060_000;
/// `F_UNLCK`: giving a lock back asks for nothing.
const F_UNLCK: u8 = 2;
/// `FL_OFDLCK` in `flc_flags`: an open file description lock (`F_OFD_SETLK`).
const FL_OFDLCK: u32 = 1024;

#[btf_tracepoint(function = "posix_lock_inode")]
pub fn posix_lock_inode(ctx: BtfTracePointContext) -> u32 {
    judge(&ctx, LOCK_POSIX);
    0
}

#[btf_tracepoint(function = "flock_lock_inode")]
pub fn flock_lock_inode(ctx: BtfTracePointContext) -> u32 {
    judge(&ctx, LOCK_FLOCK);
    0
}

/// Kills and reports the current task when it is a guarded call's and locked (`kind`) a file
/// outside its write effects.
#[inline(always)]
fn judge(ctx: &BtfTracePointContext, kind: u32) {
    let Some((cgroup_id, config)) = current_call() else {
        return;
    };
    let l = layout();
    // Both tracepoints' arguments: (struct inode *inode, struct file_lock *fl, int ret).
    let fl: *const u8 = ctx.arg(1);
    // The verifier takes the argument as maybe null, and no offset may be added to it before.
    if fl.is_null() {
        return;
    }
    let Ok(ty) = read::<u8>(fl, l.lock_type) else {
        return kill(cgroup_id, config.flags, kind, None, 0);
    };
    if ty == F_UNLCK {
        return;
    }
    let file = read_ptr(fl, l.lock_file);
    // A device file is no call's to lock, whatever its write effects say: every call may
    // write `/dev/null`, and one locking it while another watches would be a channel.
    let inode: *const u8 = ctx.arg(0);
    let device = inode.is_null()
        || read::<u16>(inode, l.inode_mode)
            .map_or(true, |m| matches!(m & S_IFMT, S_IFCHR | S_IFBLK));
    // A walk that cannot be read to its end approves nothing.
    let allowed = !device
        && file
            .and_then(|f| approved(&WRITE_ALLOW, f, &l, cgroup_id, Some(config.name_key)))
            .unwrap_or(false);
    if allowed {
        return;
    }
    let kind = match read::<u32>(fl, l.lock_flags) {
        Ok(flags) if kind == LOCK_POSIX && flags & FL_OFDLCK != 0 => LOCK_OFD,
        _ => kind,
    };
    kill(cgroup_id, config.flags, kind, file.ok(), u32::from(ty));
}

/// Kills the current task (it has not returned from the lock's syscall yet), unless the call
/// runs in shadow, and reports the lock: its kind, its type, and the locked file's name.
#[inline(always)]
fn kill(cgroup_id: u64, flags: u32, kind: u32, file: Option<*const u8>, ty: u32) {
    let action = if flags & FLAG_SHADOW != 0 {
        ACTION_SHADOWED
    } else {
        // SAFETY: signals the current task, the one that asked for the lock.
        unsafe { bpf_send_signal(SIGKILL) };
        ACTION_KILLED
    };
    let l = layout();
    if let Some(mut entry) = reserve_event(KIND_LOCK, action, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot; the name is a kernel string the helper reads bounded by the
        // destination's size. Shown only: the file was judged by identity.
        unsafe {
            (*event).sock_type = kind;
            (*event).open_flags = ty;
            (*event).path[0] = 0;
            if let Some(name) = file
                .and_then(|f| read_ptr(f, l.file_dentry).ok())
                .and_then(|d| read_ptr(d, l.dentry_name).ok())
            {
                let _ = bpf_probe_read_kernel_str_bytes(name, &mut (*event).path);
            }
        }
        entry.submit(0);
    }
}
