//! Paths no call changes, whatever its write effects say: the files beside a project that
//! programs outside guard run or follow later with the developer's rights (git's hooks and
//! config, an agent's settings, an editor's tasks, direnv's `.envrc`). Inside a directory a call
//! may write, each of these that exists is mounted read-only over itself in the call's mount
//! view (`child::mounts`): landlock, which grants a whole subtree, cannot refuse one name within
//! it, and a mount point can be neither written through, renamed nor removed. The directories
//! on the way to one (`.git` for `.git/hooks`) are mounted over themselves too, writable: a
//! call may change what git changes there, but may not move `.git` aside and put a copy of its
//! own, with hooks, in its place.

use std::{
    ffi::CString,
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
};

use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

use super::landlock::Writable;

/// The names kept read-only beneath each writable directory: the union of what careful peers
/// protect. A name whose parent is not there, or that is a symlink, is not protected (see the
/// README's security table).
pub const NAMES: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".gitmodules",
    ".husky",
    ".guard",
    ".claude",
    ".mcp.json",
    ".codex",
    ".agents",
    ".vscode",
    ".idea",
    ".cursor",
    ".envrc",
    ".github/hooks",
];

/// Git's own directories of the other repositories a repository holds, whose files run as
/// the main one's do: each submodule's (`.git/modules/NAME`) and each linked worktree's
/// (`.git/worktrees/NAME`); beneath each of these, `PER_REPOSITORY` is kept read-only.
const NESTED: &[&str] = &[".git/modules", ".git/worktrees"];

/// What is kept read-only in each nested git directory.
const PER_REPOSITORY: &[&str] = &["hooks", "config", "config.worktree", "commondir", "gitdir"];

/// Most protected paths one call's mount view holds.
pub const MAX: usize = 256;

/// A path to keep in place in the call's mount view.
#[derive(Debug)]
pub struct Kept {
    pub place: Writable,
    /// Read-only (a protected name), or only pinned as a mount point (a directory on the way
    /// to one).
    pub read_only: bool,
}

/// The protected names that exist beneath the directories of `writable`, and the directories
/// on the way to them, each found by descriptor from its directory (no symlink followed) and
/// pinned, as a writable place is, ancestors first, as they are to be mounted; and those of
/// `NAMES` that are not there (`Absent`), found by the same look.
pub fn within(writable: &[Writable]) -> (Vec<Kept>, Absent) {
    let mut out: Vec<Kept> = Vec::new();
    let mut absent = Vec::new();
    for w in writable {
        let names = NAMES.iter().map(|n| (*n).to_owned()).chain(nested(w));
        for (i, name) in names.enumerate() {
            let name = name.as_str();
            let on_the_way = name.match_indices('/').map(|(i, _)| (&name[..i], false));
            for (path, read_only) in on_the_way.chain([(name, true)]) {
                let place = match beneath(w, path) {
                    Ok(place) => place,
                    Err(Errno::ENOENT) if read_only && i < NAMES.len() => {
                        if let Ok(dir) = w.pin.try_clone() {
                            let shown = format!("{}/{name}", w.path.to_string_lossy());
                            absent.push((dir, name.to_owned(), shown));
                        }
                        continue;
                    }
                    Err(_) => continue,
                };
                let known = |k: &Kept| (k.place.dev, k.place.ino) == (place.dev, place.ino);
                if !out.iter().any(known) {
                    out.push(Kept { place, read_only });
                }
            }
            if out.len() >= MAX {
                tracing::warn!(
                    "more than {MAX} protected paths beneath {}: the rest are not kept read-only",
                    w.path.to_string_lossy()
                );
                out.truncate(MAX);
                return (out, Absent(absent));
            }
        }
    }
    (out, Absent(absent))
}

/// The protected names that were not there when a call started, beneath its writable
/// directories: no mount can keep them from being made, so they are looked at again at the
/// call's end, and each one made is a divergence on its receipt (`Effect::Planted`).
#[derive(Debug, Default)]
pub struct Absent(Vec<(OwnedFd, String, String)>);

impl Absent {
    /// Those made since, by the paths they were to have.
    pub fn made(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(dir, name, _)| {
                let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
                nix::sys::stat::fstatat(dir.as_fd(), name.as_str(), flags).is_ok()
            })
            .map(|(_, _, shown)| shown.clone())
            .collect()
    }
}

/// The `PER_REPOSITORY` names of each submodule's and linked worktree's git directory beneath
/// `w` (one level: a submodule's own submodules are not walked).
fn nested(w: &Writable) -> Vec<String> {
    let base = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
    let mut out = Vec::new();
    for dir in NESTED {
        let Ok(entries) = std::fs::read_dir(base.join(dir)) else {
            continue;
        };
        for entry in entries.flatten().take(MAX) {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            out.extend(PER_REPOSITORY.iter().map(|p| format!("{dir}/{name}/{p}")));
        }
    }
    out
}

/// `name` beneath the directory `w`, when it is there and no component of it is a symlink
/// (ELOOP); ENOENT when it, or a directory on the way, is not there.
fn beneath(w: &Writable, name: &str) -> Result<Writable, Errno> {
    let mut at: OwnedFd = w.pin.try_clone().map_err(|_| Errno::EMFILE)?;
    for part in name.split('/') {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        at = nix::fcntl::openat(at.as_fd(), part, flags, Mode::empty())?;
    }
    let stat = nix::sys::stat::fstat(&at)?;
    if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(Errno::ELOOP);
    }
    let mut path = w.path.as_bytes().to_vec();
    path.push(b'/');
    path.extend_from_slice(std::ffi::OsStr::new(name).as_bytes());
    Ok(Writable {
        path: CString::new(path).map_err(|_| Errno::EINVAL)?,
        dev: stat.st_dev,
        ino: stat.st_ino,
        access: w.access,
        pin: at,
    })
}
