//! A call's write-opens, as guardd sees them: every one stops in the call's seccomp filter
//! (`seccomp::write_opens`) until guardd has judged it and answered "go on". The answer never
//! refuses: landlock and the read-only mount view still decide, as they would without this.
//! What it adds is that an open they will refuse is seen: the call tried to write where it was
//! not approved to, an attempt, and its receipt says so.
//!
//! The judgement mirrors landlock's: the file (or, for one to be created, its directory) is
//! found as the thread names it (its working directory or directory descriptor, read from
//! /proc), and its path is walked up to `/`, each directory on the way compared by identity
//! with the call's rules, the rights of those it matches put together; an open whose rights
//! they do not all grant is an attempt. Opens landlock does not judge (a pipe or socket through
//! `/proc/self/fd`) are not attempts either.
//!
//! The listener is served on a blocking thread of the runtime, one per running call: a name
//! that leads into a stalled file system stalls that call's judge, not guardd's workers.

mod listener;

use std::{
    collections::HashMap,
    ffi::OsStr,
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
};

use ::landlock::{AccessFs, BitFlags};
use nix::{fcntl::OFlag, sys::stat::Mode};

use self::listener::{Listener, Next, Notification, read_cstr, read_mem};
use super::landlock::LandlockRules;

/// `/dev/tty`, the opener's controlling terminal: a call has none (it is a session of its own,
/// and seccomp refuses `TIOCSCTTY`), so its open reaches nothing (ENXIO, were landlock not
/// first). Shells probe it for job control; that is no attempt at an effect.
const CONTROLLING_TERMINAL: libc::dev_t = libc::makedev(5, 0);

/// The longest name guardd reads from a call's memory (`PATH_MAX`).
const PATH_MAX: usize = 4096;

/// An open a call attempted outside its write rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The thread that made it.
    pub pid: i32,
    /// The file, its links resolved (or, for one to be created, its directory's path and the
    /// name).
    pub path: String,
    /// The open's flags.
    pub flags: u32,
}

/// The rights a call's landlock rules grant, by the identity (device, inode) of each rule's
/// file or directory: the rules that let it write or create something only.
#[derive(Clone, Debug, Default)]
pub struct WriteRules {
    by_identity: HashMap<(u64, u64), BitFlags<AccessFs>>,
}

impl WriteRules {
    /// The write rights of `rules`, each at the file its path leads to now (as landlock's rule
    /// took it); a path that leads nowhere grants nothing.
    pub fn of(rules: &LandlockRules) -> Self {
        let mut by_identity: HashMap<(u64, u64), BitFlags<AccessFs>> = HashMap::new();
        let writes = AccessFs::WriteFile | AccessFs::MakeReg;
        for rule in rules.fs.iter().filter(|r| r.access.intersects(writes)) {
            if let Ok(meta) = std::fs::metadata(&rule.path) {
                *by_identity.entry((meta.dev(), meta.ino())).or_default() |= rule.access;
            }
        }
        Self { by_identity }
    }

    /// Whether the rules on `path` and the directories above it grant all of `needed`; `path`
    /// has no links left in it.
    fn grant(&self, path: &Path, needed: BitFlags<AccessFs>) -> bool {
        let mut granted = BitFlags::<AccessFs>::empty();
        for dir in path.ancestors() {
            if let Ok(meta) = std::fs::metadata(dir)
                && let Some(access) = self.by_identity.get(&(meta.dev(), meta.ino()))
            {
                granted |= *access;
                if granted.contains(needed) {
                    return true;
                }
            }
        }
        false
    }
}

/// The socket pair the child hands its listener to guardd through (`child::watch_writes`).
pub(super) fn channel() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    socketpair(
        AddressFamily::Unix,
        SockType::Datagram,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
}

/// The listener the child sent through `socket` before its exec (ENOMSG when none came).
pub(super) fn receive(socket: &OwnedFd) -> nix::Result<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
    let received = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), flags)?;
    let fd = received.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
        _ => None,
    });
    // SAFETY: a descriptor just received through SCM_RIGHTS is this process's own.
    fd.map(|fd| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
        .ok_or(nix::Error::ENOMSG)
}

/// An attempt on its way to the call's receipt, and the word that it was recorded.
pub(super) type Reported = (Attempt, tokio::sync::oneshot::Sender<()>);

/// Serves the call's listener until no process of it is left: judges each write-open, sends
/// each attempt to `attempts` and waits until it is recorded (so a call that a divergence ends
/// is killed before the open goes on, and never sees its refusal), and lets the kernel go on.
/// Blocking: run it on its own thread.
pub(super) fn serve(
    listener: OwnedFd,
    rules: &WriteRules,
    attempts: &tokio::sync::mpsc::UnboundedSender<Reported>,
) {
    super::name_blocking_thread();
    let listener = Listener::new(listener);
    loop {
        let n = match listener.next() {
            Ok(Next::Notification(n)) => n,
            Ok(Next::Gone) => continue,
            Ok(Next::Hangup) => return,
            Err(e) => {
                // Pending opens fail (ENOSYS) once the listener is closed: nothing waits on it.
                tracing::error!("serving a call's write-opens: {e}");
                return;
            }
        };
        if let Some(attempt) = judge(&listener, rules, &n) {
            let (recorded, done) = tokio::sync::oneshot::channel();
            if attempts.send((attempt, recorded)).is_ok() {
                let _ = done.blocking_recv();
            }
        }
        if let Err(e) = listener.go_on(n.id) {
            tracing::error!("answering a call's write-open: {e}");
            return;
        }
    }
}

/// The open `n` asks for, judged against `rules` while its thread waits; `None` when the rules
/// grant it or it is none landlock judges (a pipe, a name that leads nowhere).
fn judge(listener: &Listener, rules: &WriteRules, n: &Notification) -> Option<Attempt> {
    let (dirfd, name_at, flags) = open_args(n)?;
    let name = read_cstr(n.pid, name_at, PATH_MAX)?;
    // The pid names the thread that asked only while its syscall waits.
    if !listener.pending(n.id) {
        return None;
    }
    let flags = flags as i32;
    let writes = matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR);
    let name = of_thread(n.pid, &name);
    let base = base_of(n.pid, dirfd, &name)?;
    let mut follow = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if flags & libc::O_NOFOLLOW != 0 {
        follow |= OFlag::O_NOFOLLOW;
    }
    let (path, needed) = match nix::fcntl::openat(&base, name.as_path(), follow, Mode::empty()) {
        Ok(file) => {
            // Opening an existing file with O_EXCL fails (EEXIST), one not for writing asks
            // only to read it, and a directory or a socket cannot be opened for writing.
            let stat = nix::sys::stat::fstat(&file).ok()?;
            let kind = stat.st_mode & libc::S_IFMT;
            if flags & libc::O_EXCL != 0
                || !writes
                || kind == libc::S_IFDIR
                || kind == libc::S_IFSOCK
                || (kind == libc::S_IFCHR && stat.st_rdev == CONTROLLING_TERMINAL)
            {
                return None;
            }
            (real_path(&file)?, BitFlags::from(AccessFs::WriteFile))
        }
        Err(nix::Error::ENOENT) if flags & libc::O_CREAT != 0 => {
            let dir = name.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = nix::fcntl::openat(
                &base,
                dir.unwrap_or(Path::new(".")),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            let mut needed = BitFlags::from(AccessFs::MakeReg);
            if writes {
                needed |= AccessFs::WriteFile;
            }
            let real = real_path(&dir)?;
            if rules.grant(&real, needed) {
                return None;
            }
            (real.join(name.file_name()?), needed)
        }
        Err(_) => return None,
    };
    if rules.grant(&path, needed) {
        return None;
    }
    Some(Attempt {
        pid: n.pid,
        path: path.to_string_lossy().into_owned(),
        flags: flags as u32,
    })
}

/// The directory descriptor, the name's address and the flags of an open syscall.
fn open_args(n: &Notification) -> Option<(i32, u64, u64)> {
    let [a0, a1, a2, ..] = n.args;
    match n.nr {
        libc::SYS_open => Some((libc::AT_FDCWD, a0, a1)),
        libc::SYS_openat => Some((a0 as i32, a1, a2)),
        libc::SYS_creat => Some((
            libc::AT_FDCWD,
            a0,
            (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
        )),
        libc::SYS_openat2 => {
            // `struct open_how` begins with its u64 flags.
            let mut flags = [0u8; 8];
            let got = read_mem(n.pid, a2, &mut flags)?;
            (got == flags.len()).then(|| (a0 as i32, a1, u64::from_ne_bytes(flags)))
        }
        _ => None,
    }
}

/// `name` as guardd must look it up: `/proc/self` and `/proc/thread-self` are the thread's,
/// not guardd's.
fn of_thread(pid: i32, name: &[u8]) -> PathBuf {
    for own in [&b"/proc/self"[..], b"/proc/thread-self"] {
        if let Some(rest) = name.strip_prefix(own)
            && (rest.is_empty() || rest.starts_with(b"/"))
        {
            let mut path = format!("/proc/{pid}").into_bytes();
            path.extend_from_slice(rest);
            return PathBuf::from(OsStr::from_bytes(&path));
        }
    }
    PathBuf::from(OsStr::from_bytes(name))
}

/// Where a relative `name` starts: the thread's working directory or its directory descriptor
/// (an absolute one ignores it).
fn base_of(pid: i32, dirfd: i32, name: &Path) -> Option<OwnedFd> {
    let dir = if name.is_absolute() {
        PathBuf::from("/")
    } else if dirfd == libc::AT_FDCWD {
        PathBuf::from(format!("/proc/{pid}/cwd"))
    } else {
        PathBuf::from(format!("/proc/{pid}/fd/{dirfd}"))
    };
    nix::fcntl::open(
        &dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// The path `file` was reached by, its links resolved; `None` for one outside the tree of
/// names (a pipe, a socket, a deleted file), which landlock does not judge by path.
fn real_path(file: &OwnedFd) -> Option<PathBuf> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let bytes = link.as_os_str().as_bytes();
    (bytes.starts_with(b"/") && !bytes.ends_with(b" (deleted)")).then_some(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_own_proc_is_its_own() {
        assert_eq!(
            of_thread(42, b"/proc/self/fd/1"),
            Path::new("/proc/42/fd/1")
        );
        assert_eq!(of_thread(42, b"/proc/thread-self"), Path::new("/proc/42"));
        assert_eq!(of_thread(42, b"/proc/selfish"), Path::new("/proc/selfish"));
        assert_eq!(of_thread(42, b"out.txt"), Path::new("out.txt"));
    }

    #[test]
    fn rights_add_up_along_the_path() {
        let dir = crate::audit::testdir::TestDir::new("write-rules");
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).expect("mkdir");
        let mut rules = WriteRules::default();
        let id = |p: &Path| {
            let m = std::fs::metadata(p).expect("stat");
            (m.dev(), m.ino())
        };
        rules
            .by_identity
            .insert(id(dir.path()), AccessFs::MakeReg.into());
        rules
            .by_identity
            .insert(id(&dir.path().join("a")), AccessFs::WriteFile.into());
        let both = AccessFs::MakeReg | AccessFs::WriteFile;
        assert!(rules.grant(&sub, both));
        assert!(!rules.grant(dir.path(), both));
        assert!(rules.grant(dir.path(), AccessFs::MakeReg.into()));
        assert!(!rules.grant(Path::new("/etc"), AccessFs::WriteFile.into()));
    }
}
