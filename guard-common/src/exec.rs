//! Keys of the per-call exec allow-list read by the `sched_process_exec` program.
//!
//! The kernel cannot compare strings cheaply, so both sides hash the path with the same
//! function (FNV-1a, 64 bits) and the map holds hashes. The path is the one passed to execve;
//! the daemon inserts each approved path as written and as resolved (symlinks), so both spellings
//! of an approved program pass and any other path, including /proc/self/fd/N, ld.so or a memfd,
//! does not. An approved directory is inserted with a trailing `/` and approves every program
//! beneath it, as long as the path has no `.` or `..` component to climb out with.

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

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `path` up to its first NUL (or its end).
#[inline(always)]
pub fn path_hash(path: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET;
    for &b in path {
        if b == 0 {
            break;
        }
        hash = (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    hash
}

/// Whether `allowed` approves `path` (up to its first NUL): its own hash, or the hash of one of
/// its directories with the trailing `/` when no component of the path starts with a dot (so
/// neither `.` nor `..` can climb out; a hidden name needs an exact approval). One pass; the
/// kernel pays one lookup per directory level only while nothing matched.
#[inline(always)]
pub fn path_allowed(path: &[u8], allowed: impl Fn(u64) -> bool) -> bool {
    // Flags are 0/1 integers combined arithmetically, not branched on: the kernel's verifier
    // then sees one state per step of the loop instead of one per combination of flags.
    let (mut in_dir, mut dotted, mut after_slash) = (0u64, 0u64, 0u64);
    let mut hash = FNV_OFFSET;
    for &b in path {
        if b == 0 {
            break;
        }
        hash = (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        let slash = is(b, b'/');
        dotted |= after_slash & is(b, b'.');
        after_slash = slash;
        if slash & (in_dir ^ 1) == 1 {
            in_dir = u64::from(allowed(hash));
        }
    }
    allowed(hash) || in_dir & (dotted ^ 1) == 1
}

/// 1 when `b == c`, else 0, without a branch.
#[inline(always)]
fn is(b: u8, c: u8) -> u64 {
    u64::from(b ^ c).wrapping_sub(1) >> 63
}

#[cfg(feature = "user")]
// SAFETY: repr(C), two u64, no padding (size asserted above).
unsafe impl aya::Pod for ExecKey {}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(approved: &[&str], path: &str) -> bool {
        let hashes: [u64; 4] =
            core::array::from_fn(|i| approved.get(i).map_or(0, |p| path_hash(p.as_bytes())));
        path_allowed(path.as_bytes(), |h| hashes[..approved.len()].contains(&h))
    }

    #[test]
    fn files_match_exactly_and_directories_match_what_lies_beneath() {
        assert!(allows(&["/usr/bin/make"], "/usr/bin/make"));
        assert!(!allows(&["/usr/bin/make"], "/usr/bin/make2"));
        assert!(!allows(&["/usr/bin/make"], "/usr/bin"));
        assert!(allows(&["/usr/bin/"], "/usr/bin/cc"));
        assert!(allows(
            &["/usr/lib/gcc/"],
            "/usr/lib/gcc/x86_64-linux-gnu/14/cc1"
        ));
        assert!(!allows(&["/usr/bin/"], "/usr/binx/cc"));
        assert!(!allows(&["/usr/bin/"], "/usr/sbin/cc"));
        assert!(!allows(&["/usr/bin/"], "usr/bin/cc"));
    }

    #[test]
    fn dot_components_do_not_climb_out_of_an_approved_directory() {
        assert!(!allows(&["/usr/bin/"], "/usr/bin/../../tmp/evil"));
        assert!(!allows(&["/usr/bin/"], "/usr/bin/./../sbin/x"));
        assert!(!allows(&["/usr/bin/"], "/usr/bin/./cc"));
        // Dots inside a name are just a name; a name that starts with one needs an exact match.
        assert!(allows(&["/usr/bin/"], "/usr/bin/python3.13"));
        assert!(!allows(&["/usr/bin/"], "/usr/bin/.hidden"));
        assert!(allows(&["/usr/bin/.hidden"], "/usr/bin/.hidden"));
        // An exactly approved path is approved whatever it contains.
        assert!(allows(&["/opt/../bin/x"], "/opt/../bin/x"));
    }
}
