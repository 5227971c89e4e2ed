//! Syntax: TOML text to raw, located policy items. Types and key names are checked here; what
//! the items mean together (placeholders, rule targets, regexes) is `validate`'s job.

use serde_json::Value as Json;
use toml::de::{DeTable, DeValue};

use super::{
    raw::{
        ArgType, Principal, RawApprovals, RawApprover, RawArg, RawDoc, RawEffects, RawExample,
        RawHelper, RawJudge, RawRule, RawSettings, RawStdin, RawTool,
    },
    source::{Diag, Loc, S},
    table::{FromToml, ListItem, Table, named},
};
use crate::{
    decision::{Decision, RiskTier},
    detect::Detector,
    plan::OnDivergence,
};

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
    if let Some(t) = top.table(d, "approvals") {
        doc.approvals = Some(approvals(d, t));
    }
    if let Some(judges) = top.table(d, "judges") {
        doc.judges = judges.named_tables(d, judge);
    }
    doc.approvers = top.tables(d, "approvers", "[[approvers]]", approver);
    if let Some(tools) = top.table(d, "tools") {
        doc.tools = tools.named_tables(d, tool);
    }
    doc.rules = top.tables(d, "rules", "[[rules]]", rule);
    top.finish(d);
    doc
}

fn settings(d: &mut Diag, mut t: Table) -> RawSettings {
    let s = RawSettings {
        at: t.at.clone(),
        max_allowed_tier: t.take(d, "max_allowed_tier"),
        allow_critical: t.take(d, "allow_critical"),
        escalation_threshold: t.take(d, "escalation_threshold"),
        allow_unregistered: t.take::<bool>(d, "allow_unregistered").map(|b| b.v),
        disclose_reasons: t.take::<bool>(d, "disclose_reasons").map(|b| b.v),
        clients: principals(d, &mut t, "clients"),
        admins: principals(d, &mut t, "admins"),
        client_groups: principals(d, &mut t, "client_groups"),
        admin_groups: principals(d, &mut t, "admin_groups"),
        socket_group: t.take::<Account>(d, "socket_group").map(|a| a.v.0),
        run_as: t.take::<Account>(d, "run_as").map(|a| a.v.0),
        judges: t.list(d, "judges"),
    };
    t.finish(d);
    s
}

fn approvals(d: &mut Diag, mut t: Table) -> RawApprovals {
    let at = t.at.clone();
    let allow_self = t.take(d, "allow_self");
    let notify = t.given("notify").is_some().then(|| {
        let command = t.list(d, "notify");
        if command.is_empty() {
            d.err(&t.at, &t.key("notify"), "notify must name a program");
        }
        let effects = t
            .table(d, "notify_effects")
            .map(|e| effects(d, e))
            .unwrap_or_default();
        RawHelper {
            command,
            effects,
            timeout: t.take(d, "notify_timeout"),
        }
    });
    t.finish(d);
    RawApprovals {
        at,
        allow_self,
        notify,
    }
}

fn judge(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawJudge> {
    let command = match command(d, &mut t) {
        Some(c) => c,
        None => {
            d.err(&name.at, &t.path, "missing key 'command'");
            Vec::new()
        }
    };
    let effects = t
        .table(d, "effects")
        .map(|e| effects(d, e))
        .unwrap_or_default();
    let j = RawJudge {
        name,
        helper: RawHelper {
            command,
            effects,
            timeout: t.take(d, "timeout"),
        },
        criteria: t.take(d, "criteria").map(|s| s.v),
        min_score: t.take(d, "min_score"),
        min_confidence: t.take(d, "min_confidence"),
    };
    t.finish(d);
    Some(j)
}

fn approver(d: &mut Diag, index: usize, mut t: Table) -> Option<RawApprover> {
    let at = t.at.clone();
    let tools = t.list(d, "tools");
    if tools.is_empty() {
        d.err(
            &at,
            &t.key("tools"),
            "an approver must name at least one tool or glob",
        );
    }
    let approver = t.take(d, "approver");
    require(d, &t, "approver", &at, &approver, string);
    let a = RawApprover {
        index,
        tools,
        approver,
        decision: t.take(d, "decision"),
        timeout: t.take(d, "timeout"),
        effects: t
            .table(d, "effects")
            .map(|e| effects(d, e))
            .unwrap_or_default(),
    };
    t.finish(d);
    Some(a)
}

fn principals(d: &mut Diag, t: &mut Table, k: &str) -> Vec<Principal> {
    t.list(d, k).into_iter().map(|p| p.v).collect()
}

/// Reports `k` missing from `t` (a table written at `at`) when `v`, what was read from it, is
/// `None` and `given` says nothing usable was written: a value of the wrong type has its own
/// error already unless `given` rejects it too.
fn require<T>(
    d: &mut Diag,
    t: &Table,
    k: &str,
    at: &Loc,
    v: &Option<S<T>>,
    given: fn(&DeValue) -> bool,
) {
    if v.is_none() && !t.given(k).is_some_and(given) {
        d.err(at, &t.path, format!("missing key '{k}'"));
    }
}

/// Any value counts as given (its type error says what is wrong).
fn any(_: &DeValue) -> bool {
    true
}

/// Only a string counts as given: a required name of another type is also reported missing.
fn string(v: &DeValue) -> bool {
    matches!(v, DeValue::String(_))
}

fn tool(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawTool> {
    let tier = t.take(d, "tier");
    require(d, &t, "tier", &name.at, &tier, any);
    let irreversible = t.take::<bool>(d, "irreversible").is_some_and(|b| b.v);
    let dryrun_supported = t.take::<bool>(d, "dryrun_supported").is_some_and(|b| b.v);
    let description = t.take(d, "description").map(|s| s.v);
    let command = command(d, &mut t);
    let args = t
        .table(d, "args")
        .map_or_else(Vec::new, |a| a.named_tables(d, arg));
    let effects = t
        .table(d, "effects")
        .map(|e| effects(d, e))
        .unwrap_or_default();
    let run_as = t.take(d, "run_as");
    let timeout = t.take(d, "timeout");
    let (memory, pids) = t.table(d, "limits").map_or((None, None), |l| limits(d, l));
    let syscalls = t.list(d, "syscalls");
    let allow_syscalls = t.list(d, "allow_syscalls");
    let env = t
        .table(d, "env")
        .map_or_else(Vec::new, |e| e.named_values(d));
    let cwd = t.take(d, "cwd");
    let stdin = stdin(d, &mut t);
    let examples = t.tables(d, "examples", "[[examples]]", example);
    let judges = t.given("judges").is_some().then(|| t.list(d, "judges"));
    let skip_judge = t.take(d, "skip_judge");
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
        stdin,
        examples,
        judges,
        skip_judge,
    })
}

/// `stdin`: `"caller"`, or a table `{ arg = "NAME" }`; `None` when not given, or (with an
/// error) when it is neither.
fn stdin(d: &mut Diag, t: &mut Table) -> Option<RawStdin> {
    if let DeValue::Table(_) = t.given("stdin")? {
        let mut s = t.table(d, "stdin")?;
        let at = s.at.clone();
        let arg = s.take(d, "arg");
        require(d, &s, "arg", &at, &arg, any);
        s.finish(d);
        return arg.map(RawStdin::Arg);
    }
    t.take::<Caller>(d, "stdin").map(|_| RawStdin::Caller)
}

/// `stdin = "caller"`, the one string `stdin` may be.
struct Caller;

impl FromToml for Caller {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let not =
            |found: &str| format!("expected \"caller\" or {{ arg = \"NAME\" }}, found {found}");
        match v {
            DeValue::String(s) if s.as_ref() == "caller" => Ok(Caller),
            DeValue::String(s) => Err(not(&format!("'{s}'"))),
            other => Err(not(other.type_str())),
        }
    }
}

/// `command`: `None` when not given (the tool can be decided but never run); given, it must
/// name at least the program.
fn command(d: &mut Diag, t: &mut Table) -> Option<Vec<S<String>>> {
    t.given("command")?;
    let c = t.list(d, "command");
    if c.is_empty() {
        d.err(&t.at, &t.key("command"), "command must name a program");
    }
    Some(c)
}

fn effects(d: &mut Diag, mut e: Table) -> RawEffects {
    let effects = RawEffects {
        read: e.list(d, "read"),
        write: e.list(d, "write"),
        exec: e.list(d, "exec"),
        connect: e.list(d, "connect"),
        unix: e.take::<bool>(d, "unix").is_some_and(|b| b.v),
        on_divergence: e.take(d, "on_divergence").map(|s| s.v).unwrap_or_default(),
    };
    e.finish(d);
    effects
}

/// `[limits]`: (memory in bytes, pids).
fn limits(d: &mut Diag, mut l: Table) -> (Option<u64>, Option<S<i64>>) {
    let memory = l.take::<Size>(d, "memory").map(|s| s.v.0);
    let pids = l.take(d, "pids");
    l.finish(d);
    (memory, pids)
}

fn arg(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawArg> {
    let ty = t.take(d, "type");
    require(d, &t, "type", &name.at, &ty, any);
    let a = RawArg {
        name,
        ty: ty?,
        // Stricter default: an argument is required unless the policy says otherwise.
        required: t.take::<bool>(d, "required").is_none_or(|b| b.v),
        within: t.list(d, "within"),
        base: t.take(d, "base"),
        pattern: t.take(d, "pattern"),
        values: t.list(d, "values"),
        max_len: t.take(d, "max_len"),
        hosts: t.list(d, "hosts"),
        schemes: t.list(d, "schemes"),
        min: t.take(d, "min"),
        max: t.take(d, "max"),
    };
    let _ = t.take::<String>(d, "description");
    t.finish(d);
    Some(a)
}

fn example(d: &mut Diag, index: usize, mut t: Table) -> Option<RawExample> {
    let at = t.at.clone();
    let args = t.take(d, "args").map(|a| a.v).unwrap_or_default();
    let expect = t.take(d, "expect");
    require(d, &t, "expect", &at, &expect, string);
    let _ = t.take::<String>(d, "name");
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
        action: action.map(|a| S { v: a.v.0, at: a.at })?,
        message,
    })
}

/// `detect`: an unknown detector is reported under `detect` itself, not at its index, with
/// the names a rule may use.
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

/// A number: a float or an integer (`min_score = 1`).
impl FromToml for f64 {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Float(f) => f
                .as_str()
                .parse::<f64>()
                .map_err(|_| "not a number".to_string()),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n as f64)
                .map_err(|_| "integer out of range".to_string()),
            other => Err(format!("expected a number, found {}", other.type_str())),
        }
    }
}

impl FromToml for RiskTier {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, RiskTier::from_name, |s| {
            format!("unknown tier '{s}' (low | medium | high | critical)")
        })
    }
}

impl FromToml for ArgType {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, ArgType::from_name, |s| {
            format!("unknown type '{s}' (string | path | url | integer | boolean | enum)")
        })
    }
}

impl FromToml for OnDivergence {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let lookup = |s: &str| match s {
            "kill" => Some(OnDivergence::Kill),
            "deny" => Some(OnDivergence::Deny),
            _ => None,
        };
        named(v, lookup, |s| {
            format!("unknown on_divergence '{s}' (kill | deny)")
        })
    }
}

/// An example's `expect`: any decision, allow included.
impl FromToml for Decision {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, Decision::from_name, |s| {
            format!("unknown decision '{s}' (allow | escalate | quarantine | block)")
        })
    }
}

/// A rule's `action`: a decision other than allow (a rule only ever makes a call stricter).
struct Action(Decision);

impl FromToml for Action {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let lookup = |s: &str| Decision::from_name(s).filter(|&a| a != Decision::Allow);
        named(v, lookup, |s| {
            format!("unknown action '{s}' (block | escalate | quarantine)")
        })
        .map(Action)
    }
}

/// A user or group name that `useradd` would accept.
struct Account(String);

impl FromToml for Account {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let s = String::from_toml(v)?;
        if valid_account_name(&s) {
            Ok(Account(s))
        } else {
            Err(format!("'{s}' is not a valid user or group name"))
        }
    }
}

impl FromToml for Principal {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Integer(n) => u32::from_str_radix(n.as_str(), n.radix())
                .map(Principal::Id)
                .map_err(|_| "id out of range (0 to 4294967295)".to_string()),
            DeValue::String(s) if valid_account_name(s) => Ok(Principal::Name(s.to_string())),
            DeValue::String(s) => Err(format!("'{s}' is not a valid user or group name")),
            other => Err(format!(
                "expected an id or a name, found {}",
                other.type_str()
            )),
        }
    }
}

impl ListItem for Principal {
    fn not_an_array(_: &str) -> String {
        "expected an array of ids or names".to_string()
    }
}

/// `[limits] memory`: bytes, as an integer or a string with a binary suffix.
struct Size(u64);

impl FromToml for Size {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::String(s) => parse_size(s)
                .map(Size)
                .ok_or_else(|| format!("bad size '{s}' (bytes, or a number with K, M or G)")),
            DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) if n > 0 => Ok(Size(n)),
                _ => Err("bad size (a positive number of bytes)".to_string()),
            },
            other => Err(format!("expected a size, found {}", other.type_str())),
        }
    }
}

/// An example's `args`: the call's arguments, as the JSON a client would send.
impl FromToml for serde_json::Map<String, Json> {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match to_json(v) {
            Json::Object(m) => Ok(m),
            _ => Err("expected a table of arguments".to_string()),
        }
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
