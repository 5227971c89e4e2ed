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

/// At most this many directories above a starting point are walked: a name deeper than any
/// `PATH_MAX` allows is not judged.
const MAX_DEPTH: usize = 4096;

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

    /// guardd's own `/`: every thread of a call has the same (seccomp refuses `chroot`).
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

impl Walker<'_> {
    /// The chain of `dir`: its directories from the root down, by `..` (at most
    /// [`MAX_DEPTH`]).
    pub fn chain_of(&self, dir: &OwnedFd) -> Option<Vec<Id>> {
        let top = self.root.id;
        let mut chain = vec![id(dir)?];
        let mut at = dir.try_clone().ok()?;
        while chain.last() != Some(&top) {
            let up = openat(&at, "..", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
            let up_id = id(&up)?;
            if Some(&up_id) == chain.last() || chain.len() > MAX_DEPTH {
                break; // the namespace's own root
            }
            chain.push(up_id);
            at = up;
        }
        chain.reverse();
        Some(chain)
    }

    /// Finds what `name` names: from the root when it is absolute, else from `start` (the
    /// thread's directory, which only a relative name needs), following a last link unless
    /// `nofollow`. `None`: the open fails for a reason of its own (a name that leads nowhere, a
    /// link loop, a name too long), which no rule decides.
    pub fn find(&self, start: Option<OwnedFd>, name: &[u8], nofollow: bool) -> Option<Found> {
        let mut parts: VecDeque<OsString> = VecDeque::new();
        push_front(&mut parts, name);
        let (mut at, mut chain) = if name.starts_with(b"/") {
            self.root.start()?
        } else {
            let start = start?;
            let chain = self.chain_of(&start)?;
            (start, chain)
        };
        let mut links = 0;
        while let Some(part) = parts.pop_front() {
            let last = parts.is_empty();
            if part == ".." {
                if chain.len() > 1 {
                    at = openat(&at, "..", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
                    chain.pop();
                }
                continue;
            }
            let part = match part.as_bytes() {
                b"self" | b"thread-self" if on_proc(&at) => OsString::from(self.pid.to_string()),
                _ => part,
            };
            let next = match openat(&at, part.as_os_str(), path_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(nix::Error::ENOENT) if last => {
                    return Some(Found::New {
                        dir: at,
                        chain,
                        name: part,
                    });
                }
                Err(_) => return None,
            };
            let stat = fstat(&next).ok()?;
            if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
                if last && nofollow {
                    return None; // ELOOP
                }
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                if on_proc(&at) {
                    // A magic link: it leads to the thread's own file, not where its text says.
                    let target = through(&at, &part)?;
                    if last {
                        return self.reached(target);
                    }
                    chain = self.chain_of(&target)?;
                    at = target;
                    continue;
                }
                let text = readlinkat(&at, part.as_os_str()).ok()?;
                push_front(&mut parts, text.as_bytes());
                if text.as_bytes().starts_with(b"/") {
                    (at, chain) = self.root.start()?;
                }
                continue;
            }
            chain.push((stat.st_dev, stat.st_ino));
            if last {
                return Some(Found::File {
                    fd: next,
                    stat,
                    chain,
                });
            }
            if stat.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return None; // ENOTDIR
            }
            at = next;
        }
        // The name ended on a directory (`.`, `..`, a trailing slash): that directory.
        let stat = fstat(&at).ok()?;
        Some(Found::File {
            fd: at,
            stat,
            chain,
        })
    }

    /// What a magic link reached: a file in the tree of names (its chain found from its path,
    /// and checked to lead to it), or nothing landlock judges (a pipe, a socket, a deleted
    /// file).
    fn reached(&self, target: OwnedFd) -> Option<Found> {
        let want = id(&target)?;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", target.as_raw_fd())).ok()?;
        let bytes = path.as_os_str().as_bytes();
        if !bytes.starts_with(b"/") || bytes.ends_with(b" (deleted)") {
            return None;
        }
        match self.find(None, bytes, true)? {
            found @ Found::File { stat, .. } if (stat.st_dev, stat.st_ino) == want => Some(found),
            _ => None,
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
