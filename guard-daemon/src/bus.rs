//! The event bus: what guard does and observes, as it happens, fanned out to `subscribe` clients.
//! Publishing never waits for a subscriber: a slow one falls behind, is told so with a final
//! `lagged` event, and is dropped. The events are typed here once, for guardd to publish and for
//! guardctl (and any client) to read.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::decision::Decision;

/// How many events a subscriber may fall behind before it is dropped.
const BUS_CAPACITY: usize = 4096;

/// One event, as subscribers receive it (`{"ts":..,"kind":..,"call_id":..,"tool":.., ...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// RFC 3339, UTC.
    pub ts: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What happened, tagged by `kind`.
    #[serde(flatten)]
    pub what: What,
}

/// What an event reports, by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// The policy decided a call.
    Decision {
        decision: Decision,
        reason: String,
        uid: u32,
        /// The policy's agent the caller is (`[agents]`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// A call waits for an admin.
    Held {
        decision: Decision,
        reason: String,
        uid: u32,
        timeout_s: u64,
    },
    /// An admin (`by`), an approver of the policy (`approver`), or the clock (neither)
    /// answered a held or escalated call.
    Approval {
        approved: bool,
        by: Option<u32>,
        reason: Option<String>,
        /// `auto`, `judge:NAME` or `command` with its `outcome`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approver: Option<String>,
    },
    /// An approved call started: its program, not its arguments (those may carry what the
    /// audit row redacts).
    Launch {
        pid: u32,
        program: Option<String>,
        args: usize,
        uid: u32,
    },
    /// A call did what it was not approved to do.
    Divergence(Divergence),
    /// guardd killed a call for a reason other than a divergence.
    Kill { reason: String },
    /// A call ended.
    Exit {
        code: Option<i32>,
        diverged: bool,
        /// The first of its divergences, as its receipt records it: the line that says a call
        /// diverged says how.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        divergence: Option<Box<Divergence>>,
        error: Option<String>,
        duration_ms: f64,
    },
    /// The policy was reloaded (`error`: it was not, and the one in force stays).
    Reload {
        tools: Option<usize>,
        error: Option<String>,
        by: Option<u32>,
    },
    /// A call was not admitted.
    Refused { reason: String },
    /// A judge gave its verdict on a call (`reason`: why it rejected it).
    Judged {
        judge: String,
        allowed: bool,
        reason: Option<String>,
    },
    /// This subscriber fell behind by `missed` events and is dropped.
    Lagged { missed: u64 },
}

/// A divergence: the effect, what guard did about it, and the process (when known).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    #[serde(flatten)]
    pub effect: Effect,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The layer that refused the attempt (or saw it, for what is learnt at the end): read by
    /// whoever tails the events or the audit log, without guard's code to name it.
    #[serde(default)]
    pub layer: String,
}

/// The effect a call had or attempted outside its approval, with that effect's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// An exec of a program outside its exec effects.
    Exec { path: String },
    /// A connect or send outside its connect effects.
    Connect {
        addr: String,
        port: u16,
        proto: Proto,
    },
    /// A socket the call may not create. (Its type is `sock_type` on the wire: an event frame's
    /// own `type` is `event`, and a JSON object with two of a key is one no strict reader takes.)
    Socket {
        family: String,
        #[serde(rename = "sock_type")]
        ty: String,
        protocol: u32,
    },
    /// A successful write-open outside its write effects (`--trace-syscalls`).
    Open { path: String, flags: u32 },
    /// A write-open outside its write rules, which the read-only mount view and landlock
    /// refuse; guardd saw it through the call's seccomp listener before the kernel went on.
    WriteOpen { path: String, flags: u32 },
    /// A protected name (`sandbox::protected`) that was not there when the call started and is
    /// there at its end: made by the call, unrefused, and what programs outside guard may run;
    /// moved aside at the call's end (`moved_to`), or, where that failed, left (`kept`: why).
    Planted {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        moved_to: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<String>,
    },
    /// Write-opens outside its effects the kernel counted but whose events were lost.
    WritesOutside { writes: u64, events_lost: u64 },
    /// Kernel events of the call the ring buffer had no room for: its receipt is incomplete.
    EventsLost { events_lost: u64 },
    /// A syscall landlock or seccomp refused (`--trace-syscalls`).
    Refused(RefusedSeen),
    /// Refusals the kernel counted but whose events were lost.
    RefusedUnseen { refused: u64, events_lost: u64 },
    /// seccomp killed a process of the call.
    Syscall { signal: String },
    /// The call connected to guardd's own socket.
    Guardd {},
    /// A bind to a port of the call's choosing, refused.
    Bind {
        addr: String,
        port: u16,
        proto: Proto,
    },
    /// A packet the call sent with IP options or an IPv6 extension header (`options`), or to an
    /// address no connect or send check judged, dropped; its first only.
    Packet {
        addr: String,
        port: u16,
        protocol: u8,
        options: bool,
    },
    /// The call asked its resolver for a name outside its approved hosts.
    Dns { name: String, qtype: String },
    /// A record lock on a file outside the call's write effects: the task that took it was
    /// killed before it returned (`name` is the file's name in its directory).
    Lock {
        name: String,
        /// `posix`, `ofd` or `flock`.
        lock: String,
        /// `read` or `write`.
        mode: String,
    },
    /// Questions for names outside its approved hosts that the receipt's full list left out.
    DnsUnlisted { refused: u64 },
    /// Messages to its resolver that were no question it could read.
    DnsUnreadable { messages: u64 },
    /// Messages to its resolver that were never judged: its receipt cannot say what they asked.
    DnsUnjudged { messages: u64 },
}

/// A syscall another layer refused.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RefusedSeen {
    pub syscall: String,
    pub errno: String,
    pub stopped_by: StoppedBy,
}

/// The layer that refused a syscall, told apart by its errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoppedBy {
    /// EACCES.
    Landlock,
    /// EPERM.
    Seccomp,
}

/// A transport protocol of a connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

/// What guard did about a divergence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The operation was refused; the call goes on.
    Deny,
    /// The call's whole process tree was killed.
    Kill,
    /// Learnt once the call had ended: nothing was left to stop.
    Ended,
}

/// Every event `kind`, as on the wire and as `guardctl events --kind` takes it.
pub const KINDS: &[&str] = &[
    "decision",
    "judged",
    "held",
    "approval",
    "launch",
    "divergence",
    "kill",
    "exit",
    "reload",
    "refused",
    "lagged",
];

impl Effect {
    /// The effect's name, as on the wire (`effect`).
    pub fn name(&self) -> &'static str {
        match self {
            Effect::Exec { .. } => "exec",
            Effect::Connect { .. } => "connect",
            Effect::Socket { .. } => "socket",
            Effect::Open { .. } => "open",
            Effect::WriteOpen { .. } => "write_open",
            Effect::Planted { .. } => "planted",
            Effect::WritesOutside { .. } => "writes_outside",
            Effect::EventsLost { .. } => "events_lost",
            Effect::Refused(_) => "refused",
            Effect::RefusedUnseen { .. } => "refused_unseen",
            Effect::Syscall { .. } => "syscall",
            Effect::Guardd {} => "guardd",
            Effect::Bind { .. } => "bind",
            Effect::Packet { .. } => "packet",
            Effect::Dns { .. } => "dns",
            Effect::Lock { .. } => "lock",
            Effect::DnsUnlisted { .. } => "dns_unlisted",
            Effect::DnsUnreadable { .. } => "dns_unreadable",
            Effect::DnsUnjudged { .. } => "dns_unjudged",
        }
    }

    /// What it reached for: the address, the path, the socket, the syscall, the name.
    pub fn target(&self) -> String {
        match self {
            Effect::Exec { path }
            | Effect::Open { path, .. }
            | Effect::WriteOpen { path, .. }
            | Effect::Planted { path, .. } => path.clone(),
            Effect::Connect { addr, port, proto } | Effect::Bind { addr, port, proto } => {
                format!("{addr}:{port}/{}", proto.as_str())
            }
            Effect::Socket { family, ty, .. } => format!("{family}/{ty}"),
            Effect::WritesOutside { writes, .. } => format!("{writes} write-opens"),
            Effect::EventsLost { events_lost } => format!("{events_lost} events lost"),
            Effect::Refused(r) => format!("{} {}", r.syscall, r.errno),
            Effect::RefusedUnseen { refused, .. } => format!("{refused} refusals"),
            Effect::Syscall { signal } => signal.clone(),
            Effect::Guardd {} => "guardd's socket".to_owned(),
            Effect::Packet {
                addr,
                port,
                options,
                ..
            } => format!(
                "{addr}:{port}{}",
                if *options { " with IP options" } else { "" }
            ),
            Effect::Dns { name, qtype } => format!("{name} {qtype}"),
            Effect::Lock { name, lock, mode } => format!("{mode} {lock} lock on {name}"),
            Effect::DnsUnlisted { refused } => format!("{refused} refused questions not listed"),
            Effect::DnsUnreadable { messages } => format!("{messages} unreadable messages"),
            Effect::DnsUnjudged { messages } => format!("{messages} messages not judged"),
        }
    }

    /// The layer that stopped it (or, for what is learnt at the end, that saw it): the kernel
    /// program of its kind, landlock or seccomp for a refusal, guardd for its socket and its
    /// resolver.
    pub fn layer(&self) -> &'static str {
        match self {
            Effect::Exec { .. } => "eBPF exec tracepoint",
            Effect::Connect { .. } => "eBPF cgroup connect/sendmsg",
            Effect::Socket { .. } => "eBPF socket check",
            Effect::Open { .. } | Effect::WritesOutside { .. } => "eBPF open observer",
            Effect::WriteOpen { .. } => "the read-only mount view and landlock",
            Effect::Planted { .. } => "guardd's check of the protected names at the call's end",
            Effect::EventsLost { .. } => "eBPF ring buffer",
            Effect::Refused(r) => r.stopped_by.as_str(),
            Effect::RefusedUnseen { .. } => "landlock or seccomp",
            Effect::Syscall { .. } => "seccomp",
            Effect::Guardd {} => "guardd's peer check",
            Effect::Bind { .. } => "eBPF cgroup bind",
            Effect::Packet { .. } => "eBPF cgroup_skb egress",
            Effect::Dns { .. }
            | Effect::DnsUnlisted { .. }
            | Effect::DnsUnreadable { .. }
            | Effect::DnsUnjudged { .. } => "guardd's DNS responder",
            Effect::Lock { .. } => "eBPF lock tracepoint",
        }
    }
}

impl Divergence {
    /// A divergence of `effect`, answered with `action`, by the process `pid` when known.
    pub fn new(effect: Effect, action: Action, pid: Option<i32>) -> Self {
        let layer = effect.layer().to_owned();
        Self {
            effect,
            action,
            pid,
            layer,
        }
    }

    /// One line: the effect, its target, the layer that stopped it and what guard did.
    pub fn describe(&self) -> String {
        let pid = self.pid.map_or(String::new(), |p| format!(" pid {p}"));
        // Learnt at the end (a count, a name asked): nothing was left to stop, only to see.
        let by = if self.action == Action::Ended {
            "seen"
        } else {
            "stopped"
        };
        format!(
            "{} {} ({by} by {}){pid} -> {}",
            self.effect.name(),
            self.effect.target(),
            self.effect.layer(),
            self.action.as_str()
        )
    }
}

impl StoppedBy {
    /// The layer's name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            StoppedBy::Landlock => "landlock",
            StoppedBy::Seccomp => "seccomp",
        }
    }
}

impl Proto {
    /// The protocol's name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl Action {
    /// The action's name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Kill => "kill",
            Action::Ended => "ended",
        }
    }
}

impl Event {
    /// An event of `call_id` (of `tool`), now.
    pub fn of(call_id: Option<&str>, tool: Option<&str>, what: What) -> Self {
        Self {
            ts: crate::audit::ts::now(),
            call_id: call_id.map(str::to_owned),
            tool: tool.map(str::to_owned),
            what,
        }
    }

    /// The event's `kind`, as on the wire.
    pub fn kind(&self) -> &'static str {
        match &self.what {
            What::Decision { .. } => "decision",
            What::Held { .. } => "held",
            What::Approval { .. } => "approval",
            What::Launch { .. } => "launch",
            What::Divergence(_) => "divergence",
            What::Kill { .. } => "kill",
            What::Exit { .. } => "exit",
            What::Reload { .. } => "reload",
            What::Refused { .. } => "refused",
            What::Judged { .. } => "judged",
            What::Lagged { .. } => "lagged",
        }
    }
}

/// The fan-out of events to subscribers.
#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Event>>,
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
    pub fn publish(&self, event: Event) {
        let _ = self.tx.send(Arc::new(event));
    }

    /// Publishes `what` of a call, now.
    pub fn call(&self, call_id: &str, tool: &str, what: What) {
        self.publish(Event::of(Some(call_id), Some(tool), what));
    }

    /// A new subscriber, receiving what is published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_for_the_kind_filter() {
        let reason = || String::from("r");
        let whats = [
            What::Decision {
                decision: Decision::Allow,
                reason: reason(),
                uid: 0,
                agent: None,
            },
            What::Held {
                decision: Decision::Escalate,
                reason: reason(),
                uid: 0,
                timeout_s: 1,
            },
            What::Approval {
                approved: true,
                by: None,
                reason: None,
                approver: None,
            },
            What::Launch {
                pid: 1,
                program: None,
                args: 0,
                uid: 0,
            },
            What::Divergence(Divergence::new(Effect::Guardd {}, Action::Deny, None)),
            What::Kill { reason: reason() },
            What::Exit {
                code: None,
                diverged: false,
                divergence: None,
                error: None,
                duration_ms: 0.0,
            },
            What::Reload {
                tools: None,
                error: None,
                by: None,
            },
            What::Refused { reason: reason() },
            What::Judged {
                judge: reason(),
                allowed: true,
                reason: None,
            },
            What::Lagged { missed: 1 },
        ];
        let mut kinds: Vec<&str> = whats
            .into_iter()
            .map(|what| Event::of(None, None, what).kind())
            .collect();
        let mut listed = KINDS.to_vec();
        kinds.sort_unstable();
        listed.sort_unstable();
        assert_eq!(kinds, listed);
    }

    #[test]
    fn events_read_back_as_written_with_their_fields_flat() {
        let connect = Effect::Connect {
            addr: "10.1.2.3".into(),
            port: 443,
            proto: Proto::Tcp,
        };
        let divergence = What::Divergence(Divergence::new(connect, Action::Kill, Some(5150)));
        let event = Event::of(Some("c1"), Some("fetch_url"), divergence);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            (
                &json["kind"],
                &json["effect"],
                &json["port"],
                &json["action"]
            ),
            (
                &"divergence".into(),
                &"connect".into(),
                &443.into(),
                &"kill".into()
            )
        );
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
        let exit = Event::of(
            None,
            None,
            What::Exit {
                code: Some(0),
                diverged: false,
                divergence: None,
                error: None,
                duration_ms: 3.5,
            },
        );
        let text = serde_json::to_string(&exit).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), exit);
    }
}
