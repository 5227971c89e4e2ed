//! The tools a caller had blocked recently, for the judges' `policy_violations`: a judge can
//! tell an agent that was refused a tool from one that never tried it.

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
/// Callers kept at once; the oldest are forgotten first.
const CALLERS: usize = 4096;

/// Recent blocks by caller: its uid, and its session when it names one.
#[derive(Debug, Default)]
pub struct Violations {
    by: Mutex<HashMap<String, VecDeque<(Instant, String)>>>,
}

/// A session's name is the caller's to choose: under the uid, so that one uid naming another's
/// session cannot fill that session's record (and sway the judges of its calls).
fn key(peer: &Peer, session: Option<&str>) -> String {
    match session {
        Some(s) => format!("uid:{}:session:{s}", peer.uid),
        None => format!("uid:{}", peer.uid),
    }
}

impl Violations {
    /// Records that `tool` was blocked for this caller.
    pub fn blocked(&self, peer: &Peer, session: Option<&str>, tool: &str) {
        let mut by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        if by.len() >= CALLERS {
            let now = Instant::now();
            by.retain(|_, q| q.back().is_some_and(|(t, _)| now - *t < RECENT));
        }
        let q = by.entry(key(peer, session)).or_default();
        if q.len() >= KEPT {
            q.pop_front();
        }
        q.push_back((Instant::now(), tool.to_owned()));
    }

    /// The tools blocked for this caller recently, oldest first, each once.
    pub fn recent(&self, peer: &Peer, session: Option<&str>) -> Vec<String> {
        let by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut out: Vec<String> = Vec::new();
        for (t, tool) in by.get(&key(peer, session)).into_iter().flatten() {
            if now - *t < RECENT && !out.contains(tool) {
                out.push(tool.clone());
            }
        }
        out
    }
}
