//! `[[rules]]` as written: the rule's tools, its own condition, its `[[rules.when]]`
//! conditions on other arguments, and its action.

use super::{Action, any, require, string};
use crate::policy::{
    detect::Detector,
    raw::{RawCondition, RawRule},
    source::{Diag, S},
    table::Table,
};

pub(crate) fn rule(d: &mut Diag, index: usize, mut t: Table) -> Option<RawRule> {
    let at = t.at.clone();
    let id = t.take(d, "id");
    require(d, &t, "id", &at, &id, any);
    let tools = t.list(d, "tools");
    if tools.is_empty() {
        d.err(
            &at,
            &t.key("tools"),
            "a rule must name at least one tool or glob",
        );
    }
    let arg = t.take(d, "arg");
    let regex = t.take(d, "regex");
    let equals = t.take(d, "equals");
    let detect = detectors(d, &mut t);
    let when = t.tables(d, "when", "[[rules.when]]", condition);
    let action = t.take::<Action>(d, "action");
    require(d, &t, "action", &at, &action, string);
    let message = t.take(d, "message").map(|s| s.v);
    t.finish(d);
    Some(RawRule {
        index,
        id: id?,
        tools,
        arg,
        regex,
        equals,
        detect,
        when,
        action: action.map(|a| S { v: a.v.0, at: a.at })?,
        message,
    })
}

/// `detect`: an unknown detector is reported under `detect` itself, not at its index, with
/// the names a rule may use.
/// One `[[rules.when]]`: an argument and what it must match.
fn condition(d: &mut Diag, index: usize, mut t: Table) -> Option<RawCondition> {
    let at = t.at.clone();
    let arg = t.take(d, "arg");
    require(d, &t, "arg", &at, &arg, string);
    let c = RawCondition {
        index,
        arg,
        regex: t.take(d, "regex"),
        equals: t.take(d, "equals"),
        detect: detectors(d, &mut t),
    };
    if c.regex.is_none() && c.equals.is_none() && c.detect.is_empty() {
        let why = "a condition needs regex, equals or detect";
        d.err(&at, &t.path, why);
    }
    t.finish(d);
    Some(c)
}

fn detectors(d: &mut Diag, t: &mut Table) -> Vec<S<Detector>> {
    let key = t.key("detect");
    t.list::<String>(d, "detect")
        .into_iter()
        .filter_map(|s| match Detector::from_name(&s.v) {
            Some(x) => Some(S { v: x, at: s.at }),
            None => {
                let names: Vec<_> = Detector::ALL.iter().map(|d| d.name()).collect();
                d.err(
                    &s.at,
                    &key,
                    format!("unknown detector '{}' ({})", s.v, names.join(" | ")),
                );
                None
            }
        })
        .collect()
}
