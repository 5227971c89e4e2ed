//! guardd's replies, typed once: guardd writes them, and guard-exec, guardctl and any client read
//! them with the same types. Each is one frame, `{"v":1,"type":..., ...}` (see [`frame`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

pub use super::status::*;
use super::{ProtocolError, VERSION};
use crate::{
    approval::{Held, sessions::Terminated},
    bus::Event,
    call::{
        decision::{Decision, DecisionRow},
        plan::LaunchPlan,
    },
    policy::ToolSpec,
    receipt::Receipt,
};

/// What guardd answers to `exec`, in order: the decision (after a hold, when the policy holds
/// the call for an admin), then, for a call that ran, its exit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecReply {
    /// Decided: an `allow` runs, anything else is the last reply.
    Decision(CallDecision),
    /// Held for an admin; a decision follows once one answered (or the wait ran out).
    Pending(Hold),
    /// The call's first process started.
    Started(Started),
    /// The call ended.
    Exit(Exit),
    /// The request was refused before any decision.
    Error(ErrorReply),
}

/// What guardd answers to every request but `exec`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// `check`: the decision and the plan an allowed call would run with.
    Decision(Box<Checked>),
    /// `status`.
    Status(Box<Status>),
    /// `pending`: the calls held for an admin.
    Pending(PendingCalls),
    /// `approve`, `deny`: the answer reached the held call.
    Resolved(Resolved),
    /// `reload`: the policy file is in force.
    Reloaded(Reloaded),
    /// `tools`: the tools the caller may call (again after each reload, with `follow`).
    Tools(ToolList),
    /// `sessions`: the sessions an approver terminated.
    Sessions(SessionList),
    /// `agents`: the policy's agents and their counts.
    Agents(AgentList),
    /// `clear_session`: the session may submit calls again.
    Cleared(Cleared),
    /// `why`: why a call did not run as asked.
    Why(Why),
    /// `subscribe`: events follow.
    Subscribed(Subscribed),
    /// `subscribe`: one event.
    Event(Event),
    /// On a followed stream (`tools` with `follow`, `subscribe`) that had nothing else to say:
    /// guardd is there, and the follower is expected to read it.
    Keepalive(Keepalive),
    /// The request was refused; `field` names the field at fault, when there is one.
    Error(ErrorReply),
}

/// The decision on an `exec`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallDecision {
    pub call_id: String,
    pub decision: Decision,
    /// Why not, as much as the policy discloses (absent for `allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The admin who approved a held call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<u32>,
    /// An approver ended the caller's session: this call and the session's later ones are
    /// blocked until an admin clears it (guard-exec exits 77).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminated: bool,
}

/// An `exec` held for an admin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    pub call_id: String,
    pub decision: Decision,
    pub message: String,
    /// How long the call waits for an answer before it is denied.
    pub timeout_s: u64,
    /// SHA-256 of the call's canonical form: what an approval binds to.
    #[serde(default)]
    pub digest: String,
}

/// The start of an allowed call, and where its processes are: its cgroup, which no process of
/// the call can leave, so that a caller that loses guardd can see them gone (`cgroup.events`
/// says `populated 0`) before it says the call was stopped. A descriptor would pin the call's
/// namespaces for as long as the caller kept it; a path pins nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    pub call_id: String,
    /// The first process's pid, in guardd's pid namespace.
    pub pid: u32,
    /// The call's cgroup directory, absolute.
    pub cgroup: std::path::PathBuf,
}

/// The end of a call that ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    pub call_id: String,
    /// The tool's exit code, 128+N when killed by signal N, 137 when guard stopped it; none when
    /// the call could not be carried through (`error`).
    pub code: Option<i32>,
    /// The call did or tried something it was not approved to do.
    pub diverged: bool,
    /// guard killed the call: for a divergence, or for `killed`.
    pub stopped: bool,
    /// Why guard killed it other than for a divergence: its timeout ran out, its caller went
    /// away (closed the connection, or only its own half of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<String>,
    /// Why an approved call could not be carried through.
    pub error: Option<String>,
    /// What the call was seen doing, as its audit row records it (absent when it never ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Box<Receipt>>,
    /// Why the audit log could not record how the call ended: the only account of it is this
    /// reply (and guardd's log), so a caller treats the call as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrecorded: Option<String>,
}

impl Exit {
    /// What a caller says when the call's end went unrecorded (`unrecorded`), with the code the
    /// tool ended with, which the caller does not pass on as a success.
    pub fn unrecorded_message(&self) -> Option<String> {
        let why = self.unrecorded.as_deref()?;
        let code = self
            .code
            .map_or_else(|| "no code".to_owned(), |c| format!("code {c}"));
        Some(format!(
            "the call ran ({code}), but the audit log could not record how it ended: {why}"
        ))
    }
}

/// The answer to `check`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    pub decision: DecisionRow,
    pub plan: Option<LaunchPlan>,
}

/// The answer to `pending`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingCalls {
    pub calls: Vec<Held>,
}

/// The answer to `approve` and `deny`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    pub call_id: String,
    pub approved: bool,
    /// The digest of the call that was answered.
    #[serde(default)]
    pub digest: String,
}

/// The answer to `sessions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionList {
    pub sessions: Vec<Terminated>,
}

/// The answer to `clear_session`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cleared {
    pub session: String,
}

/// The answer to `reload`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reloaded {
    pub policy: PathBuf,
    pub tools: usize,
}

/// The answer to `tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolList {
    pub tools: Vec<ToolSpec>,
}

/// The answer to `subscribe`, before the events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Subscribed {}

/// A followed stream's sign of life.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Keepalive {}

/// A refusal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// When a refusal for a rate says when to try again, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl From<&ProtocolError> for ErrorReply {
    fn from(e: &ProtocolError) -> Self {
        Self {
            error: e.message.clone(),
            field: e.field.clone(),
            retry_after_ms: None,
        }
    }
}

impl ErrorReply {
    /// A refusal that names no field.
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            field: None,
            retry_after_ms: None,
        }
    }
}

/// A reply or request on the wire: the version beside the message's own fields.
#[derive(Serialize, Deserialize)]
struct Framed<T> {
    v: u64,
    #[serde(flatten)]
    message: T,
}

/// Serialises a message (a reply, or a client's request) as one frame and its newline.
pub fn frame<T: Serialize>(message: &T) -> Vec<u8> {
    let framed = Framed {
        v: VERSION,
        message,
    };
    let mut out = match serde_json::to_vec(&framed) {
        Ok(out) => out,
        // Only a map with non-string keys fails, and no reply holds one; say so rather than
        // send nothing.
        Err(e) => {
            let error = ErrorReply::new(format!("serialising the reply: {e}"));
            serde_json::to_vec(&Framed {
                v: VERSION,
                message: &Reply::Error(error),
            })
            .unwrap_or_default()
        }
    };
    out.push(b'\n');
    out
}

/// Reads one reply frame (without its newline) of the version this build speaks.
pub fn parse_reply<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    let framed: Framed<T> =
        serde_json::from_slice(line).map_err(|e| format!("bad reply from guardd: {e}"))?;
    if framed.v != VERSION {
        return Err(format!(
            "guardd speaks protocol v{}, this client v{VERSION}",
            framed.v
        ));
    }
    Ok(framed.message)
}

/// The answer to `why`: a recent call's decision, as its audit row gives it (its reason too,
/// unless it is the admin's alone: what matched a secret's value, a caller barred for probing).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Why {
    pub call_id: String,
    pub tool: String,
    pub decision: Decision,
    /// The check that decided (`rule:ID`, `workspace`, `argument_validator`...).
    pub check: String,
    pub reason: String,
}

#[cfg(test)]
mod tests;
