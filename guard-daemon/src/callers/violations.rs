//! The tools a caller had blocked recently, for the judges' `policy_violations`: a judge can
//! tell an agent that was refused a tool from one that never tried it.
//!
//! A caller names its own session, and a blocked call may name any tool: what is kept is
//! bounded in count and in bytes, whatever callers send. Each uid keeps at most
//! [`SESSIONS_PER_UID`] records (its oldest forgotten first, so that one uid's new sessions push
//! out only its own), and all of them together at most [`CALLERS`] records and [`BYTES`] bytes
//! (the stalest forgotten first). The strings themselves are bounded by the protocol
//! (`protocol::limits`: a session and a tool's name are at most 256 bytes each).

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::call::peer::Peer;

/// How long a block counts as recent.
const RECENT: Duration = Duration::from_secs(600);
/// Blocks kept per caller.
const KEPT: usize = 32;
/// Callers kept at once; the stalest are forgotten first.
const CALLERS: usize = 4096;
/// The records of one uid (its sessions, and itself without one); its stalest go first.
pub const SESSIONS_PER_UID: usize = 64;
/// Bytes of names kept, all callers together (sessions and tools, as counted by [`cost`]).
pub const BYTES: usize = 4 << 20;

/// One caller's recent blocks, oldest first.
#[derive(Debug, Default)]
struct Record {
    blocks: VecDeque<(Instant, Box<str>)>,
    /// The bytes this record counts against [`BYTES`].
    bytes: usize,
}

impl Record {
    fn last(&self) -> Option<Instant> {
        self.blocks.back().map(|(t, _)| *t)
    }
}

/// What a kept string costs: its bytes and what holds it.
fn cost(s: &str) -> usize {
    s.len() + 32
}

/// One uid's records: without a session, and by session. A session's name is the caller's to
/// choose: under the uid, so that one uid naming another's session cannot fill that session's
/// record (and sway the judges of its calls).
type Sessions = HashMap<Option<Box<str>>, Record>;

#[derive(Debug, Default)]
struct Kept {
    by: HashMap<u32, Sessions>,
    /// Records, all uids together.
    records: usize,
    /// The sum of every record's `bytes`.
    bytes: usize,
}

/// Recent blocks by caller.
#[derive(Debug, Default)]
pub struct Violations {
    kept: Mutex<Kept>,
}

/// The stalest of `sessions`' records.
fn stalest(sessions: &Sessions) -> Option<(&Option<Box<str>>, Option<Instant>)> {
    sessions
        .iter()
        .map(|(s, r)| (s, r.last()))
        .min_by_key(|(_, last)| *last)
}

impl Kept {
    fn forget(&mut self, uid: u32, session: &Option<Box<str>>) {
        let Some(sessions) = self.by.get_mut(&uid) else {
            return;
        };
        if let Some(r) = sessions.remove(session) {
            self.records -= 1;
            self.bytes -= r.bytes;
        }
        if sessions.is_empty() {
            self.by.remove(&uid);
        }
    }

    /// Forgets the stalest record but `keep`; false when none is left.
    fn forget_stalest(&mut self, keep: Option<(u32, &Option<Box<str>>)>) -> bool {
        let found = (self.by.iter())
            .flat_map(|(uid, sessions)| sessions.iter().map(move |(s, r)| (*uid, s, r.last())))
            .filter(|(uid, s, _)| Some((*uid, *s)) != keep)
            .min_by_key(|(_, _, last)| *last)
            .map(|(uid, s, _)| (uid, s.clone()));
        match found {
            Some((uid, session)) => {
                self.forget(uid, &session);
                true
            }
            None => false,
        }
    }

    /// Makes room for a record of `uid`'s that is not kept yet.
    fn room_for(&mut self, uid: u32, now: Instant) {
        if let Some(sessions) = self.by.get(&uid)
            && sessions.len() >= SESSIONS_PER_UID
            && let Some((session, _)) = stalest(sessions)
        {
            let session = session.clone();
            self.forget(uid, &session);
        }
        if self.records >= CALLERS {
            let expired: Vec<(u32, Option<Box<str>>)> = (self.by.iter())
                .flat_map(|(uid, sessions)| sessions.iter().map(move |(s, r)| (*uid, s, r)))
                .filter(|(_, _, r)| r.last().is_none_or(|t| now - t >= RECENT))
                .map(|(uid, s, _)| (uid, s.clone()))
                .collect();
            for (uid, session) in &expired {
                self.forget(*uid, session);
            }
        }
        while self.records >= CALLERS && self.forget_stalest(None) {}
    }
}

impl Violations {
    /// Records that `tool` was blocked for this caller.
    pub fn blocked(&self, peer: &Peer, session: Option<&str>, tool: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let session: Option<Box<str>> = session.map(Box::from);
        let uid = peer.uid;
        let new = kept.by.get(&uid).is_none_or(|s| !s.contains_key(&session));
        let mut added = cost(tool);
        if new {
            kept.room_for(uid, now);
            kept.records += 1;
            // The session's name is counted with the record.
            added += session.as_deref().map_or(0, cost);
        }
        let record = (kept.by.entry(uid).or_default())
            .entry(session.clone())
            .or_default();
        let mut freed = 0;
        if record.blocks.len() >= KEPT
            && let Some((_, old)) = record.blocks.pop_front()
        {
            freed = cost(&old);
        }
        record.blocks.push_back((now, tool.into()));
        record.bytes = record.bytes + added - freed;
        kept.bytes = kept.bytes + added - freed;
        // Past the bytes of all, the stalest others go first (one record is far less).
        while kept.bytes > BYTES && kept.forget_stalest(Some((uid, &session))) {}
    }

    /// The tools blocked for this caller recently, oldest first, each once.
    pub fn recent(&self, peer: &Peer, session: Option<&str>) -> Vec<String> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let session: Option<Box<str>> = session.map(Box::from);
        let record = kept.by.get(&peer.uid).and_then(|s| s.get(&session));
        let mut out: Vec<String> = Vec::new();
        for (t, tool) in record.map(|r| &r.blocks).into_iter().flatten() {
            if now - *t < RECENT && !out.iter().any(|o| **o == **tool) {
                out.push(tool.to_string());
            }
        }
        out
    }

    /// The records kept and their bytes.
    pub fn held(&self) -> (usize, usize) {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        (kept.records, kept.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32) -> Peer {
        Peer {
            pid: 1,
            uid,
            gid: uid,
            groups: Vec::new(),
            cgroup: String::new(),
        }
    }

    #[test]
    fn one_uids_new_sessions_push_out_only_its_own() {
        let v = Violations::default();
        let (hostile, other) = (peer(1000), peer(1001));
        v.blocked(&other, Some("work"), "deploy");
        let long = "s".repeat(256);
        for i in 0..10_000 {
            v.blocked(&hostile, Some(&format!("{i}{long}")), &"t".repeat(256));
        }
        let (records, bytes) = v.held();
        assert!(records <= SESSIONS_PER_UID + 1, "{records} records");
        assert!(bytes <= SESSIONS_PER_UID * 2 * 300 + 100, "{bytes} bytes");
        assert_eq!(v.recent(&other, Some("work")), ["deploy"]);
        // The hostile uid's latest session is still known to its judges.
        let last = format!("9999{long}");
        assert_eq!(v.recent(&hostile, Some(&last)).len(), 1);
    }

    #[test]
    fn a_callers_blocks_are_kept_to_the_last_few_and_counted_once() {
        let v = Violations::default();
        let p = peer(7);
        for i in 0..100 {
            v.blocked(&p, None, &format!("tool{}", i % 40));
        }
        let recent = v.recent(&p, None);
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent.first().map(String::as_str), Some("tool28"));
        let (records, bytes) = v.held();
        let want: usize = (68..100).map(|i| cost(&format!("tool{}", i % 40))).sum();
        assert_eq!((records, bytes), (1, want));
    }

    #[test]
    fn many_uids_stay_within_the_callers_and_bytes_of_all() {
        let v = Violations::default();
        let tool = "t".repeat(256);
        let session = |s: usize| format!("{s:0>256}");
        // More records than kept: the stalest go.
        for uid in 0..70u32 {
            for s in 0..SESSIONS_PER_UID {
                v.blocked(&peer(uid), Some(&session(s)), &tool);
            }
        }
        let (records, _) = v.held();
        assert_eq!(records, CALLERS);
        // More bytes than kept: full records of a few uids.
        for uid in 100..108u32 {
            for s in 0..SESSIONS_PER_UID {
                for t in 0..KEPT {
                    v.blocked(&peer(uid), Some(&session(s)), &format!("{t}{tool}"));
                }
            }
        }
        let (records, bytes) = v.held();
        assert!(records <= CALLERS, "{records}");
        assert!(bytes <= BYTES && bytes > BYTES - 20_000, "{bytes}");
        // The latest is whole.
        let last = v.recent(&peer(107), Some(&session(SESSIONS_PER_UID - 1)));
        assert_eq!(last.len(), KEPT);
    }
}
