//! What an agent says with a call, for those who decide it: the model's message that came with
//! the call and the conversation before it (inspect_ai's approvers get both). guardd passes them
//! to the call's judges and approvers and keeps them with a held call for its admin, each secret
//! masked as in the arguments; the audit log keeps them redacted as the arguments are.

use serde::{Deserialize, Serialize};

/// The most bytes of the message, and of each turn's content.
pub const TEXT_BYTES: usize = 8192;
/// The most turns of history.
pub const TURNS: usize = 16;
/// The most bytes of a turn's role.
pub const ROLE_BYTES: usize = 32;

/// One turn of the conversation before the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// `user`, `assistant`, `tool`, `system`: the agent's word.
    pub role: String,
    pub content: String,
}

/// The message and history a call came with; empty when the caller sent none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The latest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Turn>,
}

impl AgentContext {
    /// Whether the caller sent nothing.
    pub fn is_empty(&self) -> bool {
        self.message.is_none() && self.history.is_empty()
    }

    /// Why it is larger than guardd takes: the field at fault and what is wrong.
    pub fn oversized(&self) -> Option<(&'static str, String)> {
        if self.message.as_ref().is_some_and(|m| m.len() > TEXT_BYTES) {
            return Some((
                "message",
                format!("`message` is longer than {TEXT_BYTES} bytes"),
            ));
        }
        if self.history.len() > TURNS {
            return Some(("history", format!("`history` has more than {TURNS} turns")));
        }
        let long = |t: &Turn| t.content.len() > TEXT_BYTES || t.role.len() > ROLE_BYTES;
        self.history.iter().position(long).map(|i| {
            let why = format!(
                "`history[{i}]` is longer than a turn may be ({ROLE_BYTES} bytes of role, \
                 {TEXT_BYTES} of content)"
            );
            ("history", why)
        })
    }

    /// As JSON, for masking and redacting as arguments are.
    pub fn as_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
