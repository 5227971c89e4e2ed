//! How many calls may be held, and whose: one uid holds at most `per_uid` calls, the callers
//! that are neither root nor an admin together at most `capacity` less a reserve, and every
//! call at most [`MAX_RECORD_BYTES`] on disk. So one local client of the socket group cannot
//! take every held slot from the others (issue 49: it filled them with `no_wait` calls, and
//! nobody else's call could wait for an answer), nor the operator's last ones, nor fill root's
//! disk with records: the store holds at most `capacity` records of a bounded size.
//!
//! Root and admins are bounded by the total alone: a caller the operator trusts to answer held
//! calls is not refused because of other uids' calls while the reserve lasts.

use super::ApprovalError;

/// A uid's held calls, unless guardd is told otherwise (`--max-held-per-uid`).
pub const DEFAULT_PER_UID: usize = 16;

/// The largest held record, as the store writes it: the arguments as sent, as shown, the plan
/// and a held input (twice its bytes, in hex). A call more is refused, not held.
pub const MAX_RECORD_BYTES: usize = 256 << 10;

/// The bounds of held calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Held calls of all uids together (`--max-queue`).
    pub capacity: usize,
    /// Held calls of one uid that is not root or an admin (`--max-held-per-uid`).
    pub per_uid: usize,
}

impl Bounds {
    /// The slots only root and admins may take: a uid's share, and at most half the total
    /// (so that a small `capacity` is not all reserve).
    pub fn reserve(&self) -> usize {
        self.per_uid.min(self.capacity / 2)
    }

    /// Whether a call of `uid` may be held beside `held`, the uids of the calls held now;
    /// `privileged` is root or an admin of the policy.
    pub fn admit(&self, held: &[u32], uid: u32, privileged: bool) -> Result<(), ApprovalError> {
        if held.len() >= self.capacity {
            return Err(ApprovalError::Full(self.capacity));
        }
        if privileged {
            return Ok(());
        }
        let own = held.iter().filter(|&&u| u == uid).count();
        if own >= self.per_uid {
            return Err(ApprovalError::PerUid {
                uid,
                bound: self.per_uid,
            });
        }
        if held.len() >= self.capacity - self.reserve() {
            return Err(ApprovalError::Reserved {
                capacity: self.capacity,
                reserve: self.reserve(),
            });
        }
        Ok(())
    }

    /// Whether a record of `size` bytes may be held.
    pub fn fits(size: usize) -> Result<(), ApprovalError> {
        if size > MAX_RECORD_BYTES {
            return Err(ApprovalError::TooLarge {
                size,
                bound: MAX_RECORD_BYTES,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_holds_its_share_and_root_and_admins_keep_the_reserve() {
        let b = Bounds {
            capacity: 8,
            per_uid: 2,
        };
        assert_eq!(b.reserve(), 2);
        assert_eq!(
            b.admit(&[1000, 1000], 1000, false),
            Err(ApprovalError::PerUid {
                uid: 1000,
                bound: 2
            })
        );
        // Another uid's calls do not count against this one's share.
        assert_eq!(b.admit(&[1000, 1000], 1001, false), Ok(()));
        // Six held by three uids: the last two slots are the reserve.
        let six = [1, 1, 2, 2, 3, 3];
        assert_eq!(
            b.admit(&six, 4, false),
            Err(ApprovalError::Reserved {
                capacity: 8,
                reserve: 2
            })
        );
        assert_eq!(b.admit(&six, 0, true), Ok(()));
        // Root past any one uid's share; then only the total stops it.
        assert_eq!(b.admit(&[0, 0, 0, 0, 0, 0, 0], 0, true), Ok(()));
        assert_eq!(
            b.admit(&[0; 8], 0, true),
            Err(ApprovalError::Full(8)),
            "the total holds for root too"
        );
    }

    #[test]
    fn a_small_capacity_is_not_all_reserve_and_a_large_record_is_refused() {
        let b = Bounds {
            capacity: 1,
            per_uid: 16,
        };
        assert_eq!(b.reserve(), 0);
        assert_eq!(b.admit(&[], 1000, false), Ok(()));
        assert_eq!(Bounds::fits(MAX_RECORD_BYTES), Ok(()));
        assert!(matches!(
            Bounds::fits(MAX_RECORD_BYTES + 1),
            Err(ApprovalError::TooLarge { .. })
        ));
    }
}
