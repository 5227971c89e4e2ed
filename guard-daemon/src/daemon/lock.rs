//! One guardd per host state. A second guardd given the same cgroup, socket or audit log would
//! adopt the first one's cgroup and remove it on its way out (every later call of the first then
//! fails), or interleave rows in its audit log. So each piece of state is locked (`flock`, held
//! for the life of the process and released by the kernel if it dies) before anything touches it.

use std::{
    fs::{self, File},
    io::{self, Read as _, Seek as _, Write as _},
    os::{fd::AsRawFd as _, unix::fs::OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::audit::HOLD_WAIT;

/// `try_flock`, again until [`HOLD_WAIT`] has passed.
fn flock_waiting(file: &File) -> io::Result<bool> {
    let deadline = Instant::now() + HOLD_WAIT;
    loop {
        if try_flock(file)? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why a piece of state could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{what} {path} is in use by another guardd{}; stop it first, or give this one its own \
         --cgroup, --socket and --audit",
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Held {
        what: &'static str,
        path: PathBuf,
        holder: Option<u32>,
    },
    #[error("locking {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// The locks this guardd holds; released when dropped (or when the process dies).
#[derive(Debug, Default)]
pub struct StateLock {
    held: Vec<File>,
}

impl StateLock {
    /// Locks `path` (a lock file, created if missing, which records the holder's pid) as `what`.
    pub fn lock_file(&mut self, what: &'static str, path: &Path) -> Result<(), LockError> {
        let io_err = |source| LockError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io_err)?;
        }
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(io_err)?;
        if !flock_waiting(&file).map_err(io_err)? {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(LockError::Held {
                what,
                path: path.to_owned(),
                holder: pid.trim().parse().ok(),
            });
        }
        // Ours now: say who holds it, for the next one's error message.
        file.set_len(0).map_err(io_err)?;
        file.rewind().map_err(io_err)?;
        write!(file, "{}", std::process::id()).map_err(io_err)?;
        self.held.push(file);
        Ok(())
    }

    /// Locks the directory `dir` itself (a cgroup: nothing else may be written there).
    pub fn lock_dir(&mut self, what: &'static str, dir: &Path) -> Result<(), LockError> {
        let io_err = |source| LockError::Io {
            what,
            path: dir.to_owned(),
            source,
        };
        let file = File::open(dir).map_err(io_err)?;
        if !flock_waiting(&file).map_err(io_err)? {
            return Err(LockError::Held {
                what,
                path: dir.to_owned(),
                holder: None,
            });
        }
        self.held.push(file);
        Ok(())
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: Ok(false) when another open file description holds it.
fn try_flock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// The lock file that stands for `path` (a socket or the audit log): `path` + `.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_named_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("guard-lock-{}", std::process::id()));
        let path = dir.join("audit.jsonl.lock");
        let mut first = StateLock::default();
        first.lock_file("audit log", &path).expect("first lock");
        let mut second = StateLock::default();
        match second.lock_file("audit log", &path) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        let mut second_dir = StateLock::default();
        first.lock_dir("cgroup", &dir).expect("dir lock");
        assert!(matches!(
            second_dir.lock_dir("cgroup", &dir),
            Err(LockError::Held { holder: None, .. })
        ));
        drop(first);
        second
            .lock_file("audit log", &path)
            .expect("free once dropped");
        second_dir
            .lock_dir("cgroup", &dir)
            .expect("free once dropped");
        let _ = fs::remove_dir_all(&dir);
    }
}
