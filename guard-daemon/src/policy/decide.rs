//! Deciding one call: the fixed pipeline of stages, first decisive stage wins, and for a call
//! that may run, the [`LaunchPlan`] built from the tool's templates.

use std::{borrow::Cow, path::PathBuf};

use serde_json::Value as Json;

use super::{
    Policy, Tool, ToolStdin, Verdict,
    args::{self, ArgValue},
    redact::{all_texts, redact, strings},
    rules::{Rule, Subject},
    template::{self, Elem, Values},
    workspace::Place,
};
use crate::{
    call::{
        decision::{Decision, DecisionRow, RiskTier, RowMetadata, Stage},
        intent::Intent,
        plan::{Effects, LaunchPlan, Stdin},
    },
    policy::detect::DetectorSet,
};

/// A call's arguments, checked, aligned with its tool's.
type Checked = Vec<Option<ArgValue>>;

/// The `check_name` of a call whose arguments do not fit its tool's form (`args::ArgError`):
/// an argument missing, unknown, of the wrong type... What breaks a constraint of the policy's
/// (a pattern, `within`, a host) is `argument_validator`.
pub const ARGUMENT_FORM: &str = "argument_form";

/// The checks whose reasons the caller hears whatever `disclose_reasons` says: what it sent or
/// where it called from does not fit (its working directory in no workspace, none at all; an
/// argument missing, unknown or of the wrong type), its caller's stdin, its agent, its
/// workspace's own policy (the workspace owner's file). None names a rule or a constraint.
pub const TOLD: &[&str] = &[
    "workspace",
    ARGUMENT_FORM,
    // `review::STDIN_CHECK` and `callers::agents::CHECK`, which live above this module (a
    // test there holds them to these).
    "stdin",
    "agent",
    crate::policy::project::CHECK,
    NO_COMMAND,
];

/// The check of an `exec` of a tool the policy gives no command: it can be decided (`check`,
/// a hook) but nothing can run it. Told to the caller: it is the policy's mistake, not a rule.
pub const NO_COMMAND: &str = "no_command";

impl Policy {
    /// What the caller (the agent) is told. Generic unless `disclose_reasons`: explaining a
    /// block teaches a model how to massage the call past it, and a reason can carry injected
    /// text back into the model (the MCP quarantine issue).
    /// A quarantined call's caller hears `held for review` whatever `disclose_reasons` says:
    /// the reason names what the DLP found, and is the audit row's alone. A setup mistake is
    /// told whatever it says (`TOLD`): the caller needs to know what to change, and it says
    /// nothing of the policy's rules. Every other reason its owner reads with `guardctl why`.
    pub fn caller_message(&self, v: &Verdict) -> String {
        let told = TOLD.contains(&v.row.check_name.as_str());
        if (self.settings.disclose_reasons || told) && v.row.decision != Decision::Quarantine {
            return v.row.reason.clone();
        }
        match v.row.decision {
            Decision::Allow => "allowed",
            Decision::Escalate => "requires approval",
            Decision::Quarantine => "held for review",
            Decision::Block => "blocked by policy",
        }
        .to_string()
    }

    /// Decides one call. Pure except for reading the file system to resolve path arguments.
    /// Under a workspace's own policy (`project`), a call that policy refuses is blocked
    /// first, and the row names the project file either way.
    pub fn decide(&self, intent: &Intent) -> Verdict {
        let mut verdict = self
            .project_gate(intent)
            .unwrap_or_else(|| self.shadowed(intent, self.pipeline(intent)));
        self.name_project(&mut verdict.row);
        verdict
    }

    /// The fixed pipeline of stages, first decisive stage wins.
    fn pipeline(&self, intent: &Intent) -> Verdict {
        let name = intent.tool.as_str();
        // 1. registry
        let Some(&ti) = self.by_name.get(name) else {
            return self.decide_unregistered(intent);
        };
        let tool = &self.tools[ti];
        let redacted_args = self.without_secrets(redact(&intent.args, tool.redact));
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

        // 2. no secret's value in an argument: the agent holds what it must never see. Found
        // first, so that no later stage's reason can carry the value.
        let secret = self.carries_secret(intent, meta(Stage::Secret));

        // 2. ceiling
        if let Some(reason) = self.above_ceiling(tool) {
            let block = row(
                "tool_call_inspector",
                Decision::Block,
                reason,
                meta(Stage::Ceiling),
            );
            return verdict(secret.unwrap_or(block));
        }

        // 3. where it works, and its arguments
        let (place, vals) = match Self::arguments(tool, intent, self, &meta) {
            Ok(checked) => checked,
            Err(row) => return verdict(secret.unwrap_or(*row)),
        };
        let ctx = place.as_ref().map(Place::context).unwrap_or_default();

        // A call held for a human carries the plan it will run if approved, so the approver
        // sees exactly that, and nothing is decided again after the wait.
        let values = Values { args: &vals, ctx };
        let owner = place.as_ref().and_then(|p| p.owner.as_deref());
        let held = |row: DecisionRow| Verdict {
            plan: matches!(row.decision, Decision::Escalate | Decision::Quarantine)
                .then(|| {
                    tool.command
                        .as_ref()
                        .map(|cmd| plan(tool, cmd, &values, owner))
                })
                .flatten(),
            row,
            redacted_args: redacted_args.clone(),
        };

        // 4. no secret's value in an argument (found at 2): held as any quarantine is, so that
        // what matched tells the caller no more than that something did. Its approval is
        // refused (`review::answer::barred`): nothing runs with it.
        if let Some(row) = secret {
            return held(row);
        }

        // 5. rules
        if let Some(v) = self.tool_rules(tool, &vals, || meta(Stage::Rules)) {
            return held(v);
        }

        // 6. escalation
        if tool.irreversible && tool.tier >= self.settings.escalation_threshold {
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

        // 7. allow
        let plan = tool
            .command
            .as_ref()
            .map(|cmd| plan(tool, cmd, &values, owner));
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

    /// Stage 3: where the call works (for a tool in a workspace) and as whom, then its
    /// arguments, whose paths may be taken from there; the row that blocks it otherwise.
    fn arguments(
        tool: &Tool,
        intent: &Intent,
        policy: &Policy,
        meta: &impl Fn(Stage) -> RowMetadata,
    ) -> Result<(Option<Place>, Checked), Box<DecisionRow>> {
        let name = &tool.name;
        let place = Place::of(policy, tool, intent).map_err(|reason| {
            let reason = format!("tool '{name}': {reason}");
            Box::new(row(
                "workspace",
                Decision::Block,
                reason,
                meta(Stage::Arguments),
            ))
        })?;
        let ctx = place.as_ref().map(Place::context).unwrap_or_default();
        let vals = args::check(&tool.args, &intent.args, &ctx).map_err(|e| {
            let mut m = meta(Stage::Arguments);
            m.arg = Some(e.arg);
            let reason = format!("tool '{name}': {}", e.reason);
            let check = if e.form {
                ARGUMENT_FORM
            } else {
                "argument_validator"
            };
            Box::new(row(check, Decision::Block, reason, m))
        })?;
        Ok((place, vals))
    }

    /// `args` with every secret's value masked (`[secret:NAME]`), for the audit log.
    pub(super) fn without_secrets(&self, args: Json) -> Json {
        let Some(masks) = &self.masks else {
            return args;
        };
        masks.mask_json(args)
    }

    /// The first argument of `args` holding a secret's value (whole, or a run of it, in any
    /// form the masks know), and that secret's name.
    pub fn secret_in(&self, args: &serde_json::Map<String, Json>) -> Option<(String, String)> {
        let masks = self.masks.as_ref()?;
        args.iter().find_map(|(k, v)| {
            let mut found = masks.first_in(k).map(str::to_owned);
            all_texts(v, &mut |s| {
                found = found
                    .take()
                    .or_else(|| masks.first_in(s).map(str::to_owned));
            });
            found.map(|n| (k.clone(), n))
        })
    }

    /// The quarantine of a call one of whose arguments holds a secret's value.
    fn carries_secret(&self, intent: &Intent, mut meta: RowMetadata) -> Option<DecisionRow> {
        let (arg, secret) = self.secret_in(&intent.args)?;
        meta.arg = Some(arg.clone());
        let reason = format!(
            "tool '{}': argument '{arg}' holds the value of secret '{secret}'",
            intent.tool
        );
        Some(row("secret", Decision::Quarantine, reason, meta))
    }

    /// Stage 2: why `tool`'s tier is above what the settings allow, if it is.
    pub(super) fn above_ceiling(&self, tool: &Tool) -> Option<String> {
        let (s, name) = (&self.settings, &tool.name);
        if tool.tier > s.max_allowed_tier {
            return Some(format!(
                "tool '{name}' tier {} exceeds max_allowed_tier {}",
                tool.tier, s.max_allowed_tier
            ));
        }
        if tool.tier == RiskTier::Critical && !s.allow_critical {
            return Some(format!(
                "tool '{name}' tier CRITICAL requires allow_critical"
            ));
        }
        None
    }

    /// Stage 4 for a registered tool: its rules, over the checked values (a path as resolved,
    /// not as written, so a rule cannot be dodged by spelling the path another way).
    fn tool_rules(
        &self,
        tool: &Tool,
        vals: &[Option<ArgValue>],
        meta: impl Fn() -> RowMetadata,
    ) -> Option<DecisionRow> {
        if tool.rules.is_empty() {
            return None;
        }
        let subjects: Vec<Subject> = tool
            .args
            .iter()
            .zip(vals)
            .filter_map(|(spec, v)| {
                v.as_ref().map(|v| Subject {
                    arg: &spec.name,
                    text: v.text(),
                })
            })
            .collect();
        self.apply_rules(tool.rules.iter().copied(), &subjects, meta)
    }

    fn decide_unregistered(&self, intent: &Intent) -> Verdict {
        let name = intent.tool.as_str();
        let applying: Vec<usize> = (0..self.rules.len())
            .filter(|&i| self.rules[i].applies_to(name))
            .collect();
        let set = applying.iter().fold(DetectorSet::SECRET_CLASS, |acc, &i| {
            acc.union(self.rules[i].detectors())
        });
        let redacted_args = self.without_secrets(redact(&intent.args, set));
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
        if let Some(row) = self.carries_secret(intent, meta(Stage::Secret)) {
            return verdict(row);
        }
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

pub(super) fn row(
    check: &str,
    decision: Decision,
    reason: String,
    metadata: RowMetadata,
) -> DecisionRow {
    DecisionRow {
        check_name: check.to_string(),
        decision,
        reason,
        metadata,
    }
}

/// The plan of an allowed (or held) call: the tool's templates filled with `vals`, run as
/// `owner` when the tool runs as its workspace's owner.
pub(super) fn plan(
    tool: &Tool,
    cmd: &[Elem<String>],
    vals: &Values,
    owner: Option<&str>,
) -> LaunchPlan {
    let paths = |list: &[Elem<PathBuf>]| {
        list.iter()
            .filter_map(|e| template::path(e, vals))
            .collect()
    };
    let mut confinement = tool.confinement.clone();
    if let Some(owner) = owner {
        confinement.run_as = Some(owner.to_owned());
    }
    confinement.cwd = tool.cwd.as_ref().and_then(|c| template::path(c, vals));
    confinement.env = tool
        .env
        .iter()
        .filter_map(|(k, e)| template::text(e, vals).map(|v| (k.clone(), v)))
        .collect();
    confinement.secret_env.clone_from(&tool.secret_env);
    confinement.stdin = match tool.stdin {
        ToolStdin::Passed => Stdin::Passed,
        ToolStdin::Caller => Stdin::Caller,
        // An optional input the call left out is an empty one: the policy said it may be.
        ToolStdin::Arg(i) => Stdin::Input(match vals.args.get(i) {
            Some(Some(v)) => v.text().into_owned(),
            _ => String::new(),
        }),
    };
    let mut write: Vec<PathBuf> = paths(&tool.write);
    if tool.tmp {
        let tmp = crate::sandbox::tmp::fresh();
        write.push(tmp.clone());
        if !confinement.env.iter().any(|(k, _)| k == "TMPDIR") {
            let value = tmp.to_string_lossy().into_owned();
            confinement.env.push(("TMPDIR".to_owned(), value));
        }
        confinement.tmp = Some(tmp);
    }
    let mut exec: Vec<PathBuf> = paths(&tool.exec);
    if tool.exec_writes {
        exec.extend(write.iter().cloned());
    }
    LaunchPlan {
        tool: tool.name.clone(),
        argv: template::argv(cmd, vals),
        effects: Effects {
            read: paths(&tool.read),
            write,
            exec,
            connect: tool
                .connect
                .iter()
                .filter_map(|e| template::endpoint(e, vals))
                .collect(),
            unix: tool.unix,
            on_divergence: tool.on_divergence,
            beneath: beneath(tool, vals),
            protected: tool.protected.clone(),
        },
        confinement,
        enforce: tool.enforce,
    }
}

/// The `within` root of each effect path that comes from a path argument (see
/// `Effects::beneath`).
fn beneath(tool: &Tool, vals: &Values) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for e in tool.read.iter().chain(&tool.write).chain(&tool.exec) {
        let Elem::Arg(i) = e else { continue };
        let (Some(spec), Some(Some(ArgValue::Path(p)))) = (tool.args.get(*i), vals.args.get(*i))
        else {
            continue;
        };
        let root = spec
            .within
            .iter()
            .filter_map(|r| args::root(r, &vals.ctx))
            .find(|r| p.starts_with(r));
        if let Some(root) = root {
            out.push((p.clone(), root));
        }
    }
    out
}
