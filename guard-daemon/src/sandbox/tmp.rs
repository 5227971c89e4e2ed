//! A call's own temporary directory (`tmp = true` in its tool): compilers, `mktemp` and `sort`
//! need one, and the host's `/tmp` is shared by every call and every user, a place to hand
//! data from one call to another or to plant a file another program will trust. Each call gets
//! a fresh directory of its own under [`ROOT`], named at decision time (the plan's `tmp`, in its
//! write effects and its `TMPDIR`), made for the call's user just before its launch, and
//! removed with everything in it when the call is over.

use std::{
    fs, io,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use crate::plan::LaunchPlan;

/// Where the calls' directories go: root's, on `/run` (a tmpfs on a systemd host, so not the
/// audit log's file system), searchable but not listable by others.
pub const ROOT: &str = "/run/guard-tmp";

/// A fresh directory name under [`ROOT`], from the kernel's random pool: no one can guess,
/// and so take, a call's directory before it is made.
pub fn fresh() -> PathBuf {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer; a short read leaves
    // zeros, which `create` then finds taken at worst (the name is checked when made).
    unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Path::new(ROOT).join(format!("call-{name}"))
}

/// Makes [`ROOT`] if missing; refuses one that is not root's directory, mode 0711 at most.
pub fn prepare_root() -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o711).create(ROOT) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(ROOT)?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o066 != 0 {
        return Err(io::Error::other(format!(
            "{ROOT} is not a directory of root's that only root may list and change"
        )));
    }
    Ok(())
}

/// A call's temporary directory, removed (with what the call left in it) on drop.
#[derive(Debug)]
pub struct CallTmp(Option<PathBuf>);

impl CallTmp {
    /// Makes `plan`'s directory, if it has one, for the user it runs as (`default_user` unless
    /// the plan names one), mode 0700. A directory already there is an error: its name was
    /// the plan's alone.
    pub fn create(plan: &LaunchPlan, default_user: &str) -> io::Result<Self> {
        let Some(dir) = &plan.confinement.tmp else {
            return Ok(Self(None));
        };
        if dir.parent() != Some(Path::new(ROOT)) {
            return Err(io::Error::other(format!(
                "{} is not under {ROOT}",
                dir.display()
            )));
        }
        let name = plan.confinement.run_as.as_deref().unwrap_or(default_user);
        let user = nix::unistd::User::from_name(name)
            .map_err(io::Error::from)?
            .ok_or_else(|| io::Error::other(format!("no user {name}")))?;
        fs::DirBuilder::new().mode(0o700).create(dir)?;
        let made = Self(Some(dir.clone()));
        std::os::unix::fs::chown(dir, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        Ok(made)
    }
}

impl Drop for CallTmp {
    fn drop(&mut self) {
        if let Some(dir) = &self.0
            && let Err(e) = fs::remove_dir_all(dir)
        {
            tracing::warn!(
                "leaving a call's temporary directory {}: {e}",
                dir.display()
            );
        }
    }
}
