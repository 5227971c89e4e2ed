//! Files by identity: the keys of the per-call allow-lists of programs (`sched_process_exec`)
//! and of write targets (the open observer), and the kernel struct layout both read them with.
//!
//! A file is approved by what it is, not by how it was spelled: the kernel looks at the file
//! an exec loaded (`linux_binprm->file`) or an open returned (the new descriptor's `struct
//! file`), its device and inode, and compares them with the identities guardd took (`stat`,
//! symlinks followed) of the call's approved files and directories. An approved directory
//! approves the files beneath it: the kernel walks the file's dentry ancestors up to
//! [`MAX_DEPTH`] levels. A write target that does not exist yet is approved as a name in its
//! directory ([`FILE_CHILD`]). No path string is compared, so no spelling (`..`, a relative
//! path, a path longer than any buffer or on a page not yet faulted in, `/proc/self/fd/N`, a
//! memfd) can reach another file, and a walk that cannot finish approves nothing.

/// One approved file, directory or name of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub cgroup_id: u64,
    /// The inode number (`stat.st_ino`, the kernel's `inode->i_ino`); for [`FILE_CHILD`], the
    /// directory's.
    pub ino: u64,
    /// The device in the kernel's encoding (`super_block->s_dev`: major << 20 | minor).
    pub dev: u32,
    pub _pad: u32,
    /// For [`FILE_CHILD`]: [`name_hash`] of the name in the directory; else 0.
    pub name: u64,
}
const _: () = assert!(core::mem::size_of::<FileKey>() == 32);

/// The value of an approved file: this very file.
pub const FILE_SELF: u8 = 1;
/// The value of an approved directory: every file beneath it.
pub const FILE_DIR: u8 = 2;
/// The value of an approved name in a directory: a write target that did not exist at launch.
pub const FILE_CHILD: u8 = 3;

/// Size of each allow-list map.
pub const MAX_FILES: u32 = 16384;

/// How many directory levels above a file the kernel looks for an approved directory; a deeper
/// file is not approved unless approved itself.
pub const MAX_DEPTH: u32 = 32;

/// Longest file name the kernel hashes (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of a file name up to its first NUL, from a basis the call's secret `key` changes
/// (never 0, so 0 can mean "no name"). Unkeyed, the hash of an approved name is public, and a
/// second name with the same hash is an afternoon's search; keyed, a guess that misses is a
/// write outside the effects, seen and counted.
#[inline(always)]
pub fn name_hash(key: u64, name: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET ^ key;
    for &b in name {
        if b == 0 {
            break;
        }
        hash = (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    hash | 1
}

/// The kernel's device number from user space's (`stat.st_dev`, glibc's encoding).
pub fn kernel_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

/// Byte offsets of the kernel struct members the exec and lock programs read, taken from the running
/// kernel's BTF by the loader (no one kernel's layout is compiled in).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// `struct linux_binprm`: `file`, `filename`.
    pub bprm_file: u32,
    pub bprm_filename: u32,
    /// `struct file`: `f_inode`; `f_path.dentry` (`f_path` plus `struct path`'s `dentry`).
    pub file_inode: u32,
    pub file_dentry: u32,
    /// `struct inode`: `i_ino`, `i_sb`.
    pub inode_ino: u32,
    pub inode_sb: u32,
    /// `struct super_block`: `s_dev`.
    pub sb_dev: u32,
    /// `struct dentry`: `d_parent`, `d_inode`; `d_name.name` (`d_name` plus `struct qstr`'s
    /// `name`).
    pub dentry_parent: u32,
    pub dentry_inode: u32,
    pub dentry_name: u32,
    /// `struct task_struct`: `files`; `struct files_struct`: `fdt`; `struct fdtable`: `fd`,
    /// `max_fds`.
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_fd: u32,
    pub fdt_max_fds: u32,
    /// `struct file_lock`: its core's `flc_file`, `flc_type` and `flc_flags` (`c` plus
    /// `struct file_lock_core`'s member), for the lock programs.
    pub lock_file: u32,
    pub lock_type: u32,
    pub lock_flags: u32,
    /// `struct inode`: `i_mode`, for the lock programs (a device file is no call's to lock).
    pub inode_mode: u32,
}
const _: () = assert!(core::mem::size_of::<Layout>() == 72);

#[cfg(feature = "user")]
// SAFETY: repr(C), integers only, no padding (size asserted above).
unsafe impl aya::Pod for FileKey {}

#[cfg(feature = "user")]
// SAFETY: repr(C), u32 fields only (size asserted above).
unsafe impl aya::Pod for Layout {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_encoded_as_the_kernel_keeps_them() {
        // 8:1 (sda1) and 259:3 (an nvme partition); minors beyond 255 keep all 20 bits.
        assert_eq!(kernel_dev(8, 1), (8 << 20) | 1);
        assert_eq!(kernel_dev(259, 3), 0x1030_0003);
        assert_eq!(kernel_dev(0, 0x123), 0x123);
    }

    #[test]
    fn names_hash_up_to_their_nul_and_never_to_zero() {
        assert_eq!(name_hash(7, b"out.txt"), name_hash(7, b"out.txt\0junk"));
        assert_ne!(name_hash(7, b"out.txt"), name_hash(7, b"out.txu"));
        assert_ne!(name_hash(7, b"out.txt"), name_hash(8, b"out.txt"));
        assert_ne!(name_hash(0, b""), 0);
    }
}
