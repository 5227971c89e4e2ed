//! Opening a policy's own paths (`command[0]`, effects, `within` roots) so that the only
//! symlinks followed on the way are root's, in directories only root can change.
//!
//! A rule attaches to the inode its path names at launch. A symlink that anyone else could plant
//! or re-point on that path (a call that may write the directory holding it, the agent in its
//! workspace) would move another tool's read, write or exec grant anywhere its user can reach:
//! `read = ["/srv/ws/shared"]` with `shared -> /` reads the host. So a path with no symlink at
//! all is opened in one `openat2` (`RESOLVE_NO_SYMLINKS`); only when it has one is it walked
//! component by component, each opened beneath the last without following, and each symlink
//! must be owned by root and lie in a directory owned by root that no one else may write (or
//! that is sticky, where no one else may replace root's entries): `/bin -> usr/bin`,
//! `/etc/alternatives`. What is returned is the descriptor the walk checked, so nothing changed
//! after the check is taken instead.

use std::{
    ffi::{OsStr, OsString},
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Component, Path, PathBuf},
};

use nix::{
    errno::Errno,
    fcntl::{OFlag, OpenHow, ResolveFlag},
    sys::stat::{FileStat, Mode, SFlag},
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
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how) {
        // ENOSYS: a seccomp filter above guardd refuses openat2, whose flags it cannot read
        // (systemd's `RestrictSUIDSGID=`): the walk, with openat alone, gives the same answer.
        Err(Errno::ELOOP | Errno::ENOSYS) => walk(vec![Dir::root()?], path, Links::RootOnly, flags),
        other => Ok(other?),
    }
}

/// Opens `path`, which lies beneath `root`, as an `O_PATH` descriptor by walking from `root`
/// as `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` does: no `..`, absolute symlink or
/// magic link can lead out of `root`, whatever happened to the path's components since the
/// decision checked them. `root`, the policy's, is opened as its other paths are ([`open`]).
pub fn beneath(root: &Path, path: &Path) -> Result<OwnedFd, ResolveError> {
    let root_fd = open(root, OFlag::O_DIRECTORY)?;
    let rel = path.strip_prefix(root).map_err(|_| Errno::EXDEV)?;
    if rel.as_os_str().is_empty() {
        return Ok(root_fd);
    }
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match nix::fcntl::openat2(&root_fd, rel, how) {
        Err(Errno::ENOSYS) => {
            let stat = nix::sys::stat::fstat(&root_fd)?;
            let base = Dir {
                fd: root_fd,
                stat,
                path: root.to_owned(),
            };
            walk(vec![base], rel, Links::Beneath, OFlag::empty())
        }
        other => Ok(other?),
    }
}

/// Which symlinks a walk follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Links {
    /// Root's, in directories only root may change ([`trusted`]), wherever they point.
    RootOnly,
    /// Anyone's, as long as the walk stays beneath its first directory: an absolute target,
    /// or a `..` above that directory, is `EXDEV`, as under `RESOLVE_BENEATH`.
    Beneath,
}

/// One directory of the walk: its descriptor, what it is, and its path (for errors).
struct Dir {
    fd: OwnedFd,
    stat: FileStat,
    path: PathBuf,
}

impl Dir {
    fn root() -> Result<Self, Errno> {
        let fd = nix::fcntl::open(
            "/",
            OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_DIRECTORY,
            Mode::empty(),
        )?;
        let stat = nix::sys::stat::fstat(&fd)?;
        Ok(Self {
            fd,
            stat,
            path: PathBuf::from("/"),
        })
    }
}

/// The walk of `path` from the directories `dirs` (the last is where it starts; `..` never
/// pops the first): each component opened beneath the last without following it; a symlink,
/// once allowed by `links`, replaced by its target's components.
fn walk(
    mut dirs: Vec<Dir>,
    path: &Path,
    links: Links,
    flags: OFlag,
) -> Result<OwnedFd, ResolveError> {
    // The components still to walk, last first.
    let mut todo = components(path);
    let mut followed = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            match (dirs.len() > 1, links) {
                (true, _) => drop(dirs.pop()),
                (false, Links::Beneath) => return Err(Errno::EXDEV.into()),
                (false, Links::RootOnly) => {}
            }
            continue;
        }
        let Some(dir) = dirs.last() else {
            unreachable!("the first directory is never popped")
        };
        let last = todo.is_empty();
        let fd = nix::fcntl::openat(
            dir.fd.as_fd(),
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )?;
        let stat = nix::sys::stat::fstat(&fd)?;
        let here = dir.path.join(&name);
        if SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT) == SFlag::S_IFLNK {
            followed += 1;
            if followed > MAX_LINKS {
                return Err(ResolveError::TooManyLinks);
            }
            let target = nix::fcntl::readlinkat(&fd, "")?;
            let absolute = Path::new(&target).is_absolute();
            match links {
                Links::RootOnly => trusted(&here, stat.st_uid, &dir.stat)?,
                // A magic link's target (`/proc/PID/fd/N`) reads as an absolute path or as a
                // name such as `pipe:[7]`, which no directory holds.
                Links::Beneath if absolute => return Err(Errno::EXDEV.into()),
                Links::Beneath => {}
            }
            if absolute {
                dirs.truncate(1);
            }
            todo.extend(components(Path::new(&target)));
            continue;
        }
        if last {
            return Ok(checked(fd, &stat, flags)?);
        }
        dirs.push(Dir {
            fd,
            stat,
            path: here,
        });
    }
    // The path named a directory of the walk (or where it started).
    let dir = dirs.pop().expect("the first directory is never popped");
    Ok(checked(dir.fd, &dir.stat, flags)?)
}

/// `fd` as the caller asked for it: the walk opens `O_PATH` only, so of `flags` only
/// `O_DIRECTORY` (the one the callers pass) is checked, on what `fd` is.
fn checked(fd: OwnedFd, stat: &FileStat, flags: OFlag) -> Result<OwnedFd, Errno> {
    let dir = SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT) == SFlag::S_IFDIR;
    if flags.contains(OFlag::O_DIRECTORY) && !dir {
        return Err(Errno::ENOTDIR);
    }
    Ok(fd)
}

/// The named components of `path`, last first (`.` dropped, `..` kept).
fn components(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some(OsStr::from_bytes(b"..").to_owned()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .rev()
        .collect()
}

/// Checks that the symlink `link`, owned by `owner`, in the directory of `dir`, is one only
/// root can have made or re-point.
fn trusted(link: &Path, owner: u32, dir: &FileStat) -> Result<(), ResolveError> {
    let mode = dir.st_mode;
    let writable = if dir.st_uid != 0 {
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

/// Lexical normalisation: drops `.`, applies `..` (never above `/`).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
