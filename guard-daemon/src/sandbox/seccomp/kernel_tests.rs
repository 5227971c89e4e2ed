//! The compiled program checked against the real kernel, not an interpreter: a forked child
//! installs it as the launch's child does and issues raw syscalls chosen to be harmless whatever
//! the answer (bad pids, invalid flag combinations, sockets it never uses), and the parent
//! compares what the kernel answered with [`SeccompTable::verdict`].
//!
//! Each probe is also run without the filter, so an allowed call is checked against what the
//! kernel gives it unfiltered, and a denied one is known to be refused by the filter, not by
//! the call itself. A created socket's actual domain and type are read back and must be ones
//! the table lets a tool create by name (the kernel turns some requests into others).

use super::{
    Action, SeccompTable,
    bpf::BpfProgram,
    tests::{UNUSED_NR, synthetic, synthetic_args, tables},
};

/// One raw syscall with its arguments.
#[derive(Clone, Copy, Debug)]
struct Probe {
    nr: i64,
    args: [u64; 6],
    /// Issued through `int 0x80`, the i386 ABI (x86_64 only; `nr` is then i386's).
    int80: bool,
}

/// What the kernel did with a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Failed with this errno.
    Errno(i64),
    /// Succeeded (a return value, an fd).
    Ok,
    /// Created a socket (or pair) of this domain and type (`SO_DOMAIN`, `SO_TYPE`).
    Socket { domain: i64, ty: i64 },
    /// The process was killed by this signal.
    Killed(i32),
}

fn call(nr: i64, args: [u64; 6]) -> Probe {
    Probe {
        nr,
        args,
        int80: false,
    }
}

fn arg0(nr: i64, a: u64) -> Probe {
    call(nr, [a, 0, 0, 0, 0, 0])
}

/// Namespace flags clone(2) must not carry, for the clone probes.
const NS: &[i32] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

const HI: u64 = 0xffff_ffff_0000_0000;

/// Opens of a name at an unmapped address (EFAULT unfiltered, whatever the flags), and the
/// options and probes refused by argument, on no descriptor.
fn opens() -> Vec<Probe> {
    let at = libc::AT_FDCWD as u64;
    let mut out = vec![arg0(libc::SYS_creat, 1)];
    for flags in [
        libc::O_RDONLY,
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_CREAT,
        libc::O_RDONLY | libc::O_TRUNC,
    ] {
        out.push(call(libc::SYS_openat, [at, 1, flags as u64, 0, 0, 0]));
        out.push(call(libc::SYS_open, [1, flags as u64, 0, 0, 0, 0]));
    }
    // On no descriptor (EBADF unfiltered): group joins, page-cache probes, dnotify.
    let none = u64::from(u32::MAX);
    for (level, name) in [
        (libc::SOL_IP, libc::IP_ADD_MEMBERSHIP),
        (libc::SOL_IPV6, libc::IPV6_JOIN_ANYCAST),
        (libc::SOL_IP, libc::IP_TTL),
    ] {
        out.push(call(
            libc::SYS_setsockopt,
            [none, level as u64, name as u64, 0, 0, 0],
        ));
    }
    for advice in [2, 4] {
        out.push(call(libc::SYS_fadvise64, [none, 0, 0, advice, 0, 0]));
    }
    for flags in [0, libc::RWF_NOWAIT] {
        out.push(call(libc::SYS_preadv2, [none, 0, 0, 0, 0, flags as u64]));
    }
    out.push(call(
        libc::SYS_fcntl,
        [none, libc::F_NOTIFY as u64, 0, 0, 0, 0],
    ));
    out
}

/// The probes, each harmless allowed or not.
fn probes() -> Vec<Probe> {
    let mut out = vec![
        arg0(libc::SYS_getpid, 0),
        arg0(libc::SYS_getuid, 0),
        // No such syscall: ENOSYS from the kernel, the default from the filter.
        arg0(1000, 0),
        // No flags: changes nothing.
        arg0(libc::SYS_unshare, 0),
        arg0(libc::SYS_unshare, 1 << 32),
        call(libc::SYS_ptrace, [12, 0x7fff_ffff, 0, 0, 0, 0]), // GETREGS, no such pid
        arg0(libc::SYS_io_uring_setup, 0),                     // no entries: EINVAL
        arg0(libc::SYS_bpf, u64::MAX),
        arg0(libc::SYS_personality, 0xffff_ffff), // a query
        arg0(libc::SYS_keyctl, u64::MAX),
        call(libc::SYS_setns, [u64::MAX, 0, 0, 0, 0, 0]),
        arg0(libc::SYS_userfaultfd, 0xffff_ffff),
        call(libc::SYS_process_vm_readv, [0x7fff_ffff, 0, 0, 0, 0, 1]),
        arg0(libc::SYS_mount, 0),
        // No such descriptor: EBADF unfiltered.
        call(libc::SYS_pidfd_getfd, [u64::MAX, 0, 0, 0, 0, 0]),
        call(libc::SYS_process_madvise, [u64::MAX, 0, 0, 0, 0, 0]),
        call(libc::SYS_clone3, [0, 0, 0, 0, 0, 0]),
    ];
    out.extend(opens());
    // clone(2): CLONE_SIGHAND without CLONE_VM is EINVAL before anything is created, so an
    // allowed probe fails with EINVAL, a filtered one with EPERM. Each flag in the low word (the
    // kernel's lower_32_bits), in the high word (ignored by clone), and with junk above it.
    let sighand = (libc::CLONE_SIGHAND | libc::SIGCHLD) as u64;
    out.push(arg0(libc::SYS_clone, sighand));
    out.push(arg0(libc::SYS_clone, sighand | 0x80)); // CLONE_NEWTIME's bit: an exit signal
    for &f in NS {
        let f = f as u64;
        for flags in [f | sighand, (f << 32) | sighand, HI | f | sighand] {
            out.push(arg0(libc::SYS_clone, flags));
        }
    }
    let nb = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
    let mut types: Vec<u64> = (0..16).collect();
    types.extend([
        1 | nb,
        2 | nb,
        3 | nb,
        10 | nb,
        1 | (1 << 32),
        3 | (1 << 32),
        2 | HI,
    ]);
    for family in [
        libc::AF_UNIX as u64,
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
        libc::AF_PACKET as u64,
        libc::AF_NETLINK as u64,
        libc::AF_UNIX as u64 | (1 << 32),
        libc::AF_INET as u64 | HI,
        libc::AF_PACKET as u64 | (1 << 32),
        0xffff_ffff,
    ] {
        for &ty in &types {
            out.push(call(libc::SYS_socket, [family, ty, 0, 0, 0, 0]));
        }
    }
    let unix = libc::AF_UNIX as u64;
    for &ty in &types {
        out.push(call(libc::SYS_socketpair, [unix, ty, 0, 0, 0, 0]));
    }
    out.push(call(libc::SYS_socketpair, [unix | HI, 2, 0, 0, 0, 0]));
    out.push(call(
        libc::SYS_socketpair,
        [libc::AF_INET as u64, 1, 0, 0, 0, 0],
    ));
    #[cfg(target_arch = "x86_64")]
    {
        // getpid through the x32 ABI, through the i386 ABI, and syscall -1.
        out.push(arg0(libc::SYS_getpid | 0x4000_0000, 0));
        out.push(Probe {
            nr: 20,
            args: [0; 6],
            int80: true,
        });
        out.push(arg0(-1, 0));
    }
    out
}

/// What the filter answers that `verdict` does not model: another ABI, and numbers at or
/// above the x32 bit (syscall -1 among them), which the program kills.
fn outside_verdict(p: &Probe) -> bool {
    p.int80 || (cfg!(target_arch = "x86_64") && (p.nr as u32) >= 0x4000_0000)
}

/// One record the child writes per probe: its index, a kind and a value.
type Record = [i64; 3];
const RET: i64 = 0;
const SOCKET: i64 = 1;
const SETUP_FAILED: i64 = 2;

/// Issues one probe; the raw return or `-errno`.
fn issue(p: &Probe, sv: &mut [libc::c_int; 2]) -> i64 {
    if p.int80 {
        #[cfg(target_arch = "x86_64")]
        {
            let ret: i64;
            // SAFETY: an i386 syscall without arguments (getpid); the kernel zeroes r8-r11 on
            // this entry.
            unsafe {
                core::arch::asm!(
                    "int 0x80",
                    inlateout("rax") p.nr => ret,
                    out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                    options(nostack),
                );
            }
            return i64::from(ret as i32);
        }
    }
    let mut a = p.args;
    if p.nr == libc::SYS_socketpair {
        a[3] = sv.as_mut_ptr() as u64;
    }
    // SAFETY: the probes' pointer arguments are NULL or `sv`; the rest are integers.
    let rc = unsafe {
        libc::syscall(
            p.nr,
            a[0] as libc::c_long,
            a[1] as libc::c_long,
            a[2] as libc::c_long,
            a[3] as libc::c_long,
            a[4] as libc::c_long,
            a[5] as libc::c_long,
        )
    };
    if rc == -1 {
        -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        rc
    }
}

/// `fd`'s socket option `opt` (SOL_SOCKET).
fn sockopt(fd: libc::c_int, opt: libc::c_int) -> i64 {
    let mut v: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the call's writes.
    unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&raw mut v).cast(), &raw mut len) };
    i64::from(v)
}

fn put(fd: libc::c_int, r: Record) {
    // SAFETY: r is 24 readable bytes.
    unsafe { libc::write(fd, r.as_ptr().cast(), size_of::<Record>()) };
}

/// The forked child: installs `filter` (none for the baseline) and issues `probes[start..]`,
/// one record each, then exits. Only raw syscalls: no allocation, no locks.
fn child(
    fd: libc::c_int,
    filter: Option<&libc::sock_fprog>,
    probes: &[Probe],
    start: usize,
    inspect: bool,
) -> ! {
    // SAFETY: prctl and seccomp with integers and a pointer to a live sock_fprog. Not dumpable:
    // a SIGSYS would otherwise leave a core file.
    let setup = unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && filter.is_none_or(|f| {
                let prog: *const libc::sock_fprog = f;
                libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, prog) == 0
            })
    };
    if !setup {
        put(fd, [0, SETUP_FAILED, 0]);
    } else {
        for (i, p) in probes.iter().enumerate().skip(start) {
            let mut sv = [-1; 2];
            let ret = issue(p, &mut sv);
            let i = i as i64;
            if p.nr == libc::SYS_clone && ret == 0 {
                // SAFETY: the clone's new process (none is expected) leaves at once.
                unsafe { libc::syscall(libc::SYS_exit_group, 0) };
            }
            let sock = match p.nr {
                libc::SYS_socket if ret >= 0 => Some(ret as libc::c_int),
                libc::SYS_socketpair if ret == 0 => Some(sv[0]),
                _ => None,
            };
            match sock {
                Some(s) if inspect => {
                    let (domain, ty) = (sockopt(s, libc::SO_DOMAIN), sockopt(s, libc::SO_TYPE));
                    put(fd, [i, SOCKET, (domain << 16) | ty]);
                }
                _ => put(fd, [i, RET, ret]),
            }
        }
    }
    // SAFETY: exit_group has no preconditions.
    unsafe { libc::syscall(libc::SYS_exit_group, 0) };
    unreachable!("exit_group returned")
}

/// Runs every probe in forked children under `filter`: one child runs them in order, and when
/// one kills it the next child goes on after that probe. `inspect`: the filter lets getsockopt
/// through, so created sockets can be read back.
fn run_all(filter: Option<&BpfProgram>, probes: &[Probe], inspect: bool) -> Vec<Outcome> {
    let fprog = filter.map(|p| libc::sock_fprog {
        len: u16::try_from(p.len()).expect("program length"),
        filter: p.as_ptr().cast_mut().cast(),
    });
    let mut out = Vec::with_capacity(probes.len());
    while out.len() < probes.len() {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two fds.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the child calls only async-signal-safe functions (raw syscalls) and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            child(fds[1], fprog.as_ref(), probes, out.len(), inspect);
        }
        // SAFETY: our copy of the write end, so the read below ends when the child exits.
        unsafe { libc::close(fds[1]) };
        let mut r: Record = [0; 3];
        // Each record is one write of under PIPE_BUF bytes, so each read gets a whole one. Read
        // while the child runs: a pipe can hold less than all of them.
        // SAFETY: r has room for one record.
        while unsafe { libc::read(fds[0], r.as_mut_ptr().cast(), size_of::<Record>()) }
            == size_of::<Record>() as isize
        {
            assert_ne!(r[1], SETUP_FAILED, "installing the filter failed");
            assert_eq!(r[0] as usize, out.len(), "records in order");
            out.push(match (r[1], r[2]) {
                (SOCKET, v) => Outcome::Socket {
                    domain: v >> 16,
                    ty: v & 0xffff,
                },
                (_, v) if v < 0 => Outcome::Errno(-v),
                _ => Outcome::Ok,
            });
        }
        let mut status = 0;
        // SAFETY: our read end, no longer used; our child, whose status goes to `status`.
        unsafe {
            libc::close(fds[0]);
            assert_eq!(libc::waitpid(pid, &raw mut status, 0), pid);
        }
        if libc::WIFSIGNALED(status) {
            // Killed by the probe after the last one it reported.
            out.push(Outcome::Killed(libc::WTERMSIG(status)));
        } else {
            assert!(
                libc::WIFEXITED(status) && out.len() == probes.len(),
                "child {status:#x}"
            );
        }
    }
    out
}

#[test]
fn the_kernel_answers_each_probe_as_verdict_does() {
    let probes = probes();
    let baseline = run_all(None, &probes, true);
    for t in tables() {
        check(&t, &probes, &baseline);
    }
}

#[test]
fn the_kernel_answers_conditions_of_every_shape_as_verdict_does() {
    let probes: Vec<Probe> = synthetic_args()
        .into_iter()
        .map(|args| call(UNUSED_NR, args))
        .collect();
    let baseline = run_all(None, &probes, true);
    check(&synthetic(), &probes, &baseline);
}

/// Runs `probes` under `t`'s program and compares each answer with `verdict` (an allowed probe
/// with its `baseline`, its answer without a filter).
fn check(t: &SeccompTable, probes: &[Probe], baseline: &[Outcome]) {
    let programs = t.compile().expect("compile");
    assert_eq!(programs.len(), 1);
    let inspect = t.verdict(libc::SYS_getsockopt, [0; 6]) == Action::Allow;
    let got = run_all(Some(&programs[0]), probes, inspect);
    for ((p, &got), &base) in probes.iter().zip(&got).zip(baseline) {
        let want = if outside_verdict(p) {
            Outcome::Killed(libc::SIGSYS)
        } else {
            match t.verdict(p.nr, p.args) {
                Action::Allow => base,
                // No listener holds the filter: the kernel fails the syscall.
                Action::Notify => Outcome::Errno(i64::from(libc::ENOSYS)),
                Action::Errno(e) => Outcome::Errno(i64::from(e)),
                Action::KillProcess => Outcome::Killed(libc::SIGSYS),
            }
        };
        let same = match (want, got) {
            // Read back only when the table lets getsockopt through.
            (Outcome::Socket { .. }, Outcome::Ok) => !inspect,
            _ => want == got,
        };
        assert!(
            same,
            "{:?} nr {} args {:x?} int80 {}: kernel {got:?}, want {want:?}",
            t.mode, p.nr, p.args, p.int80
        );
        created_is_allowed(t, p, got);
    }
}

/// A socket the kernel created under the filter is one the table lets a tool create by name:
/// the kernel turns some requests into others (AF_UNIX's SOCK_RAW is SOCK_DGRAM).
fn created_is_allowed(t: &SeccompTable, p: &Probe, got: Outcome) {
    if let Outcome::Socket { domain, ty } = got {
        let asked = [domain as u64, ty as u64, 0, 0, 0, 0];
        assert_eq!(
            t.verdict(p.nr, asked),
            Action::Allow,
            "{:?} nr {} args {:x?} made a socket of domain {domain}, type {ty}",
            t.mode,
            p.nr,
            p.args
        );
    }
}
