//! The table of a plan: the deny list less what the plan allows, the clone rules, the socket
//! rules and, in strict mode, the allow-set.

use super::lists::*;
use super::{
    Action, Cond, EPERM, Mode, Op, Rule, SeccompError, SeccompTable, int_eq,
    socket::{error_queue_rules, group_join_rules, socket_rules},
};
use crate::{
    call::plan::LaunchPlan,
    sandbox::{landlock, sysname},
};

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
    table_with(plan, inet_by_ebpf, false)
}

/// [`table`]; `unix_by_guardd`: guardd makes the Unix connects of a call in a network namespace
/// of its own, behind the kernel's backstop (`writes::backstop`), so such a call gets Unix
/// stream sockets.
pub fn table_with(
    plan: &LaunchPlan,
    inet_by_ebpf: bool,
    unix_by_guardd: bool,
) -> Result<SeccompTable, SeccompError> {
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
    // An enforced call has its mount view: read-only but for what it may change.
    let view = plan.enforce.enforced();
    rules.extend(metadata_rules(
        allowed,
        !plan.effects.write.is_empty(),
        view,
    ));
    let terminal = TERMINAL_IOCTLS.iter().filter(|_| !allowed("ioctl"));
    rules.extend(
        terminal
            .chain(TERMINAL_TAKEOVER_IOCTLS)
            .map(|&(_, request)| ioctl_request(request as u32)),
    );

    let effects = &plan.effects;
    rules.extend(
        socket_rules(
            !effects.connect.is_empty() || inet_by_ebpf,
            effects.unix,
            plan.own_network() && unix_by_guardd,
        )
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
/// the plan allows. A call that writes and has its mount `view` (every enforced call) may set
/// times, modes and attributes by name: every file it may not write is on a read-only mount
/// there (EROFS), so by name it reaches what it may write and nothing else (`tar -x`,
/// `shutil.copy2`, `os.utime` need it). Never a set-id bit.
fn metadata_rules(allowed: impl Fn(&str) -> bool, writes: bool, view: bool) -> Vec<Rule> {
    let by_descriptor = if writes {
        &[][..]
    } else {
        METADATA_BY_DESCRIPTOR
    };
    let bounded = writes && view;
    let by_name = if bounded { &[][..] } else { METADATA_BY_NAME };
    let mut rules: Vec<Rule> = by_name
        .iter()
        .chain(by_descriptor)
        .filter(|name| !allowed(name))
        .filter_map(|&name| Some(always(name, sysname::number(name)?, EPERM)))
        .collect();
    if !allowed("utimensat") && !bounded {
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
    write_opens_with(plan, false)
}

/// [`write_opens`]; with `unix_by_guardd` (see [`table_with`]), a call in a network namespace
/// of its own stops at each connect too.
pub fn write_opens_with(plan: &LaunchPlan, unix_by_guardd: bool) -> SeccompTable {
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
    // Execs too: one of a program the call may not read is landlock's EACCES, which the
    // kernel's exec check never meets.
    rules.push(always("execve", libc::SYS_execve, Action::Notify));
    rules.push(always("execveat", libc::SYS_execveat, Action::Notify));
    // A call in a network namespace of its own may make Unix stream sockets; guardd connects
    // them for it (`sandbox::writes::unix`), and lets any other socket's connect go on.
    if plan.own_network() && unix_by_guardd {
        rules.push(always("connect", libc::SYS_connect, Action::Notify));
    }
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
