//! A call's receipt: what the kernel saw it do, folded in from its events as they arrive, judged
//! against what was approved, and handed back when the call ends. A divergence is published on
//! the bus and, for a call that must not go on, kills its cgroup.

use std::{collections::HashMap, path::PathBuf, sync::Mutex};

use guard_common::event::{ACTION_KILLED, Event as KernelEvent, KIND_EXEC, KIND_LOCK};
use serde::{Deserialize, Serialize};

use crate::{
    bus::{Bus, Divergence, Effect, RefusedSeen},
    monitor::dns::{Asked, Questions, Responder},
    receipt::opens::FilesSeen,
};

mod draft;
pub mod opens;
mod seen;
mod verified;

use draft::Draft;

pub use seen::{ConnectSeen, SocketSeen, syscall_names};
pub use verified::Verified;

/// Paths kept per receipt list; the count goes on.
const RECEIPT_PATHS: usize = 64;

/// What a call was seen doing, for its audit row (`effects_observed`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Receipt {
    pub execs: Vec<String>,
    pub connects: Vec<ConnectSeen>,
    /// Sockets the kernel refused to create (families or types outside the call's needs).
    pub sockets: Vec<SocketSeen>,
    /// Divergences refused (or seen once nothing was left to stop).
    pub denied: u64,
    /// Divergences a call in shadow was let through (each says what enforcing `would` do).
    #[serde(skip_serializing_if = "is_zero")]
    pub let_through: u64,
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
    /// The DNS questions the call asked guardd's responder (calls that connect by host name),
    /// each distinct name and type once, the first 64 (refused ones kept before answered ones):
    /// each name not among its approved hosts was refused, and is a divergence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<Asked>,
    /// The questions the responder judged, repeats included; `verified.dns` says the same.
    #[serde(skip_serializing_if = "is_zero")]
    pub dns_judged: u64,
    /// Judged questions `dns` does not list (it was full): `dns` is then not the whole list.
    #[serde(skip_serializing_if = "is_zero")]
    pub dns_unlisted: u64,
    /// Of those, the ones for a name outside the approved hosts: refused, and one divergence.
    #[serde(skip_serializing_if = "is_zero")]
    pub dns_unlisted_refused: u64,
    /// Messages to the responder that were no question it could read (a divergence: no
    /// resolver sends one).
    #[serde(skip_serializing_if = "is_zero")]
    pub dns_unreadable: u64,
    /// Messages to the responder it never judged: dropped by the kernel from its full queue,
    /// or still queued when its read at the call's end reached its bound (counted as one). A
    /// divergence: what they asked is unknown.
    #[serde(skip_serializing_if = "is_zero")]
    pub dns_unjudged: u64,
    /// Packets for the call's sockets from no approved destination, dropped in the kernel
    /// (`cgroup_skb` ingress). Anyone may send them, so they are no divergence of the call;
    /// what they carried never reached it, but in shadow, where they are counted and let
    /// through (the answers of its unapproved connects, and any peer of a port it listens on).
    #[serde(skip_serializing_if = "is_zero")]
    pub inbound_dropped: u64,
    /// Packets from the call's sockets with IP options, an IPv6 extension header or a
    /// destination no approved one, dropped in the kernel (`cgroup_skb` egress): each a
    /// divergence, reported by its first.
    #[serde(skip_serializing_if = "is_zero")]
    pub outbound_dropped: u64,
    /// Which layer verified each class of effect for this receipt, and what it could not see.
    pub verified: Verified,
    /// The call's kernel events the ring buffer had no room for: its lists (`execs`, `connects`,
    /// `files`) are then incomplete, and the verdict is `diverged` (what it did outside its
    /// effects is still counted above).
    #[serde(skip_serializing_if = "is_zero")]
    pub events_lost: u64,
    pub verdict: Verdict,
    /// Each divergence as it was published (the first 64; `denied` and `let_through` count them all): what it
    /// reached for, the layer that stopped it, and what guard did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub divergences: Vec<Divergence>,
    /// The secrets the call was given (in its environment): an approved process can print
    /// a value in a form no mask knows, so each is exposed to what the call did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_exposed: Vec<String>,
    /// The secrets whose values guardd masked in the call's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_masked: Vec<String>,
    /// Whether guard killed the call for a divergence.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

/// A receipt's judgement of the call against its approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Everything the kernel saw was within the call's effects, and nothing went unseen.
    #[default]
    Conformed,
    /// The call did, or tried, something outside its effects, or its receipt is incomplete.
    Diverged,
}

/// The call a receipt is for: who it is and how a divergence is answered.
#[derive(Clone, Debug)]
pub struct ReceiptFor {
    pub call_id: String,
    pub tool: String,
    /// The call's cgroup directory, killed on divergence.
    pub cgroup: PathBuf,
    pub kill_on_divergence: bool,
    /// Whether the kernel reports the call's opens (`--trace-syscalls`, or shadow).
    pub files: bool,
    /// The call runs in shadow: what it does outside its effects is let through, and each
    /// divergence says what enforcing would have done.
    pub shadow: bool,
    /// The masks of a call given a secret: what it did (a path, a name it asked) may hold a
    /// value, and its divergences are published masked.
    pub masks: Option<std::sync::Arc<crate::policy::secrets::mask::Masks>>,
    /// The program an approved held call runs, exec'd by descriptor (`Ready::pin`): its first
    /// exec is named as this, not as the `/dev/fd/N` the kernel reports.
    pub pinned: Option<String>,
}

/// The receipts of the calls running now, by cgroup id, written by the event pump.
#[derive(Default)]
pub struct Receipts {
    calls: Mutex<HashMap<u64, Draft>>,
}

impl Receipts {
    /// Starts the receipt of the call in cgroup `cgroup_id`.
    pub fn begin(&self, cgroup_id: u64, call: ReceiptFor) {
        let receipt = Receipt {
            files: call.files.then(FilesSeen::default),
            verified: Verified::of(call.files),
            processes: 1,
            ..Receipt::default()
        };
        let draft = Draft {
            call,
            receipt,
            execs_seen: 0,
        };
        self.lock().insert(cgroup_id, draft);
    }

    /// Stops following the call and hands back its receipt.
    pub fn finish(&self, cgroup_id: u64) -> Option<Receipt> {
        self.lock().remove(&cgroup_id).map(|d| d.receipt)
    }

    /// Folds in what the kernel counted of the call (read at its end): writes outside its
    /// effects whose events were lost still make it diverged.
    pub fn counted(&self, cgroup_id: u64, stats: guard_common::call::CallStats, bus: &Bus) {
        let mut calls = self.lock();
        let Some(draft) = calls.get_mut(&cgroup_id) else {
            return;
        };
        let events_lost = stats.events_lost;
        draft.receipt.writes_outside = stats.writes_outside;
        draft.receipt.events_lost = events_lost;
        draft.receipt.inbound_dropped = stats.inbound_dropped;
        draft.receipt.outbound_dropped = stats.outbound_dropped;
        let seen = draft.receipt.files.as_ref().map_or(0, |f| f.diverged);
        if stats.writes_outside > seen {
            let writes = stats.writes_outside - seen;
            draft.diverged_at_end(
                Effect::WritesOutside {
                    writes,
                    events_lost,
                },
                bus,
            );
        }
        // Lost events leave the receipt's lists incomplete; what was counted above is whole,
        // but a receipt that could not see everything does not say `conformed`.
        if events_lost > 0 {
            draft.diverged_at_end(Effect::EventsLost { events_lost }, bus);
        }
        let seen = draft.receipt.refused.len() as u64;
        if stats.refused > seen {
            let refused = stats.refused - seen;
            draft.diverged_at_end(
                Effect::RefusedUnseen {
                    refused,
                    events_lost,
                },
                bus,
            );
        }
    }

    /// Stops the call's DNS responder, if it has one, and folds in what it was asked. Called
    /// once the call has ended: the responder then judges all the call left queued.
    pub async fn answered(&self, cgroup_id: u64, responder: Option<Responder>, bus: &Bus) {
        if let Some(responder) = responder {
            self.asked(cgroup_id, responder.finish().await, bus);
        }
    }

    /// Folds in what the call asked its DNS responder (read at its end): a name outside its
    /// approved hosts is a divergence (it was refused; it never left the host), whether or not
    /// the list had room for it, and so is a message the responder could not read or never
    /// judged: a receipt that cannot say what was asked does not say `conformed`.
    pub fn asked(&self, cgroup_id: u64, questions: Questions, bus: &Bus) {
        let mut calls = self.lock();
        let Some(draft) = calls.get_mut(&cgroup_id) else {
            return;
        };
        for q in questions.listed.iter().filter(|q| !q.approved) {
            let effect = Effect::Dns {
                name: q.name.clone(),
                qtype: q.qtype.clone(),
            };
            draft.diverged_at_end(effect, bus);
        }
        let counted = [
            (
                questions.unlisted_refused,
                Effect::DnsUnlisted {
                    refused: questions.unlisted_refused,
                },
            ),
            (
                questions.unreadable,
                Effect::DnsUnreadable {
                    messages: questions.unreadable,
                },
            ),
            (
                questions.unjudged,
                Effect::DnsUnjudged {
                    messages: questions.unjudged,
                },
            ),
        ];
        for (n, effect) in counted {
            if n > 0 {
                draft.diverged_at_end(effect, bus);
            }
        }
        let receipt = &mut draft.receipt;
        receipt.verified.dns = Verified::dns_of(&questions).into();
        receipt.dns_judged = questions.judged;
        receipt.dns_unlisted = questions.unlisted;
        receipt.dns_unlisted_refused = questions.unlisted_refused;
        receipt.dns_unreadable = questions.unreadable;
        receipt.dns_unjudged = questions.unjudged;
        receipt.dns = questions.listed;
    }

    /// Folds in a write-open the call attempted outside its write rules (`sandbox::writes`):
    /// refused by the kernel, and a divergence, ending the call where divergences do.
    pub fn attempted(&self, cgroup_id: u64, attempt: crate::sandbox::writes::Attempt, bus: &Bus) {
        if let Some(draft) = self.lock().get_mut(&cgroup_id) {
            use crate::sandbox::writes::AttemptKind;
            let effect = match attempt.kind {
                AttemptKind::Exec => Effect::Exec {
                    path: attempt.path,
                    by_landlock: true,
                },
                AttemptKind::WriteOpen => Effect::WriteOpen {
                    path: attempt.path,
                    flags: attempt.flags,
                },
                AttemptKind::UnixConnect => Effect::UnixConnect { path: attempt.path },
            };
            draft.diverge(effect, Some(attempt.pid), false, bus);
        }
    }

    /// Folds in the protected names the call made (`sandbox::protected::Absent::made`): seen at
    /// its end, when nothing is left to stop.
    pub fn planted(
        &self,
        cgroup_id: u64,
        planted: Vec<crate::sandbox::protected::Planted>,
        bus: &Bus,
    ) {
        if let Some(draft) = self.lock().get_mut(&cgroup_id) {
            for p in planted {
                let (moved_to, kept) = match p.moved_to {
                    Ok(to) => (Some(to), None),
                    Err(why) => (None, Some(why)),
                };
                let effect = Effect::Planted {
                    path: p.path,
                    moved_to,
                    kept,
                };
                draft.diverged_at_end(effect, bus);
            }
        }
    }

    /// Whether the call has diverged so far.
    pub fn diverged(&self, cgroup_id: u64) -> bool {
        self.lock()
            .get(&cgroup_id)
            .is_some_and(|d| d.receipt.verdict == Verdict::Diverged)
    }

    /// Folds one kernel event into its call's receipt and publishes what an operator must see.
    pub fn record(&self, event: &KernelEvent, bus: &Bus) {
        let mut calls = self.lock();
        // None: the call ended (or was never ours) before its last events were read.
        if let Some(draft) = calls.get_mut(&event.cgroup_id)
            && let Some(effect) = draft.fold(event)
        {
            // 0: seen in softirq, on no task of the call's.
            let pid = i32::try_from(event.pid).ok().filter(|&pid| pid != 0);
            // An unapproved exec kills the process that tried it, before its first instruction,
            // and a lock outside the write effects the task that took it, before it learns the
            // outcome: that is the attempt refused, and under `on_divergence = "deny"` the rest
            // of the call goes on (a shell whose command tried a program it may read but not
            // run, or a reader that locks what it reads).
            let takes_the_call =
                event.action == ACTION_KILLED && event.kind != KIND_EXEC && event.kind != KIND_LOCK;
            draft.diverge(effect, pid, takes_the_call, bus);
        }
    }

    /// Records that the call in `cgroup_id` reached guardd's own socket: a divergence seen by
    /// guardd, not by a kernel program. Returns whether a running call was found.
    pub fn reached_guardd(&self, cgroup_id: u64, pid: i32, bus: &Bus) -> bool {
        let mut calls = self.lock();
        let Some(draft) = calls.get_mut(&cgroup_id) else {
            return false;
        };
        draft.receipt.guardd_connects += 1;
        draft.diverge(Effect::Guardd {}, Some(pid), false, bus);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Draft>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover it.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[cfg(test)]
mod tests;
