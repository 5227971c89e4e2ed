//! The merge: the base policy's files parsed again from the texts it was loaded from (never
//! from disk, which may have changed since), the project's items checked against them, and
//! the whole compiled as one policy by the base policy's own `validate`, so a merged policy
//! is checked exactly as a base one is (placeholders, programs the call may write, rules'
//! targets), then the project's examples decided under it.

use std::{path::Path, sync::Arc};

use super::{
    super::Origin,
    ProjectInfo,
    file::ProjectFile,
    narrow,
    parse::{self as project_parse, ProjectDoc},
};
use crate::{
    call::decision::RiskTier,
    policy::{
        Policy, PolicyErrors, parse,
        raw::{RawApprover, RawDoc, RawExample, RawRule, RawSettings},
        rules::glob_match,
        source::{Diag, Loc, Sources},
        validate, version,
    },
};

/// `base` with `file`, the project policy of workspace `ws`, merged in; every error of the
/// project file otherwise.
pub(super) fn merged(base: &Policy, ws: &Path, file: &ProjectFile) -> Result<Policy, PolicyErrors> {
    let mut src = Sources::default();
    for (path, text) in base.origin.files.iter() {
        src.add(path.clone(), text.clone());
    }
    let at = src.add(file.path.clone(), file.text.clone());
    let mut d = Diag::new(&src);
    let docs: Vec<RawDoc> = parse::documents(&mut d, &src.files[..at]);
    let project = project_parse::parse(&mut d, at, &file.text);
    check(&mut d, base, ws, &docs, &project);
    if !d.errors.is_empty() {
        return Err(PolicyErrors(d.errors));
    }
    let removed: Vec<String> = project.remove.iter().map(|r| r.v.clone()).collect();
    let restated: Vec<String> = project.tools.iter().map(|t| t.name.v.clone()).collect();
    let (docs, examples) = combine(docs, project, at);
    let mut policy = validate::build(&mut d, docs);
    // A workspace with its own policy runs every tool enforced: in shadow its refusals would be
    // let through (attack39), and what it narrowed would not hold in the kernel.
    for tool in &mut policy.tools {
        tool.enforce = crate::call::plan::Enforce::Enforce;
    }
    policy.version = version(&src);
    policy.origin = Origin {
        files: Arc::clone(&base.origin.files),
        project: Some(Arc::new(ProjectInfo {
            path: file.path.clone(),
            sha256: file.sha256.clone(),
            removed,
            restated,
            barred: None,
        })),
    };
    policy.examined(d, examples)
}

/// The tightening checks of everything the project says against the base's `docs`.
fn check(d: &mut Diag, base: &Policy, ws: &Path, docs: &[RawDoc], project: &ProjectDoc) {
    narrow::settings(d, &project.settings, base.settings());
    let default_judges: Vec<String> = docs
        .iter()
        .filter_map(|doc| doc.settings.as_ref())
        .flat_map(|s| s.judges.iter().map(|j| j.v.clone()))
        .collect();
    let base_tool = |name: &str| {
        docs.iter()
            .flat_map(|doc| &doc.tools)
            .find(|t| t.name.v == name)
    };
    for r in &project.remove {
        if base_tool(&r.v).is_none() {
            let msg = format!("'{}' is no tool of the base policy", r.v);
            d.err(&r.at, "tools.remove", msg);
        }
        if let Some(t) = project.tools.iter().find(|t| t.name.v == r.v) {
            let msg = format!("'{}' is both removed and restated", r.v);
            d.err(&t.name.at, &format!("tools.{}", r.v), msg);
        }
    }
    for t in &project.tools {
        match base_tool(&t.name.v) {
            Some(b) => narrow::tool(d, ws, t, b, &default_judges),
            None => {
                let msg = "a new tool: a project policy may only restate the base policy's \
                           tools, narrower, or remove them";
                d.err(&t.name.at, &format!("tools.{}", t.name.v), msg);
            }
        }
    }
    for a in &project.approvers {
        approver(d, a);
    }
    let unregistered = (project.settings.allow_unregistered.as_ref())
        .map_or(base.settings().allow_unregistered, |b| b.v);
    if unregistered {
        kept_for_unregistered(d, docs, project);
    }
}

/// Under `allow_unregistered`, a base rule also decides calls of tools the policy does not
/// define, by its globs: dropping one (or a target of one) with the tools it named would
/// free such calls, so a removal that would is an error.
fn kept_for_unregistered(d: &mut Diag, docs: &[RawDoc], project: &ProjectDoc) {
    let removed: Vec<&str> = project.remove.iter().map(|r| r.v.as_str()).collect();
    let remaining = remaining(docs, &removed);
    for r in docs.iter().flat_map(|doc| &doc.rules) {
        let lost = r
            .tools
            .iter()
            .any(|g| !remaining.iter().any(|(t, _)| glob_match(&g.v, t)));
        if !lost && rule_applies(r, &remaining) {
            continue;
        }
        let by = project
            .remove
            .iter()
            .find(|x| r.tools.iter().any(|g| glob_match(&g.v, &x.v)));
        if let Some(x) = by {
            let msg = format!(
                "removing '{}' would drop the base's rule '{}', which also decides tools the \
                 policy does not define (allow_unregistered): say allow_unregistered = false",
                x.v, r.id.v
            );
            d.err(&x.at, "tools.remove", msg);
        }
    }
}

/// The base's tools not removed, with their arguments' names (a restatement has the same).
fn remaining(docs: &[RawDoc], removed: &[&str]) -> Vec<(String, Vec<String>)> {
    docs.iter()
        .flat_map(|doc| &doc.tools)
        .filter(|t| !removed.contains(&t.name.v.as_str()))
        .map(|t| {
            let args = t.args.iter().map(|a| a.name.v.clone()).collect();
            (t.name.v.clone(), args)
        })
        .collect()
}

/// Whether rule `r` applies to one of the `remaining` tools (one that has its `arg`).
fn rule_applies(r: &RawRule, remaining: &[(String, Vec<String>)]) -> bool {
    remaining.iter().any(|(t, args)| {
        r.tools.iter().any(|g| glob_match(&g.v, t))
            && r.arg.as_ref().is_none_or(|a| args.contains(&a.v))
    })
}

/// The base's `docs` with the (checked) project's items in: its tools in place of the base's
/// it restates, none of those it removes, its settings over the base's, its rules and
/// approvers first; and the project's examples, to decide once the whole is compiled.
fn combine(
    mut docs: Vec<RawDoc>,
    project: ProjectDoc,
    at: usize,
) -> (Vec<RawDoc>, Vec<(String, RawExample)>) {
    let removed: Vec<&str> = project.remove.iter().map(|r| r.v.as_str()).collect();
    let restated: Vec<&str> = project.tools.iter().map(|t| t.name.v.as_str()).collect();
    let remaining = remaining(&docs, &removed);
    for doc in &mut docs {
        // Restated tools are the project's; the base's examples were checked at its load.
        doc.tools.retain(|t| {
            let name = t.name.v.as_str();
            !removed.contains(&name) && !restated.contains(&name)
        });
        for t in &mut doc.tools {
            t.examples.clear();
        }
        doc.rules.retain_mut(|r| rule_kept(r, &remaining));
        doc.approvers.retain_mut(|a| approver_kept(a, &remaining));
        if let Some(s) = &mut doc.settings {
            settings_over(s, &project.settings);
        }
    }
    let mut examples = Vec::new();
    let mut tools = project.tools;
    for t in &mut tools {
        for ex in std::mem::take(&mut t.examples) {
            examples.push((t.name.v.clone(), ex));
        }
    }
    // An approver reads a rule's message as the reason a call was held: one the project wrote
    // says so (the workspace's owner, often the agent's user, wrote it).
    let mut rules = project.rules;
    for r in &mut rules {
        let id = &r.id.v;
        r.message = Some(match r.message.take() {
            Some(m) => format!("[project policy rule {id}] {m}"),
            None => format!("[project policy rule {id}]"),
        });
    }
    let mut own = RawDoc {
        tools,
        rules,
        approvers: project.approvers,
        ..RawDoc::default()
    };
    if !docs.iter().any(|doc| doc.settings.is_some()) {
        let mut s = RawSettings {
            at: Loc {
                file: at,
                span: 0..0,
            },
            ..RawSettings::default()
        };
        settings_over(&mut s, &project.settings);
        own.settings = Some(s);
    }
    // The project's approvers answer first: they can only refuse (see `approver`), so placing
    // them first only tightens.
    docs.insert(0, own);
    (docs, examples)
}

/// The project's settings over the base's `s` (each already checked to be no looser).
fn settings_over(s: &mut RawSettings, p: &project_parse::ProjectSettings) {
    if let Some(t) = &p.max_allowed_tier {
        s.max_allowed_tier = Some(t.clone());
        if t.v < RiskTier::Critical {
            // Critical tools are above the ceiling now, whatever allow_critical says, and
            // `validate` refuses an allow_critical that has no effect.
            s.allow_critical = None;
        }
    }
    if let Some(t) = &p.escalation_threshold {
        s.escalation_threshold = Some(t.clone());
    }
    if let Some(b) = &p.allow_critical {
        s.allow_critical = Some(b.clone());
    }
    if let Some(b) = &p.allow_unregistered {
        s.allow_unregistered = Some(b.v);
    }
}

/// Keeps a base rule for the tools that remain: its targets that match none of them are
/// dropped, and so is a rule left with none, or whose argument none of them has (it only ever
/// applied to removed tools, which no call reaches now).
fn rule_kept(r: &mut RawRule, remaining: &[(String, Vec<String>)]) -> bool {
    r.tools
        .retain(|g| remaining.iter().any(|(t, _)| glob_match(&g.v, t)));
    !r.tools.is_empty() && rule_applies(r, remaining)
}

/// As [`rule_kept`], for a base approver.
fn approver_kept(a: &mut RawApprover, remaining: &[(String, Vec<String>)]) -> bool {
    a.tools
        .retain(|g| remaining.iter().any(|(t, _)| glob_match(&g.v, t)));
    !a.tools.is_empty()
}

/// A project's approver may only refuse (`auto` with `decision = "reject"` or `"terminate"`):
/// one that approves, asks a judge or runs a program would widen, and so would one that hands
/// the call to a human (it answers before the base's, which may have refused it unasked).
fn approver(d: &mut Diag, a: &RawApprover) {
    let key = format!("approvers[{}].approver", a.index);
    let Some(name) = &a.approver else { return };
    let ok = match name.v.as_str() {
        "auto" => a
            .decision
            .as_ref()
            .is_some_and(|s| matches!(s.v.as_str(), "reject" | "terminate")),
        _ => false,
    };
    if !ok {
        let msg = "a project policy's approvers may only refuse (approver = \"auto\" with \
                   decision = \"reject\" or \"terminate\"): a human's answer could approve \
                   what the base policy's approvers refuse";
        d.err(&name.at, &key, msg);
    }
    let e = &a.effects;
    if !(e.read.is_empty() && e.write.is_empty() && e.exec.is_empty() && e.connect.is_empty()) {
        let key = format!("approvers[{}].effects", a.index);
        d.err(&name.at, &key, "a project policy's approvers run nothing");
    }
}
