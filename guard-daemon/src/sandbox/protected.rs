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
        fd::{AsFd as _, AsRawFd as _, OwnedFd},
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

/// A repository's `.git`: a file (a linked worktree's or a submodule's checkout) names the git
/// directory git uses, hooks and config with it, so such a file is kept read-only; where there
/// is none, one made during the call is planted (a pointer to a git directory of the call's).
const GIT: &str = ".git";

/// What git takes for a bare repository at the workspace's root once `.git` is unusable (the
/// call moves `.git/HEAD` aside and makes `HEAD`, `objects/`, `refs/` and `config` beside it):
/// a `HEAD` made there is planted.
const BARE_HEAD: &str = "HEAD";

/// Most protected paths one call's mount view holds.
pub const MAX: usize = 256;

/// A path to keep in place in the call's mount view.
#[derive(Debug)]
pub struct Kept {
    pub place: Writable,
    /// Read-only (a protected name), or only pinned as a mount point (a directory on the way
    /// to one).
    pub read_only: bool,
    /// The name is a symlink, kept as such (a mount on the link itself: it can be neither
    /// removed nor pointed elsewhere); what it leads to is kept beside it when a call may
    /// write there.
    pub link: bool,
}

/// Why `name` cannot be a protected name (`[workspaces] protected`), if it cannot: a relative
/// path of plain names, no glob.
pub fn invalid(name: &str) -> Option<&'static str> {
    let path = std::path::Path::new(name);
    if name.is_empty() || path.is_absolute() {
        return Some("a protected name is a path relative to each writable directory");
    }
    if name.contains(['*', '?', '[', '\0'])
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some("a protected name is plain names joined by /, without ., .., globs or //");
    }
    None
}

/// The protected names (`names`, or [`NAMES`]) that exist beneath the directories of
/// `writable`, and the directories on the way to them, each found by descriptor from its
/// directory (no symlink followed) and pinned, as a writable place is, ancestors first, as they
/// are to be mounted; and those that are not there (`Absent`), found by the same look.
pub fn within(writable: &[Writable], names: Option<&[String]>) -> (Vec<Kept>, Absent) {
    let mut out: Vec<Kept> = Vec::new();
    let mut absent = Absent::default();
    let listed: Vec<String> = match names {
        Some(names) => names.to_vec(),
        None => NAMES.iter().map(|n| (*n).to_owned()).collect(),
    };
    for w in writable {
        git_files(w, &mut out, &mut absent);
        let names = listed.iter().cloned().chain(nested(w));
        for (i, name) in names.enumerate() {
            if keep(w, &name, &mut out) == Err(Errno::ENOENT) && i < listed.len() {
                absent.watch(w, &name);
            }
            if let Some(target) = out.last().filter(|k| k.link).map(|k| k.place.path.clone()) {
                keep_target(writable, &target, &mut out);
            }
            if out.len() >= MAX {
                tracing::warn!(
                    "more than {MAX} protected paths beneath {}: the rest are not kept read-only",
                    w.path.to_string_lossy()
                );
                out.truncate(MAX);
                return (out, absent);
            }
        }
    }
    (out, absent)
}

/// Keeps `name` beneath `w` read-only and the directories on the way to it in place, each
/// once; ENOENT when it is not there.
fn keep(w: &Writable, name: &str, out: &mut Vec<Kept>) -> Result<(), Errno> {
    let on_the_way = name.match_indices('/').map(|(i, _)| (&name[..i], false));
    for (path, read_only) in on_the_way.chain([(name, true)]) {
        let (place, link) = beneath(w, path)?;
        if link && !read_only {
            // A directory on the way that is a link: the name is not beneath `w` at all.
            return Err(Errno::ELOOP);
        }
        let known = |k: &Kept| (k.place.dev, k.place.ino) == (place.dev, place.ino);
        if !out.iter().any(known) {
            out.push(Kept {
                place,
                read_only,
                link,
            });
        }
    }
    Ok(())
}

/// What the protected link at `link` leads to, kept read-only (and the directories on the
/// way to it in place) when it is beneath a directory of `writable`: written through the link,
/// or by its own name, it would change what the link protects.
fn keep_target(writable: &[Writable], link: &CString, out: &mut Vec<Kept>) {
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(link.as_bytes()));
    let Ok(target) = std::fs::canonicalize(path) else {
        return;
    };
    for w in writable {
        let root = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
        if let Ok(rel) = target.strip_prefix(root)
            && let Some(rel) = rel.to_str().filter(|r| !r.is_empty())
        {
            let _ = keep(w, rel, out);
            return;
        }
    }
}

/// `.git` beneath `w`: a pointer file kept read-only; none at all, or a directory without a
/// `HEAD` beside it, watched for what a call makes in their place.
fn git_files(w: &Writable, out: &mut Vec<Kept>, absent: &mut Absent) {
    let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    match nix::sys::stat::fstatat(w.pin.as_fd(), GIT, flags) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
            if let Ok((place, false)) = beneath(w, GIT) {
                out.push(Kept {
                    place,
                    read_only: true,
                    link: false,
                });
            }
        }
        Ok(st)
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR
                && nix::sys::stat::fstatat(w.pin.as_fd(), BARE_HEAD, flags)
                    == Err(Errno::ENOENT) =>
        {
            absent.watch(w, BARE_HEAD);
        }
        Err(Errno::ENOENT) => absent.watch(w, GIT),
        _ => {}
    }
}

/// The protected names that were not there when a call started, beneath its writable
/// directories: no mount can keep them from being made, so they are looked at again at the
/// call's end, and each one made is a divergence on its receipt (`Effect::Planted`).
#[derive(Debug, Default)]
pub struct Absent(Vec<(OwnedFd, String, String)>);

/// A protected name made during a call, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planted {
    /// The path it was made at.
    pub path: String,
    /// Where it was moved to, so that nothing looking for the name finds it; `Err` says why it
    /// could not be (it is then still there).
    pub moved_to: Result<String, String>,
}

impl Absent {
    /// Watches `name` beneath `w`.
    fn watch(&mut self, w: &Writable, name: &str) {
        if let Ok(dir) = w.pin.try_clone() {
            let shown = format!("{}/{name}", w.path.to_string_lossy());
            self.0.push((dir, name.to_owned(), shown));
        }
    }

    /// Those made since, each moved aside in its directory (`NAME.guard-planted-TAG`): the
    /// call's processes are gone, and what it planted does not wait there for git, direnv or
    /// an agent to run it with the developer's rights.
    pub fn made_and_moved(&self, tag: &str) -> Vec<Planted> {
        self.0
            .iter()
            .filter(|(dir, name, _)| {
                let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
                nix::sys::stat::fstatat(dir.as_fd(), name.as_str(), flags).is_ok()
            })
            .map(|(dir, name, shown)| Planted {
                path: shown.clone(),
                moved_to: move_aside(dir, name, tag)
                    .map(|new| format!("{}{new}", &shown[..shown.len() - name.len()]))
                    .map_err(|e| e.desc().to_owned()),
            })
            .collect()
    }
}

/// Renames `name` beneath `dir` to `NAME.guard-planted-TAG` beside itself, each directory on
/// the way opened without following a link (the call made them, and may have made them links
/// to anywhere root reaches); never over an existing file. Returns the new relative path.
fn move_aside(dir: &OwnedFd, name: &str, tag: &str) -> Result<String, Errno> {
    let (parent, last) = match name.rsplit_once('/') {
        Some((parent, last)) => (Some(parent), last),
        None => (None, name),
    };
    let mut at: OwnedFd = dir.try_clone().map_err(|_| Errno::EMFILE)?;
    for part in parent.into_iter().flat_map(|p| p.split('/')) {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        at = nix::fcntl::openat(at.as_fd(), part, flags, Mode::empty())?;
    }
    let new = format!("{last}.guard-planted-{tag}");
    let (from, to) = (
        CString::new(last).map_err(|_| Errno::EINVAL)?,
        CString::new(new.as_str()).map_err(|_| Errno::EINVAL)?,
    );
    let fd = at.as_raw_fd();
    // SAFETY: two NUL-terminated names and a descriptor of ours; renameat2 has no wrapper in
    // every libc guard builds against (musl's guard-exec links this crate too).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            fd,
            from.as_ptr(),
            fd,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    Ok(match parent {
        Some(p) => format!("{p}/{new}"),
        None => new,
    })
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

/// `name` beneath the directory `w`, when it is there and no directory on the way to it is a
/// symlink, and whether it is one itself; ENOENT when it, or a directory on the way, is not
/// there.
fn beneath(w: &Writable, name: &str) -> Result<(Writable, bool), Errno> {
    let mut at: OwnedFd = w.pin.try_clone().map_err(|_| Errno::EMFILE)?;
    for part in name.split('/') {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        at = nix::fcntl::openat(at.as_fd(), part, flags, Mode::empty())?;
    }
    let stat = nix::sys::stat::fstat(&at)?;
    let link = stat.st_mode & libc::S_IFMT == libc::S_IFLNK;
    let mut path = w.path.as_bytes().to_vec();
    path.push(b'/');
    path.extend_from_slice(std::ffi::OsStr::new(name).as_bytes());
    let place = Writable {
        path: CString::new(path).map_err(|_| Errno::EINVAL)?,
        dev: stat.st_dev,
        ino: stat.st_ino,
        access: w.access,
        pin: at,
    };
    Ok((place, link))
}
