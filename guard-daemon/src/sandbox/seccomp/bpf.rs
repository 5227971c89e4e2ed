//! The table compiled to the one classic BPF program the child installs.
//!
//! Compiled here, not with a general filter compiler, because of what a filter costs at each
//! launch: seccomp(2) checks, converts and JIT-compiles every instruction of every program it
//! is given (about half a microsecond an instruction, plus twenty-odd per program, on the
//! machines we measured). seccompiler's encoding of the deny list (five instructions a syscall,
//! eight a condition, one program per action) came to 466 instructions in three programs and
//! 280 µs of every launch; this one is a single program of under 320 (under 200 before the
//! metadata syscalls and terminal ioctls joined the deny list).
//!
//! The program: the arch check, then (x86_64) every x32 number killed, then a binary search on
//! the syscall number (`jge`) down to runs of a few blocks, one per syscall that has rules:
//!
//! ```text
//!     jeq nr, 0, <next block>
//!     <each deny rule more severe than the block's base, most severe first:
//!      its conditions, each jumping to the next rule when false; ret its action>
//!     ret <base>
//! ```
//!
//! each run ending in `ret <default>`. The accumulator holds the syscall number through the
//! dispatch, and a block always returns, so the argument loads inside a block never disturb it.
//! A syscall without rules reaches the default without reading an argument, which lets the
//! kernel cache the answer and never run the filter for it again.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use super::{Action, Cond, Op, Rule, SeccompError, SeccompTable};

/// One classic BPF instruction, with the kernel's `struct sock_filter` layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// A program as seccomp(2) takes it (through a `sock_fprog`).
pub type BpfProgram = Vec<Insn>;

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

/// The audit arch of the syscalls the program answers; any other is killed (i386 through
/// `int 0x80` on x86_64, say).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;

/// x32 syscalls carry the x86_64 audit arch and `nr | 0x4000_0000`, so they would match no rule
/// keyed on plain numbers: a denied syscall would be reachable through its x32 twin on kernels
/// built with CONFIG_X86_X32_ABI. They are killed.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A jump target not yet known: the next rule of the block (patched in `block`).
const TO_NEXT_RULE: u8 = u8::MAX;

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

fn ret(action: Action) -> Insn {
    stmt(
        RET_K,
        match action {
            Action::Allow => libc::SECCOMP_RET_ALLOW,
            Action::Notify => libc::SECCOMP_RET_USER_NOTIF,
            Action::Errno(e) => libc::SECCOMP_RET_ERRNO | (e & libc::SECCOMP_RET_DATA),
            Action::KillProcess => libc::SECCOMP_RET_KILL_PROCESS,
        },
    )
}

/// Distinct tables kept compiled; past this, the cache starts over (a host's policies give a
/// handful).
const CACHED_TABLES: usize = 256;

/// The programs of `table`, compiled once per distinct table: a table is a pure function of a
/// few fields of the plan, so a host's calls share a few. Keyed by the whole table, so a hit is
/// exactly what compiling would give.
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
    /// The programs to install, in order: one, answering as [`SeccompTable::verdict`] does.
    pub fn compile(&self) -> Result<Vec<BpfProgram>, SeccompError> {
        let mut by_nr: BTreeMap<i64, Vec<&Rule>> = BTreeMap::new();
        for r in &self.rules {
            by_nr.entry(r.nr).or_default().push(r);
        }
        let mut program = vec![
            stmt(LD_ABS, ARCH),
            jump(JEQ_K, AUDIT_ARCH, 1, 0),
            ret(Action::KillProcess),
            stmt(LD_ABS, NR),
        ];
        #[cfg(target_arch = "x86_64")]
        program.extend([jump(JGE_K, X32_SYSCALL_BIT, 0, 1), ret(Action::KillProcess)]);
        let mut blocks = Vec::new();
        for (&nr, rules) in &by_nr {
            let body = self.block(nr, rules)?;
            if body == [ret(self.default)] {
                continue; // what falling through gives anyway
            }
            let nr_k = u32::try_from(nr).map_err(|_| SeccompError::Compile {
                nr,
                why: "not a syscall number",
            })?;
            blocks.push((nr_k, body));
        }
        dispatch(&blocks, ret(self.default), &mut program)?;
        Ok(vec![program])
    }

    /// The code after syscall `nr`'s dispatch: its deny rules that can change the answer, most
    /// severe first (in table order among equals, as `verdict` keeps the first), then its base.
    fn block(&self, nr: i64, rules: &[&Rule]) -> Result<Vec<Insn>, SeccompError> {
        let mut base = self.default;
        for r in rules.iter().filter(|r| r.action == Action::Allow) {
            if !r.when.is_empty() {
                // The base would depend on the arguments; no table makes such a rule.
                return Err(SeccompError::Compile {
                    nr,
                    why: "an allow rule with conditions",
                });
            }
            base = Action::Allow;
        }
        let mut denies: Vec<&Rule> = rules
            .iter()
            .copied()
            .filter(|r| r.action.severity() > base.severity())
            .collect();
        denies.sort_by_key(|r| std::cmp::Reverse(r.action.severity()));
        let mut out = Vec::new();
        // The argument word the accumulator holds where the next rule starts, when every way
        // there leaves the same one: rules on one argument in a row (the ioctl requests) load
        // it once.
        let mut holds = None;
        let mut i = 0;
        while i < denies.len() {
            let run = pair_run(&denies[i..]);
            if run > 1 {
                out.extend(
                    pair_block(&denies[i..i + run], holds)
                        .map_err(|why| SeccompError::Compile { nr, why })?,
                );
                holds = None;
                i += run;
                continue;
            }
            let r = denies[i];
            i += 1;
            let mut rule = Vec::new();
            for (i, c) in r.when.iter().enumerate() {
                let known = if i == 0 { holds } else { None };
                condition(c, known, &mut rule).map_err(|why| SeccompError::Compile { nr, why })?;
            }
            holds = match r.when.as_slice() {
                [c] if c.dword && matches!(c.op, Op::Eq | Op::Ne) => {
                    word_offsets(c.arg).ok().map(|w| w.0)
                }
                _ => None,
            };
            rule.push(ret(r.action));
            // A false condition jumps past this rule's `ret`, to the next rule.
            patch_next(&mut rule).map_err(|why| SeccompError::Compile { nr, why })?;
            out.extend(rule);
            if r.when.is_empty() {
                return Ok(out); // always taken: nothing after it runs
            }
        }
        out.push(ret(base));
        Ok(out)
    }
}

/// Points every [`TO_NEXT_RULE`] jump of `rule` past its last instruction.
fn patch_next(rule: &mut [Insn]) -> Result<(), &'static str> {
    let len = rule.len();
    for (i, insn) in rule.iter_mut().enumerate() {
        for target in [&mut insn.jt, &mut insn.jf] {
            if *target == TO_NEXT_RULE {
                *target = u8::try_from(len - i - 1)
                    .map_err(|_| "a rule of more than 255 instructions")?;
            }
        }
    }
    Ok(())
}

/// Whether `c` is a 32-bit equality: one load and one compare.
fn simple_eq(c: &Cond) -> bool {
    c.dword && c.op == Op::Eq
}

/// How many rules from the first of `rules` are a run of pairs: two 32-bit equalities each, the
/// first the same for all (a level, then an option name: setsockopt's rules).
fn pair_run(rules: &[&Rule]) -> usize {
    let first = match rules.first().map(|r| r.when.as_slice()) {
        Some([a, b]) if simple_eq(a) && simple_eq(b) => *a,
        _ => return 0,
    };
    rules
        .iter()
        .take_while(|r| matches!(r.when.as_slice(), [a, b] if *a == first && simple_eq(b)))
        .count()
}

/// The code of a run of pairs (see [`pair_run`]): their shared first condition once, then each
/// one's second and its `ret`; a first condition that does not hold skips the whole run. Two
/// instructions a rule where each on its own took five.
fn pair_block(rules: &[&Rule], holds: Option<u32>) -> Result<Vec<Insn>, &'static str> {
    let mut body = Vec::new();
    let mut loaded = None;
    for r in rules {
        let c = &r.when[1];
        let (lo_at, _) = word_offsets(c.arg)?;
        if loaded != Some(lo_at) {
            body.push(stmt(LD_ABS, lo_at));
            loaded = Some(lo_at);
        }
        body.extend([jump(JEQ_K, c.value as u32, 0, 1), ret(r.action)]);
    }
    let mut out = Vec::new();
    condition(&rules[0].when[0], holds, &mut out)?;
    // The first condition's false jump goes past the body.
    let skip = u8::try_from(body.len()).map_err(|_| "a run of more than 255 instructions")?;
    for insn in &mut out {
        if insn.jf == TO_NEXT_RULE {
            insn.jf = skip;
        }
        if insn.jt == TO_NEXT_RULE {
            insn.jt = skip;
        }
    }
    out.extend(body);
    Ok(out)
}

/// Blocks this many or fewer are tried one after the other; more are split in two.
const LINEAR_BLOCKS: usize = 6;

/// Appends the dispatch to `blocks` (in number order, each ending in a `ret`): a binary search
/// on the syscall number, `default_ret` for a number without a block. The kernel runs the filter
/// for every syscall number at install, to cache the ones it always allows, so the length of
/// the path to each answer is paid at every launch: with a chain of one compare per block the
/// install took 150 µs here, with the search 100 µs (timed inside the child).
fn dispatch(
    blocks: &[(u32, Vec<Insn>)],
    default_ret: Insn,
    out: &mut Vec<Insn>,
) -> Result<(), SeccompError> {
    if blocks.len() <= LINEAR_BLOCKS {
        for (nr, body) in blocks {
            let skip = u8::try_from(body.len()).map_err(|_| SeccompError::Compile {
                nr: i64::from(*nr),
                why: "its rules take more than 255 instructions",
            })?;
            out.push(jump(JEQ_K, *nr, 0, skip));
            out.extend_from_slice(body);
        }
        out.push(default_ret);
        return Ok(());
    }
    let (low, high) = blocks.split_at(blocks.len() / 2);
    let mut below = Vec::new();
    dispatch(low, default_ret, &mut below)?;
    let split = high[0].0;
    match u8::try_from(below.len()) {
        Ok(skip) => out.push(jump(JGE_K, split, skip, 0)),
        // Past a conditional jump's reach: over the lower half with an unconditional one.
        Err(_) => {
            let far = u32::try_from(below.len()).map_err(|_| SeccompError::Compile {
                nr: i64::from(split),
                why: "a program too long to jump over",
            })?;
            out.extend([jump(JGE_K, split, 0, 1), stmt(JA, far)]);
        }
    }
    out.extend(below);
    dispatch(high, default_ret, out)
}

/// Appends the code of one condition: it falls through when the condition holds and jumps to
/// [`TO_NEXT_RULE`] when it does not. Arguments are 64 bits, read as two 32-bit words. `known`:
/// the word the accumulator already holds, whose load a 32-bit compare then leaves out.
fn condition(c: &Cond, known: Option<u32>, out: &mut Vec<Insn>) -> Result<(), &'static str> {
    let (lo_at, hi_at) = word_offsets(c.arg)?;
    let (v_lo, v_hi) = (c.value as u32, (c.value >> 32) as u32);
    if c.dword && v_hi != 0 {
        return Err("a 32-bit condition on a value wider than 32 bits");
    }
    let load_lo = |out: &mut Vec<Insn>| {
        if !(c.dword && known == Some(lo_at)) {
            out.push(stmt(LD_ABS, lo_at));
        }
    };
    match c.op {
        Op::Eq => {
            load_lo(out);
            out.push(jump(JEQ_K, v_lo, 0, TO_NEXT_RULE));
            if !c.dword {
                out.extend([stmt(LD_ABS, hi_at), jump(JEQ_K, v_hi, 0, TO_NEXT_RULE)]);
            }
        }
        Op::Ne if c.dword => {
            load_lo(out);
            out.push(jump(JEQ_K, v_lo, TO_NEXT_RULE, 0));
        }
        Op::Ne => {
            // Holds when either word differs: a low word that differs skips the high one.
            out.extend([
                stmt(LD_ABS, lo_at),
                jump(JEQ_K, v_lo, 0, 2),
                stmt(LD_ABS, hi_at),
                jump(JEQ_K, v_hi, TO_NEXT_RULE, 0),
            ]);
        }
        Op::MaskedEq(mask) => {
            let (m_lo, m_hi) = (mask as u32, (mask >> 32) as u32);
            // A word the mask leaves out always matches: no code for it.
            if m_lo != 0 {
                out.extend([
                    stmt(LD_ABS, lo_at),
                    stmt(AND_K, m_lo),
                    jump(JEQ_K, v_lo & m_lo, 0, TO_NEXT_RULE),
                ]);
            }
            if !c.dword && m_hi != 0 {
                out.extend([
                    stmt(LD_ABS, hi_at),
                    stmt(AND_K, m_hi),
                    jump(JEQ_K, v_hi & m_hi, 0, TO_NEXT_RULE),
                ]);
            }
        }
    }
    Ok(())
}

/// Where the low and high 32-bit words of argument `arg` are in `struct seccomp_data`.
fn word_offsets(arg: u8) -> Result<(u32, u32), &'static str> {
    if arg > 5 {
        return Err("an argument index above 5");
    }
    let at = ARGS + 8 * u32::from(arg);
    if cfg!(target_endian = "little") {
        Ok((at, at + 4))
    } else {
        Ok((at + 4, at))
    }
}
