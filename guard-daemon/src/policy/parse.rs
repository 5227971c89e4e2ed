//! Syntax: TOML text to raw, located policy items. Types and key names are checked here; what
//! the items mean together (placeholders, rule targets, regexes) is `validate`'s job.

use toml::de::{DeTable, DeValue};

pub(crate) mod approval_file;
mod rules;
mod values;

pub(crate) use rules::rule;

pub(crate) use values::valid_account_name;
use values::{Account, Action, Size};

use super::{
    raw::{
        Principal, RawAgent, RawApprovals, RawApprover, RawArg, RawDoc, RawEffects, RawExample,
        RawHelper, RawJudge, RawSecret, RawSettings, RawStdin, RawTool, RawWorkspaces,
    },
    source::{Diag, Loc, S},
    table::{FromToml, Table},
};

/// The TOML document of `text` (file `file` of `d`'s sources); `None`, the syntax error
/// reported, when it is none: TOML cannot be read past one reliably.
pub(crate) fn document<'i>(
    d: &mut Diag,
    file: usize,
    text: &'i str,
) -> Option<toml::Spanned<DeTable<'i>>> {
    match DeTable::parse(text) {
        Ok(t) => Some(t),
        Err(e) => {
            let at = Loc {
                file,
                span: e.span().unwrap_or(0..0),
            };
            d.err(&at, "", e.message().trim());
            None
        }
    }
}

/// Parses one file. Syntax errors end the file's parse; every other error is collected and
/// parsing goes on.
pub(crate) fn parse_file(d: &mut Diag, file: usize, text: &str) -> RawDoc {
    let Some(root) = document(d, file, text) else {
        return RawDoc::default();
    };
    let mut doc = RawDoc::default();
    let mut top = Table::new(file, String::new(), root.get_ref(), root.span());
    if let Some(t) = top.table(d, "settings") {
        doc.settings = Some(settings(d, t));
    }
    if let Some(t) = top.table(d, "approvals") {
        doc.approvals = Some(approvals(d, t));
    }
    if let Some(mut t) = top.table(d, "workspaces") {
        doc.workspaces = Some(RawWorkspaces {
            at: t.at.clone(),
            roots: t.list(d, "roots"),
            protected: t
                .given("protected")
                .is_some()
                .then(|| t.list(d, "protected")),
        });
        t.finish(d);
    }
    if let Some(agents) = top.table(d, "agents") {
        doc.agents = agents.named_tables(d, agent);
    }
    if let Some(secrets) = top.table(d, "secrets") {
        doc.secrets = secrets.named_tables(d, |d, name, mut t| {
            let s = RawSecret {
                name,
                source: t.take(d, "source"),
                hosts: t.list(d, "hosts"),
            };
            t.finish(d);
            Some(s)
        });
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
        enforce: t.take(d, "enforce"),
        judges: t.list(d, "judges"),
        approval_policies: t.take(d, "approval_policies"),
    };
    t.finish(d);
    s
}

/// The documents of `files` (a policy's sources): each TOML file parsed, and the approvers of each
/// approval policies file (which `Policy::load` added for a `[settings] approval_policies`)
/// after those of the last TOML file.
pub(crate) fn documents(d: &mut Diag, files: &[(std::path::PathBuf, String)]) -> Vec<RawDoc> {
    let (policies, approvals): (Vec<_>, Vec<_>) = (files.iter().enumerate())
        .partition(|(_, (path, _))| !approval_file::is_approval_file(path));
    let mut docs: Vec<RawDoc> = (policies.into_iter())
        .map(|(i, (_, text))| parse_file(d, i, text))
        .collect();
    let mut added = Vec::new();
    for (i, (_, text)) in approvals {
        added.extend(approval_file::approvers(d, i, text));
    }
    // A file named here but not added was never read: only `Policy::load` reads them.
    for doc in &docs {
        let Some(named) = doc
            .settings
            .as_ref()
            .and_then(|s| s.approval_policies.as_ref())
        else {
            continue;
        };
        if !files
            .iter()
            .any(|(p, _)| approval_file::is_approval_file(p))
        {
            let msg = "the approval policies file is read only where guardd loads its policy \
                       (guardd --policy, guardctl policy check FILE)";
            d.err(&named.at, "settings.approval_policies", msg);
        }
    }
    if let Some(last) = docs.last_mut() {
        last.approvers.extend(added);
    }
    docs
}

fn agent(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawAgent> {
    let a = RawAgent {
        name,
        uids: principals(d, &mut t, "uids"),
        cgroups: t.list(d, "cgroups"),
        tools_given: t.given("tools").is_some(),
        tools: t.list(d, "tools"),
        max_tier: t.take(d, "max_tier"),
        max_running: t.take(d, "max_running"),
        rate: t.take(d, "rate"),
        labels: t
            .table(d, "labels")
            .map(|l| {
                l.named_tables(d, |d, name, mut lt| {
                    let tools = lt.list(d, "tools");
                    lt.finish(d);
                    Some((name, tools))
                })
            })
            .unwrap_or_default(),
    };
    t.finish(d);
    Some(a)
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

pub(super) fn approver(d: &mut Diag, index: usize, mut t: Table) -> Option<RawApprover> {
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
        choices: t.given("choices").is_some().then(|| t.list(d, "choices")),
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

pub(super) fn tool(d: &mut Diag, name: S<String>, mut t: Table) -> Option<RawTool> {
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
    let capabilities = t.list(d, "capabilities");
    let env = t
        .table(d, "env")
        .map_or_else(Vec::new, |e| e.named_values(d));
    let cwd = t.take(d, "cwd");
    let stdin = stdin(d, &mut t);
    let tmp = t.take::<bool>(d, "tmp").is_some_and(|b| b.v);
    let examples = t.tables(d, "examples", "[[examples]]", example);
    let judges = t.given("judges").is_some().then(|| t.list(d, "judges"));
    let skip_judge = t.take(d, "skip_judge");
    let enforce = t.take(d, "enforce");
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
        capabilities,
        env,
        cwd,
        stdin,
        tmp,
        examples,
        judges,
        skip_judge,
        enforce,
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
        exec_writes: e.take::<bool>(d, "exec_writes").is_some_and(|b| b.v),
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
    let cwd = t.take::<String>(d, "cwd").map(|c| c.v.into());
    t.finish(d);
    Some(RawExample {
        at,
        index,
        args,
        cwd,
        expect: expect?,
    })
}
