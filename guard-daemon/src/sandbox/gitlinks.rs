//! Repositories a call hides in its workspace's repository: a gitlink (an index entry of mode
//! 160000) whose directory holds a `.git` of the call's making. git recurses into every
//! populated gitlink (status, diff, `commit -a`), no `.gitmodules` needed, and the nested git
//! reads its own config: hooks, fsmonitor, pager. So when a call changed the index, its
//! gitlinks are read at the call's end, and each one's `.git` born during the call is planted
//! (moved aside with the other planted names, `protected::Absent`).

use std::{
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _, OwnedFd},
};

use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

/// The largest index read: a repository of some hundred thousand files.
const MAX_INDEX: u64 = 64 << 20;

/// A repository's index as a call found it.
#[derive(Debug)]
pub struct Index {
    /// The worktree's directory (pinned).
    dir: OwnedFd,
    /// The index's identity and times when the call started; `None` when there was none.
    stamp: Option<(u64, i64, i64, i64)>,
    /// When the call started (seconds, nanoseconds), as file birth times count.
    start: (i64, u32),
}

impl Index {
    /// The index of the repository whose worktree is `dir`, when `.git` there is a directory.
    pub fn at_start(dir: &OwnedFd) -> Option<Self> {
        let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
        let git = nix::sys::stat::fstatat(dir.as_fd(), ".git", flags).ok()?;
        if git.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return None;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        Some(Self {
            dir: dir.try_clone().ok()?,
            stamp: stamp(dir),
            // Birth times are the file system's clock, which may lag the wall's by a tick.
            start: (i64::try_from(now.as_secs()).ok()? - 1, 0),
        })
    }

    /// The worktree's directory.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// The gitlinks' `.git`s (paths beneath the worktree) born since the call started, when
    /// the index changed.
    pub fn born(&self) -> Vec<String> {
        if stamp(&self.dir) == self.stamp {
            return Vec::new();
        }
        let Ok(data) = read_index(&self.dir) else {
            return Vec::new();
        };
        let links = gitlinks(&data, 20).or_else(|| gitlinks(&data, 32));
        links
            .unwrap_or_default()
            .into_iter()
            .map(|p| format!("{p}/.git"))
            .filter(|git| birth(&self.dir, git).is_some_and(|b| b >= self.start))
            .collect()
    }
}

/// `.git/index`'s inode, size and modification time beneath `dir`.
fn stamp(dir: &OwnedFd) -> Option<(u64, i64, i64, i64)> {
    let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    let st = nix::sys::stat::fstatat(dir.as_fd(), ".git/index", flags).ok()?;
    Some((st.st_ino, st.st_size, st.st_mtime, st.st_mtime_nsec))
}

/// `.git/index` beneath `dir`, found without following a link, at most [`MAX_INDEX`] bytes.
fn read_index(dir: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let flags = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let git = nix::fcntl::openat(dir.as_fd(), ".git", flags | OFlag::O_PATH, Mode::empty())?;
    let index = nix::fcntl::openat(git.as_fd(), "index", flags | OFlag::O_RDONLY, Mode::empty())?;
    let mut data = Vec::new();
    std::fs::File::from(index)
        .take(MAX_INDEX)
        .read_to_end(&mut data)
        .map_err(|_| Errno::EIO)?;
    Ok(data)
}

/// The paths of the gitlinks of an index (versions 2 to 4) whose object names are `hash`
/// bytes long; `None` for what is no such index.
fn gitlinks(data: &[u8], hash: usize) -> Option<Vec<String>> {
    if data.get(..4)? != b"DIRC" {
        return None;
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let (version, count) = (word(4)?, word(8)?);
    if !(2..=4).contains(&version) {
        return None;
    }
    // ctime, mtime, dev, ino, mode, uid, gid, size: 40 bytes; then the object name and flags.
    let fixed = 40 + hash + 2;
    let (mut pos, mut prev, mut out) = (12usize, Vec::<u8>::new(), Vec::new());
    for _ in 0..count {
        let mode = word(pos + 24)?;
        let flags = u16::from_be_bytes(data.get(pos + 40 + hash..pos + fixed)?.try_into().ok()?);
        let mut at = pos
            + fixed
            + if version >= 3 && flags & 0x4000 != 0 {
                2
            } else {
                0
            };
        let name = if version == 4 {
            let (strip, used) = varint(data.get(at..)?)?;
            at += used;
            let end = at + data.get(at..)?.iter().position(|&b| b == 0)?;
            let mut name = prev.get(..prev.len().checked_sub(strip)?)?.to_vec();
            name.extend_from_slice(&data[at..end]);
            pos = end + 1;
            prev.clone_from(&name);
            name
        } else {
            let end = at + data.get(at..)?.iter().position(|&b| b == 0)?;
            let name = data[at..end].to_vec();
            // The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
            pos += (end - pos + 8) & !7;
            name
        };
        if mode == 0o160000 {
            out.push(String::from_utf8(name).ok()?);
        }
    }
    Some(out)
}

/// git's offset encoding of a number (index version 4): the value and the bytes it took.
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut used = 0;
    let mut c = *bytes.first()?;
    let mut value = usize::from(c & 127);
    while c & 128 != 0 {
        used += 1;
        c = *bytes.get(used)?;
        value = value.checked_add(1)?.checked_mul(128)? + usize::from(c & 127);
    }
    Some((value, used + 1))
}

/// When `name` beneath `dir` was born (seconds, nanoseconds), not following a last link;
/// `None` where the file system does not say.
fn birth(dir: &OwnedFd, name: &str) -> Option<(i64, u32)> {
    /// `struct statx_timestamp`.
    #[repr(C)]
    struct Ts {
        sec: i64,
        nsec: u32,
        _reserved: i32,
    }
    /// `struct statx`, up to its birth time, and room for the rest.
    #[repr(C)]
    struct Statx {
        mask: u32,
        blksize: u32,
        attributes: u64,
        nlink: u32,
        uid: u32,
        gid: u32,
        mode: u16,
        _pad: u16,
        ino: u64,
        size: u64,
        blocks: u64,
        attributes_mask: u64,
        atime: Ts,
        btime: Ts,
        rest: [u64; 24],
    }
    const STATX_BTIME: u32 = 0x800;
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: an all-zero statx is a valid value of plain integers.
    let mut st: Statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx writes at most a `struct statx` (256 bytes, the size of `Statx`) into `st`;
    // raw, as musl, which guard-exec links, has no wrapper everywhere.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            STATX_BTIME,
            &mut st as *mut Statx,
        )
    };
    (rc == 0 && st.mask & STATX_BTIME != 0).then_some((st.btime.sec, st.btime.nsec))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index entry of version 2 for `name` with `mode`, as git writes it.
    fn entry(name: &str, mode: u32) -> Vec<u8> {
        let mut e = vec![0u8; 40 + 20 + 2];
        e[24..28].copy_from_slice(&mode.to_be_bytes());
        e[60..62].copy_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name.as_bytes());
        let padded = (e.len() + 8) & !7;
        e.resize(padded, 0);
        e
    }

    #[test]
    fn gitlinks_of_a_version_2_index_are_found_among_files() {
        let mut data = b"DIRC".to_vec();
        data.extend_from_slice(&2u32.to_be_bytes());
        data.extend_from_slice(&3u32.to_be_bytes());
        data.extend(entry("README.md", 0o100644));
        data.extend(entry("lib/sub", 0o160000));
        data.extend(entry("src/main.rs", 0o100644));
        assert_eq!(gitlinks(&data, 20), Some(vec!["lib/sub".to_owned()]));
        assert_eq!(gitlinks(b"nope", 20), None);
        assert_eq!(gitlinks(&data[..40], 20), None, "a truncated index is none");
    }

    #[test]
    fn version_4_names_build_on_the_one_before() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
        let mut data = b"DIRC".to_vec();
        data.extend_from_slice(&4u32.to_be_bytes());
        data.extend_from_slice(&2u32.to_be_bytes());
        for (strip, suffix, mode) in [(0u8, "lib/a", 0o100644u32), (1, "sub", 0o160000)] {
            let mut e = vec![0u8; 62];
            e[24..28].copy_from_slice(&mode.to_be_bytes());
            e.push(strip);
            e.extend_from_slice(suffix.as_bytes());
            e.push(0);
            data.extend(e);
        }
        assert_eq!(gitlinks(&data, 20), Some(vec!["lib/sub".to_owned()]));
    }
}
