//! The per-call syscall set filled in by the `sys_enter` raw tracepoint: one bit per syscall
//! number, keyed by the call's cgroup id.

/// Syscall numbers the set covers: `0..MAX_SYSCALL_NR` (x86_64 has about 460).
pub const MAX_SYSCALL_NR: u32 = 512;
/// Words of the bitmap.
pub const SYSCALL_WORDS: usize = MAX_SYSCALL_NR as usize / 64;

/// Bit `nr % 64` of word `nr / 64` is set once the call made syscall `nr`. (`[u64; N]` is
/// `Pod` in aya already, and has no padding.)
pub type SyscallSet = [u64; SYSCALL_WORDS];
const _: () = assert!(core::mem::size_of::<SyscallSet>() == 64);

/// The syscall numbers set in `set`, in ascending order.
pub fn syscall_numbers(set: &SyscallSet) -> impl Iterator<Item = u32> + '_ {
    (0..MAX_SYSCALL_NR).filter(|&nr| set[(nr / 64) as usize] & (1 << (nr % 64)) != 0)
}
