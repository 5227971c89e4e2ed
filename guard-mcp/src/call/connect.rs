//! How a call reaches guardd: a connection, the request sent with /dev/null as its stdin and
//! pipes of ours as its stdout and stderr, and guardd's taking it. Nothing here blocks the MCP
//! server's thread: a wait for room in guardd's listen queue runs on one of its own.

use std::{
    fs::File,
    os::{fd::AsRawFd as _, fd::OwnedFd, unix::net::UnixStream as StdStream},
    path::Path,
    time::Duration,
};

use guard::protocol::{self, ExecReply, Request};
use tokio::net::UnixStream;

use super::Capture;

/// How often the wait for guardd to take a call looks again (it returns at once when guardd
/// answers).
const TAKEN_POLL: Duration = Duration::from_millis(20);

/// A call on its way: the connection that carries its replies and the output being read.
pub(crate) struct Started {
    pub(crate) stream: UnixStream,
    pub(super) stdout: Capture,
    pub(super) stderr: Capture,
}

/// Connects, sends `request` (an exec, or a resume) with /dev/null as stdin and our pipes as
/// stdout and stderr, and waits until guardd has taken it. Connecting and sending block while
/// guardd's listen queue is full (up to the connect timeout), so that wait runs off the MCP
/// server's thread; the wait for guardd to take the call is bounded by the reply timeout (the
/// environment's, `GUARD_CONNECT_TIMEOUT` and `GUARD_REPLY_TIMEOUT`), and past either the call
/// is an error result saying guardd is busy: nothing ran.
pub(crate) async fn start(socket: &Path, request: &Request) -> Result<Started, String> {
    let timeouts = guard::client::Timeouts::from_env().map_err(|e| e.to_string())?;
    let frame = protocol::frame(request);
    // Connected at once, the common case, and sent from here when the frame fits in the
    // socket's buffer with room to spare (it then never waits for guardd to read it): a thread
    // of the blocking pool would cost two hand-offs a call.
    let now = guard::client::connect_now(socket, timeouts.connect)
        .map_err(|e| unreachable(socket, &e))?;
    let sent = match now {
        Some(stream) if fits(&stream, &frame) => send(stream, socket, &frame)?,
        now => {
            let socket = socket.to_owned();
            tokio::task::spawn_blocking(move || {
                let stream = match now {
                    Some(stream) => stream,
                    None => guard::client::connect_within(&socket, timeouts.connect)
                        .map_err(|e| unreachable(&socket, &e))?,
                };
                send(stream, &socket, &frame)
            })
            .await
            .map_err(|e| format!("guard-mcp: {e}"))??
        }
    };
    let (stream, out_r, err_r) = sent;
    let (stdout, stderr) = (Capture::start(out_r)?, Capture::start(err_r)?);
    let stream = stream
        .set_nonblocking(true)
        .and_then(|()| UnixStream::from_std(stream))
        .map_err(|e| format!("guardd's connection: {e}"))?;
    taken(&stream, timeouts.reply).await?;
    Ok(Started {
        stream,
        stdout,
        stderr,
    })
}

/// Waits until guardd has read the request, or has something to say (see
/// `guard::client::wait_taken`, whose asynchronous twin this is).
async fn taken(stream: &UnixStream, within: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match guard::client::unread(stream) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("guardd's connection: {e}")),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "guardd did not take the call within {} s: guardd is busy; the tool did not \
                 run, try again later",
                within.as_secs_f64()
            ));
        }
        tokio::select! {
            ready = stream.readable() => return ready.map_err(|e| format!("guardd's connection: {e}")),
            () = tokio::time::sleep(TAKEN_POLL) => {}
        }
    }
}

/// The connection, and the read ends of the tool's stdout and stderr.
type Sent = (StdStream, OwnedFd, OwnedFd);

/// Whether `frame` takes at most a quarter of `stream`'s send buffer: its send cannot wait.
fn fits(stream: &StdStream, frame: &[u8]) -> bool {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::SndBuf)
        .is_ok_and(|buffer| frame.len() <= buffer / 4)
}

/// Why a call could not reach guardd at `socket`.
fn unreachable(socket: &Path, e: &std::io::Error) -> String {
    use nix::errno::Errno;
    // Out of descriptors here (for the socket, the pipes, or those a request carries): ours.
    let ours = [Errno::EMFILE, Errno::ENFILE, Errno::ETOOMANYREFS].map(|e| e as i32);
    if e.raw_os_error().is_some_and(|n| ours.contains(&n)) {
        return format!("guard-mcp: {e}; the tool did not run, try again later");
    }
    // A send that waited out its timeout: guardd did not read the request.
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return format!(
            "guardd is busy: it did not read the call in time ({e}); the tool did not run, \
             try again later"
        );
    }
    if guard::client::busy(e) {
        return format!("{e}; the tool did not run, try again later");
    }
    format!(
        "guardd unreachable at {}: {e}; the tool did not run",
        socket.display()
    )
}

/// The sending half of [`start`], on a connection made: the request's `frame` sent with its
/// descriptors, and the read ends of the tool's output.
fn send(stream: StdStream, socket: &Path, frame: &[u8]) -> Result<Sent, String> {
    let stdin = File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let fds = [stdin.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    if let Err(e) = guard::protocol::conn::send_with_fds(&stream, frame, &fds) {
        // Refused at the door: guardd said why before it closed the connection.
        return Err(refusal(&stream).unwrap_or_else(|| unreachable(socket, &e)));
    }
    // Ours closed now, so the pipes end when the tool's copies do.
    drop((stdin, out_w, err_w));
    Ok((stream, out_r, err_r))
}

/// What guardd said on a connection it refused. It wrote that before it closed, so it is there
/// when the send fails: read without waiting (this may run on the MCP server's thread).
fn refusal(stream: &StdStream) -> Option<String> {
    use std::io::BufRead as _;
    stream.set_nonblocking(true).ok()?;
    let mut line = Vec::new();
    std::io::BufReader::new(stream)
        .read_until(b'\n', &mut line)
        .ok()?;
    match protocol::parse_reply::<ExecReply>(&line).ok()? {
        ExecReply::Error(e) => Some(e.error),
        _ => None,
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))
}
