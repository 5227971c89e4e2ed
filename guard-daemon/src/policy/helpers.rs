//! The programs a policy has guard run for itself, compiled: judges (`[judges.NAME]`),
//! approvers by tool glob (`[[approvers]]`) and the notifier of held calls (`[approvals]
//! notify`). Each runs confined with literal effects of its own.

use std::{path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use crate::call::plan::{Confinement, Effects, Endpoint, LaunchPlan, OnDivergence};

/// A program guard runs confined, with its own literal effects.
#[derive(Clone, Debug, PartialEq)]
pub struct Helper {
    /// argv; `argv[0]` an absolute path.
    pub command: Vec<String>,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub exec: Vec<PathBuf>,
    pub connect: Vec<Endpoint>,
    pub timeout: Duration,
}

impl Helper {
    /// The plan it runs with, named `name`, reading also `also_read` (read-only: the paths of
    /// the call a judge looks at), each opened beneath its root as the call's would be
    /// (`beneath`, the judged plan's): a path re-pointed since the decision fails the launch.
    pub fn plan(
        &self,
        name: &str,
        also_read: &[PathBuf],
        beneath: &[(PathBuf, PathBuf)],
    ) -> LaunchPlan {
        let mut read = self.read.clone();
        read.extend(also_read.iter().cloned());
        read.sort();
        read.dedup();
        LaunchPlan {
            tool: name.to_owned(),
            argv: self.command.iter().map(Into::into).collect(),
            effects: Effects {
                read,
                write: self.write.clone(),
                exec: self.exec.clone(),
                connect: self.connect.clone(),
                unix: false,
                on_divergence: OnDivergence::Kill,
                beneath: beneath.to_vec(),
                protected: None,
            },
            // guard's own programs are held to what they may do, whatever the tools' mode.
            enforce: crate::call::plan::Enforce::Enforce,
            confinement: Confinement {
                timeout: self.timeout,
                ..Confinement::default()
            },
        }
    }
}

/// `[judges.NAME]`: a semantic judge of a call before it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Judge {
    pub name: String,
    pub helper: Helper,
    /// The rubric passed to the judge.
    pub criteria: String,
    /// The call is allowed only when the judge's score is at least this...
    pub min_score: f64,
    /// ...and its confidence at least this.
    pub min_confidence: f64,
}

/// What an approver says of a call (inspect_ai's ApprovalDecision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Run it.
    Approve,
    /// Run it with other arguments, decided again by the policy.
    Modify,
    /// Refuse it.
    Reject,
    /// Refuse it and block the caller's session until an admin clears it.
    Terminate,
    /// Leave it to the next approver (at the end, a human).
    Escalate,
}

impl Outcome {
    /// The outcome a policy or an approver names.
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "approve" => Outcome::Approve,
            "modify" => Outcome::Modify,
            "reject" => Outcome::Reject,
            "terminate" => Outcome::Terminate,
            "escalate" => Outcome::Escalate,
            _ => return None,
        })
    }

    /// Its name, as rows and approvers write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Approve => "approve",
            Outcome::Modify => "modify",
            Outcome::Reject => "reject",
            Outcome::Terminate => "terminate",
            Outcome::Escalate => "escalate",
        }
    }
}

/// Who answers an escalated call.
#[derive(Clone, Debug, PartialEq)]
pub enum ApproverKind {
    /// Always the same outcome (inspect_ai's `auto` approver).
    Auto(Outcome),
    /// An admin, with `guardctl approve|deny`: the call is held, and answered within these
    /// choices.
    Human(Choices),
    /// A judge of `[judges]`: allowed is approve, rejected is reject.
    Judge(String),
    /// A program: the call on stdin, an Approval on stdout.
    Command(Helper),
}

/// What an admin may answer a call a human approver holds with, as inspect_ai's human
/// approver's `choices` say: by default approve, reject and terminate. A denial is always
/// possible (refusing never widens), whatever the choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choices {
    /// `guardctl approve`.
    pub approve: bool,
    /// `guardctl deny --terminate`: the caller's session is terminated too.
    pub terminate: bool,
}

impl Choices {
    /// No answer but a denial (an auto approver that refuses comes before any human).
    pub const DENY_ONLY: Self = Self {
        approve: false,
        terminate: false,
    };

    /// What both allow.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self {
            approve: self.approve && other.approve,
            terminate: self.terminate && other.terminate,
        }
    }

    /// What an admin may answer a held call with, its tool's `approvers` (in policy order)
    /// considered: the choices of the first human they reach, none to approve when an auto
    /// approver that refuses comes first (it would have refused the call, and a quarantine or
    /// a project's rule must not route a call around it), inspect_ai's default otherwise.
    pub fn of(approvers: &[&Approver]) -> Self {
        for a in approvers {
            match &a.kind {
                ApproverKind::Human(c) => return *c,
                ApproverKind::Auto(Outcome::Reject) => return Self::DENY_ONLY,
                ApproverKind::Auto(Outcome::Terminate) => {
                    return Self {
                        approve: false,
                        terminate: true,
                    };
                }
                ApproverKind::Auto(_) | ApproverKind::Judge(_) | ApproverKind::Command(_) => {}
            }
        }
        Self::default()
    }
}

impl Default for Choices {
    fn default() -> Self {
        Self {
            approve: true,
            terminate: true,
        }
    }
}

/// One `[[approvers]]`: who answers the escalated calls of the tools its globs match.
#[derive(Clone, Debug, PartialEq)]
pub struct Approver {
    pub tools: Vec<String>,
    pub kind: ApproverKind,
}

impl Approver {
    /// How rows name it: `auto`, `human`, `judge:NAME`, `command`.
    pub fn name(&self) -> String {
        match &self.kind {
            ApproverKind::Auto(_) => "auto".into(),
            ApproverKind::Human(_) => "human".into(),
            ApproverKind::Judge(n) => format!("judge:{n}"),
            ApproverKind::Command(_) => "command".into(),
        }
    }
}
