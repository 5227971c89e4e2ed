//! Files by identity, for the exec program and the open observer: the device and inode of a
//! `struct file`, and of its dentry ancestors, looked up in a call's allow-list. See
//! `guard_common::file`. Member offsets come from the running kernel's BTF, set by the loader
//! in [`LAYOUT`].

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    maps::HashMap,
};
use guard_common::file::{FILE_CHILD, FILE_DIR, FileKey, Layout, MAX_DEPTH, name_hash};

use crate::maps::NAME_SCRATCH;

/// Offsets of the kernel members read here; set by the loader from BTF. All zero (never loaded
/// that way) reads garbage, which fails a probe read or matches nothing: approves nothing.
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
    dentry_name: 0,
    task_files: 0,
    files_fdt: 0,
    fdt_fd: 0,
    fdt_max_fds: 0,
    lock_file: 0,
    lock_type: 0,
    lock_flags: 0,
    inode_mode: 0,
};

/// The layout the loader set.
#[inline(always)]
pub fn layout() -> Layout {
    // SAFETY: a global the loader rewrites; volatile so the compiler does not fold the zeros.
    unsafe { core::ptr::read_volatile(&LAYOUT) }
}

/// Reads the pointer at `base + offset` in kernel memory.
#[inline(always)]
pub fn read_ptr(base: *const u8, offset: u32) -> Result<*const u8, i32> {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error, not a fault.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const *const u8) }
}

/// Reads a `T` at `base + offset` in kernel memory.
#[inline(always)]
pub fn read<T>(base: *const u8, offset: u32) -> Result<T, i32> {
    // SAFETY: as in `read_ptr`.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const T) }
}

/// Whether `allow` approves `file` for the call: the file itself, its name in its directory
/// (`FILE_CHILD`, only with `names`, the call's [`name_hash`] key), or one of its directories up
/// to `MAX_DEPTH` levels.
/// `Err` when a read fails or the walk is deeper than that: the caller treats it as a no.
#[inline(always)]
pub fn approved(
    allow: &HashMap<FileKey, u8>,
    file: *const u8,
    l: &Layout,
    cgroup_id: u64,
    names: Option<u64>,
) -> Result<bool, i32> {
    let inode = read_ptr(file, l.file_inode)?;
    let sb = read_ptr(inode, l.inode_sb)?;
    let dev: u32 = read(sb, l.sb_dev)?;
    let key = |ino: u64, name: u64| FileKey {
        cgroup_id,
        ino,
        dev,
        _pad: 0,
        name,
    };
    // SAFETY: only presence is tested.
    if unsafe { allow.get(&key(read(inode, l.inode_ino)?, 0)) }.is_some() {
        return Ok(true);
    }
    let mut dentry = read_ptr(file, l.file_dentry)?;
    if let Some(name_key) = names {
        let parent = read_ptr(dentry, l.dentry_parent)?;
        let dir: u64 = read(read_ptr(parent, l.dentry_inode)?, l.inode_ino)?;
        let name = read_ptr(dentry, l.dentry_name)?;
        let Some(buf) = NAME_SCRATCH.get_ptr_mut(0) else {
            return Err(-1);
        };
        // SAFETY: this CPU's scratch slot; the helper bounds the copy by its size.
        let hash = unsafe {
            let buf = &mut *buf;
            buf[0] = 0;
            bpf_probe_read_kernel_str_bytes(name, buf)?;
            name_hash(name_key, buf)
        };
        // SAFETY: the value is copied out at once.
        if let Some(kind) = unsafe { allow.get(&key(dir, hash)) }
            && *kind == FILE_CHILD
        {
            return Ok(true);
        }
    }
    // Directories of the same file system: a dentry's parent shares its super block.
    for _ in 0..MAX_DEPTH {
        let parent = read_ptr(dentry, l.dentry_parent)?;
        if parent == dentry {
            // The root of the file system (or of a mount beneath an approved directory).
            return Ok(false);
        }
        let dir = read_ptr(parent, l.dentry_inode)?;
        // SAFETY: the value is copied out at once.
        if let Some(kind) = unsafe { allow.get(&key(read(dir, l.inode_ino)?, 0)) }
            && *kind == FILE_DIR
        {
            return Ok(true);
        }
        dentry = parent;
    }
    Err(-1)
}
