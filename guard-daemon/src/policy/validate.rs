//! Meaning: turns the raw items of every file into one compiled policy, checking what only
//! makes sense together: duplicates, placeholders, rule targets, regexes, contradictions.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use regex::Regex;

use super::{
    Policy, Settings, Tool,
    args::{ArgSpec, normalize},
    overlap::Reach,
    raw::{ArgType, RawDoc, RawTool},
    rules::{Rule, glob_match, is_glob},
    source::{Diag, Loc, S},
    template::{Elem, placeholder},
};
use crate::{
    decision::RiskTier,
    detect::DetectorSet,
    plan::{Confinement, Endpoint},
};

/// Environment names a policy may not set: each would let the call load code that its exec
/// effects never declared.
const FORBIDDEN_ENV_PREFIXES: &[&str] = &["LD_", "GCONV_PATH", "MALLOC_"];

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

pub(crate) fn build(d: &mut Diag, docs: Vec<RawDoc>) -> Policy {
    let mut settings = Settings::default();
    let mut settings_at: Option<Loc> = None;
    let mut approvals_at: Option<Loc> = None;
    let mut raw_tools: Vec<RawTool> = Vec::new();
    let mut raw_rules = Vec::new();
    for doc in docs {
        if let Some(s) = doc.settings {
            if let Some(first) = &settings_at {
                let (p, _) = &d.src.files[first.file];
                let msg = format!("settings are already given in {}", p.display());
                d.err(&s.at, "settings", msg);
            } else {
                settings_at = Some(s.at.clone());
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
            }
        }
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
            }
        }
        for t in doc.tools {
            if let Some(first) = raw_tools.iter().find(|x| x.name.v == t.name.v) {
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
                raw_tools.push(t);
            }
        }
        raw_rules.extend(doc.rules);
    }

    let mut tools = Vec::new();
    for t in &raw_tools {
        let mut t = tool(d, t);
        // `[settings] run_as` is every tool's user unless the tool names its own.
        if t.confinement.run_as.is_none() {
            t.confinement.run_as.clone_from(&settings.run_as);
        }
        tools.push(t);
    }

    let mut rules: Vec<Rule> = Vec::new();
    for r in raw_rules {
        let key = |k: &str| format!("rules[{}].{k}", r.index);
        if rules.iter().any(|x| x.id == r.id.v) {
            d.err(
                &r.id.at,
                &key("id"),
                format!("duplicate rule id '{}'", r.id.v),
            );
        }
        for g in &r.tools {
            let hits: Vec<&Tool> = tools.iter().filter(|t| glob_match(&g.v, &t.name)).collect();
            if hits.is_empty() {
                let what = if is_glob(&g.v) { "glob" } else { "tool" };
                d.err(
                    &g.at,
                    &key("tools"),
                    format!("{what} '{}' matches no tool of the policy", g.v),
                );
            }
        }
        if let Some(a) = &r.arg {
            let known = tools
                .iter()
                .filter(|t| r.tools.iter().any(|g| glob_match(&g.v, &t.name)))
                .any(|t| t.args.iter().any(|s| s.name == a.v));
            if !known && !r.tools.is_empty() {
                d.err(
                    &a.at,
                    &key("arg"),
                    format!("no tool this rule applies to has an argument '{}'", a.v),
                );
            }
        }
        let regex = r.regex.as_ref().and_then(|s| anchored(d, s, &key("regex")));
        let action = r.action.v;
        let message = r
            .message
            .unwrap_or_else(|| format!("rule '{}' matched", r.id.v));
        rules.push(Rule {
            id: r.id.v,
            tools: r.tools.into_iter().map(|g| g.v).collect(),
            arg: r.arg.map(|a| a.v),
            regex,
            equals: r.equals.map(|e| e.v),
            detect: r.detect.into_iter().map(|x| x.v).collect(),
            action,
            message,
        });
    }

    for t in &mut tools {
        t.rules = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.applies_to(&t.name))
            .map(|(i, _)| i)
            .collect();
        t.redact = t.rules.iter().fold(DetectorSet::SECRET_CLASS, |acc, &i| {
            acc.union(rules[i].detect)
        });
    }
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
    }
}

fn tool(d: &mut Diag, t: &RawTool) -> Tool {
    let tk = format!("tools.{}", t.name.v);
    if t.name.v.is_empty()
        || !t
            .name
            .v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
    {
        d.err(
            &t.name.at,
            &tk,
            "tool names are letters, digits and _ - . :",
        );
    }
    let mut args = Vec::new();
    for a in &t.args {
        args.push(arg(d, &tk, a));
    }
    let find = |d: &mut Diag, s: &S<String>, key: &str| -> Option<Option<usize>> {
        match placeholder(&s.v) {
            Err(why) => {
                d.err(&s.at, key, why);
                None
            }
            Ok(None) => Some(None),
            Ok(Some(name)) => match args.iter().position(|a: &ArgSpec| a.name == name) {
                Some(i) => Some(Some(i)),
                None => {
                    d.err(
                        &s.at,
                        key,
                        format!("placeholder {{{name}}} names no argument of this tool"),
                    );
                    None
                }
            },
        }
    };
    let command = t.command.as_ref().map(|c| {
        let key = format!("{tk}.command");
        let mut out = Vec::new();
        for (i, s) in c.iter().enumerate() {
            match find(d, s, &key) {
                Some(Some(ix)) if i == 0 => {
                    let _ = ix;
                    d.err(
                        &s.at,
                        &key,
                        "command[0] must be a literal absolute path, not a placeholder",
                    );
                }
                Some(Some(ix)) => out.push(Elem::Arg(ix)),
                Some(None) if i == 0 && !s.v.starts_with('/') => d.err(
                    &s.at,
                    &key,
                    "command[0] must be an absolute path (no PATH lookup)",
                ),
                Some(None) => out.push(Elem::Lit(s.v.clone())),
                None => {}
            }
        }
        out
    });
    let path_elems = |d: &mut Diag, list: &[S<String>], what: &str| -> Vec<Elem<PathBuf>> {
        let key = format!("{tk}.effects.{what}");
        let mut out = Vec::new();
        for s in list {
            match find(d, s, &key) {
                Some(Some(i)) if args[i].ty == ArgType::Path => out.push(Elem::Arg(i)),
                Some(Some(i)) => d.err(
                    &s.at,
                    &key,
                    format!("argument '{}' is not a path", args[i].name),
                ),
                Some(None) if s.v.starts_with('/') => out.push(Elem::Lit(super::args::normalize(
                    std::path::Path::new(&s.v),
                ))),
                Some(None) => d.err(
                    &s.at,
                    &key,
                    "must be an absolute path or a {path} placeholder",
                ),
                None => {}
            }
        }
        out
    };
    let read = path_elems(d, &t.effects.read, "read");
    let write = path_elems(d, &t.effects.write, "write");
    let exec = path_elems(d, &t.effects.exec, "exec");
    exec_not_writable(d, &tk, t, &args);
    let cwd = t.cwd.as_ref().and_then(|c| {
        let mut v = path_elems(d, std::slice::from_ref(c), "cwd");
        v.pop()
    });
    let mut connect = Vec::new();
    let ckey = format!("{tk}.effects.connect");
    for s in &t.effects.connect {
        match find(d, s, &ckey) {
            Some(Some(i)) if args[i].ty == ArgType::Url => connect.push(Elem::Arg(i)),
            Some(Some(i)) => d.err(
                &s.at,
                &ckey,
                format!("argument '{}' is not a url", args[i].name),
            ),
            Some(None) => match s.v.rsplit_once(':').map(|(h, p)| {
                (
                    h.trim_start_matches('[').trim_end_matches(']'),
                    p.parse::<u16>(),
                )
            }) {
                Some((h, Ok(port))) if !h.is_empty() && port != 0 => {
                    connect.push(Elem::Lit(Endpoint {
                        host: h.to_ascii_lowercase(),
                        port,
                    }))
                }
                _ => d.err(
                    &s.at,
                    &ckey,
                    "expected \"host:port\" or a {url} placeholder",
                ),
            },
            None => {}
        }
    }
    let mut env = Vec::new();
    for (k, v) in &t.env {
        let key = format!("{tk}.env.{}", k.v);
        let valid = !k.v.is_empty()
            && !k.v.starts_with(|c: char| c.is_ascii_digit())
            && k.v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            d.err(&k.at, &key, "not a valid environment variable name");
        } else if FORBIDDEN_ENV_PREFIXES.iter().any(|p| k.v.starts_with(p)) {
            d.err(
                &k.at,
                &key,
                "this variable changes how programs load code; it may not be set",
            );
        }
        match find(d, v, &key) {
            Some(Some(i)) => env.push((k.v.clone(), Elem::Arg(i))),
            Some(None) => env.push((k.v.clone(), Elem::Lit(v.v.clone()))),
            None => {}
        }
    }
    let mut conf = Confinement::default();
    if let Some(r) = &t.run_as {
        if super::parse::valid_account_name(&r.v) {
            conf.run_as = Some(r.v.clone());
        } else {
            d.err(
                &r.at,
                &format!("{tk}.run_as"),
                format!("'{}' is not a valid user name", r.v),
            );
        }
    }
    if let Some(s) = &t.timeout {
        if (1..=86_400).contains(&s.v) {
            conf.timeout = Duration::from_secs(s.v as u64);
        } else {
            d.err(
                &s.at,
                &format!("{tk}.timeout"),
                "timeout is 1 to 86400 seconds",
            );
        }
    }
    conf.memory_max = t.memory;
    if let Some(p) = &t.pids {
        if p.v > 0 {
            conf.pids_max = Some(p.v as u64);
        } else {
            d.err(&p.at, &format!("{tk}.limits.pids"), "must be positive");
        }
    }
    for (list, name) in [
        (&t.syscalls, "syscalls"),
        (&t.allow_syscalls, "allow_syscalls"),
    ] {
        for s in list.iter() {
            if s.v.is_empty()
                || !s
                    .v
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                d.err(
                    &s.at,
                    &format!("{tk}.{name}"),
                    format!("'{}' is not a syscall name", s.v),
                );
            }
        }
    }
    conf.syscalls = t.syscalls.iter().map(|s| s.v.clone()).collect();
    conf.allow_syscalls = t.allow_syscalls.iter().map(|s| s.v.clone()).collect();
    let e = &t.effects;
    let effects = !e.read.is_empty()
        || !e.write.is_empty()
        || !e.exec.is_empty()
        || !e.connect.is_empty()
        || e.unix;
    if t.command.is_none() && (effects || t.cwd.is_some() || !t.env.is_empty()) {
        d.err(
            &t.name.at,
            &tk,
            "effects, cwd or env given but no command to apply them to",
        );
    }
    Tool {
        name: t.name.v.clone(),
        tier: t.tier.v,
        irreversible: t.irreversible,
        dryrun_supported: t.dryrun_supported,
        description: t.description.clone(),
        command,
        args,
        read,
        write,
        exec,
        connect,
        unix: t.effects.unix,
        on_divergence: t.effects.on_divergence,
        cwd,
        env,
        confinement: conf,
        rules: Vec::new(),
        redact: DetectorSet::SECRET_CLASS,
    }
}

/// Refuses a program the call may run (`command[0]`, `effects.exec`) that one of its write
/// effects can also name: the call could rewrite the program, and the kernel's exec allow-list,
/// which approves the file and not its contents, would run it. Templates are compared by what
/// they can name at load time ([`Reach`]); malformed ones are skipped, they have their own error.
fn exec_not_writable(d: &mut Diag, tk: &str, t: &RawTool, args: &[ArgSpec]) {
    let reach = |s: &S<String>| -> Option<(Reach, String)> {
        match placeholder(&s.v) {
            Ok(None) if s.v.starts_with('/') => Some((
                Reach::literal(&normalize(Path::new(&s.v))),
                format!("\"{}\"", s.v),
            )),
            Ok(Some(name)) => {
                let spec = args
                    .iter()
                    .find(|a| a.name == name && a.ty == ArgType::Path)?;
                let reach = Reach::arg(spec);
                let what = match reach {
                    Reach::Anywhere => format!("\"{}\" (any path: '{name}' has no within)", s.v),
                    Reach::Beneath(_) => format!("\"{}\"", s.v),
                };
                Some((reach, what))
            }
            _ => None,
        }
    };
    let writes: Vec<(&S<String>, Reach, String)> = t
        .effects
        .write
        .iter()
        .filter_map(|s| reach(s).map(|(r, what)| (s, r, what)))
        .collect();
    if writes.is_empty() {
        return;
    }
    // command[0] is a literal absolute path, or already an error.
    let program = t.command.iter().filter_map(|c| c.first());
    let programs = program
        .filter(|s| s.v.starts_with('/'))
        .map(|s| (s, "command"))
        .chain(t.effects.exec.iter().map(|s| (s, "effects.exec")));
    for (s, key) in programs {
        let Some((runs, what)) = reach(s) else {
            continue;
        };
        let Some((w, shared, wwhat)) = writes
            .iter()
            .find_map(|(w, wr, wwhat)| runs.meet(wr).map(|shared| (w, shared, wwhat)))
        else {
            continue;
        };
        let line = d.src.error(&w.at, "", "").position.map_or(0, |p| p.0);
        let shared = shared.map_or("any path".to_string(), |p| p.display().to_string());
        d.err(
            &s.at,
            &format!("{tk}.{key}"),
            format!(
                "program {what} and write effect {wwhat} (line {line}) both reach {shared}: \
                 the call could replace a program it may run, and the kernel's exec allow-list, \
                 which approves the file and not its contents, would run the rewritten program"
            ),
        );
    }
}

fn arg(d: &mut Diag, tk: &str, a: &super::raw::RawArg) -> ArgSpec {
    let ak = format!("{tk}.args.{}", a.name.v);
    let ty = a.ty.v;
    let only = |d: &mut Diag, present: bool, at: Option<&Loc>, k: &str, types: &[ArgType]| {
        if present && !types.contains(&ty) {
            let names: Vec<_> = types.iter().map(|t| t.name()).collect();
            d.err(
                at.unwrap_or(&a.name.at),
                &format!("{ak}.{k}"),
                format!("applies only to {} arguments", names.join(" or ")),
            );
        }
    };
    only(
        d,
        !a.within.is_empty(),
        a.within.first().map(|s| &s.at),
        "within",
        &[ArgType::Path],
    );
    only(
        d,
        a.base.is_some(),
        a.base.as_ref().map(|s| &s.at),
        "base",
        &[ArgType::Path],
    );
    only(
        d,
        !a.hosts.is_empty(),
        a.hosts.first().map(|s| &s.at),
        "hosts",
        &[ArgType::Url],
    );
    only(
        d,
        !a.schemes.is_empty(),
        a.schemes.first().map(|s| &s.at),
        "schemes",
        &[ArgType::Url],
    );
    only(
        d,
        a.min.is_some(),
        a.min.as_ref().map(|s| &s.at),
        "min",
        &[ArgType::Integer],
    );
    only(
        d,
        a.max.is_some(),
        a.max.as_ref().map(|s| &s.at),
        "max",
        &[ArgType::Integer],
    );
    let strings = [ArgType::String, ArgType::Path, ArgType::Url, ArgType::Enum];
    only(
        d,
        a.pattern.is_some(),
        a.pattern.as_ref().map(|s| &s.at),
        "pattern",
        &strings,
    );
    only(
        d,
        a.max_len.is_some(),
        a.max_len.as_ref().map(|s| &s.at),
        "max_len",
        &strings,
    );
    only(
        d,
        !a.values.is_empty(),
        a.values.first().map(|s| &s.at),
        "values",
        &[ArgType::Enum, ArgType::String],
    );
    if ty == ArgType::Enum && a.values.is_empty() {
        d.err(
            &a.ty.at,
            &format!("{ak}.values"),
            "an enum argument needs values",
        );
    }
    if let (Some(lo), Some(hi)) = (&a.min, &a.max)
        && lo.v > hi.v
    {
        d.err(
            &hi.at,
            &format!("{ak}.max"),
            "max is below min: no value can pass",
        );
    }
    let abs = |d: &mut Diag, s: &S<String>, k: &str| -> Option<PathBuf> {
        if !s.v.starts_with('/') {
            d.err(&s.at, &format!("{ak}.{k}"), "must be an absolute path");
            return None;
        }
        let p = super::args::normalize(std::path::Path::new(&s.v));
        // Resolve roots that exist, so that a root reached through a symlink (/tmp on some
        // systems) still contains the resolved argument.
        Some(std::fs::canonicalize(&p).unwrap_or(p))
    };
    let within = a
        .within
        .iter()
        .filter_map(|s| abs(d, s, "within"))
        .collect();
    let base = a.base.as_ref().and_then(|s| abs(d, s, "base"));
    for h in &a.hosts {
        let bare = h.v.strip_prefix("*.").unwrap_or(&h.v);
        if bare.is_empty()
            || bare.contains('*')
            || !bare.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' || c == ':'
            })
        {
            d.err(
                &h.at,
                &format!("{ak}.hosts"),
                format!("'{}' is not a lowercase host name or *.domain", h.v),
            );
        }
    }
    let max_len = a.max_len.as_ref().and_then(|m| {
        if m.v < 0 {
            d.err(&m.at, &format!("{ak}.max_len"), "must not be negative");
            None
        } else {
            Some(m.v as usize)
        }
    });
    ArgSpec {
        name: a.name.v.clone(),
        ty,
        required: a.required,
        within,
        base,
        pattern: a
            .pattern
            .as_ref()
            .and_then(|p| anchored(d, p, &format!("{ak}.pattern"))),
        values: a.values.iter().map(|s| s.v.clone()).collect(),
        max_len,
        hosts: a.hosts.iter().map(|s| s.v.clone()).collect(),
        schemes: a.schemes.iter().map(|s| s.v.clone()).collect(),
        min: a.min.as_ref().map(|s| s.v),
        max: a.max.as_ref().map(|s| s.v),
    }
}
