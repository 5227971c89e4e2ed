//! The client side of the socket, shared by guard-exec and guardctl.

use std::{
    io::{self, BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::protocol;

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
    pub fn connect(path: &Path) -> io::Result<Self> {
        let stream = UnixStream::connect(path)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self { stream, reader })
    }

    /// Sends one request frame, with `fds` attached if any.
    pub fn send(&mut self, kind: &str, body: Value, fds: &[std::os::fd::RawFd]) -> io::Result<()> {
        let frame = protocol::frame(kind, body);
        if fds.is_empty() {
            self.stream.write_all(&frame)
        } else {
            crate::conn::send_with_fds(&self.stream, &frame, fds)
        }
    }

    /// Reads the next reply; `None` when guardd closed the connection.
    pub fn recv(&mut self) -> io::Result<Option<Value>> {
        let mut line = Vec::new();
        if self.reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&line).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad reply from guardd: {e}"),
            )
        })
    }

    /// Sends a request and reads one reply; an `error` reply becomes an error.
    pub fn request(&mut self, kind: &str, body: Value) -> io::Result<Value> {
        self.send(kind, body, &[])?;
        let reply = self.recv()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "guardd closed the connection")
        })?;
        if reply["type"] == "error" {
            return Err(io::Error::other(
                reply["error"].as_str().unwrap_or("error").to_owned(),
            ));
        }
        Ok(reply)
    }
}
