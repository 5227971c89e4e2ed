//! What guard observes, as it happens: kernel events become per-call receipts and bus events;
//! the bus fans out to `subscribe` clients. Publishing never waits for a subscriber: a slow one
//! falls behind, is told so with a final `lagged` event, and is dropped.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, Ipv6Addr},
    path::PathBuf,
    sync::{Arc, Mutex},
};

use guard_common::event::{
    ACTION_ALLOWED, ACTION_DENIED, ACTION_KILLED, Event as KernelEvent, KIND_CONNECT, KIND_EXEC,
    KIND_OPEN, KIND_REFUSED, KIND_SECCOMP, KIND_SOCKET,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::opens::{FilesSeen, c_str};

/// How many events a subscriber may fall behind before it is dropped.
const BUS_CAPACITY: usize = 4096;
/// Paths kept per receipt list; the count goes on.
const RECEIPT_PATHS: usize = 64;

/// One event on the bus, as subscribers receive it.
#[derive(Clone, Debug, Serialize)]
pub struct BusEvent {
    /// RFC 3339, UTC.
    pub ts: String,
    /// decision | launch | denied | divergence | kill | exit | reload | lagged | missed
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Kind-specific fields (decision, pid, effect, action, exit code...).
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

impl BusEvent {
    pub fn new(
        kind: &'static str,
        call_id: Option<&str>,
        tool: Option<&str>,
        detail: Value,
    ) -> Self {
        let detail = match detail {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        Self {
            ts: crate::audit::ts::now(),
            kind,
            call_id: call_id.map(str::to_owned),
            tool: tool.map(str::to_owned),
            detail,
        }
    }
}

/// The fan-out of events to subscribers.
#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<BusEvent>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(BUS_CAPACITY).0,
        }
    }
}

impl Bus {
    /// Publishes to every subscriber; never blocks, and does nothing when nobody listens.
    pub fn publish(&self, event: BusEvent) {
        let _ = self.tx.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<BusEvent>> {
        self.tx.subscribe()
    }
}

/// What a call was seen doing, for its audit row (`effects_observed`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Receipt {
    pub execs: Vec<String>,
    pub connects: Vec<ConnectSeen>,
    /// Sockets the kernel refused to create (families or types outside the call's needs).
    pub sockets: Vec<SocketSeen>,
    pub denied: u64,
    /// The syscalls the call made, by name (a number when guard has no name for it), in
    /// ascending order of number; from the `sys_enter` program's per-call set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<String>,
    /// The files the call opened; only when guardd traces syscalls (`--trace-syscalls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesSeen>,
    /// The processes of the call: its first and every one started in it (threads not counted).
    pub processes: u64,
    /// Processes seccomp killed for a syscall outside the call's filter; each takes the call.
    #[serde(skip_serializing_if = "is_zero")]
    pub seccomp_kills: u32,
    /// Connections the call made to guardd's own socket, each refused and a divergence.
    #[serde(skip_serializing_if = "is_zero")]
    pub guardd_connects: u32,
    /// Successful write-opens outside the call's write effects, as the kernel counted them
    /// (`--trace-syscalls`); each is a divergence, whether or not its event arrived.
    #[serde(skip_serializing_if = "is_zero")]
    pub writes_outside: u64,
    /// Syscalls asking for an effect that landlock or seccomp refused (`--trace-syscalls`):
    /// each an attempt outside the call's effects, so a divergence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedSeen>,
    /// The DNS names the call asked guardd's responder (calls that connect by host name): each
    /// not among its approved hosts was refused, and is a divergence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<crate::dns::Asked>,
    /// Which layer verified each class of effect for this receipt, and what it could not see.
    pub verified: Verified,
    /// The call's kernel events the ring buffer had no room for: its lists (`execs`, `connects`,
    /// `files`) are then incomplete, and the verdict is `diverged` (what it did outside its
    /// effects is still counted above).
    #[serde(skip_serializing_if = "is_zero")]
    pub events_lost: u64,
    /// "conformed" | "diverged"
    pub verdict: &'static str,
    /// Whether guard killed the call for a divergence.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

/// A syscall another layer refused.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RefusedSeen {
    pub syscall: String,
    pub errno: String,
    /// "landlock" (EACCES) or "seccomp" (EPERM).
    pub stopped_by: &'static str,
}

/// How a receipt's claims were checked: by which layer, or that nothing saw them.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Verified {
    pub exec: &'static str,
    pub connect: &'static str,
    pub write: &'static str,
    pub refusals: &'static str,
}

impl Verified {
    /// What the kernel programs check for every call, and what only `--trace-syscalls` sees.
    pub fn of(traced: bool) -> Self {
        Self {
            exec: "kernel: every exec, by file identity (sched_process_exec)",
            connect: "kernel: every connect, send and inet socket (cgroup sock_addr, sock_create)",
            write: if traced {
                "kernel: every write-open, by file identity (open observer); landlock enforces"
            } else {
                "landlock enforces; not observed (the open observer needs --trace-syscalls)"
            },
            refusals: if traced {
                "kernel: landlock's and seccomp's refusals of effect syscalls (sys_exit)"
            } else {
                "not observed: landlock's and seccomp's refusals need --trace-syscalls"
            },
        }
    }
}

/// One connect attempt of a call.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ConnectSeen {
    pub addr: String,
    pub port: u16,
    pub proto: &'static str,
    pub allowed: bool,
}

/// One socket the kernel refused a call.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SocketSeen {
    /// "unix", "inet", "inet6", "netlink", "packet", or the number.
    pub family: String,
    /// "stream", "dgram", "raw", "seqpacket", or the number.
    #[serde(rename = "type")]
    pub ty: String,
    pub protocol: u32,
}

impl SocketSeen {
    fn of(event: &KernelEvent) -> Self {
        let family = match i32::from(event.family) {
            libc::AF_UNIX => "unix".to_owned(),
            libc::AF_INET => "inet".to_owned(),
            libc::AF_INET6 => "inet6".to_owned(),
            libc::AF_NETLINK => "netlink".to_owned(),
            libc::AF_PACKET => "packet".to_owned(),
            n => n.to_string(),
        };
        let ty = match event.sock_type as i32 {
            libc::SOCK_STREAM => "stream".to_owned(),
            libc::SOCK_DGRAM => "dgram".to_owned(),
            libc::SOCK_RAW => "raw".to_owned(),
            libc::SOCK_SEQPACKET => "seqpacket".to_owned(),
            n => n.to_string(),
        };
        Self {
            family,
            ty,
            protocol: event.sock_protocol,
        }
    }
}

/// A call to track: who it is and what its receipt is judged against.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub call_id: String,
    pub tool: String,
    /// The call's cgroup directory, killed on divergence.
    pub cgroup: PathBuf,
    pub kill_on_divergence: bool,
    /// Whether the kernel reports the call's opens (`--trace-syscalls`).
    pub files: bool,
}

/// A call the kernel watches, as the event pump knows it.
struct Watched {
    call_id: String,
    tool: String,
    cgroup: PathBuf,
    kill_on_divergence: bool,
    receipt: Receipt,
}

impl Watched {
    /// Marks the call diverged, publishes the divergence and, unless the call only denies,
    /// kills it. `killed` says the kernel already killed the offending task.
    fn diverge(&mut self, effect: &str, detail: Value, killed: bool, bus: &Bus) {
        let action = if self.kill_on_divergence || killed {
            "kill"
        } else {
            "deny"
        };
        self.divergence(effect, detail, action, bus);
    }

    /// Marks the call diverged for what was learnt once it had ended (the kernel's counts, the
    /// names it asked): nothing is left to kill, and its exit code stays its own.
    fn diverged_at_end(&mut self, effect: &str, detail: Value, bus: &Bus) {
        self.divergence(effect, detail, "none: the call had ended", bus);
    }

    fn divergence(&mut self, effect: &str, mut detail: Value, action: &str, bus: &Bus) {
        self.receipt.denied += 1;
        self.receipt.verdict = "diverged";
        detail["effect"] = effect.into();
        detail["action"] = action.into();
        bus.publish(BusEvent::new(
            "divergence",
            Some(&self.call_id),
            Some(&self.tool),
            detail,
        ));
        if action == "kill" {
            self.receipt.stopped = true;
            // cgroup.kill takes the whole tree at once, descendants included.
            if let Err(e) = std::fs::write(self.cgroup.join("cgroup.kill"), "1") {
                tracing::error!(call = %self.call_id, "killing diverged call: {e}");
            }
        }
    }
}

/// Kernel events sorted by call.
#[derive(Default)]
pub struct Tracker {
    calls: Mutex<HashMap<u64, Watched>>,
}

impl Tracker {
    /// Starts collecting the receipt of the call in cgroup `cgroup_id`.
    pub fn track(&self, cgroup_id: u64, call: Tracked) {
        let watched = Watched {
            receipt: Receipt {
                verdict: "conformed",
                files: call.files.then(FilesSeen::default),
                verified: Verified::of(call.files),
                processes: 1,
                ..Receipt::default()
            },
            call_id: call.call_id,
            tool: call.tool,
            cgroup: call.cgroup,
            kill_on_divergence: call.kill_on_divergence,
        };
        self.lock().insert(cgroup_id, watched);
    }

    /// Stops tracking and hands back the call's receipt.
    pub fn finish(&self, cgroup_id: u64) -> Option<Receipt> {
        self.lock().remove(&cgroup_id).map(|w| w.receipt)
    }

    /// Folds in what the kernel counted of the call (read at its end): writes outside its
    /// effects whose events were lost still make it diverged.
    pub fn counted(&self, cgroup_id: u64, stats: guard_common::call::CallStats, bus: &Bus) {
        let mut calls = self.lock();
        let Some(watched) = calls.get_mut(&cgroup_id) else {
            return;
        };
        watched.receipt.writes_outside = stats.writes_outside;
        watched.receipt.events_lost = stats.events_lost;
        let seen = watched.receipt.files.as_ref().map_or(0, |f| f.diverged);
        if stats.writes_outside > seen {
            let detail =
                json!({ "writes": stats.writes_outside - seen, "events_lost": stats.events_lost });
            watched.diverged_at_end("open", detail, bus);
        }
        // Lost events leave the receipt's lists incomplete; what was counted above is whole,
        // but a receipt that could not see everything does not say `conformed`.
        if stats.events_lost > 0 {
            let detail = json!({ "events_lost": stats.events_lost });
            watched.diverged_at_end("events", detail, bus);
        }
        let seen = watched.receipt.refused.len() as u64;
        if stats.refused > seen {
            let detail =
                json!({ "refused": stats.refused - seen, "events_lost": stats.events_lost });
            watched.diverged_at_end("refused", detail, bus);
        }
    }

    /// Folds in the names the call asked its DNS responder (read at its end): a name outside
    /// its approved hosts is a divergence (it was refused; it never left the host).
    pub fn asked(&self, cgroup_id: u64, asked: Vec<crate::dns::Asked>, bus: &Bus) {
        let mut calls = self.lock();
        let Some(watched) = calls.get_mut(&cgroup_id) else {
            return;
        };
        for q in asked.iter().filter(|q| !q.approved) {
            let detail = json!({ "name": q.name, "type": q.qtype });
            watched.diverged_at_end("dns", detail, bus);
        }
        watched.receipt.dns = asked;
    }

    /// Whether the call has diverged so far.
    pub fn diverged(&self, cgroup_id: u64) -> bool {
        self.lock()
            .get(&cgroup_id)
            .is_some_and(|w| w.receipt.verdict == "diverged")
    }

    /// Folds one kernel event into its call's receipt and publishes what an operator must see.
    pub fn record(&self, event: &KernelEvent, bus: &Bus) {
        let mut calls = self.lock();
        let Some(watched) = calls.get_mut(&event.cgroup_id) else {
            // The call ended (or was never ours) before its last events were read.
            return;
        };
        let receipt = &mut watched.receipt;
        let (effect, detail) = match event.kind {
            KIND_EXEC => {
                let path = c_str(&event.path);
                if receipt.execs.len() < RECEIPT_PATHS {
                    receipt.execs.push(path.clone());
                }
                ("exec", json!({ "path": path }))
            }
            KIND_CONNECT => {
                let seen = ConnectSeen {
                    addr: addr_of(event),
                    port: event.port,
                    proto: if event.proto == guard_common::net::PROTO_UDP {
                        "udp"
                    } else {
                        "tcp"
                    },
                    allowed: event.action == ACTION_ALLOWED,
                };
                let detail = json!({ "addr": seen.addr, "port": seen.port, "proto": seen.proto });
                if receipt.connects.len() < RECEIPT_PATHS {
                    receipt.connects.push(seen);
                }
                ("connect", detail)
            }
            KIND_SOCKET => {
                let seen = SocketSeen::of(event);
                let detail =
                    json!({ "family": seen.family, "type": seen.ty, "protocol": seen.protocol });
                if receipt.sockets.len() < RECEIPT_PATHS {
                    receipt.sockets.push(seen);
                }
                ("socket", detail)
            }
            KIND_REFUSED => {
                let nr = event.sock_type;
                let errno = -event.ret;
                let seen = RefusedSeen {
                    syscall: syscall_names(&[nr]).pop().unwrap_or_default(),
                    errno: crate::opens::errno_name(errno),
                    stopped_by: if errno == libc::EACCES {
                        "landlock"
                    } else {
                        "seccomp"
                    },
                };
                let detail = json!({
                    "syscall": seen.syscall,
                    "errno": seen.errno,
                    "stopped_by": seen.stopped_by,
                });
                receipt.refused.push(seen);
                ("refused", detail)
            }
            KIND_SECCOMP => {
                receipt.seccomp_kills += 1;
                ("syscall", json!({ "signal": "SIGSYS" }))
            }
            KIND_OPEN => {
                let Some(files) = receipt.files.as_mut() else {
                    return;
                };
                if let Some(detail) = files.record(event) {
                    let mut detail = detail;
                    detail["pid"] = event.pid.into();
                    watched.diverge("open", detail, event.action == ACTION_KILLED, bus);
                }
                return;
            }
            _ => return,
        };
        if event.action == ACTION_DENIED || event.action == ACTION_KILLED {
            let mut detail = detail;
            detail["pid"] = event.pid.into();
            watched.diverge(effect, detail, event.action == ACTION_KILLED, bus);
        }
    }

    /// Records that the call in `cgroup_id` reached guardd's own socket: a divergence seen by
    /// guardd, not by a kernel program. Returns whether a watched call was found.
    pub fn reached_guardd(&self, cgroup_id: u64, pid: i32, bus: &Bus) -> bool {
        let mut calls = self.lock();
        let Some(watched) = calls.get_mut(&cgroup_id) else {
            return false;
        };
        watched.receipt.guardd_connects += 1;
        watched.diverge("guardd", json!({ "pid": pid }), false, bus);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover it.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// The names of syscall numbers, for a receipt.
pub fn syscall_names(numbers: &[u32]) -> Vec<String> {
    numbers
        .iter()
        .map(|&nr| {
            crate::sysname::name(i64::from(nr)).map_or_else(|| nr.to_string(), str::to_owned)
        })
        .collect()
}

fn addr_of(event: &KernelEvent) -> String {
    if event.family == libc::AF_INET6 as u16 {
        Ipv6Addr::from(event.addr).to_string()
    } else {
        Ipv4Addr::new(event.addr[0], event.addr[1], event.addr[2], event.addr[3]).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked() -> Tracked {
        Tracked {
            call_id: "c1".into(),
            tool: "fetch".into(),
            cgroup: "/nonexistent".into(),
            kill_on_divergence: false,
            files: false,
        }
    }

    fn connect_event(cgroup_id: u64, action: u32) -> KernelEvent {
        // SAFETY: Event is plain old data; all-zero is a valid value.
        let mut e: KernelEvent = unsafe { std::mem::zeroed() };
        e.kind = KIND_CONNECT;
        e.action = action;
        e.cgroup_id = cgroup_id;
        e.family = libc::AF_INET as u16;
        e.port = 9;
        e.proto = guard_common::net::PROTO_TCP;
        e.addr[..4].copy_from_slice(&[127, 0, 0, 1]);
        e
    }

    #[test]
    fn a_denied_effect_makes_the_receipt_diverge_and_is_published() {
        let (tracker, bus) = (Tracker::default(), Bus::default());
        let mut rx = bus.subscribe();
        tracker.track(5, tracked());
        tracker.record(&connect_event(5, ACTION_ALLOWED), &bus);
        assert!(!tracker.diverged(5));
        tracker.record(&connect_event(5, ACTION_DENIED), &bus);
        tracker.record(&connect_event(6, ACTION_DENIED), &bus); // not ours: ignored
        let ev = rx.try_recv().expect("divergence published");
        assert_eq!((ev.kind, ev.call_id.as_deref()), ("divergence", Some("c1")));
        assert_eq!(ev.detail["action"], "deny");
        assert!(rx.try_recv().is_err(), "only one event expected");
        let receipt = tracker.finish(5).expect("receipt");
        assert_eq!(
            (receipt.verdict, receipt.denied, receipt.connects.len()),
            ("diverged", 1, 2)
        );
        assert_eq!(receipt.connects[1].addr, "127.0.0.1");
    }

    #[test]
    fn a_refused_socket_is_a_divergence_named_by_family_and_type() {
        let (tracker, bus) = (Tracker::default(), Bus::default());
        let mut rx = bus.subscribe();
        tracker.track(5, tracked());
        // SAFETY: Event is plain old data; all-zero is a valid value.
        let mut e: KernelEvent = unsafe { std::mem::zeroed() };
        e.kind = KIND_SOCKET;
        e.action = ACTION_DENIED;
        e.cgroup_id = 5;
        e.family = libc::AF_PACKET as u16;
        e.sock_type = libc::SOCK_RAW as u32;
        e.sock_protocol = 0x0300;
        tracker.record(&e, &bus);
        let ev = rx.try_recv().expect("divergence published");
        assert_eq!(ev.detail["effect"], "socket");
        assert_eq!(ev.detail["family"], "packet");
        assert_eq!(ev.detail["type"], "raw");
        let receipt = tracker.finish(5).expect("receipt");
        assert_eq!((receipt.verdict, receipt.denied), ("diverged", 1));
        assert_eq!(receipt.sockets[0].protocol, 0x0300);
    }
}
