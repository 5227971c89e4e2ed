//! The table checked as data, through [`SeccompTable::verdict`], and compiled.

use std::time::Duration;

use super::{
    lists::{
        DENY, INODE_FLAG_IOCTLS, LOCK_PROBES, METADATA_BY_DESCRIPTOR, METADATA_BY_NAME,
        MODE_SETTERS, TERMINAL_IOCTLS,
    },
    *,
};
use crate::{
    call::plan::{Confinement, Effects, Endpoint, LaunchPlan},
    sandbox::sysname,
};

fn plan() -> LaunchPlan {
    LaunchPlan {
        tool: "t".into(),
        argv: vec!["/bin/true".into()],
        effects: Effects::default(),
        confinement: Confinement {
            timeout: Duration::from_secs(1),
            ..Confinement::default()
        },
        enforce: Default::default(),
    }
}

fn with_connect() -> LaunchPlan {
    let mut p = plan();
    p.effects.connect.push(Endpoint {
        host: "127.0.0.1".into(),
        port: 443,
    });
    p
}

const NONE: [u64; 6] = [0; 6];
const EPERM_: Action = Action::Errno(libc::EPERM as u32);

fn sock(family: i32, ty: i32) -> [u64; 6] {
    [family as u64, ty as u64, 0, 0, 0, 0]
}

#[test]
fn deny_list_denies_escape_syscalls_with_eperm() {
    let t = table(&plan(), false).expect("table");
    assert_eq!(t.mode, Mode::DenyList);
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_ptrace,
        libc::SYS_bpf,
        libc::SYS_unshare,
        libc::SYS_mount,
        libc::SYS_keyctl,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_kexec_load,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_madvise,
        libc::SYS_inotify_add_watch,
        libc::SYS_fanotify_init,
        libc::SYS_fanotify_mark,
    ] {
        assert_eq!(t.verdict(nr, NONE), EPERM_, "syscall {nr}");
    }
    for nr in [
        libc::SYS_read,
        libc::SYS_openat,
        libc::SYS_execve,
        libc::SYS_mmap,
    ] {
        assert_eq!(t.verdict(nr, NONE), Action::Allow, "syscall {nr}");
    }
    let metadata = METADATA_BY_NAME
        .iter()
        .chain(METADATA_BY_DESCRIPTOR)
        .filter(|n| sysname::number(n).is_some())
        .count();
    // + utimensat, ioctl (inode flags: no write effects), clone3, clone, socket, socketpair,
    // open, openat (O_TRUNC for reading), openat2, setsockopt (the error queue, group joins),
    // fcntl (lock probes), fadvise64, preadv2, pwritev2 (the page cache), mknod, mknodat (the
    // set-id bits)
    assert_eq!(t.denied_count(), DENY.len() + metadata + 16);
    // Opening for reading with O_TRUNC truncates: refused; openat2, whose flags seccomp cannot
    // see, falls back.
    let trunc = libc::O_RDONLY | libc::O_TRUNC;
    let read_trunc = [
        libc::AT_FDCWD as u64,
        0x7fff_0000_1000,
        trunc as u64,
        0,
        0,
        0,
    ];
    assert_eq!(t.verdict(libc::SYS_openat, read_trunc), EPERM_);
    let write_trunc = [
        3,
        0x7fff_0000_1000,
        (libc::O_WRONLY | libc::O_TRUNC) as u64,
        0,
        0,
        0,
    ];
    assert_eq!(t.verdict(libc::SYS_openat, write_trunc), Action::Allow);
    // Access mode 3 (no read, no write: ioctls) is nobody's: with O_TRUNC it truncated past
    // landlock, and its descriptor took fchmod.
    for flags in [3, 3 | libc::O_TRUNC, 3 | libc::O_CLOEXEC] {
        let mode3 = [3, 0x7fff_0000_1000, flags as u64, 0, 0, 0];
        assert_eq!(t.verdict(libc::SYS_openat, mode3), EPERM_, "{flags:o}");
    }
    assert_eq!(
        t.verdict(libc::SYS_open, [0x7fff_0000_1000, trunc as u64, 0, 0, 0, 0]),
        EPERM_
    );
    assert_eq!(
        t.verdict(libc::SYS_openat2, NONE),
        Action::Errno(libc::ENOSYS as u32)
    );
}

/// An enforced call that writes may change metadata by name: its mount view holds every file
/// it may not write read-only (EROFS), so by name it reaches only what it may write. Never a
/// set-id bit.
#[test]
fn metadata_changes_by_name_are_allowed_where_the_mount_view_bounds_them() {
    let mut writes = plan();
    writes.effects.write.push("/srv/out".into());
    let t = table(&writes, false).expect("table");
    for &name in METADATA_BY_NAME {
        if let Some(nr) = sysname::number(name) {
            assert_eq!(t.verdict(nr, NONE), Action::Allow, "{name}");
        }
    }
    let named = [libc::AT_FDCWD as u64, 0x7fff_0000_1000, 0, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_utimensat, named), Action::Allow);
    let setuid = [libc::AT_FDCWD as u64, 0x7fff_0000_1000, 0o4755, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_fchmodat, setuid), EPERM_);
    // Without writes, or without the view (in shadow), denied.
    let mut shadow = writes.clone();
    shadow.enforce = crate::call::plan::Enforce::Shadow;
    for p in [plan(), shadow] {
        let t = table(&p, false).expect("table");
        assert_eq!(t.verdict(libc::SYS_utimensat, named), EPERM_);
        assert_eq!(t.verdict(libc::SYS_fchmodat, NONE), EPERM_);
    }
}

#[test]
fn metadata_changes_by_name_are_denied_and_through_a_descriptor_allowed() {
    let mut writes = plan();
    writes.effects.write.push("/srv/out".into());
    // In shadow: no mount view bounds a name.
    writes.enforce = crate::call::plan::Enforce::Shadow;
    let t = table(&writes, false).expect("table");
    for &name in METADATA_BY_NAME {
        if let Some(nr) = sysname::number(name) {
            assert_eq!(t.verdict(nr, NONE), EPERM_, "{name}");
        }
    }
    // A name (any non-NULL pointer) sets times by name; NULL is futimens on a descriptor.
    let named = [libc::AT_FDCWD as u64, 0x7fff_0000_1000, 0, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_utimensat, named), EPERM_);
    let high_only = [3, 0x1_0000_0000, 0, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_utimensat, high_only), EPERM_);
    assert_eq!(
        t.verdict(libc::SYS_utimensat, [3, 0, 0, 0, 0, 0]),
        Action::Allow
    );
    for nr in [
        libc::SYS_fchmod,
        libc::SYS_fchown,
        libc::SYS_fsetxattr,
        libc::SYS_fremovexattr,
        libc::SYS_getxattr,
    ] {
        assert_eq!(t.verdict(nr, NONE), Action::Allow, "syscall {nr}");
    }
    for &request in INODE_FLAG_IOCTLS {
        let args = [3, u64::from(request), 0, 0, 0, 0];
        assert_eq!(t.verdict(libc::SYS_ioctl, args), Action::Allow);
    }
    // A tool that must change metadata by name says so, for each syscall.
    let mut p = writes.clone();
    p.confinement.allow_syscalls = vec!["fchmodat".into(), "utimensat".into()];
    let t = table(&p, false).expect("table");
    assert_eq!(t.verdict(libc::SYS_fchmodat, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_utimensat, named), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_fchmodat2, NONE), EPERM_);
}

#[test]
fn no_mode_setter_sets_the_set_id_bits_even_when_allowed() {
    let mut p = plan();
    p.effects.write.push("/srv/out".into());
    p.confinement.allow_syscalls = MODE_SETTERS.iter().map(|&(n, _)| n.into()).collect();
    for t in [table(&p, false), table(&plan(), false)] {
        let t = t.expect("table");
        for &(name, arg) in MODE_SETTERS {
            let Some(nr) = sysname::number(name) else {
                continue;
            };
            let mode = |m: u32| {
                let mut args = [3, 0x7fff_0000_1000, 0, 0, 0, 0];
                args[usize::from(arg)] = u64::from(m);
                args
            };
            for m in [0o4755, 0o2755, 0o6755, 0o4000] {
                assert_eq!(t.verdict(nr, mode(m)), EPERM_, "{name} {m:o}");
            }
        }
    }
    // The allowed ones still set every other bit (chmod +x, a sticky directory).
    let t = table(&p, false).expect("table");
    for (nr, arg) in [(libc::SYS_fchmodat, 2), (libc::SYS_fchmod, 1)] {
        let mut args = [3, 0x7fff_0000_1000, 0, 0, 0, 0];
        args[arg] = 0o1777;
        assert_eq!(t.verdict(nr, args), Action::Allow);
    }
}

#[test]
fn no_call_changes_a_terminal_s_state_but_each_may_read_it() {
    let mut writes = plan();
    writes.effects.write.push("/srv/out".into());
    for t in [table(&plan(), false), table(&writes, false)] {
        let t = t.expect("table");
        for &(name, request) in TERMINAL_IOCTLS {
            let args = [0, u64::from(request as u32), 0, 0, 0, 0];
            assert_eq!(t.verdict(libc::SYS_ioctl, args), EPERM_, "{name}");
        }
        for request in [
            libc::TCGETS,
            libc::TIOCGWINSZ,
            libc::FIONREAD,
            libc::FIONBIO,
        ] {
            let args = [0, u64::from(request as u32), 0, 0, 0, 0];
            assert_eq!(
                t.verdict(libc::SYS_ioctl, args),
                Action::Allow,
                "{request:#x}"
            );
        }
    }
    let mut p = plan();
    p.confinement.allow_syscalls = vec!["ioctl".into()];
    let t = table(&p, false).expect("table");
    let args = [0, u64::from(libc::TIOCSETD as u32), 0, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_ioctl, args), Action::Allow);
}

#[test]
fn a_call_without_write_effects_changes_no_metadata_even_through_a_descriptor() {
    let t = table(&plan(), false).expect("table");
    for &name in METADATA_BY_NAME.iter().chain(METADATA_BY_DESCRIPTOR) {
        if let Some(nr) = sysname::number(name) {
            assert_eq!(t.verdict(nr, NONE), EPERM_, "{name}");
        }
    }
    assert_eq!(t.verdict(libc::SYS_utimensat, [3, 0, 0, 0, 0, 0]), EPERM_);
    for &request in INODE_FLAG_IOCTLS {
        // The request is an unsigned int: the upper half of the register does not matter.
        for high in [0, 0xffff_ffff_0000_0000] {
            let args = [3, high | u64::from(request), 0, 0, 0, 0];
            assert_eq!(t.verdict(libc::SYS_ioctl, args), EPERM_, "{request:#x}");
        }
    }
    // Other ioctls (a terminal's size, FIONREAD...) and reads of metadata are untouched.
    let tiocgwinsz = [1, libc::TIOCGWINSZ, 0, 0, 0, 0];
    assert_eq!(t.verdict(libc::SYS_ioctl, tiocgwinsz), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_fgetxattr, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_newfstatat, NONE), Action::Allow);
}

#[test]
fn clone3_is_enosys_and_clone_with_namespaces_is_eperm() {
    let t = table(&plan(), false).expect("table");
    assert_eq!(
        t.verdict(libc::SYS_clone3, NONE),
        Action::Errno(libc::ENOSYS as u32)
    );
    // A plain fork/thread clone is allowed, with an exit signal in the low byte.
    let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
    assert_eq!(
        t.verdict(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]),
        Action::Allow
    );
    assert_eq!(
        t.verdict(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
        Action::Allow
    );
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
    ] {
        let flags = flag as u64 | libc::SIGCHLD as u64;
        assert_eq!(
            t.verdict(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]),
            EPERM_,
            "{flag:#x}"
        );
    }
}

#[test]
fn sockets_without_effects_are_denied_and_unix_needs_its_effect() {
    let t = table(&plan(), false).expect("table");
    let s = libc::SYS_socket;
    for (family, ty) in [
        (libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC),
        (libc::AF_UNIX, libc::SOCK_RAW),
        (libc::AF_INET, libc::SOCK_STREAM),
        (libc::AF_INET6, libc::SOCK_DGRAM),
        (libc::AF_PACKET, libc::SOCK_RAW),
        (libc::AF_NETLINK, libc::SOCK_DGRAM),
    ] {
        assert_eq!(t.verdict(s, sock(family, ty)), EPERM_, "{family} {ty}");
    }
    let pair = libc::SYS_socketpair;
    assert_eq!(
        t.verdict(pair, sock(libc::AF_UNIX, libc::SOCK_STREAM)),
        Action::Allow
    );
    assert_eq!(
        t.verdict(
            pair,
            sock(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC)
        ),
        EPERM_
    );
    // AF_UNIX makes a SOCK_RAW socket a SOCK_DGRAM one.
    assert_eq!(t.verdict(pair, sock(libc::AF_UNIX, libc::SOCK_RAW)), EPERM_);
    // In a network namespace of its own, Unix stream sockets, whose connects guardd makes
    // (`writes::unix`) where the kernel's backstop is attached; sharing the host's, none.
    let t = super::table_with(&plan(), false, true).expect("table");
    for ty in [libc::SOCK_STREAM | libc::SOCK_CLOEXEC, libc::SOCK_SEQPACKET] {
        assert_eq!(t.verdict(s, sock(libc::AF_UNIX, ty)), Action::Allow, "{ty}");
    }
    let t = table(&with_connect(), false).expect("table");
    assert_eq!(t.verdict(s, sock(libc::AF_UNIX, libc::SOCK_STREAM)), EPERM_);

    let mut p = plan();
    p.effects.unix = true;
    let t = table(&p, false).expect("table");
    for ty in [
        libc::SOCK_STREAM,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        libc::SOCK_RAW,
    ] {
        assert_eq!(t.verdict(s, sock(libc::AF_UNIX, ty)), Action::Allow);
        assert_eq!(t.verdict(pair, sock(libc::AF_UNIX, ty)), Action::Allow);
    }
    assert_eq!(t.verdict(s, sock(libc::AF_INET, libc::SOCK_STREAM)), EPERM_);
}

#[test]
fn with_the_kernel_programs_watching_inet_sockets_are_theirs_to_refuse_and_report() {
    let t = table(&plan(), true).expect("table");
    let s = libc::SYS_socket;
    assert_eq!(
        t.verdict(s, sock(libc::AF_INET, libc::SOCK_STREAM)),
        Action::Allow
    );
    assert_eq!(
        t.verdict(s, sock(libc::AF_INET6, libc::SOCK_DGRAM)),
        Action::Allow
    );
    assert_eq!(t.verdict(s, sock(libc::AF_INET, libc::SOCK_RAW)), EPERM_);
    assert_eq!(t.verdict(s, sock(libc::AF_UNIX, libc::SOCK_DGRAM)), EPERM_);
    assert_eq!(t.verdict(s, sock(libc::AF_PACKET, libc::SOCK_RAW)), EPERM_);
}

#[test]
fn sockets_with_connect_effects_add_inet_stream_and_dgram_only() {
    let t = table(&with_connect(), false).expect("table");
    let s = libc::SYS_socket;
    let nb = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    for family in [libc::AF_INET, libc::AF_INET6] {
        assert_eq!(t.verdict(s, sock(family, libc::SOCK_STREAM)), Action::Allow);
        assert_eq!(
            t.verdict(s, sock(family, libc::SOCK_STREAM | nb)),
            Action::Allow
        );
        assert_eq!(
            t.verdict(s, sock(family, libc::SOCK_DGRAM | nb)),
            Action::Allow
        );
        assert_eq!(t.verdict(s, sock(family, libc::SOCK_RAW)), EPERM_);
        assert_eq!(t.verdict(s, sock(family, libc::SOCK_RAW | nb)), EPERM_);
        assert_eq!(t.verdict(s, sock(family, libc::SOCK_SEQPACKET)), EPERM_);
        // Every type in the low four bits, with and without the flags above them.
        for ty in 0..16 {
            let want = if ty == libc::SOCK_STREAM || ty == libc::SOCK_DGRAM {
                Action::Allow
            } else {
                EPERM_
            };
            assert_eq!(t.verdict(s, sock(family, ty)), want, "type {ty}");
            assert_eq!(
                t.verdict(s, sock(family, ty | nb)),
                want,
                "type {ty} | flags"
            );
        }
    }
    assert_eq!(t.verdict(s, sock(libc::AF_UNIX, libc::SOCK_STREAM)), EPERM_);
    assert_eq!(
        t.verdict(s, sock(libc::AF_PACKET, libc::SOCK_DGRAM)),
        EPERM_
    );
    assert_eq!(t.verdict(s, sock(libc::AF_NETLINK, libc::SOCK_RAW)), EPERM_);
    assert_ne!(t, table(&plan(), false).expect("table"));
    // A socket pair is AF_UNIX's alone.
    let pair = libc::SYS_socketpair;
    assert_eq!(
        t.verdict(pair, sock(libc::AF_INET, libc::SOCK_STREAM)),
        EPERM_
    );
    assert_eq!(
        t.verdict(pair, sock(libc::AF_VSOCK, libc::SOCK_STREAM)),
        EPERM_
    );
    assert_eq!(
        t.verdict(pair, sock(libc::AF_UNIX, libc::SOCK_STREAM)),
        Action::Allow
    );
}

/// setsockopt(2) of `level` and `name` on fd 3, with an int's pointer and length.
fn sockopt(level: i32, name: i32) -> [u64; 6] {
    [3, level as u64, name as u64, 0x7fff_0000_1000, 4, 0]
}

#[test]
fn no_call_tests_others_locks_or_takes_a_lease_whatever_its_policy() {
    let fcntl = libc::SYS_fcntl;
    let args = |cmd: i32| [3, cmd as u64, 0, 0, 0, 0];
    let mut lifted = plan();
    lifted.confinement.allow_syscalls = vec!["fcntl".into()];
    for p in [plan(), lifted] {
        let t = table(&p, true).expect("table");
        for &(name, cmd) in LOCK_PROBES {
            assert_eq!(t.verdict(fcntl, args(cmd)), EPERM_, "{name}");
            // A C int: high bits change nothing.
            let mut high = args(cmd);
            high[1] |= 0xffff_ffff_0000_0000;
            assert_eq!(t.verdict(fcntl, high), EPERM_, "{name} with high bits");
        }
        // Taking and giving back locks, and every other command, are the tool's (the lock
        // programs judge which file).
        for cmd in [
            libc::F_SETLK,
            libc::F_SETLKW,
            libc::F_OFD_SETLK,
            libc::F_GETFL,
            libc::F_DUPFD,
        ] {
            assert_eq!(t.verdict(fcntl, args(cmd)), Action::Allow, "{cmd}");
        }
    }
}

#[test]
fn no_call_opens_a_sockets_error_queue_whatever_its_policy() {
    // The error queue, which ICMP errors from anyone fill past the ingress program: answered 0
    // and not set (glibc's resolver gives a lookup up when refused), for every call; not
    // lifted by allow_syscalls, strict mode's syscalls, or another syscall's name.
    let recverr = [
        (libc::SOL_IP, libc::IP_RECVERR),
        (libc::SOL_IP, 26),
        (libc::SOL_IPV6, libc::IPV6_RECVERR),
        (libc::SOL_IPV6, 31),
    ];
    let set = libc::SYS_setsockopt;
    let mut plans = vec![plan(), with_connect()];
    let mut lifted = with_connect();
    lifted.confinement.allow_syscalls = vec!["setsockopt".into(), "socket".into()];
    plans.push(lifted);
    let mut strict = with_connect();
    strict.confinement.syscalls = vec!["setsockopt".into(), "socket".into()];
    plans.push(strict);
    for p in &plans {
        for inet_by_ebpf in [false, true] {
            let t = table(p, inet_by_ebpf).expect("table");
            for (level, name) in recverr {
                // The kernel reads both as ints: high words set change nothing.
                let mut high = sockopt(level, name);
                high[1] |= 0xffff_ffff_0000_0000;
                high[2] |= 0xffff_ffff_0000_0000;
                for args in [sockopt(level, name), high] {
                    let why = format!("{level} {name} {:?}", p.confinement);
                    assert_eq!(t.verdict(set, args), Action::Errno(0), "{why}");
                }
            }
            // Other options, and these names at the other level (IPV6_V6ONLY is 26,
            // IPV6_FLOWINFO 11), are the tool's (strict mode lists setsockopt).
            let others = [
                (libc::SOL_SOCKET, libc::SO_REUSEADDR),
                (libc::SOL_IP, libc::IP_TOS),
                (libc::SOL_IPV6, libc::IPV6_V6ONLY),
                (libc::SOL_IPV6, libc::IPV6_FLOWINFO),
                (libc::SOL_IP, libc::IPV6_RECVERR),
                (libc::SOL_TCP, libc::IP_RECVERR),
            ];
            for (level, name) in others {
                let got = t.verdict(set, sockopt(level, name));
                assert_eq!(got, Action::Allow, "{level} {name}");
            }
        }
    }
}

#[test]
fn allow_syscalls_removes_names_from_the_deny_list() {
    let mut p = plan();
    p.confinement.allow_syscalls = vec!["ptrace".into(), "clone3".into()];
    let t = table(&p, false).expect("table");
    assert_eq!(t.verdict(libc::SYS_ptrace, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_clone3, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_bpf, NONE), EPERM_);

    p.confinement.allow_syscalls = vec!["no_such_call".into()];
    assert!(matches!(
        table(&p, false),
        Err(SeccompError::UnknownSyscall {
            field: "allow_syscalls",
            ..
        })
    ));
}

#[test]
fn strict_mode_kills_outside_the_set_and_keeps_the_deny_list() {
    let mut p = plan();
    p.confinement.syscalls = vec!["getpid".into(), "ptrace".into()];
    let t = table(&p, false).expect("table");
    assert_eq!(t.mode, Mode::Strict);
    assert_eq!(t.verdict(libc::SYS_getpid, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_execve, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_exit_group, NONE), Action::Allow);
    assert_eq!(t.verdict(libc::SYS_getuid, NONE), Action::KillProcess);
    assert_eq!(
        t.verdict(libc::SYS_socket, sock(libc::AF_UNIX, libc::SOCK_STREAM)),
        Action::KillProcess
    );
    // Listed but on the deny list and not in allow_syscalls: still denied.
    assert_eq!(t.verdict(libc::SYS_ptrace, NONE), EPERM_);

    p.confinement.syscalls = vec!["bogus".into()];
    assert!(matches!(
        table(&p, false),
        Err(SeccompError::UnknownSyscall {
            field: "syscalls",
            ..
        })
    ));
}

/// The kernel's classic BPF, for the instructions `compile` emits: runs `program` on a
/// `struct seccomp_data` and returns its `ret`.
fn run(program: &[bpf::Insn], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
    run_counted(program, nr, arch, args).0
}

/// [`run`], and how many instructions it took.
fn run_counted(program: &[bpf::Insn], nr: u32, arch: u32, args: [u64; 6]) -> (u32, usize) {
    let mut data = Vec::with_capacity(64);
    data.extend(nr.to_ne_bytes());
    data.extend(arch.to_ne_bytes());
    data.extend(0u64.to_ne_bytes());
    for a in args {
        data.extend(a.to_ne_bytes());
    }
    let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0);
    loop {
        let i = program[pc];
        pc += 1;
        steps += 1;
        let code = u32::from(i.code);
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                let at = i.k as usize;
                acc = u32::from_ne_bytes(data[at..at + 4].try_into().expect("4 bytes"));
            }
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= i.k,
            c if c == libc::BPF_RET | libc::BPF_K => return (i.k, steps),
            c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
            c if c & 0x07 == libc::BPF_JMP => {
                let taken = match c & 0xf0 {
                    op if op == libc::BPF_JEQ => acc == i.k,
                    op if op == libc::BPF_JGE => acc >= i.k,
                    op => panic!("jump op {op:#x} not emitted by compile"),
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            c => panic!("instruction {c:#x} not emitted by compile"),
        }
    }
}

/// What a `ret` value means, as an [`Action`].
fn action(ret: u32) -> Action {
    match ret & libc::SECCOMP_RET_ACTION_FULL {
        libc::SECCOMP_RET_ALLOW => Action::Allow,
        libc::SECCOMP_RET_USER_NOTIF => Action::Notify,
        libc::SECCOMP_RET_ERRNO => Action::Errno(ret & libc::SECCOMP_RET_DATA),
        libc::SECCOMP_RET_KILL_PROCESS => Action::KillProcess,
        other => panic!("ret {other:#x} not emitted by compile"),
    }
}

/// The tables of the plans a host gives: plain, with connect effects, with unix sockets, with
/// the kernel programs on or off, with syscalls allowed back, and in strict mode.
pub(super) fn tables() -> Vec<SeccompTable> {
    let mut unix = plan();
    unix.effects.unix = true;
    let mut allowed = with_connect();
    allowed.confinement.allow_syscalls = vec!["ptrace".into(), "clone".into(), "socket".into()];
    let mut strict = with_connect();
    strict.confinement.syscalls = vec!["getpid".into(), "socket".into(), "clone".into()];
    let mut strict_plain = plan();
    strict_plain.confinement.syscalls = vec!["getpid".into()];
    let mut openat2 = plan();
    openat2.confinement.allow_syscalls = vec!["openat2".into()];
    let mut out = vec![write_opens(&plan()), write_opens(&openat2)];
    for p in [plan(), with_connect(), unix, allowed, strict, strict_plain] {
        for kernel in [false, true] {
            out.push(table(&p, kernel).expect("table"));
        }
    }
    out
}

#[test]
fn no_call_joins_a_group_or_probes_the_page_cache_whatever_its_policy() {
    let mut allowed = with_connect();
    allowed.confinement.allow_syscalls = vec![
        "setsockopt".into(),
        "fadvise64".into(),
        "preadv2".into(),
        "fcntl".into(),
    ];
    for t in [
        table(&plan(), true),
        table(&with_connect(), true),
        table(&allowed, true),
    ] {
        let t = t.expect("table");
        let opt = |level: i32, name: i32| [3, level as u64, name as u64, 0, 0, 0];
        for (level, name) in [
            (libc::SOL_IP, libc::IP_ADD_MEMBERSHIP),
            (libc::SOL_IP, libc::MCAST_JOIN_GROUP),
            (libc::SOL_IPV6, libc::IPV6_ADD_MEMBERSHIP),
            (libc::SOL_IPV6, libc::IPV6_JOIN_ANYCAST),
        ] {
            assert_eq!(t.verdict(libc::SYS_setsockopt, opt(level, name)), EPERM_);
        }
        // Other options, and the same numbers at another level, stay.
        for (level, name) in [
            (libc::SOL_IP, libc::IP_TTL),
            (libc::SOL_SOCKET, libc::IP_ADD_MEMBERSHIP),
            (libc::SOL_TCP, libc::MCAST_JOIN_GROUP),
        ] {
            let got = t.verdict(libc::SYS_setsockopt, opt(level, name));
            assert_eq!(got, Action::Allow, "{level} {name}");
        }
        let advise = |advice: u64| [3, 0, 0, advice, 0, 0];
        assert_eq!(t.verdict(libc::SYS_fadvise64, advise(4)), EPERM_);
        assert_eq!(t.verdict(libc::SYS_fadvise64, advise(2)), Action::Allow);
        let preadv2 = |flags: i32| [3, 0, 1, 0, 0, flags as u64];
        let nowait = libc::RWF_NOWAIT | libc::RWF_HIPRI;
        assert_eq!(t.verdict(libc::SYS_preadv2, preadv2(nowait)), EPERM_);
        assert_eq!(t.verdict(libc::SYS_preadv2, preadv2(0)), Action::Allow);
        let notify = [3, libc::F_NOTIFY as u64, 0, 0, 0, 0];
        assert_eq!(t.verdict(libc::SYS_fcntl, notify), EPERM_);
    }
}

#[test]
fn write_opens_stop_for_guardd_and_nothing_else_does() {
    let t = write_opens(&plan());
    let at = |flags: i32| {
        [
            libc::AT_FDCWD as u64,
            0x7fff_0000_1000,
            flags as u64,
            0,
            0,
            0,
        ]
    };
    for flags in [
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_CREAT,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        libc::O_RDWR | libc::O_TMPFILE,
    ] {
        assert_eq!(
            t.verdict(libc::SYS_openat, at(flags)),
            Action::Notify,
            "{flags:o}"
        );
        let open = [0x7fff_0000_1000, flags as u64, 0, 0, 0, 0];
        assert_eq!(t.verdict(libc::SYS_open, open), Action::Notify, "{flags:o}");
    }
    for flags in [
        libc::O_RDONLY,
        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY,
    ] {
        assert_eq!(
            t.verdict(libc::SYS_openat, at(flags)),
            Action::Allow,
            "{flags:o}"
        );
    }
    assert_eq!(t.verdict(libc::SYS_creat, NONE), Action::Notify);
    // openat2 is refused (ENOSYS) by the plan's filter unless allowed; then every one stops.
    assert_eq!(t.verdict(libc::SYS_openat2, NONE), Action::Allow);
    let mut openat2 = plan();
    openat2.confinement.allow_syscalls = vec!["openat2".into()];
    let t2 = write_opens(&openat2);
    assert_eq!(t2.verdict(libc::SYS_openat2, NONE), Action::Notify);
    // A call in a network namespace of its own: each connect stops, for guardd to make the Unix
    // ones (where the kernel's backstop is attached); sharing the host's, none does.
    let t = super::write_opens_with(&plan(), true);
    assert_eq!(t.verdict(libc::SYS_connect, NONE), Action::Notify);
    let shared = write_opens(&with_connect());
    assert_eq!(shared.verdict(libc::SYS_connect, NONE), Action::Allow);
    // A refusal of the plan's filter outranks the notification: seccomp's refusal stands.
    let both = SeccompTable {
        rules: [t.rules.clone(), table(&plan(), true).expect("table").rules].concat(),
        ..t.clone()
    };
    let trunc_rw = at(libc::O_RDWR | 3);
    assert_eq!(
        both.verdict(libc::SYS_openat, trunc_rw),
        Action::Errno(libc::EPERM as u32)
    );
}

/// The syscall number of [`synthetic`]'s rules: none on x86_64 or aarch64 (ENOSYS).
pub(super) const UNUSED_NR: i64 = 400;

/// A table no plan gives, with a condition of every shape `compile` emits (64-bit and 32-bit
/// compares with high words, masks across both words, several errnos and a kill on one
/// syscall), all on [`UNUSED_NR`].
pub(super) fn synthetic() -> SeccompTable {
    let cond = |arg, dword, op, value| Cond {
        arg,
        dword,
        op,
        value,
    };
    let rule = |action, when| Rule {
        name: "synthetic",
        nr: UNUSED_NR,
        action,
        when,
    };
    let errno = |e: i32| Action::Errno(e as u32);
    SeccompTable {
        mode: Mode::DenyList,
        default: Action::Allow,
        rules: vec![
            rule(
                errno(libc::EACCES),
                vec![cond(0, false, Op::Eq, 0x1_0000_0002)],
            ),
            rule(
                errno(libc::ENOENT),
                vec![
                    cond(1, false, Op::Ne, 0x3_0000_0004),
                    cond(2, false, Op::MaskedEq(0xf000_0000_0000_000f), 1 << 60 | 1),
                ],
            ),
            rule(errno(libc::EBUSY), vec![cond(3, true, Op::Ne, 7)]),
            rule(
                Action::KillProcess,
                vec![cond(4, false, Op::Eq, 0xffff_ffff_0000_0000)],
            ),
        ],
    }
}

/// Arguments for [`synthetic`]'s syscall: every combination of values on either side of each
/// condition (a low word or a high word off, the other word or the masked bits kept), the kill
/// rule's argument at rest, then its values with a few of the others.
pub(super) fn synthetic_args() -> Vec<[u64; 6]> {
    let a0 = [0x1_0000_0002, 2, 0x1_0000_0003, 0x2_0000_0002, 0];
    let a1 = [0x3_0000_0004, 4, 3, 0x3_0000_0003, 0x2_0000_0004];
    let a2 = [
        1 << 60 | 1,
        1,
        1 << 60,
        0x1fff_ffff_ffff_fff1,
        0x2000_0000_0000_0001,
    ];
    let a3 = [7, 0x1_0000_0007, 8, 0xffff_ffff_0000_0007];
    let mut out = Vec::new();
    for v0 in a0 {
        for v1 in a1 {
            for v2 in a2 {
                for v3 in a3 {
                    out.push([v0, v1, v2, v3, 0, 0]);
                }
            }
        }
    }
    for v4 in [
        0xffff_ffff_0000_0000,
        0xffff_ffff_0000_0001,
        0x7fff_ffff_0000_0000,
    ] {
        out.extend([[0, 0, 0, 0, v4, 0], [a0[0], a1[1], a2[0], a3[1], v4, 0]]);
    }
    out
}

/// Argument values around every one a rule compares with: the value itself, its neighbours,
/// with socket flags, with high bits set, and the extremes.
fn probes(t: &SeccompTable) -> Vec<u64> {
    let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
    let mut values = vec![0, 1, u64::from(u32::MAX), u64::MAX, 1 << 32];
    for c in t.rules.iter().flat_map(|r| &r.when) {
        for v in [c.value, c.value ^ 1, c.value + 1, c.value.wrapping_sub(1)] {
            values.extend([v, v | flags, v | (1 << 32), v | (0xffff_ffff << 32)]);
        }
        if let Op::MaskedEq(m) = c.op {
            values.extend([m, c.value | m, c.value & !m, !m]);
        }
    }
    values.sort_unstable();
    values.dedup();
    values
}

/// The audit arch the program answers.
const NATIVE: u32 = if cfg!(target_arch = "x86_64") {
    0xc000_003e
} else if cfg!(target_arch = "aarch64") {
    0xc000_00b7
} else {
    0xc000_00f3
};

#[test]
fn the_compiled_program_answers_as_verdict_does() {
    for t in tables().into_iter().chain([synthetic()]) {
        let programs = t.compile().expect("compile");
        assert_eq!(programs.len(), 1);
        let p = &programs[0];
        let values = probes(&t);
        for nr in 0..512u32 {
            // Each probe value in every position, beside another that varies with it.
            for (i, &v) in values.iter().enumerate() {
                let w = values[(i * 7 + 3) % values.len()];
                for args in [[v, w, v, w, v, w], [w, v, w, v, w, v], [v, v, 0, 0, 0, 0]] {
                    let want = t.verdict(i64::from(nr), args);
                    let got = action(run(p, nr, NATIVE, args));
                    assert_eq!(got, want, "{:?} nr {nr} args {args:x?}", t.mode);
                }
            }
        }
        for args in synthetic_args() {
            let want = t.verdict(UNUSED_NR, args);
            let got = action(run(p, UNUSED_NR as u32, NATIVE, args));
            assert_eq!(got, want, "{:?} nr {UNUSED_NR} args {args:x?}", t.mode);
        }
        // Another arch is killed, whatever it calls.
        assert_eq!(action(run(p, 39, 0x4000_0003, NONE)), Action::KillProcess);
        #[cfg(target_arch = "x86_64")]
        {
            // getpid through the x32 ABI.
            let x32 = 39 | 0x4000_0000;
            assert_eq!(action(run(p, x32, NATIVE, NONE)), Action::KillProcess);
        }
    }
}

#[test]
fn filters_stay_short() {
    // The kernel checks, converts and JIT-compiles every instruction at every launch (about
    // half a microsecond each here); seccompiler's encoding of these tables took up to 466.
    // Each rule added since closed a way out (terminal takeover, truncating opens, lock
    // probes, group joins, page-cache probes, AIO, set-id files made by mknod); setsockopt's
    // options, a level then a name, compile to one compare of the level for each run of them
    // (`pair_block`): 440 leaves room for a few more.
    for t in tables() {
        let programs = t.compile().expect("compile");
        let len: usize = programs.iter().map(Vec::len).sum();
        assert!(len <= 440, "{:?}: {len} instructions", t.mode);
    }
}

#[test]
fn every_syscall_reaches_its_answer_in_a_few_instructions() {
    // The kernel runs the filter for every syscall number (and arch) at each install, to cache
    // what it always allows: a chain of one compare per syscall with rules (42 instructions to
    // the default) made that a third of the install. The search takes a few compares.
    for t in tables() {
        let programs = t.compile().expect("compile");
        let p = &programs[0];
        let longest = (0..512)
            .filter(|&nr| !t.rules.iter().any(|r| r.nr == i64::from(nr)))
            .map(|nr| run_counted(p, nr, NATIVE, NONE).1)
            .max()
            .expect("numbers without rules");
        assert!(longest <= 16, "{:?}: {longest} instructions", t.mode);
    }
}

#[test]
fn a_dispatch_longer_than_a_jump_s_reach_still_answers() {
    // Enough syscalls with rules that the lower half of the search is more than 255
    // instructions: the compiler jumps over it with `ja`.
    let mut t = table(&plan(), false).expect("table");
    let taken: Vec<i64> = t.rules.iter().map(|r| r.nr).collect();
    let extra: Vec<i64> = (0..300)
        .filter(|nr| !taken.contains(nr))
        .take(160)
        .collect();
    for &nr in &extra {
        t.rules.push(Rule {
            name: "synthetic",
            nr,
            action: Action::Errno(libc::EPERM as u32),
            when: vec![Cond {
                arg: 0,
                dword: false,
                op: Op::Eq,
                value: 7,
            }],
        });
    }
    let p = &t.compile().expect("compile")[0];
    assert!(
        p.iter()
            .any(|i| u32::from(i.code) == libc::BPF_JMP | libc::BPF_JA)
    );
    for nr in 0..512u32 {
        for a0 in [0, 7] {
            let args = [a0, 0, 0, 0, 0, 0];
            let want = t.verdict(i64::from(nr), args);
            assert_eq!(action(run(p, nr, NATIVE, args)), want, "nr {nr} arg0 {a0}");
        }
    }
}

#[test]
fn compiled_filters_are_kept_per_distinct_table() {
    let plain = table(&plan(), false).expect("table");
    let first = super::compiled(&plain).expect("compile");
    assert_eq!(*first, plain.compile().expect("compile"));
    let again = super::compiled(&table(&plan(), false).expect("table")).expect("compile");
    assert!(
        std::sync::Arc::ptr_eq(&first, &again),
        "an equal table is not compiled again"
    );
    let strict = {
        let mut p = plan();
        p.confinement.syscalls = vec!["getpid".into()];
        table(&p, false).expect("table")
    };
    let other = super::compiled(&strict).expect("compile");
    assert_eq!(*other, strict.compile().expect("compile"));
    assert_ne!(*first, *other, "another table gets its own programs");
}

#[test]
fn name_table_matches_libc() {
    assert_eq!(sysname::number("ptrace"), Some(libc::SYS_ptrace));
    assert_eq!(
        sysname::number("io_uring_setup"),
        Some(libc::SYS_io_uring_setup)
    );
    assert_eq!(sysname::number("clone3"), Some(libc::SYS_clone3));
    assert_eq!(
        sysname::number("landlock_restrict_self"),
        Some(libc::SYS_landlock_restrict_self)
    );
    for &(name, nr) in DENY {
        assert_eq!(sysname::number(name), Some(nr), "{name}");
    }
}

#[test]
fn a_rule_or_block_past_a_jump_s_reach_is_refused_not_truncated() {
    // A jump offset is one byte: a condition that cannot reach the next rule, or a syscall
    // whose block the dispatch cannot skip, would send the filter into the wrong code.
    let cond = |value| Cond {
        arg: 0,
        dword: false,
        op: Op::Eq,
        value,
    };
    let rule = |when: Vec<Cond>| Rule {
        name: "synthetic",
        nr: UNUSED_NR,
        action: Action::Errno(libc::EPERM as u32),
        when,
    };
    let mut long_rule = table(&plan(), false).expect("table");
    long_rule.rules.push(rule((0..70).map(cond).collect()));
    let err = long_rule.compile().expect_err("a rule of 281 instructions");
    assert!(err.to_string().contains("a rule of more than 255"), "{err}");

    let mut long_block = table(&plan(), false).expect("table");
    long_block
        .rules
        .extend((0..40).map(|i| rule((0..2).map(|j| cond(i * 2 + j)).collect())));
    let err = long_block
        .compile()
        .expect_err("a block of 360 instructions");
    assert!(
        err.to_string().contains("its rules take more than 255"),
        "{err}"
    );
}
