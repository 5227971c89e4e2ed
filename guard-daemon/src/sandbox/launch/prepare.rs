//! A launch's preparation, in two halves made side by side: what it needs of the file system
//! ([`Files`]: the user the call runs as, its landlock ruleset, the places it may change and
//! the protected names beneath them; the longest part in a workspace), on a thread of its own,
//! while guardd's worker makes the call's cgroup and kernel watch and the rest ([`Bound`]: the
//! exec's strings, the filters, the limits); [`Ready::of`] joins them.

use std::{os::fd::OwnedFd, path::PathBuf};

use nix::unistd::User;

use super::{Applied, Command, LaunchOptions, Ready, SandboxError};
use crate::{
    call::{
        plan::{Enforce, LaunchPlan},
        stages::Stages,
    },
    sandbox::{
        caps,
        cgroup::Cgroup,
        child::MAX_WRITABLE,
        landlock,
        limits::{CallLimits, LimitsMode, processes_of},
        protected,
        seccomp::{self, BpfProgram},
        writes::WriteRules,
    },
};

/// A launch's file-system half, made by [`Files::of`].
pub struct Files {
    pub(super) user: User,
    /// Read and exec paths of the plan that did not exist, so got no rule.
    pub(super) skipped: Vec<PathBuf>,
    /// Write targets that did not exist, and the directories granted in their place.
    pub(super) widened: Vec<(PathBuf, PathBuf)>,
    pub(super) landlock: landlock::Prepared,
    /// The call runs in shadow: no read-only mount view (its protected names stay read-only).
    pub(super) shadow: bool,
    /// The protected paths beneath its writable directories.
    pub(super) protected: Vec<protected::Kept>,
    /// The protected names absent now, to be looked at again at its end.
    pub(super) absent: protected::Absent,
    /// Its own temporary directory, by index into `landlock.writable`.
    pub(super) tmp: Option<usize>,
    /// It runs in a network namespace of its own (`LaunchPlan::own_network`).
    pub(super) own_network: bool,
}

impl Files {
    /// The landlock ruleset and the protected paths of `plan`, run as `user`
    /// ([`resolve_user`]), as the file system is now.
    pub fn of(plan: &LaunchPlan, user: User, opts: &LaunchOptions) -> Result<Self, SandboxError> {
        let rules = landlock::rules(plan);
        let rules = if opts.kernel_watches {
            rules.judged_by_kernel()
        } else {
            rules
        };
        let mut prepared = landlock::prepare(&rules, opts.allow_without_landlock)?;
        let shadow = plan.enforce == Enforce::Shadow;
        if shadow {
            prepared = prepared.off_for_shadow();
        }
        if prepared.writable.len() > MAX_WRITABLE {
            return Err(SandboxError::TooManyWritable(prepared.writable.len()));
        }
        let names = plan.effects.protected.as_deref();
        let tmp = plan.confinement.tmp.as_deref();
        let (protected, absent) = protected::within(&prepared.writable, names, tmp)?;
        let tmp = tmp.filter(|_| !under_host_tmp(plan)).and_then(|t| {
            let t = t.as_os_str().as_encoded_bytes();
            prepared
                .writable
                .iter()
                .position(|w| w.path.as_bytes() == t)
        });
        Ok(Self {
            tmp,
            own_network: plan.own_network(),
            user,
            skipped: rules.skipped,
            widened: rules.widened,
            landlock: prepared,
            shadow,
            protected,
            absent,
        })
    }
}

/// Whether a path `plan` names (an effect, its working directory, its program) is in the host's
/// `/tmp` or `/dev/shm`: then the call keeps them, read-only but for its effects, rather than
/// its own (`child::mounts`), which would hide that path from it.
fn under_host_tmp(plan: &LaunchPlan) -> bool {
    let e = &plan.effects;
    let named = e.read.iter().chain(&e.write).chain(&e.exec);
    let named = named.chain(&plan.confinement.cwd).map(PathBuf::as_path);
    let program = plan.argv.first().map(std::path::Path::new);
    named
        .chain(program)
        .any(|p| p.starts_with("/tmp") || p.starts_with("/dev/shm"))
}

/// Resolves the user a call runs as. Never root unless the plan says `run_as = "root"`.
pub fn resolve_user(plan: &LaunchPlan, opts: &LaunchOptions) -> Result<User, SandboxError> {
    let name = plan
        .confinement
        .run_as
        .as_deref()
        .unwrap_or(&opts.default_user);
    let user = User::from_name(name)
        .map_err(super::sys("user lookup"))?
        .ok_or_else(|| SandboxError::UnknownUser(name.to_owned()))?;
    if (user.uid.is_root() || user.gid.as_raw() == 0)
        && plan.confinement.run_as.as_deref() != Some("root")
    {
        return Err(SandboxError::ImplicitRoot(name.to_owned()));
    }
    if user.uid.is_root() && opts.limits == LimitsMode::Rlimit {
        return Err(SandboxError::RootUnlimited);
    }
    Ok(user)
}

/// Prepares the launch of `plan` in `cgroup`: its user ([`resolve_user`]), its [`Files`] and
/// the rest ([`Bound`]). Nothing runs until [`Ready::start`].
pub fn prepare(
    plan: &LaunchPlan,
    cgroup: &Cgroup,
    opts: &LaunchOptions,
) -> Result<Ready, SandboxError> {
    let user = resolve_user(plan, opts)?;
    let files = Files::of(plan, user, opts)?;
    Ok(Ready::of(files, Bound::of(plan, cgroup, opts)?, opts))
}

/// The half of a launch that does not wait for its [`Files`]: the strings of the exec, the
/// seccomp filters, the limits and the call's cgroup, made while the files are.
pub struct Bound {
    pub(super) command: Command,
    pub(super) programs: std::sync::Arc<Vec<BpfProgram>>,
    pub(super) write_opens: std::sync::Arc<Vec<BpfProgram>>,
    pub(super) seccomp: seccomp::Mode,
    pub(super) denied_count: usize,
    /// What the tool keeps of its capabilities if it runs as root.
    pub(super) capabilities: u64,
    pub(super) limits: CallLimits,
    pub(super) cgroup_procs: OwnedFd,
    pub(super) cgroup_dir: OwnedFd,
    /// The Unix-connect backstop's link to the call's cgroup, held while the call runs.
    pub(super) _unix_link: Option<OwnedFd>,
    pub(super) stages: Stages,
}

impl Bound {
    /// Makes the exec's strings, the filters and the limits of `plan` in `cgroup`.
    pub fn of(
        plan: &LaunchPlan,
        cgroup: &Cgroup,
        opts: &LaunchOptions,
    ) -> Result<Self, SandboxError> {
        let mut stages = Stages::start();
        let user = plan.confinement.run_as.as_deref();
        let command = Command::new(plan, user.unwrap_or(&opts.default_user))?;
        stages.lap("prepare");
        let unix_by_guardd = opts.unix_backstop.is_some();
        let table = seccomp::table_with(plan, opts.kernel_watches, unix_by_guardd)?;
        let programs = seccomp::compiled(&table)?;
        let write_opens = seccomp::compiled(&seccomp::write_opens_with(plan, unix_by_guardd))?;
        let names = plan.confinement.capabilities.iter().map(String::as_str);
        let capabilities =
            caps::set(names).map_err(|name| SandboxError::Capability(name.to_owned()))?;
        stages.lap("seccomp");
        let limits = CallLimits::setup(opts.limits, &opts.spares, cgroup, &plan.confinement)?;
        let cgroup_procs = cgroup.procs_fd()?;
        let cgroup_dir = cgroup.dir_fd()?;
        // Before the call's first process: its own Unix connects are the kernel's to refuse.
        let unix_link = match &opts.unix_backstop {
            Some(b) if plan.own_network() => Some(b.link(std::os::fd::AsFd::as_fd(&cgroup_dir))?),
            _ => None,
        };
        stages.lap("limits");
        Ok(Self {
            command,
            programs,
            write_opens,
            seccomp: table.mode,
            denied_count: table.denied_count(),
            capabilities,
            limits,
            cgroup_procs,
            cgroup_dir,
            _unix_link: unix_link,
            stages,
        })
    }

    /// Where its time went: prepare, seccomp, limits.
    pub fn stages(&self) -> &Stages {
        &self.stages
    }
}

impl Ready {
    /// The launch of the call whose halves are `files` and `bound`.
    pub fn of(files: Files, mut bound: Bound, opts: &LaunchOptions) -> Self {
        let Files {
            user,
            skipped,
            widened,
            landlock,
            shadow,
            protected,
            absent,
            tmp,
            own_network,
        } = files;
        let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
        // RLIMIT_NPROC counts every process of the user: a call as a user of its own (a
        // workspace's owner) gets its pids limit on top of what that user runs now, not in
        // place of it.
        if let Some(n) = bound.limits.rlimits.nproc
            && user.name != opts.default_user
        {
            bound.limits.rlimits.nproc = Some(n.saturating_add(processes_of(uid)));
        }
        let executable = &landlock.executable;
        let mut writes = WriteRules::of(&landlock.writable, executable, &protected, (uid, gid));
        // Its `/dev/shm` is its temporary directory's `.shm`, reached through its own mount.
        if let Some(tmp) = tmp.map(|i| &landlock.writable[i]) {
            let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
            if let Ok(st) = nix::sys::stat::fstatat(&tmp.pin, crate::sandbox::tmp::SHM, flags) {
                writes.also((st.st_dev, st.st_ino), tmp.access);
            }
        }
        let capabilities = (uid == 0).then_some(bound.capabilities);
        let applied = Applied {
            landlock_abi: landlock.abi,
            landlock_status: landlock.status,
            landlock_skipped: skipped,
            landlock_widened: widened,
            seccomp: bound.seccomp,
            denied_count: bound.denied_count,
            limits_mode: opts.limits,
            user: user.name,
            uid,
            gid,
            capabilities: capabilities.map(caps::names),
        };
        Self {
            bound,
            program: None,
            uid,
            gid,
            capabilities,
            landlock,
            shadow,
            protected,
            absent,
            tmp,
            own_network,
            writes: std::sync::Arc::new(writes),
            applied,
        }
    }
}
