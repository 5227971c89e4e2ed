//! Syntax: TOML text to raw, located policy items. Types and key names are checked here; what
//! the items mean together (placeholders, rule targets, regexes) is `validate`'s job.

use std::borrow::Cow;

use serde_json::Value as Json;
use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

use super::source::{Diag, Loc, S};
use crate::{
    decision::{Decision, RiskTier},
    detect::Detector,
    plan::OnDivergence,
};

/// A user or group by numeric id or by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Principal {
    Id(u32),
    Name(String),
}

/// The argument types a tool may declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    String,
    Path,
    Url,
    Integer,
    Boolean,
    Enum,
}

impl ArgType {
    fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "string" => ArgType::String,
            "path" => ArgType::Path,
            "url" => ArgType::Url,
            "integer" => ArgType::Integer,
            "boolean" => ArgType::Boolean,
            "enum" => ArgType::Enum,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Path => "path",
            ArgType::Url => "url",
            ArgType::Integer => "integer",
            ArgType::Boolean => "boolean",
            ArgType::Enum => "enum",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct RawSettings {
    pub at: Loc,
    pub max_allowed_tier: Option<S<RiskTier>>,
    pub allow_critical: Option<S<bool>>,
    pub escalation_threshold: Option<S<RiskTier>>,
    pub allow_unregistered: Option<bool>,
    pub disclose_reasons: Option<bool>,
    pub clients: Vec<Principal>,
    pub admins: Vec<Principal>,
    pub client_groups: Vec<Principal>,
    pub admin_groups: Vec<Principal>,
    pub socket_group: Option<String>,
    pub run_as: Option<String>,
}

#[derive(Debug)]
pub(crate) struct RawArg {
    pub name: S<String>,
    pub ty: S<ArgType>,
    pub required: bool,
    pub within: Vec<S<String>>,
    pub base: Option<S<String>>,
    pub pattern: Option<S<String>>,
    pub values: Vec<S<String>>,
    pub max_len: Option<S<i64>>,
    pub hosts: Vec<S<String>>,
    pub schemes: Vec<S<String>>,
    pub min: Option<S<i64>>,
    pub max: Option<S<i64>>,
}

#[derive(Debug, Default)]
pub(crate) struct RawEffects {
    pub read: Vec<S<String>>,
    pub write: Vec<S<String>>,
    pub exec: Vec<S<String>>,
    pub connect: Vec<S<String>>,
    pub unix: bool,
    pub on_divergence: OnDivergence,
}

#[derive(Debug)]
pub(crate) struct RawExample {
    pub at: Loc,
    pub index: usize,
    pub args: serde_json::Map<String, Json>,
    pub expect: S<Decision>,
}

#[derive(Debug)]
pub(crate) struct RawTool {
    pub name: S<String>,
    pub tier: S<RiskTier>,
    pub irreversible: bool,
    pub dryrun_supported: bool,
    pub description: Option<String>,
    pub command: Option<Vec<S<String>>>,
    pub args: Vec<RawArg>,
    pub effects: RawEffects,
    pub run_as: Option<S<String>>,
    pub timeout: Option<S<i64>>,
    pub memory: Option<u64>,
    pub pids: Option<S<i64>>,
    pub syscalls: Vec<S<String>>,
    pub allow_syscalls: Vec<S<String>>,
    pub env: Vec<(S<String>, S<String>)>,
    pub cwd: Option<S<String>>,
    pub examples: Vec<RawExample>,
}

#[derive(Debug)]
pub(crate) struct RawRule {
    pub index: usize,
    pub id: S<String>,
    pub tools: Vec<S<String>>,
    pub arg: Option<S<String>>,
    pub regex: Option<S<String>>,
    pub equals: Option<S<String>>,
    pub detect: Vec<S<Detector>>,
    pub action: S<Decision>,
    pub message: Option<String>,
}

/// `[approvals]`: how held calls may be answered.
#[derive(Debug)]
pub(crate) struct RawApprovals {
    pub at: Loc,
    pub allow_self: Option<S<bool>>,
}

#[derive(Debug, Default)]
pub(crate) struct RawDoc {
    pub settings: Option<RawSettings>,
    pub approvals: Option<RawApprovals>,
    pub tools: Vec<RawTool>,
    pub rules: Vec<RawRule>,
}

type Entry<'a, 'i> = (&'a Spanned<Cow<'i, str>>, &'a Spanned<DeValue<'i>>);

/// Reads one table: each `take` consumes a key, and `finish` reports the keys nobody took.
struct Table<'a, 'i> {
    file: usize,
    path: String,
    at: Loc,
    entries: Vec<(Entry<'a, 'i>, bool)>,
}

impl<'a, 'i> Table<'a, 'i> {
    fn new(file: usize, path: String, t: &'a DeTable<'i>, span: std::ops::Range<usize>) -> Self {
        Self {
            file,
            path,
            at: Loc { file, span },
            entries: t.iter().map(|e| (e, false)).collect(),
        }
    }

    fn loc(&self, span: std::ops::Range<usize>) -> Loc {
        Loc {
            file: self.file,
            span,
        }
    }

    fn key(&self, k: &str) -> String {
        join(&self.path, k)
    }

    fn take(&mut self, k: &str) -> Option<(String, &'a Spanned<DeValue<'i>>)> {
        let key = self.key(k);
        let e = self
            .entries
            .iter_mut()
            .find(|((key, _), _)| key.get_ref() == k)?;
        e.1 = true;
        Some((key, e.0.1))
    }

    fn finish(self, d: &mut Diag) {
        for ((k, _), used) in &self.entries {
            if !used {
                d.err(&self.loc(k.span()), &self.key(k.get_ref()), "unknown key");
            }
        }
    }

    fn str(&mut self, d: &mut Diag, k: &str) -> Option<S<String>> {
        let (key, v) = self.take(k)?;
        let at = self.loc(v.span());
        match v.get_ref() {
            DeValue::String(s) => Some(S {
                v: s.to_string(),
                at,
            }),
            other => {
                d.err(
                    &at,
                    &key,
                    format!("expected a string, found {}", other.type_str()),
                );
                None
            }
        }
    }

    fn bool(&mut self, d: &mut Diag, k: &str) -> Option<S<bool>> {
        let (key, v) = self.take(k)?;
        let at = self.loc(v.span());
        match v.get_ref() {
            DeValue::Boolean(b) => Some(S { v: *b, at }),
            other => {
                d.err(
                    &at,
                    &key,
                    format!("expected true or false, found {}", other.type_str()),
                );
                None
            }
        }
    }

    fn int(&mut self, d: &mut Diag, k: &str) -> Option<S<i64>> {
        let (key, v) = self.take(k)?;
        let at = self.loc(v.span());
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(S { v: n, at }),
                Err(_) => {
                    d.err(&at, &key, "integer out of range");
                    None
                }
            },
            other => {
                d.err(
                    &at,
                    &key,
                    format!("expected an integer, found {}", other.type_str()),
                );
                None
            }
        }
    }

    fn strs(&mut self, d: &mut Diag, k: &str) -> Vec<S<String>> {
        let Some((key, v)) = self.take(k) else {
            return Vec::new();
        };
        let at = self.loc(v.span());
        let DeValue::Array(items) = v.get_ref() else {
            d.err(
                &at,
                &key,
                format!(
                    "expected an array of strings, found {}",
                    v.get_ref().type_str()
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = self.loc(item.span());
            match item.get_ref() {
                DeValue::String(s) => out.push(S {
                    v: s.to_string(),
                    at,
                }),
                other => d.err(
                    &at,
                    &format!("{key}[{i}]"),
                    format!("expected a string, found {}", other.type_str()),
                ),
            }
        }
        out
    }

    fn tier(&mut self, d: &mut Diag, k: &str) -> Option<S<RiskTier>> {
        let key = self.key(k);
        let s = self.str(d, k)?;
        match RiskTier::from_name(&s.v) {
            Some(t) => Some(S { v: t, at: s.at }),
            None => {
                d.err(
                    &s.at,
                    &key,
                    format!("unknown tier '{}' (low | medium | high | critical)", s.v),
                );
                None
            }
        }
    }

    fn principals(&mut self, d: &mut Diag, k: &str) -> Vec<Principal> {
        let Some((key, v)) = self.take(k) else {
            return Vec::new();
        };
        let at = self.loc(v.span());
        let DeValue::Array(items) = v.get_ref() else {
            d.err(&at, &key, "expected an array of ids or names");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = self.loc(item.span());
            let key = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::Integer(n) => match u32::from_str_radix(n.as_str(), n.radix()) {
                    Ok(id) => out.push(Principal::Id(id)),
                    Err(_) => d.err(&at, &key, "id out of range (0 to 4294967295)"),
                },
                DeValue::String(s) if valid_account_name(s) => {
                    out.push(Principal::Name(s.to_string()))
                }
                DeValue::String(s) => d.err(
                    &at,
                    &key,
                    format!("'{s}' is not a valid user or group name"),
                ),
                other => d.err(
                    &at,
                    &key,
                    format!("expected an id or a name, found {}", other.type_str()),
                ),
            }
        }
        out
    }

    /// A sub-table; `None` (with an error) when the key holds something else.
    fn table(&mut self, d: &mut Diag, k: &str) -> Option<Table<'a, 'i>> {
        let (key, v) = self.take(k)?;
        let at = self.loc(v.span());
        match v.get_ref() {
            DeValue::Table(t) => Some(Table::new(self.file, key, t, v.span())),
            other => {
                d.err(
                    &at,
                    &key,
                    format!("expected a table, found {}", other.type_str()),
                );
                None
            }
        }
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// POSIX-portable user and group names (what `useradd` accepts by default).
pub(crate) fn valid_account_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter().enumerate().all(|(i, &c)| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || c == b'_'
                || c == b'-'
                || (c == b'$' && i == b.len() - 1)
        })
}

/// Parses one file. Syntax errors end the file's parse (TOML cannot be read past them
/// reliably); every other error is collected and parsing goes on.
pub(crate) fn parse_file(d: &mut Diag, file: usize, text: &str) -> RawDoc {
    let root = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let at = Loc {
                file,
                span: e.span().unwrap_or(0..0),
            };
            d.err(&at, "", e.message().trim());
            return RawDoc::default();
        }
    };
    let mut doc = RawDoc::default();
    let mut top = Table::new(file, String::new(), root.get_ref(), root.span());
    if let Some(t) = top.table(d, "settings") {
        doc.settings = Some(settings(d, t));
    }
    if let Some(mut t) = top.table(d, "approvals") {
        doc.approvals = Some(RawApprovals {
            at: t.at.clone(),
            allow_self: t.bool(d, "allow_self"),
        });
        t.finish(d);
    }
    if let Some(mut tools) = top.table(d, "tools") {
        let path = tools.path.clone();
        for ((name, v), used) in tools.entries.iter_mut() {
            *used = true;
            let key = join(&path, name.get_ref());
            let name_at = Loc {
                file,
                span: name.span(),
            };
            match v.get_ref() {
                DeValue::Table(t) => {
                    let name = S {
                        v: name.get_ref().to_string(),
                        at: name_at,
                    };
                    let t = Table::new(file, key, t, v.span());
                    if let Some(tool) = tool(d, name, t) {
                        doc.tools.push(tool);
                    }
                }
                other => d.err(
                    &name_at,
                    &key,
                    format!("expected a table, found {}", other.type_str()),
                ),
            }
        }
        tools.finish(d);
    }
    if let Some((key, v)) = top.take("rules") {
        doc.rules = tables_of(d, file, key, v, "[[rules]]", rule);
    }
    top.finish(d);
    doc
}

/// Reads an array of tables (`[[rules]]`, `[[examples]]`) item by item with `read`, reporting
/// an array that is something else, or an item that is not a table, where it was written.
fn tables_of<'a, 'i, T>(
    d: &mut Diag,
    file: usize,
    key: String,
    v: &'a Spanned<DeValue<'i>>,
    what: &str,
    read: impl Fn(&mut Diag, usize, Table<'a, 'i>) -> Option<T>,
) -> Vec<T> {
    let loc = |span| Loc { file, span };
    let DeValue::Array(items) = v.get_ref() else {
        let found = v.get_ref().type_str();
        d.err(
            &loc(v.span()),
            &key,
            format!("expected {what}, found {found}"),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("{key}[{i}]");
        match item.get_ref() {
            DeValue::Table(t) => out.extend(read(d, i, Table::new(file, key, t, item.span()))),
            other => {
                let found = other.type_str();
                d.err(
                    &loc(item.span()),
                    &key,
                    format!("expected a table, found {found}"),
                );
            }
        }
    }
    out
}

fn settings(d: &mut Diag, mut t: Table) -> RawSettings {
    let s = RawSettings {
        at: t.at.clone(),
        max_allowed_tier: t.tier(d, "max_allowed_tier"),
        allow_critical: t.bool(d, "allow_critical"),
        escalation_threshold: t.tier(d, "escalation_threshold"),
        allow_unregistered: t.bool(d, "allow_unregistered").map(|b| b.v),
        disclose_reasons: t.bool(d, "disclose_reasons").map(|b| b.v),
        clients: t.principals(d, "clients"),
        admins: t.principals(d, "admins"),
        client_groups: t.principals(d, "client_groups"),
        admin_groups: t.principals(d, "admin_groups"),
        socket_group: account(d, &mut t, "socket_group"),
        run_as: account(d, &mut t, "run_as"),
    };
    t.finish(d);
    s
}

fn account(d: &mut Diag, t: &mut Table, k: &str) -> Option<String> {
    let key = t.key(k);
    let s = t.str(d, k)?;
    if valid_account_name(&s.v) {
        Some(s.v)
    } else {
        d.err(
            &s.at,
            &key,
            format!("'{}' is not a valid user or group name", s.v),
        );
        None
    }
}

fn tool(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawTool> {
    let tier = t.tier(d, "tier");
    if tier.is_none() && !t.entries.iter().any(|((k, _), _)| k.get_ref() == "tier") {
        d.err(&name.at, &t.path, "missing key 'tier'");
    }
    let irreversible = t.bool(d, "irreversible").is_some_and(|b| b.v);
    let dryrun_supported = t.bool(d, "dryrun_supported").is_some_and(|b| b.v);
    let description = t.str(d, "description").map(|s| s.v);
    let command = if t.entries.iter().any(|((k, _), _)| k.get_ref() == "command") {
        let key = t.key("command");
        let c = t.strs(d, "command");
        if c.is_empty() {
            d.err(&t.at, &key, "command must name a program");
        }
        Some(c)
    } else {
        None
    };
    let mut args = Vec::new();
    if let Some(mut at) = t.table(d, "args") {
        let path = at.path.clone();
        for ((k, v), used) in at.entries.iter_mut() {
            *used = true;
            let key = join(&path, k.get_ref());
            let kat = Loc {
                file: at.file,
                span: k.span(),
            };
            match v.get_ref() {
                DeValue::Table(tab) => {
                    let name = S {
                        v: k.get_ref().to_string(),
                        at: kat,
                    };
                    if let Some(a) = arg(d, name, Table::new(at.file, key, tab, v.span())) {
                        args.push(a);
                    }
                }
                other => d.err(
                    &kat,
                    &key,
                    format!("expected a table, found {}", other.type_str()),
                ),
            }
        }
        at.finish(d);
    }
    let mut effects = RawEffects::default();
    if let Some(mut e) = t.table(d, "effects") {
        effects.read = e.strs(d, "read");
        effects.write = e.strs(d, "write");
        effects.exec = e.strs(d, "exec");
        effects.connect = e.strs(d, "connect");
        effects.unix = e.bool(d, "unix").is_some_and(|b| b.v);
        let key = e.key("on_divergence");
        if let Some(s) = e.str(d, "on_divergence") {
            match s.v.as_str() {
                "kill" => effects.on_divergence = OnDivergence::Kill,
                "deny" => effects.on_divergence = OnDivergence::Deny,
                other => d.err(
                    &s.at,
                    &key,
                    format!("unknown on_divergence '{other}' (kill | deny)"),
                ),
            }
        }
        e.finish(d);
    }
    let run_as = t.str(d, "run_as");
    let timeout = t.int(d, "timeout");
    let (mut memory, mut pids) = (None, None);
    if let Some(mut l) = t.table(d, "limits") {
        if let Some((key, v)) = l.take("memory") {
            let at = l.loc(v.span());
            match v.get_ref() {
                DeValue::String(s) => match parse_size(s) {
                    Some(n) => memory = Some(n),
                    None => d.err(
                        &at,
                        &key,
                        format!("bad size '{s}' (bytes, or a number with K, M or G)"),
                    ),
                },
                DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                    Ok(n) if n > 0 => memory = Some(n),
                    _ => d.err(&at, &key, "bad size (a positive number of bytes)"),
                },
                other => d.err(
                    &at,
                    &key,
                    format!("expected a size, found {}", other.type_str()),
                ),
            }
        }
        pids = l.int(d, "pids");
        l.finish(d);
    }
    let syscalls = t.strs(d, "syscalls");
    let allow_syscalls = t.strs(d, "allow_syscalls");
    let mut env = Vec::new();
    if let Some(mut e) = t.table(d, "env") {
        let path = e.path.clone();
        for ((k, v), used) in e.entries.iter_mut() {
            *used = true;
            let key = join(&path, k.get_ref());
            let at = Loc {
                file: e.file,
                span: v.span(),
            };
            match v.get_ref() {
                DeValue::String(s) => env.push((
                    S {
                        v: k.get_ref().to_string(),
                        at: Loc {
                            file: e.file,
                            span: k.span(),
                        },
                    },
                    S {
                        v: s.to_string(),
                        at,
                    },
                )),
                other => d.err(
                    &at,
                    &key,
                    format!("expected a string, found {}", other.type_str()),
                ),
            }
        }
        e.finish(d);
    }
    let cwd = t.str(d, "cwd");
    let examples = match t.take("examples") {
        Some((key, v)) => tables_of(d, t.file, key, v, "[[examples]]", example),
        None => Vec::new(),
    };
    t.finish(d);
    Some(RawTool {
        name,
        tier: tier?,
        irreversible,
        dryrun_supported,
        description,
        command,
        args,
        effects,
        run_as,
        timeout,
        memory,
        pids,
        syscalls,
        allow_syscalls,
        env,
        cwd,
        examples,
    })
}

fn arg(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawArg> {
    let key = t.key("type");
    let ty = match t.str(d, "type") {
        Some(s) => match ArgType::from_name(&s.v) {
            Some(ty) => Some(S { v: ty, at: s.at }),
            None => {
                d.err(
                    &s.at,
                    &key,
                    format!(
                        "unknown type '{}' (string | path | url | integer | boolean | enum)",
                        s.v
                    ),
                );
                None
            }
        },
        None => {
            if !t.entries.iter().any(|((k, _), _)| k.get_ref() == "type") {
                d.err(&name.at, &t.path, "missing key 'type'");
            }
            None
        }
    };
    let a = RawArg {
        name,
        ty: ty?,
        // Stricter default: an argument is required unless the policy says otherwise.
        required: t.bool(d, "required").is_none_or(|b| b.v),
        within: t.strs(d, "within"),
        base: t.str(d, "base"),
        pattern: t.str(d, "pattern"),
        values: t.strs(d, "values"),
        max_len: t.int(d, "max_len"),
        hosts: t.strs(d, "hosts"),
        schemes: t.strs(d, "schemes"),
        min: t.int(d, "min"),
        max: t.int(d, "max"),
    };
    let _ = t.str(d, "description");
    t.finish(d);
    Some(a)
}

fn example(d: &mut Diag, index: usize, mut t: Table) -> Option<RawExample> {
    let at = t.at.clone();
    let mut args = serde_json::Map::new();
    if let Some((key, v)) = t.take("args") {
        match to_json(v.get_ref()) {
            Json::Object(m) => args = m,
            _ => d.err(&t.loc(v.span()), &key, "expected a table of arguments"),
        }
    }
    let key = t.key("expect");
    let expect = match t.str(d, "expect") {
        Some(s) => match Decision::from_name(&s.v) {
            Some(x) => Some(S { v: x, at: s.at }),
            None => {
                d.err(
                    &s.at,
                    &key,
                    format!(
                        "unknown decision '{}' (allow | escalate | quarantine | block)",
                        s.v
                    ),
                );
                None
            }
        },
        None => {
            d.err(&at, &t.path, "missing key 'expect'");
            None
        }
    };
    let _ = t.str(d, "name");
    t.finish(d);
    Some(RawExample {
        at,
        index,
        args,
        expect: expect?,
    })
}

fn rule(d: &mut Diag, index: usize, mut t: Table) -> Option<RawRule> {
    let at = t.at.clone();
    let id = t.str(d, "id");
    if id.is_none() && !t.entries.iter().any(|((k, _), _)| k.get_ref() == "id") {
        d.err(&at, &t.path, "missing key 'id'");
    }
    let tools = t.strs(d, "tools");
    if tools.is_empty() {
        d.err(
            &at,
            &t.key("tools"),
            "a rule must name at least one tool or glob",
        );
    }
    let arg = t.str(d, "arg");
    let regex = t.str(d, "regex");
    let equals = t.str(d, "equals");
    let dkey = t.key("detect");
    let detect = t
        .strs(d, "detect")
        .into_iter()
        .filter_map(|s| match Detector::from_name(&s.v) {
            Some(x) => Some(S { v: x, at: s.at }),
            None => {
                let names: Vec<_> = Detector::ALL.iter().map(|d| d.name()).collect();
                d.err(
                    &s.at,
                    &dkey,
                    format!("unknown detector '{}' ({})", s.v, names.join(" | ")),
                );
                None
            }
        })
        .collect();
    let akey = t.key("action");
    let action = match t.str(d, "action") {
        Some(s) => match Decision::from_name(&s.v) {
            Some(a) if a != Decision::Allow => Some(S { v: a, at: s.at }),
            _ => {
                d.err(
                    &s.at,
                    &akey,
                    format!("unknown action '{}' (block | escalate | quarantine)", s.v),
                );
                None
            }
        },
        None => {
            d.err(&at, &t.path, "missing key 'action'");
            None
        }
    };
    let message = t.str(d, "message").map(|s| s.v);
    t.finish(d);
    Some(RawRule {
        index,
        id: id?,
        tools,
        arg,
        regex,
        equals,
        detect,
        action: action?,
        message,
    })
}

/// `256M` → 268435456. K, M, G, T are binary multiples, as cgroup `memory.max` reads them.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        b'T' | b't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().ok()?;
    n.checked_mul(mult).filter(|&n| n > 0)
}

fn to_json(v: &DeValue) -> Json {
    match v {
        DeValue::String(s) => Json::String(s.to_string()),
        DeValue::Integer(i) => {
            i64::from_str_radix(i.as_str(), i.radix()).map_or(Json::Null, Json::from)
        }
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Json::Null, Json::Number),
        DeValue::Boolean(b) => Json::Bool(*b),
        DeValue::Datetime(dt) => Json::String(dt.to_string()),
        DeValue::Array(a) => Json::Array(a.iter().map(|x| to_json(x.get_ref())).collect()),
        DeValue::Table(t) => Json::Object(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), to_json(v.get_ref())))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("99999999999999999G"), None);
    }

    #[test]
    fn account_names() {
        assert!(valid_account_name("guard"));
        assert!(valid_account_name("_svc-1"));
        assert!(!valid_account_name("Root"));
        assert!(!valid_account_name("a b"));
        assert!(!valid_account_name(""));
    }
}
