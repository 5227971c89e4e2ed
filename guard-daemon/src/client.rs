//! The client side of the socket, shared by guard-exec and guardctl: typed requests out, typed
//! replies in (see [`crate::protocol::reply`]).

use std::{
    io::{self, BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
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

/// A connection to guardd.
pub struct Client {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    /// Connects to guardd's socket.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let stream = UnixStream::connect(path)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self { stream, reader })
    }

    /// Bounds each later read and write by `timeout`: for a client that must not hang on a
    /// stuck guardd (a shell's completion).
    pub fn set_timeout(&self, timeout: std::time::Duration) -> io::Result<()> {
        // The reader is a clone of the same socket: the timeouts are the socket's, for both.
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))
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
            crate::conn::send_with_fds(&self.stream, frame, fds)
        }
    }

    /// Reads the next reply (an [`ExecReply`](protocol::ExecReply) after `exec`, a [`Reply`]
    /// otherwise); `None` when guardd closed the connection.
    pub fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        let mut line = Vec::new();
        if self.reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(None);
        }
        protocol::parse_reply(&line)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Sends a request and reads one reply; an `error` reply becomes an error.
    pub fn request(&mut self, request: &Request) -> io::Result<Reply> {
        self.send(request, &[])?;
        match self.recv()? {
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
