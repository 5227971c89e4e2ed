//! Checks of one tool: its templates (command, effects, cwd, env) against its arguments; its
//! confinement is `confinement`'s.

use std::path::{Path, PathBuf};

use super::{arg::arg, confinement::confinement};
use crate::{
    call::plan::{Endpoint, RUN_AS_OWNER},
    policy::{
        Tool, ToolStdin,
        args::{ArgSpec, normalize},
        detect::DetectorSet,
        overlap::Reach,
        raw::{ArgType, RawStdin, RawTool},
        source::{Diag, S},
        template::{self, Ctx, Elem, placeholder},
    },
};

/// Environment names a policy may not set: each would let the call load code that its exec
/// effects never declared, or (`GLIBC_TUNABLES`) change how the loader and allocator of every
/// program it runs behave, the ground of past loader exploits.
const FORBIDDEN_ENV_PREFIXES: &[&str] = &["LD_", "GCONV_PATH", "MALLOC_", "GLIBC_TUNABLES"];

/// Compiles tool `t`; its rules are linked later, once every rule is known.
pub(super) fn tool(d: &mut Diag, t: &RawTool) -> Tool {
    let tk = format!("tools.{}", t.name.v);
    if t.name.v.is_empty()
        || t.name.v.len() > crate::policy::MAX_NAME
        || !t
            .name
            .v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
    {
        d.err(
            &t.name.at,
            &tk,
            format!(
                "tool names are letters, digits and _ - . :, at most {} of them",
                crate::policy::MAX_NAME
            ),
        );
    }
    let args: Vec<ArgSpec> = t.args.iter().map(|a| arg(d, &tk, a)).collect();
    let tpl = Templates {
        tk: &tk,
        args: &args,
        in_workspace: true,
    };
    let command = t.command.as_ref().map(|c| tpl.command(d, c));
    let read = tpl.paths(d, &t.effects.read, "read");
    let write = tpl.paths(d, &t.effects.write, "write");
    let exec = tpl.paths(d, &t.effects.exec, "exec");
    let cwd = t
        .cwd
        .as_ref()
        .and_then(|c| tpl.paths(d, std::slice::from_ref(c), "cwd").pop());
    let connect = tpl.connect(d, &t.effects.connect);
    let (env, secret_env) = tpl.env(d, &t.env);
    let stdin = stdin(d, &tk, t.stdin.as_ref(), &args);
    let confinement = confinement(d, &tk, t);
    needs_command(d, &tk, t);
    super::shebang::tool(d, &tk, t, &args, &exec);
    let in_workspace = confinement.run_as.as_deref() == Some(RUN_AS_OWNER)
        || [&read, &write, &exec].iter().any(|l| l.iter().any(is_ctx))
        || cwd.iter().any(is_ctx)
        || command.iter().flatten().any(is_ctx)
        || env.iter().any(|(_, e)| is_ctx(e))
        || args
            .iter()
            .any(|a| a.within.iter().chain(&a.base).any(is_ctx));
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
        exec_writes: t.effects.exec_writes,
        tmp: t.tmp,
        on_divergence: t.effects.on_divergence,
        enforce: t.enforce.as_ref().map(|e| e.v).unwrap_or_default(),
        cwd,
        env,
        protected: None,
        secret_env,
        stdin,
        confinement,
        rules: Vec::new(),
        redact: DetectorSet::SECRET_CLASS,
        judges: Vec::new(),
        in_workspace,
    }
}

/// Whether a template names the call's context.
fn is_ctx<L>(e: &Elem<L>) -> bool {
    matches!(e, Elem::Ctx(..))
}

/// What one template string stands for.
enum Slot {
    /// Itself.
    Lit,
    /// The value of the tool's argument at this index.
    Arg(usize),
    /// A path of the call's context, and a relative rest.
    Ctx(Ctx, PathBuf),
}

/// A tool's templates, read against its arguments (none, for a judge's or approver's
/// literal command and effects: every placeholder is then an error).
pub(super) struct Templates<'a> {
    pub tk: &'a str,
    pub args: &'a [ArgSpec],
    /// Whether `{workspace}` and `{cwd}` mean anything: a tool's call has them, the programs
    /// guard runs for itself (judges, approvers, the notifier) do not.
    pub in_workspace: bool,
}

impl Templates<'_> {
    /// What `s` stands for; `None` after reporting a malformed placeholder or one that names
    /// no argument.
    fn slot(&self, d: &mut Diag, s: &S<String>, key: &str) -> Option<Slot> {
        match template::context(&s.v) {
            Some(Ok(_)) if !self.in_workspace => {
                let why = "{workspace} and {cwd} are a tool call's; this program works in none";
                d.err(&s.at, key, why);
                return None;
            }
            Some(Ok((ctx, rest))) => return Some(Slot::Ctx(ctx, rest)),
            Some(Err(why)) => {
                d.err(&s.at, key, why);
                return None;
            }
            None => {}
        }
        match placeholder(&s.v) {
            Err(why) => {
                d.err(&s.at, key, why);
                None
            }
            Ok(None) => Some(Slot::Lit),
            Ok(Some(name)) => match self.args.iter().position(|a| a.name == name) {
                Some(i) => Some(Slot::Arg(i)),
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
    }

    /// `command`: the program is a literal absolute path, so what runs is fixed by the policy
    /// and never looked up in a PATH or chosen by the caller.
    pub(super) fn command(&self, d: &mut Diag, c: &[S<String>]) -> Vec<Elem<String>> {
        let key = format!("{}.command", self.tk);
        let mut out = Vec::new();
        for (i, s) in c.iter().enumerate() {
            match self.slot(d, s, &key) {
                Some(Slot::Arg(_) | Slot::Ctx(..)) if i == 0 => d.err(
                    &s.at,
                    &key,
                    "command[0] must be a literal absolute path, not a placeholder",
                ),
                Some(Slot::Arg(ix)) => out.push(Elem::Arg(ix)),
                Some(Slot::Ctx(c, rest)) => out.push(Elem::Ctx(c, rest)),
                Some(Slot::Lit) if i == 0 && !s.v.starts_with('/') => d.err(
                    &s.at,
                    &key,
                    "command[0] must be an absolute path (no PATH lookup)",
                ),
                Some(Slot::Lit) => out.push(Elem::Lit(s.v.clone())),
                None => {}
            }
        }
        out
    }

    /// Path templates of `effects.<what>` (and of `cwd`): absolute literals, normalised, or
    /// placeholders of path arguments, whose values are checked and resolved per call.
    pub(super) fn paths(&self, d: &mut Diag, list: &[S<String>], what: &str) -> Vec<Elem<PathBuf>> {
        let key = format!("{}.effects.{what}", self.tk);
        let mut out = Vec::new();
        for s in list {
            match self.slot(d, s, &key) {
                Some(Slot::Arg(i)) if self.args[i].ty == ArgType::Path => out.push(Elem::Arg(i)),
                Some(Slot::Arg(i)) => d.err(
                    &s.at,
                    &key,
                    format!("argument '{}' is not a path", self.args[i].name),
                ),
                Some(Slot::Ctx(c, rest)) => out.push(Elem::Ctx(c, rest)),
                Some(Slot::Lit) if s.v.starts_with('/') => {
                    out.push(Elem::Lit(normalize(Path::new(&s.v))));
                }
                Some(Slot::Lit) => d.err(
                    &s.at,
                    &key,
                    "must be an absolute path or a {path} placeholder",
                ),
                None => {}
            }
        }
        out
    }

    /// `effects.connect`: literal `host:port` endpoints (a network too: `10.0.0.0/8:443`), or
    /// placeholders of url arguments.
    pub(super) fn connect(&self, d: &mut Diag, list: &[S<String>]) -> Vec<Elem<Endpoint>> {
        let key = format!("{}.effects.connect", self.tk);
        let mut out = Vec::new();
        for s in list {
            match self.slot(d, s, &key) {
                Some(Slot::Arg(i)) if self.args[i].ty == ArgType::Url => out.push(Elem::Arg(i)),
                Some(Slot::Arg(i)) => d.err(
                    &s.at,
                    &key,
                    format!("argument '{}' is not a url", self.args[i].name),
                ),
                Some(Slot::Ctx(..)) => d.err(&s.at, &key, "a path is no destination"),
                Some(Slot::Lit) => match Endpoint::literal(&s.v) {
                    Some(e) => match crate::policy::addr::parse_network(&e.host) {
                        Some(Err(why)) => d.err(&s.at, &key, why),
                        Some(Ok((net, len))) if crate::policy::addr::holds_metadata(net, len) => d
                            .err(
                                &s.at,
                                &key,
                                "this network holds a cloud metadata endpoint (the host's own \
                             credentials): name that address itself to reach it",
                            ),
                        // A network's address is written as it is matched: host bits zero.
                        _ => out.push(Elem::Lit(e)),
                    },
                    None => d.err(
                        &s.at,
                        &key,
                        "expected \"host:port\", \"network/length:port\" or a {url} placeholder",
                    ),
                },
                None => {}
            }
        }
        out
    }

    /// `env`: each name must be one a shell could export, and none may change how programs
    /// load code; each value is a literal or a placeholder, or a text naming secrets (the
    /// second list, kept as written: the values are put in at launch).
    fn env(&self, d: &mut Diag, env: &[(S<String>, S<String>)]) -> (Env, Vec<(String, String)>) {
        let (mut out, mut secret_env) = (Vec::new(), Vec::new());
        for (k, v) in env {
            let key = format!("{}.env.{}", self.tk, k.v);
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
            if super::super::secrets::is_template(&v.v) {
                // Checked against the policy's secrets once they are read (`secrets`).
                match super::super::secrets::names(&v.v) {
                    Ok(_) => secret_env.push((k.v.clone(), v.v.clone())),
                    Err(e) => d.err(&v.at, &key, e),
                }
                continue;
            }
            match self.slot(d, v, &key) {
                Some(Slot::Arg(i)) => out.push((k.v.clone(), Elem::Arg(i))),
                Some(Slot::Ctx(c, rest)) => out.push((k.v.clone(), Elem::Ctx(c, rest))),
                Some(Slot::Lit) => out.push((k.v.clone(), Elem::Lit(v.v.clone()))),
                None => {}
            }
        }
        (out, secret_env)
    }
}

/// A tool's environment: each variable's template.
type Env = Vec<(String, Elem<String>)>;

/// `stdin`: an argument named as the tool's input must be one of its `string` arguments (its
/// value is what the tool reads; a path, a url or a number is no text to feed it).
fn stdin(d: &mut Diag, tk: &str, raw: Option<&RawStdin>, args: &[ArgSpec]) -> ToolStdin {
    let a = match raw {
        None => return ToolStdin::Passed,
        Some(RawStdin::Caller) => return ToolStdin::Caller,
        Some(RawStdin::Arg(a)) => a,
    };
    let key = format!("{tk}.stdin.arg");
    match args.iter().position(|s| s.name == a.v) {
        Some(i) if args[i].ty == ArgType::String => return ToolStdin::Arg(i),
        Some(i) => d.err(
            &a.at,
            &key,
            format!(
                "argument '{}' is of type {}: the input written to a tool's stdin is a string \
                 argument",
                a.v,
                args[i].ty.name()
            ),
        ),
        None => d.err(
            &a.at,
            &key,
            format!(
                "'{}' names no argument of this tool: declare it in [{tk}.args.{}] with \
                 type = \"string\"",
                a.v, a.v
            ),
        ),
    }
    ToolStdin::Passed
}

/// Effects, cwd, env and stdin only shape a call that runs: on a tool without a command they would
/// promise a confinement that nothing applies.
fn needs_command(d: &mut Diag, tk: &str, t: &RawTool) {
    let e = &t.effects;
    let effects = !e.read.is_empty()
        || !e.write.is_empty()
        || !e.exec.is_empty()
        || !e.connect.is_empty()
        || e.unix;
    let shaped = t.cwd.is_some() || !t.env.is_empty() || t.stdin.is_some() || t.tmp;
    if t.command.is_none() && (effects || shaped) {
        d.err(
            &t.name.at,
            tk,
            "effects, cwd, env, stdin or tmp given but no command to apply them to",
        );
    }
}

/// Refuses a program a call of `runner` may run (`command[0]`, `effects.exec`) that a write
/// effect of `writer` (the same tool, or any other) can also name: that call could replace the
/// program, and the kernel's exec allow-list, which approves the file and not its contents, would
/// run the rewritten one, with `runner`'s effects. Templates are compared by what they can name
/// at load time ([`Reach`]); malformed ones are skipped, they have their own error.
pub(super) fn exec_not_writable(
    d: &mut Diag,
    (runner, runner_args): (&RawTool, &[ArgSpec]),
    (writer, writer_args): (&RawTool, &[ArgSpec]),
    workspaces: &[PathBuf],
) {
    let tk = format!("tools.{}", runner.name.v);
    let reach = |s: &S<String>, args: &[ArgSpec]| -> Option<(Reach, String)> {
        if let Some(Ok(_)) = template::context(&s.v) {
            let what = format!("\"{}\" (a workspace)", s.v);
            return Some((Reach::workspace(workspaces), what));
        }
        match placeholder(&s.v) {
            Ok(None) if s.v.starts_with('/') => Some((
                Reach::literal(&normalize(Path::new(&s.v))),
                format!("\"{}\"", s.v),
            )),
            Ok(Some(name)) => {
                let spec = args
                    .iter()
                    .find(|a| a.name == name && a.ty == ArgType::Path)?;
                let reach = Reach::arg(spec, workspaces);
                let what = match reach {
                    Reach::Anywhere => format!("\"{}\" (any path: '{name}' has no within)", s.v),
                    Reach::Beneath(_) => format!("\"{}\"", s.v),
                };
                Some((reach, what))
            }
            _ => None,
        }
    };
    let writes: Vec<(&S<String>, Reach, String)> = writer
        .effects
        .write
        .iter()
        .filter_map(|s| reach(s, writer_args).map(|(r, what)| (s, r, what)))
        .collect();
    if writes.is_empty() {
        return;
    }
    let (whose, who) = if std::ptr::eq(runner, writer) {
        (
            String::new(),
            "the call could replace a program it may run".to_string(),
        )
    } else {
        let w = &writer.name.v;
        (
            format!(" of tool '{w}'"),
            format!("a call of '{w}' could replace a program this tool may run"),
        )
    };
    // command[0] is a literal absolute path, or already an error.
    let program = runner.command.iter().filter_map(|c| c.first());
    let programs = program
        .filter(|s| s.v.starts_with('/'))
        .map(|s| (s, "command"))
        .chain(runner.effects.exec.iter().map(|s| (s, "effects.exec")));
    for (s, key) in programs {
        let Some((runs, what)) = reach(s, runner_args) else {
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
                "program {what} and write effect {wwhat}{whose} (line {line}) both reach \
                 {shared}: {who}, and the kernel's exec allow-list, which approves the file and \
                 not its contents, would run the rewritten program"
            ),
        );
    }
}
