//! What an agent asks for: one tool call, by name, with JSON arguments.

use std::path::PathBuf;

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
    /// The caller's working directory, which picks the call's workspace (`[workspaces]`).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The caller's uid as the kernel gave it (`SO_PEERCRED`); never from the caller's words.
    /// `None` where no one calls (a policy's examples, `guardctl check --policy`).
    #[serde(skip)]
    pub caller: Option<u32>,
}

impl Intent {
    /// A call of `tool` with `args`, from no particular caller or directory.
    pub fn new(tool: impl Into<String>, args: serde_json::Map<String, serde_json::Value>) -> Self {
        Self {
            tool: tool.into(),
            args,
            cwd: None,
            caller: None,
        }
    }
}
