//! What guardd says of itself: its status (the policy in force, the audit log, each layer,
//! the calls and connections it holds) and its agents' counts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::call::calls::Running;

/// The answer to `status`: what guardd is and does now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub uptime_s: u64,
    /// Whether the kernel layers hold the calls (false only with `--allow-unenforced`).
    pub enforced: bool,
    pub policy: PolicyStatus,
    pub audit: AuditStatus,
    pub layers: Vec<Layer>,
    /// How memory and task limits are enforced on this host.
    pub limits: String,
    pub running: Vec<Running>,
    pub queued: u64,
    /// Kernel events the ring buffer had no room for, since guardd started.
    pub dropped_events: u64,
    /// The connections open, per the fair admission's counts.
    #[serde(default)]
    pub connections: Counts,
    /// The OTLP export's counts; none when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportStatus>,
}

/// The OTLP export (`guardd --otlp-endpoint`) since guardd started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportStatus {
    /// Where it sends (its `/v1/logs`).
    pub endpoint: String,
    /// Records the collector accepted.
    pub sent: u64,
    /// Records dropped: a full queue, retries run out, or the collector's refusal.
    pub dropped: u64,
    /// Tries to send a batch that failed.
    pub failed: u64,
}

/// The policy in force.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyStatus {
    pub path: PathBuf,
    pub tools: usize,
    /// Its version (`sha256:` of its files), as decision rows record it.
    #[serde(default)]
    pub version: String,
    /// The tools that run in shadow (`enforce = "shadow"`): what they do is let through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<String>,
}

/// The audit log guardd writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditStatus {
    pub path: PathBuf,
    /// False: the reserve for running calls' rows is in use, and no call is admitted.
    pub admitting: bool,
}

/// The answer to `agents`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentList {
    pub agents: Vec<AgentStatus>,
}

/// One agent as the policy gives it, and what it has done since guardd started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub name: String,
    pub uids: Vec<String>,
    pub cgroups: Vec<String>,
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tier: Option<crate::call::decision::RiskTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(flatten)]
    pub counts: AgentCounts,
}

/// One agent's counts, as `guardctl agents` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounts {
    /// Calls admitted to review.
    pub calls: u64,
    /// Calls the review did not allow (blocked, escalated or quarantined).
    pub blocked: u64,
    /// Calls running or under review now.
    pub running: u64,
}

/// The connections guardd holds now (the fair admission's counts), for `guardctl status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Connections open.
    pub open: usize,
    /// Of those, the ones beyond their uid's reserve.
    pub shared: usize,
    /// Streams followed.
    pub followers: usize,
    /// Uids with a connection open.
    pub uids: usize,
}

/// One enforcement layer and how it was proven at start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub name: String,
    pub state: LayerState,
    pub detail: String,
}

/// Whether a layer holds the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerState {
    /// Loaded and proven.
    Active,
    /// Not in use, by the operator's choice (an opt-in layer).
    Off,
    /// Missing, and guardd runs without it by the operator's choice (`--allow-unenforced`).
    Unenforced,
}

impl LayerState {
    /// The state's name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerState::Active => "active",
            LayerState::Off => "off",
            LayerState::Unenforced => "unenforced",
        }
    }
}
