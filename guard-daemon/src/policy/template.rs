//! Templates: command elements, effects and cwd written with `{arg}` placeholders. A
//! placeholder is always a whole element, so an argument can never add argv elements or
//! splice itself into another one. `{workspace}` and `{cwd}`, the call's workspace and the
//! caller's working directory in it, may be followed by `/` and a relative path
//! (`{workspace}/target`): guardd, not the caller, chose both (see `Policy::workspace_of`).

use std::{
    borrow::Cow,
    ffi::OsString,
    path::{Component, Path, PathBuf},
};

use crate::call::plan::Endpoint;

/// A literal, one argument (by index into the tool's arguments), or a path of the call's
/// context with a relative rest (empty for the context path itself).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Elem<L> {
    Lit(L),
    Arg(usize),
    Ctx(Ctx, PathBuf),
}

/// The paths of a call's context a template may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// `{workspace}`: the `[workspaces]` root that holds the caller's working directory.
    Workspace,
    /// `{cwd}`: the caller's working directory, inside its workspace.
    Cwd,
}

impl Ctx {
    /// The placeholder as a policy writes it.
    pub fn name(self) -> &'static str {
        match self {
            Ctx::Workspace => "{workspace}",
            Ctx::Cwd => "{cwd}",
        }
    }
}

/// The call's context: where it works. Both `None` for a caller that sent no working
/// directory, or one outside every workspace.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Context<'a> {
    pub workspace: Option<&'a Path>,
    pub cwd: Option<&'a Path>,
}

impl Context<'_> {
    /// The path `ctx` names joined with `rest`; `None` when the call has no such path.
    pub fn path(&self, ctx: Ctx, rest: &Path) -> Option<PathBuf> {
        let base = match ctx {
            Ctx::Workspace => self.workspace?,
            Ctx::Cwd => self.cwd?,
        };
        Some(if rest.as_os_str().is_empty() {
            base.to_path_buf()
        } else {
            base.join(rest)
        })
    }
}

/// What templates are filled with: the checked arguments and the call's context.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Values<'a> {
    pub args: &'a [Option<ArgValue>],
    pub ctx: Context<'a>,
}

/// `{workspace}` or `{cwd}`, alone or followed by `/` and a relative path without `..`;
/// `None` when `s` starts with neither.
pub(crate) fn context(s: &str) -> Option<Result<(Ctx, PathBuf), &'static str>> {
    let (ctx, rest) = [Ctx::Workspace, Ctx::Cwd]
        .into_iter()
        .find_map(|c| s.strip_prefix(c.name()).map(|rest| (c, rest)))?;
    if rest.is_empty() {
        return Some(Ok((ctx, PathBuf::new())));
    }
    let Some(rel) = rest.strip_prefix('/') else {
        return Some(Err(
            "{workspace} and {cwd} are followed by nothing, or by /path",
        ));
    };
    let rel = Path::new(rel);
    if rest.contains(['{', '}'])
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Some(Err(
            "the path after {workspace} or {cwd} may not hold .. or braces",
        ));
    }
    Some(Ok((ctx, rel.components().collect())))
}

/// Splits `{name}` from a literal. `Err` when braces appear anywhere but around a whole
/// element, which would be either a typo or an attempt at a partial placeholder.
pub(crate) fn placeholder(s: &str) -> Result<Option<&str>, &'static str> {
    if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        if inner.is_empty() || inner.contains(['{', '}']) {
            return Err("malformed placeholder");
        }
        return Ok(Some(inner));
    }
    if s.contains(['{', '}']) {
        return Err("a placeholder must be a whole element, like \"{path}\"");
    }
    Ok(None)
}

/// argv elements; an absent optional argument drops its element.
pub(crate) fn argv(elems: &[Elem<String>], v: &Values) -> Vec<OsString> {
    elems
        .iter()
        .filter_map(|e| match e {
            Elem::Lit(s) => Some(OsString::from(s)),
            Elem::Arg(i) => v.args.get(*i)?.as_ref().map(|v| match v {
                ArgValue::Path(p) => p.clone().into_os_string(),
                other => OsString::from(other.text().into_owned()),
            }),
            Elem::Ctx(c, rest) => v.ctx.path(*c, rest).map(PathBuf::into_os_string),
        })
        .collect()
}

/// The path `e` names for this call; `None` for an optional argument not given.
pub(crate) fn path(e: &Elem<PathBuf>, v: &Values) -> Option<PathBuf> {
    match e {
        Elem::Lit(p) => Some(p.clone()),
        Elem::Arg(i) => match v.args.get(*i)? {
            Some(ArgValue::Path(p)) => Some(p.clone()),
            _ => None,
        },
        Elem::Ctx(c, rest) => v.ctx.path(*c, rest),
    }
}

/// The endpoint `e` names for this call: a url argument's host and port.
pub(crate) fn endpoint(e: &Elem<Endpoint>, v: &Values) -> Option<Endpoint> {
    match e {
        Elem::Lit(ep) => Some(ep.clone()),
        Elem::Arg(i) => match v.args.get(*i)? {
            Some(ArgValue::Url { host, port, .. }) => Some(Endpoint {
                host: host.clone(),
                port: *port,
            }),
            _ => None,
        },
        Elem::Ctx(..) => None,
    }
}

/// The text `e` stands for in this call (an env value); `None` for an argument not given.
pub(crate) fn text(e: &Elem<String>, v: &Values) -> Option<String> {
    match e {
        Elem::Lit(s) => Some(s.clone()),
        Elem::Arg(i) => v.args.get(*i)?.as_ref().map(|v| v.text().into_owned()),
        Elem::Ctx(c, rest) => v
            .ctx
            .path(*c, rest)
            .map(|p| p.to_string_lossy().into_owned()),
    }
}

/// A checked argument value, ready to template.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ArgValue {
    Str(String),
    Path(PathBuf),
    Url {
        raw: String,
        host: String,
        port: u16,
    },
    Int(i64),
    Bool(bool),
}

impl ArgValue {
    /// The value as text, as rules match it and templates insert it.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            ArgValue::Str(s) | ArgValue::Url { raw: s, .. } => Cow::Borrowed(s),
            ArgValue::Path(p) => p.to_string_lossy(),
            ArgValue::Int(n) => Cow::Owned(n.to_string()),
            ArgValue::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_whole_elements() {
        assert_eq!(placeholder("{path}"), Ok(Some("path")));
        assert_eq!(placeholder("--"), Ok(None));
        assert!(placeholder("--file={path}").is_err());
        assert!(placeholder("{}").is_err());
        assert!(placeholder("{a}{b}").is_err());
    }

    #[test]
    fn argv_templating() {
        let elems = vec![
            Elem::Lit("/bin/cat".to_string()),
            Elem::Lit("--".into()),
            Elem::Arg(0),
            Elem::Arg(1),
        ];
        let values = |args| Values {
            args,
            ctx: Context::default(),
        };
        let vals = vec![Some(ArgValue::Path("/srv/a b".into())), None];
        assert_eq!(
            argv(&elems, &values(&vals)),
            vec![OsString::from("/bin/cat"), "--".into(), "/srv/a b".into()]
        );
        let vals = vec![Some(ArgValue::Int(7)), Some(ArgValue::Bool(true))];
        assert_eq!(
            argv(&elems, &values(&vals))[2..],
            [OsString::from("7"), "true".into()]
        );
    }

    #[test]
    fn context_placeholders_take_a_relative_rest_only() {
        assert_eq!(
            context("{workspace}"),
            Some(Ok((Ctx::Workspace, PathBuf::new())))
        );
        assert_eq!(
            context("{workspace}/target/x"),
            Some(Ok((Ctx::Workspace, PathBuf::from("target/x"))))
        );
        assert_eq!(context("{cwd}"), Some(Ok((Ctx::Cwd, PathBuf::new()))));
        assert_eq!(context("/srv/{workspace}"), None);
        assert_eq!(context("{path}"), None);
        for bad in [
            "{workspace}x",
            "{workspace}/../etc",
            "{cwd}/{path}",
            "{workspace}//a/..",
        ] {
            assert!(matches!(context(bad), Some(Err(_))), "{bad}");
        }
        let ws = Path::new("/srv/ws");
        let ctx = Context {
            workspace: Some(ws),
            cwd: None,
        };
        assert_eq!(
            ctx.path(Ctx::Workspace, Path::new("t")),
            Some(PathBuf::from("/srv/ws/t"))
        );
        assert_eq!(ctx.path(Ctx::Cwd, Path::new("")), None);
    }
}
