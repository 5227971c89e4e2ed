//! A receipt being written: each kernel event of its call folded in as it arrives, and each
//! divergence published (and, for a call that must not go on, its cgroup killed).

use guard_common::event::{
    ACTION_ALLOWED, ACTION_DENIED, ACTION_KILLED, ACTION_SHADOWED, Event as KernelEvent, KIND_BIND,
    KIND_CONNECT, KIND_EXEC, KIND_LOCK, KIND_OPEN, KIND_PACKET, KIND_REFUSED, KIND_SECCOMP,
    KIND_SOCKET,
};

use super::{
    ConnectSeen, RECEIPT_PATHS, Receipt, ReceiptFor, SocketSeen, Verdict,
    opens::c_str,
    seen::{addr_of, lock_of, proto_of},
};
use crate::bus::{Action, Bus, Divergence, Effect, RefusedSeen, What};

/// A receipt being written: the call it is for and what was seen so far.
pub(super) struct Draft {
    pub(super) call: ReceiptFor,
    pub(super) receipt: Receipt,
    /// Execs seen so far: the first is the launch's.
    pub(super) execs_seen: u64,
}

impl Draft {
    /// Marks the call diverged, publishes the divergence and, unless the call only denies,
    /// kills it. `killed` says the kernel already killed the offending task.
    pub(super) fn diverge(&mut self, effect: Effect, pid: Option<i32>, killed: bool, bus: &Bus) {
        let action = if self.call.kill_on_divergence || killed {
            Action::Kill
        } else {
            Action::Deny
        };
        self.divergence(effect, pid, action, bus);
    }

    /// Marks the call diverged for what was learnt once it had ended (the kernel's counts, the
    /// names it asked): nothing is left to kill, and its exit code stays its own.
    pub(super) fn diverged_at_end(&mut self, effect: Effect, bus: &Bus) {
        self.divergence(effect, None, Action::Ended, bus);
    }

    pub(super) fn divergence(
        &mut self,
        effect: Effect,
        pid: Option<i32>,
        action: Action,
        bus: &Bus,
    ) {
        self.receipt.verdict = Verdict::Diverged;
        let mut divergence = Divergence::new(effect, action, pid);
        if self.call.shadow && divergence.effect.let_through_in_shadow() {
            divergence = divergence.shadowed();
            self.receipt.let_through += 1;
        } else {
            self.receipt.denied += 1;
        }
        let action = divergence.action;
        if let Some(masks) = &self.call.masks {
            divergence = masks.mask_serde(divergence);
        }
        keep(&mut self.receipt.divergences, divergence.clone());
        let enforce = if self.call.shadow {
            crate::call::plan::Enforce::Shadow
        } else {
            crate::call::plan::Enforce::Enforce
        };
        let (id, tool) = (&self.call.call_id, &self.call.tool);
        bus.call_in(id, tool, enforce, What::Divergence(divergence));
        if action == Action::Kill {
            self.receipt.stopped = true;
            // cgroup.kill takes the whole tree at once, descendants included.
            if let Err(e) = std::fs::write(self.call.cgroup.join("cgroup.kill"), "1") {
                tracing::error!(call = %self.call.call_id, "killing diverged call: {e}");
            }
        }
    }

    /// Folds one kernel event into the receipt; the effect, when the kernel did not allow it.
    pub(super) fn fold(&mut self, event: &KernelEvent) -> Option<Effect> {
        let receipt = &mut self.receipt;
        let effect = match event.kind {
            KIND_EXEC => {
                let mut path = c_str(&event.path);
                self.execs_seen += 1;
                if let Some(program) = &self.call.pinned
                    && self.execs_seen == 1
                    && path.starts_with("/dev/fd/")
                {
                    path.clone_from(program);
                }
                keep(&mut receipt.execs, path.clone());
                Effect::Exec {
                    path,
                    by_landlock: false,
                }
            }
            KIND_CONNECT => {
                let seen = ConnectSeen {
                    addr: addr_of(event),
                    port: event.port,
                    proto: proto_of(event),
                    allowed: matches!(event.action, ACTION_ALLOWED | ACTION_SHADOWED),
                };
                let effect = Effect::Connect {
                    addr: seen.addr.clone(),
                    port: seen.port,
                    proto: seen.proto,
                };
                keep(&mut receipt.connects, seen);
                effect
            }
            KIND_SOCKET => {
                let seen = SocketSeen::of(event);
                let effect = Effect::Socket {
                    family: seen.family.clone(),
                    ty: seen.ty.clone(),
                    protocol: seen.protocol,
                };
                keep(&mut receipt.sockets, seen);
                effect
            }
            KIND_REFUSED => {
                let seen = RefusedSeen::of(event);
                receipt.refused.push(seen.clone());
                Effect::Refused(seen)
            }
            KIND_SECCOMP => {
                receipt.seccomp_kills += 1;
                Effect::Syscall {
                    signal: "SIGSYS".into(),
                }
            }
            KIND_BIND => Effect::Bind {
                addr: addr_of(event),
                port: event.port,
                proto: proto_of(event),
            },
            KIND_PACKET => Effect::Packet {
                addr: if event.family == 0 {
                    "?".to_owned()
                } else {
                    addr_of(event)
                },
                port: event.port,
                protocol: event.proto,
                options: event.sock_type != 0,
            },
            // The open observer judges by file identity and says itself what diverged.
            KIND_OPEN => return receipt.files.as_mut()?.record(event),
            KIND_LOCK => lock_of(event),
            _ => return None,
        };
        matches!(
            event.action,
            ACTION_DENIED | ACTION_KILLED | ACTION_SHADOWED
        )
        .then_some(effect)
    }
}

/// Pushes `item` unless the list is full: a receipt lists the first ones, the counts go on.
fn keep<T>(list: &mut Vec<T>, item: T) {
    if list.len() < RECEIPT_PATHS {
        list.push(item);
    }
}
