//! The outcome of a policy decision and the audit row that records it (shaped like signet's
//! `ToolCallInspectorCheck` rows).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What happens to a call. Ordered from most to least permissive so that combining matches is
/// `max`: the strictest decision wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run it, confined by its plan.
    Allow,
    /// Hold it until a human approves it out of band.
    Escalate,
    /// Hold it for review; the caller gets a generic answer (DLP).
    Quarantine,
    /// Refuse it.
    Block,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Escalate => "escalate",
            Decision::Quarantine => "quarantine",
            Decision::Block => "block",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "allow" => Decision::Allow,
            "escalate" => Decision::Escalate,
            "quarantine" => Decision::Quarantine,
            "block" => Decision::Block,
            _ => return None,
        })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much harm a tool can do, as in signet's table (LOW 0 .. CRITICAL 3). Written lowercase
/// in policies, UPPERCASE in reasons and audit metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RiskTier {
    Low,
    Medium,
    High,
    Critical,
}

impl RiskTier {
    /// Parses the policy spelling (lowercase).
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "low" => RiskTier::Low,
            "medium" => RiskTier::Medium,
            "high" => RiskTier::High,
            "critical" => RiskTier::Critical,
            _ => return None,
        })
    }

    pub fn as_upper(self) -> &'static str {
        match self {
            RiskTier::Low => "LOW",
            RiskTier::Medium => "MEDIUM",
            RiskTier::High => "HIGH",
            RiskTier::Critical => "CRITICAL",
        }
    }
}

impl fmt::Display for RiskTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_upper())
    }
}

/// The pipeline stage that decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Registry,
    /// An argument holds a secret's value (`[secrets]`).
    Secret,
    Ceiling,
    Arguments,
    Rules,
    Escalation,
    Allow,
}

/// Context of a row; absent keys are omitted from the JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<RiskTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_entry_id: Option<String>,
    /// The policy's agent the caller is (`[agents]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What the caller said it is within its agent (`label`): recorded, never trusted to widen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// The workspace's own policy (`.guard/policy.toml`) the call was decided under, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_policy: Option<ProjectPolicy>,
    /// `shadow` for a call of a tool in shadow (`enforce = "shadow"`); absent when enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<crate::call::plan::Enforce>,
    /// In shadow, what enforcing would have decided (`block`, `escalate`, `quarantine`): the
    /// call was allowed to run, and `check_name` and `reason` are that decision's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_block: Option<Decision>,
}

/// Which project policy a decision used: its file and the SHA-256 of the text read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectPolicy {
    /// `<workspace>/.guard/policy.toml`.
    pub path: std::path::PathBuf,
    /// `sha256:` and the hex SHA-256 of the text read.
    pub sha256: String,
}

/// One audit row: which check decided, what, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRow {
    /// `tool_call_inspector`, `argument_validator` or `rule:<id>`.
    pub check_name: String,
    pub decision: Decision,
    /// Human-readable; never echoes argument values, which may hold secrets.
    pub reason: String,
    pub metadata: RowMetadata,
}

impl DecisionRow {
    /// The daemon assigns call ids after deciding; this records it on the row.
    pub fn set_audit_entry_id(&mut self, id: impl Into<String>) {
        self.metadata.audit_entry_id = Some(id.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_order_from_permissive_to_strict() {
        assert!(Decision::Allow < Decision::Escalate);
        assert!(Decision::Escalate < Decision::Quarantine);
        assert!(Decision::Quarantine < Decision::Block);
        assert!(RiskTier::Low < RiskTier::Medium && RiskTier::High < RiskTier::Critical);
    }

    #[test]
    fn row_serializes_like_signet() {
        let row = DecisionRow {
            check_name: "tool_call_inspector".into(),
            decision: Decision::Block,
            reason: "tool 'process_payment' tier CRITICAL exceeds max_allowed_tier HIGH".into(),
            metadata: RowMetadata {
                tool: Some("process_payment".into()),
                tier: Some(RiskTier::Critical),
                ..Default::default()
            },
        };
        let json = serde_json::to_string(&row).unwrap();
        assert_eq!(
            json,
            r#"{"check_name":"tool_call_inspector","decision":"block","reason":"tool 'process_payment' tier CRITICAL exceeds max_allowed_tier HIGH","metadata":{"tool":"process_payment","tier":"CRITICAL"}}"#
        );
    }
}
