//! guardd's socket: accept, admit, authenticate, read one request at a time, answer.
//!
//! Shaped like mini-redis's server: a connection's error ends that connection and never the
//! daemon, and shutdown stops accepting, drains running calls up to a deadline, kills what is
//! left, and removes the socket file. Where mini-redis caps connections with one semaphore taken
//! before `accept`, guardd accepts at once and admits on the peer's credentials ([`fair`]): a
//! cap taken before the peer is known lets anyone's connections count against everyone's.
//! Every read and write has a deadline ([`Deadlines`]); followed streams are in [`follow`].
//!
//! An `exec` or `resume` takes its connection for the call's life (`exec`): admitted
//! (`admit`), reviewed ([`crate::review`]), then launched ([`crate::launch`]). The metrics
//! endpoint, guardd's other listener, is [`metrics`].

mod admit;
mod answer;
mod exec;
pub mod fair;
mod follow;
mod listener;
mod listing;
pub mod metrics;

use std::{
    fs, io,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    sync::Arc,
    time::{Duration, Instant},
};

use nix::sys::socket::MsgFlags;
use tokio::{net::UnixStream, time::timeout};

use crate::{
    call::peer::Peer,
    callers::access::Role,
    daemon::Daemon,
    protocol::{
        self, CallOptions, ProtocolError, Reply, Request,
        conn::{Conn, Deadlines, FrameError},
    },
};
use fair::{Connections, Slot};

pub use listener::{Listener, Terms, bind};

/// Serves until `shutdown` resolves, then drains.
pub async fn run(
    daemon: Arc<Daemon>,
    listener: Listener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let Terms { limits, deadlines } = listener.terms;
    let connections = Connections::new(limits);
    let mut refusals = Refusals::new();
    tokio::pin!(shutdown);
    loop {
        // Never waits for a place: a connection is accepted, admitted or refused at once, so
        // the listen queue drains whoever fills it.
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = admit(&daemon, &connections, &stream, &mut refusals) else {
            continue;
        };
        let stream = match stream
            .set_nonblocking(true)
            .and_then(|()| UnixStream::from_std(stream))
        {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("an admitted connection: {e}");
                continue;
            }
        };
        let daemon = Arc::clone(&daemon);
        let connections = Arc::clone(&connections);
        tokio::spawn(async move {
            if let Err(e) = handle(&daemon, &connections, deadlines, stream, slot).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drain(&daemon).await;
    let _ = fs::remove_file(daemon.socket());
}

/// Admits a connection on what the kernel recorded of its peer, before anything is spent on it;
/// a refused one is told why (its first frame, `busy: ...`) and closed.
fn admit(
    daemon: &Daemon,
    connections: &Arc<Connections>,
    stream: &std::os::unix::net::UnixStream,
    refusals: &mut Refusals,
) -> Option<Slot> {
    let peer = match Peer::credentials(stream) {
        Ok(peer) => peer,
        Err(e) => {
            tracing::debug!("refused a connection: its credentials: {e}");
            return None;
        }
    };
    let permitted = daemon
        .access
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .permits(&peer, Role::Client);
    match connections.admit(peer.uid, permitted) {
        Ok(slot) => Some(slot),
        Err(refused) => {
            let error = ProtocolError {
                message: refused.to_string(),
                field: None,
            };
            // A socket just accepted has an empty buffer: the frame goes in without waiting.
            let frame = protocol::error_frame(&error);
            let _ = nix::sys::socket::send(stream.as_raw_fd(), &frame, MsgFlags::MSG_DONTWAIT);
            refusals.note(&refused);
            None
        }
    }
}

/// Refusals logged at most every ten seconds, with how many since: a flood must not flood the
/// journal too.
struct Refusals {
    since: Option<Instant>,
    count: u64,
}

impl Refusals {
    const fn new() -> Self {
        Self {
            since: None,
            count: 0,
        }
    }

    fn note(&mut self, what: &dyn std::fmt::Display) {
        self.count += 1;
        if self
            .since
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        tracing::warn!(refused = self.count, "connections refused: {what}");
        self.since = Some(Instant::now());
        self.count = 0;
    }
}

/// The connections refused once accepted (their peer gone, or unreadable), from every task.
static GONE: std::sync::Mutex<Refusals> = std::sync::Mutex::new(Refusals::new());

/// A confined call never talks to guardd, whatever its uid and the socket's mode. Only a call
/// with the `unix` effect can get here (seccomp refuses AF_UNIX sockets to the others), and for
/// that call it is a divergence. The peer's first request is read so that the refusal answers it
/// instead of racing it.
async fn refuse_confined(daemon: &Daemon, peer: &Peer, mut conn: Conn) -> io::Result<()> {
    let _ = timeout(Duration::from_secs(1), conn.read_frame()).await;
    let e = ProtocolError {
        message: "not permitted: a confined call may not use guardd".into(),
        field: None,
    };
    // Recorded before the answer: the call may end as soon as it has read it, and its receipt
    // must already hold the divergence.
    let call_cgroup = peer
        .cgroup
        .strip_prefix(&daemon.cgroup_path)
        .unwrap_or_default()
        .trim_start_matches('/');
    let found = fs::metadata(daemon.root.path().join(call_cgroup)).is_ok_and(|m| {
        daemon
            .receipts
            .reached_guardd(m.ino(), peer.pid, &daemon.bus)
    });
    if !found {
        tracing::warn!(pid = peer.pid, cgroup = %peer.cgroup, "refused a confined peer of no running call");
    }
    conn.write(&protocol::error_frame(&e)).await
}

/// Waits for running calls up to the drain deadline, then kills them all.
async fn drain(daemon: &Daemon) {
    let kill = || {
        let _ = daemon.root.kill();
    };
    daemon.calls.drain(daemon.options.drain, kill).await;
}

/// Goes to the back of the worker's queue. `tokio::task::yield_now` would defer the wake until
/// the worker next polls for I/O, which a busy worker does only every 61 tasks; a task that
/// wakes itself while it runs is queued behind the tasks already waiting, at once.
async fn to_the_back() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

async fn handle(
    daemon: &Arc<Daemon>,
    connections: &Arc<Connections>,
    deadlines: Deadlines,
    stream: UnixStream,
    slot: Slot,
) -> io::Result<()> {
    let peer = match Peer::of(&stream) {
        Ok(peer) => peer,
        Err(e) => {
            GONE.lock().unwrap_or_else(|p| p.into_inner()).note(&e);
            return Ok(());
        }
    };
    let mut conn = Conn::new(stream, deadlines.write).with_budget(slot.budget());
    if peer.inside(&daemon.cgroup_path) {
        return refuse_confined(daemon, &peer, conn).await;
    }
    loop {
        let frame = match timeout(deadlines.idle, conn.read_frame()).await {
            Err(_) => return Ok(()),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(frame))) => frame,
            Ok(Err(FrameError::Io(e))) => return Err(e),
            Ok(Err(e)) => {
                // The stream cannot be resynchronised after an oversized or torn frame.
                let error = ProtocolError {
                    message: e.to_string(),
                    field: None,
                };
                return conn.write(&protocol::error_frame(&error)).await;
            }
        };
        let request = match protocol::parse_request(&frame) {
            Ok(r) => r,
            Err(e) => {
                conn.take_fds();
                conn.write(&protocol::error_frame(&e)).await?;
                continue;
            }
        };
        if let Err(e) = answer::permitted(daemon, &peer, &request) {
            conn.take_fds();
            conn.write(&protocol::error_frame(&e)).await?;
            continue;
        }
        match request {
            // An exec owns its connection until the call ends.
            Request::Exec(req) => {
                return exec::exec(daemon, &peer, req, CallOptions::default(), conn).await;
            }
            Request::ExecWith(w) => {
                return exec::exec(daemon, &peer, w.call, w.options, conn).await;
            }
            Request::Resume(req) => {
                return exec::resume(daemon, &peer, &req, conn).await;
            }
            Request::Subscribe(req) => {
                conn.take_fds();
                if let Some(follower) = follow::place(connections, &slot, &mut conn).await? {
                    return follow::subscribe(daemon, conn, req, follower, deadlines).await;
                }
            }
            Request::Tools(req) if req.follow => {
                conn.take_fds();
                if let Some(follower) = follow::place(connections, &slot, &mut conn).await? {
                    return follow::tools(daemon, &peer, conn, follower, deadlines).await;
                }
            }
            Request::Status(_) => {
                conn.take_fds();
                let mut status = answer::status(daemon);
                status.connections = connections.counts();
                conn.reply(&Reply::Status(Box::new(status))).await?;
                to_the_back().await;
            }
            other => {
                // Only an exec takes descriptors: any others sent are closed here.
                conn.take_fds();
                answer::answer(daemon, &peer, other, &mut conn).await?;
                // Every connection waiting for this worker gets its turn before this one's
                // next request, which may already be here: without it, a client that answers
                // fast is served again and again while the others wait.
                to_the_back().await;
            }
        }
    }
}
