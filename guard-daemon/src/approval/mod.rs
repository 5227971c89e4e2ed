//! Calls held for a human: the policy said `escalate` or `quarantine` (and no approver of the
//! policy answered it), and the call waits until an admin approves or denies it, or the wait
//! runs out (then it is denied: nobody answering is not a yes).
//!
//! A held call is a [`Record`] on disk ([`store`]) as well as in memory: a restart of guardd
//! neither loses it nor answers it. Its plan was fixed when it was held, and its approval binds
//! to the digest of its canonical form ([`digest`]). A caller may wait with it (its connection
//! is the call's waiter), leave and come back for it (`resume`), or, without `no_wait`,
//! withdraw it by leaving. Every answer is an audit row before anyone acts on it (see
//! `crate::review::hold`).

pub mod bounds;
pub mod digest;
pub mod input;
pub mod sessions;
pub mod store;

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use self::{bounds::Bounds, digest::CallForm, store::Store};
use crate::{call::decision::Decision, policy::helpers::Choices};

/// What a waiting caller learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Approved by this uid: the waiter takes the call and runs it.
    Approved { by: u32 },
    /// Denied, expired or withdrawn: the call is gone.
    Denied { reason: String },
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
    /// The arguments as they will run, each secret's value as `[secret:NAME]`: an approver
    /// sees what runs (the store is root's, and `pending` an admin's).
    pub args: Value,
    /// RFC 3339, UTC.
    pub since: String,
    /// SHA-256 of the call's canonical form: what `approve` binds to.
    #[serde(default)]
    pub digest: String,
    /// The program the call runs.
    #[serde(default)]
    pub program: String,
    /// The caller's session, when it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Approved by this uid, and waiting for its caller to come back (`resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<u32>,
    /// The caller left on purpose (`no_wait`): leaving does not withdraw the call.
    #[serde(default)]
    pub no_wait: bool,
    /// The policy's agent that made the call (`[agents]`): only it may resume the call, and
    /// it runs only while that agent may make it and is not terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What the caller said it is within its agent (`--label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// An argument (or the held input) held a secret's value: the call is kept masked and can
    /// only be denied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holds_secret: bool,
    /// The input its tool will read, read from the caller's stream when the call was held
    /// (`stdin = "caller"`): its size, digest and beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<input::Shown>,
    /// The model's message and history the call came with, each secret masked as in `args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
    /// What an admin may answer it with: its human approver's `choices` (by default approve,
    /// reject and terminate).
    #[serde(default, skip_serializing_if = "is_default")]
    pub choices: Choices,
}

fn is_default(c: &Choices) -> bool {
    *c == Choices::default()
}

/// A held call as stored: what admins see, and the call whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub held: Held,
    pub form: CallForm,
    /// When the wait for an answer (or, once approved, for the caller) runs out; milliseconds
    /// since the epoch.
    pub expires: u64,
}

struct Entry {
    record: Record,
    waiter: Option<oneshot::Sender<Resolution>>,
    /// The waiter only watches for the answer (`resume` in `watch` mode): a caller that
    /// would wait to run the call takes its place.
    watching: bool,
    /// Its caller has been told it is held (or it came from the store): listed to admins. A
    /// call held and not yet told is its caller's to learn of first, so that a guardd stopped
    /// between the two leaves no caller that an admin's answer overtook.
    told: bool,
}

/// Why a held call could not be answered or collected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalError {
    #[error("no call {0} is waiting for approval")]
    NotHeld(String),
    #[error("too many calls are waiting for approval ({0}); try again later")]
    Full(usize),
    #[error(
        "uid {uid} already has {bound} calls waiting for approval, as many as one uid may \
         (guardd's max_held_per_uid): have one answered, or withdraw one, first"
    )]
    PerUid { uid: u32, bound: usize },
    #[error(
        "too many calls are waiting for approval: the last {reserve} of {capacity} are kept for \
         root and admins (guardd's max_queue, max_held_per_uid); try again later"
    )]
    Reserved { capacity: usize, reserve: usize },
    #[error(
        "the call is too large to hold for approval: its record would be {size} bytes, more than \
         the {bound} a held call may take; send smaller arguments or input"
    )]
    TooLarge { size: usize, bound: usize },
    #[error(
        "call {0} was submitted by your own uid, and an approver may not be its submitter \
         (the policy's [approvals] allow_self says otherwise)"
    )]
    SelfApproval(String),
    #[error("call {call_id} is held as {held}, not {given}: look at it again (guardctl pending)")]
    Digest {
        call_id: String,
        held: String,
        given: String,
    },
    #[error("call {0} is already approved")]
    Answered(String),
    #[error("not permitted: call {0} was submitted by another uid")]
    NotYours(String),
    #[error("call {0} already has a caller waiting for it")]
    Waited(String),
    #[error("the store of held calls: {0}")]
    Store(String),
}

/// How a caller meets its held call.
#[derive(Debug)]
pub enum Attached {
    /// Already approved (by this uid): take it and run it.
    Approved(u32),
    /// Still waiting for an answer.
    Waiting(oneshot::Receiver<Resolution>),
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The calls waiting for a human, and those approved and waiting for their caller.
pub struct Approvals {
    held: Mutex<BTreeMap<String, Entry>>,
    store: Option<Store>,
    bounds: Bounds,
    /// How long a call waits for an answer, and an approved one for its caller.
    pub timeout: Duration,
    /// Serialises every answer (admin, clock, caller leaving) with the audit row it writes, so
    /// a row never records an answer that another one overtook.
    pub answering: tokio::sync::Mutex<()>,
}

impl Approvals {
    /// At most `capacity` calls are held at once, [`bounds::DEFAULT_PER_UID`] of one uid's
    /// ([`Approvals::per_uid`]), each waiting at most `timeout`; `store` keeps them across
    /// restarts (`None`: in memory only, for tests).
    pub fn new(capacity: usize, timeout: Duration, store: Option<Store>) -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            store,
            bounds: Bounds {
                capacity,
                per_uid: bounds::DEFAULT_PER_UID,
            },
            timeout,
            answering: tokio::sync::Mutex::new(()),
        }
    }

    /// At most `per_uid` calls of one uid that is not root or an admin are held at once.
    #[must_use]
    pub fn per_uid(mut self, per_uid: usize) -> Self {
        self.bounds.per_uid = per_uid;
        self
    }

    /// Takes in the records a previous guardd left; returns the files that are no valid
    /// record (name, why), which are never run.
    pub fn load(&self) -> Result<Vec<(String, String)>, ApprovalError> {
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        let (records, bad) = store
            .load()
            .map_err(|e| ApprovalError::Store(format!("{}: {e}", store.dir().display())))?;
        for (name, _) in &bad {
            if let Err(e) = store.set_aside(name) {
                tracing::error!(file = %name, "setting a refused held record aside: {e}");
            }
        }
        let mut map = self.lock();
        for record in records {
            let id = record.held.call_id.clone();
            map.insert(
                id,
                Entry {
                    record,
                    waiter: None,
                    watching: false,
                    told: true,
                },
            );
        }
        Ok(bad)
    }

    /// Whether a call of `uid` could be held now ([`bounds`]): asked before its input is
    /// read, so a uid at its bound costs guardd no read (`hold` asks again).
    pub fn may_hold(&self, uid: u32, privileged: bool) -> Result<(), ApprovalError> {
        let map = self.lock();
        let uids: Vec<u32> = map.values().map(|e| e.record.held.uid).collect();
        self.bounds.admit(&uids, uid, privileged)
    }

    /// Holds a call, durably, before its caller hears that it is held, within the bounds of
    /// held calls ([`bounds`]); `privileged`: its caller is root or an admin.
    pub fn hold(&self, mut record: Record, privileged: bool) -> Result<(), ApprovalError> {
        let mut map = self.lock();
        let uids: Vec<u32> = map.values().map(|e| e.record.held.uid).collect();
        (self.bounds).admit(&uids, record.held.uid, privileged)?;
        record.expires = now_ms() + u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        // Measured as the store writes it, store or not, so that a bound is the same in tests.
        let text = store::encode(&record).map_err(|e| ApprovalError::Store(e.to_string()))?;
        Bounds::fits(text.len())?;
        if let Some(s) = &self.store {
            (s.write(&record.held.call_id, &text))
                .map_err(|e| ApprovalError::Store(e.to_string()))?;
        }
        let id = record.held.call_id.clone();
        map.insert(
            id,
            Entry {
                record,
                waiter: None,
                watching: false,
                told: false,
            },
        );
        Ok(())
    }

    /// Lists held call `call_id` to admins: its caller has been told it is held (or is gone).
    pub fn told(&self, call_id: &str) {
        if let Some(e) = self.lock().get_mut(call_id) {
            e.told = true;
        }
    }

    /// Makes `uid` the waiter of held call `call_id`; `watching`: one that only watches for
    /// the answer, which a waiter that would run the call displaces (its channel closes
    /// while the call is still held: see `review::hold`).
    pub fn attach(
        &self,
        call_id: &str,
        uid: u32,
        watching: bool,
    ) -> Result<Attached, ApprovalError> {
        let mut map = self.lock();
        let entry = map
            .get_mut(call_id)
            .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?;
        if entry.record.held.uid != uid {
            return Err(ApprovalError::NotYours(call_id.to_owned()));
        }
        if let Some(by) = entry.record.held.approved_by {
            return Ok(Attached::Approved(by));
        }
        let live = entry.waiter.as_ref().is_some_and(|w| !w.is_closed());
        if live && (watching || !entry.watching) {
            return Err(ApprovalError::Waited(call_id.to_owned()));
        }
        let (tx, rx) = oneshot::channel();
        entry.waiter = Some(tx);
        entry.watching = watching;
        Ok(Attached::Waiting(rx))
    }

    /// Forgets the waiter of a call that stays held (it left with `no_wait`, or will resume).
    pub fn detach(&self, call_id: &str) {
        if let Some(e) = self.lock().get_mut(call_id) {
            e.waiter = None;
        }
    }

    /// Checks an admin's answer before it is recorded: the call is held and, to approve it,
    /// unapproved; the digest (when given) is the held call's, and an approver is not the
    /// submitter unless `allow_self`. Denying is always allowed, an approved call's too until
    /// its caller takes it to run. Returns the held call.
    pub fn check(
        &self,
        call_id: &str,
        approve_by: Option<u32>,
        digest: Option<&str>,
        allow_self: bool,
    ) -> Result<Held, ApprovalError> {
        let map = self.lock();
        let held = &map
            .get(call_id)
            .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?
            .record
            .held;
        if held.approved_by.is_some() && approve_by.is_some() {
            return Err(ApprovalError::Answered(call_id.to_owned()));
        }
        if let Some(given) = digest
            && given != held.digest
        {
            return Err(ApprovalError::Digest {
                call_id: call_id.to_owned(),
                held: held.digest.clone(),
                given: given.to_owned(),
            });
        }
        if let Some(by) = approve_by
            && by == held.uid
            && !allow_self
        {
            return Err(ApprovalError::SelfApproval(call_id.to_owned()));
        }
        Ok(held.clone())
    }

    /// Approves a held call, durably, and tells its waiter; without one, the call waits for
    /// its caller to come back.
    pub fn approve(&self, call_id: &str, by: u32) -> Result<(), ApprovalError> {
        let mut map = self.lock();
        let entry = map
            .get_mut(call_id)
            .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?;
        let mut record = entry.record.clone();
        record.held.approved_by = Some(by);
        record.expires = now_ms() + u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        self.save(&record)?;
        entry.record = record;
        if let Some(w) = entry.waiter.take() {
            // A waiter gone in the same instant leaves the call approved for a `resume`.
            let _ = w.send(Resolution::Approved { by });
        }
        Ok(())
    }

    /// Ends a held call unrun (denied, expired, withdrawn) and tells its waiter why.
    pub fn end(&self, call_id: &str, reason: &str) -> Result<Record, ApprovalError> {
        let mut map = self.lock();
        if !map.contains_key(call_id) {
            return Err(ApprovalError::NotHeld(call_id.to_owned()));
        }
        self.unsave(call_id)?;
        let entry = map
            .remove(call_id)
            .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))?;
        if let Some(w) = entry.waiter {
            let _ = w.send(Resolution::Denied {
                reason: reason.to_owned(),
            });
        }
        Ok(entry.record)
    }

    /// Takes an approved call out of the store to run it: from here it is no longer held, and
    /// a crash before it runs loses it rather than running it twice.
    pub fn take(&self, call_id: &str) -> Result<Record, ApprovalError> {
        let mut map = self.lock();
        match map.get(call_id) {
            Some(e) if e.record.held.approved_by.is_some() => {}
            Some(_) | None => return Err(ApprovalError::NotHeld(call_id.to_owned())),
        }
        self.unsave(call_id)?;
        map.remove(call_id)
            .map(|e| e.record)
            .ok_or_else(|| ApprovalError::NotHeld(call_id.to_owned()))
    }

    /// The calls whose wait ran out by `now` (milliseconds since the epoch).
    pub fn expired(&self, now: u64) -> Vec<Held> {
        self.lock()
            .values()
            .filter(|e| e.record.expires <= now)
            .map(|e| e.record.held.clone())
            .collect()
    }

    /// The held call `call_id`, if it is.
    pub fn get(&self, call_id: &str) -> Option<Held> {
        self.lock().get(call_id).map(|e| e.record.held.clone())
    }

    /// The whole form of held call `call_id`, if it is.
    pub fn form(&self, call_id: &str) -> Option<CallForm> {
        self.lock().get(call_id).map(|e| e.record.form.clone())
    }

    /// The held calls whose callers have been told, oldest id first.
    pub fn list(&self) -> Vec<Held> {
        self.lock()
            .values()
            .filter(|e| e.told)
            .map(|e| e.record.held.clone())
            .collect()
    }

    fn save(&self, record: &Record) -> Result<(), ApprovalError> {
        match &self.store {
            Some(s) => s
                .save(record)
                .map_err(|e| ApprovalError::Store(e.to_string())),
            None => Ok(()),
        }
    }

    fn unsave(&self, call_id: &str) -> Result<(), ApprovalError> {
        match &self.store {
            Some(s) => s
                .remove(call_id)
                .map_err(|e| ApprovalError::Store(e.to_string())),
            None => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
