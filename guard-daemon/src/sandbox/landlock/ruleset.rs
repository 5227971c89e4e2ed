//! Landlock's enforcement, split in two because the daemon is multithreaded: [`prepare`] runs
//! before fork and does everything that allocates (opening each path, creating the kernel
//! ruleset); [`Prepared::restrict_self`] runs in the forked child and makes raw syscalls only.

use std::{
    ffi::CStr,
    os::fd::{AsRawFd as _, OwnedFd},
};

use ::landlock::{
    ABI, Access as _, AccessFs, AccessNet, CompatLevel, Compatible as _, NetPort, PathBeneath,
    Ruleset, RulesetAttr as _, RulesetCreatedAttr as _, Scope,
};
use nix::errno::Errno;
use serde::Serialize;

use super::{
    LandlockError, LandlockRules, READ_FILE, READ_TREE,
    abi::{self, Admit},
    changes,
    open::{Writable, open_rule},
};

/// What the child grants itself in its own `/proc` when the call shares the host's network
/// namespace: entry by entry, read, its own status, memory map, limits, command line,
/// environment, cgroup and descriptors (`self/fd`, `self/fdinfo`: listed), and what `free`,
/// `uptime` and a runtime's CPU count read (`meminfo`, `stat`, `uptime`, `loadavg`, `cpuinfo`).
/// Not the directory as a whole: beneath it lie `net/` and `self/net` (every socket, route and
/// neighbour of the host's network namespace) and `mountinfo` (the host's mount table). A call
/// with a network namespace of its own reads the whole of its `/proc`: its processes only (its
/// pid namespace's), its own network. With Truncate, as read rules have it
/// ([`end_walks_at_read_rules`]).
const PROC_SELF: &[(&CStr, bool)] = &[
    (c"self/status", false),
    (c"self/stat", false),
    (c"self/statm", false),
    (c"self/maps", false),
    (c"self/smaps", false),
    (c"self/limits", false),
    (c"self/cmdline", false),
    (c"self/comm", false),
    (c"self/environ", false),
    (c"self/auxv", false),
    (c"self/cgroup", false),
    (c"self/io", false),
    (c"self/fd", true),
    (c"self/fdinfo", true),
    (c"meminfo", false),
    (c"stat", false),
    (c"uptime", false),
    (c"loadavg", false),
    (c"cpuinfo", false),
];

/// The running kernel's landlock ABI version, or a negative errno (-ENOSYS, -EOPNOTSUPP) when
/// landlock is not available.
pub fn kernel_abi() -> i32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attr and size 0 only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if v < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS)
    } else {
        v as i32
    }
}

/// How landlock is applied to a call, for the audit row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockStatus {
    /// File system, TCP connect/bind and scopes (abstract unix sockets, signals): ABI ≥ 6.
    Full,
    /// File system and TCP only: ABI 4 or 5, no scopes.
    NoScopes,
    /// File system only, with the rights of ABI 1 to 3 ([`abi::missing`] says which are not).
    FileSystem,
    /// Not applied: the kernel is too old and the caller opted out.
    Disabled,
    /// Not applied: the call runs in shadow (`enforce = "shadow"`).
    Shadow,
}

/// A ruleset ready to enforce, created before fork.
#[derive(Debug)]
pub struct Prepared {
    /// The ruleset; `None` when landlock is disabled.
    fd: Option<OwnedFd>,
    /// The file-system rights the ruleset handles: the ones a rule added in the child may
    /// carry (the kernel refuses a rule with a right its ruleset does not handle).
    handled: u64,
    pub abi: i32,
    pub status: LandlockStatus,
    /// What the call may change, as the rules found it: writable in its mount view.
    pub writable: Vec<Writable>,
    /// The identity (device, inode) of each rule that grants Execute: what the call's exec
    /// judge holds its execs to (`writes`).
    pub executable: Vec<(u64, u64)>,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

/// The file-system rights guard handles on a kernel of landlock `abi` (1 or later): those of
/// ABI 5 it has. Pinned to the ABI versions this code was tested with (the crate's advice),
/// not to whatever the kernel offers: a newer right handled here but not granted would break
/// tools in ways no test has seen.
fn handled(abi: i32) -> super::Access {
    let kernel = match abi {
        ..=1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        _ => ABI::V5,
    };
    AccessFs::from_all(ABI::V5) & AccessFs::from_all(kernel)
}

/// Creates the kernel ruleset for `rules`, with the rights the kernel has; refuses a launch
/// that needs one it lacks, or any launch on a kernel without landlock, unless `allow_without`
/// ([`abi::admit`]; then a kernel without landlock gives a disabled `Prepared`).
pub fn prepare(rules: &LandlockRules, allow_without: bool) -> Result<Prepared, LandlockError> {
    prepare_for(kernel_abi(), rules, allow_without)
}

/// As [`prepare`], for a kernel of landlock ABI `abi` at most: with the rights of the older of
/// `abi` and the running kernel's. A ruleset of an older ABI's rights is enforced by a newer
/// kernel as the older one would (a right not handled is not restricted; REFER not handled
/// refuses every move into another directory, as ABI 1 does), which lets the end-to-end tests
/// check ABI 1 to 3 on any kernel (`tests/suite/landlock_abi.rs`).
pub fn prepare_for(
    abi: i32,
    rules: &LandlockRules,
    allow_without: bool,
) -> Result<Prepared, LandlockError> {
    let abi = abi.min(kernel_abi());
    if abi::admit(abi, rules, allow_without)? == Admit::Without {
        let mut writable = Vec::new();
        for rule in rules.fs.iter().filter(|r| r.access.intersects(changes())) {
            writable.push(Writable::of(&open_rule(rule)?, rule)?);
        }
        return Ok(Prepared {
            fd: None,
            handled: 0,
            abi,
            status: LandlockStatus::Disabled,
            writable,
            executable: Vec::new(),
        });
    }
    let handled = handled(abi);
    // Only the rights the kernel has are handled, and each rule is cut to them below;
    // `abi::admit` has refused what nothing else would cover.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(handled)?;
    if !rules.kernel_judges {
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(ABI::V6))?
        .create()?
        // The child sets no_new_privs itself, before restricting.
        .no_new_privs(false);
    let mut writable = Vec::new();
    let mut executable = Vec::new();
    for rule in &rules.fs {
        let fd = open_rule(rule)?;
        if rule.access.intersects(changes()) {
            writable.push(Writable::of(&fd, rule)?);
        }
        if rule.access.contains(AccessFs::Execute)
            && let Ok(st) = nix::sys::stat::fstat(&fd)
        {
            executable.push((st.st_dev, st.st_ino));
        }
        // Within what the ruleset handles: the crate refuses a rule with a right it does not,
        // even best effort (Truncate on ABI 1 and 2).
        created = created.add_rule(PathBeneath::new(fd, rule.access & handled))?;
    }
    for &port in &rules.connect_ports {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    let fd: Option<OwnedFd> = created.into();
    let status = if abi >= abi::SCOPES {
        LandlockStatus::Full
    } else if abi >= abi::TCP {
        LandlockStatus::NoScopes
    } else {
        LandlockStatus::FileSystem
    };
    Ok(Prepared {
        fd,
        handled: handled.bits(),
        abi,
        status,
        writable,
        executable,
    })
}

impl Prepared {
    /// The same rules, not applied: for a call in shadow, whose writes are observed instead.
    /// What it may change is still known, for the write-opens listener and its protected names.
    pub fn off_for_shadow(self) -> Prepared {
        Prepared {
            fd: None,
            status: LandlockStatus::Shadow,
            ..self
        }
    }

    /// In the forked child, after no_new_privs: grants read on entries of the child's own
    /// `/proc` ([`PROC_SELF`], or the `whole` of it), `shm` on its own `/dev/shm`, and enforces
    /// the ruleset on the calling thread. Async-signal-safe: raw syscalls only.
    ///
    /// Why `/proc` is added here: landlock rules attach to inodes, and the call's `/proc` is
    /// mounted in the child, for its pid namespace (`child::mounts`); `self` in it is a symlink
    /// resolved at open time, which in the child names the child's own directory, the same
    /// across execve. `proc_self` is the NUL-terminated path of that `/proc`, built before
    /// fork.
    ///
    /// Returns the errno of the failing step.
    pub fn restrict_self(
        &self,
        proc_self: &CStr,
        whole: bool,
        shm: Option<super::Access>,
    ) -> Result<(), i32> {
        let Some(fd) = &self.fd else { return Ok(()) };
        // SAFETY: proc_self is NUL-terminated; open returns a new fd or -1.
        let dir = unsafe {
            libc::open(
                proc_self.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if dir < 0 {
            return Err(Errno::last_raw());
        }
        let added = if whole {
            add_proc_rule(fd, dir, c".", true, self.handled)
        } else {
            PROC_SELF
                .iter()
                .try_for_each(|&(name, tree)| add_proc_rule(fd, dir, name, tree, self.handled))
        };
        // SAFETY: dir is the fd opened above, owned here.
        unsafe { libc::close(dir) };
        added?;
        // The call's `/dev/shm`, a mount of its temporary directory's `.shm`: landlock walks
        // a path up through its mounts, so the rule of the directory it is in does not reach it
        // there.
        if let Some(access) = shm {
            add_rule_at(
                fd,
                libc::AT_FDCWD,
                c"/dev/shm",
                access.bits() & self.handled,
            )?;
        }
        // SAFETY: fd is a landlock ruleset fd; flags 0.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) } < 0 {
            return Err(Errno::last_raw());
        }
        Ok(())
    }
}

/// Grants read on `name` in the directory `dir` (a tree when `tree`), to the ruleset `ruleset`,
/// as far as it `handled` those rights. An entry this kernel lacks is skipped. Raw syscalls
/// only: it runs in the child.
fn add_proc_rule(
    ruleset: &OwnedFd,
    dir: libc::c_int,
    name: &CStr,
    tree: bool,
    handled: u64,
) -> Result<(), i32> {
    let access = if tree { READ_TREE } else { READ_FILE } | AccessFs::Truncate;
    add_rule_at(ruleset, dir, name, access.bits() & handled)
}

/// Grants `access` (landlock's bits, within what the ruleset handles) on `name` in the
/// directory `dir` to the ruleset `ruleset`; a name that is not there is skipped. Raw syscalls
/// only: it runs in the child.
fn add_rule_at(ruleset: &OwnedFd, dir: libc::c_int, name: &CStr, access: u64) -> Result<(), i32> {
    // SAFETY: name is NUL-terminated; openat returns a new fd or -1.
    let entry = unsafe { libc::openat(dir, name.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if entry < 0 {
        return match Errno::last_raw() {
            libc::ENOENT => Ok(()),
            errno => Err(errno),
        };
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: entry,
    };
    // SAFETY: attr is a valid landlock_path_beneath_attr that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    let errno = if rc < 0 { Errno::last_raw() } else { 0 };
    // SAFETY: entry is the fd opened above, owned here.
    unsafe { libc::close(entry) };
    if errno != 0 { Err(errno) } else { Ok(()) }
}
