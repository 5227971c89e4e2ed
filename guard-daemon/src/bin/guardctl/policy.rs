//! `guardctl policy check` and `guardctl check`: validate a policy, decide a call without
//! running it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use guard::{call::intent::Intent, policy::Policy};

/// `/etc/guard/policy.toml` if it exists, else the directory `/etc/guard/policies/`.
pub fn default_policy_path() -> PathBuf {
    let file = Path::new("/etc/guard/policy.toml");
    if file.exists() {
        file.to_path_buf()
    } else {
        PathBuf::from("/etc/guard/policies/")
    }
}

/// `guardctl policy check --json`: what was loaded, or every error.
#[derive(serde::Serialize)]
struct Checked<'a> {
    path: &'a Path,
    valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

/// Prints every error at once (as one JSON object with `as_json`); exit 0 when valid, 1 when
/// not.
pub fn check_policy(path: &Path, as_json: bool) -> ExitCode {
    match Policy::load(path) {
        Ok(p) if as_json => {
            let out = Checked {
                path,
                valid: true,
                tools: Some(p.tools().count()),
                rules: Some(p.rule_count()),
                errors: Vec::new(),
            };
            crate::print_json(&out);
            ExitCode::SUCCESS
        }
        Ok(p) => {
            crate::term::say!(
                "{}: valid: {} tools, {} rules",
                path.display(),
                p.tools().count(),
                p.rule_count()
            );
            ExitCode::SUCCESS
        }
        Err(errors) if as_json => {
            let out = Checked {
                path,
                valid: false,
                tools: None,
                rules: None,
                errors: errors.iter().map(ToString::to_string).collect(),
            };
            crate::print_json(&out);
            ExitCode::FAILURE
        }
        Err(errors) => {
            // An error is a line and the source lines it points at.
            for e in errors.iter() {
                crate::term::say_err_lines!("{e}");
            }
            crate::term::say_err!("{}: {} error(s)", path.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}

/// Decides one call and prints it; returns the decision, which sets the exit code.
pub fn check_call(
    policy: &Path,
    tool: &str,
    args: Option<&str>,
    cwd: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<guard::call::decision::Decision> {
    let policy = Policy::load(policy)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("invalid policy")?;
    let args = match args {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str(text).context("--args is not JSON")? {
            serde_json::Value::Object(m) => m,
            _ => bail!("--args must be a JSON object"),
        },
    };
    let mut intent = Intent::new(tool, args);
    intent.cwd = cwd.or_else(|| std::env::current_dir().ok());
    let verdict = policy.decide(&intent);
    if json {
        let mut out = serde_json::to_value(&verdict.row)?;
        if let (Some(plan), Some(obj)) = (&verdict.plan, out.as_object_mut()) {
            obj.insert("plan".into(), serde_json::to_value(plan)?);
        }
        // JSON, exact: not escaped for people.
        println!("{out}");
    } else {
        crate::term::say!(
            "{:<10} {}  {}",
            verdict.row.decision.as_str(),
            verdict.row.check_name,
            verdict.row.reason
        );
    }
    Ok(verdict.row.decision)
}
