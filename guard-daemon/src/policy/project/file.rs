//! Reading `<workspace>/.guard/policy.toml` as root without being led elsewhere: the file
//! belongs to the workspace's owner, who could make `.guard` or the file a symlink to any file
//! of the host, and a load error quotes the line it is about. So the workspace is opened as
//! guardd opens a policy's paths (root's symlinks only), `.guard` and `policy.toml` beneath it
//! without following a symlink, and only a regular file of bounded size is read, through the
//! descriptor that was checked.

use std::{
    io::Read as _,
    os::{fd::OwnedFd, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use nix::{
    errno::Errno,
    fcntl::OFlag,
    sys::stat::{FileStat, Mode, SFlag},
};

/// Where a project policy lives, relative to its workspace.
pub const RELATIVE: &str = ".guard/policy.toml";

/// The largest project policy read: a policy that restates a few tools is a few KiB.
pub const MAX_BYTES: u64 = 256 * 1024;

/// What a file was when last read: a change of content changes at least one of these (`ctime`
/// moves with every write and cannot be set back by its owner), so comparing them per call is
/// enough to know the file must be read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl Stamp {
    fn of_meta(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            mode: m.mode(),
        }
    }

    /// Whether the file was last changed long enough ago that any later change moves its
    /// times: file times come from a clock that ticks every few milliseconds, so two writes
    /// within one tick, of the same size, can leave the same stamp.
    pub fn settled(&self) -> bool {
        let changed = std::time::UNIX_EPOCH
            + std::time::Duration::new(
                u64::try_from(self.ctime.0).unwrap_or(0),
                u32::try_from(self.ctime.1).unwrap_or(0),
            );
        std::time::SystemTime::now()
            .duration_since(changed)
            .is_ok_and(|d| d >= std::time::Duration::from_secs(1))
    }

    fn of_stat(s: &FileStat) -> Self {
        Self {
            dev: s.st_dev,
            ino: s.st_ino,
            size: u64::try_from(s.st_size).unwrap_or(u64::MAX),
            mtime: (s.st_mtime, s.st_mtime_nsec),
            ctime: (s.st_ctime, s.st_ctime_nsec),
            mode: s.st_mode,
        }
    }
}

/// The project policy of `workspace` as it is now, without reading it: `None` when there is
/// none (no `.guard`, or no `policy.toml` in it), `Err` when it cannot even be looked at (then
/// every call there is blocked). One `lstat`, cheap enough for every call.
pub fn stamp(workspace: &Path) -> Result<Option<Stamp>, String> {
    let path = workspace.join(RELATIVE);
    match std::fs::symlink_metadata(&path) {
        Ok(m) => Ok(Some(Stamp::of_meta(&m))),
        Err(e)
            if matches!(
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
                Errno::ENOENT
            ) =>
        {
            Ok(None)
        }
        // `.guard` is a file, not a directory: it holds no policy.
        Err(e)
            if matches!(
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
                Errno::ENOTDIR
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A project policy as read.
#[derive(Clone, Debug)]
pub struct ProjectFile {
    /// `<workspace>/.guard/policy.toml`.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// `sha256:` and the hex SHA-256 of the text.
    pub sha256: String,
    /// The file as read, to compare with [`stamp`]'s.
    pub stamp: Stamp,
}

/// Reads the project policy of `workspace` (a real path); `Ok(None)` when there is none.
pub fn read(workspace: &Path) -> Result<Option<ProjectFile>, String> {
    let path = workspace.join(RELATIVE);
    let fail = |why: String| format!("{}: {why}", path.display());
    let ws = crate::sandbox::resolve::open(workspace, OFlag::O_DIRECTORY)
        .map_err(|e| fail(format!("workspace {}: {e}", workspace.display())))?;
    // O_PATH with O_NOFOLLOW opens a symlink itself, which fstat then names as one (with
    // O_DIRECTORY instead, a symlink would be ENOTDIR, as a file is: no policy, silently).
    let dir = match beneath(&ws, ".guard", OFlag::O_PATH) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(fail(format!(".guard: {e}"))),
    };
    let kind = nix::sys::stat::fstat(&dir).map_err(|e| fail(format!(".guard: {e}")))?;
    match SFlag::from_bits_truncate(kind.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => {}
        SFlag::S_IFLNK => {
            return Err(fail(
                "the directory .guard is a symlink: a project policy must lie in the workspace \
                 itself"
                    .into(),
            ));
        }
        // A `.guard` that is a file holds no policy.
        _ => return Ok(None),
    }
    // O_NONBLOCK: a FIFO planted here must not hold guardd's open (it is refused below).
    let file = match beneath(&dir, "policy.toml", OFlag::O_RDONLY | OFlag::O_NONBLOCK) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => {
            return Err(fail(
                "is a symlink: a project policy must be a file of the workspace itself".into(),
            ));
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    let st = nix::sys::stat::fstat(&file).map_err(|e| fail(e.to_string()))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(fail("is not a regular file".into()));
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > MAX_BYTES {
        return Err(fail(format!(
            "is {size} bytes, more than the {MAX_BYTES} a project policy may have"
        )));
    }
    let mut text = String::new();
    std::fs::File::from(file)
        .take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(format!("not read: {e}")))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(fail(format!(
            "grew past the {MAX_BYTES} bytes a project policy may have while read"
        )));
    }
    Ok(Some(ProjectFile {
        sha256: sha256(&text),
        path,
        text,
        stamp: Stamp::of_stat(&st),
    }))
}

/// Opens `name` in `dir` without following a symlink (`ELOOP` when it is one).
fn beneath(dir: &OwnedFd, name: &str, flags: OFlag) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        dir,
        name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )
}

/// `sha256:` and the hex SHA-256 of `text`.
pub fn sha256(text: &str) -> String {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    format!("sha256:{}", crate::call::hash::hex(&digest))
}
