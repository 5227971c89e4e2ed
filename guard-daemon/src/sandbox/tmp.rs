//! A call's own temporary directory (`tmp = true` in its tool): compilers, `mktemp` and `sort`
//! need one, and the host's `/tmp` is shared by every call and every user, a place to hand
//! data from one call to another or to plant a file another program will trust. Each call gets
//! a fresh directory of its own under [`ROOT`], named at decision time (the plan's `tmp`, in its
//! write effects and its `TMPDIR`), made for the call's user just before its launch, and
//! removed with everything in it when the call is over.

use std::{
    ffi::{CStr, CString},
    fs, io,
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::{
            ffi::OsStrExt as _,
            fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _},
        },
    },
    path::{Path, PathBuf},
};

use nix::{
    dir::Dir,
    errno::Errno,
    fcntl::{Flock, FlockArg, OFlag, openat},
    sys::stat::{Mode, fstat},
    unistd::{UnlinkatFlags, unlinkat},
};

use crate::call::plan::LaunchPlan;

/// The call's `/dev/shm`, in its temporary directory (`child::mounts`).
pub const SHM: &std::ffi::CStr = c".shm";

/// Where the calls' directories go: root's, on `/run` (a tmpfs on a systemd host, so not the
/// audit log's file system), searchable but not listable by others.
pub const ROOT: &str = "/run/guard-tmp";

/// A fresh directory name under [`ROOT`], from the kernel's random pool: no one can guess,
/// and so take, a call's directory before it is made.
pub fn fresh() -> PathBuf {
    // `create` checks the name when it makes it.
    let name = crate::call::random::hex(16);
    Path::new(ROOT).join(format!("call-{name}"))
}

/// Makes [`ROOT`] if missing (refusing one that is not root's directory, mode 0711 at most),
/// and removes what a guardd that died left in it: a directory whose lock no live guardd holds.
pub fn prepare_root() -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o711).create(ROOT) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(ROOT)?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o066 != 0 {
        return Err(io::Error::other(format!(
            "{ROOT} is not a directory of root's that only root may list and change"
        )));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for entry in fs::read_dir(ROOT)? {
        let path = entry?.path();
        let ours = path
            .file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"call-"));
        if !ours {
            continue;
        }
        let Ok(dir) = open_dir(&path) else { continue };
        // One made a moment ago may not be locked yet by the guardd making it.
        let young = fstat(&dir).is_ok_and(|s| now - s.st_ctime < 60);
        // Held (shared) by the guardd whose call it is, for as long as it lives.
        if !young && Flock::lock(dir, FlockArg::LockExclusiveNonblock).is_ok() {
            tracing::info!("removing {}, left by a guardd that ended", path.display());
            if let Err(e) = remove_tree(&path) {
                tracing::warn!("leaving {}: {e}", path.display());
            }
        }
    }
    Ok(())
}

/// `path`, a directory, opened without following a link.
fn open_dir(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// At most this many entries are removed from one call's directory: past that, it is left,
/// and said so (something keeps filling it).
const MAX_REMOVALS: u64 = 10_000_000;

/// Removes the directory `root` and everything in it, as root, without following a link and
/// without recursion: a call may leave a tree tens of thousands of levels deep (one stack frame
/// a level took guardd's worker down), and the processes of its user may go on changing it.
/// One directory descriptor at a time; going back up, `..` must be the directory it came
/// from (by identity), or the removal stops there. What is in it is removed as its owner
/// (`as_user`): guardd removes nothing the call's user could not (a root-owned tree the user
/// moved in stays, and the directory with it); the directory itself, in root's [`ROOT`], as
/// root.
pub fn remove_tree(root: &Path) -> io::Result<()> {
    let owner = fs::symlink_metadata(root)?;
    super::as_user(owner.uid(), owner.gid(), || empty_tree(root))?;
    fs::remove_dir(root)
}

/// Removes everything in the directory `root` (see [`remove_tree`]).
fn empty_tree(root: &Path) -> io::Result<()> {
    let mut here = open_dir(root)?;
    let id = |fd: &OwnedFd| fstat(fd).map(|s| (s.st_dev, s.st_ino));
    let mut path: Vec<((u64, u64), CString)> = Vec::new();
    let mut removed = 0u64;
    loop {
        match first_subdir(&here, &mut removed)? {
            Some(name) => {
                let below = openat(&here, name.as_c_str(), dir_flags(), Mode::empty())?;
                path.push((id(&here)?, name));
                here = below;
            }
            None => {
                let Some((parent, name)) = path.pop() else {
                    break;
                };
                let up = openat(&here, c"..", dir_flags(), Mode::empty())?;
                if id(&up)? != parent {
                    return Err(io::Error::other("a directory was moved during the removal"));
                }
                here = up;
                unlinkat(&here, name.as_c_str(), UnlinkatFlags::RemoveDir)?;
            }
        }
        if removed > MAX_REMOVALS {
            return Err(io::Error::other("more than 10 million entries"));
        }
    }
    Ok(())
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Removes every entry of `dir` that is not a directory, and the empty directories; the name
/// of a directory that is not empty, if any.
fn first_subdir(dir: &OwnedFd, removed: &mut u64) -> io::Result<Option<CString>> {
    let mut entries = Dir::openat(dir.as_fd(), c".", dir_flags(), Mode::empty())?;
    for entry in entries.iter() {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        *removed += 1;
        match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(Errno::EISDIR) => match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => return Ok(Some(name.to_owned())),
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// How long a call's end waits for its temporary directory to be removed.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A call's temporary directory, removed (with what the call left in it) by [`CallTmp::remove`]
/// before the call's end is told, else on drop; either way off the runtime's threads. A shared
/// lock on it says, while guardd lives, that it is in use.
#[derive(Debug)]
pub struct CallTmp(Option<(PathBuf, Flock<OwnedFd>)>);

impl CallTmp {
    /// Makes `plan`'s directory, if it has one, for `user`, whom it runs as, mode 0700. A
    /// directory already there is an error: its name was the plan's alone.
    pub fn create(plan: &LaunchPlan, user: &nix::unistd::User) -> io::Result<Self> {
        let Some(dir) = &plan.confinement.tmp else {
            return Ok(Self(None));
        };
        if dir.parent() != Some(Path::new(ROOT)) {
            return Err(io::Error::other(format!(
                "{} is not under {ROOT}",
                dir.display()
            )));
        }
        fs::DirBuilder::new().mode(0o700).create(dir)?;
        let held = Flock::lock(open_dir(dir)?, FlockArg::LockSharedNonblock)
            .map_err(|(_, e)| io::Error::from(e))?;
        let made = Self(Some((dir.clone(), held)));
        let shm = dir.join(std::ffi::OsStr::from_bytes(SHM.to_bytes()));
        fs::DirBuilder::new().mode(0o700).create(&shm)?;
        for d in [&shm, dir] {
            std::os::unix::fs::chown(d, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))?;
        }
        Ok(made)
    }
}

impl CallTmp {
    /// Removes the directory, and waits up to [`REMOVAL_WAIT`] for it: a call's caller hears of
    /// its end once what the call left is gone, unless the call left so much that removing it
    /// takes longer; then the removal goes on without the call (its slot and its reply wait no
    /// longer), and the next start sweeps what a stop interrupted.
    pub async fn remove(mut self) {
        // Most calls leave it empty (but for its `.shm`): then it goes at once, without a
        // thread.
        if let Some((dir, _)) = &self.0
            && fs::remove_dir(dir.join(std::ffi::OsStr::from_bytes(SHM.to_bytes())))
                .and_then(|()| fs::remove_dir(dir))
                .is_ok()
        {
            self.0 = None;
            return;
        }
        if let Some(removal) = self.removal() {
            let removing = tokio::task::spawn_blocking(move || {
                super::name_blocking_thread();
                removal();
            });
            if tokio::time::timeout(REMOVAL_WAIT, removing).await.is_err() {
                tracing::warn!(
                    "a call's temporary directory takes long to remove: going on without it"
                );
            }
        }
    }

    fn removal(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        let (dir, held) = self.0.take()?;
        Some(move || {
            if let Err(e) = remove_tree(&dir) {
                tracing::warn!(
                    "leaving a call's temporary directory {}: {e}",
                    dir.display()
                );
            }
            drop(held);
        })
    }
}

impl Drop for CallTmp {
    fn drop(&mut self) {
        if let Some(removal) = self.removal() {
            super::off_the_runtime(removal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_its_user_could_not_remove_stays() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = crate::audit::testdir::TestDir::new("tmp-owner");
        let root = dir.path().join("call-y");
        fs::create_dir(&root).expect("mkdir");
        let nobody = Some(65534);
        std::os::unix::fs::chown(&root, nobody, nobody).expect("chown");
        fs::write(root.join("own"), "x").expect("write");
        std::os::unix::fs::chown(root.join("own"), nobody, nobody).expect("chown");
        // A tree of root's, moved in by the call's user (who may move what it may not remove).
        let theirs = root.join("moved-in");
        fs::create_dir(&theirs).expect("mkdir");
        fs::write(theirs.join("root-s"), "kept").expect("write");
        assert!(remove_tree(&root).is_err());
        assert_eq!(
            fs::read_to_string(theirs.join("root-s")).expect("kept"),
            "kept"
        );
        assert!(!root.join("own").exists());
    }

    #[test]
    fn a_tree_deeper_than_any_stack_is_removed_and_links_are_not_followed() {
        let dir = crate::audit::testdir::TestDir::new("tmp-tree");
        let keep = dir.path().join("keep");
        fs::create_dir(&keep).expect("mkdir");
        fs::write(keep.join("file"), "kept").expect("write");
        let root = dir.path().join("call-x");
        fs::create_dir(&root).expect("mkdir");
        std::os::unix::fs::symlink(&keep, root.join("link")).expect("symlink");
        // 20,000 levels, made relative to each one, as a call would.
        let mut at = open_dir(&root).expect("open");
        for i in 0..20_000 {
            nix::sys::stat::mkdirat(&at, c"d", Mode::from_bits_truncate(0o700)).expect("mkdir");
            if i % 1000 == 0 {
                fs::write(
                    format!("/proc/self/fd/{}/f", std::os::fd::AsRawFd::as_raw_fd(&at)),
                    "x",
                )
                .expect("write");
            }
            at = openat(&at, c"d", dir_flags(), Mode::empty()).expect("open");
        }
        drop(at);
        // On a small stack, as guardd's workers have.
        let removing = root.clone();
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || remove_tree(&removing))
            .expect("thread")
            .join()
            .expect("no overflow")
            .expect("removed");
        assert!(!root.exists());
        assert_eq!(fs::read_to_string(keep.join("file")).expect("kept"), "kept");
    }
}
