//! The seccomp filter of a confined call, as data.
//!
//! [`table`] is a pure function from a [`LaunchPlan`] to a [`SeccompTable`]: which syscalls are
//! denied (and with which errno), under which argument conditions, and in strict mode which are
//! allowed at all. Unit tests check the table through [`SeccompTable::verdict`], which mirrors what
//! the kernel will do with the compiled filters, without installing anything. [`SeccompTable::
//! compile`] turns it into BPF programs; `launch` compiles them before fork and the child installs
//! them as its very last step before `execve`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::Serialize;

use crate::{plan::LaunchPlan, sysname};

/// Errors of building or compiling the filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("unknown syscall name {name:?} in {field}")]
    UnknownSyscall { name: String, field: &'static str },
    #[error("compiling the seccomp filter for {action:?}: {source}")]
    Compile {
        action: Action,
        source: seccompiler::BackendError,
    },
}

/// What the filter does with a syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    Allow,
    /// Fail the syscall with this errno.
    Errno(u32),
    KillProcess,
}

impl Action {
    /// The kernel's precedence when several stacked filters answer: the most restrictive wins.
    fn severity(self) -> u8 {
        match self {
            Action::Allow => 0,
            Action::Errno(_) => 1,
            Action::KillProcess => 2,
        }
    }
}

impl From<Action> for SeccompAction {
    fn from(a: Action) -> Self {
        match a {
            Action::Allow => SeccompAction::Allow,
            Action::Errno(e) => SeccompAction::Errno(e),
            Action::KillProcess => SeccompAction::KillProcess,
        }
    }
}

/// A comparison of one syscall argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    /// `arg & mask == value`.
    MaskedEq(u64),
}

/// One condition on a syscall argument; `dword` compares only the low 32 bits (C `int`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    pub arg: u8,
    pub dword: bool,
    pub op: Op,
    pub value: u64,
}

impl Cond {
    fn holds(&self, args: &[u64; 6]) -> bool {
        let mut v = args[usize::from(self.arg)];
        if self.dword {
            v &= 0xffff_ffff;
        }
        match self.op {
            Op::Eq => v == self.value,
            Op::Ne => v != self.value,
            Op::MaskedEq(mask) => v & mask == self.value & mask,
        }
    }
}

/// One entry of the table: `action` applies to syscall `nr` when every condition in `when` holds
/// (always when `when` is empty). Several entries for one syscall are alternatives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: &'static str,
    pub nr: i64,
    pub action: Action,
    pub when: Vec<Cond>,
}

/// Deny-list (default allow) or strict (default kill) mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    DenyList,
    Strict,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::DenyList => "deny-list",
            Mode::Strict => "strict",
        }
    }
}

/// The whole filter as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeccompTable {
    pub mode: Mode,
    /// What happens to a syscall no `Allow` rule matches (and no deny rule).
    pub default: Action,
    pub rules: Vec<Rule>,
}

/// Syscalls no confined tool needs, each a known way out of a sandbox or into the kernel's
/// attack surface: async I/O that bypasses seccomp (io_uring), other processes' memory, kernel
/// programs and modules, mounts and namespaces, the kernel keyring, userfaultfd (a race
/// amplifier), handle-based opens that bypass path checks, and host administration.
const DENY: &[(&str, i64)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
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
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
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
];

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

/// The socket type lives in the low 4 bits of socket(2)'s `type`; SOCK_NONBLOCK and SOCK_CLOEXEC
/// sit above (the kernel's SOCK_TYPE_MASK).
const SOCK_TYPE_MASK: u64 = 0xf;

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

fn arch() -> TargetArch {
    #[cfg(target_arch = "aarch64")]
    {
        TargetArch::aarch64
    }
    #[cfg(target_arch = "riscv64")]
    {
        TargetArch::riscv64
    }
    #[cfg(not(any(target_arch = "aarch64", target_arch = "riscv64")))]
    {
        TargetArch::x86_64
    }
}

fn always(name: &'static str, nr: i64, action: Action) -> Rule {
    Rule {
        name,
        nr,
        action,
        when: Vec::new(),
    }
}

fn int_eq(arg: u8, value: i32) -> Cond {
    Cond {
        arg,
        dword: true,
        op: Op::Eq,
        value: value as u64,
    }
}

fn int_ne(arg: u8, value: i32) -> Cond {
    Cond {
        arg,
        dword: true,
        op: Op::Ne,
        value: value as u64,
    }
}

const EPERM: Action = Action::Errno(libc::EPERM as u32);

/// The filter for `plan`: the deny list less `allow_syscalls`, clone/clone3 rules, socket rules
/// that depend on whether the plan may connect, and in strict mode the allow-set.
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
    let allowed = |name: &str| c.allow_syscalls.iter().any(|a| a == name);

    let mut rules: Vec<Rule> = DENY
        .iter()
        .filter(|(name, _)| !allowed(name))
        .map(|&(name, nr)| always(name, nr, EPERM))
        .collect();

    // clone3 passes its flags in a struct seccomp cannot read: answer ENOSYS so libc falls back
    // to clone(2), whose flags we can check.
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

    let effects = &plan.effects;
    rules.extend(
        socket_rules(!effects.connect.is_empty() || inet_by_ebpf, effects.unix)
            .into_iter()
            .filter(|r| !allowed(r.name)),
    );

    let (mode, default) = if c.syscalls.is_empty() {
        (Mode::DenyList, Action::Allow)
    } else {
        for name in &c.syscalls {
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
        (Mode::Strict, Action::KillProcess)
    };
    Ok(SeccompTable {
        mode,
        default,
        rules,
    })
}

/// socket(2): AF_UNIX only with the `unix` effect, AF_INET/AF_INET6 only with connect effects
/// and then of type SOCK_STREAM or SOCK_DGRAM. Never AF_PACKET, AF_NETLINK or SOCK_RAW.
/// socketpair(2) of datagram sockets needs the `unix` effect too: sendto(2) on one reaches any
/// pathname datagram socket (syslog, journald). Each rule below matches a denied case.
fn socket_rules(may_connect: bool, may_unix: bool) -> Vec<Rule> {
    let rule = |nr, when| Rule {
        name: if nr == libc::SYS_socket {
            "socket"
        } else {
            "socketpair"
        },
        nr,
        action: EPERM,
        when,
    };
    let mut families = Vec::new();
    if may_unix {
        families.push(libc::AF_UNIX);
    }
    if may_connect {
        families.extend([libc::AF_INET, libc::AF_INET6]);
    }
    let mut rules = vec![rule(
        libc::SYS_socket,
        families.iter().map(|&f| int_ne(0, f)).collect(),
    )];
    let type_is = |ty: u64| Cond {
        arg: 1,
        dword: true,
        op: Op::MaskedEq(SOCK_TYPE_MASK),
        value: ty,
    };
    if may_connect {
        for family in [libc::AF_INET, libc::AF_INET6] {
            for ty in 0..=SOCK_TYPE_MASK {
                if ty != libc::SOCK_STREAM as u64 && ty != libc::SOCK_DGRAM as u64 {
                    rules.push(rule(libc::SYS_socket, vec![int_eq(0, family), type_is(ty)]));
                }
            }
        }
    }
    if !may_unix {
        rules.push(rule(
            libc::SYS_socketpair,
            vec![type_is(libc::SOCK_DGRAM as u64)],
        ));
    }
    rules
}

impl SeccompTable {
    /// What the installed filters will answer to syscall `nr` with `args`: the most restrictive
    /// of the matching deny rules and the allow-set (or the default), as the kernel does with
    /// stacked filters.
    pub fn verdict(&self, nr: i64, args: [u64; 6]) -> Action {
        let matching = self
            .rules
            .iter()
            .filter(|r| r.nr == nr && r.when.iter().all(|c| c.holds(&args)));
        let mut base = self.default;
        let mut worst = Action::Allow;
        for r in matching {
            if r.action == Action::Allow {
                base = Action::Allow;
            } else if r.action.severity() > worst.severity() {
                worst = r.action;
            }
        }
        if worst.severity() > base.severity() {
            worst
        } else {
            base
        }
    }

    /// The number of syscalls with at least one deny rule (for the audit row).
    pub fn denied_count(&self) -> usize {
        let mut nrs: Vec<i64> = self
            .rules
            .iter()
            .filter(|r| r.action != Action::Allow)
            .map(|r| r.nr)
            .collect();
        nrs.sort_unstable();
        nrs.dedup();
        nrs.len()
    }

    /// BPF programs to install, in order: the x32 guard (x86_64), one per deny action, and in
    /// strict mode the allow-set filter, last. Stacked, the kernel applies the most restrictive
    /// answer.
    pub fn compile(&self) -> Result<Vec<BpfProgram>, SeccompError> {
        // One filter per action: seccompiler gives a filter a single on-match action.
        let mut groups: Vec<(Action, BTreeMap<i64, Vec<SeccompRule>>)> = Vec::new();
        let mut always_nrs: Vec<(Action, i64)> = Vec::new();
        for r in &self.rules {
            let idx = match groups.iter().position(|(a, _)| *a == r.action) {
                Some(i) => i,
                None => {
                    groups.push((r.action, BTreeMap::new()));
                    groups.len() - 1
                }
            };
            let map = &mut groups[idx].1;
            let compile_err = |source| SeccompError::Compile {
                action: r.action,
                source,
            };
            if r.when.is_empty() {
                always_nrs.push((r.action, r.nr));
                map.insert(r.nr, Vec::new());
                continue;
            }
            if always_nrs.contains(&(r.action, r.nr)) {
                continue; // already matched unconditionally
            }
            let conds = r
                .when
                .iter()
                .map(|c| {
                    let len = if c.dword {
                        SeccompCmpArgLen::Dword
                    } else {
                        SeccompCmpArgLen::Qword
                    };
                    let op = match c.op {
                        Op::Eq => SeccompCmpOp::Eq,
                        Op::Ne => SeccompCmpOp::Ne,
                        Op::MaskedEq(m) => SeccompCmpOp::MaskedEq(m),
                    };
                    SeccompCondition::new(c.arg, len, op, c.value)
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(compile_err)?;
            let rule = SeccompRule::new(conds).map_err(compile_err)?;
            map.entry(r.nr).or_default().push(rule);
        }
        // Installing a filter is itself a syscall (seccomp), which the strict allow-set would
        // kill: the allow-set goes last, the x32 guard first.
        groups.sort_by_key(|(a, _)| *a == Action::Allow);
        let mut programs = Vec::new();
        #[cfg(target_arch = "x86_64")]
        programs.push(x32_guard());
        for (action, map) in groups {
            let (mismatch, on_match) = match action {
                Action::Allow => (self.default, Action::Allow),
                deny => (Action::Allow, deny),
            };
            let compile_err = |source| SeccompError::Compile { action, source };
            let filter = SeccompFilter::new(map, mismatch.into(), on_match.into(), arch())
                .map_err(compile_err)?;
            programs.push(BpfProgram::try_from(filter).map_err(compile_err)?);
        }
        Ok(programs)
    }
}

/// x32 syscalls carry the x86_64 audit arch and `nr | 0x4000_0000`, so they pass seccompiler's
/// arch check and match none of the rules keyed on plain numbers: a denied syscall would be
/// reachable through its x32 twin on kernels built with CONFIG_X86_X32_ABI. This program kills
/// any such call. (Other arches, e.g. i386 through int 0x80, are killed by seccompiler's arch
/// check.)
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code: u16, k: u32| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        // ld [nr]  (offset 0 of struct seccomp_data)
        stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
        // jge X32_SYSCALL_BIT ? kill : allow
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        stmt(
            (libc::BPF_RET | libc::BPF_K) as u16,
            libc::SECCOMP_RET_KILL_PROCESS,
        ),
        stmt(
            (libc::BPF_RET | libc::BPF_K) as u16,
            libc::SECCOMP_RET_ALLOW,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plan::{Confinement, Effects, Endpoint};

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
}
