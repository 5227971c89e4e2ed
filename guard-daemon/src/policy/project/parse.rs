//! The syntax of a project policy: the base policy's own item parsers for what it may say
//! (`[tools.NAME]`, `[[rules]]`, `[[approvers]]`, four keys of `[settings]`), `[tools] remove`,
//! and a refusal naming the key for everything else, so a key that would widen is an error at
//! its line rather than a setting silently ignored.

use toml::de::{DeTable, DeValue};

use crate::{
    call::decision::RiskTier,
    policy::{
        parse,
        raw::{RawApprover, RawRule, RawTool},
        source::{Diag, Loc, S},
        table::Table,
    },
};

/// The `[settings]` a project may give: each only ever at or below the base policy's.
#[derive(Debug, Default)]
pub(super) struct ProjectSettings {
    pub max_allowed_tier: Option<S<RiskTier>>,
    pub escalation_threshold: Option<S<RiskTier>>,
    pub allow_critical: Option<S<bool>>,
    pub allow_unregistered: Option<S<bool>>,
}

/// What one project policy says.
#[derive(Debug, Default)]
pub(super) struct ProjectDoc {
    pub settings: ProjectSettings,
    /// `[tools] remove`: base tools not offered in this workspace.
    pub remove: Vec<S<String>>,
    /// Base tools restated, each to be checked as no wider than the base's.
    pub tools: Vec<RawTool>,
    pub rules: Vec<RawRule>,
    pub approvers: Vec<RawApprover>,
}

/// Why each top-level table a base policy may have is refused in a project policy.
const REFUSED_TOP: &[(&str, &str)] = &[
    (
        "agents",
        "says who callers are and what they may call, which only the base policy may",
    ),
    (
        "workspaces",
        "says where workspaces are, which only the base policy may",
    ),
    (
        "approvals",
        "says who may answer held calls and what program is told of them, which only the base \
         policy may",
    ),
    (
        "judges",
        "would have guardd run a program of the project's choosing: attach the base policy's \
         judges to a restated tool with `judges = [...]` instead",
    ),
];

/// The `[settings]` keys a base policy may give that a project may not.
const REFUSED_SETTINGS: &[&str] = &[
    "disclose_reasons",
    "clients",
    "admins",
    "client_groups",
    "admin_groups",
    "socket_group",
    "run_as",
    "judges",
];

/// Parses the project policy `text`, file `file` of `d`'s sources.
pub(super) fn parse(d: &mut Diag, file: usize, text: &str) -> ProjectDoc {
    let Some(root) = parse::document(d, file, text) else {
        return ProjectDoc::default();
    };
    let mut doc = ProjectDoc::default();
    let top = root.get_ref();
    let mut t = Table::new(file, String::new(), top, root.span());
    for (k, _) in top.iter() {
        let at = Loc {
            file,
            span: k.span(),
        };
        let key = k.get_ref().as_ref();
        match key {
            "settings" | "tools" | "rules" | "approvers" => {}
            _ => match REFUSED_TOP.iter().find(|(name, _)| *name == key) {
                Some((_, why)) => {
                    let msg = format!("a project policy may not have [{key}]: it {why}");
                    d.err(&at, key, msg);
                }
                None => d.err(&at, key, "unknown key (a project policy may have [settings], [tools], [[rules]] and [[approvers]])"),
            },
        }
    }
    if let Some(s) = t.table(d, "settings") {
        doc.settings = settings(d, file, top, s);
    }
    if let Some(DeValue::Table(tools)) = top.get("tools").map(|v| v.get_ref()) {
        let span = top.get("tools").map(|v| v.span()).unwrap_or(0..0);
        let mut restated = tools.clone();
        if let Some(r) = restated.remove("remove") {
            let mut only = DeTable::new();
            let key = toml::Spanned::new(0..0, std::borrow::Cow::Borrowed("remove"));
            only.insert(key, r);
            doc.remove = Table::new(file, "tools".into(), &only, span.clone()).list(d, "remove");
        }
        doc.tools = Table::new(file, "tools".into(), &restated, span).named_tables(d, parse::tool);
    } else if let Some(v) = top.get("tools") {
        let at = Loc {
            file,
            span: v.span(),
        };
        let msg = format!("expected a table, found {}", v.get_ref().type_str());
        d.err(&at, "tools", msg);
    }
    doc.rules = t.tables(d, "rules", "[[rules]]", parse::rule);
    doc.approvers = t.tables(d, "approvers", "[[approvers]]", parse::approver);
    doc
}

/// The four `[settings]` keys a project may give; every other key is refused by name.
fn settings(d: &mut Diag, file: usize, top: &DeTable, mut s: Table) -> ProjectSettings {
    let out = ProjectSettings {
        max_allowed_tier: s.take(d, "max_allowed_tier"),
        escalation_threshold: s.take(d, "escalation_threshold"),
        allow_critical: s.take(d, "allow_critical"),
        allow_unregistered: s.take(d, "allow_unregistered"),
    };
    let Some(DeValue::Table(table)) = top.get("settings").map(|v| v.get_ref()) else {
        return out;
    };
    for (k, _) in table.iter() {
        let key = k.get_ref().as_ref();
        let at = Loc {
            file,
            span: k.span(),
        };
        let known = [
            "max_allowed_tier",
            "escalation_threshold",
            "allow_critical",
            "allow_unregistered",
        ];
        if known.contains(&key) {
            continue;
        }
        let msg = if REFUSED_SETTINGS.contains(&key) {
            "a project policy may not set this: only max_allowed_tier, escalation_threshold, \
             allow_critical and allow_unregistered, each no looser than the base policy's"
        } else {
            "unknown key"
        };
        d.err(&at, &format!("settings.{key}"), msg);
    }
    out
}
