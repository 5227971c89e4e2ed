//! The table checked as data, through [`SeccompTable::verdict`], and compiled.

use std::time::Duration;

use super::{rules::DENY, *};
use crate::{
    plan::{Confinement, Effects, Endpoint, LaunchPlan},
    sysname,
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
    assert_eq!(t.denied_count(), DENY.len() + 4); // + clone3, clone, socket, socketpair
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
        (libc::AF_UNIX, libc::SOCK_STREAM),
        (libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC),
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

    let mut p = plan();
    p.effects.unix = true;
    let t = table(&p, false).expect("table");
    for ty in [libc::SOCK_STREAM, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC] {
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
    assert_eq!(t.verdict(s, sock(libc::AF_UNIX, libc::SOCK_STREAM)), EPERM_);
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
    }
    assert_eq!(t.verdict(s, sock(libc::AF_UNIX, libc::SOCK_STREAM)), EPERM_);
    assert_eq!(
        t.verdict(s, sock(libc::AF_PACKET, libc::SOCK_DGRAM)),
        EPERM_
    );
    assert_eq!(t.verdict(s, sock(libc::AF_NETLINK, libc::SOCK_RAW)), EPERM_);
    assert_ne!(t, table(&plan(), false).expect("table"));
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

#[test]
fn tables_compile_to_bpf() {
    let programs = table(&plan(), false)
        .expect("table")
        .compile()
        .expect("compile");
    assert_eq!(programs.len(), 3, "EPERM, ENOSYS and x32 filters");
    assert!(programs.iter().all(|p| !p.is_empty()));
    let mut p = with_connect();
    p.confinement.syscalls = vec!["getpid".into()];
    let programs = table(&p, false).expect("table").compile().expect("compile");
    assert_eq!(
        programs.len(),
        4,
        "EPERM, ENOSYS, allow-set and x32 filters"
    );
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
