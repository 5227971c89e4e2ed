//! Keys of the per-call exec allow-list read by the `sched_process_exec` program, and the kernel
//! struct layout it reads them with.
//!
//! A program is approved by what it is, not by how it was spelled: the kernel looks at the file
//! the exec loaded (`linux_binprm->file`), its device and inode, and compares them with the
//! identities guardd took (`stat`, symlinks followed) of the call's approved programs and
//! directories. An approved directory approves the files beneath it: the kernel walks the
//! file's dentry ancestors up to [`MAX_DEPTH`] levels. No path string is compared, so no
//! spelling (`..`, a path longer than any buffer, `/proc/self/fd/N`, a memfd) can reach another
//! file, and a walk that cannot finish is a kill, never a pass.

/// One approved file or directory of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExecKey {
    pub cgroup_id: u64,
    /// The inode number (`stat.st_ino`, the kernel's `inode->i_ino`).
    pub ino: u64,
    /// The device in the kernel's encoding (`super_block->s_dev`: major << 20 | minor).
    pub dev: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<ExecKey>() == 24);

/// The value of an approved program: this very file.
pub const EXEC_FILE: u8 = 1;
/// The value of an approved directory: every file beneath it.
pub const EXEC_DIR: u8 = 2;

/// Size of the exec allow-list map.
pub const MAX_EXECS: u32 = 16384;

/// How many directory levels above an executed file the kernel looks for an approved
/// directory; a deeper file is not approved (killed) unless approved itself.
pub const MAX_DEPTH: u32 = 32;

/// The kernel's device number from user space's (`stat.st_dev`, glibc's encoding).
pub fn kernel_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

/// Byte offsets of the kernel struct members the exec program reads, taken from the running
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
    /// `struct dentry`: `d_parent`, `d_inode`.
    pub dentry_parent: u32,
    pub dentry_inode: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<Layout>() == 40);

#[cfg(feature = "user")]
// SAFETY: repr(C), integers only, no padding (size asserted above).
unsafe impl aya::Pod for ExecKey {}

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
}
