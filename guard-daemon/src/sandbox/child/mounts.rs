//! The call's mount view, made in the child (see [`mounts`]).

use std::os::fd::RawFd;

use nix::errno::Errno;

use super::{Failed, Stage, check};
use crate::sandbox::landlock;

/// At most this many writable paths a call (the writable parts of its mount view).
pub(in crate::sandbox) const MAX_WRITABLE: usize = 64;

/// The call's mount view (it was cloned into a mount namespace of its own): every mount
/// read-only, and on top, at each path it may change, a copy of that path's mounts as they
/// are, writable. landlock decides what a call may open; this holds what it may change by name
/// where landlock has no say: a file's mode, times, owner or attributes (`chmod` by name, which
/// git needs in a workspace, reached every file of the call's user anywhere), and it makes
/// the host's writable places (`/tmp`, a home) read-only to the call whatever its user may do
/// there. Writes to device files (`/dev/null`) are untouched by a read-only mount.
///
/// Each writable file is found again by descriptor ([`find`]) and must be the very file its
/// landlock rule holds: found by path, as root, it could be a symlink another process of the
/// call's user put there since (a directory swapped for one, between the decision and this
/// step), and the call would get a writable copy of wherever that leads, the owner's home or
/// a directory only root could enter. Copies first (`open_tree`, recursive), then the whole
/// tree read-only (`mount_setattr`, recursive), then each copy moved over the file it was
/// taken from. Nothing propagates to the host: the tree is made private first.
/// (`mount_setattr` is 5.12's, older than the landlock ABI guard needs.)
///
/// Then each protected path (`sandbox::protected`), found again by descriptor in the view just
/// made, gets a read-only copy of itself mounted over it: written through, renamed or removed,
/// it fails (EROFS, EBUSY) whatever the writable directory around it allows.
///
/// Without `view` (a call in shadow) only that last step is taken: the rest of the tree stays
/// as the host has it, and the protected paths are read-only all the same.
///
/// Last, in every mode, the call's own places ([`own_places`]): a `/proc` of its own pid
/// namespace, and its temporary directory as `/tmp` and `/dev/shm`.
pub(super) fn mounts(
    writable: &[landlock::Writable],
    protected: &[crate::sandbox::protected::Kept],
    view: bool,
    tmp: Option<&landlock::Writable>,
) -> Result<(), Failed> {
    // SAFETY: mount with a NUL-terminated target and null pointers where none is needed.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(rc as _, Stage::Mounts)?;
    if view {
        let mut places = [-1 as RawFd; MAX_WRITABLE];
        let mut copies = [-1 as RawFd; MAX_WRITABLE];
        for (i, w) in writable.iter().take(MAX_WRITABLE).enumerate() {
            places[i] = find(w, false)?;
            copies[i] = clone_tree(places[i], true)?;
        }
        read_only(libc::AT_FDCWD, c"/", libc::AT_RECURSIVE as libc::c_uint)?;
        for (&place, &copy) in places.iter().zip(&copies).take(writable.len()) {
            move_over(copy, place)?;
        }
    }
    for kept in protected.iter().take(crate::sandbox::protected::MAX) {
        // A copy over itself: read-only, or as it is (a mount point, which cannot be renamed
        // or removed).
        let place = find(&kept.place, kept.link)?;
        let copy = clone_tree(place, false)?;
        if kept.read_only {
            read_only(copy, c"", libc::AT_EMPTY_PATH as libc::c_uint)?;
        }
        move_over(copy, place)?;
    }
    own_places(tmp)
}

/// The call's own `/proc`, made for the pid namespace it was cloned into: it lists the call's
/// processes only (every other call's and guardd's are not there to name, whatever the call's
/// user); `ps`, `free` and `uptime` read it. And, when it has a temporary directory (`tmp`),
/// that directory as its `/tmp`, and the directory's `.shm` as its `/dev/shm` (POSIX shared
/// memory and semaphores, which Python's multiprocessing uses): private to the call, within
/// its limits (a tmpfs's pages are its cgroup's), removed with it, and found by landlock and
/// the write judge as the directory the plan names.
fn own_places(tmp: Option<&landlock::Writable>) -> Result<(), Failed> {
    // SAFETY: mount with NUL-terminated strings and no data.
    let rc = unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    check(rc as _, Stage::Mounts)?;
    let Some(tmp) = tmp else {
        return Ok(());
    };
    let place = find(tmp, false)?;
    bind_over(place, c"", c"/tmp")?;
    bind_over(place, crate::sandbox::tmp::SHM, c"/dev/shm")?;
    // SAFETY: the descriptor `find` returned, ours.
    unsafe { libc::close(place) };
    Ok(())
}

/// Mounts a copy of `name` in `dir` (`dir` itself when empty) over `target`, a directory; a
/// target the host lacks is left as it is.
fn bind_over(dir: RawFd, name: &std::ffi::CStr, target: &std::ffi::CStr) -> Result<(), Failed> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: NUL-terminated names; each returns a new descriptor or -1.
    let (from, onto) = unsafe {
        (
            if name.is_empty() {
                libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0)
            } else {
                libc::openat(dir, name.as_ptr(), flags)
            },
            libc::open(target.as_ptr(), flags),
        )
    };
    let result = if onto < 0 && Errno::last_raw() == libc::ENOENT {
        Ok(())
    } else {
        check(from.min(onto) as _, Stage::Mounts)
            .and_then(|()| clone_tree(from, false))
            .and_then(|copy| {
                let moved = move_over(copy, onto);
                // SAFETY: the detached copy's descriptor, ours.
                unsafe { libc::close(copy) };
                moved
            })
    };
    // SAFETY: the descriptors opened above (or -1, which close refuses harmlessly).
    unsafe {
        libc::close(from);
        libc::close(onto);
    }
    result
}

/// A detached copy of the mount tree at `place` (its submounts too when `recursive`).
fn clone_tree(place: RawFd, recursive: bool) -> Result<RawFd, Failed> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let mut flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: open_tree of a descriptor (empty path); returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, place, c"".as_ptr(), flags) };
    check(fd, Stage::Mounts)?;
    Ok(fd as RawFd)
}

/// Makes the mounts at `path` from `dirfd` read-only (`flags`: `AT_RECURSIVE`, `AT_EMPTY_PATH`).
fn read_only(dirfd: RawFd, path: &std::ffi::CStr, flags: libc::c_uint) -> Result<(), Failed> {
    const MOUNT_ATTR_RDONLY: u64 = 1;
    /// `struct mount_attr`.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `attr` (its size given) from this stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc, Stage::Mounts)
}

/// Moves the detached tree `copy` onto `place`, both by descriptor.
fn move_over(copy: RawFd, place: RawFd) -> Result<(), Failed> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    // SAFETY: move_mount of a detached tree onto a file, both by descriptor.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            copy,
            c"".as_ptr(),
            place,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(rc, Stage::Mounts)
}

/// Opens `w`'s path (`O_PATH`) from `/`, one component at a time and refusing a link at each
/// (but at the last, a protected link, when `link`), and checks that it is the file `w` was
/// (ESTALE if not). Raw syscalls on a name copied to the stack: no allocation.
fn find(w: &landlock::Writable, link: bool) -> Result<RawFd, Failed> {
    let failed = |errno| Failed {
        stage: Stage::Mounts,
        errno,
    };
    // SAFETY: a NUL-terminated literal; returns a new descriptor or -1.
    let mut at = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    check(at as _, Stage::Mounts)?;
    let mut name = [0u8; 256];
    for part in w.path.to_bytes().split(|&b| b == b'/') {
        if part.is_empty() {
            continue;
        }
        let refused = if part.len() >= name.len() {
            libc::ENAMETOOLONG
        } else if part == b"." || part == b".." {
            libc::EINVAL
        } else {
            0
        };
        if refused != 0 {
            // SAFETY: `at` is this function's own descriptor.
            unsafe { libc::close(at) };
            return Err(failed(refused));
        }
        name[..part.len()].copy_from_slice(part);
        name[part.len()] = 0;
        // SAFETY: `name` is NUL-terminated on this stack; returns a new descriptor or -1.
        let next = unsafe {
            libc::openat(
                at,
                name.as_ptr().cast(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let errno = Errno::last_raw();
        // SAFETY: `at` is this function's own descriptor, replaced by `next`.
        unsafe { libc::close(at) };
        if next < 0 {
            return Err(failed(errno));
        }
        at = next;
    }
    // SAFETY: stat is plain integers, valid when zeroed; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on this function's descriptor into `st` on this stack.
    let rc = unsafe { libc::fstat(at, &mut st) };
    let is_link = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
    if rc < 0 || is_link != link || st.st_dev != w.dev || st.st_ino != w.ino {
        // SAFETY: as above.
        unsafe { libc::close(at) };
        return Err(failed(libc::ESTALE));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writable_place_is_found_only_as_it_was() {
        let dir = crate::audit::testdir::TestDir::new("child-find");
        let (a, elsewhere) = (dir.path().join("a"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(a.join("b")).expect("mkdir");
        std::fs::create_dir_all(elsewhere.join("b")).expect("mkdir");
        let real = std::fs::canonicalize(a.join("b")).expect("real path");
        let w = landlock::Writable::at(&real);
        let fd = find(&w, false).unwrap_or_else(|f| panic!("errno {}", f.errno));
        // SAFETY: the descriptor find returned, ours.
        unsafe { libc::close(fd) };
        // The path re-pointed (a directory on the way swapped for a symlink): refused.
        std::fs::rename(&a, dir.path().join("old")).expect("rename");
        std::os::unix::fs::symlink(&elsewhere, &a).expect("symlink");
        assert_eq!(find(&w, false).map_err(|f| f.errno), Err(libc::ENOTDIR));
        // Another directory at the same path: not the one the rule holds.
        std::fs::remove_file(&a).expect("unlink");
        std::fs::rename(&elsewhere, &a).expect("rename");
        assert_eq!(find(&w, false).map_err(|f| f.errno), Err(libc::ESTALE));
        // The place itself a symlink to where it was: refused too.
        let w2 = landlock::Writable::at(&real);
        std::fs::remove_dir(&real).expect("rmdir");
        std::os::unix::fs::symlink(dir.path().join("old/b"), &real).expect("symlink");
        assert_eq!(find(&w2, false).map_err(|f| f.errno), Err(libc::ESTALE));
    }
}
