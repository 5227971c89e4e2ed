//! What a launch needs of the file system: the user the call runs as, its landlock ruleset, the
//! places it may change and the protected names beneath them. The longest part of a launch's
//! preparation in a workspace, and independent of the call's cgroup and kernel watch: guardd
//! makes it on a thread of its own while its worker makes those (`launch::Call::run`).

use std::path::PathBuf;

use nix::unistd::User;

use super::{LaunchOptions, SandboxError};
use crate::{
    call::plan::{Enforce, LaunchPlan},
    sandbox::{child::MAX_WRITABLE, landlock, protected},
};

/// A launch's file-system part, made by [`Files::of`]; [`Files::ready`] adds the rest.
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
        Ok(Self {
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

/// Resolves the user a call runs as. Never root unless the plan says `run_as = "root"`.
pub fn resolve_user(plan: &LaunchPlan, opts: &LaunchOptions) -> Result<User, SandboxError> {
    let name = plan
        .confinement
        .run_as
        .as_deref()
        .unwrap_or(&opts.default_user);
    let user = User::from_name(name)
        .map_err(|source| SandboxError::Sys {
            op: "user lookup",
            source,
        })?
        .ok_or_else(|| SandboxError::UnknownUser(name.to_owned()))?;
    if (user.uid.is_root() || user.gid.as_raw() == 0)
        && plan.confinement.run_as.as_deref() != Some("root")
    {
        return Err(SandboxError::ImplicitRoot(name.to_owned()));
    }
    Ok(user)
}
