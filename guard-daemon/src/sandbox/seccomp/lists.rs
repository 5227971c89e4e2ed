//! What the table names, as data: the syscalls no confined tool needs, and the arguments that
//! make an otherwise allowed syscall a way out (namespace flags, inode flags, terminal and lock
//! requests), each list with why it is there. `rules` turns them into rules for a plan.

use crate::sandbox::landlock;

/// Syscalls no confined tool needs, each a known way out of a sandbox or into the kernel's
/// attack surface: async I/O that bypasses seccomp (io_uring), other processes' memory, kernel
/// programs and modules, mounts and namespaces, the kernel keyring, userfaultfd (a race
/// amplifier), handle-based opens that bypass path checks, and host administration.
pub(super) const DENY: &[(&str, i64)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    // A sibling's descriptors and memory advice: ptrace's access check, and calls of one
    // user run side by side.
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("process_madvise", libc::SYS_process_madvise),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    // A tool run as root may keep CAP_SYS_CHROOT (`caps`): a root of its own would change what
    // its absolute names mean, which the write-opens' judge resolves from guardd's (attack45).
    ("chroot", libc::SYS_chroot),
    // The host's mount table, mount by mount: what /proc/self/mountinfo shows, which landlock
    // keeps from a tool. (The rest of the new mount API needs CAP_SYS_ADMIN, which only a root
    // tool whose policy keeps it has, and landlock keeps such a tool from changing mounts.)
    // Numbers from 424 on are the same on every architecture; libc has no names for these.
    ("statmount", 457),
    ("listmount", 458),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    // Watching files landlock has no say over: inotify and fanotify report what happens to any
    // file the call's user may read, listed or not (the names made in a private directory, a
    // keystroke on another of its user's terminals), and take from that user's per-user
    // instances. A tool that would watch falls back to polling (tail -f).
    ("inotify_add_watch", libc::SYS_inotify_add_watch),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("fanotify_mark", libc::SYS_fanotify_mark),
    // Linux AIO: a request's flags lie in memory seccomp cannot read, and `RWF_NOWAIT` there
    // tells which pages of a file another process read (see `page_cache_rules`). Its users are
    // databases and emulators, which a policy allows it back to.
    ("io_setup", libc::SYS_io_setup),
    ("io_submit", libc::SYS_io_submit),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    // glibc does not call personality(2) on its own (checked: /bin/true and the test tool run);
    // it can turn off ASLR (ADDR_NO_RANDOMIZE) for a later exec.
    ("personality", libc::SYS_personality),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("syslog", libc::SYS_syslog),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    // By name, truncate(2) reaches every file the call may read: read rules carry landlock's
    // Truncate, which ends landlock's walk at them (`landlock::TRUNCATE_BY_NAME`). A plan that
    // allows it gets read rules without. ftruncate(2) needs a descriptor opened for writing.
    (landlock::TRUNCATE_BY_NAME, libc::SYS_truncate),
];

/// Syscalls that change a file's mode, owner, times or extended attributes by name. landlock
/// governs opens, not these, so by name they would reach any file the tool's user owns (or, for
/// `user.*` attributes and times set to now, may write), outside every write effect: the files
/// earlier calls left, all of one user. Their descriptor forms (`fchmod`, `fchown`,
/// `fsetxattr`, `fremovexattr`, `futimens`) stay: the descriptor is a file landlock let the
/// call open. An `O_PATH` descriptor opens nothing landlock checks, and the `*at` forms take it
/// with `AT_EMPTY_PATH` (`fchmodat2`, `fchownat`, `setxattrat`...), so these are denied whole;
/// `fchmod`, `fchown` and `fsetxattr` refuse it (EBADF). `utimensat` with a NULL name is
/// `futimens` and is only denied with a name ([`utimensat_by_name`]). Names a kernel or
/// architecture lacks (`chmod` on aarch64) are skipped.
pub(super) const METADATA_BY_NAME: &[&str] = &[
    "chmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "setxattrat",
    "removexattr",
    "lremovexattr",
    "removexattrat",
    "file_setattr",
];

/// The syscalls that set a file's mode, with the index of their mode argument: none may set the
/// set-user-ID or set-group-ID bit, whatever the plan allows. A program a call left with either
/// would run as the tool's user (or group) for whoever starts it, outside every call: a way
/// back into the user of all calls, for anyone on the host.
pub(super) const MODE_SETTERS: &[(&str, u8)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    // A regular file made with its mode, bits and all (an outside pass made `-rwsr-sr-x`).
    ("mknod", 1),
    ("mknodat", 2),
];

/// The descriptor forms of the same changes, denied to a call without write effects: the
/// descriptor can be one of a file it may only read, and a call that writes nothing has no
/// metadata of its own to set. (A call with write effects keeps them, and with them the
/// metadata of a file it may only read, when the tool's user owns it.) `utimensat` is denied
/// whole then, and so are the ioctls that set a file's inode flags (`chattr`).
pub(super) const METADATA_BY_DESCRIPTOR: &[&str] =
    &["fchmod", "fchown", "fsetxattr", "fremovexattr"];

/// `FS_IOC_SETFLAGS` and `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`, which libc does
/// not name): the inode flags of an open file (no-atime, no-dump, sync...), settable by its owner
/// on a descriptor opened for reading. The ioctl's request is a C `unsigned int`.
pub(super) const INODE_FLAG_IOCTLS: &[u32] = &[libc::FS_IOC_SETFLAGS as u32, 0x401c_5820];

/// The ioctls that change a terminal's state for everyone who uses it. A call's stdio is its
/// caller's (guard-exec passes its own descriptors), so when the caller runs in a terminal the
/// tool holds that terminal, opened before landlock, which therefore governs none of its
/// ioctls (taking it over and typing into it: [`TERMINAL_TAKEOVER_IOCTLS`]), nor these, which
/// outlast the call: the line discipline
/// (`TIOCSETD`: N_NULL leaves the terminal deaf, and an unloaded one is a module to load), the
/// termios (echo, canonical mode, signals), the window size, flushing typed-ahead input,
/// stopping output (`TCXONC`) and exclusive mode (`TIOCEXCL`: no one else may open it). Reading
/// a terminal's state (`TCGETS`, `TIOCGWINSZ`: `isatty`) stays allowed.
pub(super) const TERMINAL_IOCTLS: &[(&str, libc::Ioctl)] = &[
    ("TCSETS", libc::TCSETS),
    ("TCSETSW", libc::TCSETSW),
    ("TCSETSF", libc::TCSETSF),
    ("TCSETA", libc::TCSETA),
    ("TCSETAW", libc::TCSETAW),
    ("TCSETAF", libc::TCSETAF),
    ("TCSETS2", libc::TCSETS2),
    ("TCSETSW2", libc::TCSETSW2),
    ("TCSETSF2", libc::TCSETSF2),
    ("TIOCSETD", libc::TIOCSETD),
    ("TIOCSWINSZ", libc::TIOCSWINSZ),
    ("TCFLSH", libc::TCFLSH),
    ("TCXONC", libc::TCXONC),
    ("TIOCEXCL", libc::TIOCEXCL),
];

/// The ioctls that take a terminal over: `TIOCSCTTY` makes the caller's terminal the tool's
/// controlling one (setsid gave it a session without one, and a terminal that is no session's,
/// as an agent harness's `openpty` leaves it, is free to take), after which `TIOCSTI` types
/// into it, and the caller's shell runs what was typed once the call is over, outside guard.
/// Not lifted by `allow_syscalls = ["ioctl"]`, which names a syscall, not these.
pub(super) const TERMINAL_TAKEOVER_IOCTLS: &[(&str, libc::Ioctl)] =
    &[("TIOCSCTTY", libc::TIOCSCTTY), ("TIOCSTI", libc::TIOCSTI)];

/// Namespace flags that clone(2) must not carry. CLONE_NEWTIME is absent: for clone(2) its bit
/// (0x80) is part of the exit signal, and only clone3/unshare accept it (both denied anyway).
pub(super) const CLONE_NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// What strict mode always allows: what the child does between installing the filter and
/// `execve` (execve itself; write and exit_group to report a failed exec), and what the dynamic
/// loader and libc start-up need before `main`.
pub(super) const STRICT_BASE: &[&str] = &[
    "execve",
    "write",
    "exit",
    "exit_group",
    "brk",
    "mmap",
    "munmap",
    "mprotect",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "rseq",
    "prlimit64",
    "openat",
    "read",
    "pread64",
    "close",
    "newfstatat",
    "fstat",
    "access",
    "getrandom",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "poll",
    "futex",
];

/// The `fcntl` commands that learn of, or reach, another's use of a file without a lock of
/// the call's own: `F_GETLK` and `F_OFD_GETLK` test a range for others' locks, `F_SETLEASE`
/// is told when anyone else opens the file, and `F_NOTIFY` (dnotify, the older inotify, which
/// the deny list refuses) when anyone touches a directory's files. The lock programs kill a
/// task that locks a file outside its write effects before it learns the outcome; these would
/// learn it without locking, and two calls could talk through the locks on a file both may
/// only read, or through their reads in a directory both may read. Not lifted by
/// `allow_syscalls = ["fcntl"]`, which names a syscall, not these.
pub(super) const LOCK_PROBES: &[(&str, i32)] = &[
    ("F_GETLK", libc::F_GETLK),
    ("F_OFD_GETLK", libc::F_OFD_GETLK),
    ("F_SETLEASE", libc::F_SETLEASE),
    ("F_NOTIFY", libc::F_NOTIFY),
];

/// `posix_fadvise(POSIX_FADV_DONTNEED)`: drops a file's pages from the page cache.
pub(super) const FADV_DONTNEED: u64 = 4;
