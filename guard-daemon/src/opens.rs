//! The files a call opened, as the kernel reported them (`--trace-syscalls`), and the one open
//! that is a divergence: a write-open outside the call's `effects.write` that succeeded.
//!
//! landlock is what keeps a call's writes inside its effects; this is the independent second
//! line that notices when something got past it (a parent directory widened for a file that did
//! not exist yet, a symlink, a host running without landlock). The kernel reports paths as the
//! call passed them; a relative one is resolved here against the thread's working directory or
//! directory descriptor, read from /proc while the event is fresh. A path that can no longer be
//! resolved (the process is gone) is listed as unresolved and judged by nothing but landlock.

use std::{
    fs,
    path::{Component, Path, PathBuf},
};

use guard_common::event::Event as KernelEvent;
use serde::Serialize;
use serde_json::{Value, json};

/// Distinct opens kept per receipt; the count goes on.
const LISTED: usize = 64;
const AT_FDCWD: i32 = -100;
/// Written by every program that discards output; landlock's base set grants it.
const DEV_NULL: &str = "/dev/null";

/// What a call may write: its `effects.write`, files or directory trees.
#[derive(Clone, Debug, Default)]
pub struct WriteScope {
    pub write: Vec<PathBuf>,
}

impl WriteScope {
    fn allows(&self, path: &Path) -> bool {
        path == Path::new(DEV_NULL) || self.write.iter().any(|w| path.starts_with(w))
    }
}

/// The opens of one call, for its receipt (`effects_observed.files`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FilesSeen {
    /// Every open the call attempted.
    pub opened: u64,
    /// The first distinct ones.
    pub paths: Vec<FileSeen>,
}

/// One open of a call.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileSeen {
    /// Absolute, `.` and `..` folded; as requested (with `?/` in front) when unresolvable.
    pub path: String,
    /// "read" | "write"
    pub access: &'static str,
    /// "ok", or the errno's name (`EACCES`, `ENOENT`...).
    pub result: String,
}

impl FilesSeen {
    /// Folds in one open; returns the divergence detail when it is a successful write outside
    /// `scope`.
    pub fn record(&mut self, event: &KernelEvent, scope: &WriteScope) -> Option<Value> {
        self.opened += 1;
        let requested = c_str(&event.path);
        let writes = is_write(event.open_flags);
        let resolved = resolve(&requested, event.dirfd, event.tid);
        let seen = FileSeen {
            path: match &resolved {
                Some(p) => p.display().to_string(),
                None => format!("?/{requested}"),
            },
            access: if writes { "write" } else { "read" },
            result: if event.ret >= 0 {
                "ok".into()
            } else {
                errno_name(-event.ret)
            },
        };
        let diverged = event.ret >= 0 && writes && resolved.is_some_and(|p| !scope.allows(&p));
        let detail = diverged.then(|| json!({ "path": seen.path, "flags": event.open_flags }));
        if self.paths.len() < LISTED && !self.paths.contains(&seen) {
            self.paths.push(seen);
        }
        detail
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

/// Folds `.` and `..` without touching the file system (the path as the call asked for it).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EEXIST => "EEXIST",
        libc::ELOOP => "ELOOP",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EMFILE => "EMFILE",
        _ => return format!("errno {errno}"),
    };
    name.into()
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

    fn scope() -> WriteScope {
        WriteScope {
            write: vec!["/srv/ws/out".into()],
        }
    }

    #[test]
    fn only_a_successful_write_outside_the_scope_diverges() {
        let mut files = FilesSeen::default();
        let s = scope();
        assert!(
            files
                .record(&open("/etc/passwd", libc::O_RDONLY, 3), &s)
                .is_none()
        );
        assert!(
            files
                .record(
                    &open("/srv/ws/out/a", libc::O_WRONLY | libc::O_CREAT, 3),
                    &s
                )
                .is_none()
        );
        assert!(
            files
                .record(&open("/dev/null", libc::O_RDWR, 3), &s)
                .is_none()
        );
        // Refused by landlock: recorded, not a divergence.
        let refused = open("/srv/ws/other", libc::O_WRONLY, -libc::EACCES);
        assert!(files.record(&refused, &s).is_none());
        assert!(
            files
                .record(&open("/etc/x", libc::O_PATH | libc::O_WRONLY, 3), &s)
                .is_none()
        );
        // `..` cannot walk out of the scope unnoticed.
        let out = open("/srv/ws/out/../other", libc::O_RDONLY | libc::O_TRUNC, 3);
        let detail = files.record(&out, &s).expect("divergence");
        assert_eq!(detail["path"], "/srv/ws/other");
        assert_eq!(files.opened, 6);
        assert_eq!(files.paths[3].result, "EACCES");
        assert_eq!(files.paths[0].access, "read");
        assert_eq!(files.paths[1].access, "write");
    }

    #[test]
    fn relative_paths_resolve_against_the_threads_cwd_and_repeats_are_listed_once() {
        let mut files = FilesSeen::default();
        let cwd = std::env::current_dir().expect("cwd");
        for _ in 0..3 {
            files.record(&open("a/./b", libc::O_RDONLY, 3), &scope());
        }
        assert_eq!(files.opened, 3);
        assert_eq!(files.paths.len(), 1);
        assert_eq!(files.paths[0].path, cwd.join("a/b").display().to_string());
        // A thread that is gone: listed as requested, not judged.
        let mut gone = open("x", libc::O_WRONLY, 3);
        gone.tid = u32::MAX;
        assert!(files.record(&gone, &scope()).is_none());
        assert_eq!(files.paths[1].path, "?/x");
    }
}
