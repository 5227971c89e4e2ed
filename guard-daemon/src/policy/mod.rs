//! The policy engine: loads a TOML policy, decides each tool call, and for allowed calls
//! produces the [`LaunchPlan`] that the sandbox runs.
//!
//! Loading is two steps, as in youki's `check_seccomp`: [`parse`] reads syntax and types with
//! locations; [`validate`] checks meaning (placeholders, rule targets, regexes) and compiles
//! regexes, globs and templates once. Deciding then runs a fixed pipeline, first decisive stage
//! wins: registry, ceiling, arguments, rules (strictest match), escalation, allow.

mod args;
mod overlap;
mod parse;
mod rules;
mod source;
mod template;
mod validate;

use std::{
    borrow::Cow,
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde_json::Value as Json;

pub(crate) use self::args::normalize;
use self::{
    args::{ArgSpec, ArgValue},
    rules::{Rule, Subject},
    source::{Diag, Sources},
    template::Elem,
};
pub use self::{
    parse::{ArgType, Principal},
    rules::glob_match,
    source::{PolicyError, PolicyErrors},
};
use crate::{
    decision::{Decision, DecisionRow, RiskTier, RowMetadata, Stage},
    detect::{Detector, DetectorSet, Hit},
    intent::Intent,
    plan::{Confinement, Effects, Endpoint, LaunchPlan, OnDivergence},
};

/// Global settings of a policy (`[settings]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub max_allowed_tier: RiskTier,
    pub allow_critical: bool,
    pub escalation_threshold: RiskTier,
    pub allow_unregistered: bool,
    pub disclose_reasons: bool,
    pub clients: Vec<Principal>,
    pub admins: Vec<Principal>,
    pub client_groups: Vec<Principal>,
    pub admin_groups: Vec<Principal>,
    pub socket_group: Option<String>,
    pub run_as: Option<String>,
    /// `[approvals] allow_self`: whether an admin may approve a call of their own uid.
    pub allow_self_approval: bool,
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
            allow_self_approval: false,
        }
    }
}

/// Registry facts about a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolInfo<'a> {
    pub tier: RiskTier,
    pub irreversible: bool,
    /// Informational, as in signet: the tool can be simulated before commit.
    pub dryrun_supported: bool,
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
    pub on_divergence: OnDivergence,
    pub cwd: Option<Elem<PathBuf>>,
    pub env: Vec<(String, Elem<String>)>,
    /// The static part of the confinement; cwd and env are templated per call.
    pub confinement: Confinement,
    /// Indices of the rules whose globs match this tool, in file order.
    pub rules: Vec<usize>,
    /// Detectors whose finds are redacted from this tool's audit rows.
    pub redact: DetectorSet,
}

/// A loaded, checked policy.
#[derive(Debug)]
pub struct Policy {
    settings: Settings,
    tools: Vec<Tool>,
    by_name: HashMap<String, usize>,
    rules: Vec<Rule>,
}

/// The outcome of [`Policy::decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub row: DecisionRow,
    /// The call to run: for an allowed call, and for one held for approval (escalate,
    /// quarantine) whose arguments passed; only for a registered tool that has a command.
    pub plan: Option<LaunchPlan>,
    /// The call's arguments fit for the audit log: every find of a detector of a rule applying
    /// to the tool, and of every secret-class detector, replaced by `[REDACTED:<detector>]`.
    pub redacted_args: Json,
}

impl Policy {
    /// Loads a policy file, or every `*.toml` file of a directory (in name order) merged.
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
        let mut docs = Vec::new();
        for (i, (_, text)) in src.files.iter().enumerate() {
            docs.push(parse::parse_file(&mut d, i, text));
        }
        let mut examples = Vec::new();
        for doc in &mut docs {
            for t in &mut doc.tools {
                for ex in std::mem::take(&mut t.examples) {
                    examples.push((t.name.v.clone(), ex));
                }
            }
        }
        let policy = validate::build(&mut d, docs);
        if !d.errors.is_empty() {
            // Examples of a broken policy would only add noise.
            return Err(PolicyErrors(d.errors));
        }
        Detector::warm_up();
        for (tool, ex) in examples {
            let v = policy.decide(&Intent {
                tool: tool.clone(),
                args: ex.args,
            });
            if v.row.decision != ex.expect.v {
                d.err(
                    &ex.at,
                    &format!("tools.{tool}.examples[{}]", ex.index),
                    format!(
                        "example expects {} but the policy decides {} ({}: {})",
                        ex.expect.v, v.row.decision, v.row.check_name, v.row.reason
                    ),
                );
            }
        }
        if d.errors.is_empty() {
            Ok(policy)
        } else {
            Err(PolicyErrors(d.errors))
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Names of the registered tools, in name order.
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// Where each tool may write, as far as load time can know: (tool, a root it may write
    /// beneath), or (tool, `None`) for a path argument without `within`, which may be anywhere.
    pub fn write_roots(&self) -> Vec<(&str, Option<PathBuf>)> {
        let mut out = Vec::new();
        for t in &self.tools {
            for w in &t.write {
                let reach = match w {
                    Elem::Lit(p) => overlap::Reach::literal(p),
                    Elem::Arg(i) => match t.args.get(*i) {
                        Some(spec) => overlap::Reach::arg(spec),
                        None => overlap::Reach::Anywhere,
                    },
                };
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

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// What the caller (the agent) is told. Generic unless `disclose_reasons`: explaining a
    /// block teaches a model how to massage the call past it, and a reason can carry injected
    /// text back into the model (the MCP quarantine issue).
    pub fn caller_message(&self, v: &Verdict) -> String {
        if self.settings.disclose_reasons {
            return v.row.reason.clone();
        }
        match v.row.decision {
            Decision::Allow => "allowed",
            Decision::Escalate => "requires approval",
            Decision::Quarantine => "quarantined for review",
            Decision::Block => "blocked by policy",
        }
        .to_string()
    }

    /// Decides one call. Pure except for reading the file system to resolve path arguments.
    pub fn decide(&self, intent: &Intent) -> Verdict {
        let name = intent.tool.as_str();
        let Some(&ti) = self.by_name.get(name) else {
            return self.decide_unregistered(intent);
        };
        let tool = &self.tools[ti];
        let redacted_args = redact(&intent.args, tool.redact);
        let meta = |stage| RowMetadata {
            tool: Some(name.to_string()),
            tier: Some(tool.tier),
            stage: Some(stage),
            ..Default::default()
        };
        let verdict = |row: DecisionRow| Verdict {
            row,
            plan: None,
            redacted_args: redacted_args.clone(),
        };

        // 2. ceiling
        let s = &self.settings;
        if tool.tier > s.max_allowed_tier {
            return verdict(row(
                "tool_call_inspector",
                Decision::Block,
                format!(
                    "tool '{name}' tier {} exceeds max_allowed_tier {}",
                    tool.tier, s.max_allowed_tier
                ),
                meta(Stage::Ceiling),
            ));
        }
        if tool.tier == RiskTier::Critical && !s.allow_critical {
            return verdict(row(
                "tool_call_inspector",
                Decision::Block,
                format!("tool '{name}' tier CRITICAL requires allow_critical"),
                meta(Stage::Ceiling),
            ));
        }

        // 3. arguments
        let vals = match args::check(&tool.args, &intent.args) {
            Ok(v) => v,
            Err(e) => {
                let mut m = meta(Stage::Arguments);
                m.arg = Some(e.arg);
                return verdict(row(
                    "argument_validator",
                    Decision::Block,
                    format!("tool '{name}': {}", e.reason),
                    m,
                ));
            }
        };

        // A call held for a human carries the plan it will run if approved, so the approver
        // sees exactly that, and nothing is decided again after the wait.
        let held = |row: DecisionRow| Verdict {
            plan: matches!(row.decision, Decision::Escalate | Decision::Quarantine)
                .then(|| tool.command.as_ref().map(|cmd| plan(tool, cmd, &vals)))
                .flatten(),
            row,
            redacted_args: redacted_args.clone(),
        };

        // 4. rules, over the checked values (a path as resolved, not as written)
        if !tool.rules.is_empty() {
            let subjects: Vec<Subject> = tool
                .args
                .iter()
                .zip(&vals)
                .filter_map(|(spec, v)| {
                    v.as_ref().map(|v| Subject {
                        arg: &spec.name,
                        text: v.text(),
                    })
                })
                .collect();
            if let Some(v) =
                self.apply_rules(tool.rules.iter().copied(), &subjects, || meta(Stage::Rules))
            {
                return held(v);
            }
        }

        // 5. escalation
        if tool.irreversible && tool.tier >= s.escalation_threshold {
            return held(row(
                "tool_call_inspector",
                Decision::Escalate,
                format!(
                    "tool '{name}' is irreversible ({}); requires human approval",
                    tool.tier
                ),
                meta(Stage::Escalation),
            ));
        }

        // 6. allow
        let plan = tool.command.as_ref().map(|cmd| plan(tool, cmd, &vals));
        Verdict {
            row: row(
                "tool_call_inspector",
                Decision::Allow,
                format!("tool '{name}' allowed ({})", tool.tier),
                meta(Stage::Allow),
            ),
            plan,
            redacted_args,
        }
    }

    fn decide_unregistered(&self, intent: &Intent) -> Verdict {
        let name = intent.tool.as_str();
        let applying: Vec<usize> = (0..self.rules.len())
            .filter(|&i| self.rules[i].applies_to(name))
            .collect();
        let set = applying.iter().fold(DetectorSet::SECRET_CLASS, |acc, &i| {
            acc.union(self.rules[i].detect)
        });
        let redacted_args = redact(&intent.args, set);
        let meta = |stage| RowMetadata {
            tool: Some(name.to_string()),
            stage: Some(stage),
            ..Default::default()
        };
        let verdict = |row| Verdict {
            row,
            plan: None,
            redacted_args: redacted_args.clone(),
        };
        if !self.settings.allow_unregistered {
            return verdict(row(
                "tool_call_inspector",
                Decision::Block,
                format!("tool '{name}' not in registry"),
                meta(Stage::Registry),
            ));
        }
        if let Some((k, _)) = intent
            .args
            .iter()
            .find(|(k, v)| k.contains('\0') || args::has_nul(v))
        {
            let mut m = meta(Stage::Arguments);
            m.arg = Some(k.clone());
            return verdict(row(
                "argument_validator",
                Decision::Block,
                format!("tool '{name}': argument contains a NUL byte"),
                m,
            ));
        }
        let mut subjects = Vec::new();
        for (k, v) in &intent.args {
            strings(v, &mut |s| {
                subjects.push(Subject {
                    arg: k,
                    text: Cow::Borrowed(s),
                })
            });
        }
        if let Some(v) = self.apply_rules(applying.into_iter(), &subjects, || meta(Stage::Rules)) {
            return verdict(v);
        }
        // Allowed to be asked about, but it has no command: nothing can run it.
        verdict(row(
            "tool_call_inspector",
            Decision::Allow,
            format!("tool '{name}' not in registry; allowed by allow_unregistered, without a plan"),
            meta(Stage::Allow),
        ))
    }

    /// The strictest matching rule (the first in file order among equals), as a row.
    fn apply_rules(
        &self,
        rules: impl Iterator<Item = usize>,
        subjects: &[Subject],
        meta: impl Fn() -> RowMetadata,
    ) -> Option<DecisionRow> {
        let mut best: Option<(&Rule, Option<&str>)> = None;
        for i in rules {
            let r = &self.rules[i];
            if best.is_some_and(|(b, _)| b.action >= r.action) {
                continue;
            }
            if let Some(arg) = r.matches(subjects) {
                best = Some((r, arg));
                if r.action == Decision::Block {
                    break;
                }
            }
        }
        let (r, arg) = best?;
        let mut m = meta();
        m.rule = Some(r.id.clone());
        m.arg = arg.map(str::to_string);
        Some(row(
            &format!("rule:{}", r.id),
            r.action,
            r.message.clone(),
            m,
        ))
    }
}

fn row(check: &str, decision: Decision, reason: String, metadata: RowMetadata) -> DecisionRow {
    DecisionRow {
        check_name: check.to_string(),
        decision,
        reason,
        metadata,
    }
}

fn plan(tool: &Tool, cmd: &[Elem<String>], vals: &[Option<ArgValue>]) -> LaunchPlan {
    let paths = |list: &[Elem<PathBuf>]| {
        list.iter()
            .filter_map(|e| template::path(e, vals))
            .collect()
    };
    let mut confinement = tool.confinement.clone();
    confinement.cwd = tool.cwd.as_ref().and_then(|c| template::path(c, vals));
    confinement.env = tool
        .env
        .iter()
        .filter_map(|(k, e)| template::text(e, vals).map(|v| (k.clone(), v)))
        .collect();
    LaunchPlan {
        tool: tool.name.clone(),
        argv: template::argv(cmd, vals),
        effects: Effects {
            read: paths(&tool.read),
            write: paths(&tool.write),
            exec: paths(&tool.exec),
            connect: tool
                .connect
                .iter()
                .filter_map(|e| template::endpoint(e, vals))
                .collect(),
            unix: tool.unix,
            on_divergence: tool.on_divergence,
            beneath: beneath(tool, vals),
        },
        confinement,
    }
}

/// The `within` root of each effect path that comes from a path argument (see
/// `Effects::beneath`).
fn beneath(tool: &Tool, vals: &[Option<ArgValue>]) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for e in tool.read.iter().chain(&tool.write).chain(&tool.exec) {
        let Elem::Arg(i) = e else { continue };
        let (Some(spec), Some(Some(ArgValue::Path(p)))) = (tool.args.get(*i), vals.get(*i)) else {
            continue;
        };
        if let Some(root) = spec.within.iter().find(|r| p.starts_with(r)) {
            out.push((p.clone(), root.clone()));
        }
    }
    out
}

/// Every string inside a JSON value, keys excluded.
fn strings<'a>(v: &'a Json, f: &mut impl FnMut(&'a str)) {
    match v {
        Json::String(s) => f(s),
        Json::Array(a) => a.iter().for_each(|x| strings(x, f)),
        Json::Object(m) => m.values().for_each(|x| strings(x, f)),
        _ => {}
    }
}

/// A copy of `args` with the finds of `set` replaced by `[REDACTED:<detector>]`.
fn redact(args: &serde_json::Map<String, Json>, set: DetectorSet) -> Json {
    fn walk(v: &Json, set: DetectorSet, hits: &mut Vec<Hit>) -> Json {
        match v {
            Json::String(s) => Json::String(redact_str(s, set, hits)),
            Json::Array(a) => Json::Array(a.iter().map(|x| walk(x, set, hits)).collect()),
            Json::Object(m) => Json::Object(
                m.iter()
                    .map(|(k, x)| (redact_str(k, set, hits), walk(x, set, hits)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut hits = Vec::new();
    Json::Object(
        args.iter()
            .map(|(k, v)| (redact_str(k, set, &mut hits), walk(v, set, &mut hits)))
            .collect(),
    )
}

fn redact_str(s: &str, set: DetectorSet, hits: &mut Vec<Hit>) -> String {
    hits.clear();
    for d in set.iter() {
        d.find(s, hits);
    }
    if hits.is_empty() {
        return s.to_string();
    }
    // Overlapping finds merge into one redaction named by the earliest.
    hits.sort_by_key(|h| (h.range.start, std::cmp::Reverse(h.range.end)));
    let mut out = String::with_capacity(s.len());
    let mut pos = 0;
    for h in hits.iter() {
        if h.range.end <= pos {
            continue;
        }
        let start = h.range.start.max(pos);
        out.push_str(&s[pos..start]);
        if start == h.range.start {
            out.push_str("[REDACTED:");
            out.push_str(h.detector.name());
            out.push(']');
        }
        pos = h.range.end;
    }
    out.push_str(&s[pos..]);
    out
}

#[cfg(test)]
mod tests;
