//! The rows guardd writes, typed once for guardd to write and for guardctl (and any reader of the
//! log) to read. The log adds `seq`, `ts`, `prev` and `hash` to each (see [`super::chain`]);
//! [`Record`] is a row read back with those.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    bus::What,
    call::{
        decision::{Decision, DecisionRow},
        peer::Peer,
        stages::Stages,
    },
    receipt::Receipt,
    sandbox::{Applied, Outcome},
};

/// One audit row, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Row {
    /// The policy's decision on a call, written before anything else happens to it.
    Decision {
        call_id: String,
        peer: Peer,
        tool: String,
        /// Redacted as the policy's detectors say.
        args: Value,
        decision: Box<DecisionRow>,
        /// Whether the kernel layers held the call (false only with `--allow-unenforced`).
        enforced: bool,
        /// The version of the policy that decided it (`sha256:` of its files); absent in rows
        /// written before guardd recorded it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
        /// The model's message and history the call came with, redacted as its arguments are
        /// (`protocol::context`); absent when it came with none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conversation: Option<Value>,
    },
    /// The policy's decision on a call a caller asked about (`check`) without running it: what
    /// a hook then lets its agent do itself, or a probe.
    Checked {
        peer: Peer,
        tool: String,
        /// Redacted as the policy's detectors say.
        args: Value,
        decision: Box<DecisionRow>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
    },
    /// An answer to a held or escalated call: an admin's (`by`), an approver's (`approver`),
    /// or nobody's (`by` and `approver` none: nobody answered in time, or the caller left).
    Approval {
        call_id: String,
        tool: String,
        approved: bool,
        by: Option<u32>,
        reason: Option<String>,
        /// The digest of the call answered (held calls).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<String>,
        /// The approver of the policy that answered: `auto`, `judge:NAME`, `command`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approver: Option<String>,
        /// What the approver said: approve, modify, reject, terminate, escalate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<String>,
        /// The arguments an approver's `modify` put in place (redacted), decided again next.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        modified_args: Option<Value>,
    },
    /// A judge's verdict on a call, before it ran.
    Judged(Box<Judged>),
    /// A call held for an admin (`guardctl approve`), as its `held` event told it; absent in
    /// logs written before guardd recorded it.
    Held {
        call_id: String,
        tool: String,
        decision: Decision,
        /// Why, as the decision row says it.
        reason: String,
        /// The caller's uid.
        uid: u32,
        /// How long it waits for an answer.
        timeout_s: u64,
        /// The digest an approval binds to.
        digest: String,
    },
    /// The notifier of a held call ran (`error`: it failed; the call stays held).
    Notified {
        call_id: String,
        tool: String,
        error: Option<String>,
    },
    /// A session an approver terminated (`terminated`), or an admin cleared (`by`).
    Session {
        session: String,
        terminated: bool,
        call_id: Option<String>,
        by: Option<u32>,
    },
    /// What an approved call did, once it ended.
    Finished(Box<Finished>),
    /// An attempt to put the policy file in force (`error`: the one in force stayed).
    Reload {
        policy: PathBuf,
        by: Option<u32>,
        tools: Option<usize>,
        error: Option<String>,
        /// The version put in force (none when the reload failed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
    },
    /// Rotated files removed under `audit_keep_rotated`, vouching for the rows they held.
    Pruned {
        through_seq: u64,
        through_hash: String,
        files: Vec<String>,
    },
    /// A kind this build does not know (a reader of a newer log).
    #[serde(other)]
    Other,
}

/// The `judged` row of a call: the judge's answer, and what guard made of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub call_id: String,
    pub tool: String,
    pub judge: String,
    pub allowed: bool,
    /// Why the call was rejected (a low score, or the judge failed: timeout, exit, output).
    pub reason: Option<String>,
    /// The judge's answer (its GradientResult), when it gave one that reads.
    pub answer: Option<Value>,
    /// The judge's exit code (128+N for a signal).
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
}

/// The `finished` row of a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub call_id: String,
    pub tool: String,
    /// The confinement applied; none when the launch failed before it.
    pub sandbox: Option<Applied>,
    /// The receipt: what the kernel saw the call do.
    pub effects_observed: Option<Receipt>,
    pub exit: Option<Outcome>,
    /// Why an approved call could not be carried through.
    pub error: Option<String>,
    pub duration_ms: f64,
    /// Microseconds per stage of the call's way through guardd.
    pub timings_us: Stages,
    pub enforced: bool,
    /// `shadow` for a call in shadow (`enforce = "shadow"`): what it did outside its effects
    /// was let through, and its receipt's divergences say what enforcing would have done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<crate::call::plan::Enforce>,
    /// Its start, as its `launch` event told it; none when it did not start (and in rows
    /// written before guardd recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// Why guardd killed it other than for a divergence (its timeout ran out, its caller went
    /// away), as its `kill` event told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<String>,
    /// The call's end was never recorded: the guardd that ran it died, and the next one wrote
    /// this row for it at its start. What it did is not known; only this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// What the next guardd knows of a call a guardd that died left open.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    /// The processes its cgroup still had, killed at the start's sweep (0: it had none left,
    /// or guardd's own end took them); none when its cgroup was gone.
    pub processes_killed: Option<usize>,
    /// Its decision row was not among the rows read at the start (it is older): the row has
    /// only what its cgroup told.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decision_not_read: bool,
}

/// The start of an approved call: when, its first process, its program (not its arguments,
/// which may carry what the decision row redacts; only how many) and its caller's uid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// RFC 3339, UTC.
    pub ts: String,
    pub pid: u32,
    pub program: Option<String>,
    pub args: usize,
    pub uid: u32,
}

/// A row as read back from the log, with what the log added to it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Record {
    pub seq: u64,
    /// RFC 3339, UTC.
    pub ts: String,
    #[serde(flatten)]
    pub row: Row,
}

impl Launch {
    /// The start, now, of `argv` as process `pid`, for a caller of uid `uid`.
    pub fn of(argv: &[std::ffi::OsString], pid: u32, uid: u32) -> Self {
        Self {
            ts: super::ts::now(),
            pid,
            program: argv.first().map(|p| p.to_string_lossy().into_owned()),
            args: argv.len().saturating_sub(1),
            uid,
        }
    }

    /// Its `launch` event.
    pub fn event(&self) -> What {
        What::Launch {
            pid: self.pid,
            program: self.program.clone(),
            args: self.args,
            uid: self.uid,
        }
    }
}

impl Row {
    /// The call the row is about, if any.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Row::Decision { call_id, .. }
            | Row::Approval { call_id, .. }
            | Row::Notified { call_id, .. }
            | Row::Held { call_id, .. } => Some(call_id),
            Row::Finished(f) => Some(&f.call_id),
            Row::Judged(j) => Some(&j.call_id),
            Row::Checked { .. }
            | Row::Session { .. }
            | Row::Reload { .. }
            | Row::Pruned { .. }
            | Row::Other => None,
        }
    }

    /// The uid of the caller whose call the row records, when a caller's request wrote it: the
    /// share it counts in (`super::share`).
    pub fn caller(&self) -> Option<u32> {
        match self {
            Row::Decision { peer, .. } | Row::Checked { peer, .. } => Some(peer.uid),
            Row::Held { uid, .. } => Some(*uid),
            Row::Finished(f) => f.launch.as_ref().map(|l| l.uid),
            _ => None,
        }
    }

    /// The row as the JSON object the log seals, of a bounded size: arguments past
    /// [`super::bound::ARGS_IN_ROW`] (a call's, an approver's change to them, a judge's answer)
    /// are cut, and `<field>_cut` beside them says how long they were and their SHA-256.
    pub(crate) fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        let mut map = match serde_json::to_value(self)? {
            Value::Object(map) => map,
            other => {
                return Err(serde::ser::Error::custom(format!(
                    "an audit row must be a JSON object, not {other}"
                )));
            }
        };
        for field in ["args", "modified_args", "answer"] {
            let Some((held, cut)) = map.get(field).and_then(super::bound::args) else {
                continue;
            };
            map.insert(field.into(), held);
            map.insert(format!("{field}_cut"), serde_json::to_value(cut)?);
        }
        Ok(map)
    }
}

impl Record {
    /// Reads a row of the log (as [`super::read_rows`] yields it).
    pub fn from_map(map: Map<String, Value>) -> Result<Self, serde_json::Error> {
        serde_json::from_value(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_as_written_and_unknown_kinds_are_other() {
        let row = Row::Approval {
            call_id: "c1".into(),
            tool: "deploy".into(),
            approved: false,
            by: None,
            reason: Some("no admin answered".into()),
            digest: None,
            approver: None,
            outcome: None,
            modified_args: None,
        };
        let mut map = row.to_map().unwrap();
        assert_eq!(map["kind"], "approval");
        map.insert("seq".into(), 7.into());
        map.insert("ts".into(), "T".into());
        map.insert("hash".into(), "h".into());
        let record = Record::from_map(map).unwrap();
        assert_eq!((record.seq, record.row.call_id()), (7, Some("c1")));
        assert_eq!(record.row, row);
        let future = serde_json::json!({"kind": "verdict2", "seq": 8, "ts": "T", "score": 1});
        let Value::Object(future) = future else {
            unreachable!()
        };
        assert_eq!(Record::from_map(future).unwrap().row, Row::Other);
    }
}
