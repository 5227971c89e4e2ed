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
