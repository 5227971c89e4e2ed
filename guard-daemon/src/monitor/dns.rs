//! The DNS a call gets: answers for the host names of its approved connects, nothing else.
//!
//! A call that connects to a host by name needs to resolve it, and a resolver that forwards any
//! name is a channel out (`<data>.attacker.example`). So guardd resolves the call's names itself
//! before launch (pinning the addresses the kernel allows), runs a [`Responder`] on a loopback
//! UDP port for the call, and the `connect4`/`sendmsg4` programs send every DNS query of the call
//! (UDP to port 53, whatever the server) there; `recvmsg4` makes the answer look as if it came
//! from the server the call asked. The responder answers A and AAAA for the approved names with
//! the pinned addresses and refuses every other name. Nothing the call asks leaves the host.
//!
//! No receipt can be flooded into silence. Every message that reaches the responder is judged
//! ([`Questions`]): a question for an approved name or another, or no question it could read.
//! The list of questions is bounded, and what it leaves out is counted, refused ones apart (the
//! list keeps refused questions before answered ones). At the call's end the responder reads,
//! and judges, what is still queued on its socket before it stops; that read is bounded, so a
//! flood cannot hold up the call's end, and what the bound left unread is counted as unjudged,
//! with what the kernel dropped from a full queue. The receipt turns each refused question, each
//! unreadable message and each unjudged one into a divergence (`receipt::Receipts::asked`).
//!
//! The wire format is in [`wire`].

use std::{
    collections::{HashMap, HashSet},
    io,
    net::{IpAddr, Ipv4Addr},
    os::fd::AsRawFd as _,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::{net::UdpSocket, sync::oneshot, task::JoinHandle};

#[cfg(test)]
mod tests;
mod wire;

/// Distinct questions (name and type) listed per receipt; the counts go on.
const LISTED: usize = 64;
/// The responder's receive queue (the kernel doubles it), set rather than left to the host's
/// `rmem_default`: it holds about 600 small queries (a datagram costs the queue some 830
/// bytes), so what a call leaves queued at its end stays well within [`DRAIN_MAX`].
const QUEUE_BYTES: usize = 256 << 10;
/// The most messages read from the queue at the call's end. The call is gone by then, so only
/// what it left queued is there, unless a process outside it keeps sending to the port.
const DRAIN_MAX: usize = 4096;
/// The longest the read at the call's end may take.
const DRAIN_TIME: Duration = Duration::from_millis(100);

/// One question a call asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Asked {
    /// Lowercase, without the trailing dot; a byte other than a letter, digit, `-` or `_` is
    /// written `\DDD` (RFC 4343), so no name of the wire reads as another.
    pub name: String,
    /// "A", "AAAA", or the type's number.
    #[serde(rename = "type")]
    pub qtype: String,
    /// Whether the name is one of the call's approved hosts (answered), or was refused.
    pub approved: bool,
}

/// What a call asked its responder, every message judged: handed back when the call ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Questions {
    /// The distinct questions (name and type) in the order first asked, at most [`LISTED`]:
    /// when one had to be left out, an answered one went before any refused one.
    pub listed: Vec<Asked>,
    /// Questions read and judged, answered or refused, repeats included.
    pub judged: u64,
    /// Of those, the ones whose name and type are not in `listed`.
    pub unlisted: u64,
    /// Of those, the ones for a name outside the approved hosts (refused).
    pub unlisted_refused: u64,
    /// Messages that were no question the responder could read: no query, several questions,
    /// another opcode, a malformed name. No resolver sends one.
    pub unreadable: u64,
    /// Messages sent to the responder that it never judged: the kernel dropped them from its
    /// full queue, or the read at the call's end stopped at its bound with some still queued
    /// (counted as one: at least one was left).
    pub unjudged: u64,
}

/// The questions as they are judged, with how often each listed one was asked, so that one
/// left out later still counts all its asks.
#[derive(Default)]
struct Log {
    questions: Questions,
    asks: Vec<u64>,
}

impl Log {
    /// Judges one message; the reply to send, if any.
    /// `unapproved`: names answered (in shadow) that are not among the approved hosts.
    fn judge(
        &mut self,
        message: &[u8],
        names: &HashMap<String, Vec<IpAddr>>,
        unapproved: Option<&HashSet<String>>,
    ) -> Option<Vec<u8>> {
        let (reply, mut asked) = match wire::answer(message, names) {
            Some((reply, asked)) => (Some(reply), asked),
            None => (None, None),
        };
        if let (Some(a), Some(unapproved)) = (asked.as_mut(), unapproved) {
            a.approved &= !unapproved.contains(&a.name);
        }
        match asked {
            Some(asked) => self.record(asked),
            None => self.questions.unreadable += 1,
        }
        reply
    }

    fn record(&mut self, asked: Asked) {
        let q = &mut self.questions;
        q.judged += 1;
        if let Some(i) = q.listed.iter().position(|l| *l == asked) {
            self.asks[i] += 1;
            return;
        }
        if q.listed.len() < LISTED {
            q.listed.push(asked);
            self.asks.push(1);
            return;
        }
        // The list is full. A refused question takes the place of the last answered one:
        // what an operator must see is what was refused.
        if !asked.approved
            && let Some(i) = q.listed.iter().rposition(|l| l.approved)
        {
            q.listed.remove(i);
            q.unlisted += self.asks.remove(i);
            q.listed.push(asked);
            self.asks.push(1);
            return;
        }
        q.unlisted += 1;
        if !asked.approved {
            q.unlisted_refused += 1;
        }
    }
}

/// A call's resolver: a task answering on a loopback UDP port until it is finished.
pub struct Responder {
    port: u16,
    names: Arc<HashMap<String, Vec<IpAddr>>>,
    log: Arc<Mutex<Log>>,
    stop: Option<oneshot::Sender<()>>,
    /// Hands the socket back when stopped, for the read of what is still queued.
    task: JoinHandle<Option<std::net::UdpSocket>>,
}

impl Responder {
    /// Starts answering `names` (host name -> its pinned addresses) on 127.0.0.1. In `shadow`,
    /// other names are answered too, as the host's resolver answers guardd, and recorded as
    /// not approved.
    pub async fn start(names: HashMap<String, Vec<IpAddr>>, shadow: bool) -> io::Result<Self> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        // guardd is root: forced past `rmem_max`, so the queue is the same on every host.
        use nix::sys::socket::{setsockopt, sockopt};
        setsockopt(&socket, sockopt::RcvBufForce, &QUEUE_BYTES)
            .or_else(|_| setsockopt(&socket, sockopt::RcvBuf, &QUEUE_BYTES))
            .map_err(io::Error::from)?;
        let port = socket.local_addr()?.port();
        let names: Arc<HashMap<String, Vec<IpAddr>>> =
            Arc::new(names.into_iter().map(|(k, v)| (normalize(&k), v)).collect());
        let log = Arc::new(Mutex::new(Log::default()));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(socket, names.clone(), log.clone(), stopped, shadow));
        Ok(Self {
            port,
            names,
            log,
            stop: Some(stop),
            task,
        })
    }

    /// The port the kernel sends the call's queries to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops answering, judges what is still queued (within [`DRAIN_MAX`] and [`DRAIN_TIME`])
    /// and hands back what was asked. Call it once the call has ended, so that what is queued
    /// is all the call will ever send.
    pub async fn finish(mut self) -> Questions {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // It stops at its next message, or at once if it is waiting for one.
        let socket = tokio::time::timeout(DRAIN_TIME, &mut self.task).await;
        let mut log = lock(&self.log);
        match socket {
            Ok(Ok(Some(socket))) => {
                drain(&socket, &self.names, &mut log, DRAIN_MAX, DRAIN_TIME);
                match dropped(&socket) {
                    Ok(drops) => log.questions.unjudged += drops,
                    Err(e) => {
                        // What the kernel dropped cannot be vouched for: fail closed.
                        tracing::warn!("reading the DNS responder's drops: {e}");
                        log.questions.unjudged += 1;
                    }
                }
            }
            // The responder stopped on its own (it panicked, or its socket could not be
            // handed back), or did not stop in time (dropping `self` aborts it): what came
            // after was not judged.
            Ok(Ok(None) | Err(_)) | Err(_) => log.questions.unjudged += 1,
        }
        std::mem::take(&mut log.questions)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(log: &Mutex<Log>) -> std::sync::MutexGuard<'_, Log> {
    // A panic while holding the lock leaves counts that only ever grew: keep them.
    log.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers the call's queries until told to stop, then hands the socket back.
async fn serve(
    socket: UdpSocket,
    names: Arc<HashMap<String, Vec<IpAddr>>>,
    log: Arc<Mutex<Log>>,
    mut stopped: oneshot::Receiver<()>,
    shadow: bool,
) -> Option<std::net::UdpSocket> {
    let mut buf = [0u8; 512];
    // In shadow: the approved names and those learnt from the host's resolver, and which
    // were learnt.
    let mut shadowed = shadow.then(|| ((*names).clone(), HashSet::new()));
    loop {
        tokio::select! {
            // Stopping first: what is still queued is read by `drain`, which is bounded.
            biased;
            _ = &mut stopped => break,
            received = socket.recv_from(&mut buf) => {
                let Ok((n, peer)) = received else {
                    continue;
                };
                let message = &buf[..n];
                if let Some((answers, learnt)) = shadowed.as_mut() {
                    learn(message, answers, learnt).await;
                }
                let (table, unapproved) = match &shadowed {
                    Some((answers, learnt)) => (answers, Some(learnt)),
                    None => (&*names, None),
                };
                let reply = lock(&log).judge(message, table, unapproved);
                if let Some(reply) = reply {
                    let _ = socket.send_to(&reply, peer).await;
                }
            }
        }
    }
    // Out of tokio's hands, read directly: its readiness may not have seen the last arrivals.
    socket.into_std().ok()
}

/// Names a call in shadow may have answered by the host's resolver; past them, a new name is
/// refused, as enforcing would refuse it (and still recorded), and nothing more is kept for it:
/// a call asking ever new names grows nothing of guardd's (attack39).
const LEARN_MAX: usize = 256;
/// The longest one lookup for a call in shadow may take.
const LEARN_TIME: Duration = Duration::from_secs(2);

/// In shadow: looks up the name `message` asks when it is not answered yet, with the host's
/// resolver, and adds it to `answers` (with no address when the lookup fails).
async fn learn(
    message: &[u8],
    answers: &mut HashMap<String, Vec<IpAddr>>,
    learnt: &mut HashSet<String>,
) {
    let Some((_, Some(asked))) = wire::answer(message, answers) else {
        return;
    };
    if asked.approved || learnt.len() >= LEARN_MAX {
        return;
    }
    let lookup = tokio::net::lookup_host((asked.name.as_str(), 0));
    let addrs = match tokio::time::timeout(LEARN_TIME, lookup).await {
        Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    };
    learnt.insert(asked.name.clone());
    answers.insert(asked.name, addrs);
}

/// Judges what is queued on `socket`, without answering (the call has ended), until the queue
/// is empty or `most` messages or `time` are spent; one still queued then is counted as
/// unjudged.
fn drain(
    socket: &std::net::UdpSocket,
    names: &HashMap<String, Vec<IpAddr>>,
    log: &mut Log,
    most: usize,
    time: Duration,
) {
    let deadline = Instant::now() + time;
    let mut buf = [0u8; 512];
    for _ in 0..most {
        match socket.recv_from(&mut buf) {
            Ok((n, _)) => {
                log.judge(&buf[..n], names, None);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    let mut one = [0u8; 1];
    if socket.peek_from(&mut one).is_ok() {
        log.questions.unjudged += 1;
    }
}

/// The messages the kernel dropped for `socket` (its queue full), over the socket's life.
fn dropped(socket: &std::net::UdpSocket) -> io::Result<u64> {
    let mut meminfo = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&meminfo) as libc::socklen_t;
    // SAFETY: the buffer holds `len` bytes; the kernel writes at most that many and sets `len`
    // to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            meminfo.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < std::mem::size_of_val(&meminfo) {
        return Err(io::Error::other("SO_MEMINFO without a drop count"));
    }
    Ok(u64::from(meminfo[libc::SK_MEMINFO_DROPS as usize]))
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
