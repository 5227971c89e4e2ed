//! Admission of calls: at most `max_calls` run at once, at most `per_uid` of them a single
//! caller uid's, at most `max_queue` wait for a slot, and the rest are refused as busy. A uid
//! takes its own slot before one of all: past its share its calls wait behind its own, never in
//! front of another uid's, so one caller's long calls delay no one else's. An admitted call
//! holds an [`Admission`]: the call is listed as running while it holds one, and its slots are
//! free again when it is dropped, whatever way the call ends. Shutdown
//! [`drain`](Calls::drain)s by taking every slot.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

/// A call that is running now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Running {
    pub call_id: String,
    pub tool: String,
    pub pid: u32,
    pub peer_uid: u32,
    /// RFC 3339, UTC.
    pub started: String,
}

/// The calls of one guardd: their ids, their slots and which of them run.
pub struct Calls {
    slots: Semaphore,
    max_calls: u32,
    /// Each caller uid's slots, taken before one of `slots`.
    uids: Mutex<HashMap<u32, Arc<Semaphore>>>,
    per_uid: usize,
    max_queue: u64,
    queued: AtomicU64,
    running: Mutex<BTreeMap<String, Running>>,
    next: AtomicU64,
    /// Unique across restarts: the start time, in hex milliseconds.
    prefix: String,
}

/// An admitted call's hold on its slot; see the module's doc.
pub struct Admission<'a> {
    calls: &'a Calls,
    _slot: SemaphorePermit<'a>,
    _own: OwnedSemaphorePermit,
    listed: Option<String>,
}

impl Calls {
    /// `max_calls` run at once, `per_uid` of them one uid's, `max_queue` more may wait.
    pub fn new(max_calls: usize, per_uid: usize, max_queue: usize) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            slots: Semaphore::new(max_calls),
            max_calls: u32::try_from(max_calls).unwrap_or(u32::MAX),
            uids: Mutex::new(HashMap::new()),
            per_uid: per_uid.clamp(1, max_calls.max(1)),
            max_queue: max_queue as u64,
            queued: AtomicU64::new(0),
            running: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(1),
            prefix: format!("{:x}", now.as_millis()),
        }
    }

    /// A fresh call id, unique across restarts (start time) and within a run (counter), in
    /// order for people, and with 64 random bits no one can guess: a held call is resumed by
    /// its id, and an id another caller could work out is one step from its output.
    pub fn new_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}-{}", self.prefix, crate::call::random::hex(8))
    }

    /// Waits for a slot of `uid`'s and then one of all, in the bounded queue; `None` when the
    /// queue is full (busy).
    pub async fn admit(&self, uid: u32) -> Option<Admission<'_>> {
        let own = Arc::clone(
            self.uids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(uid)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_uid))),
        );
        let own = match Arc::clone(&own).try_acquire_owned() {
            Ok(own) => own,
            Err(_) => self.queue(own.acquire_owned()).await?,
        };
        let slot = match self.slots.try_acquire() {
            Ok(slot) => slot,
            Err(_) => self.queue(self.slots.acquire()).await?,
        };
        Some(Admission {
            calls: self,
            _slot: slot,
            _own: own,
            listed: None,
        })
    }

    /// Waits for `slot` as one of the queued calls; `None` when the queue is full.
    async fn queue<T, E>(
        &self,
        slot: impl std::future::Future<Output = Result<T, E>>,
    ) -> Option<T> {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= self.max_queue {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let slot = slot.await.ok();
        self.queued.fetch_sub(1, Ordering::SeqCst);
        slot
    }

    /// The calls running now.
    pub fn running(&self) -> Vec<Running> {
        self.lock().values().cloned().collect()
    }

    /// Calls waiting for a slot.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Waits up to `deadline` for every admitted call to end; past it, `kill` is called and the
    /// calls get a few seconds more to be reaped. Calls admitted meanwhile wait behind it.
    pub async fn drain(&self, deadline: Duration, kill: impl FnOnce()) {
        let running = self.lock().len();
        if running > 0 {
            tracing::info!(running, "shutting down: draining running calls");
        }
        let all = self.slots.acquire_many(self.max_calls);
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("drain deadline passed: killing the remaining calls");
            kill();
            let all = self.slots.acquire_many(self.max_calls);
            let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Running>> {
        // Entries are inserted and removed whole: a panic elsewhere leaves the map consistent.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Admission<'_> {
    /// Lists the call as running until the admission is dropped.
    pub fn running(&mut self, call: Running) {
        let id = call.call_id.clone();
        self.calls.lock().insert(id.clone(), call);
        self.listed = Some(id);
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.listed.take() {
            self.calls.lock().remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(id: &str) -> Running {
        Running {
            call_id: id.into(),
            tool: "t".into(),
            pid: 1,
            peer_uid: 0,
            started: "T".into(),
        }
    }

    #[tokio::test]
    async fn admission_lists_the_call_until_dropped_and_the_queue_is_bounded() {
        let calls = Calls::new(1, 1, 0);
        let mut first = calls.admit(0).await.expect("a free slot");
        first.running(running("a"));
        assert_eq!(calls.running().len(), 1);
        // The one slot is taken and no call may wait: busy.
        assert!(calls.admit(0).await.is_none());
        drop(first);
        assert!(calls.running().is_empty());
        assert!(calls.admit(0).await.is_some());
        assert_ne!(calls.new_id(), calls.new_id());
    }

    #[tokio::test]
    async fn one_uid_past_its_share_waits_behind_its_own_calls_not_in_front_of_others() {
        let calls = Arc::new(Calls::new(4, 2, 100));
        let mine: Vec<Admission<'_>> = vec![
            calls.admit(7).await.expect("first"),
            calls.admit(7).await.expect("second"),
        ];
        // Its third waits for one of its own, though two slots of all are free.
        let third = calls.admit(7);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut third)
                .await
                .is_err()
        );
        assert_eq!(calls.queued(), 1);
        // Another uid's call takes a free slot at once, and so does a third uid's.
        let other = calls.admit(8).await.expect("another uid");
        let _third_uid = calls.admit(9).await.expect("a third uid");
        drop(mine);
        assert!(third.await.is_some());
        drop(other);
    }
}
