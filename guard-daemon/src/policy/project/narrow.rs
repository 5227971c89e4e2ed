//! The tightening checks: a project policy's settings and restated tools against the base
//! policy's, key by key and by meaning. Each key that would let a call do anything the base
//! policy would not is an error at the project's line, naming the key and what the base says.
//!
//! The raw items are destructured whole, so a key added to a tool later does not compile
//! here until someone decides whether a project may change it (when in doubt: it may not).

use std::path::Path;

use super::{parse::ProjectSettings, within::within_any};
use crate::{
    call::{decision::RiskTier, plan::OnDivergence},
    policy::{
        Settings,
        raw::{RawArg, RawEffects, RawStdin, RawTool},
        source::{Diag, Loc, S},
    },
};

/// The timeout of a tool that names none (`Confinement::default`).
const DEFAULT_TIMEOUT: i64 = 60;

/// The tasks of a tool that names no limit (`Confinement::default`).
const DEFAULT_PIDS: i64 = 256;

/// What the checks of one tool need: the report, the workspace, the tool's key and where its
/// name is written (for keys that keep no location of their own, such as booleans).
struct Check<'d, 's, 'w> {
    d: &'d mut Diag<'s>,
    ws: &'w Path,
    key: String,
    at: Loc,
}

impl Check<'_, '_, '_> {
    fn widens(&mut self, at: Option<&Loc>, key: &str, msg: impl std::fmt::Display) {
        let at = at.unwrap_or(&self.at).clone();
        let key = format!("{}.{key}", self.key);
        let msg = format!("{msg}: a project policy may only narrow the base policy's tool");
        self.d.err(&at, &key, msg);
    }
}

/// Checks the project's `[settings]` against the base's.
pub(super) fn settings(d: &mut Diag, p: &ProjectSettings, base: &Settings) {
    let tier = |d: &mut Diag, s: &Option<S<RiskTier>>, base: RiskTier, key: &str, what: &str| {
        if let Some(t) = s
            && t.v > base
        {
            let msg = format!(
                "{} is above the base policy's {base}: a project may only {what}",
                t.v
            );
            d.err(&t.at, &format!("settings.{key}"), msg);
        }
    };
    tier(
        d,
        &p.max_allowed_tier,
        base.max_allowed_tier,
        "max_allowed_tier",
        "lower the ceiling",
    );
    tier(
        d,
        &p.escalation_threshold,
        base.escalation_threshold,
        "escalation_threshold",
        "lower the threshold (escalate more)",
    );
    let flag = |d: &mut Diag, s: &Option<S<bool>>, base: bool, key: &str| {
        if let Some(b) = s
            && b.v
            && !base
        {
            let msg = "true where the base policy says false: a project may only turn it off";
            d.err(&b.at, &format!("settings.{key}"), msg);
        }
    };
    flag(d, &p.allow_critical, base.allow_critical, "allow_critical");
    flag(
        d,
        &p.allow_unregistered,
        base.allow_unregistered,
        "allow_unregistered",
    );
}

/// Checks the project's restatement `p` of the base's tool `b`, in workspace `ws`;
/// `default_judges` are the base's `[settings] judges`.
pub(super) fn tool(d: &mut Diag, ws: &Path, p: &RawTool, b: &RawTool, default_judges: &[String]) {
    // Every key, so that one added to a tool does not compile here until it is decided what a
    // project may do with it; each is checked by one of the calls below.
    let RawTool {
        name,
        tier: _,
        irreversible: _,
        // Informational only: neither decides nor confines anything.
        dryrun_supported: _,
        description: _,
        command: _,
        args,
        effects,
        run_as: _,
        timeout: _,
        memory: _,
        pids: _,
        syscalls: _,
        allow_syscalls: _,
        capabilities: _,
        env: _,
        cwd: _,
        stdin: _,
        // Checked against the merged policy, as a base policy's are.
        examples: _,
        judges: _,
        skip_judge: _,
        tmp: _,
        enforce,
    } = p;
    let mut c = Check {
        d,
        ws,
        key: format!("tools.{}", name.v),
        at: name.at.clone(),
    };
    registry(&mut c, p, b);
    if let Some(e) = enforce
        .as_ref()
        .filter(|e| e.v == crate::call::plan::Enforce::Shadow)
    {
        let why = "a workspace with its own policy runs its tools enforced";
        c.widens(Some(&e.at), "enforce", why);
    }
    arguments(&mut c, args, &b.args);
    effects_of(&mut c, effects, &b.effects);
    confinement(&mut c, p, b);
    limits(&mut c, p, b);
    judges(&mut c, p, b, default_judges);
}

/// What the registry says: tier, irreversibility, the command.
fn registry(c: &mut Check, p: &RawTool, b: &RawTool) {
    if p.tier.v < b.tier.v {
        let msg = format!("{} is below the base policy's {}", p.tier.v, b.tier.v);
        c.widens(Some(&p.tier.at), "tier", msg);
    }
    if b.irreversible && !p.irreversible {
        let msg = "the base policy's tool is irreversible";
        c.widens(None, "irreversible", msg);
    }
    let text = |v: &Option<Vec<S<String>>>| v.as_ref().map(|c| strings(c));
    let at = p.command.as_ref().and_then(|c| c.first()).map(|s| &s.at);
    match (text(&p.command), text(&b.command)) {
        (Some(mine), Some(base)) if mine != base => {
            let msg = format!("{mine:?} is not the base's {base:?}");
            c.widens(at, "command", msg);
        }
        (Some(_), None) => c.widens(at, "command", "the base's tool runs nothing"),
        _ => {}
    }
}

/// How it runs: as whom, where, with what environment and input; these stay the base's.
fn confinement(c: &mut Check, p: &RawTool, b: &RawTool) {
    same(c, "run_as", p.run_as.as_ref(), b.run_as.as_ref());
    same(c, "cwd", p.cwd.as_ref(), b.cwd.as_ref());
    let env_text = |e: &[(S<String>, S<String>)]| {
        let mut v: Vec<(String, String)> =
            e.iter().map(|(k, v)| (k.v.clone(), v.v.clone())).collect();
        v.sort();
        v
    };
    if env_text(&p.env) != env_text(&b.env) {
        let at = p.env.first().map(|(k, _)| &k.at);
        c.widens(at, "env", "differs from the base's tool's environment");
    }
    let stdin_text = |s: &Option<RawStdin>| match s {
        None => String::new(),
        Some(RawStdin::Caller) => "caller".into(),
        Some(RawStdin::Arg(a)) => format!("arg:{}", a.v),
    };
    if stdin_text(&p.stdin) != stdin_text(&b.stdin) {
        c.widens(None, "stdin", "differs from the base's tool's stdin");
    }
    if p.tmp && !b.tmp {
        c.widens(None, "tmp", "the base's tool has no temporary directory");
    }
}

/// Its limits and syscalls: each at most the base's.
fn limits(c: &mut Check, p: &RawTool, b: &RawTool) {
    let eff = |t: &Option<S<i64>>| t.as_ref().map_or(DEFAULT_TIMEOUT, |s| s.v);
    if eff(&p.timeout) > eff(&b.timeout) {
        let (mine, base) = (eff(&p.timeout), eff(&b.timeout));
        let msg = format!("{mine} s is longer than the base's {base} s");
        c.widens(p.timeout.as_ref().map(|t| &t.at), "timeout", msg);
    }
    if let Some(bm) = b.memory
        && p.memory.is_none_or(|m| m > bm)
    {
        let msg = format!("more than the base's {bm} bytes");
        c.widens(None, "limits.memory", msg);
    }
    // A tool that names no limit has the default one (`Confinement::default`).
    let pids = |t: &Option<S<i64>>| t.as_ref().map_or(DEFAULT_PIDS, |s| s.v);
    if pids(&p.pids) > pids(&b.pids) {
        let at = p.pids.as_ref().map(|p| &p.at);
        let msg = format!(
            "{} is more than the base's {}",
            pids(&p.pids),
            pids(&b.pids)
        );
        c.widens(at, "limits.pids", msg);
    }
    if !b.syscalls.is_empty() {
        // Strict mode: the listed syscalls only, so fewer is narrower and none is all.
        if p.syscalls.is_empty() {
            let msg = "the base's tool allows only its listed syscalls";
            c.widens(None, "syscalls", msg);
        }
        subset(c, "syscalls", &p.syscalls, &b.syscalls);
    }
    subset(c, "allow_syscalls", &p.allow_syscalls, &b.allow_syscalls);
    subset(c, "capabilities", &p.capabilities, &b.capabilities);
}

/// Its judges: every one the base's tool has (its own list, else `[settings] judges`), and
/// any more of the base policy's.
fn judges(c: &mut Check, p: &RawTool, b: &RawTool, default_judges: &[String]) {
    let effective = |j: &Option<Vec<S<String>>>, skip: &Option<S<bool>>| -> Vec<String> {
        if skip.as_ref().is_some_and(|s| s.v) {
            return Vec::new();
        }
        j.as_ref()
            .map_or_else(|| default_judges.to_vec(), |l| strings(l))
    };
    let mine = effective(&p.judges, &p.skip_judge);
    for j in effective(&b.judges, &b.skip_judge) {
        if !mine.contains(&j) {
            let at = p.skip_judge.as_ref().map(|s| &s.at);
            let first = p.judges.as_ref().and_then(|l| l.first().map(|s| &s.at));
            let msg = format!("leaves out the base's judge '{j}'");
            c.widens(at.or(first), "judges", msg);
        }
    }
}

fn strings(v: &[S<String>]) -> Vec<String> {
    v.iter().map(|s| s.v.clone()).collect()
}

/// A key the project must leave as the base has it.
fn same(c: &mut Check, key: &str, p: Option<&S<String>>, b: Option<&S<String>>) {
    if p.map(|s| &s.v) != b.map(|s| &s.v) {
        let base = b.map_or("not set".to_owned(), |s| format!("{:?}", s.v));
        let msg = format!("differs from the base's tool ({key} {base})");
        c.widens(p.map(|s| &s.at), key, msg);
    }
}

/// Each of `p` must be one of `b`.
fn subset(c: &mut Check, key: &str, p: &[S<String>], b: &[S<String>]) {
    for s in p {
        if !b.iter().any(|x| x.v == s.v) {
            let msg = format!("'{}' is not among the base's {key}", s.v);
            c.widens(Some(&s.at), key, msg);
        }
    }
}

/// The effects: every path within one of the base's for the same key, every destination one of
/// the base's, and no switch the base leaves off turned on.
fn effects_of(c: &mut Check, p: &RawEffects, b: &RawEffects) {
    let RawEffects {
        read,
        write,
        exec,
        connect,
        unix,
        exec_writes,
        on_divergence,
    } = p;
    for (key, list, base) in [
        ("read", read, &b.read),
        ("write", write, &b.write),
        ("exec", exec, &b.exec),
    ] {
        for s in list {
            if !within_any(c.ws, &s.v, base.iter().map(|b| b.v.as_str())) {
                let msg = format!(
                    "'{}' is not within any of the base's {key} paths [{}]",
                    s.v,
                    strings(base).join(", ")
                );
                c.widens(Some(&s.at), &format!("effects.{key}"), msg);
            }
        }
    }
    for s in connect {
        if !b.connect.iter().any(|x| x.v.trim() == s.v.trim()) {
            let msg = format!(
                "'{}' is none of the base's destinations [{}]",
                s.v,
                strings(&b.connect).join(", ")
            );
            c.widens(Some(&s.at), "effects.connect", msg);
        }
    }
    if *unix && !b.unix {
        c.widens(None, "effects.unix", "the base's tool has no Unix sockets");
    }
    if *exec_writes && !b.exec_writes {
        c.widens(
            None,
            "effects.exec_writes",
            "the base's tool runs nothing it writes",
        );
    }
    if *on_divergence == OnDivergence::Deny && b.on_divergence == OnDivergence::Kill {
        let msg = "\"deny\" lets a diverging call go on where the base's \"kill\" stops it";
        c.widens(None, "effects.on_divergence", msg);
    }
}

/// The arguments: the same names, each no wider than the base's.
fn arguments(c: &mut Check, p: &[RawArg], b: &[RawArg]) {
    for a in p {
        match b.iter().find(|x| x.name.v == a.name.v) {
            Some(base) => argument(c, a, base),
            None => {
                let msg = format!("'{}' is not an argument of the base's tool", a.name.v);
                c.widens(Some(&a.name.at), &format!("args.{}", a.name.v), msg);
            }
        }
    }
    for base in b {
        if !p.iter().any(|x| x.name.v == base.name.v) {
            let msg = format!(
                "the base's argument '{}' is missing (restate it; narrow it with its own keys)",
                base.name.v
            );
            c.widens(None, "args", msg);
        }
    }
}

fn argument(c: &mut Check, p: &RawArg, b: &RawArg) {
    let RawArg {
        name,
        ty,
        required,
        within,
        base,
        pattern,
        values,
        max_len,
        hosts,
        schemes,
        min,
        max,
    } = p;
    let key = |k: &str| format!("args.{}.{k}", name.v);
    if ty.v != b.ty.v {
        let msg = format!("{} is not the base's {}", ty.v.name(), b.ty.v.name());
        c.widens(Some(&ty.at), &key("type"), msg);
    }
    if b.required && !required {
        c.widens(Some(&name.at), &key("required"), "the base requires it");
    }
    if !b.within.is_empty() {
        if within.is_empty() {
            let msg = "no within is anywhere, where the base's is bounded";
            c.widens(Some(&name.at), &key("within"), msg);
        }
        for w in within {
            if !within_any(c.ws, &w.v, b.within.iter().map(|x| x.v.as_str())) {
                let msg = format!(
                    "'{}' is not within any of the base's [{}]",
                    w.v,
                    strings(&b.within).join(", ")
                );
                c.widens(Some(&w.at), &key("within"), msg);
            }
        }
    }
    same(c, &key("base"), base.as_ref(), b.base.as_ref());
    if b.pattern.is_some() {
        same(c, &key("pattern"), pattern.as_ref(), b.pattern.as_ref());
    }
    let nonempty_subset = |c: &mut Check, k: &str, p: &[S<String>], b: &[S<String>]| {
        if b.is_empty() {
            return;
        }
        if p.is_empty() {
            c.widens(
                Some(&name.at),
                &key(k),
                "none is any, where the base lists some",
            );
        }
        subset(c, &key(k), p, b);
    };
    nonempty_subset(c, "values", values, &b.values);
    nonempty_subset(c, "hosts", hosts, &b.hosts);
    nonempty_subset(c, "schemes", schemes, &b.schemes);
    let bound = |c: &mut Check, k: &str, p: &Option<S<i64>>, b: &Option<S<i64>>, up: bool| {
        let Some(b) = b else { return };
        match p {
            None => c.widens(
                Some(&name.at),
                &key(k),
                format!("unbounded, where the base says {}", b.v),
            ),
            Some(p) if (up && p.v > b.v) || (!up && p.v < b.v) => {
                c.widens(
                    Some(&p.at),
                    &key(k),
                    format!("{} is looser than the base's {}", p.v, b.v),
                );
            }
            Some(_) => {}
        }
    };
    bound(c, "max_len", max_len, &b.max_len, true);
    bound(c, "max", max, &b.max, true);
    bound(c, "min", min, &b.min, false);
}
