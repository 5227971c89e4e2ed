//! Opening a policy's own paths (effects, `within` roots, the base set) so that the only
//! symlinks followed on the way are root's, in directories only root can change.
//!
//! A rule attaches to the inode its path names at launch. A symlink that anyone else could plant
//! or re-point on that path (a call that may write the directory holding it, the agent in its
//! workspace) would move another tool's read, write or exec grant anywhere its user can reach:
//! `read = ["/srv/ws/shared"]` with `shared -> /` reads the host. So a path with no symlink at
//! all is opened in one `openat2` (`RESOLVE_NO_SYMLINKS`); only when it has one is it walked
//! component by component, and each symlink must be owned by root and lie in a directory owned
//! by root that no one else may write (or that is sticky, where no one else may replace root's
//! entries): `/lib -> usr/lib`, `/etc/alternatives`. The result is opened again without
//! following symlinks, so a link planted after the walk fails the open instead of being taken.

use std::{
    ffi::OsStr,
    os::{
        fd::OwnedFd,
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Component, Path, PathBuf},
};

use nix::{
    errno::Errno,
    fcntl::{OFlag, OpenHow, ResolveFlag},
};

/// How many symlinks one path may go through (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Why a policy path was not opened.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "goes through the symlink {link} (owner uid {owner}, in a directory {writable}): only \
         root's symlinks in directories only root may change are followed, since anyone else \
         could point it anywhere"
    )]
    Untrusted {
        link: PathBuf,
        owner: u32,
        writable: &'static str,
    },
    #[error("more than {MAX_LINKS} symlinks")]
    TooManyLinks,
    #[error("{0}")]
    Sys(#[from] Errno),
}

/// Opens `path` (absolute) as an `O_PATH` descriptor with `flags` added, following root's
/// symlinks only (see the module's doc).
pub fn open(path: &Path, flags: OFlag) -> Result<OwnedFd, ResolveError> {
    match open_no_symlinks(path, flags) {
        Err(Errno::ELOOP) => Ok(open_no_symlinks(&resolve(path)?, flags)?),
        other => Ok(other?),
    }
}

fn open_no_symlinks(path: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how)
}

/// The path `path` names with every symlink on the way replaced by its target, each checked
/// to be root's in a directory only root may change. What does not exist is kept as it is.
pub fn resolve(path: &Path) -> Result<PathBuf, ResolveError> {
    let mut done = PathBuf::from("/");
    // The components still to walk, last first.
    let mut todo: Vec<PathBuf> = components(path);
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name.as_os_str() == ".." {
            done.pop();
            continue;
        }
        let next = done.join(&name);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                todo.push(name);
                done.extend(todo.into_iter().rev());
                return Ok(done);
            }
            Err(e) => return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)).into()),
        };
        if !meta.file_type().is_symlink() {
            done = next;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(ResolveError::TooManyLinks);
        }
        trusted(&next, meta.uid(), &done)?;
        let target = std::fs::read_link(&next)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        if target.is_absolute() {
            done = PathBuf::from("/");
        }
        todo.extend(components(&target));
    }
    Ok(done)
}

/// The named components of `path`, last first (`.` dropped, `..` kept).
fn components(path: &Path) -> Vec<PathBuf> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(PathBuf::from(name)),
            Component::ParentDir => Some(PathBuf::from(OsStr::from_bytes(b".."))),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .rev()
        .collect()
}

/// Checks that the symlink `link`, owned by `owner`, in directory `dir`, is one only root can
/// have made or re-point.
fn trusted(link: &Path, owner: u32, dir: &Path) -> Result<(), ResolveError> {
    let dir_meta = std::fs::metadata(dir)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let mode = dir_meta.mode();
    let writable = if dir_meta.uid() != 0 {
        Some("not owned by root")
    } else if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        Some("others may write")
    } else {
        None
    };
    match (owner, writable) {
        (0, None) => Ok(()),
        (owner, writable) => Err(ResolveError::Untrusted {
            link: link.to_owned(),
            owner,
            writable: writable.unwrap_or("only root may change"),
        }),
    }
}

#[cfg(test)]
mod tests;
