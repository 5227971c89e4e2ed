//! Compilation of the table to the BPF programs the child installs.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{Action, Op, SeccompError, SeccompTable};

impl From<Action> for SeccompAction {
    fn from(a: Action) -> Self {
        match a {
            Action::Allow => SeccompAction::Allow,
            Action::Errno(e) => SeccompAction::Errno(e),
            Action::KillProcess => SeccompAction::KillProcess,
        }
    }
}

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

/// Distinct tables kept compiled; past this, the cache starts over (a host's policies give a
/// handful).
const CACHED_TABLES: usize = 256;

/// The programs of `table`, compiled once per distinct table: a table is a pure function of a
/// few fields of the plan, so a host's calls share a few, and compiling costs every launch tens
/// of microseconds. Keyed by the whole table, so a hit is exactly what compiling would give.
pub fn compiled(table: &SeccompTable) -> Result<Arc<Vec<BpfProgram>>, SeccompError> {
    static CACHE: Mutex<Option<HashMap<SeccompTable, Arc<Vec<BpfProgram>>>>> = Mutex::new(None);
    let lock = || {
        CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some(programs) = lock().get_or_insert_default().get(table) {
        return Ok(programs.clone());
    }
    // Compiled outside the lock: launches of other tables do not wait for this one.
    let programs = Arc::new(table.compile()?);
    let mut cache = lock();
    let cache = cache.get_or_insert_default();
    if cache.len() >= CACHED_TABLES {
        cache.clear();
    }
    cache.insert(table.clone(), programs.clone());
    Ok(programs)
}

impl SeccompTable {
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
