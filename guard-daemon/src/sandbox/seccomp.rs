//! The seccomp filter of a confined call, as data.
//!
//! [`table`] is a pure function from a [`LaunchPlan`] to a [`SeccompTable`]: which syscalls are
//! denied (and with which errno), under which argument conditions, and in strict mode which are
//! allowed at all. Unit tests check the table through [`SeccompTable::verdict`], which mirrors what
//! the kernel will do with the compiled filters, without installing anything. [`SeccompTable::
//! compile`] turns it into BPF programs ([`compiled`] keeps them per distinct table); `launch`
//! gets them before the clone and the child installs them as its very last step before `execve`.
//!
//! The parts: `lists` holds what the table names, as data; `rules` builds the table from a
//! plan (the deny list, clone and the strict allow-set), `socket` the rules on socket(2) and
//! socketpair(2), and `bpf` compiles it.
//!
//! [`LaunchPlan`]: crate::call::plan::LaunchPlan

mod bpf;
#[cfg(test)]
mod kernel_tests;
mod lists;
mod rules;
mod socket;
#[cfg(test)]
mod tests;

use serde::Serialize;

pub use bpf::{BpfProgram, compiled};
pub use rules::{table, table_with, write_opens, write_opens_with};

/// Errors of building or compiling the filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("unknown syscall name {name:?} in {field}")]
    UnknownSyscall { name: String, field: &'static str },
    #[error("compiling the seccomp filter, syscall {nr}: {why}")]
    Compile { nr: i64, why: &'static str },
}

/// What the filter does with a syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    Allow,
    /// Stop the syscall until guardd, holding the filter's listener, has seen it (and answers
    /// that the kernel go on with it: the other layers still decide).
    Notify,
    /// Fail the syscall with this errno.
    Errno(u32),
    KillProcess,
}

impl Action {
    /// The kernel's precedence when several stacked filters answer: the most restrictive wins.
    fn severity(self) -> u8 {
        match self {
            Action::Allow => 0,
            Action::Notify => 1,
            Action::Errno(_) => 2,
            Action::KillProcess => 3,
        }
    }
}

/// A comparison of one syscall argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Eq,
    Ne,
    /// `arg & mask == value`.
    MaskedEq(u64),
}

/// One condition on a syscall argument; `dword` compares only the low 32 bits (C `int`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cond {
    pub arg: u8,
    pub dword: bool,
    pub op: Op,
    pub value: u64,
}

/// The answer of the deny rules: the call fails as if the kernel forbade it.
const EPERM: Action = Action::Errno(libc::EPERM as u32);

/// Argument `arg`, as a C `int`, equals `value`.
fn int_eq(arg: u8, value: i32) -> Cond {
    Cond {
        arg,
        dword: true,
        op: Op::Eq,
        value: value as u64,
    }
}

/// Argument `arg`, as a C `int`, differs from `value`.
fn int_ne(arg: u8, value: i32) -> Cond {
    Cond {
        arg,
        dword: true,
        op: Op::Ne,
        value: value as u64,
    }
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub name: &'static str,
    pub nr: i64,
    pub action: Action,
    pub when: Vec<Cond>,
}

/// Deny-list (default allow) or strict (default kill) mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    DenyList,
    Strict,
}

impl Mode {
    /// The name the audit row shows (`Applied::seccomp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::DenyList => "deny-list",
            Mode::Strict => "strict",
        }
    }
}

/// The whole filter as data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeccompTable {
    pub mode: Mode,
    /// What happens to a syscall no `Allow` rule matches (and no deny rule).
    pub default: Action,
    pub rules: Vec<Rule>,
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
}
