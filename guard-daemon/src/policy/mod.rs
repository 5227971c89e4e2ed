//! The policy engine: loads a TOML policy, decides each tool call, and for allowed calls
//! produces the [`LaunchPlan`] that the sandbox runs.
//!
//! Loading is two steps, as in youki's `check_seccomp`: `parse` reads syntax and types with
//! locations (one `table` at a time, into `raw` items); `validate` checks meaning
//! (placeholders, rule targets, regexes) and compiles regexes, globs and templates once.
//! Deciding (`decide`) then runs a fixed pipeline, first decisive stage wins: registry,
//! ceiling, arguments, rules (strictest match), escalation, allow.

pub mod addr;
pub mod agents;
pub(crate) mod args;
mod decide;
pub use decide::{NO_COMMAND, TOLD};
pub mod detect;
pub mod helpers;
mod listing;
mod overlap;
mod parse;
pub mod project;
mod raw;
mod redact;
mod rules;
pub mod secrets;
pub mod shadow;
mod source;
mod table;
mod template;
mod validate;
mod workspace;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde_json::Value as Json;

use self::{
    args::ArgSpec,
    rules::Rule,
    source::{Diag, Sources},
    template::Elem,
};
pub use self::{
    listing::{ArgDoc, StdinSpec, ToolSpec},
    raw::{ArgType, Principal},
    rules::glob_match,
    source::{PolicyError, PolicyErrors},
};
use crate::{
    call::{
        decision::{DecisionRow, RiskTier},
        intent::Intent,
        plan::{Confinement, Endpoint, LaunchPlan, OnDivergence},
    },
    policy::detect::{Detector, DetectorSet},
};

/// The longest tool name a policy may give, and a caller send (`protocol::limits`).
pub const MAX_NAME: usize = 256;

/// Global settings of a policy (`[settings]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The ceiling: a tool of a higher tier is blocked.
    pub max_allowed_tier: RiskTier,
    /// Whether CRITICAL tools may run at all, even under a critical ceiling.
    pub allow_critical: bool,
    /// An irreversible tool of this tier or above is held for a human.
    pub escalation_threshold: RiskTier,
    /// Whether a tool the policy does not name is decided by the rules alone (it never runs).
    pub allow_unregistered: bool,
    /// Whether the caller is told the reason of a decision (see [`Policy::caller_message`]).
    pub disclose_reasons: bool,
    /// Users who may submit calls.
    pub clients: Vec<Principal>,
    /// Users who may administer the daemon (and submit calls).
    pub admins: Vec<Principal>,
    /// Groups whose members may submit calls.
    pub client_groups: Vec<Principal>,
    /// Groups whose members are admins.
    pub admin_groups: Vec<Principal>,
    /// The socket's group when `guardd --socket-group` does not name one.
    pub socket_group: Option<String>,
    /// The user calls run as, unless a tool names its own.
    pub run_as: Option<String>,
    /// `enforce`: every tool's mode unless it names its own (a tool given a secret is always
    /// enforced).
    pub enforce: crate::call::plan::Enforce,
    /// `[workspaces] roots`: where projects live, absolute, each component a name or a glob.
    pub workspaces: Vec<PathBuf>,
    /// `[workspaces] protected`: the names no call changes beneath a directory it may write;
    /// `None`, the default list.
    pub protected: Option<Vec<String>>,
    /// `[approvals] allow_self`: whether an admin may approve a call of their own uid.
    pub allow_self_approval: bool,
    /// `[approvals] notify`: the program told of each held call.
    pub notify: Option<helpers::Helper>,
}

impl Default for Settings {
    /// signet's defaults: ceiling HIGH, CRITICAL opt-in, HIGH+irreversible escalates, unknown
    /// tools blocked, reasons not disclosed to the caller.
    fn default() -> Self {
        Self {
            max_allowed_tier: RiskTier::High,
            allow_critical: false,
            escalation_threshold: RiskTier::High,
            allow_unregistered: false,
            disclose_reasons: false,
            clients: Vec::new(),
            admins: Vec::new(),
            client_groups: Vec::new(),
            admin_groups: Vec::new(),
            socket_group: None,
            run_as: None,
            enforce: crate::call::plan::Enforce::Enforce,
            workspaces: Vec::new(),
            protected: None,
            allow_self_approval: false,
            notify: None,
        }
    }
}

/// Registry facts about a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolInfo<'a> {
    /// Its risk tier.
    pub tier: RiskTier,
    /// Whether its effects cannot be undone (what escalation looks at).
    pub irreversible: bool,
    /// Informational, as in signet: the tool can be simulated before commit.
    pub dryrun_supported: bool,
    /// What the policy says it does, for people reading listings.
    pub description: Option<&'a str>,
    /// Whether it has a command (without one it can be decided but never run).
    pub runnable: bool,
}

/// A compiled tool.
#[derive(Debug)]
pub(crate) struct Tool {
    pub name: String,
    pub tier: RiskTier,
    pub irreversible: bool,
    pub dryrun_supported: bool,
    pub description: Option<String>,
    pub command: Option<Vec<Elem<String>>>,
    pub args: Vec<ArgSpec>,
    pub read: Vec<Elem<PathBuf>>,
    pub write: Vec<Elem<PathBuf>>,
    pub exec: Vec<Elem<PathBuf>>,
    pub connect: Vec<Elem<Endpoint>>,
    pub unix: bool,
    /// Its write effects are also programs it may run (`exec_writes`).
    pub exec_writes: bool,
    /// Each call gets a temporary directory of its own (`tmp`).
    pub tmp: bool,
    pub on_divergence: OnDivergence,
    /// Enforced, or run in shadow: its own `enforce`, else `[settings] enforce`.
    pub enforce: crate::call::plan::Enforce,
    pub cwd: Option<Elem<PathBuf>>,
    pub env: Vec<(String, Elem<String>)>,
    /// `[workspaces] protected`, when the policy gives it.
    pub protected: Option<Vec<String>>,
    /// Variables whose values name secrets (`{secret:NAME}`), as written.
    pub secret_env: Vec<(String, String)>,
    /// Where its stdin comes from.
    pub stdin: ToolStdin,
    /// The static part of the confinement; cwd and env are templated per call.
    pub confinement: Confinement,
    /// Indices of the rules whose globs match this tool, in file order.
    pub rules: Vec<usize>,
    /// Detectors whose finds are redacted from this tool's audit rows.
    pub redact: DetectorSet,
    /// Indices of its judges in [`Policy::judges`], in order.
    pub judges: Vec<usize>,
    /// Whether a call needs a workspace: a template names `{workspace}` or `{cwd}`, or it runs
    /// as the workspace's owner.
    pub in_workspace: bool,
}

/// Where a compiled tool's stdin comes from (its `stdin` key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ToolStdin {
    /// Not given: the caller's descriptor is passed; the tool needs no input.
    #[default]
    Passed,
    /// `"caller"`: the caller's stdin stream.
    Caller,
    /// `{ arg = "NAME" }`: the value of the argument at this index of `args`.
    Arg(usize),
}

/// Where a policy came from: the base policy's texts (what a project policy is merged with)
/// and the project policy merged in, if any.
#[derive(Debug, Default)]
pub(crate) struct Origin {
    pub files: std::sync::Arc<[(PathBuf, String)]>,
    pub project: Option<std::sync::Arc<project::ProjectInfo>>,
}

impl Origin {
    /// A base policy's origin: the texts it was loaded from.
    pub(super) fn base(src: &source::Sources) -> Self {
        Self {
            files: src.files.clone().into(),
            project: None,
        }
    }
}

/// A loaded, checked policy.
#[derive(Debug)]
pub struct Policy {
    settings: Settings,
    tools: Vec<Tool>,
    by_name: HashMap<String, usize>,
    rules: Vec<Rule>,
    judges: Vec<helpers::Judge>,
    approvers: Vec<helpers::Approver>,
    /// `[agents]`, in name order.
    agents: Vec<agents::Agent>,
    /// `[secrets]`, their values read.
    secrets: Vec<secrets::Secret>,
    /// Their values in every form looked for, when there are any.
    masks: Option<std::sync::Arc<secrets::mask::Masks>>,
    /// `sha256:` and the SHA-256 of the files' paths and texts: what a held call was decided
    /// under.
    version: String,
    /// The base policy's texts, and the workspace's own policy merged in, if any.
    origin: Origin,
}

/// The outcome of [`Policy::decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The decision and why, as the audit log records it.
    pub row: DecisionRow,
    /// The call to run: for an allowed call, and for one held for approval (escalate,
    /// quarantine) whose arguments passed; only for a registered tool that has a command.
    pub plan: Option<LaunchPlan>,
    /// The call's arguments fit for the audit log: every find of a detector of a rule applying
    /// to the tool, and of every secret-class detector, replaced by `[REDACTED:<detector>]`.
    pub redacted_args: Json,
}

impl Policy {
    /// Loads a policy file, or every `*.toml` file of a directory (in name order) merged, with
    /// the approval policies file it names.
    pub fn load(path: &Path) -> Result<Policy, PolicyErrors> {
        let mut files = Vec::new();
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| PolicyErrors(vec![PolicyError::file(path.to_path_buf(), e)]))?;
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
                .collect();
            names.sort();
            if names.is_empty() {
                return Err(PolicyErrors(vec![PolicyError::file(
                    path.to_path_buf(),
                    "no *.toml policy files in this directory",
                )]));
            }
            files = names;
        } else {
            files.push(path.to_path_buf());
        }
        let mut src = Sources::default();
        let mut errors = Vec::new();
        for f in files {
            match std::fs::read_to_string(&f) {
                Ok(text) => {
                    src.add(f, text);
                }
                Err(e) => errors.push(PolicyError::file(f, e)),
            }
        }
        if errors.is_empty() {
            errors = parse::approval_file::read(path, &mut src);
        }
        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }
        Self::from_sources(&src)
    }

    /// Parses one policy text; `path` is only used in error messages.
    pub fn parse(path: &Path, text: &str) -> Result<Policy, PolicyErrors> {
        let mut src = Sources::default();
        src.add(path.to_path_buf(), text.to_string());
        Self::from_sources(&src)
    }

    fn from_sources(src: &Sources) -> Result<Policy, PolicyErrors> {
        let mut d = Diag::new(src);
        let mut docs = parse::documents(&mut d, &src.files);
        let mut examples = Vec::new();
        for doc in &mut docs {
            for t in &mut doc.tools {
                for ex in std::mem::take(&mut t.examples) {
                    examples.push((t.name.v.clone(), ex));
                }
            }
        }
        let mut policy = validate::build(&mut d, docs);
        policy.version = version(src);
        policy.origin = Origin::base(src);
        policy.examined(d, examples)
    }

    /// This policy, once no error was reported and its `examples` decide as they say; else
    /// every error.
    fn examined(
        self,
        mut d: Diag,
        examples: Vec<(String, raw::RawExample)>,
    ) -> Result<Policy, PolicyErrors> {
        if !d.errors.is_empty() {
            // Examples of a broken policy would only add noise.
            return Err(PolicyErrors(d.errors));
        }
        self.check_examples(&mut d, examples);
        if d.errors.is_empty() {
            Ok(self)
        } else {
            Err(PolicyErrors(d.errors))
        }
    }

    /// Decides each example call, reporting into `d` each whose decision is not the one it
    /// expects.
    fn check_examples(&self, d: &mut Diag, examples: Vec<(String, raw::RawExample)>) {
        Detector::warm_up();
        for (tool, ex) in examples {
            let mut intent = Intent::new(tool.clone(), ex.args);
            intent.cwd = ex.cwd;
            let v = self.decide(&intent);
            // A tool in shadow meets an example by what it would decide: its calls run, but
            // the policy still says what it would refuse (`would_block`).
            let decided = v.row.metadata.would_block.unwrap_or(v.row.decision);
            if decided != ex.expect.v {
                d.err(
                    &ex.at,
                    &format!("tools.{tool}.examples[{}]", ex.index),
                    format!(
                        "example expects {} but the policy decides {} ({}: {})",
                        ex.expect.v, decided, v.row.check_name, v.row.reason
                    ),
                );
            }
        }
    }

    /// `sha256:` and the SHA-256 of the policy's files (paths and texts), in load order.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The judges of `tool`, in the order they judge it (none for a tool with `skip_judge`).
    pub fn judges_of(&self, tool: &str) -> Vec<&helpers::Judge> {
        self.by_name.get(tool).map_or_else(Vec::new, |&i| {
            self.tools[i]
                .judges
                .iter()
                .map(|&j| &self.judges[j])
                .collect()
        })
    }

    /// The judge `name` of `[judges]`.
    pub fn judge(&self, name: &str) -> Option<&helpers::Judge> {
        self.judges.iter().find(|j| j.name == name)
    }

    /// The approvers whose globs match `tool`, in policy order: the first answers, and each
    /// `escalate` hands the call to the next (after the last, a human).
    pub fn approvers_of(&self, tool: &str) -> Vec<&helpers::Approver> {
        self.approvers
            .iter()
            .filter(|a| a.tools.iter().any(|g| glob_match(g, tool)))
            .collect()
    }

    /// The policy's `[secrets]`, their values read.
    pub fn secrets(&self) -> &[secrets::Secret] {
        &self.secrets
    }

    /// What masks the secrets' values, for a call's output; `None` without secrets.
    pub fn masks(&self) -> Option<std::sync::Arc<secrets::mask::Masks>> {
        self.masks.clone()
    }

    /// The policy's `[agents]`, in the order they are tried (name order).
    pub fn agents(&self) -> &[agents::Agent] {
        &self.agents
    }

    /// The policy's `[settings]` and `[approvals]`, defaults filled in.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Names of the registered tools, in name order.
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The tools that run in shadow (`enforce = "shadow"`), by name.
    pub fn shadow_tools(&self) -> Vec<&str> {
        let shadow = |t: &&Tool| t.enforce == crate::call::plan::Enforce::Shadow;
        let mut names: Vec<&str> = self.tools.iter().filter(shadow).map(|t| &*t.name).collect();
        names.sort_unstable();
        names
    }

    /// Where each tool may write, as far as load time can know: (tool, a root it may write
    /// beneath), or (tool, `None`) for a path argument without `within`, which may be anywhere.
    pub fn write_roots(&self) -> Vec<(&str, Option<PathBuf>)> {
        let mut out = Vec::new();
        for t in &self.tools {
            if t.tmp {
                let root = PathBuf::from(crate::sandbox::tmp::ROOT);
                out.push((t.name.as_str(), Some(root)));
            }
            for w in &t.write {
                let reach = overlap::Reach::elem(w, &t.args, &self.settings.workspaces);
                match reach {
                    overlap::Reach::Anywhere => out.push((t.name.as_str(), None)),
                    overlap::Reach::Beneath(roots) => {
                        out.extend(roots.into_iter().map(|r| (t.name.as_str(), Some(r))));
                    }
                }
            }
        }
        out
    }

    /// What the registry says about one tool, for `guardctl` and the daemon's listings.
    pub fn tool_info(&self, name: &str) -> Option<ToolInfo<'_>> {
        let t = &self.tools[*self.by_name.get(name)?];
        Some(ToolInfo {
            tier: t.tier,
            irreversible: t.irreversible,
            dryrun_supported: t.dryrun_supported,
            description: t.description.as_deref(),
            runnable: t.command.is_some(),
        })
    }

    /// How many `[[rules]]` the policy has, for `guardctl policy` to report.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

/// The version of a policy: its files' paths and texts, hashed.
fn version(src: &Sources) -> String {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    for (path, text) in &src.files {
        h.update(path.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    format!("sha256:{}", crate::call::hash::hex(&h.finalize()))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_helpers;
#[cfg(test)]
mod tests_secrets;
#[cfg(test)]
mod tests_shadow;
#[cfg(test)]
mod tests_stdin;
