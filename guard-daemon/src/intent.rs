//! What an agent asks for: one tool call, by name, with JSON arguments.

use serde::Deserialize;

/// One proposed tool call. Unknown fields are rejected so a client cannot smuggle options the
/// policy never sees.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// The tool's name as registered in the policy.
    pub tool: String,
    /// The call's arguments by name.
    #[serde(default)]
    pub args: serde_json::Map<String, serde_json::Value>,
}

impl Intent {
    pub fn new(tool: impl Into<String>, args: serde_json::Map<String, serde_json::Value>) -> Self {
        Self {
            tool: tool.into(),
            args,
        }
    }
}
