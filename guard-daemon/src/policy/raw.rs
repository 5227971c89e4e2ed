//! The raw document: what one policy file says, typed and located but not yet checked for
//! meaning, so that `validate` can report every problem of every file against its source.

use serde_json::Value as Json;

use super::source::{Loc, S};
use crate::{
    call::{
        decision::{Decision, RiskTier},
        plan::OnDivergence,
    },
    policy::detect::Detector,
};

/// A user or group by numeric id or by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Principal {
    Id(u32),
    Name(String),
}

/// The argument types a tool may declare; serialized as a policy writes them (`"path"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    String,
    Path,
    Url,
    Integer,
    Boolean,
    Enum,
}

impl ArgType {
    /// The type a policy names, as written in `type = "..."`.
    pub(super) fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "string" => ArgType::String,
            "path" => ArgType::Path,
            "url" => ArgType::Url,
            "integer" => ArgType::Integer,
            "boolean" => ArgType::Boolean,
            "enum" => ArgType::Enum,
            _ => return None,
        })
    }
    /// The name a policy writes for this type, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Path => "path",
            ArgType::Url => "url",
            ArgType::Integer => "integer",
            ArgType::Boolean => "boolean",
            ArgType::Enum => "enum",
        }
    }
}

/// `[settings]` as written; merged across files by `validate`.
#[derive(Debug, Default)]
pub(crate) struct RawSettings {
    pub at: Loc,
    pub max_allowed_tier: Option<S<RiskTier>>,
    pub allow_critical: Option<S<bool>>,
    pub escalation_threshold: Option<S<RiskTier>>,
    pub allow_unregistered: Option<bool>,
    pub disclose_reasons: Option<bool>,
    pub clients: Vec<Principal>,
    pub admins: Vec<Principal>,
    pub client_groups: Vec<Principal>,
    pub admin_groups: Vec<Principal>,
    pub socket_group: Option<String>,
    pub run_as: Option<String>,
    pub enforce: Option<S<crate::call::plan::Enforce>>,
    /// The judges of every tool that names none of its own.
    pub judges: Vec<S<String>>,
    /// inspect_ai's approval policies file (JSON or YAML), its approvers after the TOML's.
    pub approval_policies: Option<S<String>>,
}

/// `[workspaces]` as written: where projects live.
#[derive(Debug, Default)]
pub(crate) struct RawWorkspaces {
    pub at: Loc,
    /// Absolute paths whose components may be globs (`/home/*/projects/*`).
    pub roots: Vec<S<String>>,
    /// Relative names kept read-only beneath every writable directory, when given.
    pub protected: Option<Vec<S<String>>>,
}

/// `[agents.<name>]` as written.
#[derive(Debug)]
pub(crate) struct RawAgent {
    pub name: S<String>,
    pub uids: Vec<Principal>,
    pub cgroups: Vec<S<String>>,
    pub tools: Vec<S<String>>,
    /// Whether `tools` was written at all (an empty list is not the same as none).
    pub tools_given: bool,
    pub max_tier: Option<S<RiskTier>>,
    pub max_running: Option<S<i64>>,
    pub rate: Option<S<String>>,
    /// `[agents.<name>.labels.<label>] tools`: what a caller saying it is that label may call.
    pub labels: Vec<(S<String>, Vec<S<String>>)>,
}

/// `[secrets.<name>]` as written.
#[derive(Debug)]
pub(crate) struct RawSecret {
    pub name: S<String>,
    /// `credential:NAME` or `file:/path`.
    pub source: Option<S<String>>,
    pub hosts: Vec<S<String>>,
}

/// `[tools.<name>.args.<arg>]` as written.
#[derive(Debug)]
pub(crate) struct RawArg {
    pub name: S<String>,
    pub ty: S<ArgType>,
    pub required: bool,
    pub within: Vec<S<String>>,
    pub base: Option<S<String>>,
    pub pattern: Option<S<String>>,
    pub values: Vec<S<String>>,
    pub max_len: Option<S<i64>>,
    pub hosts: Vec<S<String>>,
    pub schemes: Vec<S<String>>,
    pub min: Option<S<i64>>,
    pub max: Option<S<i64>>,
}

/// `[tools.<name>.effects]` as written: templates, not yet checked against the tool's args.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawEffects {
    pub read: Vec<S<String>>,
    pub write: Vec<S<String>>,
    pub exec: Vec<S<String>>,
    pub connect: Vec<S<String>>,
    pub unix: bool,
    /// The call may execute files beneath its write effects.
    pub exec_writes: bool,
    pub on_divergence: OnDivergence,
}

/// A tool's `stdin` as written: where the input it reads on stdin comes from.
#[derive(Debug)]
pub(crate) enum RawStdin {
    /// `"caller"`: the caller's own stdin stream.
    Caller,
    /// `{ arg = "NAME" }`: that argument's value, which guardd writes to the tool's stdin.
    Arg(S<String>),
}

/// One `[[tools.<name>.examples]]`: a call and the decision the policy must reach for it.
#[derive(Debug)]
pub(crate) struct RawExample {
    pub at: Loc,
    pub index: usize,
    pub args: serde_json::Map<String, Json>,
    /// The caller's working directory, for a tool that works in a workspace.
    pub cwd: Option<std::path::PathBuf>,
    pub expect: S<Decision>,
}

/// `[tools.<name>]` as written.
#[derive(Debug)]
pub(crate) struct RawTool {
    pub name: S<String>,
    pub tier: S<RiskTier>,
    pub irreversible: bool,
    pub dryrun_supported: bool,
    pub description: Option<String>,
    pub command: Option<Vec<S<String>>>,
    pub args: Vec<RawArg>,
    pub effects: RawEffects,
    pub run_as: Option<S<String>>,
    pub timeout: Option<S<i64>>,
    pub memory: Option<u64>,
    pub pids: Option<S<i64>>,
    pub syscalls: Vec<S<String>>,
    pub allow_syscalls: Vec<S<String>>,
    /// `capabilities`: what a tool run as root keeps.
    pub capabilities: Vec<S<String>>,
    pub env: Vec<(S<String>, S<String>)>,
    pub cwd: Option<S<String>>,
    pub stdin: Option<RawStdin>,
    pub examples: Vec<RawExample>,
    /// `judges`: given (even empty), the tool's own list.
    pub judges: Option<Vec<S<String>>>,
    pub skip_judge: Option<S<bool>>,
    /// `tmp`: each call gets a temporary directory of its own.
    pub tmp: bool,
    /// `enforce`: the tool's own mode, over `[settings] enforce`.
    pub enforce: Option<S<crate::call::plan::Enforce>>,
}

/// One `[[rules]]` as written; `index` is its place in the file, for key paths in errors.
#[derive(Debug)]
pub(crate) struct RawRule {
    pub index: usize,
    pub id: S<String>,
    pub tools: Vec<S<String>>,
    pub arg: Option<S<String>>,
    pub regex: Option<S<String>>,
    pub equals: Option<S<String>>,
    pub detect: Vec<S<Detector>>,
    /// `[[rules.when]]`: conditions on other arguments, every one of which must hold too.
    pub when: Vec<RawCondition>,
    pub action: S<Decision>,
    pub message: Option<String>,
}

/// One `[[rules.when]]` as written: a condition on one argument.
#[derive(Debug)]
pub(crate) struct RawCondition {
    pub index: usize,
    pub arg: Option<S<String>>,
    pub regex: Option<S<String>>,
    pub equals: Option<S<String>>,
    pub detect: Vec<S<Detector>>,
}

/// `[approvals]`: how held calls may be answered.
#[derive(Debug)]
pub(crate) struct RawApprovals {
    pub at: Loc,
    pub allow_self: Option<S<bool>>,
    /// `notify`, `notify_timeout`, `[approvals.notify_effects]`.
    pub notify: Option<RawHelper>,
}

/// A program guard runs for itself, as written: its command, literal effects, timeout.
#[derive(Debug)]
pub(crate) struct RawHelper {
    pub command: Vec<S<String>>,
    pub effects: RawEffects,
    pub timeout: Option<S<i64>>,
}

/// `[judges.<name>]` as written.
#[derive(Debug)]
pub(crate) struct RawJudge {
    pub name: S<String>,
    pub helper: RawHelper,
    pub criteria: Option<String>,
    pub min_score: Option<S<f64>>,
    pub min_confidence: Option<S<f64>>,
}

/// One `[[approvers]]` as written.
#[derive(Debug)]
pub(crate) struct RawApprover {
    pub index: usize,
    pub tools: Vec<S<String>>,
    /// `auto`, `human`, `judge:NAME` or `command:[...]` (a JSON array of strings).
    pub approver: Option<S<String>>,
    /// `auto`'s outcome.
    pub decision: Option<S<String>>,
    /// `human`'s choices (inspect_ai's): what an admin may answer its calls with.
    pub choices: Option<Vec<S<String>>>,
    pub timeout: Option<S<i64>>,
    pub effects: RawEffects,
}

/// Everything one policy file says, before the files are merged.
#[derive(Debug, Default)]
pub(crate) struct RawDoc {
    pub settings: Option<RawSettings>,
    pub agents: Vec<RawAgent>,
    pub secrets: Vec<RawSecret>,
    pub workspaces: Option<RawWorkspaces>,
    pub approvals: Option<RawApprovals>,
    pub judges: Vec<RawJudge>,
    pub approvers: Vec<RawApprover>,
    pub tools: Vec<RawTool>,
    pub rules: Vec<RawRule>,
}
