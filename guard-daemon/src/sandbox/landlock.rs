//! The landlock rule set of a confined call, as data, and its enforcement.
//!
//! [`rules`] maps a [`LaunchPlan`] to [`LandlockRules`]: (path, access) pairs and the TCP ports
//! the call may connect to, on top of [`BASE`], what any dynamically linked program needs to start
//! and run. It only looks at the file system to tell files from directories and to skip what does
//! not exist ([`rules_with`] takes that probe as a parameter, so unit tests use a fake one).
//!
//! Enforcement (`ruleset`) is split in two because the daemon is multithreaded: [`prepare`] runs before fork
//! and does everything that allocates (opening each path, creating the kernel ruleset);
//! [`Prepared::restrict_self`] runs in the forked child and makes raw syscalls only.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use ::landlock::{ABI, Access as _, AccessFs, BitFlags};

use super::resolve;
use crate::call::plan::LaunchPlan;

/// Errors of building or enforcing the rule set.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error(
        "landlock is not available (errno {}); refusing to launch without the explicit opt-out",
        -abi
    )]
    Unavailable { abi: i32 },
    #[error("tool {tool}: landlock ABI {abi} of this kernel has no {right} right: {why}")]
    Lacks {
        tool: String,
        abi: i32,
        right: &'static str,
        why: String,
    },
    #[error("landlock rule for {path}: {source}")]
    Path {
        path: PathBuf,
        source: resolve::ResolveError,
    },
    #[error("landlock ruleset: {0}")]
    Ruleset(#[from] ::landlock::RulesetError),
    #[error("{path} no longer lies beneath {root} (re-pointed since the decision?): {source}")]
    Beneath {
        path: PathBuf,
        root: PathBuf,
        source: resolve::ResolveError,
    },
}

/// What a path is, as far as the rules care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// One file-system rule: `access` on `path` and, for a directory, everything beneath it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsRule {
    pub path: PathBuf,
    pub access: BitFlags<AccessFs>,
    /// How `path` is opened.
    pub origin: Origin,
}

/// Where a rule's path comes from, which says how it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The base set ([`BASE`], [`LOADERS`]): the host's own system paths, as they resolve.
    Host,
    /// A path of the policy: following root's symlinks only ([`resolve::open`]).
    Policy,
    /// A path argument: beneath its `within` root, this one.
    Beneath(PathBuf),
}

/// The rule set as data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LandlockRules {
    /// The tool the rules are for, named when a kernel lacks a right they need.
    pub tool: String,
    /// One rule per path, sorted by path.
    pub fs: Vec<FsRule>,
    /// TCP ports the call may connect to (sorted, deduplicated).
    pub connect_ports: Vec<u16>,
    /// Read and exec paths that do not exist, so have no rule.
    pub skipped: Vec<PathBuf>,
    /// Write targets that do not exist yet: (target, its parent directory, which was granted
    /// [`CREATE_IN`]).
    pub widened: Vec<(PathBuf, PathBuf)>,
    /// The kernel programs judge the call's connects, binds and execs ([`Self::judged_by_kernel`]).
    pub kernel_judges: bool,
}

/// The rights that change what lies at or beneath a path (what a read-only mount refuses).
/// Not Truncate, which read rules carry (`end_walks_at_read_rules`; seccomp refuses the
/// truncations they would allow).
fn changes() -> BitFlags<AccessFs> {
    AccessFs::WriteFile
        | AccessFs::RemoveFile
        | AccessFs::RemoveDir
        | AccessFs::MakeReg
        | AccessFs::MakeDir
        | AccessFs::MakeSym
        | AccessFs::MakeFifo
        | AccessFs::MakeSock
        | AccessFs::MakeChar
        | AccessFs::MakeBlock
        | AccessFs::Refer
}

impl LandlockRules {
    /// The paths some rule lets the call change (write, create, remove): the call's mount
    /// view leaves them writable, and everything else read-only (see `child::mounts`).
    pub fn writable(&self) -> Vec<&Path> {
        self.fs
            .iter()
            .filter(|r| r.access.intersects(changes()))
            .map(|r| r.path.as_path())
            .collect()
    }

    /// The rules of a call the kernel programs watch. They judge every connect and bind (cgroup
    /// `sock_addr`) and every exec (by file identity), and report each one they refuse, where
    /// landlock refuses silently and before them: a call that tried a port or a program it was
    /// not approved for would exit as if nothing happened, its receipt `conformed`. So landlock
    /// handles no TCP right here, and Execute goes with every rule that grants reading: what a
    /// call may read it may try to run, and the exec check kills the attempt (reported) unless
    /// the file is approved. What may not be read stays unexecutable, and every other right is
    /// landlock's as before.
    pub fn judged_by_kernel(mut self) -> Self {
        self.kernel_judges = true;
        self.connect_ports.clear();
        for rule in &mut self.fs {
            if rule.access.contains(AccessFs::ReadFile) {
                rule.access |= AccessFs::Execute;
            }
        }
        self
    }
}

/// Read a file.
pub const READ_FILE: BitFlags<AccessFs> = ::landlock::make_bitflags!(AccessFs::{ReadFile});
/// Read a tree: its files and directory listings.
pub const READ_TREE: BitFlags<AccessFs> =
    ::landlock::make_bitflags!(AccessFs::{ReadFile | ReadDir});
/// Execute (and read, which scripts and the loader need).
pub const EXEC_FILE: BitFlags<AccessFs> =
    ::landlock::make_bitflags!(AccessFs::{Execute | ReadFile});
/// Write a file: also read and truncate it.
pub const WRITE_FILE: BitFlags<AccessFs> =
    ::landlock::make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate});
/// Write a tree: read, write, create and remove within it, and move and link files from one of
/// its directories to another (Refer: `mv a sub/`, `git mv`; without it they fail with EXDEV).
/// Landlock refuses a move or link whose destination would grant the file more than its source
/// did, so Refer takes nothing out of a read-only tree and nothing from one write tree into a
/// place with rights the file lacked. Not granted even here: device nodes (MakeChar,
/// MakeBlock), device ioctls.
pub const WRITE_TREE: BitFlags<AccessFs> = ::landlock::make_bitflags!(AccessFs::{
    ReadFile | ReadDir | WriteFile | Truncate | RemoveFile | RemoveDir | MakeReg | MakeDir
        | MakeSym | MakeFifo | MakeSock | Refer
});
/// Granted on the parent of a write target that does not exist yet. Landlock rules attach to
/// existing inodes, so there is no rule for "this one new name": creating a file needs MakeReg
/// on its directory and opening it for writing needs WriteFile there too. The price is that the
/// call may also write (not truncate, remove or list) the other files beneath that directory and
/// create entries anywhere beneath it: a landlock rule holds for the whole subtree, its
/// subdirectories included. `LandlockRules::widened` records it; only the direct parent is ever
/// given the rule, and only the open observer (`--trace-syscalls`) sees writes it lets through.
pub const CREATE_IN: BitFlags<AccessFs> =
    ::landlock::make_bitflags!(AccessFs::{MakeReg | MakeDir | WriteFile});

/// The base set: what a dynamically linked program needs to load and run, and nothing that names
/// a user's data. Libraries are read-only: the dynamic loader maps them, and landlock's Execute
/// governs execve (and the kernel's open of an ELF interpreter) only, so a library tree with
/// Execute would let a call exec any program in it. Execute goes to the loaders themselves
/// ([`LOADERS`]). Loader configuration, locales and time zones are read-only; `/dev/null`
/// read+write; `/dev/urandom` read. `/dev/tty` is not included. `/proc/self` is not here: see
/// [`Prepared::restrict_self`].
pub const BASE: &[(&str, BitFlags<AccessFs>)] = &[
    ("/usr/lib", READ_TREE),
    ("/lib", READ_TREE),
    ("/lib64", READ_TREE),
    ("/usr/lib64", READ_TREE),
    ("/etc/ld.so.cache", READ_FILE),
    ("/etc/ld.so.conf", READ_FILE),
    ("/etc/ld.so.conf.d", READ_TREE),
    ("/etc/localtime", READ_FILE),
    ("/usr/share/locale", READ_TREE),
    ("/usr/share/zoneinfo", READ_TREE),
    ("/dev/null", WRITE_FILE),
    ("/dev/urandom", READ_FILE),
];

/// The ELF interpreters (`PT_INTERP`) of the architectures and C libraries guard runs on: the
/// kernel opens a dynamically linked program's loader for execution, so it needs Execute. Only
/// the ones that exist get a rule. Executing a loader directly (`ld.so PROGRAM`) is still
/// refused: the kernel's exec check approves programs by identity, and a loader is none of a
/// call's programs.
pub const LOADERS: &[&str] = &[
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/ld-linux-armhf.so.3",
    "/lib/ld-linux-riscv64-lp64d.so.1",
    "/lib/ld-linux.so.2",
    "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-musl-aarch64.so.1",
];

/// The access rights that only make sense on a directory.
fn dir_only() -> BitFlags<AccessFs> {
    AccessFs::from_all(ABI::V5)
        & !(AccessFs::ReadFile
            | AccessFs::WriteFile
            | AccessFs::Execute
            | AccessFs::Truncate
            | AccessFs::IoctlDev)
}

/// The rules for `plan`, probing the real file system.
pub fn rules(plan: &LaunchPlan) -> LandlockRules {
    rules_with(plan, |p| {
        let meta = std::fs::metadata(p).ok()?;
        Some(if meta.is_dir() { Kind::Dir } else { Kind::File })
    })
}

/// The rules for `plan`; `probe` says what a path is, `None` when it does not exist.
pub fn rules_with(plan: &LaunchPlan, probe: impl Fn(&Path) -> Option<Kind>) -> LandlockRules {
    let mut fs: BTreeMap<PathBuf, BitFlags<AccessFs>> = BTreeMap::new();
    let mut out = LandlockRules {
        tool: plan.tool.clone(),
        ..LandlockRules::default()
    };
    let mut grant =
        |path: &Path, access: BitFlags<AccessFs>, skipped: &mut Vec<PathBuf>| match probe(path) {
            Some(kind) => {
                let access = if kind == Kind::File {
                    access & !dir_only()
                } else {
                    access
                };
                *fs.entry(path.to_owned()).or_default() |= access;
                true
            }
            None => {
                skipped.push(path.to_owned());
                false
            }
        };
    let mut base_missing = Vec::new();
    for &(path, access) in BASE {
        // A missing base path (e.g. /lib64 on some distributions) is expected: not reported.
        grant(Path::new(path), access, &mut base_missing);
    }
    for &loader in LOADERS {
        grant(Path::new(loader), EXEC_FILE, &mut base_missing);
    }
    if let Some(program) = plan.argv.first() {
        grant(Path::new(program), EXEC_FILE, &mut out.skipped);
    }
    for p in &plan.effects.exec {
        grant(p, EXEC_FILE, &mut out.skipped);
    }
    for p in &plan.effects.read {
        grant(p, READ_TREE, &mut out.skipped);
    }
    for p in &plan.effects.write {
        let mut missing = Vec::new();
        if grant(p, WRITE_TREE, &mut missing) {
            continue;
        }
        match p.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) if probe(dir) == Some(Kind::Dir) => {
                grant(dir, CREATE_IN, &mut missing);
                out.widened.push((p.clone(), dir.to_owned()));
            }
            _ => out.skipped.push(p.clone()),
        }
    }
    // A widened directory's CREATE_IN leaves Truncate out, and a read rule above or below it
    // spelled another way (a symlink) would bring it back: a plan that widens gets none.
    if out.widened.is_empty()
        && !TRUNCATE_UNCHECKED
            .iter()
            .any(|name| plan.confinement.allows_syscall(name))
    {
        end_walks_at_read_rules(&mut fs);
    }
    out.fs = fs
        .into_iter()
        .map(|(path, access)| FsRule {
            origin: Origin::of(plan, &path),
            path,
            access,
        })
        .collect();
    out.connect_ports = plan.effects.connect.iter().map(|e| e.port).collect();
    out.connect_ports.sort_unstable();
    out.connect_ports.dedup();
    out
}

impl Origin {
    /// Where `path`, a rule of `plan`'s, comes from.
    fn of(plan: &LaunchPlan, path: &Path) -> Self {
        let root = plan
            .effects
            .beneath
            .iter()
            .find(|(p, root)| p == path || (path.starts_with(root) && p.starts_with(path)));
        if let Some((_, root)) = root {
            return Origin::Beneath(root.clone());
        }
        let host = BASE.iter().any(|&(p, _)| Path::new(p) == path)
            || LOADERS.iter().any(|&p| Path::new(p) == path);
        if host { Origin::Host } else { Origin::Policy }
    }
}

/// The syscall that truncates a file by name, which seccomp denies unless a plan allows it.
pub const TRUNCATE_BY_NAME: &str = "truncate";

/// The syscall whose flags seccomp cannot read (they lie in memory): it could open a file for
/// reading with `O_TRUNC`, which Linux honours, so seccomp answers it ENOSYS (programs fall
/// back to `openat`) unless a plan allows it.
pub const OPEN_HOW: &str = "openat2";

/// The syscalls through which a file the call may only read could be truncated if its rule
/// carried Truncate: a plan that allows one of them gets read rules without
/// ([`end_walks_at_read_rules`]).
pub const TRUNCATE_UNCHECKED: &[&str] = &[TRUNCATE_BY_NAME, OPEN_HOW];

/// Adds Truncate to every rule that grants ReadFile (for a plan that widens no directory). Every open asks landlock for Truncate too (whether the file may be
/// truncated through it later); when no rule on the way grants it, landlock walks from the file
/// up to the root, each open, and with it the walk ends at the rule that grants the open: an
/// open inside a call took 1.67× a bare one here, and 1.37× with this. Truncating still takes
/// a descriptor opened for writing (WriteFile, whose rules already carry Truncate), the name
/// ([`TRUNCATE_BY_NAME`]) or an open for reading with `O_TRUNC`, which seccomp refuses (and
/// [`OPEN_HOW`], where it cannot see the flags).
fn end_walks_at_read_rules(fs: &mut BTreeMap<PathBuf, BitFlags<AccessFs>>) {
    for access in fs.values_mut() {
        if access.contains(AccessFs::ReadFile) {
            *access |= AccessFs::Truncate;
        }
    }
}

impl LandlockRules {
    /// The access granted on exactly `path`, if it has a rule.
    pub fn access(&self, path: &Path) -> Option<BitFlags<AccessFs>> {
        self.fs.iter().find(|r| r.path == path).map(|r| r.access)
    }
}

pub mod abi;
mod open;
mod ruleset;
#[cfg(test)]
mod tests;

pub use open::Writable;

/// A set of landlock's file-system rights.
pub type Access = BitFlags<AccessFs>;
pub use ruleset::{LandlockStatus, Prepared, kernel_abi, prepare, prepare_for};
