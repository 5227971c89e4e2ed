//! Meaning: turns the raw items of every file into one compiled policy, checking what only
//! makes sense together: duplicates, placeholders, rule targets, regexes, contradictions.

mod arg;
mod confinement;
mod helpers;
mod shebang;
mod tool;

use std::collections::HashMap;

use regex::Regex;

use super::{
    Policy, Settings, Tool,
    helpers::{Approver, Judge},
    raw::{
        RawAgent, RawApprover, RawDoc, RawHelper, RawJudge, RawRule, RawSecret, RawSettings,
        RawTool, RawWorkspaces,
    },
    rules::{Rule, glob_match, is_glob},
    source::{Diag, Loc, S},
};
use crate::{
    call::{decision::RiskTier, plan::Enforce},
    policy::detect::DetectorSet,
};

/// `s` compiled to match a whole value, not a part of it; `None` after reporting why it is no
/// regex, with the last line of the regex crate's message (the line that says what is wrong).
fn anchored(d: &mut Diag, s: &S<String>, key: &str) -> Option<Regex> {
    match Regex::new(&format!("^(?:{})$", s.v)) {
        Ok(r) => Some(r),
        Err(e) => {
            let msg = e.to_string();
            let last = msg
                .lines()
                .last()
                .unwrap_or("invalid regex")
                .trim()
                .to_string();
            d.err(&s.at, key, format!("bad regex: {last}"));
            None
        }
    }
}

/// Compiles the raw documents of every file into one policy, reporting into `d`.
pub(crate) fn build(d: &mut Diag, mut docs: Vec<RawDoc>) -> Policy {
    let secrets: Vec<RawSecret> = docs
        .iter_mut()
        .flat_map(|doc| std::mem::take(&mut doc.secrets))
        .collect();
    let Merged {
        mut settings,
        tools: raw_tools,
        rules: raw_rules,
        judges: raw_judges,
        approvers: raw_approvers,
        notify,
        default_judges,
        agents,
    } = merge(d, docs);
    let agents = super::agents::agents(d, agents);
    let secrets = super::secrets::secrets(d, &secrets);
    let judges = helpers::judges(d, &raw_judges);
    settings.notify = notify.map(|n| helpers::helper(d, "approvals.notify", &n));
    let defaults: Vec<usize> = default_judges
        .iter()
        .filter_map(|j| helpers::judge_index(d, &judges, j, "settings.judges"))
        .collect();
    let mut tools = compile_tools(d, &raw_tools, &settings, &judges, &defaults);
    // Any tool's writes against every tool's programs, its own included.
    let writers: Vec<_> = raw_tools
        .iter()
        .zip(&tools)
        .filter(|(w, _)| !w.effects.write.is_empty())
        .collect();
    for (runner, r) in raw_tools.iter().zip(&tools) {
        for &(writer, w) in &writers {
            let roots = &settings.workspaces;
            tool::exec_not_writable(d, (runner, &r.args), (writer, &w.args), roots);
        }
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let approvers: Vec<Approver> = raw_approvers
        .iter()
        .filter_map(|a| helpers::approver(d, a, &judges, &names))
        .collect();
    let mut rules: Vec<Rule> = Vec::new();
    for r in raw_rules {
        let r = rule(d, r, &tools, &rules);
        rules.push(r);
    }
    link(&mut tools, &rules);
    super::secrets::check_tools(d, &raw_tools, &tools, &secrets);
    let by_name = tools
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect::<HashMap<_, _>>();
    Policy {
        settings,
        tools,
        by_name,
        rules,
        judges,
        approvers,
        agents,
        masks: super::secrets::mask::Masks::new(&secrets).map(std::sync::Arc::new),
        secrets,
        version: String::new(),
        origin: super::Origin::default(),
    }
}

/// Each tool compiled, with what the settings give every tool (its user, the protected names)
/// and its judges.
fn compile_tools(
    d: &mut Diag,
    raw_tools: &[RawTool],
    settings: &Settings,
    judges: &[Judge],
    defaults: &[usize],
) -> Vec<Tool> {
    let mut tools = Vec::new();
    for t in raw_tools {
        let mut compiled = tool::tool(d, t);
        compiled.protected.clone_from(&settings.protected);
        // `[settings] run_as` is every tool's user unless the tool names its own.
        if compiled.confinement.run_as.is_none() {
            compiled.confinement.run_as.clone_from(&settings.run_as);
        }
        if compiled.confinement.run_as.as_deref() == Some(crate::call::plan::RUN_AS_OWNER) {
            compiled.in_workspace = true;
        }
        if let Some(c) = t.capabilities.first()
            && compiled.confinement.run_as.as_deref() != Some("root")
        {
            let msg = "only a tool run as root (run_as = \"root\") keeps capabilities; \
                       another user has none";
            d.err(&c.at, &format!("tools.{}.capabilities", t.name.v), msg);
        }
        if compiled.in_workspace && settings.workspaces.is_empty() {
            let msg = "works in a workspace ({workspace}, {cwd} or run_as = \"owner\"), and \
                       the policy declares no [workspaces] roots";
            d.err(&t.name.at, &format!("tools.{}", t.name.v), msg);
        }
        compiled.judges = tool_judges(d, t, judges, defaults);
        compiled.enforce = enforce(d, t, &compiled, settings.enforce);
        tools.push(compiled);
    }
    tools
}

/// A tool's mode: its own `enforce`, else the settings'. Some tools are enforced whatever the
/// settings say, and may not ask for shadow (see [`never_in_shadow`]).
fn enforce(d: &mut Diag, t: &RawTool, tool: &Tool, settings: Enforce) -> Enforce {
    let never = never_in_shadow(tool);
    let Some(own) = &t.enforce else {
        return if never.is_none() {
            settings
        } else {
            Enforce::Enforce
        };
    };
    if let (Enforce::Shadow, Some(why)) = (own.v, never) {
        d.err(&own.at, &format!("tools.{}.enforce", t.name.v), why);
    }
    own.v
}

/// Why `tool` cannot run in shadow, if it cannot: a secret's value stays on the secret's hosts
/// only by the kernel's hold on where the call connects; root can leave its cgroup (and with
/// it the kernel's watch, its limits and its timeout) and write guard's own files; the owner of
/// a workspace can write the developer's other repositories, whose hooks and config only the
/// mount view keeps (attack39).
fn never_in_shadow(tool: &Tool) -> Option<&'static str> {
    if !tool.secret_env.is_empty() {
        return Some(
            "a tool given a secret cannot run in shadow: the kernel's hold on where it \
             connects is what keeps the secret on its hosts",
        );
    }
    match tool.confinement.run_as.as_deref() {
        Some("root") => Some(
            "a tool that runs as root cannot run in shadow: without landlock and the mount \
             view it could leave its cgroup, and the kernel's watch of it",
        ),
        Some(crate::call::plan::RUN_AS_OWNER) => Some(
            "a tool that runs as its workspace's owner cannot run in shadow: without the mount \
             view it could write the hooks and config of the owner's other repositories",
        ),
        _ => None,
    }
}

/// A tool's judges: its own list, else the defaults of `[settings] judges`, none with
/// `skip_judge` (which may not come with a list of its own).
fn tool_judges(d: &mut Diag, t: &RawTool, judges: &[Judge], defaults: &[usize]) -> Vec<usize> {
    let key = format!("tools.{}.judges", t.name.v);
    match (&t.judges, &t.skip_judge) {
        (Some(_), Some(s)) if s.v => {
            let msg = "skip_judge = true with a list of judges: say one or the other";
            d.err(&s.at, &format!("tools.{}.skip_judge", t.name.v), msg);
            Vec::new()
        }
        (_, Some(s)) if s.v => Vec::new(),
        (Some(list), _) => list
            .iter()
            .filter_map(|j| helpers::judge_index(d, judges, j, &key))
            .collect(),
        (None, _) => defaults.to_vec(),
    }
}

/// Every file's items, as one.
struct Merged {
    settings: Settings,
    tools: Vec<RawTool>,
    rules: Vec<RawRule>,
    judges: Vec<RawJudge>,
    approvers: Vec<RawApprover>,
    notify: Option<RawHelper>,
    default_judges: Vec<S<String>>,
    agents: Vec<RawAgent>,
}

/// The files as one: `[settings]` and `[approvals]` from the one file that gives each, every
/// tool (a name defined twice is an error, so no file silently overrides another), every rule,
/// judge and approver, in file order.
fn merge(d: &mut Diag, docs: Vec<RawDoc>) -> Merged {
    let mut settings = Settings::default();
    let mut settings_at: Option<Loc> = None;
    let mut approvals_at: Option<Loc> = None;
    let mut workspaces_at: Option<Loc> = None;
    let mut tools: Vec<RawTool> = Vec::new();
    let mut rules = Vec::new();
    let mut judges = Vec::new();
    let mut approvers = Vec::new();
    let mut notify = None;
    let mut default_judges = Vec::new();
    let mut agents = Vec::new();
    for doc in docs {
        agents.extend(doc.agents);
        if let Some(mut s) = doc.settings {
            if let Some(first) = &settings_at {
                let (p, _) = &d.src.files[first.file];
                let msg = format!("settings are already given in {}", p.display());
                d.err(&s.at, "settings", msg);
            } else {
                settings_at = Some(s.at.clone());
                default_judges = std::mem::take(&mut s.judges);
                apply_settings(d, &mut settings, s);
            }
        }
        judges.extend(doc.judges);
        approvers.extend(doc.approvers);
        if let Some(a) = doc.approvals {
            if approvals_at.is_some() {
                d.err(
                    &a.at,
                    "approvals",
                    "approvals are already given in another file",
                );
            } else {
                approvals_at = Some(a.at.clone());
                settings.allow_self_approval = a.allow_self.is_some_and(|b| b.v);
                notify = a.notify;
            }
        }
        if let Some(w) = doc.workspaces {
            if workspaces_at.is_some() {
                let msg = "workspaces are already given in another file";
                d.err(&w.at, "workspaces", msg);
            } else {
                workspaces_at = Some(w.at.clone());
                workspaces(d, &mut settings, &w);
            }
        }
        for t in doc.tools {
            if let Some(first) = tools.iter().find(|x| x.name.v == t.name.v) {
                let (p, _) = &d.src.files[first.name.at.file];
                let e = d.src.error(&first.name.at, "", "");
                let msg = format!(
                    "tool '{}' is already defined at {}:{}",
                    t.name.v,
                    p.display(),
                    e.position.map_or(0, |p| p.0)
                );
                d.err(&t.name.at, &format!("tools.{}", t.name.v), msg);
            } else {
                tools.push(t);
            }
        }
        rules.extend(doc.rules);
    }
    Merged {
        settings,
        tools,
        rules,
        judges,
        approvers,
        notify,
        default_judges,
        agents,
    }
}

/// `[workspaces]`: its roots and, when given, its protected names.
fn workspaces(d: &mut Diag, settings: &mut Settings, w: &RawWorkspaces) {
    settings.workspaces = w
        .roots
        .iter()
        .filter_map(|r| workspace_root(d, r))
        .collect();
    settings.protected = w.protected.as_ref().map(|names| {
        names
            .iter()
            .filter(|n| {
                let bad = crate::sandbox::protected::invalid(&n.v);
                if let Some(why) = bad {
                    d.err(&n.at, "workspaces.protected", why);
                }
                bad.is_none()
            })
            .map(|n| n.v.clone())
            .collect()
    });
}

/// A `[workspaces] roots` entry: absolute, without `.` or `..`, each component a name or a
/// glob; its components up to the first glob, where they exist, are the real path (no
/// symlink: a caller's working directory is compared as the kernel resolves it).
fn workspace_root(d: &mut Diag, r: &S<String>) -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let text = r.v.trim_end_matches('/');
    let path = Path::new(text);
    let plain = text
        .split('/')
        .skip(1)
        .all(|c| !matches!(c, "" | "." | ".."));
    if !text.starts_with('/') || !plain {
        let msg = "must be an absolute path below /, without . or ..";
        d.err(&r.at, "workspaces.roots", msg);
        return None;
    }
    let literal: PathBuf = path
        .components()
        .take_while(|c| !is_glob(&c.as_os_str().to_string_lossy()))
        .collect();
    if let Ok(real) = std::fs::canonicalize(&literal)
        && real != literal
    {
        let msg = format!(
            "{} goes through a symlink to {}: name the real path",
            literal.display(),
            real.display()
        );
        d.err(&r.at, "workspaces.roots", msg);
        return None;
    }
    Some(path.to_path_buf())
}

/// `[settings]` over the defaults; a key not given keeps its default.
fn apply_settings(d: &mut Diag, settings: &mut Settings, s: RawSettings) {
    if let Some(t) = &s.max_allowed_tier {
        settings.max_allowed_tier = t.v;
    }
    if let Some(t) = &s.escalation_threshold {
        settings.escalation_threshold = t.v;
    }
    if let Some(b) = &s.allow_critical {
        settings.allow_critical = b.v;
        if b.v && settings.max_allowed_tier < RiskTier::Critical {
            d.err(
                &b.at,
                "settings.allow_critical",
                "has no effect unless max_allowed_tier = \"critical\"",
            );
        }
    }
    settings.allow_unregistered = s.allow_unregistered.unwrap_or(false);
    settings.disclose_reasons = s.disclose_reasons.unwrap_or(false);
    settings.clients = s.clients;
    settings.admins = s.admins;
    settings.client_groups = s.client_groups;
    settings.admin_groups = s.admin_groups;
    settings.socket_group = s.socket_group;
    settings.run_as = s.run_as;
    settings.enforce = s.enforce.map(|e| e.v).unwrap_or_default();
}

/// Compiles rule `r`, given the compiled tools and the rules before it: a rule that can never
/// match (no such tool, no such argument) is an error rather than a protection that is not there.
fn rule(d: &mut Diag, r: RawRule, tools: &[Tool], before: &[Rule]) -> Rule {
    let key = |k: &str| format!("rules[{}].{k}", r.index);
    if before.iter().any(|x| x.id == r.id.v) {
        d.err(
            &r.id.at,
            &key("id"),
            format!("duplicate rule id '{}'", r.id.v),
        );
    }
    for g in &r.tools {
        if !tools.iter().any(|t| glob_match(&g.v, &t.name)) {
            let what = if is_glob(&g.v) { "glob" } else { "tool" };
            d.err(
                &g.at,
                &key("tools"),
                format!("{what} '{}' matches no tool of the policy", g.v),
            );
        }
    }
    let known = |a: &S<String>| {
        r.tools.is_empty()
            || (tools.iter())
                .filter(|t| r.tools.iter().any(|g| glob_match(&g.v, &t.name)))
                .any(|t| t.args.iter().any(|s| s.name == a.v))
    };
    let unknown = |a: &S<String>| format!("no tool this rule applies to has an argument '{}'", a.v);
    if let Some(a) = r.arg.as_ref().filter(|a| !known(a)) {
        d.err(&a.at, &key("arg"), unknown(a));
    }
    let mut when = Vec::new();
    for c in &r.when {
        let key = |k: &str| format!("rules[{}].when[{}].{k}", r.index, c.index);
        // Its missing `arg` is reported where it was parsed.
        let Some(arg) = c.arg.as_ref() else { continue };
        if !known(arg) {
            d.err(&arg.at, &key("arg"), unknown(arg));
        }
        when.push(crate::policy::rules::Condition {
            arg: arg.v.clone(),
            regex: c.regex.as_ref().and_then(|s| anchored(d, s, &key("regex"))),
            equals: c.equals.as_ref().map(|e| e.v.clone()),
            detect: c.detect.iter().map(|x| x.v).collect(),
        });
    }
    let regex = r.regex.as_ref().and_then(|s| anchored(d, s, &key("regex")));
    let message = r
        .message
        .unwrap_or_else(|| format!("rule '{}' matched", r.id.v));
    Rule {
        id: r.id.v,
        tools: r.tools.into_iter().map(|g| g.v).collect(),
        arg: r.arg.map(|a| a.v),
        regex,
        equals: r.equals.map(|e| e.v),
        detect: r.detect.into_iter().map(|x| x.v).collect(),
        when,
        action: r.action.v,
        message,
    }
}

/// Gives each tool the rules that apply to it, and redacts from its audit rows what those
/// rules detect: a rule that looks for a secret marks it as one.
fn link(tools: &mut [Tool], rules: &[Rule]) {
    for t in tools {
        t.rules = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.applies_to(&t.name))
            .map(|(i, _)| i)
            .collect();
        t.redact = t.rules.iter().fold(DetectorSet::SECRET_CLASS, |acc, &i| {
            acc.union(rules[i].detectors())
        });
    }
}
