//! A guardd connection: newline-delimited frames in both directions, and the file descriptors
//! a client passes with SCM_RIGHTS (guard-exec's stdin, stdout and stderr).

use std::{
    collections::VecDeque,
    io::{self, IoSlice},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use tokio::{
    io::{AsyncWriteExt as _, Interest},
    net::UnixStream,
};

use crate::protocol::MAX_FRAME;

/// Most descriptors one message can carry (the kernel's SCM_MAX_FD).
const MAX_FDS: usize = 253;

/// The control data of a message that carries [`MAX_FDS`]: its header and the descriptors.
const CONTROL_BYTES: usize = std::mem::size_of::<libc::cmsghdr>() + MAX_FDS * 4;

/// Most descriptors a connection holds unclaimed: an exec's stdin, stdout and stderr. More is
/// no request of the protocol, and a peer that sends them loses its connection: a full
/// descriptor table stops guardd for everyone.
const MAX_HELD_FDS: usize = 3;

/// Most bytes of unfinished requests one uid's connections hold at once: sixteen whole frames.
/// Past it, the connection that reads more is closed: a uid's connections each holding a frame
/// short of its end would otherwise keep a mebibyte apiece.
pub const BUFFERED_PER_UID: usize = 16 * MAX_FRAME;

/// What one uid's connections may hold of unfinished requests, shared by them.
#[derive(Clone, Debug, Default)]
pub struct Budget(Option<Arc<AtomicUsize>>);

impl Budget {
    /// A budget shared by the connections that hold `held`.
    pub fn shared(held: Arc<AtomicUsize>) -> Self {
        Self(Some(held))
    }

    /// Counts `n` more bytes held; `false` (nothing counted) when that is past the uid's share.
    pub fn take(&self, n: usize) -> bool {
        let Some(held) = &self.0 else { return true };
        if held.fetch_add(n, Ordering::Relaxed) + n > BUFFERED_PER_UID {
            held.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Counts `n` bytes no longer held.
    pub fn give(&self, n: usize) {
        if let Some(held) = &self.0 {
            held.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame exceeds {MAX_FRAME} bytes")]
    TooLong,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How long a connection may keep guardd waiting, either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// A client that sends no whole request for this long is disconnected (`--idle-timeout`).
    pub idle: Duration,
    /// A reply the client does not take within this long ends the connection
    /// (`--write-timeout`).
    pub write: Duration,
    /// A follower (`tools` with `follow`, `subscribe`) gets a keepalive this often, and is
    /// dropped when it has not read the last one by then (`--keepalive`).
    pub keepalive: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(30),
            write: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
        }
    }
}

/// The daemon's side of one client connection.
pub struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    /// How much of `buf` holds no newline (already searched).
    scanned: usize,
    /// Descriptors received and not yet claimed, in arrival order.
    fds: VecDeque<OwnedFd>,
    eof: bool,
    /// How long one frame's write may wait for the client to read.
    write_deadline: Duration,
    /// What the bytes held in `buf` count against: the peer uid's share.
    budget: Budget,
}

impl Conn {
    /// A connection whose writes each end it when the client has not taken them within
    /// `write_deadline`.
    pub fn new(stream: UnixStream, write_deadline: Duration) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            scanned: 0,
            fds: VecDeque::new(),
            eof: false,
            write_deadline,
            budget: Budget::default(),
        }
    }

    /// Counts the bytes of unfinished requests this connection holds against `budget`.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The underlying stream (for peer credentials).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Reads the next frame, without its newline; `None` at a clean end of stream.
    pub async fn read_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            // Only the bytes not looked at yet: a peer sending a long frame a byte at a time
            // must not have guardd read the whole of it again for each byte.
            let fresh = &self.buf[self.scanned..];
            if let Some(at) = fresh.iter().position(|&b| b == b'\n') {
                let pos = self.scanned + at;
                self.scanned = 0;
                let mut frame: Vec<u8> = self.buf.drain(..=pos).collect();
                self.budget.give(frame.len());
                // A long frame's room goes back with it, not with the connection.
                if self.buf.capacity() > 64 << 10 && self.buf.len() < 4 << 10 {
                    self.buf.shrink_to(4 << 10);
                }
                frame.pop();
                return Ok(Some(frame));
            }
            self.scanned = self.buf.len();
            if self.buf.len() >= MAX_FRAME {
                return Err(FrameError::TooLong);
            }
            if self.eof {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
            self.fill().await?;
        }
    }

    /// Waits until the peer hangs up, discarding anything it sends. Used while a call runs:
    /// the caller going away must end the call.
    pub async fn closed(&mut self) -> io::Result<()> {
        while !self.eof {
            self.fill().await?;
            self.budget.give(self.buf.len());
            self.buf.clear();
            self.scanned = 0;
            self.fds.clear();
        }
        Ok(())
    }

    /// Whether the peer has hung up (or shut its side down) by now, without waiting: a call
    /// whose caller is gone before its tool starts does not start.
    pub fn hung_up(&self) -> bool {
        if self.eof {
            return true;
        }
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd on this stack, a zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Takes every descriptor received so far.
    pub fn take_fds(&mut self) -> Vec<OwnedFd> {
        self.fds.drain(..).collect()
    }

    /// Writes one whole frame; a client that does not take it within the write deadline gets
    /// a `TimedOut` error, and its connection ends with it (a reply left unread must not hold a
    /// connection, or the call behind it, past any deadline).
    pub async fn write(&mut self, frame: &[u8]) -> io::Result<()> {
        match tokio::time::timeout(self.write_deadline, self.stream.write_all(frame)).await {
            Ok(written) => written,
            Err(_) => Err(self.took_no_reply()),
        }
    }

    /// Writes `reply` as one frame of the protocol (see [`Conn::write`]).
    pub async fn reply<T: serde::Serialize>(&mut self, reply: &T) -> io::Result<()> {
        self.write(&crate::protocol::frame(reply)).await
    }

    fn took_no_reply(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client took no reply for {} s (write deadline)",
                self.write_deadline.as_secs_f64()
            ),
        )
    }

    /// The bytes written to this connection that the client has not read yet (SIOCOUTQ: for a
    /// Unix socket, what the kernel still holds of ours in the client's receive queue).
    pub fn unread(&self) -> io::Result<usize> {
        unread(&self.stream)
    }

    /// Waits until the client has read everything written to it so far, or at least some of
    /// it; `TimedOut` when it read nothing within `within`. How a follower that no longer
    /// reads is found: a keepalive is a few bytes, and a socket's buffer would hold days of them.
    pub async fn reading(&self, within: Duration) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = self.unread()?;
        while last > 0 {
            if tokio::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the follower read nothing for {} s", within.as_secs_f64()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.unread()?;
            if now < last {
                return Ok(());
            }
            last = now;
        }
        Ok(())
    }

    async fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 8192];
        let fd = self.stream.as_raw_fd();
        let (n, fds) = self
            .stream
            .async_io(Interest::READABLE, || recv_with_fds(fd, &mut chunk))
            .await?;
        if self.fds.len() + fds.len() > MAX_HELD_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "more than {MAX_HELD_FDS} descriptors sent (an exec passes its stdin, \
                     stdout and stderr, nothing else does): connection closed"
                ),
            ));
        }
        self.fds.extend(fds);
        if n == 0 {
            self.eof = true;
        }
        if !self.budget.take(n) {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "this uid's connections hold {} bytes of unfinished requests: connection \
                     closed",
                    BUFFERED_PER_UID
                ),
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.budget.give(self.buf.len());
    }
}

/// One recvmsg that does not wait: the bytes read and any descriptors that came with them
/// (close-on-exec).
pub fn recv_with_fds(fd: RawFd, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    recvmsg_fds(fd, chunk, MsgFlags::MSG_DONTWAIT)
}

fn recvmsg_fds(fd: RawFd, chunk: &mut [u8], flags: MsgFlags) -> io::Result<(usize, Vec<OwnedFd>)> {
    // Room for the most one message can carry: only a full descriptor table truncates it.
    let mut control = [0u64; CONTROL_BYTES.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: chunk.as_mut_ptr().cast(),
        iov_len: chunk.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers of this frame.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let flags = libc::MSG_CMSG_CLOEXEC | flags.bits();
    // SAFETY: recvmsg writes into the buffers `msg` points to, within the lengths it gives.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // Every descriptor the kernel installed is owned here before anything can fail: one left
    // as a bare number would stay open for guardd's life.
    let mut fds = Vec::new();
    // SAFETY: the CMSG_* walk stays within `control`, as the kernel filled it (msg_controllen).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other(
            "descriptors lost in transit (guardd's descriptor table is full): connection closed",
        ));
    }
    Ok((n as usize, fds))
}

/// Client side: sends `frame` with `fds` attached in one message (blocking socket).
pub fn send_with_fds(
    socket: &std::os::unix::net::UnixStream,
    frame: &[u8],
    fds: &[RawFd],
) -> io::Result<()> {
    let cmsgs = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsgs };
    let sent = sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(frame)],
        cmsgs,
        MsgFlags::empty(),
        None,
    )
    .map_err(io::Error::from)?;
    // The descriptors went with the first byte; the rest of a long frame follows as a stream.
    io::Write::write_all(&mut &*socket, &frame[sent..])
}

/// The bytes sent on `stream` that the peer has not read yet (SIOCOUTQ: for a Unix socket, what
/// the kernel still holds of ours in the peer's queue, or in its listen queue before `accept`).
pub fn unread(stream: &impl std::os::fd::AsFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int through the pointer.
    let rc = unsafe { libc::ioctl(stream.as_fd().as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}
