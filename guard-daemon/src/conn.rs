//! A guardd connection: newline-delimited frames in both directions, and the file descriptors
//! a client passes with SCM_RIGHTS (guard-exec's stdin, stdout and stderr).

use std::{
    collections::VecDeque,
    io::{self, IoSlice, IoSliceMut},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    time::Duration,
};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use tokio::{
    io::{AsyncWriteExt as _, Interest},
    net::UnixStream,
};

use crate::protocol::MAX_FRAME;

/// Most descriptors one message can carry (the kernel's SCM_MAX_FD); sized so that a client
/// sending many never truncates the control data, which would leak the ones received.
const MAX_FDS: usize = 253;

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
    /// Descriptors received and not yet claimed, in arrival order.
    fds: VecDeque<OwnedFd>,
    eof: bool,
    /// How long one frame's write may wait for the client to read.
    write_deadline: Duration,
}

impl Conn {
    /// A connection whose writes each end it when the client has not taken them within
    /// `write_deadline`.
    pub fn new(stream: UnixStream, write_deadline: Duration) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            fds: VecDeque::new(),
            eof: false,
            write_deadline,
        }
    }

    /// The underlying stream (for peer credentials).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Reads the next frame, without its newline; `None` at a clean end of stream.
    pub async fn read_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let mut frame: Vec<u8> = self.buf.drain(..=pos).collect();
                frame.pop();
                return Ok(Some(frame));
            }
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
            self.buf.clear();
            self.fds.clear();
        }
        Ok(())
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

    /// Writes one whole frame with `fd` attached to its first byte (SCM_RIGHTS), within the
    /// write deadline as [`Conn::write`].
    pub async fn write_with_fd(&mut self, frame: &[u8], fd: RawFd) -> io::Result<()> {
        let fds = [fd];
        let first = async {
            loop {
                self.stream.writable().await?;
                let sent = self.stream.try_io(tokio::io::Interest::WRITABLE, || {
                    let cmsgs = [ControlMessage::ScmRights(&fds)];
                    let iov = [IoSlice::new(frame)];
                    sendmsg::<()>(
                        self.stream.as_raw_fd(),
                        &iov,
                        &cmsgs,
                        MsgFlags::MSG_DONTWAIT,
                        None,
                    )
                    .map_err(io::Error::from)
                });
                match sent {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    other => return other,
                }
            }
        };
        let sent = match tokio::time::timeout(self.write_deadline, first).await {
            Ok(sent) => sent?,
            Err(_) => return Err(self.took_no_reply()),
        };
        self.write(&frame[sent..]).await
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
        crate::client::unread(&self.stream)
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
        self.fds.extend(fds);
        if n == 0 {
            self.eof = true;
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// One recvmsg that does not wait: the bytes read and any descriptors that came with them
/// (close-on-exec).
pub fn recv_with_fds(fd: RawFd, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    recvmsg_fds(fd, chunk, MsgFlags::MSG_DONTWAIT)
}

/// [`recv_with_fds`] on a blocking socket: waits as long as its read timeout says.
pub fn recv_with_fds_blocking(fd: RawFd, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    recvmsg_fds(fd, chunk, MsgFlags::empty())
}

fn recvmsg_fds(fd: RawFd, chunk: &mut [u8], flags: MsgFlags) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(chunk)];
    let msg = recvmsg::<()>(
        fd,
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | flags,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: the kernel just installed these descriptors in our table; we own them.
            fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
        }
    }
    Ok((msg.bytes, fds))
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
