//! The client's ends of stdio, read and written by the runtime itself: tokio's stdin and stdout
//! hand every read and write to a thread of the blocking pool, two hand-offs a message. MCP
//! clients start a server on pipes (the Python SDK) or on Unix socket pairs (Node's
//! `child_process`, which the TypeScript SDK and the editors built on it use). Pipes go through
//! rmcp's `stdio_pipes`, reopened non-blocking on open file descriptions of their own. Sockets
//! are read and written with `MSG_DONTWAIT` on copies of their descriptors, so their flags,
//! shared with whoever else holds them, stay as they were. Anything else (a terminal, a file)
//! keeps tokio's blocking handles.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
    pin::Pin,
    task::{Context, Poll, ready},
};

use nix::sys::socket::{MsgFlags, SockType, getsockopt, recv, send, sockopt};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, unix::AsyncFd};

/// What the server reads its client's messages from.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// What the server writes its messages to.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The transport on this process's stdin and stdout, as its client made them, each direction
/// on its own (a client may give a socket one way and a pipe the other); an error for a socket
/// that does not carry a stream, whose records a read would cut.
pub fn transport() -> io::Result<(Reader, Writer)> {
    // Both pipes: reopened non-blocking; otherwise tokio's handles, used only for a direction
    // that is no socket.
    let (pipe_r, pipe_w) = rmcp::transport::stdio_pipes();
    let reader: Reader = match Socket::of(std::io::stdin().as_fd(), "stdin")? {
        Some(socket) => Box::new(socket),
        None => Box::new(pipe_r),
    };
    let writer: Writer = match Socket::of(std::io::stdout().as_fd(), "stdout")? {
        Some(socket) => Box::new(socket),
        None => Box::new(pipe_w),
    };
    Ok((reader, writer))
}

/// A stream socket of stdio, through a copy of its descriptor the runtime polls.
struct Socket(AsyncFd<OwnedFd>);

impl Socket {
    /// `fd` (the process's `name`) when it is a socket; `None` when it is none.
    fn of(fd: BorrowedFd<'_>, name: &str) -> io::Result<Option<Self>> {
        let Ok(kind) = getsockopt(&fd, sockopt::SockType) else {
            return Ok(None);
        };
        if kind != SockType::Stream {
            return Err(io::Error::other(format!(
                "{name} is a {kind:?} socket: MCP over stdio needs a stream (a pipe or a stream \
                 socket)"
            )));
        }
        tracing::debug!("stdio: {name} is a stream socket, polled by the runtime");
        let copy = fd.try_clone_to_owned()?;
        // SAFETY: the OwnedFd keeps the copy open, unchanged, until it is dropped with the
        // AsyncFd that owns it.
        let polled = unsafe {
            AsyncFd::register_with_interest(copy, Interest::READABLE | Interest::WRITABLE)
        }?;
        Ok(Some(Self(polled)))
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = guard.try_io(|fd| {
                recv(fd.as_raw_fd(), unfilled, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
            });
            match read {
                Ok(n) => {
                    buf.advance(n?);
                    return Poll::Ready(Ok(()));
                }
                // Not readable after all: readiness cleared, polled again.
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            // No SIGPIPE for a client gone: the write fails, and the service ends.
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            let written =
                guard.try_io(|fd| send(fd.as_raw_fd(), data, flags).map_err(io::Error::from));
            if let Ok(n) = written {
                return Poll::Ready(n);
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
