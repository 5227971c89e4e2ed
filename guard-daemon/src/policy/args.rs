//! Argument checking at decision time: type, shape, and for paths the resolved location.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::Value as Json;

use super::{
    raw::ArgType,
    template::{Context, Elem},
};

/// One declared argument, compiled.
#[derive(Clone, Debug)]
pub(crate) struct ArgSpec {
    pub name: String,
    pub ty: ArgType,
    pub required: bool,
    /// Roots a path must lie under (literals resolved when they exist at load, or
    /// `{workspace}`, `{cwd}`).
    pub within: Vec<Elem<PathBuf>>,
    pub base: Option<Elem<PathBuf>>,
    /// Anchored: `^(?:pattern)$`.
    pub pattern: Option<Regex>,
    pub values: Vec<String>,
    pub max_len: Option<usize>,
    /// Exact names, or `*.example.com` for any subdomain (not the apex).
    pub hosts: Vec<String>,
    pub schemes: Vec<String>,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

pub(crate) use super::template::ArgValue;

/// Why an argument was refused. Worded without the value: it may be a secret.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ArgError {
    pub arg: String,
    pub reason: String,
    /// What was sent does not fit the tool's form (unknown, missing, of the wrong type, a NUL,
    /// a relative path without a base, no url at all): a mistake its caller is told of, where
    /// a constraint it broke (a pattern, `within`, a host) is the policy's to keep.
    pub form: bool,
}

fn fail(arg: &str, reason: impl Into<String>) -> ArgError {
    ArgError {
        arg: arg.to_string(),
        reason: reason.into(),
        form: false,
    }
}

/// [`fail`] for what does not fit the tool's form.
fn misfit(arg: &str, reason: impl Into<String>) -> ArgError {
    ArgError {
        form: true,
        ..fail(arg, reason)
    }
}

/// True when any string inside `v` holds a NUL: it would truncate a C string somewhere below.
pub(crate) fn has_nul(v: &Json) -> bool {
    match v {
        Json::String(s) => s.contains('\0'),
        Json::Array(a) => a.iter().any(has_nul),
        Json::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// A `within` or `base` root for this call: a literal, or a path of its context (`None` when
/// the call has none).
pub(crate) fn root(e: &Elem<PathBuf>, ctx: &Context) -> Option<PathBuf> {
    match e {
        Elem::Lit(p) => Some(p.clone()),
        Elem::Ctx(c, rest) => ctx.path(*c, rest),
        Elem::Arg(_) => None,
    }
}

/// Checks `args` against `specs`, path roots taken in `ctx`; the result is aligned with
/// `specs`.
pub(crate) fn check(
    specs: &[ArgSpec],
    args: &serde_json::Map<String, Json>,
    ctx: &Context,
) -> Result<Vec<Option<ArgValue>>, ArgError> {
    for (k, v) in args {
        if !specs.iter().any(|s| s.name == *k) {
            return Err(misfit(
                k,
                format!("unknown argument '{}'", k.escape_debug()),
            ));
        }
        if has_nul(v) {
            return Err(misfit(k, format!("argument '{k}' contains a NUL byte")));
        }
    }
    specs
        .iter()
        .map(|spec| match args.get(&spec.name) {
            None | Some(Json::Null) if spec.required => Err(misfit(
                &spec.name,
                format!("missing required argument '{}'", spec.name),
            )),
            None | Some(Json::Null) => Ok(None),
            Some(v) => spec.check(v, ctx).map(Some),
        })
        .collect()
}

impl ArgSpec {
    /// This argument with only what makes it fit its command: its type, presence and form
    /// (a path with a base, a url that parses, no cloud metadata address). What a call in shadow
    /// is checked against once the whole spec refused it.
    pub(crate) fn relaxed(&self) -> ArgSpec {
        ArgSpec {
            within: Vec::new(),
            pattern: None,
            values: Vec::new(),
            max_len: None,
            hosts: Vec::new(),
            schemes: Vec::new(),
            min: None,
            max: None,
            ..self.clone()
        }
    }

    fn check(&self, v: &Json, ctx: &Context) -> Result<ArgValue, ArgError> {
        let n = &self.name;
        let wrong = || {
            misfit(
                n,
                format!("argument '{n}' must be of type {}", self.ty.name()),
            )
        };
        match self.ty {
            ArgType::Integer => {
                let x = v.as_i64().ok_or_else(wrong)?;
                if self.min.is_some_and(|m| x < m) || self.max.is_some_and(|m| x > m) {
                    return Err(fail(n, format!("argument '{n}' is out of range")));
                }
                Ok(ArgValue::Int(x))
            }
            ArgType::Boolean => v.as_bool().map(ArgValue::Bool).ok_or_else(wrong),
            ArgType::String | ArgType::Enum | ArgType::Path | ArgType::Url => {
                let s = v.as_str().ok_or_else(wrong)?;
                if self.max_len.is_some_and(|m| s.len() > m) {
                    return Err(fail(n, format!("argument '{n}' is longer than max_len")));
                }
                if !self.values.is_empty() && !self.values.iter().any(|x| x == s) {
                    return Err(fail(
                        n,
                        format!("argument '{n}' is not one of the allowed values"),
                    ));
                }
                if self.pattern.as_ref().is_some_and(|p| !p.is_match(s)) {
                    return Err(fail(
                        n,
                        format!("argument '{n}' does not match its pattern"),
                    ));
                }
                match self.ty {
                    ArgType::Path => self.check_path(s, ctx).map(ArgValue::Path),
                    ArgType::Url => self.check_url(s),
                    _ => Ok(ArgValue::Str(s.to_string())),
                }
            }
        }
    }

    fn check_path(&self, s: &str, ctx: &Context) -> Result<PathBuf, ArgError> {
        let n = &self.name;
        if s.is_empty() {
            return Err(misfit(n, format!("argument '{n}' is an empty path")));
        }
        let p = Path::new(s);
        let abs = if p.is_absolute() {
            normalize(p)
        } else if let Some(base) = self.base.as_ref().and_then(|b| root(b, ctx)) {
            normalize(&base.join(p))
        } else {
            return Err(misfit(
                n,
                format!("argument '{n}' is a relative path and has no base"),
            ));
        };
        let resolved = resolve(&abs);
        if !self.within.is_empty()
            && !self
                .within
                .iter()
                .filter_map(|r| root(r, ctx))
                .any(|root| resolved.starts_with(root))
        {
            return Err(fail(
                n,
                format!("argument '{n}' resolves outside the allowed directories"),
            ));
        }
        Ok(resolved)
    }

    fn check_url(&self, s: &str) -> Result<ArgValue, ArgError> {
        let n = &self.name;
        let u = parse_url(s)
            .map_err(|why| misfit(n, format!("argument '{n}' is not an acceptable url: {why}")))?;
        if !self.schemes.is_empty() && !self.schemes.contains(&u.scheme) {
            return Err(fail(
                n,
                format!(
                    "argument '{n}' uses scheme '{}', which is not allowed",
                    u.scheme
                ),
            ));
        }
        if !self.hosts.is_empty() && !self.hosts.iter().any(|h| host_matches(h, &u.host)) {
            return Err(fail(
                n,
                format!("argument '{n}' names a host that is not allowed"),
            ));
        }
        // The host's own credentials: only a policy that names the address may send a call.
        let bare = u.host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse().is_ok_and(crate::policy::addr::is_metadata) && !self.hosts.contains(&u.host)
        {
            return Err(fail(
                n,
                format!(
                    "argument '{n}' names a cloud metadata address, a destination only where \
                     its hosts name it"
                ),
            ));
        }
        Ok(ArgValue::Url {
            raw: s.to_string(),
            host: u.host,
            port: u.port,
        })
    }
}

/// `*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`.
pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host.ends_with(suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        None => pattern == host,
    }
}

pub(crate) use crate::sandbox::resolve::normalize;

/// Resolves symlinks in the longest existing prefix of an absolute, normalised path and
/// appends the rest, which does not exist (yet): a write target may be created.
pub(crate) fn resolve(p: &Path) -> PathBuf {
    let mut prefix = p.to_path_buf();
    let mut tail = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            let mut out = real;
            for c in tail.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (
            prefix.file_name().map(|f| f.to_os_string()),
            prefix.parent(),
        ) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                prefix = parent.to_path_buf();
            }
            // "/" itself cannot be canonicalized: nothing exists, keep the lexical path.
            _ => return p.to_path_buf(),
        }
    }
}

/// What [`parse_url`] takes from a url: all a check or a connect effect needs.
#[derive(Debug, PartialEq)]
pub(crate) struct Url {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

/// A deliberately narrow URL reader: `scheme://host[:port][/path][?query][#frag]`. It refuses
/// what parsers disagree on (user info, backslashes, whitespace, percent-encoded or empty
/// hosts) rather than guess which host a server would reach.
pub(crate) fn parse_url(s: &str) -> Result<Url, &'static str> {
    if s.bytes().any(|c| c <= b' ' || c == b'\\' || c == 0x7f) {
        return Err("contains whitespace, control characters or backslashes");
    }
    let (scheme, rest) = s.split_once("://").ok_or("no scheme")?;
    if scheme.is_empty()
        || !scheme.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'+' || c == b'-' || c == b'.'
        })
    {
        return Err("bad scheme");
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return Err("user info is not allowed");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("unclosed [")?;
        h.parse::<std::net::Ipv6Addr>()
            .map_err(|_| "bad IPv6 literal")?;
        (h.to_string(), after.strip_prefix(':'))
    } else {
        let (h, p) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if h.is_empty()
            || !h
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
        {
            return Err("bad host");
        }
        (h.trim_end_matches('.').to_ascii_lowercase(), p)
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or("bad port")?,
        None => match scheme {
            "https" => 443,
            "http" => 80,
            _ => return Err("no default port for this scheme; give one"),
        },
    };
    Ok(Url {
        scheme: scheme.to_string(),
        host,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::template::Ctx;

    fn spec(ty: ArgType) -> ArgSpec {
        ArgSpec {
            name: "a".into(),
            ty,
            required: true,
            within: vec![],
            base: None,
            pattern: None,
            values: vec![],
            max_len: None,
            hosts: vec![],
            schemes: vec![],
            min: None,
            max: None,
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("https://Example.com/x").unwrap(),
            Url {
                scheme: "https".into(),
                host: "example.com".into(),
                port: 443
            }
        );
        assert_eq!(parse_url("http://[::1]:8080").unwrap().port, 8080);
        assert!(parse_url("https://allowed.com@evil.com/").is_err());
        assert!(parse_url("https://evil.com\\@allowed.com").is_err());
        assert!(parse_url("https://%65vil.com").is_err());
        assert!(parse_url("ftp://x.com").is_err());
        assert!(parse_url("https://x.com:0").is_err());
        assert!(host_matches("*.github.com", "api.github.com"));
        assert!(!host_matches("*.github.com", "github.com"));
        assert!(!host_matches("*.github.com", "evilgithub.com"));
    }

    #[test]
    fn paths_resolve_and_stay_within() {
        let root = std::env::temp_dir().join(format!("guard-args-{}", std::process::id()));
        let inside = root.join("ws");
        std::fs::create_dir_all(&inside).unwrap();
        let outside = root.join("secret");
        std::fs::create_dir_all(&outside).unwrap();
        let link = inside.join("escape");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let inside = std::fs::canonicalize(&inside).unwrap();
        let mut s = spec(ArgType::Path);
        s.within = vec![Elem::Lit(inside.clone())];
        s.base = Some(Elem::Lit(inside.clone()));
        let none = Context::default();
        assert_eq!(
            s.check(&Json::from("new/file.txt"), &none).unwrap(),
            ArgValue::Path(inside.join("new/file.txt"))
        );
        assert!(s.check(&Json::from("../secret/x"), &none).is_err());
        assert!(
            s.check(&Json::from("escape/x"), &none).is_err(),
            "symlink out of the root"
        );
        assert!(s.check(&Json::from("/etc/passwd"), &none).is_err());
        // Roots of the call's context: relative to its cwd, within its workspace.
        let sub = inside.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        s.within = vec![Elem::Ctx(Ctx::Workspace, PathBuf::new())];
        s.base = Some(Elem::Ctx(Ctx::Cwd, PathBuf::new()));
        let ctx = Context {
            workspace: Some(&inside),
            cwd: Some(&sub),
        };
        assert_eq!(
            s.check(&Json::from("f"), &ctx).unwrap(),
            ArgValue::Path(sub.join("f"))
        );
        assert!(s.check(&Json::from("../../secret/x"), &ctx).is_err());
        assert!(s.check(&Json::from("f"), &none).is_err(), "no context");
        s.base = None;
        assert!(s.check(&Json::from("relative"), &none).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn types_and_bounds() {
        let none = &Context::default();
        let mut i = spec(ArgType::Integer);
        i.min = Some(1);
        i.max = Some(10);
        assert_eq!(i.check(&Json::from(3), none).unwrap(), ArgValue::Int(3));
        assert!(i.check(&Json::from(11), none).is_err());
        assert!(i.check(&Json::from("3"), none).is_err());
        let mut e = spec(ArgType::Enum);
        e.values = vec!["a".into()];
        assert!(e.check(&Json::from("b"), none).is_err());
        let mut p = spec(ArgType::String);
        p.pattern = Some(Regex::new("^(?:[a-z]+)$").unwrap());
        p.max_len = Some(4);
        assert!(p.check(&Json::from("abc"), none).is_ok());
        assert!(p.check(&Json::from("abcde"), none).is_err());
        assert!(p.check(&Json::from("ab1"), none).is_err());
        let specs = vec![spec(ArgType::String)];
        let mut m = serde_json::Map::new();
        assert!(check(&specs, &m, none).is_err(), "missing");
        m.insert("a".into(), Json::from("x\0y"));
        assert!(check(&specs, &m, none).is_err(), "NUL");
        m.insert("a".into(), Json::from("x"));
        m.insert("b".into(), Json::from("x"));
        assert_eq!(check(&specs, &m, none).unwrap_err().arg, "b", "extra");
    }
}
