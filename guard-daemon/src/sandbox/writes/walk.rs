//! Finding the file an open names, as the thread that asked would find it: component by
//! component from its root or its directory, links followed by guardd itself, so that the names
//! that mean something else to guardd than to the thread mean the thread's here: procfs's
//! `self` and `thread-self` (however the path reaches `/proc`: `//proc/self`, `/proc/./self`,
//! a directory descriptor on `/proc`, a link such as `/dev/stdout` through it), and procfs's
//! magic links (`/proc/PID/fd/N`, `cwd`), which lead to the thread's own files. Each directory
//! on the way is kept by identity (device, inode), root first: the rules are judged on that
//! chain, as landlock walks it. The walk runs with the thread's file-system identity
//! (`as_user`), so that what it finds is what the thread may find: guardd's own rights tell a
//! call nothing of names it cannot see.

use std::{
    collections::VecDeque,
    ffi::{OsStr, OsString},
    os::{
        fd::{AsFd as _, AsRawFd as _, OwnedFd},
        unix::ffi::{OsStrExt as _, OsStringExt as _},
    },
    path::PathBuf,
};

use nix::{
    fcntl::{OFlag, openat, readlinkat},
    sys::{
        stat::{FileStat, Mode, fstat},
        statfs::{PROC_SUPER_MAGIC, fstatfs},
    },
};

/// A file's identity: device and inode.
pub(super) type Id = (u64, u64);

/// At most this many links are followed in one name (the kernel's own bound).
const MAX_LINKS: u32 = 40;

/// At most this many directories above a starting point are walked. A call can make its
/// working directory deeper (attack45), and then a `..` climbs past what the walk knows: such a
/// name is granted by no rule ([`Lost::Unfollowed`]), and so reported, rather than not judged.
pub(super) const MAX_DEPTH: usize = 4096;

/// What an open would reach.
pub(super) enum Found {
    /// An existing file, what `fstat` says of it, and the directories above it (its own
    /// identity last).
    File {
        fd: OwnedFd,
        stat: FileStat,
        chain: Vec<Id>,
    },
    /// No such file yet: its directory (opened), the chain down to it, and the name to create.
    New {
        dir: OwnedFd,
        chain: Vec<Id>,
        name: OsString,
    },
}

/// Where an absolute name, or `..` at the top, stays: `/`, or the directory of
/// `RESOLVE_IN_ROOT`; opened once, and its identity known.
pub(super) struct Root {
    fd: OwnedFd,
    id: Id,
}

impl Root {
    /// `fd` as a root.
    pub fn new(fd: OwnedFd) -> Option<Self> {
        let id = id(&fd)?;
        Some(Self { fd, id })
    }

    /// guardd's own `/` (a test's: a call's is its `/proc/PID/root`).
    #[cfg(test)]
    pub fn slash() -> Option<Self> {
        let fd = nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
        Self::new(fd)
    }

    /// A new descriptor of the root, and its chain.
    fn start(&self) -> Option<(OwnedFd, Vec<Id>)> {
        Some((self.fd.try_clone().ok()?, vec![self.id]))
    }
}

/// The thread a name is walked for: its pid (in guardd's namespace) and its root.
pub(super) struct Walker<'a> {
    pub pid: i32,
    pub root: &'a Root,
}

fn id(fd: &OwnedFd) -> Option<Id> {
    fstat(fd).ok().map(|s| (s.st_dev, s.st_ino))
}

fn path_flags() -> OFlag {
    OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// The directory above `dir`.
fn parent(dir: &OwnedFd) -> Result<OwnedFd, Lost> {
    fails(openat(
        dir,
        "..",
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        Mode::empty(),
    ))
}

/// What the link `name` in `dir` leads to, followed by the kernel (a magic link of procfs).
fn through(dir: &OwnedFd, name: &OsStr) -> Option<OwnedFd> {
    openat(dir, name, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()
}

/// Whether `dir` is on procfs (where `self` and the magic links are the thread's). Asked only
/// of a directory holding a name that could mean the thread's there (`self`, `thread-self`, a
/// link): each name costs the judge a few syscalls, and the thread waits for it.
fn on_proc(dir: &OwnedFd) -> bool {
    fstatfs(dir).is_ok_and(|s| s.filesystem_type() == PROC_SUPER_MAGIC)
}

/// Why a walk found no file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lost {
    /// The open fails for a reason of its own (a name that leads nowhere, a link loop, a name
    /// too long), which no rule decides.
    Fails,
    /// The walk cannot follow the name as the kernel does (a directory deeper than
    /// [`MAX_DEPTH`]): whether a rule grants it is unknown, so it is judged granted by none.
    Unfollowed,
}

/// `Lost::Fails` from anything that failed.
fn fails<T, E>(r: Result<T, E>) -> Result<T, Lost> {
    r.map_err(|_| Lost::Fails)
}

/// Thread `tid`'s process (`NStgid`) or its own id (`NSpid`), as the call's own procfs numbers
/// them: the innermost pid namespace's, which the call's `/proc` was mounted for
/// (`child::mounts`). `tid` is guardd's number of the thread.
fn in_call(tid: i32, key: &str) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.split_whitespace().last()?.parse().ok()
}

impl Walker<'_> {
    /// The chain of `dir`: its directories from the root down, by `..`; `Unfollowed` past
    /// [`MAX_DEPTH`], where the directories above are not known.
    pub fn chain_of(&self, dir: &OwnedFd) -> Result<Vec<Id>, Lost> {
        let top = self.root.id;
        let mut chain = vec![id(dir).ok_or(Lost::Fails)?];
        let mut at = fails(dir.try_clone())?;
        while chain.last() != Some(&top) {
            let up = parent(&at)?;
            let up_id = id(&up).ok_or(Lost::Fails)?;
            if Some(&up_id) == chain.last() {
                break; // the namespace's own root
            }
            if chain.len() > MAX_DEPTH {
                return Err(Lost::Unfollowed);
            }
            chain.push(up_id);
            at = up;
        }
        chain.reverse();
        Ok(chain)
    }

    /// What procfs's `name` means to the thread: `self` its process's directory, as the kernel
    /// resolves it (a thread's own `/proc/TID` has its own working directory and, unshared,
    /// descriptors), `thread-self` the thread's; other names are themselves.
    fn procfs_name(&self, name: OsString) -> Result<OsString, Lost> {
        let key = match name.as_bytes() {
            b"self" => "NStgid:",
            b"thread-self" => "NSpid:",
            _ => return Ok(name),
        };
        let id = in_call(self.pid, key).ok_or(Lost::Unfollowed)?;
        Ok(OsString::from(id.to_string()))
    }

    /// Finds what `name` names: from the root when it is absolute, else from `start` (the
    /// thread's directory, which only a relative name needs), following a last link unless
    /// `nofollow`.
    pub fn find(&self, start: Option<OwnedFd>, name: &[u8], nofollow: bool) -> Result<Found, Lost> {
        let mut parts: VecDeque<OsString> = VecDeque::new();
        push_front(&mut parts, name);
        let (mut at, mut chain) = if name.starts_with(b"/") {
            self.root.start().ok_or(Lost::Fails)?
        } else {
            let start = start.ok_or(Lost::Fails)?;
            let chain = self.chain_of(&start)?;
            (start, chain)
        };
        let mut links = 0;
        while let Some(part) = parts.pop_front() {
            let last = parts.is_empty();
            if part == ".." {
                if chain.len() > 1 {
                    at = parent(&at)?;
                    chain.pop();
                }
                continue;
            }
            let part = match part.as_bytes() {
                b"self" | b"thread-self" if on_proc(&at) => self.procfs_name(part)?,
                _ => part,
            };
            let next = match openat(&at, part.as_os_str(), path_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(nix::Error::ENOENT) if last => {
                    return Ok(Found::New {
                        dir: at,
                        chain,
                        name: part,
                    });
                }
                Err(_) => return Err(Lost::Fails),
            };
            let stat = fails(fstat(&next))?;
            if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
                links += 1;
                if last && nofollow || links > MAX_LINKS {
                    return Err(Lost::Fails); // ELOOP
                }
                if on_proc(&at) {
                    // A magic link: it leads to the thread's own file, not where its text says.
                    let target = through(&at, &part).ok_or(Lost::Fails)?;
                    if last {
                        return self.reached(target);
                    }
                    chain = self.chain_of(&target)?;
                    at = target;
                    continue;
                }
                let text = fails(readlinkat(&at, part.as_os_str()))?;
                push_front(&mut parts, text.as_bytes());
                if text.as_bytes().starts_with(b"/") {
                    (at, chain) = self.root.start().ok_or(Lost::Fails)?;
                }
                continue;
            }
            chain.push((stat.st_dev, stat.st_ino));
            if last {
                return Ok(Found::File {
                    fd: next,
                    stat,
                    chain,
                });
            }
            if stat.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(Lost::Fails); // ENOTDIR
            }
            at = next;
        }
        // The name ended on a directory (`.`, `..`, a trailing slash): that directory.
        let stat = fails(fstat(&at))?;
        Ok(Found::File {
            fd: at,
            stat,
            chain,
        })
    }

    /// What a magic link reached: a file in the tree of names (its chain found from its path,
    /// and checked to lead to it), or nothing landlock judges (a pipe, a socket, a deleted
    /// file).
    fn reached(&self, target: OwnedFd) -> Result<Found, Lost> {
        let want = id(&target).ok_or(Lost::Fails)?;
        let path = fails(std::fs::read_link(format!(
            "/proc/self/fd/{}",
            target.as_raw_fd()
        )))?;
        let bytes = path.as_os_str().as_bytes();
        if !bytes.starts_with(b"/") || bytes.ends_with(b" (deleted)") {
            return Err(Lost::Fails);
        }
        match self.find(None, bytes, true)? {
            found @ Found::File { stat, .. } if (stat.st_dev, stat.st_ino) == want => Ok(found),
            _ => Err(Lost::Fails),
        }
    }
}

/// Puts the components of `name` in front of `parts`, in order (empty ones and `.` left out).
fn push_front(parts: &mut VecDeque<OsString>, name: &[u8]) {
    let comps: Vec<OsString> = name
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsString::from_vec(c.to_vec()))
        .collect();
    for c in comps.into_iter().rev() {
        parts.push_front(c);
    }
}

/// The path `fd` is at (for the receipt), or `?` when it has none in the tree of names.
pub(super) fn shown(fd: &OwnedFd, name: Option<&OsStr>) -> String {
    let mut path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
        .unwrap_or_else(|_| PathBuf::from("?"));
    if let Some(name) = name {
        path.push(name);
    }
    path.to_string_lossy().into_owned()
}
