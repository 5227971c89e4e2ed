//! Calls held for a human: the policy said `escalate` or `quarantine`, and the call waits, with
//! its caller, until an admin approves or denies it, or the wait runs out (then it is denied:
//! nobody answering is not a yes).
//!
//! The registry is in memory on purpose: a held call is a caller waiting on an open connection,
//! and neither survives guardd. Every outcome is an audit row before the caller learns it.

use std::{collections::BTreeMap, sync::Mutex, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::decision::Decision;

/// What an admin (or the clock) said about a held call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Approved { by: u32 },
    Denied { by: u32, reason: Option<String> },
}

/// A held call, as admins see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub call_id: String,
    pub tool: String,
    /// escalate | quarantine
    pub decision: Decision,
    pub reason: String,
    /// The caller's uid.
    pub uid: u32,
    /// The arguments, redacted as in the audit log.
    pub args: Value,
    /// RFC 3339, UTC.
    pub since: String,
}

struct Entry {
    held: Held,
    tx: oneshot::Sender<Resolution>,
}

/// Why a resolution could not be delivered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalError {
    #[error("no call {0} is waiting for approval")]
    NotHeld(String),
    #[error("too many calls are waiting for approval ({0}); try again later")]
    Full(usize),
    #[error(
        "call {0} was submitted by your own uid, and an approver may not be its submitter \
         (the policy's [approvals] allow_self says otherwise)"
    )]
    SelfApproval(String),
}

/// The calls waiting for a human.
pub struct Approvals {
    held: Mutex<BTreeMap<String, Entry>>,
    capacity: usize,
    /// How long a call waits before it is denied.
    pub timeout: Duration,
}

impl Approvals {
    /// At most `capacity` calls wait at once, each at most `timeout`.
    pub fn new(capacity: usize, timeout: Duration) -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            capacity,
            timeout,
        }
    }

    /// Holds a call; the receiver yields its resolution.
    pub fn hold(&self, held: Held) -> Result<oneshot::Receiver<Resolution>, ApprovalError> {
        let mut map = self.lock();
        if map.len() >= self.capacity {
            return Err(ApprovalError::Full(self.capacity));
        }
        let (tx, rx) = oneshot::channel();
        map.insert(held.call_id.clone(), Entry { held, tx });
        Ok(rx)
    }

    /// Delivers an admin's resolution to the waiting call. An approval from the uid that
    /// submitted the call is refused (the call stays held) unless `allow_self`: one person
    /// should not be both the one who asks and the one who says yes. Denying is always allowed.
    pub fn resolve(
        &self,
        call_id: &str,
        resolution: Resolution,
        allow_self: bool,
    ) -> Result<(), ApprovalError> {
        let entry = {
            let mut map = self.lock();
            let held = map
                .get(call_id)
                .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?;
            if let Resolution::Approved { by } = resolution
                && by == held.held.uid
                && !allow_self
            {
                return Err(ApprovalError::SelfApproval(call_id.to_owned()));
            }
            map.remove(call_id)
                .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?
        };
        // The waiter may have gone in the same instant (caller gone, timeout): then nothing
        // runs, which is what a late answer deserves.
        entry
            .tx
            .send(resolution)
            .map_err(|_| ApprovalError::NotHeld(call_id.to_owned()))
    }

    /// Forgets a call that stopped waiting (timeout, caller gone).
    pub fn withdraw(&self, call_id: &str) {
        self.lock().remove(call_id);
    }

    /// The held calls, oldest id first.
    pub fn list(&self) -> Vec<Held> {
        self.lock().values().map(|e| e.held.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str) -> Held {
        Held {
            call_id: id.into(),
            tool: "send_email".into(),
            decision: Decision::Escalate,
            reason: "irreversible".into(),
            uid: 1000,
            args: Value::Null,
            since: crate::audit::ts::now(),
        }
    }

    #[test]
    fn a_resolution_reaches_its_call_once() {
        let a = Approvals::new(2, Duration::from_secs(1));
        let mut rx = a.hold(held("c1")).expect("hold");
        assert_eq!(a.list().len(), 1);
        a.resolve("c1", Resolution::Approved { by: 0 }, false)
            .expect("resolve");
        assert_eq!(rx.try_recv(), Ok(Resolution::Approved { by: 0 }));
        assert!(a.list().is_empty());
        assert_eq!(
            a.resolve("c1", Resolution::Approved { by: 0 }, false),
            Err(ApprovalError::NotHeld("c1".into()))
        );
    }

    #[test]
    fn capacity_is_bounded_and_withdrawn_calls_cannot_be_approved() {
        let a = Approvals::new(1, Duration::from_secs(1));
        let _rx = a.hold(held("c1")).expect("hold");
        assert_eq!(a.hold(held("c2")).err(), Some(ApprovalError::Full(1)));
        a.withdraw("c1");
        assert!(
            a.resolve("c1", Resolution::Approved { by: 0 }, false)
                .is_err()
        );
        drop(a.hold(held("c3")).expect("room again"));
        // The waiter is gone: approving it reports that nothing is waiting.
        assert!(
            a.resolve("c3", Resolution::Approved { by: 0 }, false)
                .is_err()
        );
    }

    #[test]
    fn the_submitter_may_deny_but_not_approve_its_own_call_unless_the_policy_says_so() {
        let a = Approvals::new(4, Duration::from_secs(1));
        let mut rx = a.hold(held("c1")).expect("hold");
        assert_eq!(
            a.resolve("c1", Resolution::Approved { by: 1000 }, false),
            Err(ApprovalError::SelfApproval("c1".into()))
        );
        // Still held: another admin may answer.
        assert_eq!(a.list().len(), 1);
        a.resolve("c1", Resolution::Approved { by: 0 }, false)
            .expect("another uid approves");
        assert_eq!(rx.try_recv(), Ok(Resolution::Approved { by: 0 }));
        let mut rx = a.hold(held("c2")).expect("hold");
        a.resolve("c2", Resolution::Approved { by: 1000 }, true)
            .expect("allowed by policy");
        assert_eq!(rx.try_recv(), Ok(Resolution::Approved { by: 1000 }));
        let mut rx = a.hold(held("c3")).expect("hold");
        let deny = Resolution::Denied {
            by: 1000,
            reason: None,
        };
        a.resolve("c3", deny.clone(), false).expect("own denial");
        assert_eq!(rx.try_recv(), Ok(deny));
    }
}
