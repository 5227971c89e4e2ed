//! Syscall names and numbers of the architecture guard runs on.
//!
//! A bottom-level module: the seccomp table ([`crate::sandbox::seccomp`]) turns a policy's names
//! into numbers, and receipts ([`crate::receipt`]) turn the numbers the kernel programs saw back
//! into names. The table is the `syscalls` crate's, generated from the kernel's own, so every
//! architecture it builds for has one and nobody keeps one by hand.

use std::str::FromStr as _;

use syscalls::Sysno;

/// The name of syscall `nr` on this architecture, if it is one.
pub fn name(nr: i64) -> Option<&'static str> {
    // Sysno::new takes a usize: a negative or oversized number is no syscall.
    let id = usize::try_from(nr).ok()?;
    Sysno::new(id).map(|s| s.name())
}

/// The number of syscall `name` on this architecture, if it has one.
pub fn number(name: &str) -> Option<i64> {
    Sysno::from_str(name).ok().map(|s| i64::from(s.id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_agree() {
        for n in ["read", "openat", "execve", "socket", "io_uring_setup"] {
            let nr = number(n).expect(n);
            assert_eq!(name(nr), Some(n));
        }
        assert_eq!(name(-1), None);
        assert_eq!(name(i64::MAX), None);
        assert_eq!(number("no_such_call"), None);
    }

    #[test]
    fn numbers_match_libc() {
        for (n, nr) in [
            ("read", libc::SYS_read),
            ("execve", libc::SYS_execve),
            ("exit_group", libc::SYS_exit_group),
            ("ptrace", libc::SYS_ptrace),
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("clone", libc::SYS_clone),
            ("clone3", libc::SYS_clone3),
            ("socket", libc::SYS_socket),
            ("socketpair", libc::SYS_socketpair),
            ("seccomp", libc::SYS_seccomp),
            ("close_range", libc::SYS_close_range),
            ("pidfd_open", libc::SYS_pidfd_open),
            ("landlock_restrict_self", libc::SYS_landlock_restrict_self),
        ] {
            assert_eq!(number(n), Some(nr), "{n}");
            assert_eq!(name(nr), Some(n), "{nr}");
        }
    }
}
