//! Protected names wherever a project sits beneath a writable directory. A workspace root holds
//! projects, each a repository of its own, and a project may hold more (a nested repository, a
//! vendored one): git, direnv and an agent follow the names of each when the developer works
//! there. [`walk`] finds, beneath a writable directory and within bounds, every directory that
//! holds a protected entry (`.git`, `.claude`, `.envrc`...), at each launch; each is then kept
//! as the writable directory itself is (`protected::within`). At the call's end
//! [`Walked::made`] walks again and names each protected entry the call made where there was
//! none (a repository `git init` made, an `.envrc` in a new directory), to be moved aside as
//! any other planted name. A linked worktree's `.git` file (`git worktree add`) is no plant
//! when it points into a known repository's `.git/worktrees/NAME` whose `commondir` leads back
//! to it: it runs that repository's hooks, which are kept.

use std::{
    collections::HashSet,
    ffi::{CString, OsStr},
    os::{
        fd::{AsFd, AsRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use nix::{fcntl::OFlag, sys::stat::Mode};

use super::super::landlock::Writable;

/// How deep beneath a writable directory the walk looks.
pub const MAX_DEPTH: usize = 6;

/// Directories one walk reads at most: past them, the rest is not looked in (a receipt of a
/// call that made a protected name there does not show it; see the README's security table).
pub const MAX_DIRS: usize = 4096;

/// Trees that programs fill and no developer works in: not walked.
const FILLED: &[&str] = &[
    "node_modules",
    "target",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
];

/// A directory's identity.
type Id = (u64, u64);

/// What one walk beneath a writable directory found.
#[derive(Debug, Default)]
pub struct Walked {
    /// The writable directory walked, pinned, and as shown.
    root: Option<(OwnedFd, String)>,
    /// The protected first components looked for.
    firsts: Vec<Vec<u8>>,
    /// Each protected entry seen: its directory's identity and its name.
    seen: HashSet<(Id, Vec<u8>)>,
    /// Each directory read.
    read: HashSet<Id>,
    /// The `.git` directories met: the repositories a worktree's `.git` file may point into.
    repositories: HashSet<Id>,
    /// Whether the bounds stopped the walk (`MAX_DIRS`).
    cut: bool,
}

/// A directory beneath the root that holds a protected entry: pinned, as a writable place.
pub type Place = Writable;

/// One directory on the walk's stack.
struct Dir {
    fd: OwnedFd,
    path: Vec<u8>,
    depth: usize,
}

/// The directories beneath `root` (not `root` itself) holding an entry named one of `firsts`,
/// each pinned, and what the walk saw, for [`Walked::made`] at the call's end.
pub fn walk(root: &Writable, firsts: &[&str]) -> (Vec<Place>, Walked) {
    let mut walked = Walked {
        root: root
            .pin
            .try_clone()
            .ok()
            .map(|fd| (fd, root.path.to_string_lossy().into_owned())),
        firsts: firsts.iter().map(|f| f.as_bytes().to_vec()).collect(),
        ..Walked::default()
    };
    let mut places = Vec::new();
    walked.each(root.pin.as_fd(), root.path.as_bytes(), |dir, names| {
        if dir.depth > 0
            && !names.is_empty()
            && let Some(place) = pin(dir, root)
        {
            places.push(place);
        }
    });
    (places, walked)
}

impl Walked {
    /// Reads each directory beneath the root (`pin`, shown as `shown`) within the bounds, and
    /// calls `found` with each one and the protected entries in it; records what it read and
    /// saw.
    fn each(
        &mut self,
        pin: std::os::fd::BorrowedFd,
        shown: &[u8],
        mut found: impl FnMut(&Dir, &[Vec<u8>]),
    ) {
        let Some(start) = reopen(pin, c".") else {
            return;
        };
        let mut stack = vec![Dir {
            fd: start,
            path: shown.to_vec(),
            depth: 0,
        }];
        while let Some(dir) = stack.pop() {
            if self.read.len() >= MAX_DIRS {
                self.cut = true;
                return;
            }
            let Ok(st) = nix::sys::stat::fstat(&dir.fd) else {
                continue;
            };
            let id = (st.st_dev, st.st_ino);
            if !self.read.insert(id) {
                continue;
            }
            let (names, subdirs) = self.entries(&dir);
            for name in &names {
                self.seen.insert((id, name.clone()));
            }
            found(&dir, &names);
            if dir.depth >= MAX_DEPTH {
                continue;
            }
            // In reverse, so that the stack reads them in name order.
            for name in subdirs.into_iter().rev() {
                let Ok(c) = CString::new(name.clone()) else {
                    continue;
                };
                if let Some(fd) = reopen(dir.fd.as_fd(), &c) {
                    let mut path = dir.path.clone();
                    path.push(b'/');
                    path.extend_from_slice(&name);
                    stack.push(Dir {
                        fd,
                        path,
                        depth: dir.depth + 1,
                    });
                }
            }
        }
    }

    /// The protected entries of `dir`, and its subdirectories to walk, in name order; the
    /// identity of its `.git` directory is kept as a known repository.
    fn entries(&mut self, dir: &Dir) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut names, mut subdirs) = (Vec::new(), Vec::new());
        let Ok(fd) = dir.fd.try_clone() else {
            return (names, subdirs);
        };
        let Ok(mut read) = nix::dir::Dir::from_fd(fd) else {
            return (names, subdirs);
        };
        for entry in read.iter().flatten() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if self.firsts.iter().any(|f| f == name) {
                names.push(name.to_vec());
                if name == b".git"
                    && let Some(st) = stat_at(dir.fd.as_fd(), name)
                    && st.st_mode & libc::S_IFMT == libc::S_IFDIR
                {
                    self.repositories.insert((st.st_dev, st.st_ino));
                }
                continue;
            }
            if FILLED.iter().any(|f| f.as_bytes() == name) {
                continue;
            }
            let is_dir = match entry.file_type() {
                Some(nix::dir::Type::Directory) => true,
                Some(_) => false,
                None => stat_at(dir.fd.as_fd(), name)
                    .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
            };
            if is_dir {
                subdirs.push(name.to_vec());
            }
        }
        names.sort();
        subdirs.sort();
        (names, subdirs)
    }

    /// The protected entries made beneath the root since [`walk`] (the call has ended): each
    /// with the directory it is in (pinned), that directory as shown, and its name. An entry
    /// counts as made when the launch's walk read its directory and did not see it there, or
    /// when its directory is one that walk did not read (made since) and that walk was whole.
    pub fn made(&self) -> Vec<(OwnedFd, String, Vec<u8>)> {
        let Some((pin, shown)) = &self.root else {
            return Vec::new();
        };
        let mut again = Walked {
            firsts: self.firsts.clone(),
            ..Walked::default()
        };
        let mut out = Vec::new();
        again.each(pin.as_fd(), shown.as_bytes(), |dir, names| {
            // The top's own names are watched one by one (`Absent::watch`).
            if dir.depth == 0 {
                return;
            }
            let Ok(st) = nix::sys::stat::fstat(&dir.fd) else {
                return;
            };
            let id = (st.st_dev, st.st_ino);
            let known_dir = self.read.contains(&id);
            if !known_dir && self.cut {
                return;
            }
            for name in names {
                if self.seen.contains(&(id, name.clone())) {
                    continue;
                }
                if name == b".git" && self.is_worktree_link(&dir.fd) {
                    continue;
                }
                if let Ok(fd) = dir.fd.try_clone() {
                    let path = String::from_utf8_lossy(&dir.path).into_owned();
                    out.push((fd, path, name.clone()));
                }
            }
        });
        out
    }

    /// Whether the `.git` in `dir` is a file that makes `dir` a linked worktree of a repository
    /// the launch's walk met: `gitdir: <repo>/.git/worktrees/NAME`, whose `commondir` is `../..`.
    fn is_worktree_link(&self, dir: &OwnedFd) -> bool {
        let Some(text) = read_small(dir.as_fd(), c".git") else {
            return false;
        };
        let Some(gitdir) = text.trim().strip_prefix("gitdir:").map(str::trim) else {
            return false;
        };
        let here = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let Ok(here) = std::fs::read_link(here) else {
            return false;
        };
        let Ok(admin) = std::fs::canonicalize(here.join(gitdir)) else {
            return false;
        };
        let (Some(worktrees), Some(git)) = (admin.parent(), admin.parent().and_then(Path::parent))
        else {
            return false;
        };
        let named = |p: &Path, n: &str| p.file_name() == Some(OsStr::new(n));
        if !named(worktrees, "worktrees") || !named(git, ".git") {
            return false;
        }
        let known = std::fs::symlink_metadata(git).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt as _;
            m.is_dir() && self.repositories.contains(&(m.dev(), m.ino()))
        });
        let common = std::fs::read_to_string(admin.join("commondir"));
        known && common.is_ok_and(|c| c.trim() == "../..")
    }
}

/// `name` in `dir`, opened as a directory to read, no link followed.
fn reopen(dir: std::os::fd::BorrowedFd, name: &std::ffi::CStr) -> Option<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::fcntl::openat(dir, name, flags, Mode::empty()).ok()
}

fn stat_at(dir: std::os::fd::BorrowedFd, name: &[u8]) -> Option<nix::sys::stat::FileStat> {
    let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    nix::sys::stat::fstatat(dir, OsStr::from_bytes(name), flags).ok()
}

/// A regular file `name` in `dir`, no link followed, when it holds at most 4 KiB of text.
fn read_small(dir: std::os::fd::BorrowedFd, name: &std::ffi::CStr) -> Option<String> {
    use std::io::Read as _;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::openat(dir, name, flags, Mode::empty()).ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_size > 4096 {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `dir` pinned as a place of `root`'s (its rights), when it can be.
fn pin(dir: &Dir, root: &Writable) -> Option<Place> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::openat(dir.fd.as_fd(), c".", flags, Mode::empty()).ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    Some(Writable {
        path: CString::new(dir.path.clone()).ok()?,
        dev: st.st_dev,
        ino: st.st_ino,
        access: root.access,
        pin: fd,
    })
}
