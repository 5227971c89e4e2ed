//! Clone, confine, exec (its end is followed in `wait`).
//!
//! The daemon is multithreaded (tokio), so between the clone and exec the child may only make
//! async-signal-safe calls: everything that allocates or takes a lock (CStrings, the environment,
//! the user lookup, the BPF programs, the landlock ruleset, the limit cgroups) is done in
//! [`spawn`] before the clone, and the child (`child::run`) makes raw libc calls on that prepared
//! data. A failing step is reported through a close-on-exec pipe as (stage, errno); EOF on the
//! pipe means `execve` succeeded.

use std::{
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
    sync::{Arc, atomic::AtomicU32},
    time::Instant,
};

use nix::unistd::Pid;
use serde::Serialize;

use super::{
    child::{ChildCtx, STAGES, Stage},
    clone,
    landlock::{self, LandlockError, LandlockStatus},
    limits::{CallLimits, LimitsError, LimitsMode, Spares},
    seccomp::{self, SeccompError},
    teardown::MountNs,
    writes::WriteRules,
};
use crate::{
    call::{
        gate::{self, Gate},
        plan::LaunchPlan,
        stages::Stages,
    },
    sandbox::cgroup::{Cgroup, CgroupError},
};

/// The guard's dedicated unprivileged user, created by `cargo xtask setup` with
/// `useradd --system --no-create-home --shell /usr/sbin/nologin guard-tool`.
pub const DEFAULT_USER: &str = "guard-tool";

/// Errors of a launch. `Child` names the step that failed in the child.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("argv is empty")]
    EmptyArgv,
    #[error(transparent)]
    Protected(#[from] super::protected::Unkept),
    #[error(transparent)]
    UnixBackstop(#[from] super::writes::backstop::BackstopError),
    #[error("argv[0] {0:?} is not an absolute path")]
    RelativeProgram(PathBuf),
    #[error("NUL byte in {what}")]
    Nul { what: &'static str },
    #[error("invalid environment variable name {0:?}")]
    EnvName(String),
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    #[error("user {0:?} is uid 0: a call runs as root only with run_as = \"root\"")]
    ImplicitRoot(String),
    #[error("capabilities: {0:?} is not a capability")]
    Capability(String),
    #[error(
        "a tool run as root has no process limit on this host: its limits are rlimits (no \
         memory or pids cgroup), and RLIMIT_NPROC does not bind uid 0"
    )]
    RootUnlimited,
    #[error("{op}: {source}")]
    Sys {
        op: &'static str,
        source: nix::Error,
    },
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("the program {path:?} is not the one approved: {why}")]
    ProgramChanged { path: PathBuf, why: String },
    #[error("confined child failed at {stage}: {}", std::io::Error::from_raw_os_error(*errno))]
    Child { stage: &'static str, errno: i32 },
    #[error(
        "{0} paths the call may change: more than {max} (its mount view has a writable copy of each)",
        max = super::child::MAX_WRITABLE
    )]
    TooManyWritable(usize),
}

fn sys(op: &'static str) -> impl FnOnce(nix::Error) -> SandboxError {
    move |source| SandboxError::Sys { op, source }
}

/// A failed system call of `op`, from an `io::Error`, as the launch reports it.
pub fn io_sys(op: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| sys(op)(nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Host-wide settings of launches, decided at startup.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// How memory and pids limits are enforced ([`super::limits::detect`]).
    pub limits: LimitsMode,
    /// Launch without landlock when the kernel has none, and with the rights it has when it
    /// lacks one a launch needs ([`landlock::abi::admit`]). Off by default: the guard refuses
    /// rather than silently dropping file and network confinement.
    pub allow_without_landlock: bool,
    /// The user a call runs as when its plan names none.
    pub default_user: String,
    /// The calls' v1 limit directories (under the guard's cgroup name in each hierarchy), and
    /// those calls have left, kept for the next ones.
    pub spares: Arc<Spares>,
    /// The kernel programs watch every call (not `--allow-unenforced` without them): their
    /// `sock_create` then refuses and reports the inet sockets a call may not have.
    pub kernel_watches: bool,
    /// The kernel's refusal of a call's own Unix connects, linked to the cgroup of each call in
    /// a network namespace of its own, whose Unix connects guardd makes (`writes::unix`).
    pub unix_backstop: Option<Arc<super::writes::backstop::UnixBackstop>>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            limits: LimitsMode::Rlimit,
            allow_without_landlock: false,
            default_user: DEFAULT_USER.to_owned(),
            spares: Spares::new("guard"),
            kernel_watches: false,
            unix_backstop: None,
        }
    }
}

/// What confinement was applied, for the audit row.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Applied {
    /// The kernel's landlock ABI (negative errno when landlock is unavailable).
    pub landlock_abi: i32,
    pub landlock_status: LandlockStatus,
    /// Read/exec paths of the plan that did not exist, so got no rule.
    pub landlock_skipped: Vec<PathBuf>,
    /// Write targets that did not exist: (target, parent directory granted create+write).
    pub landlock_widened: Vec<(PathBuf, PathBuf)>,
    pub seccomp: seccomp::Mode,
    /// Syscalls with a deny rule.
    pub denied_count: usize,
    pub limits_mode: LimitsMode,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// For a tool run as root, the capabilities it kept (it has no others; `[]`, none). Absent
    /// for another user, whom its setuid left none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
}

/// A running confined call. Hand it to [`run_to_end`](super::wait::run_to_end); dropping it removes the call's v1 limit
/// cgroups, killing what is still in them.
#[derive(Debug)]
pub struct Launched {
    pub pid: Pid,
    /// A pidfd for the child, when the kernel supports pidfd_open.
    pub pidfd: Option<OwnedFd>,
    /// Its mount namespace, held (never read) so that its teardown is not on the call's path
    /// (`teardown`): it goes when the call is over.
    _mount_ns: Option<MountNs>,
    pub applied: Applied,
    pub started: Instant,
    /// Where the launch's time went: preparing, landlock, seccomp, limits, the clone until exec.
    pub stages: Stages,
    /// Keeps the v1 limit cgroups until the call is over.
    limits: CallLimits,
    /// The attempts its write-opens and execs judge finds (`writes`), served since before its
    /// clone, until [`run_to_end`] records them.
    pub(super) attempts: Option<tokio::sync::mpsc::UnboundedReceiver<super::writes::Reported>>,
    /// The Unix-connect backstop's link to its cgroup (`writes::backstop`), held until the call
    /// is over: closing it detaches the program (an outside pass found it closed at the exec).
    _unix_link: Option<OwnedFd>,
}

impl Launched {
    /// The v1 cgroup directories of the call (none in other limit modes).
    pub fn v1_cgroups(&self) -> impl Iterator<Item = &Path> {
        self.limits.v1_dirs()
    }
}

/// Launches `plan` confined, in `cgroup`, with `stdio` as its fds 0, 1 and 2. Returns once the
/// child has exec'd the tool (or with the step that failed): [`prepare`], then [`Ready::start`].
///
/// The child's parent-death signal (SIGKILL) fires when the *thread* that called `spawn` exits:
/// call it from a thread that outlives the call (a tokio worker or the caller's own thread, not
/// a `spawn_blocking` task, whose thread may be reaped while the tool still runs).
pub fn spawn(
    plan: &LaunchPlan,
    cgroup: &Cgroup,
    stdio: [OwnedFd; 3],
    opts: &LaunchOptions,
) -> Result<Launched, SandboxError> {
    prepare(plan, cgroup, opts)?.start(stdio)
}

/// A launch prepared up to the clone: everything that allocates, opens or compiles is done, so
/// that the rest of a call's start (its decision row's fdatasync) can overlap with it.
pub struct Ready {
    /// The exec's strings, the filters, the limits and the cgroup.
    bound: Bound,
    /// The program opened and checked by [`Ready::pin`]: the child execs this file, not
    /// whatever its path names by then.
    program: Option<OwnedFd>,
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// What a tool run as root keeps of its capabilities (`None`: another user, who has none).
    capabilities: Option<u64>,
    landlock: landlock::Prepared,
    /// The call runs in shadow: no read-only mount view (its protected names stay read-only).
    shadow: bool,
    /// The protected paths beneath its writable directories (`protected`): read-only in its
    /// mount view whatever its write effects say.
    protected: Vec<super::protected::Kept>,
    /// The protected names absent when it was prepared, to be looked at again at its end.
    absent: super::protected::Absent,
    /// Its own temporary directory, by index into `landlock.writable`: its `/tmp`.
    tmp: Option<usize>,
    /// It runs in a network namespace of its own.
    own_network: bool,
    /// The rules the write-opens filter's opens are judged by.
    writes: std::sync::Arc<WriteRules>,
    applied: Applied,
}

impl Ready {
    /// The protected names absent beneath the call's writable directories when it was
    /// prepared, to be looked at again at its end.
    pub fn absent(&mut self) -> super::protected::Absent {
        std::mem::take(&mut self.absent)
    }

    /// Binds the launch to the program whose content has SHA-256 `sha256` (hex): opens `argv[0]`,
    /// hashes what it read through that descriptor, and has the child exec that same open file
    /// (`execveat`), so that nothing put at the path after this check runs instead. A script
    /// (`#!`) is run by its interpreter, which opens it by path again: it is checked, not bound.
    pub fn pin(mut self, sha256: &str) -> Result<Self, SandboxError> {
        use std::io::Read as _;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(
            self.bound.command.program.as_bytes(),
        ));
        let changed = |why: String| SandboxError::ProgramChanged {
            path: path.clone(),
            why,
        };
        let mut file = std::fs::File::open(&path).map_err(|e| changed(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| changed(e.to_string()))?;
        let now = crate::call::hash::sha256_hex(&bytes);
        if now != sha256 {
            return Err(changed(format!("its content is {now}, not {sha256}")));
        }
        if !bytes.starts_with(b"#!") {
            self.program = Some(file.into());
        }
        Ok(self)
    }

    /// Clones the child, which confines itself and execs the tool with `stdio` as its fds 0, 1
    /// and 2; returns once it has exec'd (or with the step that failed). See [`spawn`] on the
    /// calling thread.
    pub fn start(self, stdio: [OwnedFd; 3]) -> Result<Launched, SandboxError> {
        let cloned = self.clone_child(&stdio, None)?;
        drop(stdio);
        self.launched(cloned)
    }

    /// [`Ready::start`] while the call's decision row is still being written: the child
    /// confines itself meanwhile and execs once `gate` opens. When the gate is shut, or does
    /// not open within the child's wait, the child exits before the tool runs, and the launch
    /// comes back ([`Gated::Closed`]) to be started once the row's fate is known.
    pub fn start_at(self, stdio: [OwnedFd; 3], gate: &Gate) -> Result<Gated, SandboxError> {
        match self.clone_child(&stdio, Some(gate.word())) {
            Ok(cloned) => {
                drop(stdio);
                self.launched(cloned).map(|l| Gated::Started(Box::new(l)))
            }
            Err(SandboxError::Child { stage, .. }) if stage == STAGES[Stage::Decision as usize] => {
                Ok(Gated::Closed(Box::new(self), stdio))
            }
            Err(e) => Err(e),
        }
    }

    /// Clones the child and waits for its exec (or the step that failed, after which it is
    /// reaped).
    fn clone_child(
        &self,
        stdio: &[OwnedFd; 3],
        decision: Option<&AtomicU32>,
    ) -> Result<Cloned, SandboxError> {
        let mut stages = Stages::start();
        let (report_r, report_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
        let filters = sock_fprogs(&self.bound.programs);
        let watch = sock_fprogs(&self.bound.write_opens);
        let (listener, listener_w) = super::writes::channel().map_err(sys("socketpair"))?;
        // Served from now: the child's own exec of the tool stops in its filter too.
        let attempts = (!self.shadow)
            .then(|| super::writes::start(listener, std::sync::Arc::clone(&self.writes)));
        let command = &self.bound.command;
        // The child checks through it that the daemon is alive (closed in the child at exec).
        let daemon = pidfd_open(Pid::this()).ok_or_else(|| SandboxError::Sys {
            op: "pidfd_open of the daemon",
            source: nix::Error::last(),
        })?;
        let ctx = ChildCtx {
            parent: daemon.as_raw_fd(),
            report: report_w.as_raw_fd(),
            cgroup_dir: self.bound.cgroup_dir.as_raw_fd(),
            cgroup_procs: self.bound.cgroup_procs.as_raw_fd(),
            limit_procs: self
                .bound
                .limits
                .procs_fds()
                .map(|f| f.as_raw_fd())
                .collect(),
            stdio: stdio.each_ref().map(|f| f.as_raw_fd()),
            rlimits: self.bound.limits.rlimits,
            uid: self.uid,
            gid: self.gid,
            capabilities: self.capabilities,
            cwd: &command.cwd,
            program: &command.program,
            program_fd: self.program.as_ref().map(|f| f.as_raw_fd()),
            argv: &command.argv,
            envp: &command.envp,
            landlock: &self.landlock,
            proc_self: c"/proc",
            own_network: self.own_network,
            tmp: self.tmp.map(|i| &self.landlock.writable[i]),
            filters: &filters,
            // In shadow, write-opens are let through, and seen by the open observer instead.
            watch: watch
                .first()
                .filter(|_| !self.shadow)
                .map(|f| (f, listener_w.as_raw_fd())),
            writable: &self.landlock.writable,
            protected: &self.protected,
            view: !self.shadow,
            decision: decision.map(|gate| (gate, gate::deadline(super::child::DECISION_WAIT))),
        };

        let pid = Pid::from_raw(clone::spawn(&ctx).map_err(sys("clone"))?);
        // The clone returned after the child's execve or exit: its start is this moment.
        let started = Instant::now();
        // First, while the tool is still loading: its mount view, held once it exits.
        let pidfd = pidfd_open(pid);
        let mount_ns = pidfd.as_ref().and_then(MountNs::of);
        stages.lap("clone_exec");
        drop((report_w, daemon, listener_w));
        await_exec(&report_r, pid)?;
        Ok(Cloned {
            pid,
            pidfd,
            mount_ns,
            started,
            stages,
            attempts,
        })
    }

    /// The launch of the child `cloned`, which has exec'd the tool.
    fn launched(self, cloned: Cloned) -> Result<Launched, SandboxError> {
        let Cloned {
            pid,
            pidfd,
            mount_ns,
            started,
            stages,
            attempts,
        } = cloned;
        Ok(Launched {
            pid,
            pidfd,
            _mount_ns: mount_ns,
            applied: self.applied,
            started,
            stages,
            limits: self.bound.limits,
            attempts,
            _unix_link: self.bound._unix_link,
        })
    }
}

/// A start at a gate ([`Ready::start_at`]).
pub enum Gated {
    /// The tool runs.
    Started(Box<Launched>),
    /// The child left at the gate, before the tool ran: the launch and its stdio, back.
    Closed(Box<Ready>, [OwnedFd; 3]),
}

/// A child that has exec'd the tool, and the attempts its judge finds.
struct Cloned {
    pid: Pid,
    pidfd: Option<OwnedFd>,
    mount_ns: Option<MountNs>,
    started: Instant,
    stages: Stages,
    attempts: Option<tokio::sync::mpsc::UnboundedReceiver<super::writes::Reported>>,
}

/// Waits for the child's report: EOF means `execve` succeeded; 8 bytes are the (stage, errno)
/// of the step that failed, after which the child exits and is reaped here.
fn await_exec(report_r: &OwnedFd, pid: Pid) -> Result<(), SandboxError> {
    let mut msg = [0u8; 8];
    let mut got = 0;
    while got < msg.len() {
        match nix::unistd::read(report_r, &mut msg[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::Error::EINTR) => continue,
            Err(e) => {
                // Unknown state: do not leave a half-confined child running.
                abandon(pid);
                return Err(SandboxError::Sys {
                    op: "read launch report",
                    source: e,
                });
            }
        }
    }
    if got == 0 {
        return Ok(());
    }
    let _ = nix::sys::wait::waitpid(pid, None);
    let stage = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) as usize;
    let errno = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
    let stage = STAGES.get(stage).copied().unwrap_or("unknown");
    Err(SandboxError::Child { stage, errno })
}

/// Kills and reaps a child whose launch cannot go on.
fn abandon(pid: Pid) {
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
}

/// A pidfd for `pid`, when the kernel supports pidfd_open.
fn pidfd_open(pid: Pid) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    // SAFETY: a non-negative result is a new fd that nothing else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

mod command;
mod prepare;
#[cfg(test)]
mod tests;

use command::{Command, sock_fprogs};
pub use prepare::{Bound, Files, prepare, resolve_user};
