//! Why recent calls did not run as asked, for their own callers (`guardctl why ID`): the agent
//! hears a generic reply (a reason would teach a model how to massage its call past the
//! policy), the developer whose uid made the call may ask guardd for the reason, without read
//! access to the audit log. Bounded: the most recent calls only.

use std::{collections::VecDeque, sync::Mutex};

use crate::{
    call::decision::{Decision, DecisionRow, Stage},
    protocol::reply::Why,
};

/// Calls remembered; the oldest go first.
const KEPT: usize = 1024;
/// The longest reason kept (a reason quotes what the caller sent).
const REASON_BYTES: usize = 4096;

/// A recent call's decision, and the uid that made it.
#[derive(Debug)]
struct Kept {
    uid: u32,
    why: Why,
}

/// The decisions of recent calls that did not simply run.
#[derive(Debug, Default)]
pub struct Reasons {
    kept: Mutex<VecDeque<Kept>>,
}

impl Reasons {
    /// Remembers call `call_id` of `tool`, made by `uid`, decided as `row` (an allowed call is
    /// not kept: it ran, and its receipt says what it did).
    pub fn keep(&self, call_id: &str, tool: &str, uid: u32, row: &DecisionRow) {
        if row.decision == Decision::Allow {
            return;
        }
        // What matched a secret's value, and a bar for probing, are the admin's: told to the
        // caller, they would tell it which guess matched.
        let admins_only = row.metadata.stage == Some(Stage::Secret)
            || row.check_name == crate::callers::probes::CHECK;
        let why = Why {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            decision: row.decision,
            check: if admins_only {
                String::new()
            } else {
                row.check_name.clone()
            },
            reason: if admins_only {
                "held for an admin, who has its reason (guardctl show ID)".to_owned()
            } else {
                row.reason.clone()
            },
        };
        self.push(uid, why);
    }

    /// Remembers that judge `judge` rejected call `call_id` of `tool`, made by `uid`, and why
    /// (the policy allowed it; the judge blocked it after that decision was kept, if at all).
    pub fn judged(&self, call_id: &str, tool: &str, uid: u32, judge: &str, reason: String) {
        let why = Why {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            decision: Decision::Block,
            check: format!("judge:{judge}"),
            reason,
        };
        self.push(uid, why);
    }

    /// Keeps `why` for `uid`, its reason bounded, the oldest call going when full.
    fn push(&self, uid: u32, mut why: Why) {
        if why.reason.len() > REASON_BYTES {
            let mut end = REASON_BYTES;
            while !why.reason.is_char_boundary(end) {
                end -= 1;
            }
            why.reason.truncate(end);
            why.reason.push('…');
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(Kept { uid, why });
    }

    /// Why call `call_id` did not run as asked, for `uid` (`admin`: any call's); `None` when it
    /// is not among the recent ones, or is another uid's.
    pub fn of(&self, call_id: &str, uid: u32, admin: bool) -> Option<Why> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .rev()
            .find(|k| k.why.call_id == call_id && (admin || k.uid == uid))
            .map(|k| k.why.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::decision::RowMetadata;

    fn row(decision: Decision, check: &str, stage: Stage) -> DecisionRow {
        DecisionRow {
            check_name: check.into(),
            decision,
            reason: format!("{check} said no"),
            metadata: RowMetadata {
                stage: Some(stage),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_caller_reads_its_own_calls_reasons_and_no_secrets_match() {
        let r = Reasons::default();
        r.keep("c1", "t", 7, &row(Decision::Block, "rule:x", Stage::Rules));
        r.keep(
            "c2",
            "t",
            7,
            &row(Decision::Quarantine, "secret", Stage::Secret),
        );
        r.keep("c3", "t", 7, &row(Decision::Allow, "t", Stage::Allow));
        assert_eq!(
            r.of("c1", 7, false).map(|w| w.reason),
            Some("rule:x said no".into())
        );
        assert_eq!(r.of("c1", 8, false), None, "another uid's");
        assert!(r.of("c1", 8, true).is_some(), "an admin's");
        let secret = r.of("c2", 7, false).expect("kept");
        assert!(
            !secret.reason.contains("secret") && secret.check.is_empty(),
            "{secret:?}"
        );
        assert_eq!(r.of("c3", 7, false), None, "it ran");
        // Allowed, then rejected by a judge: the judge's reason is its caller's to read.
        r.judged("c3", "t", 7, "safety", "deletes the repository".into());
        let judged = r.of("c3", 7, false).expect("kept");
        assert_eq!(
            (judged.check.as_str(), judged.reason.as_str()),
            ("judge:safety", "deletes the repository")
        );
        assert_eq!(judged.decision, Decision::Block);
    }
}
