//! Each caller's share of the log. A caller decides how much its calls' rows hold (a row holds
//! its tool's name and up to [`super::bound::ARGS_IN_ROW`] of its arguments), and the log's
//! file system is shared with everyone else's rows, and maybe with the host. So:
//!
//! - the bytes of the rows written for each uid's calls and checks (their `decision`, `held`,
//!   `finished` and `checked` rows) are counted in a bucket that empties at `--audit-bytes-per-uid` bytes a
//!   minute; a uid whose bucket holds more than that is refused new calls until it has emptied
//!   below it, told how long that takes;
//! - on a full file system the reserve ([`super::reserve`]) is split: a caller that is neither
//!   root nor an admin is refused new calls as soon as the reserve is short, root and admins
//!   while at least half of it is left, and the rows of the calls already running have the rest.
//!
//! Root and admins are never refused for their share: the log's room is theirs to keep, and an
//! operator's call must go through when the callers have filled what they may.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::AuditLog;

/// What a uid's bucket may hold by default: a minute's rows.
pub const BYTES_PER_UID: u64 = 16 << 20;

/// Buckets kept before the empty ones are forgotten.
const KEPT: usize = 1024;

/// Why the log admits no new call of a caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "not admitted: the audit log's file system is full, and the room kept for running calls' \
         rows is in use; guard admits calls again once it can reserve that room"
    )]
    Full,
    #[error(
        "not admitted: the audit log's file system is full; the room left is kept for root's and \
         admins' calls and for the rows of running calls"
    )]
    KeptForAdmins,
    #[error(
        "not admitted: the calls of uid {uid} wrote more audit rows lately than its share \
         ({per_minute} bytes a minute, guardd --audit-bytes-per-uid); try again in {} s",
        retry.as_secs().max(1)
    )]
    Share {
        uid: u32,
        per_minute: u64,
        retry: Duration,
    },
}

impl Refusal {
    /// How long the caller should wait before it tries again, when that is known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Refusal::Share { retry, .. } => Some(*retry),
            Refusal::Full | Refusal::KeptForAdmins => None,
        }
    }
}

/// The bytes of rows each uid's calls wrote, leaking away at the share's rate.
#[derive(Debug)]
pub struct Shares {
    /// Bytes a minute; 0: no limit.
    per_minute: u64,
    by: Mutex<HashMap<u32, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    bytes: f64,
    at: Instant,
}

impl Bucket {
    /// What is left of it at `now`, at `rate` bytes a second.
    fn at(self, now: Instant, rate: f64) -> f64 {
        let leaked = now.saturating_duration_since(self.at).as_secs_f64() * rate;
        (self.bytes - leaked).max(0.0)
    }
}

impl Shares {
    /// Shares of `per_minute` bytes a minute (0: unlimited).
    pub fn new(per_minute: u64) -> Self {
        Self {
            per_minute,
            by: Mutex::new(HashMap::new()),
        }
    }

    fn rate(&self) -> f64 {
        self.per_minute as f64 / 60.0
    }

    /// Counts `bytes` of rows written for `uid`'s calls.
    pub fn wrote(&self, uid: u32, bytes: usize) {
        if self.per_minute == 0 {
            return;
        }
        let (now, rate) = (Instant::now(), self.rate());
        let mut by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        if by.len() >= KEPT && !by.contains_key(&uid) {
            by.retain(|_, b| b.at(now, rate) > 0.0);
        }
        let bucket = by.entry(uid).or_insert(Bucket {
            bytes: 0.0,
            at: now,
        });
        *bucket = Bucket {
            bytes: bucket.at(now, rate) + bytes as f64,
            at: now,
        };
    }

    /// Whether `uid` is past its share: how long until it is not.
    pub fn over(&self, uid: u32) -> Option<Duration> {
        if self.per_minute == 0 {
            return None;
        }
        let by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        let held = by.get(&uid)?.at(Instant::now(), self.rate());
        let past = held - self.per_minute as f64;
        (past > 0.0).then(|| Duration::from_secs_f64(past / self.rate()))
    }

    fn refusal(&self, uid: u32) -> Option<Refusal> {
        self.over(uid).map(|retry| Refusal::Share {
            uid,
            per_minute: self.per_minute,
            retry,
        })
    }
}

impl AuditLog {
    /// Whether a new call of `uid` may be admitted; `privileged`: the caller is root or an
    /// admin, whom neither its share nor the room kept for them refuses.
    pub fn admits_caller(&self, uid: u32, privileged: bool) -> Result<(), Refusal> {
        if !self.reserve.admits(privileged) {
            return Err(if !privileged && self.reserve.admits(true) {
                Refusal::KeptForAdmins
            } else {
                Refusal::Full
            });
        }
        match self.shares.refusal(uid) {
            Some(refused) if !privileged => Err(refused),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_past_its_share_waits_and_others_do_not() {
        let shares = Shares::new(60_000);
        shares.wrote(1000, 50_000);
        assert_eq!(shares.over(1000), None);
        shares.wrote(1000, 20_000);
        let wait = shares.over(1000).expect("over its share");
        // About 10 kB past, at a kilobyte a second.
        assert!(
            wait > Duration::from_secs(8) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        assert_eq!(shares.over(1001), None);
        let refused = shares.refusal(1000).expect("refused").to_string();
        assert!(
            refused.contains("uid 1000") && refused.contains("try again in"),
            "{refused}"
        );
        // No limit: nothing is counted.
        let unlimited = Shares::new(0);
        unlimited.wrote(1000, usize::MAX / 2);
        assert_eq!(unlimited.over(1000), None);
    }
}
