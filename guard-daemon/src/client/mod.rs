//! The client side of the socket, shared by guard-exec and guardctl: typed requests out, typed
//! replies in (see [`crate::protocol::reply`]); what their command lines share ([`cli`]); and
//! Claude Code's hook ([`hook`]), which guard-exec answers.

pub mod cli;
pub mod hook;
pub mod term;

use std::{
    io::{self, BufRead as _, BufReader, Write as _},
    os::{
        fd::{AsFd as _, AsRawFd as _, OwnedFd},
        unix::net::UnixStream,
    },
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::socket::{
        AddressFamily, SockFlag, SockType, UnixAddr, connect, setsockopt, socket, sockopt,
    },
};

use serde::de::DeserializeOwned;

use crate::protocol::{self, Reply, Request};

/// Where guardd listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/guard/guard.sock";

/// `--socket`, else `GUARD_SOCKET`, else the default (clap fills the first two).
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// The file status flags (`O_NONBLOCK`, `O_APPEND`, `O_ASYNC`...) of the descriptors a call is
/// handed. The tool shares their open file descriptions with the caller, so a flag it sets with
/// `fcntl(F_SETFL)` (Node.js sets `O_NONBLOCK` on its stdio) would stay set after the call, for
/// the caller and whatever else shares them: a shell that then reads its terminal gets EAGAIN.
/// [`StdioFlags::restore`] puts them back once the call has ended (its processes are gone).
pub struct StdioFlags(Vec<(std::os::fd::RawFd, libc::c_int)>);

impl StdioFlags {
    /// The flags of `fds` now; a descriptor that is not open is left out.
    pub fn save(fds: &[std::os::fd::RawFd]) -> Self {
        Self(
            fds.iter()
                .filter_map(|&fd| {
                    // SAFETY: F_GETFL on a descriptor number reads flags, or fails with EBADF.
                    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                    (flags >= 0).then_some((fd, flags))
                })
                .collect(),
        )
    }

    /// Sets each saved descriptor's flags back where a call changed them (best effort: the
    /// caller is leaving, and has nothing better to do with a failure).
    pub fn restore(&self) {
        for &(fd, saved) in &self.0 {
            // SAFETY: as in `save`; F_SETFL only changes the file status flags it may change.
            unsafe {
                if libc::fcntl(fd, libc::F_GETFL) != saved {
                    libc::fcntl(fd, libc::F_SETFL, saved);
                }
            }
        }
    }
}

/// How long a client waits for guardd before it gives up and says guardd is busy (guard-exec
/// exits 75): for a place in its listen queue, and for guardd to take a request (an exec) or
/// answer it (any other). Never while a call runs or waits for a human: an exec, once guardd
/// has read it, is guardd's to bound (its judges', approvers', approval's and call's timeouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub reply: Duration,
}

/// `GUARD_CONNECT_TIMEOUT`'s default, in seconds.
pub const CONNECT_TIMEOUT_S: u64 = 10;
/// `GUARD_REPLY_TIMEOUT`'s default, in seconds.
pub const REPLY_TIMEOUT_S: u64 = 30;

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(CONNECT_TIMEOUT_S),
            reply: Duration::from_secs(REPLY_TIMEOUT_S),
        }
    }
}

impl Timeouts {
    /// `GUARD_CONNECT_TIMEOUT` and `GUARD_REPLY_TIMEOUT` (seconds, more than 0), else the
    /// defaults; a value that is no such number is an error naming the variable.
    pub fn from_env() -> io::Result<Self> {
        let var = |name: &str, default: Duration| match std::env::var(name) {
            Err(_) => Ok(default),
            Ok(text) => seconds(&text).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{name}={text}: {e}"))
            }),
        };
        let d = Self::default();
        Ok(Self {
            connect: var("GUARD_CONNECT_TIMEOUT", d.connect)?,
            reply: var("GUARD_REPLY_TIMEOUT", d.reply)?,
        })
    }
}

/// A number of seconds, more than 0 (fractions allowed): a timeout's value.
pub fn seconds(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 1e6 => Ok(Duration::from_secs_f64(s)),
        _ => Err("not a number of seconds from 0 to 1000000 (exclusive of 0)".into()),
    }
}

/// Whether `e` says guardd is there but did not serve in time (a full listen queue, a request
/// not taken or not answered), or refused for now (`busy`, `not admitted`): try again later,
/// rather than guardd is unreachable.
pub fn busy(e: &io::Error) -> bool {
    let said = e.to_string();
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    ) || said.starts_with("busy")
        || said.starts_with("not admitted")
}

/// Connects to the socket at `path`, waiting at most `within` for a place in guardd's listen
/// queue (a Unix socket's connect waits while the queue is full, for as long as SO_SNDTIMEO
/// lets it, then fails with EAGAIN).
pub fn connect_within(path: &Path, within: Duration) -> io::Result<UnixStream> {
    let fd = unix_socket(SockFlag::empty())?;
    setsockopt(&fd, sockopt::SendTimeout, &timeval(within))?;
    match connect(fd.as_raw_fd(), &UnixAddr::new(path)?) {
        Ok(()) => Ok(UnixStream::from(fd)),
        Err(Errno::EAGAIN) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "guardd's listen queue stayed full for {} s: guardd is busy",
                within.as_secs_f64()
            ),
        )),
        Err(e) => Err(e.into()),
    }
}

/// [`connect_within`] for a caller that must not block (an async runtime's thread): connected
/// at once when guardd's listen queue has a place, `None` when it is full, for the caller to
/// wait with [`connect_within`] elsewhere. A send on the connection waits at most `within`,
/// as on one `connect_within` made.
pub fn connect_now(path: &Path, within: Duration) -> io::Result<Option<UnixStream>> {
    let fd = unix_socket(SockFlag::SOCK_NONBLOCK)?;
    match connect(fd.as_raw_fd(), &UnixAddr::new(path)?) {
        Ok(()) => {}
        Err(Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    setsockopt(&stream, sockopt::SendTimeout, &timeval(within))?;
    Ok(Some(stream))
}

/// A new close-on-exec Unix stream socket.
fn unix_socket(flags: SockFlag) -> nix::Result<OwnedFd> {
    socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | flags,
        None,
    )
}

fn timeval(d: Duration) -> nix::sys::time::TimeVal {
    nix::sys::time::TimeVal::new(
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        i64::from(d.subsec_micros()),
    )
}

pub use crate::protocol::conn::unread;

/// Waits until guardd has read everything sent on `stream`, or has something to say on it;
/// `TimedOut` when neither happened within `within`. How a caller tells a guardd that has its
/// call (from then on, the call's and its review's own deadlines hold) from one that never
/// accepted the connection, without a reply timeout that a judge or a human would outlast.
pub fn wait_taken(stream: &UnixStream, within: Duration) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = Instant::now() + within;
    let mut step = Duration::from_millis(1);
    loop {
        if unread(stream)? == 0 {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "guardd did not take the request within {} s: guardd is busy",
                    within.as_secs_f64()
                ),
            ));
        }
        let wait = step.min(left);
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(wait.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        step = (step * 2).min(Duration::from_millis(50));
    }
}

/// How long a caller that lost guardd waits to see its call's processes gone (guardd's death
/// kills them: the first one dies with it, and the rest with their pid namespace).
pub const GONE_WITHIN: Duration = Duration::from_secs(10);

/// What became of a call whose guardd went away before its end, as a caller can tell it: from
/// the call's `started` reply, its cgroup, which says `populated 0` in `cgroup.events` once
/// every process of the call is gone (waited for, up to [`GONE_WITHIN`]; a cgroup removed since
/// was empty). Never says stopped before that is seen.
pub fn lost(started: Option<&protocol::reply::Started>) -> String {
    let Some(started) = started else {
        return "guardd closed the connection before it said the call started; a call it had \
                started dies with it"
            .into();
    };
    let (id, pid) = (&started.call_id, started.pid);
    if gone_within(&started.cgroup.join("cgroup.events"), GONE_WITHIN) {
        format!(
            "guardd closed the connection while call {id} ran; the call was stopped: its \
             processes are gone"
        )
    } else {
        format!(
            "guardd closed the connection while call {id} ran; its processes (the first, pid \
             {pid}) were still there {} s later, or could not be seen",
            GONE_WITHIN.as_secs()
        )
    }
}

/// Whether the cgroup whose `cgroup.events` is `events` is empty, or gone, within `within`.
fn gone_within(events: &Path, within: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = Instant::now() + within;
    let Ok(file) = std::fs::File::open(events) else {
        // A cgroup is removed only once empty.
        return !events.parent().is_some_and(Path::exists);
    };
    loop {
        let mut text = String::new();
        // cgroup.events is read whole from its start each time; a change wakes POLLPRI.
        let read = std::io::Read::read_to_string(&mut &file, &mut text)
            .and_then(|_| std::io::Seek::rewind(&mut &file));
        if read.is_err() {
            return !events.exists();
        }
        if text.lines().any(|l| l == "populated 0") {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ms = PollTimeout::try_from(left.as_millis().min(200)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLPRI)];
        let _ = poll(&mut fds, ms);
    }
}

/// A connection to guardd.
pub struct Client {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    /// How long `request` waits for its reply.
    reply: Duration,
    /// The bound on every other read (`None`: a stream may be quiet for as long as it likes).
    read_timeout: Option<Duration>,
}

impl Client {
    /// Connects to guardd's socket, with the timeouts of the environment
    /// ([`Timeouts::from_env`]).
    pub fn connect(path: &Path) -> io::Result<Self> {
        Self::connect_with(path, Timeouts::from_env()?)
    }

    /// Connects to guardd's socket within `timeouts.connect`; `request` waits
    /// `timeouts.reply` for its answer, and a write as long.
    pub fn connect_with(path: &Path, timeouts: Timeouts) -> io::Result<Self> {
        let stream = connect_within(path, timeouts.connect)?;
        stream.set_write_timeout(Some(timeouts.reply))?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self {
            stream,
            reader,
            reply: timeouts.reply,
            read_timeout: None,
        })
    }

    /// Bounds each later read and write by `timeout`: for a client that must not hang on a
    /// stuck guardd (a shell's completion).
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        // The reader is a clone of the same socket: the timeouts are the socket's, for both.
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        self.reply = timeout;
        self.read_timeout = Some(timeout);
        Ok(())
    }

    /// Sends one request, with `fds` attached if any.
    pub fn send(&mut self, request: &Request, fds: &[std::os::fd::RawFd]) -> io::Result<()> {
        self.send_frame(&protocol::frame(request), fds)
    }

    /// Sends one frame as it is (newline included), with `fds` attached if any: for a frame
    /// that is no valid request, as a test or a fuzzer sends.
    pub fn send_frame(&mut self, frame: &[u8], fds: &[std::os::fd::RawFd]) -> io::Result<()> {
        if fds.is_empty() {
            self.stream.write_all(frame)
        } else {
            crate::protocol::conn::send_with_fds(&self.stream, frame, fds)
        }
    }

    /// Waits until guardd has taken what was sent (see [`wait_taken`]).
    pub fn wait_taken(&self, within: Duration) -> io::Result<()> {
        wait_taken(&self.stream, within)
    }

    /// Reads the next reply (an [`ExecReply`](protocol::ExecReply) after `exec`, a [`Reply`]
    /// otherwise); `None` when guardd closed the connection.
    pub fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        let mut line = Vec::new();
        let read = self.reader.read_until(b'\n', &mut line).map_err(|e| {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "guardd did not answer in time: guardd is busy",
                )
            } else {
                e
            }
        })?;
        if read == 0 {
            return Ok(None);
        }
        protocol::parse_reply(&line)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// What guardd said before it closed a connection it refused (`busy: ...`), once a send
    /// failed on it; `None` when it said nothing within a second.
    pub fn said<T: DeserializeOwned>(&mut self) -> Option<T> {
        self.stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .ok()?;
        let said = self.recv().ok().flatten();
        let _ = self.stream.set_read_timeout(self.read_timeout);
        said
    }

    /// Sends a request and reads one reply within the reply timeout; an `error` reply becomes
    /// an error.
    pub fn request(&mut self, request: &Request) -> io::Result<Reply> {
        if let Err(e) = self.send(request, &[]) {
            // Refused at the door: guardd's reason is the better error.
            return match self.said() {
                Some(Reply::Error(said)) => Err(io::Error::other(said.error)),
                _ => Err(e),
            };
        }
        self.stream.set_read_timeout(Some(self.reply))?;
        let reply = self.recv();
        self.stream.set_read_timeout(self.read_timeout)?;
        match reply? {
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "guardd closed the connection",
            )),
            Some(Reply::Error(e)) => Err(io::Error::other(e.error)),
            Some(reply) => Ok(reply),
        }
    }
}

/// The reply was not the one the request expects.
pub fn unexpected(reply: &Reply) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected reply from guardd: {reply:?}"),
    )
}
