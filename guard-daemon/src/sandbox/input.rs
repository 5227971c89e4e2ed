//! The input guardd writes to a call's stdin (a tool's `stdin = { arg = "NAME" }`, or the
//! caller's stream as it was held for a human, `Stdin::Held`): a pipe of
//! guardd's own, whose read end becomes the tool's fd 0 in place of the caller's descriptor,
//! and whose write end a task of the runtime fills without blocking it. The writer stops when
//! the tool closes its end (EPIPE: guardd ignores SIGPIPE, as every Rust program does), and is
//! stopped, closing the pipe, when the call ends ([`Feed`]'s drop): a tool that never reads its
//! input holds neither a thread of guardd nor the end of its call.

use std::os::fd::OwnedFd;

use tokio::{io::AsyncWriteExt as _, net::unix::pipe, task::JoinHandle};

use super::launch::{SandboxError, io_sys};
use crate::call::plan::Stdin;

/// The task writing a call's input; dropped (at the call's end), it stops and closes the pipe.
#[derive(Debug)]
pub struct Feed(JoinHandle<()>);

impl Drop for Feed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The call's stdio for `stdin`: `stdio` as it came, or, for an input of its own, with fd 0
/// replaced by a pipe that the returned [`Feed`] fills (the caller's descriptor is closed).
/// Must be called within the runtime.
pub fn attach(
    stdin: &Stdin,
    stdio: [OwnedFd; 3],
) -> Result<([OwnedFd; 3], Option<Feed>), SandboxError> {
    let bytes = match stdin {
        Stdin::Input(text) => text.clone().into_bytes(),
        Stdin::Held(bytes) => bytes.clone(),
        Stdin::Passed | Stdin::Caller => return Ok((stdio, None)),
    };
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|source| SandboxError::Sys {
            op: "pipe2 (stdin)",
            source,
        })?;
    // Non-blocking on guardd's end only: the tool's end stays as a program expects its stdin.
    let mut sender = pipe::Sender::from_owned_fd(write).map_err(io_sys("stdin pipe"))?;
    let task = tokio::spawn(async move {
        // A tool that exits or closes its stdin before reading it all ends the write (EPIPE).
        if let Err(e) = sender.write_all(&bytes).await {
            tracing::debug!("writing a call's input: {e}");
        }
    });
    let [_, stdout, stderr] = stdio;
    Ok(([read, stdout, stderr], Some(Feed(task))))
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn stdio() -> [OwnedFd; 3] {
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null"));
        [null(), null(), null()]
    }

    #[tokio::test]
    async fn an_input_is_written_whole_and_its_pipe_closed() {
        // More than a pipe holds, so the writer must wait for the reader.
        let text = "x".repeat(300_000);
        let (io, feed) = attach(&Stdin::Input(text.clone()), stdio()).expect("attach");
        let [stdin, ..] = io;
        let read = tokio::task::spawn_blocking(move || {
            let mut got = String::new();
            std::fs::File::from(stdin)
                .read_to_string(&mut got)
                .expect("read");
            got
        });
        assert_eq!(read.await.expect("reader"), text);
        drop(feed);
    }

    #[tokio::test]
    async fn a_reader_that_never_reads_holds_nothing_once_the_call_ends() {
        let (io, feed) = attach(&Stdin::Input("y".repeat(300_000)), stdio()).expect("attach");
        let feed = feed.expect("a feed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!feed.0.is_finished(), "the writer waits for a reader");
        let handle = feed.0.abort_handle();
        drop(feed);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(handle.is_finished(), "the call's end stops the writer");
        // Its end closed: the reader sees what fitted, then the end of its input.
        let [stdin, ..] = io;
        let mut got = Vec::new();
        std::fs::File::from(stdin)
            .read_to_end(&mut got)
            .expect("read");
        assert!(!got.is_empty() && got.len() < 300_000, "{}", got.len());
    }

    #[tokio::test]
    async fn a_held_input_is_written_as_held_not_the_callers_stream() {
        let held = vec![0u8, 0xff, b'\n', b'x'];
        let (io, feed) = attach(&Stdin::Held(held.clone()), stdio()).expect("attach");
        let [stdin, ..] = io;
        let read = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            std::fs::File::from(stdin)
                .read_to_end(&mut got)
                .expect("read");
            got
        });
        assert_eq!(read.await.expect("reader"), held);
        drop(feed);
    }

    #[test]
    fn other_stdins_pass_the_callers_descriptor() {
        let io = stdio();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&io[0]);
        let (io, feed) = attach(&Stdin::Caller, io).expect("attach");
        assert!(feed.is_none());
        assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&io[0]), fd);
    }
}
