//! `guardctl policy check --workspace DIR`: the base policy merged with the project policy of
//! DIR's workspace, as guardd would decide that workspace's calls, or why it is refused.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use guard::policy::{Policy, project::ProjectError};

/// What `--json` prints.
#[derive(serde::Serialize)]
struct Merged<'a> {
    policy: &'a Path,
    workspace: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    valid: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    removed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    restated: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_allowed_tier: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

/// `guardctl policy check [PATH] [--workspace DIR]`: the policy alone, or merged with DIR's
/// workspace's project policy.
pub fn policy_check(path: Option<PathBuf>, workspace: Option<PathBuf>, json: bool) -> ExitCode {
    let path = path.unwrap_or_else(crate::policy::default_policy_path);
    match workspace {
        Some(dir) => check_project(&path, &dir, json),
        None => crate::policy::check_policy(&path, json),
    }
}

/// Prints the merged policy's summary (exit 0), or every error of the base policy or of the
/// project file (exit 1). A workspace without a project policy is the base policy's.
pub fn check_project(path: &Path, dir: &Path, json: bool) -> ExitCode {
    let base = match Policy::load(path) {
        Ok(p) => p,
        Err(_) => return crate::policy::check_policy(path, json),
    };
    let mut out = Merged {
        policy: path,
        workspace: dir,
        project: None,
        sha256: None,
        valid: false,
        tools: Vec::new(),
        removed: Vec::new(),
        restated: Vec::new(),
        rules: None,
        max_allowed_tier: None,
        errors: Vec::new(),
    };
    let merged = base.with_project_of(dir);
    let shown = match &merged {
        Ok(Some(p)) => p,
        Ok(None) => &base,
        Err(e) => return refused(out, e, json),
    };
    out.valid = true;
    out.tools = shown.tools().map(str::to_owned).collect();
    out.rules = Some(shown.rule_count());
    out.max_allowed_tier = Some(shown.settings().max_allowed_tier.to_string());
    if let Some(p) = shown.project() {
        out.project = Some(p.path.display().to_string());
        out.sha256 = Some(p.sha256.clone());
        out.removed.clone_from(&p.removed);
        out.restated.clone_from(&p.restated);
    }
    if json {
        crate::print_json(&out);
    } else {
        print_text(&out);
    }
    ExitCode::SUCCESS
}

/// Every error of `e` (exit 1).
fn refused(mut out: Merged, e: &ProjectError, json: bool) -> ExitCode {
    out.errors = match e {
        ProjectError::Invalid(errors) => errors.iter().map(ToString::to_string).collect(),
        other => vec![other.to_string()],
    };
    if json {
        crate::print_json(&out);
        return ExitCode::FAILURE;
    }
    for e in &out.errors {
        crate::term::say_err_lines!("{e}");
    }
    // Outside every workspace there is no project policy, and no call of it to block.
    if !matches!(e, ProjectError::Place(_)) {
        crate::term::say_err!(
            "{}: project policy refused, {} error(s): every call in this workspace is blocked \
             until it is fixed",
            out.workspace.display(),
            out.errors.len()
        );
    }
    ExitCode::FAILURE
}

/// The merged policy for people.
fn print_text(out: &Merged) {
    match &out.project {
        Some(p) => crate::term::say!(
            "{} + {p} ({}): valid",
            out.policy.display(),
            out.sha256.as_deref().unwrap_or_default()
        ),
        None => crate::term::say!(
            "{}: valid; {} has no project policy ({})",
            out.policy.display(),
            out.workspace.display(),
            guard::policy::project::RELATIVE
        ),
    }
    crate::term::say!("  tools:    {}", list(&out.tools));
    crate::term::say!("  removed:  {}", list(&out.removed));
    crate::term::say!("  narrowed: {}", list(&out.restated));
    crate::term::say!("  rules:    {}", out.rules.unwrap_or(0));
    let ceiling = out.max_allowed_tier.as_deref().unwrap_or_default();
    crate::term::say!("  ceiling:  {ceiling}");
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(", ")
    }
}
