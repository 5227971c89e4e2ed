//! A guardd connection: newline-delimited frames in both directions, and the file descriptors
//! a client passes with SCM_RIGHTS (guard-exec's stdin, stdout and stderr).

use std::{
    collections::VecDeque,
    io::{self, IoSlice, IoSliceMut},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
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

/// The daemon's side of one client connection.
pub struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    /// Descriptors received and not yet claimed, in arrival order.
    fds: VecDeque<OwnedFd>,
    eof: bool,
}

impl Conn {
    pub fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            fds: VecDeque::new(),
            eof: false,
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

    /// Writes one whole frame.
    pub async fn write(&mut self, frame: &[u8]) -> io::Result<()> {
        self.stream.write_all(frame).await
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

/// One recvmsg: the bytes read and any descriptors that came with them (close-on-exec).
fn recv_with_fds(fd: RawFd, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(chunk)];
    let msg = recvmsg::<()>(
        fd,
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
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
