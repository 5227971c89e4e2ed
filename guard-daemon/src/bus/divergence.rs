//! What a call did or tried outside its approval, as the bus, its receipt and its audit row
//! tell it: the effect, the layer that saw it, and what guard did about it.

use serde::{Deserialize, Serialize};

/// A divergence: the effect, what guard did about it, and the process (when known).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    #[serde(flatten)]
    pub effect: Effect,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// For a call in shadow (`action` is `allowed`): what enforcing would have done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would: Option<Action>,
    /// The layer that refused the attempt (or saw it, for what is learnt at the end): read by
    /// whoever tails the events or the audit log, without guard's code to name it.
    #[serde(default)]
    pub layer: String,
}

/// The effect a call had or attempted outside its approval, with that effect's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// An exec of a program outside its exec effects: killed by the kernel's exec check, or,
    /// for a program the call may not read (`by_landlock`, not on the wire: its `layer` says
    /// it), refused by landlock and seen by the call's exec judge (`sandbox::writes`).
    Exec {
        path: String,
        #[serde(skip)]
        by_landlock: bool,
    },
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
    /// A connect to a Unix socket outside the places the call may make sockets (a service's,
    /// guardd's), which guardd refused for it (`sandbox::writes::unix`).
    UnixConnect { path: String },
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
    /// Let through: the call runs in shadow (`would` says what enforcing would have done).
    Allowed,
}

impl Effect {
    /// The effect's name, as on the wire (`effect`).
    pub fn name(&self) -> &'static str {
        match self {
            Effect::Exec { .. } => "exec",
            Effect::Connect { .. } => "connect",
            Effect::Socket { .. } => "socket",
            Effect::Open { .. } => "open",
            Effect::WriteOpen { .. } => "write_open",
            Effect::UnixConnect { .. } => "unix_connect",
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
            Effect::Exec { path, .. }
            | Effect::Open { path, .. }
            | Effect::WriteOpen { path, .. }
            | Effect::UnixConnect { path } => path.clone(),
            Effect::Planted {
                path,
                moved_to,
                kept,
            } => match (moved_to, kept) {
                (Some(to), _) => format!("{path}, moved to {to}"),
                (None, Some(why)) => format!("{path}, left there: {why}"),
                (None, None) => path.clone(),
            },
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
            Effect::Exec {
                by_landlock: true, ..
            } => "landlock",
            Effect::Exec { .. } => "eBPF exec tracepoint",
            Effect::Connect { .. } => "eBPF cgroup connect/sendmsg",
            Effect::Socket { .. } => "eBPF socket check",
            Effect::Open { .. } | Effect::WritesOutside { .. } => "eBPF open observer",
            Effect::WriteOpen { .. } => "the read-only mount view and landlock",
            Effect::UnixConnect { .. } => "guardd's connect for the call",
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

impl Effect {
    /// Whether a call in shadow is let do this: what the policy's effects decide. What no call
    /// may do (a syscall seccomp refuses, a bind, guardd's socket), a planted protected name and
    /// what went unseen are the same in shadow as enforced.
    pub fn let_through_in_shadow(&self) -> bool {
        matches!(
            self,
            Effect::Exec { .. }
                | Effect::Connect { .. }
                | Effect::Socket { .. }
                | Effect::Open { .. }
                | Effect::WriteOpen { .. }
                | Effect::WritesOutside { .. }
                | Effect::Packet { .. }
                | Effect::Dns { .. }
                | Effect::DnsUnlisted { .. }
                | Effect::Lock { .. }
        )
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
            would: None,
            layer,
        }
    }

    /// The same divergence of a call in shadow: let through, with what enforcing would have
    /// done (refused, for what is learnt at the end).
    pub fn shadowed(self) -> Self {
        let would = match self.action {
            Action::Ended => Action::Deny,
            other => other,
        };
        Self {
            would: Some(would),
            action: Action::Allowed,
            ..self
        }
    }

    /// One line: the effect, its target, the layer that stopped it and what guard did.
    pub fn describe(&self) -> String {
        let pid = self.pid.map_or(String::new(), |p| format!(" pid {p}"));
        // Learnt at the end (a count, a name asked): nothing was left to stop, only to see.
        let by = match self.action {
            Action::Ended => "seen",
            Action::Allowed => "let through, shadow; seen",
            _ => "stopped",
        };
        let would = self
            .would
            .map_or(String::new(), |w| format!(" (would {})", w.as_str()));
        format!(
            "{} {} ({by} by {}){pid} -> {}{would}",
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
            Action::Allowed => "allowed",
        }
    }
}
