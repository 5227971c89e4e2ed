//! guardd's socket: accept, admit, authenticate, read one request at a time, answer.
//!
//! Shaped like mini-redis's server: a connection's error ends that connection and never the
//! daemon, and shutdown stops accepting, drains running calls up to a deadline, kills what is
//! left, and removes the socket file. Where mini-redis caps connections with one semaphore taken
//! before `accept`, guardd accepts at once and admits on the peer's credentials ([`fair`]): a
//! cap taken before the peer is known lets anyone's connections count against everyone's.
//! Every read and write has a deadline ([`Deadlines`]); followed streams are in [`follow`].

mod follow;
mod listing;

use std::{
    fs, io,
    os::{
        fd::AsRawFd as _,
        unix::fs::{MetadataExt as _, PermissionsExt as _},
    },
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use nix::sys::socket::MsgFlags;
use tokio::{io::unix::AsyncFd, net::UnixStream, time::timeout};

use crate::{
    access::Role,
    audit::Row,
    call,
    conn::{Conn, Deadlines, FrameError},
    daemon::Daemon,
    fair::{self, Connections, Slot},
    hold,
    intent::Intent,
    peer::Peer,
    protocol::{
        self, CallOptions, ErrorReply, ExecRequest, ProtocolError, Reply, Request,
        reply::{
            AuditStatus, Checked, Cleared, PendingCalls, PolicyStatus, Reloaded, Resolved,
            SessionList, Status,
        },
    },
};

/// How many connections wait in the kernel for guardd to accept them. Small on purpose: a
/// connect past it sleeps in the kernel, and such sleepers are woken in turn (exclusive
/// waiters), so a caller behind a flood waits for this many accepts, not for the whole flood.
const BACKLOG: libc::c_int = 64;

/// What the socket holds its connections to: who gets one ([`fair`]), and how long each may
/// keep guardd waiting.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub limits: fair::Limits,
    pub deadlines: Deadlines,
}

/// guardd's listening socket, accepted from without registering a connection with the runtime
/// until it is admitted: a refusal costs an accept, two getsockopts, a send and a close.
pub struct Listener {
    fd: AsyncFd<std::os::unix::net::UnixListener>,
    terms: Terms,
}

impl Listener {
    async fn accept(&self) -> io::Result<std::os::unix::net::UnixStream> {
        loop {
            let mut ready = self.fd.readable().await?;
            if let Ok(accepted) = ready.try_io(|l| l.get_ref().accept()) {
                return accepted.map(|(stream, _)| stream);
            }
        }
    }
}

/// Binds the socket: removes a stale file, sets mode 0660 and the group.
pub fn bind(path: &Path, gid: Option<u32>, terms: Terms) -> io::Result<Listener> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    if path.exists() {
        // A socket that answers belongs to a running guardd: never steal it.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use by a running guardd", path.display()),
            ));
        }
        fs::remove_file(path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    // listen(2) again on a listening socket sets its backlog anew.
    // SAFETY: a socket of ours, bound and listening.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } < 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o660))?;
    if let Some(gid) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(io::Error::from)?;
    }
    // SAFETY: the listener owns its descriptor, and the AsyncFd owns the listener: neither is
    // closed or replaced while registered.
    let registered = unsafe { AsyncFd::register(listener) }.map_err(io::Error::from)?;
    Ok(Listener {
        fd: registered,
        terms,
    })
}

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
        if let Err(e) = permitted(daemon, &peer, &request) {
            conn.take_fds();
            conn.write(&protocol::error_frame(&e)).await?;
            continue;
        }
        match request {
            // An exec owns its connection until the call ends.
            Request::Exec(req) => {
                return exec(daemon, &peer, req, CallOptions::default(), conn).await;
            }
            Request::ExecWith(w) => return exec(daemon, &peer, w.call, w.options, conn).await,
            Request::Resume(req) => {
                return call::resume(daemon, &peer, &req.call_id, conn).await;
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
                let mut status = status(daemon);
                status.connections = connections.counts();
                conn.reply(&Reply::Status(Box::new(status))).await?;
                to_the_back().await;
            }
            other => {
                // Only an exec takes descriptors: any others sent are closed here.
                conn.take_fds();
                answer(daemon, &peer, other, &mut conn).await?;
                // Every connection waiting for this worker gets its turn before this one's
                // next request, which may already be here: without it, a client that answers
                // fast is served again and again while the others wait.
                to_the_back().await;
            }
        }
    }
}

/// Runs an `exec` on its connection.
async fn exec(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    req: ExecRequest,
    options: CallOptions,
    conn: Conn,
) -> io::Result<()> {
    let mut options = options;
    let intent = Intent {
        tool: req.tool,
        args: req.args,
        cwd: options.cwd.take(),
        caller: Some(peer.uid),
    };
    call::exec(daemon, peer, intent, options, conn).await
}

/// Whether the peer may make this request: exec, check and status need a client, the rest an
/// admin.
fn permitted(daemon: &Daemon, peer: &Peer, request: &Request) -> Result<(), ProtocolError> {
    let role = match request {
        Request::Subscribe(_)
        | Request::Pending(_)
        | Request::Approve(_)
        | Request::Deny(_)
        | Request::Reload(_)
        | Request::Sessions(_)
        | Request::Agents(_)
        | Request::ClearSession(_) => Role::Admin,
        Request::Exec(_)
        | Request::ExecWith(_)
        | Request::Resume(_)
        | Request::Check(_)
        | Request::Status(_)
        | Request::Tools(_) => Role::Client,
    };
    let access = daemon.access.read().unwrap_or_else(|p| p.into_inner());
    if access.permits(peer, role) {
        return Ok(());
    }
    let who = if role == Role::Admin {
        "an admin"
    } else {
        "a client"
    };
    Err(ProtocolError {
        message: format!(
            "not permitted: uid {} is not {who} of this guardd",
            peer.uid
        ),
        field: None,
    })
}

/// Answers a request that gets one reply and leaves the connection open for the next.
async fn answer(daemon: &Daemon, peer: &Peer, request: Request, conn: &mut Conn) -> io::Result<()> {
    let reply = match request {
        Request::Check(req) => {
            let intent = Intent {
                tool: req.tool,
                args: req.args,
                cwd: req.cwd,
                caller: Some(peer.uid),
            };
            let policy = daemon.policy_for(&intent);
            let mut verdict = policy.decide(&intent);
            // What the caller's agent says, as an exec of the same call would hear it.
            crate::agents::rule(&policy, peer, &intent.tool, None, &mut verdict);
            // The caller hears what an exec's caller would: a reason only under
            // disclose_reasons (it would tell what guardd, as root, found at a path).
            let mut decision = verdict.row.clone();
            decision.reason = policy.caller_message(&verdict);
            Reply::Decision(Box::new(Checked {
                decision,
                plan: verdict.plan,
            }))
        }
        Request::Status(_) => Reply::Status(Box::new(status(daemon))),
        Request::Tools(_) => listing::tools(daemon, peer),
        Request::Pending(_) => Reply::Pending(PendingCalls {
            calls: daemon.approvals.list(),
        }),
        Request::Approve(req) => {
            let digest = req.digest.as_deref();
            return resolve(daemon, conn, &req.call_id, peer.uid, None, digest).await;
        }
        Request::Deny(req) => {
            let deny = Some(req.reason);
            return resolve(daemon, conn, &req.call_id, peer.uid, deny, None).await;
        }
        Request::Sessions(_) => Reply::Sessions(SessionList {
            sessions: daemon.sessions.list(),
        }),
        Request::Agents(_) => listing::agents(daemon),
        Request::ClearSession(req) => clear_session(daemon, peer, req.session).await,
        Request::Reload(_) => match daemon.reload(Some(peer.uid)).await {
            Ok(tools) => Reply::Reloaded(Reloaded {
                policy: daemon.options.policy.clone(),
                tools,
            }),
            Err(message) => Reply::Error(ErrorReply::new(message)),
        },
        // Each keeps the connection: see `handle`.
        Request::Exec(_) | Request::ExecWith(_) | Request::Resume(_) | Request::Subscribe(_) => {
            Reply::Error(ErrorReply::new(
                "exec, resume and subscribe take the connection",
            ))
        }
    };
    conn.reply(&reply).await
}

/// An admin's answer to a held call (`deny` none: approve), recorded, then handed to the call.
async fn resolve(
    daemon: &Daemon,
    conn: &mut Conn,
    call_id: &str,
    by: u32,
    deny: Option<Option<String>>,
    digest: Option<&str>,
) -> io::Result<()> {
    let approved = deny.is_none();
    match hold::answer(daemon, call_id, by, deny, digest).await {
        Ok(held) => {
            let resolved = Resolved {
                call_id: call_id.to_owned(),
                approved,
                digest: held.digest,
            };
            conn.reply(&Reply::Resolved(resolved)).await
        }
        Err(message) => {
            let e = ProtocolError {
                message,
                field: Some("call_id".into()),
            };
            conn.write(&protocol::error_frame(&e)).await
        }
    }
}

/// Lets a terminated session submit calls again, after its row.
async fn clear_session(daemon: &Daemon, peer: &Peer, session: String) -> Reply {
    if daemon.sessions.get(&session).is_none() {
        return Reply::Error(ErrorReply {
            error: format!("session '{session}' is not terminated"),
            field: Some("session".into()),
            retry_after_ms: None,
        });
    }
    let row = Row::Session {
        session: session.clone(),
        terminated: false,
        call_id: None,
        by: Some(peer.uid),
    };
    if let Err(e) = daemon.audit.record(&row).await {
        return Reply::Error(ErrorReply::new(format!(
            "not cleared: the audit log is unavailable: {e}"
        )));
    }
    match daemon.sessions.clear(&session) {
        Ok(_) => Reply::Cleared(Cleared { session }),
        Err(e) => Reply::Error(ErrorReply::new(format!("not cleared: {e}"))),
    }
}

/// The daemon's state for `guardctl status`.
pub fn status(daemon: &Daemon) -> Status {
    let policy = daemon.policy();
    Status {
        pid: std::process::id(),
        uptime_s: daemon.started.elapsed().as_secs(),
        enforced: daemon.enforced(),
        policy: PolicyStatus {
            path: daemon.options.policy.clone(),
            tools: policy.tools().count(),
            version: policy.version().to_owned(),
            shadow: policy
                .shadow_tools()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        },
        audit: AuditStatus {
            path: daemon.options.audit.clone(),
            admitting: daemon.audit.admits(),
        },
        layers: daemon.layers.clone(),
        limits: daemon.launch.limits.to_string(),
        running: daemon.calls.running(),
        queued: daemon.calls.queued(),
        dropped_events: daemon.dropped_events(),
        export: daemon.export.get().map(crate::export::Export::status),
        // The server's own, which `handle` fills in.
        connections: Default::default(),
    }
}
