//! Paths no call changes, whatever its write effects say: the files beside a project that
//! programs outside guard run or follow later with the developer's rights (git's hooks and
//! config, an agent's settings, an editor's tasks, direnv's `.envrc`). Inside a directory a call
//! may write, each of these that exists is mounted read-only over itself in the call's mount
//! view (`child::mounts`): landlock, which grants a whole subtree, cannot refuse one name within
//! it, and a mount point can be neither written through, renamed nor removed. The directories
//! on the way to one (`.git` for `.git/hooks`) are mounted over themselves too, writable: a
//! call may change what git changes there, but may not move `.git` aside and put a copy of its
//! own, with hooks, in its place; and so are a project beneath the workspace that holds one and
//! the directories above it, which a call may not move where no walk looks.

use std::{
    ffi::CString,
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
};

use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

use super::landlock::Writable;

mod delegated;
mod discover;
mod gitconfig;
mod planted;

pub use delegated::handed;
pub use planted::{Absent, Planted};

/// The names kept read-only beneath each writable directory: the union of what careful peers
/// protect. A name whose parent is not there, or that is a symlink, is not protected (see the
/// the book's security table).
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

/// Most protected paths one call's mount view holds; a workspace with more (a call could
/// make decoys, `.git/modules/*` by the hundred, to push a real one out) is refused.
pub const MAX: usize = 1024;

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

/// The protected name that `path` is, or is beneath, wherever it sits (`names`, or [`NAMES`],
/// matched at every depth, as a repository or project may be anywhere beneath a workspace); a
/// submodule's or linked worktree's git files (`.git/modules/NAME/hooks`); or a `.git` file, a
/// pointer to a git directory with hooks of its own. What Claude Code's own Write and Edit are
/// held to, as a confined call's mount view holds its shell (`client::hook`).
pub fn named(path: &std::path::Path, names: Option<&[String]>) -> Option<String> {
    let comps: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    let listed: Vec<&str> = match names {
        Some(names) => names.iter().map(String::as_str).collect(),
        None => NAMES.to_vec(),
    };
    for i in 0..comps.len() {
        for name in &listed {
            let parts: Vec<&str> = name.split('/').collect();
            if comps[i..].starts_with(&parts) {
                return Some((*name).to_owned());
            }
        }
        if comps[i] != GIT {
            continue;
        }
        let mut j = i + 1;
        while j + 1 < comps.len()
            && NESTED
                .iter()
                .any(|n| n.rsplit('/').next() == Some(comps[j]))
        {
            j += 2;
        }
        if j > i + 1 && comps.get(j).is_some_and(|c| PER_REPOSITORY.contains(c)) {
            return Some(comps[i..=j].join("/"));
        }
    }
    (comps.last() == Some(&GIT)).then(|| GIT.to_owned())
}

/// The protected names (`names`, or [`NAMES`]) that exist beneath the directories of
/// `writable`, and the directories on the way to them, each found by descriptor from its
/// directory (no symlink followed) and pinned, as a writable place is, ancestors first, as they
/// are to be mounted; and those that are not there (`Absent`), found by the same look. More
/// than [`MAX`] is an error: no protected path is left out silently.
/// The call's own temporary directory (`tmp`) is not looked in: guardd made it for the call and
/// removes it before its caller hears of its end, so nothing outside guard follows what it holds.
pub fn within(
    writable: &[Writable],
    names: Option<&[String]>,
    tmp: Option<&std::path::Path>,
) -> Result<(Vec<Kept>, Absent), Unkept> {
    let mut out: Vec<Kept> = Vec::new();
    let mut absent = Absent::default();
    let listed: Vec<String> = match names {
        Some(names) => names.to_vec(),
        None => NAMES.iter().map(|n| (*n).to_owned()).collect(),
    };
    let is_tmp = |w: &Writable| tmp.is_some_and(|t| t.as_os_str().as_bytes() == w.path.as_bytes());
    // Nothing is beneath a file: only directories are looked in.
    let is_dir = |w: &Writable| {
        nix::sys::stat::fstat(&w.pin).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
    };
    let mut firsts: Vec<&str> = listed
        .iter()
        .filter_map(|n| n.split('/').next())
        .chain([GIT, BARE_HEAD])
        .collect();
    firsts.sort_unstable();
    firsts.dedup();
    for w in writable.iter().filter(|w| !is_tmp(w) && is_dir(w)) {
        let (places, walked) = discover::walk(w, &firsts);
        if walked.cut() {
            return Err(Unkept::Unwalked(w.path.to_string_lossy().into_owned()));
        }
        absent.walks.push(walked);
        keep_beneath(writable, w, &listed, true, &mut out, &mut absent)?;
        for place in &places {
            pin_the_way(w, place, &mut out);
            keep_beneath(writable, place, &listed, false, &mut out, &mut absent)?;
        }
    }
    Ok((out, absent))
}

/// Pins `place` (a directory beneath `w` holding a protected entry) and each directory between
/// `w` and it as mount points, ancestors first: a call can neither rename a project nor the
/// directory holding it (into `node_modules`, where the walk does not look, and leave a link
/// in its place) to write its hooks in the next call.
fn pin_the_way(w: &Writable, place: &Writable, out: &mut Vec<Kept>) {
    let Some(rel) = place
        .path
        .as_bytes()
        .strip_prefix(w.path.as_bytes())
        .and_then(|r| r.strip_prefix(b"/"))
        .and_then(|r| std::str::from_utf8(r).ok())
    else {
        return;
    };
    let ends = rel.match_indices('/').map(|(i, _)| i).chain([rel.len()]);
    for end in ends {
        let Ok((dir, false)) = beneath(w, &rel[..end]) else {
            return;
        };
        let known = |k: &Kept| (k.place.dev, k.place.ino) == (dir.dev, dir.ino);
        if !out.iter().any(known) {
            out.push(Kept {
                place: dir,
                read_only: false,
                link: false,
            });
        }
    }
}

/// Keeps the protected names beneath `w` (a writable directory, `top`, or a directory beneath
/// one that holds a protected entry) and watches those absent. A name of one component absent
/// beneath a directory below the top is not watched: the walk at the call's end finds it made
/// (`discover`).
fn keep_beneath(
    writable: &[Writable],
    w: &Writable,
    listed: &[String],
    top: bool,
    out: &mut Vec<Kept>,
    absent: &mut Absent,
) -> Result<(), Unkept> {
    git_files(w, out, absent, top);
    // What the repository's config hands to its worktree (`delegated`) is watched at every
    // depth: the walk at the call's end does not know its names.
    let base = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
    for name in delegated::names(w) {
        keep_path(writable, &base.join(name), out, absent, 0);
    }
    let names = listed.iter().cloned().chain(nested(w));
    for (i, name) in names.enumerate() {
        let watched = i < listed.len() && (top || name.contains('/'));
        if keep(w, &name, out) == Err(Errno::ENOENT) && watched {
            absent.watch(w, &name);
        }
        if let Some(target) = out.last().filter(|k| k.link).map(|k| k.place.path.clone()) {
            keep_target(writable, &target, out);
        }
        if out.len() > MAX {
            return Err(Unkept::TooMany(w.path.to_string_lossy().into_owned()));
        }
    }
    Ok(())
}

/// Why the protected names beneath a writable directory cannot all be kept: the call is not
/// launched with some of them writable.
#[derive(Debug, thiserror::Error)]
pub enum Unkept {
    /// More protected paths than a mount view holds.
    #[error(
        "more than {MAX} protected paths beneath {0} (submodules' and worktrees' git files \
         included): the call is not launched with some of them writable"
    )]
    TooMany(String),
    /// More directories than the walk reads: a repository may lie past them.
    #[error(
        "more than {max} directories beneath {0} outside the trees programs fill (node_modules, \
         target, .venv, ...): guard cannot see every repository there, so no call that \
         writes there is launched; make them fewer (a generated tree may take one of those \
         names) or give the tool another directory to write",
        max = discover::MAX_DIRS
    )]
    Unwalked(String),
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

/// The path `path` a repository's config names (`delegated`), kept where a call may write it:
/// beneath whichever of `writable` holds it, in the project or beside it (`../shared-hooks`),
/// watched where absent. A link on the way (`etc -> conf`, `etc/hooks`) is kept itself, so a
/// call cannot point it elsewhere, and the path it leads to is kept in turn.
fn keep_path(
    writable: &[Writable],
    path: &std::path::Path,
    out: &mut Vec<Kept>,
    absent: &mut Absent,
    links: usize,
) {
    let holder = writable.iter().filter_map(|w| {
        let root = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
        let rel = path.strip_prefix(root).ok()?.to_str()?;
        (!rel.is_empty() && invalid(rel).is_none()).then(|| (w, rel.to_owned()))
    });
    // The deepest writable directory that holds it.
    let Some((w, rel)) = holder.min_by_key(|(_, rel)| rel.len()) else {
        return;
    };
    match keep(w, &rel, out) {
        Err(Errno::ENOENT) => absent.watch(w, &rel),
        Err(Errno::ELOOP) if links < 8 => {
            let ends = rel.match_indices('/').map(|(i, _)| i);
            for end in ends {
                let on_the_way = &rel[..end];
                if !matches!(beneath(w, on_the_way), Ok((_, true))) {
                    continue;
                }
                let _ = keep(w, on_the_way, out);
                let link = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()))
                    .join(on_the_way);
                if let Ok(target) = std::fs::canonicalize(&link) {
                    keep_path(
                        writable,
                        &target.join(&rel[end + 1..]),
                        out,
                        absent,
                        links + 1,
                    );
                }
                return;
            }
        }
        Ok(()) => {
            if let Some(target) = out.last().filter(|k| k.link).map(|k| k.place.path.clone()) {
                keep_target(writable, &target, out);
            }
        }
        Err(_) => {}
    }
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

/// `.git` beneath `w`: a pointer file kept read-only; a directory's index watched for the
/// gitlinks a call adds (`gitlinks`); none at all watched for one a call makes; and a `HEAD`
/// beside it watched where there is none. Beneath a directory below the top, the walk at the
/// call's end finds those two made instead (`discover`).
fn git_files(w: &Writable, out: &mut Vec<Kept>, absent: &mut Absent, top: bool) {
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
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            if let Some(index) = super::gitlinks::Index::at_start(&w.pin) {
                let root = w.path.to_string_lossy().into_owned();
                absent.indexes.push((index, root));
            }
        }
        Err(Errno::ENOENT) if top => absent.watch(w, GIT),
        _ => return,
    }
    // With `.git` or without: a `HEAD` there (beside `objects/` and `refs/`) makes git take
    // the directory for a bare repository.
    if top && !discover::is_bare(w.pin.as_fd()) {
        absent.watch(w, BARE_HEAD);
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
        // One more than fits: past that, `within` refuses the launch rather than leave any out.
        for entry in entries.flatten().take(MAX + 1) {
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
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // From the pin itself: most names are not there, and each is looked for at every launch.
    let mut at: Option<OwnedFd> = None;
    for part in name.split('/') {
        let from = at.as_ref().map_or(w.pin.as_fd(), AsFd::as_fd);
        at = Some(nix::fcntl::openat(from, part, flags, Mode::empty())?);
    }
    let at = at.ok_or(Errno::ENOENT)?;
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

#[cfg(test)]
mod tests;
