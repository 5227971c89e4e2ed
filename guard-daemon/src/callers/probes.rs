//! Callers whose arguments held a secret's value. Each such call tells its caller one thing of
//! the value, that something in it matched (the call is held, where one without would run), so
//! a caller that does it [`LIMIT`] times within [`WINDOW`] has every call and check refused
//! until [`WINDOW`] has passed since the last. A match needs half the value (`secrets::mask`),
//! so matching is not how a caller learns a value; but a caller that matches holds half of one,
//! or is trying to, and the operator hears of each (a warning in the journal), and each refusal
//! is a decision row with `check_name = "probes"`.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{
    call::decision::{Decision, Stage},
    policy::Verdict,
};

/// Calls holding a secret's value that bar their caller.
pub const LIMIT: usize = 3;
/// How long one counts, and how long a barred caller stays barred after its last.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Callers remembered at once: beyond it, those whose last hit is older than [`WINDOW`] go.
const CALLERS: usize = 4096;

/// The `check_name` of a call refused because its caller is barred.
pub const CHECK: &str = "probes";

/// Recent hits by caller uid, at most [`LIMIT`] each.
#[derive(Debug, Default)]
pub struct Probes {
    by_uid: Mutex<HashMap<u32, VecDeque<Instant>>>,
}

impl Probes {
    /// Applies what is known of `uid` to its call's `verdict`: refused while `uid` is barred;
    /// else, when the verdict found a secret's value, counted (and `uid` barred at the limit).
    pub fn rule(&self, uid: u32, verdict: &mut Verdict) {
        let mut by = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if let Some(left) = barred(by.get(&uid), now) {
            verdict.row.decision = Decision::Block;
            verdict.row.check_name = CHECK.into();
            verdict.row.reason = format!(
                "uid {uid}'s arguments held a secret's value {LIMIT} times within {} minutes: \
                 its calls are refused for {} more seconds",
                WINDOW.as_secs() / 60,
                left.as_secs().max(1)
            );
            verdict.plan = None;
            return;
        }
        if verdict.row.metadata.stage != Some(Stage::Secret) {
            return;
        }
        if by.len() >= CALLERS {
            by.retain(|_, q| q.back().is_some_and(|t| now - *t < WINDOW));
        }
        let hits = by.entry(uid).or_default();
        hits.retain(|t| now - *t < WINDOW);
        if hits.len() >= LIMIT {
            hits.pop_front();
        }
        hits.push_back(now);
        tracing::warn!(
            uid,
            "uid {uid}'s arguments held half a secret's value or more ({} of {LIMIT} within {} \
             minutes before its calls are refused)",
            hits.len(),
            WINDOW.as_secs() / 60
        );
        if hits.len() >= LIMIT {
            tracing::warn!(
                uid,
                "uid {uid}'s arguments held a secret's value {LIMIT} times within {} minutes: \
                 its calls are refused for the next {} minutes (probing for the value?)",
                WINDOW.as_secs() / 60,
                WINDOW.as_secs() / 60
            );
        }
    }

    /// The callers barred now, each with the seconds left.
    pub fn barred(&self) -> Vec<(u32, u64)> {
        let by = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut out: Vec<(u32, u64)> = by
            .iter()
            .filter_map(|(&uid, q)| barred(Some(q), now).map(|d| (uid, d.as_secs().max(1))))
            .collect();
        out.sort_unstable();
        out
    }
}

/// How long a caller with these hits stays barred, if it is.
fn barred(hits: Option<&VecDeque<Instant>>, now: Instant) -> Option<Duration> {
    let hits = hits?;
    let recent = hits.iter().filter(|t| now - **t < WINDOW).count();
    let last = hits.back()?;
    (recent >= LIMIT).then(|| WINDOW.saturating_sub(now - *last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::decision::{DecisionRow, RowMetadata};

    fn verdict(stage: Stage) -> Verdict {
        Verdict {
            row: DecisionRow {
                check_name: "x".into(),
                decision: Decision::Quarantine,
                reason: String::new(),
                metadata: RowMetadata {
                    stage: Some(stage),
                    ..Default::default()
                },
            },
            plan: None,
            redacted_args: serde_json::Value::Null,
        }
    }

    #[test]
    fn a_caller_is_barred_at_the_limit_and_only_that_caller() {
        let probes = Probes::default();
        for _ in 0..LIMIT {
            let mut v = verdict(Stage::Secret);
            probes.rule(7, &mut v);
            assert_eq!(v.row.decision, Decision::Quarantine);
        }
        // Any call now, whatever it holds.
        let mut v = verdict(Stage::Allow);
        probes.rule(7, &mut v);
        assert_eq!(
            (v.row.decision, v.row.check_name.as_str()),
            (Decision::Block, CHECK)
        );
        let mut other = verdict(Stage::Allow);
        probes.rule(8, &mut other);
        assert_eq!(other.row.decision, Decision::Quarantine);
        assert_eq!(probes.barred().iter().map(|b| b.0).collect::<Vec<_>>(), [7]);
    }

    #[test]
    fn calls_without_a_secret_count_nothing() {
        let probes = Probes::default();
        for _ in 0..10 * LIMIT {
            probes.rule(7, &mut verdict(Stage::Rules));
        }
        assert!(probes.barred().is_empty());
    }
}
