//! A workspace's own policy, `<workspace>/.guard/policy.toml`: read for the calls made in that
//! workspace, it may only tighten the base policy (remove tools, restate them narrower, lower
//! the ceiling, add rules and refusing approvers). Anything that would widen is a load error
//! naming the project file, line and key, and then every call in that workspace is blocked
//! with that error until the file is fixed (fail closed): a project that meant to tighten and
//! got it wrong must not run as if it had said nothing.
//!
//! The merged policy is a [`Policy`] like any other (so judges, holds, approvals and reloads
//! see it as the policy a call was decided under, its version covering the project file), and
//! [`Projects`] keeps one per workspace, read again when the file changes.

mod cache;
mod file;
mod merge;
mod narrow;
mod parse;
mod within;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

pub use self::{
    cache::Projects,
    file::{MAX_BYTES, RELATIVE},
};
use super::{
    Origin, Policy, PolicyErrors, Verdict,
    redact::redact,
    source::{Diag, Sources},
};
use crate::{
    call::{
        decision::{Decision, DecisionRow, ProjectPolicy, RowMetadata, Stage},
        intent::Intent,
    },
    policy::detect::DetectorSet,
};

/// The `check_name` of a call a project policy blocks (a tool it removed, or every call of a
/// workspace whose project policy is refused).
pub const CHECK: &str = "project_policy";

/// The project policy a policy was merged with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectInfo {
    /// `<workspace>/.guard/policy.toml`.
    pub path: PathBuf,
    /// `sha256:` and the hex SHA-256 of the text merged.
    pub sha256: String,
    /// The base's tools it removes.
    pub removed: Vec<String>,
    /// The base's tools it restates, narrower.
    pub restated: Vec<String>,
    /// Why it is refused, when it is: then every call of its workspace is blocked.
    pub barred: Option<String>,
}

/// Why a workspace's project policy could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// The directory is in none of the base policy's workspaces.
    #[error("{0}")]
    Place(String),
    /// The file could not be read safely.
    #[error("{0}")]
    File(String),
    /// The file says something a project policy may not, or is no policy at all.
    #[error("{0}")]
    Invalid(PolicyErrors),
}

impl ProjectError {
    /// One line per error (`file:line:col: key: message`), without the quoted source, for a
    /// decision row and the caller.
    pub fn summary(&self) -> String {
        match self {
            ProjectError::Invalid(errors) => errors
                .iter()
                .map(|e| {
                    let mut s = e.file.display().to_string();
                    if let Some((line, col)) = e.position {
                        s.push_str(&format!(":{line}:{col}"));
                    }
                    if !e.key.is_empty() {
                        s.push_str(&format!(": {}", e.key));
                    }
                    format!("{s}: {}", e.message)
                })
                .collect::<Vec<_>>()
                .join("; "),
            other => other.to_string(),
        }
    }
}

impl Policy {
    /// The project policy this policy was merged with, if any.
    pub fn project(&self) -> Option<&ProjectInfo> {
        self.origin.project.as_deref()
    }

    /// This (base) policy with the project policy of the workspace that holds `dir` merged in;
    /// `Ok(None)` when that workspace has none. For `guardctl policy check --workspace`.
    pub fn with_project_of(&self, dir: &Path) -> Result<Option<Policy>, ProjectError> {
        let real = std::fs::canonicalize(dir)
            .map_err(|e| ProjectError::Place(format!("{}: {e}", dir.display())))?;
        let ws = self.workspace_of(&real).ok_or_else(|| {
            ProjectError::Place(format!(
                "{} is in none of the policy's [workspaces] roots",
                real.display()
            ))
        })?;
        let Some(file) = file::read(&ws).map_err(ProjectError::File)? else {
            return Ok(None);
        };
        merge::merged(self, &ws, &file)
            .map(Some)
            .map_err(ProjectError::Invalid)
    }

    /// The policy of a workspace whose project policy is refused: it blocks every call, with
    /// `why`; the base's settings are kept (what the caller is told, and who).
    fn barred(&self, path: &Path, sha256: &str, why: String) -> Policy {
        let src = Sources::default();
        let mut d = Diag::new(&src);
        let mut policy = super::validate::build(&mut d, Vec::new());
        policy.settings = self.settings.clone();
        policy.version = file::sha256(&format!("{}\n{}\n{sha256}", self.version, path.display()));
        policy.origin = Origin {
            files: Arc::clone(&self.origin.files),
            project: Some(Arc::new(ProjectInfo {
                path: path.to_owned(),
                sha256: sha256.to_owned(),
                removed: Vec::new(),
                restated: Vec::new(),
                barred: Some(why),
            })),
        };
        policy
    }

    /// The verdict of a call the project policy refuses before the pipeline: every call when
    /// the project policy itself is refused, and a call of a tool it removed.
    pub(super) fn project_gate(&self, intent: &Intent) -> Option<Verdict> {
        let p = self.origin.project.as_deref()?;
        let name = &intent.tool;
        let reason = match &p.barred {
            Some(why) => format!(
                "the project policy {} is refused, and blocks every call in its workspace until \
                 it is fixed: {why}",
                p.path.display()
            ),
            None if p.removed.contains(name) => format!(
                "tool '{name}' is removed in this workspace by its project policy {}",
                p.path.display()
            ),
            None => return None,
        };
        let meta = RowMetadata {
            tool: Some(name.clone()),
            stage: Some(Stage::Registry),
            ..RowMetadata::default()
        };
        Some(Verdict {
            row: DecisionRow {
                check_name: CHECK.to_owned(),
                decision: Decision::Block,
                reason,
                metadata: meta,
            },
            plan: None,
            redacted_args: redact(&intent.args, DetectorSet::SECRET_CLASS),
        })
    }

    /// Names the project policy (file and digest) on a row decided under it.
    pub(super) fn name_project(&self, row: &mut DecisionRow) {
        if let Some(p) = self.project() {
            row.metadata.project_policy = Some(ProjectPolicy {
                path: p.path.clone(),
                sha256: p.sha256.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
