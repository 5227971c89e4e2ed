//! The table of a plan: the deny list less what the plan allows, the clone rules, the socket
//! rules and, in strict mode, the allow-set.

use super::{
    Action, Cond, EPERM, Mode, Op, Rule, SeccompError, SeccompTable, int_eq,
    socket::{error_queue_rules, group_join_rules, socket_rules},
};
use crate::{call::plan::LaunchPlan, sandbox::landlock, sandbox::sysname};

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
    // The host's mount table, mount by mount: what /proc/self/mountinfo shows, which landlock
    // keeps from a tool. (The rest of the new mount API needs CAP_SYS_ADMIN, which a tool
    // never has.) Numbers from 424 on are the same on every architecture; libc has no names
    // for these.
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
const CLONE_NS_FLAGS: &[u64] = &[
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
const STRICT_BASE: &[&str] = &[
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

fn always(name: &'static str, nr: i64, action: Action) -> Rule {
    Rule {
        name,
        nr,
        action,
        when: Vec::new(),
    }
}

/// The filter for `plan`: the deny list less `allow_syscalls`, clone/clone3 rules, socket rules
/// that depend on whether the plan may connect, the error queue's options, and in strict mode
/// the allow-set.
/// `inet_by_ebpf`: the kernel programs watch the call, and their `sock_create` refuses, and
/// reports, the inet sockets of a call without connect effects; seccomp then lets those through
/// to it (stream and datagram only), because seccomp's refusal is one nobody sees.
pub fn table(plan: &LaunchPlan, inet_by_ebpf: bool) -> Result<SeccompTable, SeccompError> {
    let c = &plan.confinement;
    for name in &c.allow_syscalls {
        sysname::number(name).ok_or_else(|| SeccompError::UnknownSyscall {
            name: name.clone(),
            field: "allow_syscalls",
        })?;
    }
    let allowed = |name: &str| c.allows_syscall(name);

    let mut rules: Vec<Rule> = DENY
        .iter()
        .filter(|(name, _)| !allowed(name))
        .map(|&(name, nr)| always(name, nr, EPERM))
        .collect();

    rules.extend(clone_rules(allowed));
    rules.extend(truncating_opens(allowed));
    rules.extend(metadata_rules(allowed, !plan.effects.write.is_empty()));
    let terminal = TERMINAL_IOCTLS.iter().filter(|_| !allowed("ioctl"));
    rules.extend(
        terminal
            .chain(TERMINAL_TAKEOVER_IOCTLS)
            .map(|&(_, request)| ioctl_request(request as u32)),
    );

    let effects = &plan.effects;
    rules.extend(
        socket_rules(!effects.connect.is_empty() || inet_by_ebpf, effects.unix)
            .into_iter()
            .filter(|r| !allowed(r.name)),
    );
    // setsockopt's rules by level: a run on one level compiles to one load and compare of it.
    let mut options = error_queue_rules();
    options.extend(group_join_rules());
    options.sort_by_key(|r| r.when.first().map(|c| c.value));
    rules.extend(options);
    rules.extend(
        LOCK_PROBES
            .iter()
            .map(|&(_, cmd)| command("fcntl", libc::SYS_fcntl, cmd as u32)),
    );
    rules.extend(page_cache_rules());

    let (mode, default) = if c.syscalls.is_empty() {
        (Mode::DenyList, Action::Allow)
    } else {
        rules.extend(strict_allows(&c.syscalls)?);
        (Mode::Strict, Action::KillProcess)
    };
    Ok(SeccompTable {
        mode,
        default,
        rules,
    })
}

/// clone3 passes its flags in a struct seccomp cannot read: answer ENOSYS so libc falls back to
/// clone(2), whose flags the filter can check against [`CLONE_NS_FLAGS`].
fn clone_rules(allowed: impl Fn(&str) -> bool) -> Vec<Rule> {
    let mut rules = Vec::new();
    if !allowed("clone3") {
        rules.push(always(
            "clone3",
            libc::SYS_clone3,
            Action::Errno(libc::ENOSYS as u32),
        ));
    }
    if !allowed("clone") {
        for &flag in CLONE_NS_FLAGS {
            rules.push(Rule {
                name: "clone",
                nr: libc::SYS_clone,
                action: EPERM,
                when: vec![Cond {
                    arg: 0,
                    dword: false,
                    op: Op::MaskedEq(flag),
                    value: flag,
                }],
            });
        }
    }
    rules
}

/// An open for reading with `O_TRUNC`, which Linux honours (it truncates the file when the
/// user may write it), and which landlock lets through where a read rule carries Truncate
/// (`landlock::TRUNCATE_UNCHECKED`): EPERM for `open` and `openat`, whatever the plan allows,
/// since no program means it. `openat2` keeps its flags in memory, where seccomp cannot look:
/// ENOSYS, so that programs fall back to `openat`, unless the plan allows it. That also keeps
/// the open observer (`--trace-syscalls`) off flags another thread of the call could change
/// between its read and the kernel's.
fn truncating_opens(allowed: impl Fn(&str) -> bool) -> Vec<Rule> {
    let mask = (libc::O_ACCMODE | libc::O_TRUNC) as u64;
    let accmode = libc::O_ACCMODE as u64;
    let mut rules: Vec<Rule> = [("open", libc::SYS_open, 1), ("openat", libc::SYS_openat, 2)]
        .into_iter()
        .flat_map(|(name, nr, arg)| {
            [
                masked_eperm(name, nr, arg, mask, libc::O_TRUNC as u64),
                // Access mode 3 asks landlock for neither read nor write (it is for ioctls),
                // so only Truncate was checked on its O_TRUNC, and its descriptor took fchmod
                // and fchown on any file the tool's user owns. No tool needs it.
                masked_eperm(name, nr, arg, accmode, accmode),
            ]
        })
        .collect();
    if !allowed(landlock::OPEN_HOW) {
        rules.push(always(
            landlock::OPEN_HOW,
            libc::SYS_openat2,
            Action::Errno(libc::ENOSYS as u32),
        ));
    }
    rules
}

/// The rules of [`METADATA_BY_NAME`] and [`utimensat_by_name`], and for a call that `writes`
/// nothing [`METADATA_BY_DESCRIPTOR`], all of `utimensat` and [`INODE_FLAG_IOCTLS`]; less what
/// the plan allows.
fn metadata_rules(allowed: impl Fn(&str) -> bool, writes: bool) -> Vec<Rule> {
    let by_descriptor = if writes {
        &[][..]
    } else {
        METADATA_BY_DESCRIPTOR
    };
    let mut rules: Vec<Rule> = METADATA_BY_NAME
        .iter()
        .chain(by_descriptor)
        .filter(|name| !allowed(name))
        .filter_map(|&name| Some(always(name, sysname::number(name)?, EPERM)))
        .collect();
    if !allowed("utimensat") {
        rules.push(if writes {
            utimensat_by_name()
        } else {
            always("utimensat", libc::SYS_utimensat, EPERM)
        });
    }
    rules.extend(setid_rules());
    if !writes && !allowed("ioctl") {
        rules.extend(
            INODE_FLAG_IOCTLS
                .iter()
                .map(|&request| ioctl_request(request)),
        );
    }
    rules
}

/// [`MODE_SETTERS`] with `S_ISUID` or `S_ISGID` in the mode: EPERM. Not lifted by
/// `allow_syscalls`, which names a syscall, not these bits of it.
fn setid_rules() -> Vec<Rule> {
    MODE_SETTERS
        .iter()
        .filter_map(|&(name, arg)| Some((name, sysname::number(name)?, arg)))
        .flat_map(|(name, nr, arg)| {
            [libc::S_ISUID, libc::S_ISGID]
                .map(|bit| masked_eperm(name, nr, arg, u64::from(bit), u64::from(bit)))
        })
        .collect()
}

/// `name` (number `nr`) whose argument `arg`, a C `int`, masked with `mask` is `value`: EPERM.
fn masked_eperm(name: &'static str, nr: i64, arg: u8, mask: u64, value: u64) -> Rule {
    Rule {
        name,
        nr,
        action: EPERM,
        when: vec![Cond {
            arg,
            dword: true,
            op: Op::MaskedEq(mask),
            value,
        }],
    }
}

/// ioctl(2) with `request` (a C `unsigned int`): EPERM.
fn ioctl_request(request: u32) -> Rule {
    command("ioctl", libc::SYS_ioctl, request)
}

/// `name` (`nr`) refused (EPERM) for one value of its second argument, a C `int` command.
fn command(name: &'static str, nr: i64, value: u32) -> Rule {
    Rule {
        name,
        nr,
        action: EPERM,
        when: vec![Cond {
            arg: 1,
            dword: true,
            op: Op::Eq,
            value: u64::from(value),
        }],
    }
}

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
const FADV_DONTNEED: u64 = 4;

/// The page cache of a file two calls may both read is shared: one evicts its pages
/// (`fadvise` `DONTNEED`), the other reads some back in, and the first learns which by asking
/// to read without waiting for the disk (`preadv2` with `RWF_NOWAIT`, which fails on a page not
/// cached). Both refused (EPERM), whatever the plan allows: no tool needs them to be correct.
/// (The kernel already keeps `mincore` and `cachestat` from a file's non-owners; a read's
/// timing stays, a noisier probe.)
fn page_cache_rules() -> Vec<Rule> {
    let nowait = libc::RWF_NOWAIT as u64;
    vec![
        Rule {
            name: "fadvise64",
            nr: libc::SYS_fadvise64,
            action: EPERM,
            when: vec![int_eq(3, FADV_DONTNEED as i32)],
        },
        masked_eperm("preadv2", libc::SYS_preadv2, 5, nowait, nowait),
        masked_eperm("pwritev2", libc::SYS_pwritev2, 5, nowait, nowait),
    ]
}

/// `utimensat` with a name (its second argument, a pointer, not NULL): times set by name, as
/// [`METADATA_BY_NAME`]. With a NULL name it is `futimens` on a descriptor, which `touch` uses.
fn utimensat_by_name() -> Rule {
    Rule {
        name: "utimensat",
        nr: libc::SYS_utimensat,
        action: EPERM,
        when: vec![Cond {
            arg: 1,
            dword: false,
            op: Op::Ne,
            value: 0,
        }],
    }
}

/// Strict mode's allow-set: the plan's `syscalls`, then [`STRICT_BASE`] (those this
/// architecture has).
fn strict_allows(syscalls: &[String]) -> Result<Vec<Rule>, SeccompError> {
    let mut rules = Vec::new();
    for name in syscalls {
        let nr = sysname::number(name).ok_or_else(|| SeccompError::UnknownSyscall {
            name: name.clone(),
            field: "syscalls",
        })?;
        // The names are the plan's; the table keeps &'static str, so look the static one up.
        let name = sysname::name(nr).unwrap_or("?");
        rules.push(always(name, nr, Action::Allow));
    }
    for &name in STRICT_BASE {
        if let Some(nr) = sysname::number(name) {
            rules.push(always(name, nr, Action::Allow));
        }
    }
    Ok(rules)
}

/// The filter that shows guardd a call's write-opens: every `open` and `openat` for writing
/// (write or read-write access, or `O_CREAT`), every `creat`, and every `openat2` where a plan
/// allows it (its flags lie in memory). Each is a notification, and guardd answers "go on": it
/// judges the open against the call's write rules, and landlock and the read-only mount view
/// still refuse what they refuse. Installed before the plan's own filter, with a listener;
/// everything else it allows, so the kernel caches its answer for every other syscall.
pub fn write_opens(plan: &LaunchPlan) -> SeccompTable {
    let accmode = libc::O_ACCMODE as u64;
    let notify = |name: &'static str, nr: i64, arg: u8, mask: u64, value: u64| Rule {
        name,
        nr,
        action: Action::Notify,
        when: vec![Cond {
            arg,
            dword: true,
            op: Op::MaskedEq(mask),
            value,
        }],
    };
    let mut rules: Vec<Rule> = [("open", libc::SYS_open, 1), ("openat", libc::SYS_openat, 2)]
        .into_iter()
        .flat_map(|(name, nr, arg)| {
            [
                notify(name, nr, arg, accmode, libc::O_WRONLY as u64),
                notify(name, nr, arg, accmode, libc::O_RDWR as u64),
                notify(name, nr, arg, libc::O_CREAT as u64, libc::O_CREAT as u64),
            ]
        })
        .collect();
    rules.push(always("creat", libc::SYS_creat, Action::Notify));
    if plan.confinement.allows_syscall(landlock::OPEN_HOW) {
        rules.push(always(
            landlock::OPEN_HOW,
            libc::SYS_openat2,
            Action::Notify,
        ));
    }
    SeccompTable {
        mode: Mode::DenyList,
        default: Action::Allow,
        rules,
    }
}
