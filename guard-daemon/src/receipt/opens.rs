//! The files a call opened, as the kernel reported them (`--trace-syscalls`), and the one open
//! that is a divergence: a write-open outside the call's `effects.write` that succeeded.
//!
//! landlock is what keeps a call's writes inside its effects; the open observer is the
//! independent second line that notices when something got past it (a parent directory widened
//! for a file that did not exist yet, a host running without landlock). The kernel judges: it
//! compares the file each write-open returned, by identity, with the call's write effects (see
//! `guard_common::file`), and marks the event; it also counts such writes per call, so a lost
//! event hides nothing. Here the paths are only listed: as the call passed them, a relative one
//! resolved against the thread's working directory or directory descriptor, read from /proc
//! while the event is fresh, or listed as `?/name` when the process is already gone.

use std::{
    fs,
    path::{Path, PathBuf},
};

use guard_common::event::{ACTION_KILLED, ACTION_OUTSIDE, Event as KernelEvent};
use serde::{Deserialize, Serialize};

use crate::{bus::Effect, sandbox::resolve::normalize};

/// Distinct opens kept per receipt; the count goes on.
const LISTED: usize = 64;
const AT_FDCWD: i32 = -100;

/// The files a call opened: how many, and the first distinct ones.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FilesSeen {
    /// Every open the call attempted.
    pub opened: u64,
    /// The first distinct ones.
    pub paths: Vec<FileSeen>,
    /// Of those, the writes the kernel found outside the call's effects (the receipt shows the
    /// kernel's own count, `writes_outside`).
    #[serde(skip)]
    pub diverged: u64,
}

/// One open of a call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileSeen {
    /// Absolute, `.` and `..` folded; as requested (with `?/` in front) when unresolvable.
    pub path: String,
    pub access: FileAccess,
    /// "ok", or the errno's name (`EACCES`, `ENOENT`...).
    pub result: String,
}

/// What an open could do to the file.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FileAccess {
    Read,
    Write,
    /// A directory opened to read its names (`O_DIRECTORY`): a listing, not a read of what
    /// lies beneath, which `policy suggest` must not propose as a `read` of the whole tree.
    List,
    /// An `O_PATH` open: a name looked up, nothing read (landlock does not check it either).
    Path,
}

impl FilesSeen {
    /// Folds in one open; returns the divergence when the kernel found it a successful write
    /// outside the call's effects.
    pub fn record(&mut self, event: &KernelEvent) -> Option<Effect> {
        self.opened += 1;
        if event.action == ACTION_OUTSIDE || event.action == ACTION_KILLED {
            self.diverged += 1;
        }
        let requested = c_str(&event.path);
        let resolved = resolve(&requested, event.dirfd, event.tid);
        let seen = FileSeen {
            path: match &resolved {
                Some(p) => p.display().to_string(),
                None => format!("?/{requested}"),
            },
            access: access(event.open_flags),
            result: if event.ret >= 0 {
                "ok".into()
            } else {
                errno_name(-event.ret)
            },
        };
        // The kernel judged the file the open returned, by identity; the path is only shown.
        let diverged = event.action == ACTION_OUTSIDE || event.action == ACTION_KILLED;
        let effect = diverged.then(|| Effect::Open {
            path: seen.path.clone(),
            flags: event.open_flags,
        });
        if self.paths.len() < LISTED && !self.paths.contains(&seen) {
            self.paths.push(seen);
        }
        effect
    }
}

/// What an open with `flags` could do.
fn access(flags: u32) -> FileAccess {
    if flags as i32 & libc::O_PATH != 0 {
        FileAccess::Path
    } else if is_write(flags) {
        FileAccess::Write
    } else if flags as i32 & libc::O_DIRECTORY != 0 {
        FileAccess::List
    } else {
        FileAccess::Read
    }
}

/// Whether open flags can change a file: a write access mode, or creating or truncating it.
/// `O_PATH` opens nothing for I/O, whatever else is set.
fn is_write(flags: u32) -> bool {
    let flags = flags as i32;
    flags & libc::O_PATH == 0
        && (flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_CREAT | libc::O_TRUNC) != 0)
}

/// The absolute path an open named, if it can still be known.
fn resolve(requested: &str, dirfd: i32, tid: u32) -> Option<PathBuf> {
    let path = Path::new(requested);
    if path.is_absolute() {
        return Some(normalize(path));
    }
    let base = if dirfd == AT_FDCWD {
        format!("/proc/{tid}/cwd")
    } else {
        format!("/proc/{tid}/fd/{dirfd}")
    };
    let base = fs::read_link(base).ok()?;
    Some(normalize(&base.join(path)))
}

/// The errno's name (`EACCES`), or its number when this build has no name for it.
pub(crate) fn errno_name(errno: i32) -> String {
    match nix::errno::Errno::from_raw(errno) {
        nix::errno::Errno::UnknownErrno => format!("errno {errno}"),
        known => format!("{known:?}"),
    }
}

pub(crate) fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use guard_common::event::KIND_OPEN;

    use super::*;

    fn open(path: &str, flags: i32, ret: i32) -> KernelEvent {
        // SAFETY: Event is plain old data; all-zero is a valid value.
        let mut e: KernelEvent = unsafe { std::mem::zeroed() };
        e.kind = KIND_OPEN;
        e.open_flags = flags as u32;
        e.ret = ret;
        e.dirfd = AT_FDCWD;
        e.tid = std::process::id();
        e.path[..path.len()].copy_from_slice(path.as_bytes());
        e
    }

    fn outside(mut e: KernelEvent) -> KernelEvent {
        e.action = ACTION_OUTSIDE;
        e
    }

    #[test]
    fn only_what_the_kernel_found_outside_diverges_and_every_open_is_listed() {
        let mut files = FilesSeen::default();
        assert!(
            files
                .record(&open("/etc/passwd", libc::O_RDONLY, 3))
                .is_none()
        );
        let inside = open("/srv/ws/out/a", libc::O_WRONLY | libc::O_CREAT, 3);
        assert!(files.record(&inside).is_none());
        // Refused by landlock: recorded, not a divergence.
        let refused = open("/srv/ws/other", libc::O_WRONLY, -libc::EACCES);
        assert!(files.record(&refused).is_none());
        let out = outside(open(
            "/srv/ws/out/../other",
            libc::O_RDONLY | libc::O_TRUNC,
            3,
        ));
        let effect = files.record(&out).expect("divergence");
        let Effect::Open { path, .. } = effect else {
            panic!("an open: {effect:?}")
        };
        assert_eq!(path, "/srv/ws/other");
        let mut killed = open("/etc/x", libc::O_WRONLY, 3);
        killed.action = ACTION_KILLED;
        assert!(files.record(&killed).is_some());
        assert_eq!(files.opened, 5);
        assert_eq!(files.paths[2].result, "EACCES");
        assert_eq!(files.paths[0].access, FileAccess::Read);
        assert_eq!(files.paths[1].access, FileAccess::Write);
        // A directory opened for its names is a listing.
        files.record(&open("/etc", libc::O_RDONLY | libc::O_DIRECTORY, 3));
        assert_eq!(files.paths.last().map(|f| f.access), Some(FileAccess::List));
        files.record(&open("/etc/ssh", libc::O_PATH | libc::O_DIRECTORY, 3));
        assert_eq!(files.paths.last().map(|f| f.access), Some(FileAccess::Path));
    }

    #[test]
    fn relative_paths_resolve_against_the_threads_cwd_and_repeats_are_listed_once() {
        let mut files = FilesSeen::default();
        let cwd = std::env::current_dir().expect("cwd");
        for _ in 0..3 {
            files.record(&open("a/./b", libc::O_RDONLY, 3));
        }
        assert_eq!(files.opened, 3);
        assert_eq!(files.paths.len(), 1);
        assert_eq!(files.paths[0].path, cwd.join("a/b").display().to_string());
        // A thread that is gone: listed as requested; judged all the same by the kernel.
        let mut gone = outside(open("x", libc::O_WRONLY, 3));
        gone.tid = u32::MAX;
        assert!(files.record(&gone).is_some());
        assert_eq!(files.paths[1].path, "?/x");
    }
}
