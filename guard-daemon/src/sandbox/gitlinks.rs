//! Repositories a call hides in its workspace's repository: a gitlink (an index entry of mode
//! 160000) whose directory holds a `.git` git will follow. git recurses into every populated
//! gitlink (status, diff, `commit -a`), no `.gitmodules` needed, and the nested git reads its
//! own config: hooks, fsmonitor, pager. So when a call changed the index, its gitlinks are read
//! at the call's end, and each one's `.git` is planted (moved aside with the other planted
//! names, `protected::Absent`) unless it is a submodule's pointer into the repository's own
//! `.git/modules/`, whose files are kept as the repository's are. An embedded repository (a
//! `.git` directory in a gitlink, which git itself warns of) is moved aside too: a call may have
//! made it, in an earlier call as well as this one, and no birth time tells them apart.
//!
//! The index is the call's to write: it is read as a regular file only, without blocking, and
//! parsed in time linear in its size, names and gitlinks bounded.

use std::{
    io::Read as _,
    os::fd::{AsFd as _, OwnedFd},
};

use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

/// The largest index read: a repository of some hundred thousand files.
const MAX_INDEX: u64 = 64 << 20;

/// The longest name an index entry may have (`PATH_MAX`).
const MAX_NAME: usize = 4096;

/// The most gitlinks read from one index; past them the index is taken as it comes, all its
/// gitlinks' `.git`s unchecked, and said so.
const MAX_LINKS: usize = 4096;

/// A repository's index as a call found it.
#[derive(Debug)]
pub struct Index {
    /// The worktree's directory (pinned).
    dir: OwnedFd,
    /// The index's identity and times when the call started; `None` when there was none.
    stamp: Option<(u64, i64, i64, i64)>,
}

impl Index {
    /// The index of the repository whose worktree is `dir`, whose `.git` its caller found a
    /// directory.
    pub fn at_start(dir: &OwnedFd) -> Option<Self> {
        Some(Self {
            dir: dir.try_clone().ok()?,
            stamp: stamp(dir),
        })
    }

    /// The worktree's directory.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// The `.git`s (paths beneath the worktree) of the gitlinks git would follow into another
    /// repository than a submodule of this one's, when the index changed; `Err` for a changed
    /// index that is no index guard can read (its gitlinks unchecked: a divergence).
    pub fn followed(&self) -> Result<Vec<std::ffi::OsString>, &'static str> {
        use std::os::unix::ffi::OsStringExt as _;
        if stamp(&self.dir) == self.stamp {
            return Ok(Vec::new());
        }
        let data = match read_index(&self.dir) {
            Ok(data) => data,
            // Gone: git has no index to follow either.
            Err(Errno::ENOENT) => return Ok(Vec::new()),
            Err(_) => return Err("the index the call left is no regular file guard can read"),
        };
        let links = gitlinks(&data, 20).or_else(|| gitlinks(&data, 32));
        let mut links = links.ok_or("the index the call left is no index guard can read")?;
        if links.len() > MAX_LINKS {
            tracing::warn!("an index with more than {MAX_LINKS} gitlinks: the rest are unchecked");
            links.truncate(MAX_LINKS);
        }
        Ok(links
            .into_iter()
            .map(|mut p| {
                p.extend_from_slice(b"/.git");
                std::ffi::OsString::from_vec(p)
            })
            .filter(|git| !self.submodule(git))
            .collect())
    }

    /// Whether `git` (a gitlink's `.git`) is a submodule's pointer file into this repository's
    /// own `.git/modules/` (`gitdir: ../.git/modules/NAME`), or is not there at all.
    fn submodule(&self, git: &std::ffi::OsStr) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
        let st = match nix::sys::stat::fstatat(self.dir.as_fd(), git, flags) {
            Ok(st) => st,
            Err(_) => return true,
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return false;
        }
        let Ok(text) = read_small(&self.dir, git.as_bytes()) else {
            return false;
        };
        let Some(target) = text.strip_prefix(b"gitdir: ") else {
            return false;
        };
        let target = target.trim_ascii_end();
        // Relative to the gitlink's directory, as git reads it; `..` folded, never above.
        let base = std::path::Path::new(git)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        let joined = base.join(std::ffi::OsStr::from_bytes(target));
        let folded = super::resolve::normalize(&std::path::Path::new("/").join(joined));
        folded.starts_with("/.git/modules/") && !target.starts_with(b"/")
    }
}

/// `.git/index`'s inode, size and modification time beneath `dir`.
fn stamp(dir: &OwnedFd) -> Option<(u64, i64, i64, i64)> {
    let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    let st = nix::sys::stat::fstatat(dir.as_fd(), ".git/index", flags).ok()?;
    Some((st.st_ino, st.st_size, st.st_mtime, st.st_mtime_nsec))
}

/// `.git/index` beneath `dir`, at most [`MAX_INDEX`] bytes.
fn read_index(dir: &OwnedFd) -> Result<Vec<u8>, Errno> {
    read_regular(dir, b".git/index", MAX_INDEX)
}

/// A small file (a `.git` pointer) beneath `dir`.
fn read_small(dir: &OwnedFd, name: &[u8]) -> Result<Vec<u8>, Errno> {
    read_regular(dir, name, 4096)
}

/// `name` beneath `dir`, each component opened without following a link, as a regular file
/// only and without blocking (a call could leave a FIFO there), at most `max` bytes.
fn read_regular(dir: &OwnedFd, name: &[u8], max: u64) -> Result<Vec<u8>, Errno> {
    use std::os::unix::ffi::OsStrExt as _;
    let flags = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut parts = name.split(|&b| b == b'/').peekable();
    let mut at = dir.try_clone().map_err(|_| Errno::EMFILE)?;
    while let Some(part) = parts.next() {
        let part = std::ffi::OsStr::from_bytes(part);
        let last = parts.peek().is_none();
        let how = if last {
            OFlag::O_RDONLY | OFlag::O_NONBLOCK
        } else {
            OFlag::O_PATH
        };
        at = nix::fcntl::openat(at.as_fd(), part, flags | how, Mode::empty())?;
    }
    if nix::sys::stat::fstat(&at)?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Errno::EINVAL);
    }
    let mut data = Vec::new();
    std::fs::File::from(at)
        .take(max)
        .read_to_end(&mut data)
        .map_err(|_| Errno::EIO)?;
    Ok(data)
}

/// The paths of the gitlinks of an index (versions 2 to 4) whose object names are `hash`
/// bytes long, as bytes (a path need not be UTF-8); `None` for what is no such index. Linear in
/// the index's size: a version 4 name is built in place from the one before.
fn gitlinks(data: &[u8], hash: usize) -> Option<Vec<Vec<u8>>> {
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
        if version == 4 {
            let (strip, used) = varint(data.get(at..)?)?;
            at += used;
            let end = at + data.get(at..)?.iter().position(|&b| b == 0)?;
            prev.truncate(prev.len().checked_sub(strip)?);
            prev.extend_from_slice(&data[at..end]);
            pos = end + 1;
        } else {
            let end = at + data.get(at..)?.iter().position(|&b| b == 0)?;
            prev.clear();
            prev.extend_from_slice(&data[at..end]);
            // The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
            pos += (end - pos + 8) & !7;
        }
        if prev.len() > MAX_NAME {
            return None;
        }
        if mode == 0o160000 && out.len() <= MAX_LINKS {
            out.push(prev.clone());
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
        assert_eq!(gitlinks(&data, 20), Some(vec![b"lib/sub".to_vec()]));
        assert_eq!(gitlinks(b"nope", 20), None);
        assert_eq!(gitlinks(&data[..40], 20), None, "a truncated index is none");
    }

    /// An index of version 2 holding `entries`.
    fn index(entries: &[(&[u8], u32)]) -> Vec<u8> {
        let mut data = b"DIRC".to_vec();
        data.extend_from_slice(&2u32.to_be_bytes());
        data.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for (name, mode) in entries {
            let mut e = vec![0u8; 62];
            e[24..28].copy_from_slice(&mode.to_be_bytes());
            e[60..62].copy_from_slice(&(name.len() as u16).to_be_bytes());
            e.extend_from_slice(name);
            let padded = (e.len() + 8) & !7;
            e.resize(padded, 0);
            data.extend(e);
        }
        data
    }

    #[test]
    fn embedded_repositories_are_followed_and_a_submodules_pointer_is_not() {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = crate::audit::testdir::TestDir::new("gitlinks");
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".git/modules/lib")).expect("mkdir");
        std::fs::write(ws.join(".git/index"), index(&[])).expect("index");
        let pinned: OwnedFd = std::fs::File::open(ws).expect("open").into();
        let watch = Index::at_start(&pinned).expect("a repository");
        assert_eq!(
            watch.followed(),
            Ok(Vec::new()),
            "the index has not changed"
        );
        // An embedded repository made in an earlier call, a submodule's pointer, one that
        // points elsewhere, and a name that is no UTF-8.
        for d in ["emb/.git", "lib", "out", "bad\u{fffd}"] {
            std::fs::create_dir_all(ws.join(d)).expect("mkdir");
        }
        std::fs::write(ws.join("lib/.git"), "gitdir: ../.git/modules/lib\n").expect("lib");
        std::fs::write(ws.join("out/.git"), "gitdir: ../evil\n").expect("out");
        std::fs::create_dir_all(ws.join(std::ffi::OsStr::from_bytes(b"raw\xff/.git")))
            .expect("mkdir");
        let entries: [(&[u8], u32); 5] = [
            (b"emb", 0o160000),
            (b"lib", 0o160000),
            (b"out", 0o160000),
            (b"raw\xff", 0o160000),
            (b"README", 0o100644),
        ];
        std::fs::write(ws.join(".git/index"), index(&entries)).expect("index");
        let followed: Vec<Vec<u8>> = watch
            .followed()
            .expect("read")
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect();
        assert_eq!(
            followed,
            [
                b"emb/.git".to_vec(),
                b"out/.git".to_vec(),
                b"raw\xff/.git".to_vec()
            ]
        );
        // One guard cannot read is said, not taken for one without gitlinks.
        std::fs::write(ws.join(".git/index"), b"DIRC garbage").expect("index");
        assert!(watch.followed().is_err());
    }

    #[test]
    fn an_index_that_is_a_fifo_is_not_waited_on() {
        let dir = crate::audit::testdir::TestDir::new("gitlinks-fifo");
        std::fs::create_dir_all(dir.path().join(".git")).expect("mkdir");
        nix::unistd::mkfifo(
            &dir.path().join(".git/index"),
            Mode::from_bits_truncate(0o600),
        )
        .expect("mkfifo");
        let pinned: OwnedFd = std::fs::File::open(dir.path()).expect("open").into();
        assert_eq!(read_index(&pinned), Err(Errno::EINVAL));
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
        assert_eq!(gitlinks(&data, 20), Some(vec![b"lib/sub".to_vec()]));
    }
}
