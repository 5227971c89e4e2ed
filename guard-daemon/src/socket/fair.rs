//! Fair admission of connections. The peer is known (SO_PEERCRED) before its connection costs
//! anything shared, and each uid's connections are counted on their own, so that one uid that
//! opens thousands of connections, or follows streams and stays silent, stops no one but itself.
//!
//! The contract, with [`Limits`]:
//! - a uid holds at most `per_uid` connections at once; the next is refused (`busy: ...`);
//! - each uid's first `reserved` connections are its own, admitted whatever the other uids
//!   hold: an admin's `guardctl status` and another caller's calls always find a place;
//! - a uid's connections beyond its reserve come from one pool of `shared` for all uids;
//! - a peer that is neither a client nor an admin gets its reserve only (room to be told "not
//!   permitted", nothing of the pool);
//! - a uid follows at most `followers` streams at once (`tools` with `follow`, `subscribe`),
//!   which have no idle timeout: this bounds what one uid can hold for good.
//!
//! A [`Slot`] or a [`Follower`] gives its place back when dropped, however its connection ends.
//! At most `shared` + `reserved` × (uids connected) connections are open: the uids that can
//! connect at all are the socket's group and root (mode 0660).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, atomic::AtomicUsize},
};

use crate::protocol::{conn::Budget, reply::Counts};

/// How many connections guardd admits, and to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections beyond each uid's reserve, all uids together (`--max-connections`).
    pub shared: usize,
    /// Connections of one uid at once (`--max-connections-per-uid`).
    pub per_uid: usize,
    /// Each uid's own connections, admitted whatever the others hold
    /// (`--reserved-connections-per-uid`).
    pub reserved: usize,
    /// Streams one uid follows at once (`--max-followers-per-uid`).
    pub followers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            shared: 4096,
            per_uid: 256,
            reserved: 8,
            followers: 8,
        }
    }
}

impl Limits {
    /// Settings that contradict each other, named as guardd's flags name them.
    pub fn check(&self) -> Result<(), String> {
        if self.per_uid == 0 {
            return Err("max_connections_per_uid must be at least 1".into());
        }
        if self.reserved > self.per_uid {
            return Err(format!(
                "reserved_connections_per_uid ({}) is more than max_connections_per_uid ({})",
                self.reserved, self.per_uid
            ));
        }
        if self.followers > self.per_uid {
            return Err(format!(
                "max_followers_per_uid ({}) is more than max_connections_per_uid ({})",
                self.followers, self.per_uid
            ));
        }
        Ok(())
    }
}

/// Why a connection or a stream was refused; each says `busy` first, which clients read as
/// "try again later" (guard-exec exits 75).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "busy: uid {uid} has {max} connections open to guardd (max_connections_per_uid); \
         close some, or try again later"
    )]
    PerUid { uid: u32, max: usize },
    #[error(
        "busy: guardd's {max} shared connections are in use and uid {uid} holds its own \
         {reserved} (max_connections, reserved_connections_per_uid); try again later"
    )]
    Full {
        uid: u32,
        max: usize,
        reserved: usize,
    },
    #[error(
        "busy: uid {uid} already follows {max} streams (max_followers_per_uid); close one first"
    )]
    Followers { uid: u32, max: usize },
}

#[derive(Default)]
struct Uid {
    open: usize,
    followers: usize,
    /// Bytes of unfinished requests its connections hold ([`Budget`](crate::protocol::conn::Budget)).
    buffered: Arc<AtomicUsize>,
}

#[derive(Default)]
struct State {
    /// Σ over uids of the connections beyond their reserve.
    shared: usize,
    uids: HashMap<u32, Uid>,
}

/// The connections of one guardd, counted per uid; see the module's doc.
pub struct Connections {
    limits: Limits,
    state: Mutex<State>,
}

/// An admitted connection's place; given back on drop.
#[must_use = "the place is given back when this is dropped"]
pub struct Slot {
    conns: Arc<Connections>,
    uid: u32,
    buffered: Arc<AtomicUsize>,
}

/// A followed stream's place; given back on drop.
#[must_use = "the place is given back when this is dropped"]
pub struct Follower {
    conns: Arc<Connections>,
    uid: u32,
}

impl Connections {
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// Admits a connection of `uid`, which the access rules let make some request
    /// (`permitted`) or not.
    pub fn admit(self: &Arc<Self>, uid: u32, permitted: bool) -> Result<Slot, Refused> {
        let l = self.limits;
        let mut state = self.lock();
        let State { shared, uids } = &mut *state;
        let open = uids.get(&uid).map_or(0, |u| u.open);
        let cap = if permitted { l.per_uid } else { l.reserved };
        if open >= cap {
            return Err(Refused::PerUid { uid, max: cap });
        }
        if open >= l.reserved {
            if *shared >= l.shared {
                return Err(Refused::Full {
                    uid,
                    max: l.shared,
                    reserved: l.reserved,
                });
            }
            *shared += 1;
        }
        let entry = uids.entry(uid).or_default();
        entry.open += 1;
        Ok(Slot {
            conns: Arc::clone(self),
            uid,
            buffered: Arc::clone(&entry.buffered),
        })
    }

    /// Lets the connection of `slot` follow a stream, within its uid's share.
    pub fn follow(self: &Arc<Self>, slot: &Slot) -> Result<Follower, Refused> {
        let uid = slot.uid;
        let mut state = self.lock();
        let u = state.uids.entry(uid).or_default();
        if u.followers >= self.limits.followers {
            return Err(Refused::Followers {
                uid,
                max: self.limits.followers,
            });
        }
        u.followers += 1;
        Ok(Follower {
            conns: Arc::clone(self),
            uid,
        })
    }

    /// What is held now.
    pub fn counts(&self) -> Counts {
        let state = self.lock();
        Counts {
            open: state.uids.values().map(|u| u.open).sum(),
            shared: state.shared,
            followers: state.uids.values().map(|u| u.followers).sum(),
            uids: state.uids.values().filter(|u| u.open > 0).count(),
        }
    }

    fn release(&self, uid: u32, follower: bool) {
        let reserved = self.limits.reserved;
        let mut state = self.lock();
        let State { shared, uids } = &mut *state;
        let Some(u) = uids.get_mut(&uid) else {
            return;
        };
        if follower {
            u.followers = u.followers.saturating_sub(1);
        } else {
            // The connections past the reserve are the pool's, whichever of them ends.
            if u.open > reserved {
                *shared = shared.saturating_sub(1);
            }
            u.open = u.open.saturating_sub(1);
        }
        if u.open == 0 && u.followers == 0 {
            uids.remove(&uid);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is made whole under the lock: a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Slot {
    /// The uid the connection belongs to.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The share of unfinished requests the connection counts against, its uid's.
    pub fn budget(&self) -> Budget {
        Budget::shared(Arc::clone(&self.buffered))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.release(self.uid, false);
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.conns.release(self.uid, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::conn::BUFFERED_PER_UID;

    fn limits(shared: usize, per_uid: usize, reserved: usize, followers: usize) -> Limits {
        Limits {
            shared,
            per_uid,
            reserved,
            followers,
        }
    }

    #[test]
    fn one_uid_flooding_leaves_every_other_uid_its_reserve() {
        let conns = Connections::new(limits(16, 64, 4, 2));
        // uid 1000 floods: its reserve, then the whole pool, then nothing more.
        let flood: Vec<Slot> = (0..1000)
            .map_while(|_| conns.admit(1000, true).ok())
            .collect();
        assert_eq!(flood.len(), 4 + 16);
        assert_eq!(
            conns.admit(1000, true).err(),
            Some(Refused::Full {
                uid: 1000,
                max: 16,
                reserved: 4
            })
        );
        // Another caller and root still have theirs, and only theirs.
        let other: Vec<Slot> = (0..4)
            .map(|_| conns.admit(1001, true).expect("its reserve"))
            .collect();
        assert!(conns.admit(1001, true).is_err());
        let root = conns.admit(0, true).expect("an admin's reserve");
        let counts = conns.counts();
        assert_eq!((counts.open, counts.shared, counts.uids), (25, 16, 3));
        // The flood ends: the pool is everyone's again.
        drop(flood);
        assert!(conns.admit(1001, true).is_ok());
        drop((other, root));
        assert_eq!(conns.counts(), Counts::default());
    }

    #[test]
    fn a_uid_has_its_cap_whatever_the_pool_and_strangers_their_reserve_only() {
        let conns = Connections::new(limits(100, 6, 2, 1));
        let mine: Vec<Slot> = (0..6).map(|_| conns.admit(7, true).expect("ok")).collect();
        assert_eq!(
            conns.admit(7, true).err(),
            Some(Refused::PerUid { uid: 7, max: 6 })
        );
        assert_eq!(conns.counts().shared, 4);
        // Neither a client nor an admin: room to hear "not permitted", nothing of the pool.
        let stranger: Vec<Slot> = (0..2).map(|_| conns.admit(9, false).expect("ok")).collect();
        assert!(conns.admit(9, false).is_err());
        assert_eq!(conns.counts().shared, 4);
        // Whichever connection ends, the count past the reserve follows.
        drop(mine);
        drop(stranger);
        assert_eq!(conns.counts(), Counts::default());
    }

    #[test]
    fn followers_are_bounded_per_uid_and_given_back() {
        let conns = Connections::new(limits(100, 10, 2, 2));
        let slots: Vec<Slot> = (0..3).map(|_| conns.admit(5, true).expect("ok")).collect();
        let f1 = conns.follow(&slots[0]).expect("first");
        let _f2 = conns.follow(&slots[1]).expect("second");
        assert_eq!(
            conns.follow(&slots[2]).err(),
            Some(Refused::Followers { uid: 5, max: 2 })
        );
        let other = conns.admit(6, true).expect("ok");
        assert!(conns.follow(&other).is_ok(), "another uid follows still");
        drop(f1);
        assert!(conns.follow(&slots[2]).is_ok());
        assert_eq!(conns.counts().followers, 1);
    }

    #[test]
    fn a_uid_s_connections_share_one_budget_of_unfinished_bytes() {
        let conns = Connections::new(limits(100, 10, 2, 2));
        let (a, b) = (
            conns.admit(5, true).expect("a"),
            conns.admit(5, true).expect("b"),
        );
        let other = conns.admit(6, true).expect("other");
        assert!(a.budget().take(BUFFERED_PER_UID - 10));
        assert!(!b.budget().take(11), "past the uid's share");
        assert!(b.budget().take(10));
        assert!(
            other.budget().take(BUFFERED_PER_UID),
            "another uid's is its own"
        );
        a.budget().give(BUFFERED_PER_UID);
        assert!(b.budget().take(BUFFERED_PER_UID - 10));
    }

    #[test]
    fn contradictory_settings_are_named() {
        assert!(Limits::default().check().is_ok());
        let e = limits(1, 4, 8, 1).check().expect_err("reserve over cap");
        assert!(e.contains("reserved_connections_per_uid"), "{e}");
        let e = limits(1, 4, 1, 9).check().expect_err("followers over cap");
        assert!(e.contains("max_followers_per_uid"), "{e}");
        assert!(limits(1, 0, 0, 0).check().is_err());
    }
}
