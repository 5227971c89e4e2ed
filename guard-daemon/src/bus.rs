//! The event bus: what guard does and observes, as it happens, fanned out to `subscribe` clients.
//! Publishing never waits for a subscriber: a slow one falls behind, is told so with a final
//! `lagged` event, and is dropped. The events are typed here once, for guardd to publish and for
//! guardctl (and any client) to read.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::call::{decision::Decision, plan::Enforce};

mod divergence;

pub use divergence::{Action, Divergence, Effect, Proto, RefusedSeen, StoppedBy};

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
    /// `shadow` on every event of a call in shadow (`enforce = "shadow"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<Enforce>,
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
        /// In shadow: what enforcing would have decided (the call was allowed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        would_block: Option<Decision>,
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

impl Event {
    /// An event of `call_id` (of `tool`), now.
    pub fn of(call_id: Option<&str>, tool: Option<&str>, what: What) -> Self {
        Self {
            ts: crate::call::ts::now(),
            call_id: call_id.map(str::to_owned),
            tool: tool.map(str::to_owned),
            enforce: None,
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

    /// Publishes `what` of a call that runs as `enforce` says (marked when in shadow), now.
    pub fn call_in(&self, call_id: &str, tool: &str, enforce: Enforce, what: What) {
        let mut event = Event::of(Some(call_id), Some(tool), what);
        event.enforce = (!enforce.enforced()).then_some(enforce);
        self.publish(event);
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
                would_block: None,
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
