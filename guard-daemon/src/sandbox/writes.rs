//! A call's write-opens and execs, as guardd sees them: every one stops in the call's seccomp
//! filter (`seccomp::write_opens`) until guardd has judged it and answered "go on". The answer
//! never refuses: landlock and the read-only mount view still decide, as they would without
//! this. What it adds is that an open or an exec they will refuse is seen: the call tried to
//! write where it was not approved to, or to run a program it may not (landlock's EACCES, which
//! the kernel's exec check never meets), an attempt, and its receipt says so.
//!
//! The listener is served from before the call's child is cloned (its own exec of the tool
//! stops there too, while the launching thread waits for it), on a thread of its own.
//!
//! The judgement mirrors landlock's: the file (or, for one to be created, its directory) is
//! found as the thread would find it ([`walk`]), and each directory on the way down to it is
//! compared by identity with the call's rules, as landlock's own rules hold them, the rights of
//! those it matches put together; an open whose rights they do not all grant is an attempt.
//! Opens landlock does not judge (a pipe or socket through `/proc/self/fd`) are not attempts.
//!
//! The listener is served on a blocking thread of the runtime, one per running call, with the
//! call's file-system identity: a name that leads into a stalled file system stalls that
//! call's judge, not guardd's workers, and a name the call could not look up is not found.

pub mod backstop;
mod listener;
mod unix;
mod walk;

use std::{
    collections::HashMap,
    os::fd::{AsRawFd as _, OwnedFd},
};

use ::landlock::{AccessFs, BitFlags};
use nix::{
    fcntl::OFlag,
    sys::stat::{FileStat, Mode},
};

use self::{
    listener::{Listener, Next, Notification, read_cstr, read_mem},
    walk::{Found, Id, Lost, Root, Walker, shown},
};
use super::landlock::Writable;

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
    pub kind: AttemptKind,
}

/// What a call attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    /// An open for writing outside its write rules.
    WriteOpen,
    /// An exec of a program it may not run.
    Exec,
    /// A connect to a Unix socket outside its places ([`unix`]).
    UnixConnect,
}

/// The rights a call's landlock rules grant, by the identity (device, inode) of each rule's
/// file or directory, as landlock's rules hold them: the rules that let it write or create
/// something only.
#[derive(Debug, Default)]
pub struct WriteRules {
    by_identity: HashMap<Id, BitFlags<AccessFs>>,
    /// The protected paths (`sandbox::protected`): nothing at or beneath them is granted.
    protected: std::collections::HashSet<Id>,
    /// The call's user and group: the judge looks names up as the call would.
    pub(super) user: (u32, u32),
    /// The identities of the rules that grant Execute.
    executable: std::collections::HashSet<Id>,
}

impl WriteRules {
    /// The write rights of the rules landlock took (`writable`), but none at or beneath a
    /// `protected` path, for a call as `user`.
    pub fn of(
        writable: &[Writable],
        executable: &[Id],
        protected: &[crate::sandbox::protected::Kept],
        user: (u32, u32),
    ) -> Self {
        let mut by_identity: HashMap<Id, BitFlags<AccessFs>> = HashMap::new();
        let writes = AccessFs::WriteFile | AccessFs::MakeReg;
        for w in writable.iter().filter(|w| w.access.intersects(writes)) {
            *by_identity.entry((w.dev, w.ino)).or_default() |= w.access;
        }
        let protected = protected
            .iter()
            .filter(|k| k.read_only)
            .map(|k| (k.place.dev, k.place.ino))
            .collect();
        Self {
            by_identity,
            protected,
            user,
            executable: executable.iter().copied().collect(),
        }
    }

    /// Whether a rule on the directories of `chain` (the file's own last) grants Execute. A
    /// protected name does not stop it: git runs the developer's hooks in a call.
    fn runs(&self, chain: &[Id]) -> bool {
        chain.iter().any(|at| self.executable.contains(at))
    }

    /// Grants `access` on the directory `id` too: the call's `/dev/shm`, its temporary
    /// directory's `.shm` mounted there, whose way up is through that mount, not the directory.
    pub fn also(&mut self, id: Id, access: BitFlags<AccessFs>) {
        *self.by_identity.entry(id).or_default() |= access;
    }

    /// Whether the rules on the directories of `chain` (root first) grant all of `needed`.
    fn grant(&self, chain: &[Id], needed: BitFlags<AccessFs>) -> bool {
        let mut granted = BitFlags::<AccessFs>::empty();
        for at in chain.iter().rev() {
            // Met before the rule that grants: the path is protected, whatever that rule says.
            if self.protected.contains(at) {
                return false;
            }
            if let Some(access) = self.by_identity.get(at) {
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

/// The listener the child sends through `socket` before its exec, waited for (ENOMSG when the
/// child ended without sending one).
pub(super) fn receive(socket: &OwnedFd) -> nix::Result<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let flags = MsgFlags::MSG_CMSG_CLOEXEC;
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

/// Serves the listener that comes through `socket` ([`serve`]) on a thread of its own, from now
/// (before the child is cloned: its exec stops there too); the attempts, as they come.
pub(super) fn start(
    socket: OwnedFd,
    rules: std::sync::Arc<WriteRules>,
) -> tokio::sync::mpsc::UnboundedReceiver<Reported> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let work = move || serve(socket, &rules, &tx);
    // The runtime's blocking threads where there is a runtime (guardd); a thread of its own
    // otherwise (a test's launch).
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(work)),
        Err(_) => drop(std::thread::spawn(work)),
    }
    rx
}

/// Waits for the listener the call's child sends through `socket`, then serves it until no
/// process of the call is left: judges each write-open and exec, sends each attempt to
/// `attempts` and waits until it is recorded (so a call that a divergence ends is killed before
/// the open goes on, and never sees its refusal), and lets the kernel go on. Blocking: run it
/// on its own thread, from before the child is cloned.
pub(super) fn serve(
    socket: OwnedFd,
    rules: &WriteRules,
    attempts: &tokio::sync::mpsc::UnboundedSender<Reported>,
) {
    super::name_blocking_thread();
    let listener = match receive(&socket) {
        Ok(fd) => Listener::new(fd),
        // The child ended before it had one: nothing will come.
        Err(_) => return,
    };
    drop(socket);
    let (uid, gid) = rules.user;
    super::as_user(uid, gid, || serve_as_user(&listener, rules, attempts));
}

/// [`serve`]'s loop, on a thread with the call's file-system identity.
fn serve_as_user(
    listener: &Listener,
    rules: &WriteRules,
    attempts: &tokio::sync::mpsc::UnboundedSender<Reported>,
) {
    // The call's `/`, opened once, from the first thread that stops: an absolute name is
    // looked up in the call's mount view, where `/tmp` and `/dev/shm` are its own
    // (`child::mounts`). Each open a call makes waits for its judge.
    let call_root = |pid: i32| {
        let flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(format!("/proc/{pid}/root").as_str(), flags, Mode::empty());
        Root::new(fd.ok()?)
    };
    let mut slash: Option<Root> = None;
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
        if slash.is_none() {
            // The first, or out of descriptors at the call's start, say: try again, and judge
            // nothing granted meanwhile.
            slash = call_root(n.pid);
        }
        let (attempt, answer) = if n.nr == libc::SYS_connect {
            match unix::connect(listener, rules, slash.as_ref(), &n) {
                unix::Answer::GoOn => (None, None),
                unix::Answer::Done(errno, attempt) => (attempt, Some(errno)),
            }
        } else {
            (judge(listener, rules, slash.as_ref(), &n), None)
        };
        if let Some(attempt) = attempt {
            let (recorded, done) = tokio::sync::oneshot::channel();
            if attempts.send((attempt, recorded)).is_ok() {
                let _ = done.blocking_recv();
            }
        }
        let answered = match answer {
            Some(errno) => listener.answer(n.id, errno),
            None => listener.go_on(n.id),
        };
        if let Err(e) = answered {
            tracing::error!("answering a call's write-open: {e}");
            return;
        }
    }
}

/// The open `n` asks for, judged against `rules` while its thread waits; `None` when the rules
/// grant it or it is none landlock judges (a pipe, a name that leads nowhere). `slash` is the
/// root of a name that is not `RESOLVE_IN_ROOT`'s; without it, no such name is known to be
/// granted.
fn judge(
    listener: &Listener,
    rules: &WriteRules,
    slash: Option<&Root>,
    n: &Notification,
) -> Option<Attempt> {
    if matches!(n.nr, libc::SYS_execve | libc::SYS_execveat) {
        return judge_exec(listener, rules, slash, n);
    }
    let open = open_args(n)?;
    let name = read_cstr(n.pid, open.name_at, PATH_MAX)?;
    // The pid names the thread that asked only while its syscall waits.
    if !listener.pending(n.id) {
        return None;
    }
    let flags = open.flags as i32;
    // Only a relative name, or one in a root of its own, needs the thread's directory.
    let start = (open.in_root || !name.starts_with(b"/"))
        .then(|| dir_of(n.pid, open.dirfd))
        .flatten();
    // Not known to be granted: an attempt, by the name the thread gave.
    let unjudged = || Attempt {
        pid: n.pid,
        path: String::from_utf8_lossy(&name).into_owned(),
        flags: flags as u32,
        kind: AttemptKind::WriteOpen,
    };
    let in_root;
    let root = if open.in_root {
        in_root = Root::new(start.as_ref()?.try_clone().ok()?)?;
        &in_root
    } else {
        match slash {
            Some(slash) => slash,
            None => return Some(unjudged()),
        }
    };
    let walker = Walker { pid: n.pid, root };
    // A last link is not followed with O_NOFOLLOW (ELOOP), nor by O_CREAT | O_EXCL (EEXIST).
    let exclusive = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
    let nofollow = flags & libc::O_NOFOLLOW != 0 || exclusive;
    // The chain ends with the file's own identity: a protected file is met before its
    // directories.
    let found = match walker.find(start, &name, nofollow) {
        Ok(found) => found,
        Err(Lost::Fails) => return None,
        Err(Lost::Unfollowed) => return Some(unjudged()),
    };
    let (reached, name, chain, needed) = match found {
        Found::File { fd, stat, chain } => (fd, None, chain, needed_by(&stat, flags)?),
        Found::New { dir, chain, name } if flags & libc::O_CREAT != 0 => {
            let mut needed = BitFlags::from(AccessFs::MakeReg);
            if writes(flags) {
                needed |= AccessFs::WriteFile;
            }
            (dir, Some(name), chain, needed)
        }
        Found::New { .. } => return None, // ENOENT
    };
    if rules.grant(&chain, needed) {
        return None;
    }
    Some(Attempt {
        pid: n.pid,
        path: shown(&reached, name.as_deref()),
        flags: flags as u32,
        kind: AttemptKind::WriteOpen,
    })
}

/// The exec `n` asks for (`execve`, or `execveat` by name), judged against the rules that grant
/// Execute while its thread waits: an attempt when the program is found and none of them
/// reaches it (landlock will refuse it, EACCES). An exec of a descriptor (`AT_EMPTY_PATH`), a
/// name that leads nowhere, or one the judge cannot follow is left to the kernel's exec check.
fn judge_exec(
    listener: &Listener,
    rules: &WriteRules,
    slash: Option<&Root>,
    n: &Notification,
) -> Option<Attempt> {
    let [a0, a1, _, _, a4, _] = n.args;
    let (dirfd, name_at, flags) = if n.nr == libc::SYS_execve {
        (libc::AT_FDCWD, a0, 0)
    } else {
        (a0 as i32, a1, a4 as i32)
    };
    let name = read_cstr(n.pid, name_at, PATH_MAX)?;
    if !listener.pending(n.id) || name.is_empty() {
        return None;
    }
    let start = (!name.starts_with(b"/"))
        .then(|| dir_of(n.pid, dirfd))
        .flatten();
    let walker = Walker {
        pid: n.pid,
        root: slash?,
    };
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    let Ok(Found::File { fd, stat, chain }) = walker.find(start, &name, nofollow) else {
        return None;
    };
    // Not a regular file: the exec fails for a reason of its own, and no program was asked for.
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG || rules.runs(&chain) {
        return None;
    }
    Some(Attempt {
        pid: n.pid,
        path: shown(&fd, None),
        flags: 0,
        kind: AttemptKind::Exec,
    })
}

/// Whether `flags` open for writing.
fn writes(flags: i32) -> bool {
    matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
}

/// The rights an open with `flags` of the existing file `stat` asks landlock for, if it asks
/// any it judges: none when it only reads, fails for a reason of its own (O_EXCL, a directory
/// or a socket opened for writing), or opens the controlling terminal.
fn needed_by(stat: &FileStat, flags: i32) -> Option<BitFlags<AccessFs>> {
    let kind = stat.st_mode & libc::S_IFMT;
    // O_TMPFILE names the directory the new, nameless file is made in.
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return (kind == libc::S_IFDIR).then(|| AccessFs::WriteFile | AccessFs::MakeReg);
    }
    let own_reason = flags & libc::O_EXCL != 0 && flags & libc::O_CREAT != 0
        || kind == libc::S_IFDIR
        || kind == libc::S_IFSOCK
        || (kind == libc::S_IFCHR && stat.st_rdev == CONTROLLING_TERMINAL);
    (writes(flags) && !own_reason).then(|| BitFlags::from(AccessFs::WriteFile))
}

/// An open syscall's arguments, as the judge needs them.
struct OpenArgs {
    dirfd: i32,
    name_at: u64,
    flags: u64,
    /// `openat2`'s `RESOLVE_IN_ROOT`: the directory is the name's root.
    in_root: bool,
}

/// The arguments of the open syscall `n`.
fn open_args(n: &Notification) -> Option<OpenArgs> {
    let [a0, a1, a2, ..] = n.args;
    let at = |dirfd: i32, name_at, flags| OpenArgs {
        dirfd,
        name_at,
        flags,
        in_root: false,
    };
    match n.nr {
        libc::SYS_open => Some(at(libc::AT_FDCWD, a0, a1)),
        libc::SYS_openat => Some(at(a0 as i32, a1, a2)),
        libc::SYS_creat => Some(at(
            libc::AT_FDCWD,
            a0,
            (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
        )),
        libc::SYS_openat2 => {
            // `struct open_how`: u64 flags, mode, resolve.
            let mut how = [0u8; 24];
            let got = read_mem(n.pid, a2, &mut how)?;
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&how[i * 8..i * 8 + 8]);
                u64::from_ne_bytes(b)
            };
            const RESOLVE_IN_ROOT: u64 = 0x10;
            (got == how.len()).then(|| OpenArgs {
                in_root: word(2) & RESOLVE_IN_ROOT != 0,
                ..at(a0 as i32, a1, word(0))
            })
        }
        _ => None,
    }
}

/// The directory a thread's relative name starts at: its working directory, or its directory
/// descriptor.
fn dir_of(pid: i32, dirfd: i32) -> Option<OwnedFd> {
    let dir = if dirfd == libc::AT_FDCWD {
        format!("/proc/{pid}/cwd")
    } else {
        format!("/proc/{pid}/fd/{dirfd}")
    };
    nix::fcntl::open(
        dir.as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

#[cfg(test)]
mod tests;
