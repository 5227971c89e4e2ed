//! Opening the file of a rule, as its origin says, and what the mount view takes from the ones
//! the call may change.

use std::{
    ffi::CString,
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
};

use ::landlock::{AccessFs, BitFlags};
use nix::{errno::Errno, fcntl::OFlag};

use super::{FsRule, LandlockError, Origin};
use crate::sandbox::resolve;

/// A file or directory the call may change, as its rule found it: where it lies (its links
/// resolved) and which file it is. The child finds it again by that path, refusing any link on
/// the way, and mounts its copy there only if it is still the same file (`child::mounts`): a
/// path re-pointed since would give the call a writable copy of wherever it leads now.
#[derive(Debug)]
pub struct Writable {
    pub path: CString,
    pub dev: u64,
    pub ino: u64,
    /// What its rule grants.
    pub access: BitFlags<AccessFs>,
    /// Holds the file until the launch is over, so that its identity is no other's: a file
    /// removed and its inode number reused would otherwise pass for it.
    pub pin: OwnedFd,
}

impl Writable {
    /// The writable place `path` is now, whole (for tests of what is made of one).
    #[cfg(test)]
    pub fn at(path: &std::path::Path) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).expect("stat");
        Self {
            path: CString::new(path.as_os_str().as_bytes()).expect("path"),
            dev: meta.dev(),
            ino: meta.ino(),
            access: super::WRITE_TREE,
            pin: std::fs::File::open(path).expect("open").into(),
        }
    }

    /// The identity and the path of the file `fd` holds.
    pub(super) fn of(fd: &OwnedFd, rule: &FsRule) -> Result<Self, LandlockError> {
        let failed = |e: Errno| LandlockError::Path {
            path: rule.path.clone(),
            source: resolve::ResolveError::Sys(e),
        };
        let stat = nix::sys::stat::fstat(fd).map_err(failed)?;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| failed(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| failed(Errno::EINVAL))?;
        Ok(Self {
            path,
            dev: stat.st_dev,
            ino: stat.st_ino,
            access: rule.access,
            pin: fd
                .try_clone()
                .map_err(|e| failed(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EMFILE))))?,
        })
    }
}

/// The file `rule` names, opened as its origin says.
pub(super) fn open_rule(rule: &FsRule) -> Result<OwnedFd, LandlockError> {
    let path = |source| LandlockError::Path {
        path: rule.path.clone(),
        source,
    };
    Ok(match &rule.origin {
        Origin::Beneath(root) => {
            resolve::beneath(root, &rule.path).map_err(|source| LandlockError::Beneath {
                path: rule.path.clone(),
                root: root.clone(),
                source,
            })?
        }
        Origin::Policy => resolve::open(&rule.path, OFlag::empty()).map_err(path)?,
        Origin::Host => nix::fcntl::open(
            &rule.path,
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| path(e.into()))?,
    })
}
