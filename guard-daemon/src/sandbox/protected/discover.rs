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

/// Directories one walk reads at most (about a quarter of a second): past them, the rest is not
/// looked in, and the walk is [`Walked::cut`].
pub const MAX_DIRS: usize = 16_384;

/// Trees that programs fill and no developer works in: not walked. A repository the walk found
/// cannot be moved into one (`protected::within` pins it and the directories above it).
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
    /// Each protected entry seen: its directory's identity, its name and its own inode (a
    /// directory removed and made again may get its inode back, an entry too, but not both
    /// with the same entry in it).
    seen: HashSet<(Id, Vec<u8>, u64)>,
    /// Each directory read.
    read: HashSet<Id>,
    /// The `.git` directories met: the repositories a worktree's `.git` file may point into.
    repositories: HashSet<Id>,
    /// Whether the bound stopped the walk (`MAX_DIRS`).
    cut: bool,
}

/// A directory beneath the root that holds a protected entry: pinned, as a writable place.
pub type Place = Writable;

/// One directory on the walk's queue.
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
    /// Whether the walk stopped at [`MAX_DIRS`], leaving directories unread.
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// The writable directory walked, as shown.
    pub fn shown(&self) -> &str {
        self.root.as_ref().map_or("", |(_, shown)| shown)
    }

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
        let mut queue = std::collections::VecDeque::from([Dir {
            fd: start,
            path: shown.to_vec(),
            depth: 0,
        }]);
        while let Some(dir) = queue.pop_front() {
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
                self.seen
                    .insert((id, name.clone(), entry_ino(dir.fd.as_fd(), name)));
            }
            found(&dir, &names);
            for name in subdirs {
                let Ok(c) = CString::new(name.clone()) else {
                    continue;
                };
                if let Some(fd) = reopen(dir.fd.as_fd(), &c) {
                    let mut path = dir.path.clone();
                    path.push(b'/');
                    path.extend_from_slice(&name);
                    queue.push_back(Dir {
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
                if name == super::BARE_HEAD.as_bytes() && !is_bare(dir.fd.as_fd()) {
                    continue;
                }
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
    /// with the directory it is in (pinned), that directory as shown, and its name; and whether
    /// this walk stopped at [`MAX_DIRS`] (what lies past was not looked at). An entry counts
    /// as made when the launch's walk did not see it in its directory.
    pub fn made(&self) -> (Vec<(OwnedFd, String, Vec<u8>)>, bool) {
        let Some((pin, shown)) = &self.root else {
            return (Vec::new(), false);
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
            for name in names {
                let ino = entry_ino(dir.fd.as_fd(), name);
                if self.seen.contains(&(id, name.clone(), ino)) {
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
        (out, again.cut)
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

/// Whether `dir` is what git takes for a bare repository: `HEAD` with `objects/` and `refs/`
/// beside it, or with a `commondir` file, which names where git looks for them instead (a file
/// named `HEAD` alone is a file: a log's, an archive's).
pub(super) fn is_bare(dir: std::os::fd::BorrowedFd) -> bool {
    let is_dir = |name: &[u8]| {
        stat_at(dir, name).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
    };
    stat_at(dir, super::BARE_HEAD.as_bytes()).is_some()
        && (stat_at(dir, b"commondir").is_some() || (is_dir(b"objects") && is_dir(b"refs")))
}

/// The inode of `name` in `dir`, no link followed; 0 when it is gone.
fn entry_ino(dir: std::os::fd::BorrowedFd, name: &[u8]) -> u64 {
    stat_at(dir, name).map_or(0, |st| st.st_ino)
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
