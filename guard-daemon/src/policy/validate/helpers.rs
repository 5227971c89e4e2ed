//! Checks of the programs a policy has guard run for itself: judges, approvers and the
//! notifier. Their commands and effects are literals (a placeholder names no argument here),
//! their thresholds numbers in [0, 1], their timeouts 1 to 86400 seconds; every judge a tool,
//! an approver or `[settings] judges` names exists.

use std::time::Duration;

use super::tool::Templates;
use crate::policy::{
    helpers::{Approver, ApproverKind, Choices, Helper, Judge, Outcome},
    raw::{RawApprover, RawHelper, RawJudge},
    rules::{glob_match, is_glob},
    source::{Diag, S},
    template::Elem,
};

/// How long a helper may run unless its policy says otherwise (aegis's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The literal values of `elems` (a placeholder was reported already).
fn literals<T>(elems: Vec<Elem<T>>) -> Vec<T> {
    elems
        .into_iter()
        .filter_map(|e| match e {
            Elem::Lit(v) => Some(v),
            Elem::Arg(_) | Elem::Ctx(..) => None,
        })
        .collect()
}

/// Compiles a helper written under `key`.
pub(super) fn helper(d: &mut Diag, key: &str, h: &RawHelper) -> Helper {
    let tpl = Templates {
        tk: key,
        args: &[],
        in_workspace: false,
    };
    let command = literals(tpl.command(d, &h.command));
    let timeout = match &h.timeout {
        Some(s) if (1..=86_400).contains(&s.v) => Duration::from_secs(s.v as u64),
        Some(s) => {
            d.err(
                &s.at,
                &format!("{key}.timeout"),
                "timeout is 1 to 86400 seconds",
            );
            DEFAULT_TIMEOUT
        }
        None => DEFAULT_TIMEOUT,
    };
    let exec = literals(tpl.paths(d, &h.effects.exec, "exec"));
    super::shebang::helper(d, key, &h.command, &exec);
    Helper {
        command,
        read: literals(tpl.paths(d, &h.effects.read, "read")),
        write: literals(tpl.paths(d, &h.effects.write, "write")),
        exec,
        connect: literals(tpl.connect(d, &h.effects.connect)),
        timeout,
    }
}

/// A threshold in [0, 1], or `default`.
fn threshold(d: &mut Diag, key: &str, v: Option<&S<f64>>, default: f64) -> f64 {
    match v {
        Some(s) if (0.0..=1.0).contains(&s.v) => s.v,
        Some(s) => {
            d.err(&s.at, key, "a number from 0.0 to 1.0");
            default
        }
        None => default,
    }
}

/// Compiles the judges, refusing a name given twice.
pub(super) fn judges(d: &mut Diag, raw: &[RawJudge]) -> Vec<Judge> {
    let mut out: Vec<Judge> = Vec::new();
    for j in raw {
        let key = format!("judges.{}", j.name.v);
        let valid = !j.name.v.is_empty()
            && (j.name.v.chars()).all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !valid {
            d.err(
                &j.name.at,
                &key,
                "judge names are letters, digits and _ - .",
            );
        }
        if out.iter().any(|o| o.name == j.name.v) {
            d.err(
                &j.name.at,
                &key,
                format!("judge '{}' is defined twice", j.name.v),
            );
            continue;
        }
        out.push(Judge {
            name: j.name.v.clone(),
            helper: helper(d, &key, &j.helper),
            criteria: j.criteria.clone().unwrap_or_default(),
            min_score: threshold(d, &format!("{key}.min_score"), j.min_score.as_ref(), 0.7),
            min_confidence: threshold(
                d,
                &format!("{key}.min_confidence"),
                j.min_confidence.as_ref(),
                0.0,
            ),
        });
    }
    out
}

/// The index of judge `name`, or an error at `at` under `key`.
pub(super) fn judge_index(
    d: &mut Diag,
    judges: &[Judge],
    name: &S<String>,
    key: &str,
) -> Option<usize> {
    let i = judges.iter().position(|j| j.name == name.v);
    if i.is_none() {
        d.err(&name.at, key, format!("no judge '{}' in [judges]", name.v));
    }
    i
}

/// Compiles one `[[approvers]]`; `tools` are the policy's tool names.
pub(super) fn approver(
    d: &mut Diag,
    a: &RawApprover,
    judges: &[Judge],
    tools: &[&str],
) -> Option<Approver> {
    let key = |k: &str| format!("approvers[{}].{k}", a.index);
    for g in &a.tools {
        if !tools.iter().any(|t| glob_match(&g.v, t)) {
            let what = if is_glob(&g.v) { "glob" } else { "tool" };
            let msg = format!("{what} '{}' matches no tool of the policy", g.v);
            d.err(&g.at, &key("tools"), msg);
        }
    }
    let name = a.approver.as_ref()?;
    let kind = match name.v.as_str() {
        "auto" => {
            let outcome = match &a.decision {
                None => Outcome::Approve,
                Some(s) => match Outcome::from_name(&s.v) {
                    Some(Outcome::Modify) | None => {
                        let msg = format!(
                            "unknown decision '{}' (approve | reject | terminate | escalate)",
                            s.v
                        );
                        d.err(&s.at, &key("decision"), msg);
                        return None;
                    }
                    Some(o) => o,
                },
            };
            ApproverKind::Auto(outcome)
        }
        "human" => ApproverKind::Human(choices(d, a, &key("choices"))),
        n if n.starts_with("judge:") => {
            let judge = S {
                v: n["judge:".len()..].to_owned(),
                at: name.at.clone(),
            };
            judge_index(d, judges, &judge, &key("approver"))?;
            ApproverKind::Judge(judge.v)
        }
        n if n.starts_with("command:") => {
            let Ok(argv) = serde_json::from_str::<Vec<String>>(&n["command:".len()..]) else {
                let msg =
                    "command: takes a JSON array of strings: command:[\"/usr/bin/x\", \"arg\"]";
                d.err(&name.at, &key("approver"), msg);
                return None;
            };
            let command = argv
                .into_iter()
                .map(|v| S {
                    v,
                    at: name.at.clone(),
                })
                .collect();
            let raw = RawHelper {
                command,
                effects: a.effects.clone(),
                timeout: a.timeout.clone(),
            };
            ApproverKind::Command(helper(d, &format!("approvers[{}]", a.index), &raw))
        }
        other => {
            let msg = format!(
                "unknown approver '{other}' (auto | human | judge:NAME | command:[\"/path\", ...])"
            );
            d.err(&name.at, &key("approver"), msg);
            return None;
        }
    };
    misplaced(d, a, &kind);
    Some(Approver {
        tools: a.tools.iter().map(|g| g.v.clone()).collect(),
        kind,
    })
}

/// Reports `decision` on an approver that is not `auto`, and `choices` on one not `human`.
fn misplaced(d: &mut Diag, a: &RawApprover, kind: &ApproverKind) {
    let key = |k: &str| format!("approvers[{}].{k}", a.index);
    if let Some(s) = &a.decision
        && !matches!(kind, ApproverKind::Auto(_))
    {
        let msg = "only an auto approver takes a decision";
        d.err(&s.at, &key("decision"), msg);
    }
    if let Some(t) = &a.timeout
        && !matches!(kind, ApproverKind::Command(_))
    {
        d.err(
            &t.at,
            &key("timeout"),
            "only a command approver takes a timeout",
        );
    }
    if let Some(c) = a.choices.as_ref().and_then(|c| c.first())
        && !matches!(kind, ApproverKind::Human(_))
    {
        d.err(
            &c.at,
            &key("choices"),
            "only a human approver takes choices",
        );
    }
}

/// A human approver's `choices`: inspect_ai's approve, reject and terminate, which an admin
/// answers with `guardctl approve`, `deny` and `deny --terminate`. `modify` and `escalate`
/// are inspect_ai's too, but guard's admin has no such answer: an error, never a choice
/// quietly dropped.
fn choices(d: &mut Diag, a: &RawApprover, key: &str) -> Choices {
    let Some(given) = &a.choices else {
        return Choices::default();
    };
    let mut c = Choices {
        approve: false,
        terminate: false,
    };
    for choice in given {
        match choice.v.as_str() {
            "approve" => c.approve = true,
            "terminate" => c.terminate = true,
            "reject" => {}
            other => {
                let msg = format!(
                    "guard's human approver has no choice '{other}': an admin answers with \
                     approve (guardctl approve), reject (guardctl deny) or terminate \
                     (guardctl deny --terminate)"
                );
                d.err(&choice.at, key, msg);
            }
        }
    }
    c
}
