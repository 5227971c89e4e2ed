//! Keys of the per-call exec allow-list read by the `sched_process_exec` program.
//!
//! The kernel cannot compare strings cheaply, so both sides hash the path with the same
//! function (FNV-1a, 64 bits) and the map holds hashes. The path is the one passed to execve;
//! the daemon inserts each approved path as written and as resolved (symlinks), so both spellings
//! of an approved program pass and any other path, including /proc/self/fd/N, ld.so or a memfd,
//! does not.

/// One allowed program of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExecKey {
    pub cgroup_id: u64,
    /// `path_hash` of the path.
    pub hash: u64,
}
const _: () = assert!(core::mem::size_of::<ExecKey>() == 16);

/// Size of the exec allow-list map.
pub const MAX_EXECS: u32 = 16384;

/// FNV-1a over `path` up to its first NUL (or its end).
#[inline(always)]
pub fn path_hash(path: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        if b == 0 {
            break;
        }
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(feature = "user")]
// SAFETY: repr(C), two u64, no padding (size asserted above).
unsafe impl aya::Pod for ExecKey {}
